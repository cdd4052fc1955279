"""Identities of the projection-matrix formulation ([Aghili], models/projection.py), on the slider-crank in the
paper's closed form (67)-(69) (tests/_slider_crank_reference.py) and on random matrices."""

import numpy as np
import pytest
from _slider_crank_reference import SliderCrankLoop  # the paper's closed form (67)-(69), a test oracle

from cmstack.models.errors import ConfigError, InfeasibleError, StateError
from cmstack.models.projection import (
    c_matrix,
    c_times_v,
    constraint_force,
    constraint_inertia,
    decoupling_defect,
    direct_dynamics,
    is_decoupled,
    multipliers,
    project,
    split_input,
)
from cmstack.models.robot import Robot

RNG = np.random.default_rng(4)
L = 0.5
SINGULAR = np.array([np.pi / 2, np.pi])


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/slider_crank.urdf")


def random_A(m, n, rank):
    return RNG.normal(size=(m, rank)) @ RNG.normal(size=(rank, n))


def on_manifold(th1):
    """Normal branch θ₂ = −2θ₁ of the slider-crank (φ = 0), admissible velocity direction (1, −2)."""
    return np.array([th1, -2 * th1]), np.array([1.0, -2.0])


def spd(n):
    X = RNG.normal(size=(n, n))
    return X @ X.T + n * np.eye(n)


# ------------------------------------------------------------------------------- projector
@pytest.mark.parametrize("m,n,rank", [(2, 5, 2), (3, 5, 2), (4, 4, 4), (5, 3, 3), (3, 6, 1)])
def test_projector_identities(m, n, rank):
    A = random_A(m, n, rank)
    pr = project(A)
    P = pr.P
    assert pr.rank == rank
    np.testing.assert_allclose(P, P.T, atol=1e-13)
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    np.testing.assert_allclose(P @ A.T, 0, atol=1e-11)
    assert np.linalg.matrix_rank(P, tol=1e-8) == n - rank
    # A⁺ satisfies the Moore–Penrose conditions (independent check against numpy's pinv)
    np.testing.assert_allclose(pr.A_pinv, np.linalg.pinv(A, rcond=1e-12), atol=1e-9)


def test_rank_at_and_near_singular_configuration():
    c = SliderCrankLoop(L)
    A = c.jacobian(SINGULAR)
    assert np.abs(A).max() < 1e-15
    pr = project(A)
    assert pr.rank == 0
    np.testing.assert_allclose(pr.P, np.eye(2))  # (70): the constraint is removed
    for d in (1e-3, 1e-6):
        q, _ = on_manifold(np.pi / 2 - d)
        A = c.jacobian(q)
        pr = project(A, tol=1e-9)
        assert pr.rank == 1
        # P is the projector onto N(A): direction (1, −2) on the normal branch, whatever the distance
        np.testing.assert_allclose(pr.P, np.outer([1, -2], [1, -2]) / 5, atol=1e-9)
    # below the tolerance the singular value is dropped
    q, _ = on_manifold(np.pi / 2 - 1e-12)
    assert project(c.jacobian(q), tol=1e-9).rank == 0
    assert project(c.jacobian(q), tol=0.0).rank == 1


def test_bad_input_is_reported():
    with pytest.raises(StateError):
        project(np.array([[np.nan, 1.0]]))
    with pytest.raises(ConfigError):
        project(np.eye(2), tol=-1)
    with pytest.raises(ConfigError):
        constraint_inertia(np.eye(2), np.eye(2), kind="27")


# ------------------------------------------------------------------------------- C = −A⁺Ȧ
def test_slider_crank_jacobian_and_jdot_by_finite_differences():
    c = SliderCrankLoop(L)
    for _ in range(5):
        q, v = RNG.uniform(-np.pi, np.pi, 2), RNG.normal(size=2)
        eps = 1e-6
        J_fd = np.array([(c.phi(q + eps * e) - c.phi(q - eps * e)) / (2 * eps) for e in np.eye(2)]).T
        np.testing.assert_allclose(c.jacobian(q), J_fd, atol=1e-8)
        Adot = (c.jacobian(q + eps * v) - c.jacobian(q - eps * v)) / (2 * eps)
        np.testing.assert_allclose(c.jdot_v(q, v), Adot @ v, atol=1e-7)


@pytest.mark.parametrize("th1", [0.3, 1.2, np.pi / 2 - 1e-3, 2.5, -1.0])
def test_C_against_finite_differences_of_P(th1):
    """Along an admissible motion, P q̇ = q̇ ⇒ C q̇ = Ṗ q̇  (differentiate (12)), Ṗ by central FD of
    P along the exact trajectory of the normal branch q(t) = (θ₁ + t, −2θ₁ − 2t)."""
    c = SliderCrankLoop(L)
    q, v = on_manifold(th1)
    v = 1.7 * v
    pr = project(c.jacobian(q))
    Cv = c_times_v(pr, c.jdot_v(q, v))
    eps = 1e-6
    Pdot = (project(c.jacobian(q + eps * v)).P - project(c.jacobian(q - eps * v)).P) / (2 * eps)
    np.testing.assert_allclose(Cv, Pdot @ v, atol=1e-6 * max(1.0, np.abs(Cv).max()))
    # matrix form agrees with the vector form
    Adot = (c.jacobian(q + eps * v) - c.jacobian(q - eps * v)) / (2 * eps)
    np.testing.assert_allclose(c_matrix(pr, Adot) @ v, Cv, atol=1e-6)


def test_C_matches_acceleration_constraint_random():
    """(I − P) q̈ = C q̇ for any q̈ with A q̈ = −Ȧq̇ (random full-rank and rank-deficient A)."""
    for rank in (3, 2):
        A = random_A(3, 6, rank)
        Adot = random_A(3, 6, rank) if rank == 3 else A @ RNG.normal(size=(6, 6))
        pr = project(A)
        v = pr.P @ RNG.normal(size=6)
        qdd = -np.linalg.lstsq(A, Adot @ v, rcond=None)[0] + pr.P @ RNG.normal(size=6)
        if np.linalg.norm(A @ qdd + Adot @ v) > 1e-9:
            continue  # inconsistent right-hand side cannot happen for a real constraint
        np.testing.assert_allclose(pr.Q @ qdd, c_matrix(pr, Adot) @ v, atol=1e-9)


# ------------------------------------------------------------------------------- M_c
def states(robot, k=12):
    c = SliderCrankLoop(L)
    out = [SINGULAR.copy(), np.array([-np.pi / 2, np.pi]), on_manifold(np.pi / 2 - 1e-7)[0]]
    out += [RNG.uniform(-np.pi, np.pi, 2) for _ in range(k)]
    return [(q, robot.update(q, RNG.normal(size=2)).M, project(c.jacobian(q))) for q in out]


def test_constraint_inertias_definite_on_random_and_singular_states(robot):
    for q, M, pr in states(robot):
        for kind in ("23", "28"):
            Mc = constraint_inertia(M, pr.P, kind)
            sym = 0.5 * (Mc + Mc.T)
            assert np.linalg.eigvalsh(sym).min() > 0, (kind, q)
        np.testing.assert_allclose(
            constraint_inertia(M, pr.P, "28"), constraint_inertia(M, pr.P, "28").T, atol=1e-14
        )
        S = pr.P @ M - M @ pr.P
        np.testing.assert_allclose(S, -S.T, atol=1e-14)  # (24)
        Mc29 = constraint_inertia(M, pr.P, "29")
        assert abs(np.linalg.det(Mc29)) > 1e-8 * np.linalg.det(M)


def test_constraint_inertias_random_high_dimension():
    for rank in (0, 2, 4):
        n = 7
        M = spd(n)
        pr = project(random_A(4, n, rank) if rank else np.zeros((4, n)))
        for kind in ("23", "28"):
            Mc = constraint_inertia(M, pr.P, kind)
            assert np.linalg.eigvalsh(0.5 * (Mc + Mc.T)).min() > 0
        assert np.linalg.matrix_rank(constraint_inertia(M, pr.P, "29")) == n


# ------------------------------------------------------------------------------- (22) vs KKT
def kkt(M, h, tau, A, jdv):
    n, m = M.shape[0], A.shape[0]
    K = np.block([[M, -A.T], [A, np.zeros((m, m))]])
    sol = np.linalg.solve(K, np.concatenate([tau - h, -jdv]))
    return sol[:n], sol[n:]


@pytest.mark.parametrize("kind", ["23", "28", "29"])
def test_direct_dynamics_equals_kkt_slider_crank(robot, kind):
    c = SliderCrankLoop(L)
    for th1 in (0.2, 1.0, 2.0, -2.8, np.pi / 2 - 1e-2):
        q, dirv = on_manifold(th1)
        v = RNG.normal() * dirv
        kin = robot.update(q, v)
        tau = RNG.normal(size=2) * 3
        A, jdv = c.jacobian(q), c.jdot_v(q, v)
        pr = project(A)
        qdd = direct_dynamics(kin.M, kin.h, tau, pr, c_times_v(pr, jdv), kind)
        qdd_k, lam_k = kkt(kin.M, kin.h, tau, A, jdv)
        np.testing.assert_allclose(qdd, qdd_k, rtol=1e-8, atol=1e-8)
        fc = constraint_force(kin.M, kin.h, tau, qdd, pr.P)
        np.testing.assert_allclose(fc, A.T @ lam_k, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(multipliers(pr, fc), lam_k, rtol=1e-6)


@pytest.mark.parametrize("kind", ["23", "28", "29"])
def test_direct_dynamics_equals_kkt_random(kind):
    n, m = 6, 3
    M, h, tau = spd(n), RNG.normal(size=n), RNG.normal(size=n)
    A, Adot = random_A(m, n, m), RNG.normal(size=(m, n))
    pr = project(A)
    v = pr.P @ RNG.normal(size=n)
    qdd = direct_dynamics(M, h, tau, pr, c_matrix(pr, Adot) @ v, kind)
    qdd_k, lam = kkt(M, h, tau, A, Adot @ v)
    np.testing.assert_allclose(qdd, qdd_k, atol=1e-9)
    # only the potent part of τ moves the system (25)
    tp, tn = split_input(tau, pr.P)
    np.testing.assert_allclose(tp + tn, tau)
    np.testing.assert_allclose(direct_dynamics(M, h, tp, pr, c_matrix(pr, Adot) @ v, kind), qdd, atol=1e-9)


def test_redundant_constraints_and_multipliers():
    """Duplicated rows: KKT is singular but (22) still gives the motion of the non-redundant set;
    f_c is unique, λ is not and is refused."""
    n = 5
    M, h, tau = spd(n), RNG.normal(size=n), RNG.normal(size=n)
    A1 = random_A(2, n, 2)
    A = np.vstack([A1, A1[0] + A1[1]])
    pr, pr1 = project(A), project(A1)
    assert pr.rank == 2 and not pr.full_row_rank
    np.testing.assert_allclose(pr.P, pr1.P, atol=1e-12)
    qdd = direct_dynamics(M, h, tau, pr, np.zeros(n))
    qdd1, lam1 = kkt(M, h, tau, A1, np.zeros(2))
    np.testing.assert_allclose(qdd, qdd1, atol=1e-9)
    np.testing.assert_allclose(constraint_force(M, h, tau, qdd, pr.P), A1.T @ lam1, atol=1e-9)
    with pytest.raises(InfeasibleError):
        multipliers(pr, np.zeros(n))


def test_decoupling_proposition_3():
    """With P M = M P, the constraint force does not depend on τ_∥; otherwise it does."""
    n = 5
    pr = project(random_A(2, n, 2))
    P, Q = pr.P, pr.Q
    M_dec = P @ spd(n) @ P + Q @ spd(n) @ Q
    M_gen = spd(n)
    assert is_decoupled(M_dec, P) and decoupling_defect(M_gen, P) > 1e-3
    h = RNG.normal(size=n)
    tau_perp = Q @ RNG.normal(size=n)
    for M, leaks in ((M_dec, False), (M_gen, True)):
        fcs = []
        for _ in range(2):
            tau = tau_perp + P @ RNG.normal(size=n)
            qdd = direct_dynamics(M, h, tau, pr, np.zeros(n))
            fcs.append(constraint_force(M, h, tau, qdd, P))
        diff = np.linalg.norm(fcs[0] - fcs[1])
        assert (diff > 1e-6) if leaks else (diff < 1e-10)
