"""The hierarchy of a binding step compiled (issue 30 item 2): ``_qp_kernels.hierarchy_level`` (one level's
null-space basis, projected QP and shifted bounds), ``condition_eq`` and ``level_residuals`` equal their NumPy
formulations; a controller is picklable after a step solved with the limits and the copy continues it; an
InfeasibleError that a velocity limit causes names the velocity limit, not an effort limit."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _matrices import hard_matrices, spd

from cmstack.controllers._qp_kernels import (
    condition_eq,
    hierarchy_level,
    level_residuals,
    level_tail,
    null_basis,
)
from cmstack.controllers.udwadia_kalaba import GAUSS, UdwadiaKalabaController
from cmstack.models.coupling import PostureTask
from cmstack.models.errors import InfeasibleError
from cmstack.models.limits import JointPositionLimit, JointVelocityLimit
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Robot


def _null_space(A, tol):
    """The SVD null-space basis the hierarchy used before (relative rank test, as uk_levels._null_basis)."""
    A = np.asarray(A)
    if A.shape[0] == 0:
        return np.eye(A.shape[1])
    s, Vt = np.linalg.svd(A, full_matrices=True)[1:]
    r = int(np.count_nonzero(s > tol * max(1.0, s[0])))
    return Vt[r:].T


def _numpy_level(N, dx, x, B, tol, C, l, u, eps, A, b, last, M, Q, H, g):
    x = x + N @ dx if dx.size else x.copy()
    N = N @ _null_space(B, tol) if B.shape[0] else N
    margin = 1e-8 * (np.abs(l) + np.abs(u)) + 10.0 * eps
    margin = np.where(np.isfinite(margin), margin, 0.0)
    Cx = C @ x
    lo, hi = np.minimum(l - Cx, 0.0) - margin, np.maximum(u - Cx, 0.0) + margin
    if last:
        return x, N, N.T @ H @ N, N.T @ (H @ x + g), C @ N, lo, hi
    AN = A @ N
    mu = 1e-6 * max(np.trace(AN.T @ AN), 1e-12) / np.trace(M)
    Hr = AN.T @ AN + mu * (N.T @ M @ N)
    gr = N.T @ (-A.T @ (b - A @ x) + mu * (M @ x - Q))
    return x, N, Hr, gr, C @ N, lo, hi


def test_hierarchy_level_equals_the_numpy_formulation():
    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(4, 15))
        M = spd(rng, n)
        H = M + np.eye(n)
        Q, g, x = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
        nz0 = int(rng.integers(1, n + 1))
        N = np.linalg.qr(rng.normal(size=(n, n)))[0][:, :nz0].copy()
        dx = rng.normal(size=nz0) if trial % 2 else np.zeros(0)
        mb = int(rng.integers(0, nz0 + 2))
        B = rng.normal(size=(mb, nz0))
        if mb > 1 and trial % 3 == 0:
            B[-1] = 2.0 * B[0]  # rank-deficient: the rank test keeps the dependent row's direction free
        m = int(rng.integers(1, 2 * n))
        C = rng.normal(size=(m, n))
        l, u = -rng.uniform(0, 3, m), rng.uniform(0, 3, m)
        l[0], u[-1] = -np.inf, np.inf
        A, b = rng.normal(size=(3, n)), rng.normal(size=3)
        for last in (False, True):
            out = hierarchy_level(N, dx, x, B, 1e-9, C, l, u, 1e-9, A, b, last, M, Q, H, g)
            ref = _numpy_level(N, dx, x, B, 1e-9, C, l, u, 1e-9, A, b, last, M, Q, H, g)
            # the same null space in another orthonormal basis: N_out = N_ref R, R orthogonal
            assert out[1].shape == ref[1].shape
            R = ref[1].T @ out[1]
            np.testing.assert_allclose(R.T @ R, np.eye(R.shape[0]), atol=1e-10)
            np.testing.assert_allclose(out[1], ref[1] @ R, atol=1e-10)
            np.testing.assert_allclose(out[0], ref[0], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(out[2], R.T @ ref[2] @ R, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(out[3], R.T @ ref[3], rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(out[4], ref[4] @ R, rtol=1e-9, atol=1e-10)
            np.testing.assert_allclose(out[5:7], ref[5:7], rtol=1e-12, atol=1e-12)
            if not last:  # the level's rows in the new basis, for the next level's null space
                np.testing.assert_allclose(out[7], A @ out[1], rtol=1e-10, atol=1e-12)


def test_null_basis_spans_the_svd_null_space():
    """The pivoted-QR basis against the SVD one (the former hierarchy's): the same projector, orthonormal, on
    full-rank, rank-deficient (dependent rows, a zero column) and badly scaled matrices, wide and tall."""
    for _, B, _ in hard_matrices(1, 400, 16):
        N, ref = null_basis(B, 1e-9), _null_space(B, 1e-9)
        assert N.shape == ref.shape
        np.testing.assert_allclose(N @ N.T, ref @ ref.T, atol=1e-12)
        np.testing.assert_allclose(N.T @ N, np.eye(N.shape[1]), atol=1e-12)


def test_condition_eq_and_level_residuals_equal_numpy():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(5, 7)) * 10 ** rng.uniform(-2, 2, size=(5, 1))
    b = rng.normal(size=5)
    As, bs, e = np.empty((5, 7)), np.empty(5), np.empty(5)
    assert condition_eq(A, b, 1e-10, 1e-7, As, bs, e) == 0
    r = np.linalg.norm(A, axis=1)
    np.testing.assert_allclose(As, A / r[:, None], rtol=1e-15)
    np.testing.assert_allclose(bs, b / r, rtol=1e-15)
    A[2] *= 1e-14  # a vanished row is counted: the caller drops it and checks it as a constant
    assert condition_eq(A, b, 1e-10, 1e-7, As, bs, e) == 1
    x = rng.normal(size=7)
    sizes = np.array([2, 0, 3], dtype=np.int64)
    res, bn = np.empty(3), np.empty(3)
    level_residuals(A, b, x, sizes, res, bn)
    np.testing.assert_allclose(
        res, [np.linalg.norm(A[:2] @ x - b[:2]), 0.0, np.linalg.norm(A[2:] @ x - b[2:])]
    )
    np.testing.assert_allclose(bn, [np.linalg.norm(b[:2]), 0.0, np.linalg.norm(b[2:])])
    # level_tail: the same residuals, rhs = −(H x + g) − Cᵀ z, and "every level holds" exactly when each does
    R = rng.normal(size=(7, 7))
    H, g = R @ R.T, rng.normal(size=7)
    C, z = rng.normal(size=(4, 7)), np.array([0.0, 1.5, 0.0, -2.0])
    res2, bn2, rhs = np.empty(3), np.empty(3), np.empty(7)
    assert not level_tail(A, b, x, sizes, H, g, C, z, res2, bn2, rhs)
    np.testing.assert_array_equal(res2, res)
    np.testing.assert_array_equal(bn2, bn)
    np.testing.assert_allclose(rhs, -(H @ x + g) - C.T @ z, rtol=1e-13, atol=1e-13)
    Af = rng.normal(size=(5, 7))
    x_held = np.linalg.lstsq(Af, b, rcond=None)[0]  # 5 rows, 7 columns: every level holds
    assert level_tail(Af, b, x_held, sizes, H, g, C, z, res2, bn2, rhs)
    Af[4] += 1e-6  # the last level now misses by ~1e-6 |x|: not held
    assert not level_tail(Af, b, x_held, sizes, H, g, C, z, res2, bn2, rhs)


@pytest.fixture(scope="module")
def yumi():
    robot = Robot("urdf/yumi.urdf")
    q0 = np.array([0.0, -1.3, -1.0, 0.3, 0.0, 0.6, 0.0] * 2)
    return robot, q0


def test_a_controller_is_picklable_after_a_step_within_the_limits(yumi):
    """The hands held together (level 1), a posture far away pulled hard (level 2) against |v| ≤ 0.2 rad/s:
    the step is solved level by level with the limits; pickled then, the copy continues as the original
    (to the solver's tolerance)."""
    robot, q0 = yumi
    box = RigidCoupling.from_configuration(robot, "yumi_link_7_l", "yumi_link_7_r", q0, kp=100, kd=20)
    posture = PostureTask(robot, q0 + 0.4, kp=400, kd=40)
    ctrl = UdwadiaKalabaController(
        robot, levels=[[box], [posture], [GAUSS]], limits=[JointVelocityLimit(robot, dt=1e-3, v_max=0.2)]
    )
    v = np.full(14, 0.1)
    ctrl(0.0, q0, v)
    assert ctrl.info.path in ("qp", "sequential") and ctrl.info.limits_active
    assert ctrl.info.level_residuals[0] < 1e-8
    copy = pickle.loads(pickle.dumps(ctrl))
    np.testing.assert_array_equal(copy.info.tau, ctrl.info.tau)
    np.testing.assert_allclose(copy.info.Qc, ctrl.info.Qc)
    q1, v1 = q0 + 1e-3 * v, v * 1.01
    # (a fresh ProxSuite object against one set up again by init: equal to the solver's tolerance, not bit for bit)
    np.testing.assert_allclose(copy(1e-3, q1, v1), ctrl(1e-3, q1, v1), rtol=1e-9, atol=1e-9)


def test_a_velocity_limit_that_breaks_level_1_is_named(yumi):
    """A posture on every joint in level 1 at 1 rad from its target needs |v̇| ~ 400 rad/s²: with
    |v| ≤ 0.05 rad/s, Δt = 1 ms, level 1 cannot hold; the error names the level and the velocity limit (it used to
    blame effort limits the controller does not have)."""
    robot, q0 = yumi
    ctrl = UdwadiaKalabaController(
        robot,
        levels=[[PostureTask(robot, q0 + 1.0, kp=400, kd=40)], [GAUSS]],
        limits=[JointVelocityLimit(robot, dt=1e-3, v_max=0.05)],
    )
    with pytest.raises(InfeasibleError) as e:
        ctrl(0.0, q0, np.zeros(14))
    msg = str(e.value)
    assert "level 1" in msg and "within the velocity limits" in msg and "velocity on 'yumi_joint" in msg
    assert "effort" not in msg


def test_levels_1_and_2_in_one_qp_equal_the_level_by_level_solution(yumi):
    """``LevelSolver._merged_top``: level 2 solved over {A₁ v̇ = b₁} ∩ limits in one QP gives the level-by-level
    solution (``merge_top=False``) to the solver's tolerance, level 1 held, on states where the limits bind."""
    robot, q0 = yumi
    rng = np.random.default_rng(7)

    def make(merge):
        box = RigidCoupling.from_configuration(robot, "yumi_link_7_l", "yumi_link_7_r", q0, kp=100, kd=20)
        hand = PostureTask(robot, q0 + 0.3, kp=100, kd=20, joints=[f"yumi_joint_{i}_l" for i in range(1, 8)])
        posture = PostureTask(robot, q0, kp=50, kd=14)
        c = UdwadiaKalabaController(
            robot,
            levels=[[box], [hand], [posture], [GAUSS]],
            limits=[JointVelocityLimit(robot, dt=1e-3, v_max=0.2)],
            warn_free_dof=False,
        )
        c.merge_top = merge
        return c

    one, by_level = make(True), make(False)
    binding = 0
    for _ in range(8):
        q, v = q0 + 0.05 * rng.normal(size=14), 0.15 * rng.uniform(-1, 1, size=14)
        a, b = one(0.0, q, v), by_level(0.0, q, v)
        if one.info.path == "sequential":
            binding += 1
            assert one.info.level_residuals[0] < 1e-8 and by_level.info.level_residuals[0] < 1e-8
            np.testing.assert_allclose(
                one.info.level_residuals[1], by_level.info.level_residuals[1], rtol=1e-5
            )
        # (the two QPs stop within ProxSuite's tolerance of the same optimum: 7e-7 of max |τ| apart at most here)
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 * np.abs(b).max())
    assert binding >= 4


def test_a_level_no_row_of_which_binds_is_solved_without_proxsuite(yumi, monkeypatch):
    """``_qp_kernels.inactive_minimizer`` in the hierarchy: the hands held together (level 1), three joints of the
    left arm driven hard (level 2) into an upper position bound 0.02 rad away on its first joint, a posture below:
    where the bound binds in the merged top levels, the posture level's unconstrained minimizer meets every limit
    row, it is not handed to ProxSuite, and the step equals the one that hands it to ProxSuite (``level_problem``'s
    verdict forced to "not free") to the solver's tolerance, with the same give-way decisions and level 1 held."""
    import cmstack.controllers.uk_solve as uk_solve

    robot, q0 = yumi
    rng = np.random.default_rng(3)
    real = uk_solve._level_problem
    force = {"on": False}

    def level_problem(*args):
        out = real(*args)
        return (*out[:10], False, out[11]) if force["on"] else out

    monkeypatch.setattr(uk_solve, "_level_problem", level_problem)

    def make():
        box = RigidCoupling.from_configuration(robot, "yumi_link_7_l", "yumi_link_7_r", q0, kp=100, kd=20)
        hand = PostureTask(robot, q0 + 1.0, kp=400, kd=40, joints=[f"yumi_joint_{i}_l" for i in range(1, 4)])
        posture = PostureTask(robot, q0, kp=50, kd=14)
        pos = JointPositionLimit(robot, dt=1e-3, a_max=10.0)
        j = robot.joint_names.index("yumi_joint_1_l")
        q_max = pos.q_max.copy()
        q_max[list(pos.idx).index(j)] = q0[j] + 0.02
        pos.q_max = q_max
        c = UdwadiaKalabaController(
            robot, levels=[[box], [hand], [posture], [GAUSS]], limits=[pos], warn_free_dof=False
        )
        c._qp.trace = []
        return c

    free, forced = make(), make()
    skipped = 0
    for _ in range(16):
        q, v = q0 + 0.005 * rng.normal(size=14), 0.05 * rng.uniform(-1, 1, size=14)
        a = free(0.0, q, v)
        force["on"] = True
        b = forced(0.0, q, v)
        force["on"] = False
        if free.info.path != "sequential":
            continue
        n_free, n_forced = len(free._qp.trace), len(forced._qp.trace)
        assert n_free <= n_forced
        skipped += n_forced - n_free
        assert bool(free.info.gave_way) == bool(forced.info.gave_way)
        assert free.info.level_residuals[0] < 1e-8
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 * np.abs(b).max())
        free._qp.trace.clear()
        forced._qp.trace.clear()
    assert skipped >= 2
