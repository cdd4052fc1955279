"""ActuatedJointsPIDC's completion of the passive joints (controllers/pidc_adapters.py) and its compiled Newton
iteration (controllers/_passive_kernels.py): the QR solve against the truncated SVD it replaces, the rank test's
bound (the kernel never keeps a J_p the SVD would truncate), and the completed state against an independent
SVD Newton from ClosureSet on the series-parallel arm (a planar point loop: J_p 3×2 with an empty row) and the
Delta robot (two weld loops, J_p 12×12)."""

from __future__ import annotations

import numpy as np
import pytest

from cmstack.controllers import pidc_adapters
from cmstack.controllers._passive_kernels import CONVERGED, FALLBACK, STEPPED, layout, passive_step, prepare
from cmstack.controllers.pidc import PIDC
from cmstack.controllers.pidc_adapters import ActuatedJointsPIDC
from cmstack.models.errors import InfeasibleError
from cmstack.models.loops import ClosureSet
from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config
from cmstack.scenarios.series_parallel import build_pidc, closed_chain_robot

RTOL = 1e-10


def _kernel(phi, J, pas, act, q, va, tol=1e-14, rtol=RTOL):
    m, p, a = J.shape[0], pas.size, act.size
    q, v, G = q.copy(), np.zeros(J.shape[1]), np.full((p, a), np.nan)
    ni, nw = layout(m, p, a)
    ints = np.zeros(ni, dtype=np.int64)
    ints[:p], ints[p : p + a] = pas, act
    st = passive_step(
        phi, J, q, v, va, G, np.zeros((m, max(p, 1))), ints, np.array([tol, rtol]), np.zeros(nw)
    )
    return st, q, v, G


def _svd_pinv(X, rtol=RTOL):
    return np.linalg.pinv(X, rcond=rtol)


@pytest.mark.parametrize(
    "m,p,a,zero_row", [(3, 2, 3, True), (12, 12, 3, False), (6, 3, 2, False), (5, 1, 4, True)]
)
def test_kernel_step_and_rates_equal_the_svd_pseudo_inverse(m, p, a, zero_row):
    rng = np.random.default_rng(m * 100 + p)
    n = p + a
    pas = rng.permutation(n)[:p].astype(np.int64)
    act = np.array([j for j in range(n) if j not in pas], dtype=np.int64)
    for _ in range(20):
        J = rng.normal(size=(m, n))
        if zero_row:
            J[m // 2] = 0.0  # a planar loop's out-of-plane row
        q, va = rng.normal(size=n), rng.normal(size=a)
        phi = rng.normal(size=m) * 1e-3
        st, q1, v1, _ = _kernel(phi, J, pas, act, q, va)
        assert st == STEPPED
        ref = q.copy()
        ref[pas] -= _svd_pinv(J[:, pas]) @ phi
        assert np.allclose(q1, ref, rtol=0, atol=1e-12 * (1 + np.abs(ref).max()))
        st, q2, v2, G = _kernel(phi * 1e-12, J, pas, act, q, va)  # |φ| ≤ tol: the rates
        assert st == CONVERGED and np.array_equal(q2, q)
        Gref = -_svd_pinv(J[:, pas]) @ J[:, act]
        assert np.allclose(G, Gref, rtol=0, atol=1e-11 * (1 + np.abs(Gref).max()))
        assert np.allclose(v2[pas], Gref @ va, rtol=0, atol=1e-11 * (1 + np.abs(Gref @ va).max()))
        assert np.all(v2[act] == 0.0)  # the caller writes v_a


def test_kernel_falls_back_where_the_svd_would_truncate_and_on_non_finite_input():
    rng = np.random.default_rng(3)
    pas, act = np.array([0, 1], dtype=np.int64), np.array([2], dtype=np.int64)
    J = rng.normal(size=(3, 3))
    J[:, 1] = 2.0 * J[:, 0]  # J_p of rank 1
    q, va = rng.normal(size=3), rng.normal(size=1)
    for phi in (np.full(3, 1e-3), np.zeros(3)):
        st, q1, v1, _ = _kernel(phi, J, pas, act, q, va)
        assert st == FALLBACK and np.array_equal(q1, q) and np.all(v1 == 0.0)  # nothing written
    U, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    V, _ = np.linalg.qr(rng.normal(size=(2, 2)))
    J[:, :2] = (
        U[:, :2] @ np.diag([1.0, 2e-10]) @ V.T
    )  # σ₂/σ₁ = 2e-10: kept by the SVD, too close for the kernel
    assert _kernel(np.full(3, 1e-3), J, pas, act, q, va)[0] == FALLBACK
    Jn = rng.normal(size=(3, 3))
    for bad in ((np.array([np.nan, 0, 0]), Jn), (np.full(3, 1e-3), np.where(np.eye(3) > 0, np.inf, Jn))):
        assert _kernel(*bad, pas, act, q, va)[0] == FALLBACK
    assert (
        _kernel(
            np.full(2, 1e-3),
            rng.normal(size=(2, 4)),
            np.arange(3, dtype=np.int64),
            np.array([3], dtype=np.int64),
            np.zeros(4),
            va,
        )[0]
        == FALLBACK
    )  # m < p: never full column rank


def test_prepare_writes_the_start_and_refuses_non_finite_input():
    rng = np.random.default_rng(2)
    pas, act = np.array([1, 3], dtype=np.int64), np.array([0, 2, 4], dtype=np.int64)
    ints = np.zeros(layout(3, 2, 3)[0], dtype=np.int64)
    ints[:2], ints[2:5] = pas, act
    q_prev, qa, qa_prev, va, G = (
        rng.normal(size=5),
        rng.normal(size=3),
        rng.normal(size=3),
        rng.normal(size=3),
        rng.normal(size=(2, 3)),
    )
    for predict in (False, True):
        q, v = np.full(5, np.nan), np.full(5, np.nan)
        assert prepare(qa, va, q_prev, qa_prev, G, ints, predict, q, v)
        ref = q_prev.copy()
        ref[act] = qa
        if predict:
            ref[pas] += G @ (qa - qa_prev)
        assert (
            np.allclose(q, ref, rtol=0, atol=1e-15) and np.array_equal(v[act], va) and np.all(v[pas] == 0.0)
        )
    for bad in ((np.array([0.0, np.inf, 0.0]), va), (qa, np.array([np.nan, 0.0, 0.0]))):
        assert not prepare(*bad, q_prev, qa_prev, G, ints, True, np.zeros(5), np.zeros(5))
    ctl = build_pidc(default_config("series_parallel"), lambda t: (np.zeros(3), np.zeros(3), np.zeros(3)))
    with pytest.raises(Exception, match="finite positions and rates"):
        ctl.complete(np.array([0.0, np.nan, 0.1]), np.zeros(3))
    with pytest.raises(Exception, match="finite positions and rates"):
        ctl.complete(np.zeros(2), np.zeros(3))


def test_kernel_rank_test_is_conservative():
    """Whenever the kernel keeps J_p (no fallback), the SVD keeps every singular value (σ_p > rtol σ₁): on
    matrices of every conditioning around the threshold, with a large rtol so both outcomes occur."""
    rng = np.random.default_rng(11)
    kept = dropped = 0
    for trial in range(3000):
        m, p = rng.integers(2, 7), 0
        p = int(rng.integers(1, m + 1))
        U, _ = np.linalg.qr(rng.normal(size=(m, m)))
        V, _ = np.linalg.qr(rng.normal(size=(p, p)))
        s = np.sort(10.0 ** rng.uniform(-8, 0, size=p))[::-1]
        Jp = U[:, :p] @ np.diag(s) @ V.T
        J = np.hstack([Jp, rng.normal(size=(m, 1))])
        pas, act = np.arange(p, dtype=np.int64), np.array([p], dtype=np.int64)
        rtol = 1e-4
        st = _kernel(np.full(m, 1.0), J, pas, act, np.zeros(p + 1), np.ones(1), rtol=rtol)[0]
        sv = np.linalg.svd(Jp, compute_uv=False)
        if st == STEPPED:
            kept += 1
            assert sv[-1] > rtol * sv[0], (trial, sv)
        else:
            dropped += 1
    assert kept > 300 and dropped > 300, (kept, dropped)


def _reference_completion(robot, q_prev, qa, va, tol=1e-14):
    """The completion by the SVD Newton of ``models.loops.assemble`` from the previous solution (ClosureSet's
    own pass), written independently of the adapter: (q, v)."""
    cs = ClosureSet(robot.loops)
    act = [robot.joint_index(n) for n in robot.actuated_joints]
    pas = [robot.joint_index(n) for n in robot.passive_joints]
    q = q_prev.copy()
    q[act] = qa
    for _ in range(50):
        phi = cs.phi(q)
        if np.max(np.abs(phi)) <= tol:
            break
        q[pas] -= _svd_pinv(cs.jacobian(q)[:, pas]) @ phi
    J = cs.jacobian(q)
    v = np.zeros(robot.nv)
    v[act] = va
    v[pas] = -_svd_pinv(J[:, pas]) @ (J[:, act] @ va)
    return q, v


def _adapter(robot):
    k = len(robot.actuated_joints)
    pidc = PIDC(
        robot, None, list(robot.actuated_joints), lambda t: (np.zeros(k), np.zeros(k), np.zeros(k)), 10.0, 5.0
    )
    return ActuatedJointsPIDC(pidc)


def _series_parallel_robot():
    return closed_chain_robot(default_config("series_parallel"))


@pytest.mark.parametrize("which", ["series_parallel", "delta"])
def test_completion_equals_the_svd_newton_and_converges_in_one_step_after_the_prediction(which):
    robot = _series_parallel_robot() if which == "series_parallel" else Robot.from_mjcf("mjcf/delta.xml")
    ctl = _adapter(robot)
    act = [robot.joint_index(n) for n in robot.actuated_joints]
    qa0 = robot.q_initial[act]
    cs = ClosureSet(robot.loops)
    q_ref = robot.q_initial.copy()
    amp = np.array([0.3, 0.2, 0.05]) if which == "series_parallel" else np.full(3, 0.1)
    w = np.array([1.0, 1.7, 2.3])
    dt = 1e-3
    for k in range(300):
        t = k * dt
        qa = qa0 + amp * np.sin(w * t)
        va = amp * w * np.cos(w * t)
        q, v = ctl.complete(qa, va)
        q_ref, v_ref = _reference_completion(robot, q_ref, qa, va)
        assert np.max(np.abs(cs.phi(q))) <= ctl.tol  # the same convergence test
        assert np.allclose(q, q_ref, rtol=0, atol=1e-13), (k, q - q_ref)
        assert np.allclose(v, v_ref, rtol=0, atol=1e-12 * (1 + np.abs(v_ref).max())), (k, v - v_ref)
        assert np.max(np.abs(cs.jacobian(q) @ v)) <= 1e-12 * (1 + np.abs(v).max())  # rates on the manifold
        if k > 0:
            assert ctl.passes <= 2, (k, ctl.passes)  # predicted, one Newton step, the test that it converged


def test_lean_pass_rows_equal_the_rows_from_pinocchios_frames():
    """The adapter's lean pass (its ClosureSet: frames from data.J in the kernel) against the rows from Pinocchio's
    frame placements and Jacobians (``closure_rows`` on a ``Robot.update``'s frames), off the manifold."""
    from cmstack.models.loops import closure_rows

    for robot in (
        _series_parallel_robot(),
        Robot.from_mjcf("mjcf/delta.xml"),
        Robot.from_mjcf("mjcf/slider_crank.xml"),
    ):
        ctl = _adapter(robot)
        cs = ClosureSet(robot.loops)
        rng = np.random.default_rng(5)
        for _ in range(5):
            q = robot.q_initial + 0.1 * rng.normal(size=robot.nq)
            phi, J = ctl._phi_jacobian(q)
            kin = robot.update(q, np.zeros(robot.nv))
            ref = [
                closure_rows(
                    c.kind,
                    *(x for f in (kin.frame(c.fa), kin.frame(c.fb)) for x in (f.R, f.p, f.J, f.acc)),
                    kin.v,
                )
                for c in cs.closures
            ]
            assert np.allclose(phi, np.concatenate([r[0] for r in ref]), rtol=0, atol=1e-14)
            assert np.allclose(J, np.vstack([r[1] for r in ref]), rtol=0, atol=1e-14)
            assert np.abs(phi).max() > 1e-4


def test_svd_fallback_gives_the_same_state(monkeypatch):
    """With the kernel always declining (as near a singular J_p), every iteration takes the SVD path: the same
    completed states as the kernel's."""
    cfg = default_config("series_parallel")
    traj = lambda t: (np.array([0.1, 0.4, 0.1]), np.zeros(3), np.zeros(3))  # noqa: E731
    fast, slow = build_pidc(cfg, traj), build_pidc(cfg, traj)
    states = [
        (np.array([0.1 + 0.01 * k, 0.4 - 0.005 * k, 0.1 + 0.001 * k]), np.array([10.0, -5.0, 1.0]))
        for k in range(20)
    ]
    out_fast = [fast.complete(qa, va) for qa, va in states]
    monkeypatch.setattr(pidc_adapters, "passive_step", lambda *a: FALLBACK)
    out_slow = [slow.complete(qa, va) for qa, va in states]
    for (q1, v1), (q2, v2) in zip(out_fast, out_slow):
        assert np.allclose(q1, q2, rtol=0, atol=1e-14) and np.allclose(v1, v2, rtol=0, atol=1e-12)
    assert slow.passes >= 2


def test_unreachable_actuated_state_names_the_loop():
    ctl = build_pidc(default_config("series_parallel"), lambda t: (np.zeros(3), np.zeros(3), np.zeros(3)))
    ctl.complete(np.array([0.0, 0.4, 0.1]), np.zeros(3))
    with pytest.raises(InfeasibleError, match="triangle"):
        ctl.complete(np.array([0.0, 0.4, 5.0]), np.zeros(3))  # the piston far longer than the triangle closes
