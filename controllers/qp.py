"""Every ProxSuite call of the control laws, well posed and bounded in time.

A control step must return in bounded time whatever the solver meets.  ProxSuite's augmented-Lagrangian
iterations are fast on a well-scaled problem, but two things we used to hand it made them crawl: rows that
are numerically empty (a limit row ``C N`` whose norm is 1e-17 after a projection onto a null space; its
bounds are then constants that the Ruiz equilibration multiplies up by ~1e17) and feasible sets that are
nearly a point with an absolute tolerance of 1e-9.  One solve then took tens of thousands of inner
iterations (``max_iter`` bounds only the outer ones).  This module is the one place where a QP is set up:

    min ½ xᵀ H x + gᵀ x   s.t.   A x = b,   l ≤ C x ≤ u

1. **Empty rows out.**  A row i of C (or A) with ‖C_i‖ ≤ ``row_tol`` · max(1, max_j ‖C_j‖) constrains
   nothing the solver can change: it is dropped and checked as a constant (l_i ≤ 0 ≤ u_i, resp.
   |b_i| ≤ tol); a violated constant row makes the problem infeasible before any iteration
   (``status = "infeasible"``, ``bad_rows`` names it).  Rows whose two bounds are infinite are dropped.
2. **Scaled.**  Every kept row is divided by its norm (ĉ_i = C_i/‖C_i‖, l̂_i = l_i/‖C_i‖, …), the cost by
   s = max(max |H_ii|, ‖g‖_∞), so that neither the Hessian nor the gradient is large: with a gradient
   10⁴ times the Hessian's scale, ProxSuite declared a feasible final level of the YuMi hierarchy
   (2 variables, 10 rows, x = 0 feasible) primal infeasible after 12 iterations; scaled, it solves in 19.
   The solution x is unchanged; the multipliers of the original problem are y = s D_A ŷ and
   z = s D_C ẑ (D = diag(1/‖row‖)), from the stationarity H x + g + Aᵀ y + Cᵀ z = 0 multiplied through
   by s.  The tolerance ``eps_abs`` is thus on unit rows and a unit cost.
   **The proximal parameter ρ.**  ProxSuite's proximal step contracts the error along a direction of
   curvature λ of H by ρ/(ρ + λ) per outer iteration.  Its default ρ = 1e-6 is far above the curvature
   that the laws' tie-breaking terms give (μ·Gauss with μ = 1e-6 relative), so the iterate crept along
   those directions: a level of the Panda carry with 8 variables and 14 velocity rows took 390–2,200
   iterations (1–22 ms).  Every Hessian given here is positive definite (each law adds Gauss or a
   weighted norm), so ρ = clip(1e-3 λ_min(Ĥ), 1e-14, 1e-6) (λ_min by ``eigvalsh``: microseconds at
   these sizes) solves the same problems in 5–19 iterations (≤ 0.13 ms) to the same tolerance.
   **The inequality penalty μ_in.**  ProxSuite starts the augmented Lagrangian of the inequality rows at
   μ_in = 1e-1.  On unit rows and a unit cost that let 18 of the Panda effort case's level-2 problems
   (8 variables, 28 effort and position rows) take 170–640 iterations, warm or cold; μ_in = 1e-3 solves
   every problem captured from the carry loops (velocity, effort, the thin final level above) in at most
   32 (median 6–8).  Problems of that kind still occur (a degenerate vertex: many rows active at one
   point); the caps of 3. bound them and the caller decides what a capped solve means.
3. **Bounded.**  ProxSuite's outer (``max_iter``) *and* inner (``max_iter_in``) iterations are capped, so
   one solve costs at most max_iter · max_iter_in inner iterations (defaults 20 × 15 = 300: 0.6–2 ms at the
   sizes of these laws on this project's shared 2-core machine, where a degenerate vertex (a 2-variable
   final level with 28 effort and position rows, many active at one point) can use all of them;
   ``bench/limits.py`` measures the worst step); a caller that solves several QPs in one step shares one
   budget between them (``budget``:
   ``UdwadiaKalabaController.max_step_iters``), so the whole step is bounded, not only each solve.
4. **A status the caller can act on**: ``"solved"``; ``"infeasible"`` (proven by ProxSuite or by a
   constant row); ``"max_iter"`` (stopped by the caps: ``x`` is the last iterate, finite but not
   optimal, and ``feasible`` tells whether it meets the constraints to ``check_tol``).  What a law does
   with each is its own documented decision (docs/design.md, "When a QP cannot be solved").

A warm start from the previous solve of the same problem shape (``key``) is used when ``warm=True``; a
warm start that does not reach SOLVED is retried once from a cold start.

5. **A cold start is cold.**  A solver object is reused for every problem of its shape (``init`` sets the problem
   up anew).  ProxSuite adapts the equality penalty μ_eq during a solve and ``init`` keeps the adapted value unless
   it is given, so a "cold" solve depended on what that object had solved before: the same problem, to the bit,
   took 18 iterations on a fresh object and 29 on the one the effort carry had used, the solutions 4e-10 apart
   (the lower levels of that step then 3.7e-4 of max |τ|).  Every cold start gives μ_eq = 1e-3 (ProxSuite's
   default), ρ and μ_in: a fresh object and a reused one take the same iterations to the same solution (to ~1e-13:
   ProxSuite itself is not reproducible to the bit, two fresh objects differ there; tests/test_qp_cold.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
import proxsuite

_PQ = proxsuite.proxqp
_ST = _PQ.QPSolverOutput
_INFEASIBLE = (_ST.PROXQP_PRIMAL_INFEASIBLE, _ST.PROXQP_DUAL_INFEASIBLE)
#: ProxSuite's initial penalty of the equality rows (its default), given to every cold start (module docstring, 5.)
_MU_EQ = 1e-3


@dataclass
class QPResult:
    """One bounded solve.  x, y, z: primal, equality and inequality multipliers of the problem as given
    (z has one entry per row of C, zero for dropped rows); status: "solved" | "infeasible" | "max_iter";
    iters: ProxSuite's inner iterations (all attempts); feasible: x meets A x = b and l ≤ C x ≤ u to
    ``check_tol`` (relative to the row norm); bad_rows: rows of C (``("in", i)``) or A (``("eq", i)``)
    found infeasible as constants."""

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    status: str
    iters: int
    feasible: bool
    bad_rows: list = field(default_factory=list)
    raw_status: str = ""

    @property
    def solved(self) -> bool:
        return self.status == "solved"


_NAMES: dict = {}


def _status_name(st) -> str:
    """ProxSuite's status without its enum's prefix ("PROXQP_SOLVED"), made once per status."""
    name = _NAMES.get(st)
    if name is None:
        name = _NAMES[st] = str(st).rsplit(".", 1)[-1]
    return name


def _row_norms(M: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", M, M))


class BoundedQP:
    """A cache of ProxSuite dense solvers (one per problem shape ``key``) whose every solve is
    conditioned and bounded (module docstring).

    Args:
        eps_abs: ProxSuite's absolute tolerance on the scaled problem (unit rows).
        max_iter, max_iter_in: caps on ProxSuite's outer and inner iterations of one attempt.
        row_tol: relative norm under which a row is numerically empty.
        check_tol: relative tolerance of the feasibility check of a returned x.
        mu_in: ProxSuite's initial penalty of the inequality rows (module docstring, 2).
    """

    def __init__(
        self,
        eps_abs: float = 1e-9,
        max_iter: int = 20,
        max_iter_in: int = 15,
        row_tol: float = 1e-10,
        check_tol: float = 1e-7,
        mu_in: float = 1e-3,
    ):
        self.eps_abs = float(eps_abs)
        self.max_iter = int(max_iter)
        self.max_iter_in = int(max_iter_in)
        self.row_tol = float(row_tol)
        self.check_tol = float(check_tol)
        self.mu_in = float(mu_in)
        self._qps: dict = {}
        self._cold: dict = {}  # solver objects reused for cold starts, by shape
        self._max_iter_of: dict = {}  # id(solver object) -> its outer cap as last set
        self.cold_retries = 0
        self._bufs: dict = {}  # the conditioned problem's arrays, by shape (n, rows of C)
        from cmstack.controllers._qp_kernels import condition_qp

        self._condition_qp = condition_qp
        #: when a list: every solve appends (shape key, H, g, A, b, C, l, u, ρ) as given to ProxSuite (scaled)
        self.trace: list | None = None

    def __getstate__(self) -> dict:
        # the solver objects, buffers and the compiled function are caches: made again after unpickling
        state = self.__dict__.copy()
        state.update(_qps={}, _cold={}, _bufs={}, _max_iter_of={}, _condition_qp=None, trace=None)
        return state

    def __setstate__(self, state: dict) -> None:
        from cmstack.controllers._qp_kernels import condition_qp

        self.__dict__.update(state, _condition_qp=condition_qp)

    def _new(self, n: int, n_eq: int, n_in: int, feasible_start: bool = False):
        qp = _PQ.dense.QP(n, n_eq, n_in)
        s = qp.settings
        s.eps_abs = self.eps_abs
        s.eps_rel = 0.0
        s.verbose = False
        s.max_iter = self.max_iter
        self._max_iter_of[id(qp)] = self.max_iter
        s.max_iter_in = self.max_iter_in
        if feasible_start:
            # the caller knows a feasible point (x = 0): ProxSuite's infeasibility certificate (tolerance
            # 1e-4 on the scaled rows) can fire falsely on a thin feasible set, so it is switched off
            s.eps_primal_inf = 1e-14
        return qp

    def _set_max_iter(self, qp, max_outer: int) -> None:
        """ProxSuite's outer cap, written only when it changes (reading ``qp.settings`` makes a Python object;
        ``_new`` records every new object's cap, so an id reused by a new object is never stale)."""
        if self._max_iter_of.get(id(qp)) != max_outer:
            qp.settings.max_iter = max_outer
            self._max_iter_of[id(qp)] = max_outer

    def _clean(self, M, lo, hi, eq: bool):
        """Kept row indices, their norms and the constant rows that are violated."""
        if M is None or M.shape[0] == 0:
            return np.zeros(0, dtype=int), np.zeros(0), []
        r = _row_norms(M)
        big = max(1.0, float(r.max(initial=0.0)))
        empty = r <= self.row_tol * big
        if eq:
            keep = ~empty
            tol = self.check_tol * (1.0 + np.abs(lo))
            bad = [("eq", int(i)) for i in np.flatnonzero(empty & (np.abs(lo) > tol))]
        else:
            free = ~np.isfinite(lo) & ~np.isfinite(hi)
            keep = ~empty & ~free
            tol_l = self.check_tol * (1.0 + np.abs(np.where(np.isfinite(lo), lo, 0.0)))
            tol_u = self.check_tol * (1.0 + np.abs(np.where(np.isfinite(hi), hi, 0.0)))
            bad = [("in", int(i)) for i in np.flatnonzero(empty & ((lo > tol_l) | (hi < -tol_u)))]
        idx = np.flatnonzero(keep)
        return idx, r[idx], bad

    def feasible(
        self,
        x: np.ndarray,
        A: np.ndarray | None,
        b: np.ndarray | None,
        C: np.ndarray | None,
        l: np.ndarray | None,
        u: np.ndarray | None,
    ) -> bool:
        """x meets A x = b and l ≤ C x ≤ u to ``check_tol`` relative to each row's norm and bound."""
        if A is not None and A.shape[0]:
            assert b is not None, "BoundedQP: A without b"
            ra = _row_norms(A)
            if np.any(np.abs(A @ x - b) > self.check_tol * (ra + np.abs(b) + 1.0)):
                return False
        if C is not None and C.shape[0]:
            assert l is not None and u is not None, "BoundedQP: C without l and u"
            rc = _row_norms(C)
            y = C @ x
            with np.errstate(invalid="ignore"):
                lo_bad = np.isfinite(l) & (y < l - self.check_tol * (rc + np.abs(l) + 1.0))
                hi_bad = np.isfinite(u) & (y > u + self.check_tol * (rc + np.abs(u) + 1.0))
            if np.any(lo_bad) or np.any(hi_bad):
                return False
        return bool(np.all(np.isfinite(x)))

    def solve(
        self,
        key: Hashable,
        H: np.ndarray,
        g: np.ndarray,
        A: np.ndarray | None = None,
        b: np.ndarray | None = None,
        C: np.ndarray | None = None,
        l: np.ndarray | None = None,
        u: np.ndarray | None = None,
        warm: bool = True,
        feasible_start: bool = False,
        budget: int | None = None,
    ) -> QPResult:
        """Solve the QP of the module docstring; never raises on a solver outcome (see ``QPResult``).
        ``feasible_start``: the caller guarantees that x = 0 is feasible (the levels of a hierarchy, each in
        the null space of the levels above): no infeasibility certificate is trusted, the caps bound it.
        ``budget``: at most this many inner iterations for this call (the outer cap becomes
        max(1, budget // max_iter_in)), for a caller that shares one budget between several solves."""
        n = H.shape[0]
        me = 0 if A is None else A.shape[0]
        m = 0 if C is None else C.shape[0]
        bufs = self._bufs.get((n, me, m))
        if bufs is None:
            bufs = self._bufs[(n, me, m)] = (
                np.empty((n, n)),
                np.empty(n),
                np.empty((me, n)),
                np.empty(me),
                np.empty(me),
                np.empty((m, n)),
                np.empty(m),
                np.empty(m),
                np.empty(m),
                np.empty(m, dtype=np.int64),
                np.zeros((0, n)),
                np.zeros(0),
            )
        Hs, gs, As, bs, e, Cs, ls, us, d, badi, none2, none1 = bufs
        # the problem conditioned in one compiled call (``_qp_kernels.condition_qp``): every row of C kept, a
        # vanished or free one zeroed (one shape per problem, module docstring 1.); an equality row that vanishes
        # is dropped and checked as a constant
        s, lam_min, nbad, nempty = self._condition_qp(
            H,
            g,
            A if me else none2,
            b if me else none1,
            C if m else none2,
            l if m else none1,
            u if m else none1,
            self.row_tol,
            self.check_tol,
            Hs,
            gs,
            As,
            bs,
            e,
            Cs,
            ls,
            us,
            d,
            badi,
        )
        ie = None
        bad: list = []
        if nempty:
            assert A is not None and b is not None
            ie, e, bad = self._clean(A, b, None, eq=True)
            As, bs = A[ie] / e[:, None], b[ie] / e
        if nbad:
            bad = bad + [("in", int(i)) for i in badi[:nbad]]
        if bad:
            return QPResult(
                np.zeros(n), np.zeros(me), np.zeros(m), "infeasible", 0, False, bad, "constant row"
            )
        return self.solve_conditioned(
            key,
            Hs,
            gs,
            As if me else None,
            bs,
            e,
            ie,
            Cs if m else None,
            ls,
            us,
            d,
            s,
            lam_min,
            warm,
            feasible_start,
            budget,
            A,
            b,
            C,
            l,
            u,
        )

    def solve_conditioned(
        self,
        key: Hashable,
        Hs: np.ndarray,
        gs: np.ndarray,
        As: np.ndarray | None,
        bs: np.ndarray | None,
        e: np.ndarray | None,
        ie: np.ndarray | None,
        Cs: np.ndarray | None,
        ls: np.ndarray | None,
        us: np.ndarray | None,
        d: np.ndarray | None,
        s: float,
        lam_min: float,
        warm: bool,
        feasible_start: bool,
        budget: int | None,
        A: np.ndarray | None,
        b: np.ndarray | None,
        C: np.ndarray | None,
        l: np.ndarray | None,
        u: np.ndarray | None,
    ) -> QPResult:
        """``solve`` of a problem already conditioned (module docstring, 1.–2.: ``_qp_kernels.condition_qp``, or a
        caller's kernel that conditions as it builds, ``merged_problem``, ``level_problem``): Ĥ, ĝ, Â, b̂ (rows
        ``ie`` of A kept, None: all; e their norms), Ĉ, l̂, û (d the rows' scales), s the cost's scale, λ_min(Ĥ);
        A, b, C, l, u as given (the feasibility test of a capped solve).  The result is the unscaled problem's."""
        max_outer = (
            self.max_iter if budget is None else max(1, min(self.max_iter, int(budget) // self.max_iter_in))
        )
        n = Hs.shape[0]
        me = 0 if A is None else A.shape[0]
        n_eq = 0 if As is None else As.shape[0]
        n_in = 0 if Cs is None else Cs.shape[0]
        rho = min(1e-6, max(1e-14, 1e-3 * lam_min))
        k = (key, n, n_eq, n_in, feasible_start)
        if (
            self.trace is not None
        ):  # the problems as ProxSuite gets them (bench/limits.py's floor replays them)
            self.trace.append(
                (k, *(None if a is None else np.array(a) for a in (Hs, gs, As, bs, Cs, ls, us)), rho)
            )
        qp = self._qps.get(k) if warm else None
        iters = 0
        res = None
        if qp is not None:
            self._set_max_iter(qp, max_outer)
            qp.update(Hs, gs, As, bs, Cs, ls, us, update_preconditioner=False, rho=rho, mu_in=self.mu_in)
            qp.solve()
            res = qp.results
            iters += int(res.info.iter)
            if res.info.status != _ST.PROXQP_SOLVED:
                self.cold_retries += 1
                res = None
        if res is None:
            # a cold start on a solver object of this shape kept from an earlier cold start (init() sets the
            # problem up anew: no allocation in the step), else a new one
            qp = None if warm else self._cold.get(k)
            if qp is None:
                qp = self._new(n, n_eq, n_in, feasible_start)
                if not warm:
                    self._cold[k] = qp
            self._set_max_iter(qp, max_outer)
            # mu_eq given too: ProxSuite adapts it during a solve and init() keeps the adapted value otherwise, so a
            # cold start on a reused object depended on what that object solved before (module docstring, 5.)
            qp.init(Hs, gs, As, bs, Cs, ls, us, rho=rho, mu_eq=_MU_EQ, mu_in=self.mu_in)
            qp.solve()
            res = qp.results
            iters += int(res.info.iter)
            if warm:
                # warm start from this solution from now on (switched on after the first solve: ProxSuite 0.8
                # segfaults when it is set between init() and a first solve(), with no previous result)
                qp.settings.initial_guess = _PQ.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT
                self._qps[k] = qp
        x = np.array(res.x, dtype=float)
        if n_eq:
            assert e is not None
            if ie is None:
                y = np.divide(res.y, e)
                y *= s
            else:
                y = np.zeros(me)
                y[ie] = s * np.asarray(res.y) / e
        else:
            y = np.zeros(me)
        if n_in:
            assert d is not None  # (rows of C: conditioned, d their scales)
            z = np.multiply(res.z, d)
            z *= s
        else:
            z = np.zeros(0 if C is None else C.shape[0])
        st = res.info.status
        if st == _ST.PROXQP_SOLVED:
            return QPResult(x, y, z, "solved", iters, True, [], "PROXQP_SOLVED")
        status = "infeasible" if st in _INFEASIBLE else "max_iter"
        # a solved x meets the constraints to eps_abs (unit rows); only a capped or refused one is checked
        feas = self.feasible(x, A, b, C, l, u) if feasible_start or status == "max_iter" else False
        return QPResult(x, y, z, status, iters, feas, [], _status_name(st))
