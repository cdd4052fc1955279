"""The compiled conditioning of controllers/qp.py (``controllers/_qp_kernels.condition``) equals its NumPy
formulation (the module docstring's equations) on problems with vanished, free, half-infinite and violated
constant rows; and ``BoundedQP.solve`` on it keeps the solution of the unconditioned problem."""

from __future__ import annotations

import pickle

import numpy as np

from cmstack.controllers._qp_kernels import condition, inactive_minimizer
from cmstack.controllers.qp import BoundedQP


def _numpy(H, g, C, l, u, row_tol, check_tol):
    s = max(np.abs(np.diagonal(H)).max(), np.abs(g).max())
    s = s if s > 0 and np.isfinite(s) else 1.0
    Hs, gs = H / s, g / s
    r = np.sqrt((C * C).sum(axis=1))
    empty = r <= row_tol * max(1.0, r.max())
    free = ~np.isfinite(l) & ~np.isfinite(u)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(empty | free, 0.0, 1.0 / r)
        ls, us = l * d, u * d
    ls = np.where(d == 0, -1e20, np.where(np.isfinite(ls), ls, np.where(ls > 0, 1e20, -1e20)))
    us = np.where(d == 0, 1e20, np.where(np.isfinite(us), us, np.where(us < 0, -1e20, 1e20)))
    fl, fu = np.isfinite(l), np.isfinite(u)
    bad = np.flatnonzero(
        empty
        & (
            (fl & (l > check_tol * (1 + np.abs(np.where(fl, l, 0)))))
            | (fu & (u < -check_tol * (1 + np.abs(np.where(fu, u, 0)))))
        )
    )
    return s, Hs, gs, C * d[:, None], ls, us, d, np.linalg.eigvalsh(Hs)[0], bad


def test_condition_equals_the_numpy_formulation():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n, m = rng.integers(2, 15), rng.integers(1, 29)
        R = rng.normal(size=(n, n))
        H = R @ R.T + 1e-3 * np.eye(n)
        g = rng.normal(size=n) * 10 ** rng.uniform(-3, 4)
        C = rng.normal(size=(m, n)) * 10 ** rng.uniform(-2, 2, size=(m, 1))
        l, u = -rng.uniform(0, 5, m), rng.uniform(0, 5, m)
        kind = rng.integers(0, 6, m)
        C[kind == 0] *= 1e-14  # vanished
        l[kind == 1], u[kind == 1] = -np.inf, np.inf  # free
        l[kind == 2] = -np.inf  # half-infinite
        u[kind == 3] = np.inf
        l[(kind == 0) & (rng.random(m) < 0.5)] = 0.5  # a vanished row violated as a constant
        out = (np.empty((n, n)), np.empty(n), np.empty((m, n)), np.empty(m), np.empty(m), np.empty(m))
        bad = np.empty(m, dtype=np.int64)
        s, lam, nbad = condition(H, g, C, l, u, 1e-10, 1e-7, *out, bad)
        ref = _numpy(H, g, C, l, u, 1e-10, 1e-7)
        assert s == ref[0]
        for a, b in zip(out, ref[1:7]):
            np.testing.assert_allclose(a, b, rtol=1e-15, atol=0)
        np.testing.assert_allclose(lam, ref[7], rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(bad[:nbad], ref[8])


def test_solve_keeps_the_solution_of_the_problem_as_given():
    """A problem with a vanished and a free row, x = 0 feasible (``feasible_start``, as a level of the
    hierarchy: ProxSuite's certificate calls this one infeasible otherwise, with or without the compiled
    conditioning): the solution and the limits' multipliers of the problem as given (stationarity
    H x + g + Cᵀ z = 0, the active rows on their bounds) to the solver's tolerance; pickled, the same."""
    rng = np.random.default_rng(11)
    n, m = 8, 12
    R = rng.normal(size=(n, n))
    H = R @ R.T + np.eye(n)
    g = rng.normal(size=n) * 100
    C = rng.normal(size=(m, n))
    C[3] *= 1e-15
    l, u = -np.full(m, 0.5), np.full(m, 0.5)
    l[5], u[5] = -np.inf, np.inf
    qp = BoundedQP()
    for warm in (False, True, True):
        r = qp.solve("t", H, g, C=C, l=l, u=u, warm=warm, feasible_start=True)
        assert r.solved and r.feasible
        np.testing.assert_allclose(H @ r.x + g + C.T @ r.z, 0, atol=1e-6 * np.abs(g).max())
        assert r.z[3] == 0 and r.z[5] == 0
        y = C @ r.x
        active = np.abs(r.z) > 1e-8
        assert active.any()
        np.testing.assert_allclose(np.abs(y[active]), 0.5, rtol=1e-7)
    twin = pickle.loads(pickle.dumps(qp))
    r2 = twin.solve("t", H, g, C=C, l=l, u=u, warm=False, feasible_start=True)
    np.testing.assert_allclose(r2.x, r.x, rtol=1e-7, atol=1e-9)


def test_inactive_minimizer_is_the_qp_solution_exactly_when_no_row_binds():
    """``inactive_minimizer`` (a level of the hierarchy solved without ProxSuite): on problems whose box is wide or
    narrow around the unconstrained minimizer, it says "free" exactly when −Ĥ⁻¹ĝ meets every kept row (a vanished
    or free row, zeroed by ``condition``, never counts), and then its z* is ProxSuite's solution of the same
    conditioned QP to the solver's tolerance with every multiplier of ProxSuite's below it; when it says "not free",
    z* violates a kept row and ProxSuite finds an active one."""
    rng = np.random.default_rng(3)
    seen = {True: 0, False: 0}
    qp = BoundedQP()
    for t in range(120):
        n, m = int(rng.integers(1, 9)), int(rng.integers(1, 15))
        R = rng.normal(size=(n, n))
        H = R @ R.T + 1e-2 * np.eye(n)
        g = rng.normal(size=n)
        zstar = np.linalg.solve(H, -g)
        C = rng.normal(size=(m, n))
        y = C @ zstar
        w = 10 ** rng.uniform(-2, 0.5)  # some boxes hold z*, some cut it
        l, u = np.minimum(y - w * rng.uniform(-1, 2, m), 0.0), np.maximum(y + w * rng.uniform(-1, 2, m), 0.0)
        if t % 5 == 0:
            C[0] *= 1e-14  # vanished (0 within its bounds: not a violated constant)
            l[0], u[0] = -1.0, 1.0
        if t % 7 == 0:
            l[-1], u[-1] = -np.inf, np.inf
        out = (np.empty((n, n)), np.empty(n), np.empty((m, n)), np.empty(m), np.empty(m), np.empty(m))
        bad = np.empty(m, dtype=np.int64)
        s, lam, nbad = condition(H, g, C, l, u, 1e-10, 1e-7, *out, bad)
        assert nbad == 0
        Hs, gs, Cs, ls, us, d = out
        zf = np.full(n + 2, np.nan)
        free = inactive_minimizer(Hs, gs, Cs, ls, us, d, zf)
        np.testing.assert_allclose(zf[:n], zstar, rtol=1e-9, atol=1e-12)
        kept = d != 0
        yz = Cs @ zf[:n]
        assert free == bool(np.all((yz >= ls)[kept] & (yz <= us)[kept]))
        seen[free] += 1
        r = qp.solve("m", H, g, C=C, l=l, u=u, warm=False, feasible_start=True)
        assert r.solved
        if free:
            np.testing.assert_allclose(r.x, zf[:n], atol=1e-6 * (1 + np.abs(zstar).max()))
            assert np.abs(r.z).max() <= 1e-6 * (1 + np.abs(g).max())
        else:
            assert np.abs(r.z).max() > 0.0
    assert seen[True] >= 20 and seen[False] >= 20
