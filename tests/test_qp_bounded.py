"""controllers/qp.py: every ProxSuite call conditioned and bounded.  Checked against closed forms and
against the problems that made ProxSuite crawl (numerically empty rows, a thin feasible set, a tiny
curvature beside a large gradient)."""

from __future__ import annotations

import numpy as np
import pytest

from cmstack.controllers.qp import BoundedQP


def _kkt_box(H, g, C, l, u, active_upper):
    """Closed form of min ½xᵀHx + gᵀx with the rows ``active_upper`` of C held at u (equalities)."""
    Ca = C[active_upper]
    n, m = H.shape[0], Ca.shape[0]
    K = np.block([[H, Ca.T], [Ca, np.zeros((m, m))]])
    sol = np.linalg.solve(K, np.concatenate([-g, u[active_upper]]))
    return sol[:n], sol[n:]


def test_solution_and_multipliers_of_the_unscaled_problem():
    rng = np.random.default_rng(1)
    n = 6
    B = rng.normal(size=(n, n))
    H = 1e3 * (B @ B.T + np.eye(n))  # a large cost scale
    g = 1e5 * rng.normal(size=n)
    C = rng.normal(size=(3, n)) * np.array([[1e-3], [1.0], [1e3]])  # rows of very different norms
    x_free = np.linalg.solve(H, -g)
    u = C @ x_free - 1.0  # all three rows cut the unconstrained optimum
    l = np.full(3, -np.inf)
    res = BoundedQP(eps_abs=1e-10).solve("t", H, g, None, None, C, l, u)
    assert res.solved and res.feasible
    active = np.flatnonzero(np.abs(C @ res.x - u) <= 1e-7 * (1 + np.abs(u)))
    x_ref, z_ref = _kkt_box(H, g, C, l, u, active)
    np.testing.assert_allclose(res.x, x_ref, rtol=1e-6, atol=1e-9 * np.abs(x_ref).max())
    np.testing.assert_allclose(res.z[active], z_ref, rtol=1e-5)
    # stationarity of the original problem with the returned (unscaled) multipliers
    np.testing.assert_allclose(H @ res.x + g + C.T @ res.z, 0.0, atol=1e-6 * np.abs(g).max())


def test_numerically_empty_rows_are_dropped_and_checked_as_constants():
    rng = np.random.default_rng(2)
    n = 2
    H = np.array([[1e-8, 0.0], [0.0, 1.0]])  # tiny curvature (a tie-breaking term) ...
    g = np.array([1e3, -2e3])  # ... beside a large gradient
    C = np.vstack([rng.normal(size=(12, n)), 1e-17 * rng.normal(size=(30, n))])
    l, u = -np.full(42, 1e-5), np.full(42, 1e-5)  # a feasible set that is nearly the point 0
    qp = BoundedQP()
    res = qp.solve("thin", H, g, None, None, C, l, u, feasible_start=True)
    assert res.solved and res.feasible and res.iters <= 100
    assert np.all(res.z[12:] == 0.0)  # the dropped rows carry no force
    # a numerically empty row whose constant bound excludes 0: infeasible before any iteration, named
    l2 = l.copy()
    l2[20] = 1e-3
    bad = qp.solve("thin", H, g, None, None, C, l2, u)
    assert bad.status == "infeasible" and bad.iters == 0 and bad.bad_rows == [("in", 20)]
    # the same for an equality row with a nonzero right-hand side
    A = np.vstack([[1.0, 0.0], [1e-18, 1e-18]])
    bad_eq = qp.solve("eq", H, g, A, np.array([0.0, 1.0]))
    assert bad_eq.status == "infeasible" and bad_eq.bad_rows == [("eq", 1)]


def test_the_caps_hold_on_a_problem_that_cannot_converge_in_them():
    rng = np.random.default_rng(3)
    n, m = 30, 90
    B = rng.normal(size=(n, n))
    H = B @ B.T + 1e-6 * np.eye(n)
    g = rng.normal(size=n)
    C = rng.normal(size=(m, n))
    l, u = -np.abs(rng.normal(size=m)) * 1e-3, np.abs(rng.normal(size=m)) * 1e-3
    qp = BoundedQP(eps_abs=1e-15, max_iter=3, max_iter_in=2)
    res = qp.solve("capped", H, g, None, None, C, l, u, warm=False, feasible_start=True)
    assert res.status == "max_iter"
    assert res.iters <= 3 * 2 + 3  # ProxSuite's count; never the tens of thousands seen before
    assert np.all(np.isfinite(res.x))


def test_infeasible_problem_is_reported_not_raised():
    H, g = np.eye(2), np.zeros(2)
    C = np.array([[1.0, 0.0], [1.0, 0.0]])
    res = BoundedQP().solve("inf", H, g, None, None, C, np.array([1.0, -np.inf]), np.array([np.inf, -1.0]))
    assert res.status in ("infeasible", "max_iter") and not res.feasible


@pytest.mark.parametrize("warm", [True, False])
def test_warm_start_gives_the_same_solution(warm):
    rng = np.random.default_rng(4)
    qp = BoundedQP(eps_abs=1e-11)
    H = np.diag([1.0, 2.0, 3.0])
    C = np.eye(3)
    for _k in range(5):
        g = rng.normal(size=3)
        res = qp.solve("w", H, g, None, None, C, -0.1 * np.ones(3), 0.1 * np.ones(3), warm=warm)
        np.testing.assert_allclose(res.x, np.clip(-g / np.diag(H), -0.1, 0.1), atol=1e-9)
