"""controllers/_contact_kernels.py: each kernel against its NumPy formulation, and the compiled contact step
(``ContactUKController``: rows from one Pinocchio pass, the algebra compiled) against the law's NumPy path
(``compiled=False``: every row from a ``Kinematics``, four SVDs) on the five-bar quadruped: standing, moving, with a
foot in the air, and with the cone QP."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from _quadruped import stance_levels

from cmstack.controllers import _contact_kernels as K
from cmstack.controllers.contact_uk import ContactUKController
from cmstack.models.robot import Robot


def test_jacobi_columns_is_an_svd():
    rng = np.random.default_rng(3)
    shapes = [(6, 4), (3, 10), (24, 22), (5, 5)]
    for p, q in shapes:
        for rank in (min(p, q), min(p, q) - 2):
            A = rng.normal(size=(p, rank)) @ rng.normal(size=(rank, q)) * 10.0 ** rng.uniform(-3, 3)
            X, V, s = A.copy(), np.empty((q, q)), np.empty(q)
            K.jacobi_columns(X, V, s)
            np.testing.assert_allclose(V.T @ V, np.eye(q), atol=1e-13)
            np.testing.assert_allclose(X @ V.T, A, atol=1e-13 * np.abs(A).max())  # X₀ = X Vᵀ
            G = X.T @ X  # orthogonal columns
            np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-13 * np.abs(A).max() ** 2)
            ref = np.linalg.svd(A, compute_uv=False)
            np.testing.assert_allclose(np.sort(s)[::-1][: ref.size], ref, atol=1e-13 * ref[0])


def _stance_like(rng, m, n):
    """An m × n matrix like J_h: rank n − 4 with one singular value 1e-7 of the largest, 3 exactly zero."""
    U, _ = np.linalg.qr(rng.normal(size=(m, m)))
    V, _ = np.linalg.qr(rng.normal(size=(n, n)))
    k = n - 4
    s = np.r_[np.geomspace(3.0, 1e-2, k), 1e-7 * 3.0]
    return (U[:, : k + 1] * s) @ V[:, : k + 1].T


@pytest.mark.parametrize("m, n", [(24, 22), (21, 22)])
def test_svd_jacobi_warm_started_is_lapacks(m, n):
    """Consecutive matrices (a small drift, as from one control step to the next): the truncated matrix (σ ≤ 1e-6 σ₁
    dropped), the min-norm solution and the null space's projector equal LAPACK's to round-off."""
    rng = np.random.default_rng(5)
    A = _stance_like(rng, m, n)
    dA = _stance_like(rng, m, n) * 1e-3
    Vw = np.eye(n)
    Uh, sh, Vth = np.empty((m, n)), np.empty(n), np.empty((n, n))
    for k in range(6):
        B = A + k * dA
        sweeps = K.svd_jacobi(B, Vw, Uh, sh, Vth, k % 2 == 0)  # re-orthonormalised every other call
        assert sweeps < K.JACOBI_SWEEPS
        U, s, Vt = np.linalg.svd(B)
        np.testing.assert_allclose(sh[: s.size], s, atol=1e-14 * s[0])
        assert np.all(np.diff(sh) <= 0.0)
        kr = int((s > 1e-6 * s[0]).sum())
        assert int((sh > 1e-6 * sh[0]).sum()) == kr
        trunc = (U[:, :kr] * s[:kr]) @ Vt[:kr]
        np.testing.assert_allclose((Uh[:, :kr] * sh[:kr]) @ Vth[:kr], trunc, atol=1e-13 * s[0])
        b = rng.normal(size=m)
        x = Vt[:kr].T @ ((U[:, :kr].T @ b) / s[:kr])
        np.testing.assert_allclose(
            Vth[:kr].T @ ((Uh[:, :kr].T @ b) / sh[:kr]), x, atol=1e-12 * np.abs(x).max()
        )
        np.testing.assert_allclose(Vth[kr:].T @ Vth[kr:], Vt[kr:].T @ Vt[kr:], atol=1e-13)
        np.testing.assert_allclose(Vw @ Vw.T, np.eye(n), atol=1e-14)


def test_null_rows_is_an_orthonormal_basis_of_the_null_space():
    """G of full row rank (well- and ill-conditioned, the biped's 18 x 36 among the shapes): the columns are
    orthonormal, G N = 0 to round-off, and they span the SVD's null space (the same projector)."""
    rng = np.random.default_rng(5)
    for p, m in ((18, 36), (8, 24), (1, 3), (0, 4), (5, 6)):
        for cond in (1.0, 1e6):
            U, _ = np.linalg.qr(rng.normal(size=(max(p, 1), max(p, 1))))
            W, _ = np.linalg.qr(rng.normal(size=(m, m)))
            G = ((U[:p, :p] * np.geomspace(1.0, 1.0 / cond, p)) @ W[:p]) if p else np.zeros((0, m))
            N = K.null_rows(G)
            assert N.shape == (m, m - p)
            np.testing.assert_allclose(N.T @ N, np.eye(m - p), atol=1e-14)
            assert np.abs(G @ N).max(initial=0.0) <= 1e-14
            Vt = np.linalg.svd(G)[2] if p else np.eye(m)
            np.testing.assert_allclose(N @ N.T, Vt[p:].T @ Vt[p:], atol=1e-13 * cond)


def test_cholesky_certificate_counts_the_singular_values():
    rng = np.random.default_rng(4)
    U, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    W, _ = np.linalg.qr(rng.normal(size=(9, 9)))
    sig = np.array([3.0, 1.0, 0.5, 0.1, 1e-3, 2e-5])
    G = (U * sig) @ W[:6]
    for tol, full in ((1e-5, True), (3e-5, False), (0.2, False)):
        S = G @ G.T
        assert K.cholesky_in_place(S, tol * tol) == full  # all σ > tol
    S = G @ G.T
    assert K.cholesky_in_place(S, 0.0)
    b = rng.normal(size=6)
    x = np.empty(6)
    K.cholesky_solve(S, b, x)
    S0 = G @ G.T  # backward stable: a small residual against ‖S‖ ‖x‖ (S is ill-conditioned, 2e10)
    assert np.linalg.norm(S0 @ x - b) <= 1e-13 * np.linalg.norm(S0) * np.linalg.norm(x)


@pytest.fixture(scope="module")
def robot():
    return Robot.from_mjcf("mjcf/quadruped_five_bar.xml")


def _pair(robot, mu, swing=None, dx=0.01):
    """(compiled controller, NumPy controller) with the legged levels, the same contacts."""
    contacts, levels = stance_levels(robot, mu, np.array([dx, 0.0, 0.01]), swing)
    return tuple(ContactUKController(robot, contacts, levels, compiled=c) for c in (True, False))


def _states(robot, n, seed):
    """q_initial, then states near it: the base moved a little (x, z, pitch) with the legs following the feet
    (one Gauss–Newton pass on the loops and stance is not needed: the controllers see the same state), random
    velocities."""
    rng = np.random.default_rng(seed)
    yield robot.q_initial.copy(), np.zeros(robot.nv)
    for _ in range(n):
        dq = np.zeros(robot.nv)
        dq[[0, 2, 4]] = rng.normal(scale=[2e-3, 2e-3, 5e-3])
        v = np.zeros(robot.nv)
        v[[0, 2, 4]] = rng.normal(scale=[0.05, 0.05, 0.1])
        yield pin.integrate(robot.model, robot.q_initial, dq), v


@pytest.mark.parametrize("mu, swing", [(1.0, None), (1.0, "fl_foot"), (0.5, None)])
def test_compiled_step_equals_numpy_path(robot, mu, swing):
    fast, ref = _pair(robot, mu, swing)
    assert fast._plan is not None and ref._plan is None
    qp_steps = 0
    for q, v in _states(robot, 4, 11):
        tau = fast(0.1, q, v)
        tau_ref = ref(0.1, q, v)
        a, b = fast.info, ref.info
        assert a.status == b.status and a.cone_qp == b.cone_qp
        qp_steps += a.cone_qp
        # the QP solves the same problem in another basis of null(G): equal to ProxSuite's tolerance
        tol = 1e-6 if a.cone_qp else 1e-11
        assert np.abs(tau - tau_ref).max() <= tol * np.abs(tau_ref).max()
        assert np.all(tau[fast._P] == 0.0)
        assert set(a.forces) == set(b.forces) and set(a.cone_margin) == set(b.cone_margin)
        for name in b.forces:
            assert abs(a.cone_margin[name] - b.cone_margin[name]) <= 1e-6 * max(
                1.0, np.abs(b.forces[name]).max()
            )
        np.testing.assert_allclose(a.level_residuals, b.level_residuals, atol=1e-9)
        assert a.passive_residual <= 1e-9 * max(1.0, np.abs(tau).max())
    if mu < 1.0:
        assert qp_steps  # the QP path was exercised


def test_kin_of_the_compiled_step(robot):
    fast, _ = _pair(robot, 1.0)
    q, v = next(_states(robot, 0, 1))
    fast(0.0, q, v)
    kin = fast.kin  # made from the step's pass, which the robot's data still holds
    np.testing.assert_array_equal(kin.q, q)
    p = kin.frame("fl_foot").p.copy()
    ref = robot.update(q, v)
    np.testing.assert_allclose(kin.M, ref.M, atol=1e-14)
    np.testing.assert_allclose(p, ref.frame("fl_foot").p, atol=1e-15)


def test_compiled_step_survives_pickling(robot):
    """The plan's addresses into Pinocchio's data are made again after unpickling (a copy has its own data)."""
    import pickle

    fast, _ = _pair(robot, 1.0)
    q, v = list(_states(robot, 1, 2))[1]
    tau = fast(0.0, q, v)
    copy = pickle.loads(pickle.dumps(fast))
    np.testing.assert_allclose(
        copy(0.0, q, v), tau, rtol=0, atol=1e-12 * np.abs(tau).max()
    )  # (warm-started SVD)
