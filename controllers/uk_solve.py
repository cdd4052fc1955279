"""How the UK controller solves its levels (``controllers/udwadia_kalaba.py``, module docstring 1.–3.):
the equality levels (KKT by Cholesky, else null-space projections) and the levels within the limits
(one bounded QP, else the levels one by one, a level that cannot be solved giving way)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg.lapack import dposv as _dposv

from cmstack.controllers._qp_kernels import level_problem as _level_problem
from cmstack.controllers._qp_kernels import level_tail as _level_tail
from cmstack.controllers._qp_kernels import merged_problem as _merged_problem
from cmstack.controllers.qp import BoundedQP
from cmstack.controllers.uk_levels import UKStepInfo, _nullspace_step
from cmstack.models.errors import InfeasibleError
from cmstack.models.limits import EffortLimit
from cmstack.models.robot import Kinematics, Robot

_EMPTY = np.zeros(0)
_count_nonzero = np.count_nonzero


class LevelSolver:
    """The solving half of ``UdwadiaKalabaController`` (a mixin: it uses the controller's levels,
    limits, tolerances and its ``BoundedQP``)."""

    # what the controller provides (declared for type checkers; set in UdwadiaKalabaController.__init__)
    n: int
    robot: Robot
    levels: list
    limits: list
    rank_tol: float
    eps_abs: float
    max_step_iters: int
    warm_start: bool
    merge_top: bool
    failures: int
    saturated_steps: int
    cold_retries: int
    info: UKStepInfo
    _qp: BoundedQP
    _seq_active: bool
    _levels_exact: bool
    _seq_residuals: tuple
    _limits_infeasible: Callable[..., InfeasibleError]
    _torque: Callable[[np.ndarray], np.ndarray]

    def _solve(self, key, H, g, A, b, C, l, u, feasible_start: bool = False, budget: int | None = None):
        """One bounded QP (``controllers/qp.py``: empty rows dropped, rows scaled, iterations capped,
        warm-started per ``key``, one cold retry); counts cold retries in ``info``."""
        before = self._qp.cold_retries
        res = self._qp.solve(
            key, H, g, A, b, C, l, u, warm=self.warm_start, feasible_start=feasible_start, budget=budget
        )
        if self._qp.cold_retries != before:
            self.cold_retries += 1
            self.info.cold_retries += 1
        return res

    def _solve_conditioned(
        self, key, Hs, gs, As, bs, e, ie, Cs, ls, us, d, s, lam, feasible_start, budget, A, b, C, l, u
    ):
        """``_solve`` of a problem a kernel built conditioned (``BoundedQP.solve_conditioned``)."""
        qp = self._qp
        before = qp.cold_retries
        res = qp.solve_conditioned(
            key,
            Hs,
            gs,
            As,
            bs,
            e,
            ie,
            Cs,
            ls,
            us,
            d,
            s,
            lam,
            self.warm_start,
            feasible_start,
            budget,
            A,
            b,
            C,
            l,
            u,
        )
        if qp.cold_retries != before:
            self.cold_retries += 1
            self.info.cold_retries += 1
        return res

    @property
    def _merged_bufs(self) -> dict:
        """``_merged_top``'s buffers by shape (rows of A₁, rows of C), made once each."""
        b = self.__dict__.get("_merged_bufs_of")
        if b is None:
            b = self.__dict__["_merged_bufs_of"] = {}
        return b

    def _row_buffers(self, m: int) -> tuple:
        """``_sequential``'s per-row buffers of its levels (lo, hi, l̂, û, d, bad) for m rows and the unconstrained
        minimizer of a level (n entries, ``_qp_kernels.inactive_minimizer``), made once."""
        of = self.__dict__.get("_level_rows_of")
        if of is None:
            of = self.__dict__["_level_rows_of"] = {}
        b = of.get(m)
        if b is None:
            b = of[m] = (*(np.empty(m) for _ in range(5)), np.empty(m, dtype=np.int64), np.empty(self.n))
        return b

    @property
    def _no_rows(self) -> np.ndarray:
        """A 0 × n array (a level without rows, for the kernels), made once."""
        z = self.__dict__.get("_no_rows_arr")
        if z is None:
            z = self.__dict__["_no_rows_arr"] = np.zeros((0, self.n))
        return z

    # ------------------------------------------------------------------ equality levels
    def _equality(self, H, r, E, f, rows, t):
        """Levels without limits: KKT fast path, else null-space projections. (v̇, λ, path).
        r = −g.  Schur complement with LAPACK Cholesky solves (dposv):
        X = H⁻¹ [Eᵀ r],  S = E H⁻¹ Eᵀ,  S λ = E H⁻¹ r − f,  v̇ = H⁻¹ r − H⁻¹ Eᵀ λ."""
        m = E.shape[0]
        if m == 0:
            x, info = _dposv(H, r)[1:]
            if info == 0:
                return x, None, "kkt"
            return np.linalg.solve(H, r), None, "kkt"
        if m <= self.n:
            B = np.empty((self.n, m + 1))
            B[:, :m] = E.T
            B[:, m] = r
            X, info = _dposv(H, B)[1:]
            if info == 0:
                EX = E @ X  # [S, E H⁻¹ r]
                c, lam, info = _dposv(EX[:, :m], EX[:, m] - f)
                if info == 0:
                    dg = c.diagonal().tolist()
                    if min(dg) > self._sqrt_rank_tol * max(dg):
                        return X[:, m] - X[:, :m] @ lam, lam, "kkt"
        return self._nullspace(H, -r, rows, t)

    def _nullspace(self, H, g, rows, t):
        n = self.n
        x = np.zeros(n)
        N = np.eye(n)
        for k, (A, b) in enumerate(rows):
            if N.shape[1] == 0:
                break
            dz, NB = _nullspace_step(A @ N, b - A @ x, self.rank_tol)  # pinv(A N)(b − A x), N(A N): one QR
            x = x + N @ dz
            if k == 0 and np.linalg.norm(A @ x - b) > 1e-8 * (1 + np.linalg.norm(b)):
                raise self._incompatible(A, b, t)
            N = N @ NB
        if N.shape[1]:
            x = x + N @ np.linalg.solve(N.T @ H @ N, N.T @ (-g - H @ x))
        E = np.vstack([r[0] for r in rows])
        lam = np.linalg.lstsq(E.T, -(H @ x + g), rcond=None)[0]  # Eᵀλ = −(H v̇ + g), minimum norm
        return x, lam, "nullspace"

    # ------------------------------------------------------------------ limits
    def _with_limits(self, kin, H, g, E, f, rows, C, l, u, Q, hD, t):
        """v̇* violates a limit: one bounded QP of the final level with E v̇ = f and the limits
        (module docstring, 3); when it is not solved, the levels one after another."""
        iters = 0
        if not (self._last_sequential and rows):
            # the one QP is a shortcut: when every level above can hold exactly within the limits, the
            # sequential solution is the same; after a step that needed the levels one by one, go there
            # directly (its first QP tells again whether they can)
            res = self._solve(("all", E.shape[0]), H, g, E, f, C, l, u)
            iters = res.iters
            if res.solved:
                self.info.saturated, self.info.gave_way = False, ""
                self._last_sequential = False
                return res.x, res.y if E.shape[0] else None, res.z, res.iters, "qp"
        out = self._sequential(kin, H, g, rows, C, l, u, Q, hD, t, iters, E, f)
        self._last_sequential = not self._levels_exact
        return out

    def _sequential(self, kin, H, g, rows, C, l, u, Q, hD, t, iters: int = 0, E=None, f=None):
        """Levels one at a time with the limits (module docstring, 3), each a bounded QP
        (``controllers/qp.py``), within the step's budget of ``max_step_iters`` ProxSuite iterations.

        Bounded: the one QP of ``_with_limits`` and level 1's two QPs are capped by ``controllers/qp.py``
        (300 iterations each); levels 1 and 2 in one QP (``_merged_top``, tried first with two levels or more above
        the last) get ``max_step_iters`` (150), and so do the levels below.  So a step costs at most
        3 · 300 + 2 · 150 ProxSuite iterations (``bench/limits.py`` times it).

        Level 1 (hard): min ½ (v̇ − a)ᵀ M (v̇ − a) s.t. A₁ v̇ = b₁ and the limits.  When ProxSuite does not
        solve it within its caps, the least-squares form min ‖A₁ v̇ − b₁‖² + μ‖v̇ − a‖²_M s.t. the limits
        alone (feasible whenever the limits are; μ = 1e-6 tr(A₁ᵀA₁)/tr(M)) decides: a residual within
        ``1e-6 (1 + ‖b₁‖)`` is level 1 held; otherwise ``InfeasibleError`` naming the level, the limits
        and the joints that bind (the controller never sends a torque that breaks a hard level).

        Level k ≥ 2 and the final level: v̇ = v̇_{k−1} + N_{k−1} z in the null space of the levels above,
        only the limits as constraints (with a 1e-8 relative margin: v̇_{k−1} meets them to the solver's
        tolerance).  A level whose QP is not solved within the caps or the budget gives way: v̇ keeps the
        solution of the levels above (inside every limit; the iterate is taken instead when it is feasible
        and lowers the level's cost), and ``info.saturated`` / ``info.gave_way`` say which level gave way
        and which limits bind.  This is the closest feasible step the hierarchy allows."""
        M = kin.M
        info = self.info
        info.saturated, info.gave_way = False, ""
        n = self.n
        qp = self._qp
        merged = self._merged_top(M, Q, H, g, rows, C, l, u) if len(rows) >= 2 and self.merge_top else None
        if merged is not None:
            # levels 1 and 2 in one QP (``_merged_top``): level 3 on continues from there
            x, z, N, B, its = merged
            iters += its
            dx, first = _EMPTY, 2
        elif rows:
            A1, b1 = rows[0]
            r0 = self._solve(("seq", 0), M, -Q, A1, b1, C, l, u)
            iters += r0.iters
            if r0.solved or (r0.status == "max_iter" and r0.feasible):
                x, z = r0.x, r0.z
            else:
                mu = 1e-6 * max(float(np.trace(A1.T @ A1)), 1e-12) / float(np.trace(M))
                r1 = self._solve(
                    ("seq", "ls"), A1.T @ A1 + mu * M, -(A1.T @ b1) - mu * Q, None, None, C, l, u
                )
                iters += r1.iters
                resid = float(np.linalg.norm(A1 @ r1.x - b1)) if r1.feasible else np.inf
                if not resid <= 1e-6 * (1.0 + float(np.linalg.norm(b1))):
                    raise self._limits_infeasible(
                        kin, hD, Q, rows, t, r0.raw_status or r0.status, r1.x if r1.feasible else None, resid
                    )
                x, z = r1.x, r1.z
            first, N, B, dx = 1, np.eye(n), A1, _EMPTY
        else:
            x, z, N, B, dx, first = np.zeros(n), np.zeros(C.shape[0]), np.eye(n), np.zeros((0, n)), _EMPTY, 0
        iters_upper = iters
        z_last = None
        lo, hi, ls, us, d, bad, zf = self._row_buffers(C.shape[0])  # level_problem's
        active = bool(_count_nonzero(z))
        K = len(rows)
        for k in range(first, K + 1):
            # x ← x + N dx (the level above), N ← N null(B), B = A_{k−1} N, and level k's QP in N's coordinates
            # (``_qp_kernels.hierarchy_level``: z = 0, the levels above, is feasible by construction: a bound that
            # v̇_{k−1} meets only to the tolerance of its QP is moved to it, so a lower level never repairs a higher one)
            A, b = rows[k] if k < K else (None, None)
            x, N, B, Hs, gs, CN, Cs, s, lam, nbad, free, nz_next = _level_problem(
                N, dx, x, B, self.rank_tol, C, l, u, self.eps_abs,
                self._no_rows if A is None else A, _EMPTY if b is None else b,
                k == K, M, Q, H, g, qp.row_tol, qp.check_tol, lo, hi, ls, us, d, bad, zf,
            )  # fmt: skip
            dx = _EMPTY
            nz = N.shape[1]
            if nz == 0:
                break
            if free:
                # the level's unconstrained minimizer meets every row (``_qp_kernels.inactive_minimizer``): it is the
                # level's QP solution, exactly, with no multiplier; ProxSuite is not called
                if k == K:
                    x = x + N @ zf[:nz]
                    z_last = np.zeros(C.shape[0])
                elif nz_next == 0:  # no freedom left below this level: the hierarchy ends here
                    x = x + N @ zf[:nz]
                    break
                else:
                    dx = zf[:nz].copy()
                continue
            spent = iters - iters_upper
            if spent >= self.max_step_iters:
                self._give_way(
                    k, kin, hD, x, f"the step's budget of {self.max_step_iters} QP iterations is spent"
                )
                break
            if (
                nbad
            ):  # a vanished row violated as a constant (C N' = 0 with 0 outside [lo, hi]): the caps decide
                budget = self.max_step_iters - spent
                r = self._solve(("seq", k, nz), Hs * s, gs * s, None, None, CN, lo, hi, True, budget)
            else:
                r = self._solve_conditioned(
                    ("seq", k, nz), Hs, gs, None, None, None, None, Cs, ls, us, d, s, lam, True,
                    self.max_step_iters - spent, None, None, CN, lo, hi,
                )  # fmt: skip
            iters += r.iters
            active = active or bool(_count_nonzero(r.z))
            if not r.solved:
                self.failures += 1
                # (the scaled cost: the same sign as the level's own, s > 0)
                better = r.feasible and float(0.5 * r.x @ Hs @ r.x + gs @ r.x) < 0.0
                if better:
                    x = x + N @ r.x
                self._give_way(
                    k,
                    kin,
                    hD,
                    x,
                    f"its QP ended '{r.raw_status}' after {r.iters} iterations"
                    + (" (its last feasible iterate is used)" if better else ""),
                )
                break
            if k == K or nz_next == 0:  # (nz_next = 0: no freedom left below this level)
                x = x + N @ r.x
                if k == K:
                    z_last = r.z
                else:
                    break
            else:
                dx = r.x
        if z_last is not None:
            z = z_last
        if rows:
            # the split of the equality force, minimum norm, computed when the forces are asked for (on
            # copies: H and g may be the compiled plan's buffers, rewritten by the next step)
            sizes = np.fromiter((a.shape[0] for a, _ in rows), dtype=np.int64, count=len(rows))
            if E is None or f is None or E.shape[0] != int(sizes.sum()):
                E, f = np.vstack([a for a, _ in rows]), np.concatenate([b for _, b in rows])
            E_up, rhs = E, np.empty(n)
            res, bn = np.empty(len(rows)), np.empty(len(rows))
            # the levels' residuals, whether they all hold, and rhs = −(H x + g) − Cᵀ z in one compiled call
            self._levels_exact = _level_tail(E, f, x, sizes, H, g, C, z, res, bn, rhs)

            def lam():
                return np.linalg.lstsq(E_up.T, rhs, rcond=None)[0]

            self._seq_residuals = (x, tuple(res.tolist()))
        else:
            lam = None  # type: ignore[assignment]
            self._levels_exact = False
            self._seq_residuals = (x, ())
        self._seq_active = active
        return x, lam, z, iters, "sequential"

    def _merged_top(self, M, Q, H, g, rows, C, l, u):
        """Levels 1 and 2 of ``_sequential`` in one bounded QP, or None when it is not solved within the lower
        levels' budget (``max_step_iters``; the levels one by one then, as before).

        Level 1 only decides the set {A₁ v̇ = b₁} ∩ limits in which level 2 is solved (its own Gauss objective
        picks a point of it that level 2 then leaves), so level 2 over that set is

            min ½ v̇ᵀ (A₂ᵀA₂ + μ M) v̇ − (A₂ᵀ b₂ + μ Q)ᵀ v̇   s.t.  A₁ v̇ = b₁,  l ≤ C v̇ ≤ u,
            μ = 1e-6 max(‖A₂ N₁‖²_F, 1e-12) / tr(M)   (N₁: the null space of A₁, the μ of the level-by-level form),

        whose solution is the level-by-level one's to the solver's tolerance (the same objective on the same set:
        v̇ = v̇₁ + N₁ z).  One QP of n variables instead of two.  ProxSuite's infeasibility certificate is off for
        it (it declared 11 of 300 feasible effort-carry problems infeasible after 5–8 iterations): a problem that is
        infeasible runs into the budget, and the level-by-level path then decides (``InfeasibleError`` as before).
        Returns (v̇, z, N₁, A₂ N₁, iterations)."""
        A1, b1 = rows[0]
        A2, b2 = rows[1]
        qp = self._qp
        # built and conditioned in one compiled call (``_qp_kernels.merged_problem``) into buffers of its shape
        n, me, m = self.n, A1.shape[0], C.shape[0]
        bufs = self._merged_bufs.get((me, m))
        if bufs is None:
            bufs = self._merged_bufs[(me, m)] = (
                np.empty((n, n)), np.empty(n), np.empty((me, n)), np.empty(me), np.empty(me),
                np.empty((m, n)), np.empty(m), np.empty(m), np.empty(m), np.empty(m, dtype=np.int64),
            )  # fmt: skip
        Hs, gs, As, bs, e, Cs, ls, us, d, bad = bufs
        # (A₂ᵀA₂, A₂ᵀb₂, tr M by NumPy, as before to the bit: the lower levels of a binding effort carry moved by
        # up to 0.8 of max |τ| with a rounding of H, a product by other BLAS calls)
        N1, AN, s, lam, nbad, nempty = _merged_problem(
            A1, b1, A2.T @ A2, A2.T @ b2, A2, M, float(M.trace()), Q, C, l, u,
            self.rank_tol, qp.row_tol, qp.check_tol, Hs, gs, As, bs, e, Cs, ls, us, d, bad,
        )  # fmt: skip
        if N1.shape[1] == 0:
            return None
        # feasible_start: no infeasibility certificate (it fired on feasible thin sets); the caps bound it
        if nbad or nempty:  # a vanished row: dropped or found infeasible as a constant (``BoundedQP.solve``)
            r = self._solve(("seq", "12"), Hs * s, gs * s, A1, b1, C, l, u, True, self.max_step_iters)
        else:
            r = self._solve_conditioned(
                ("seq", "12"), Hs, gs, As, bs, e, None, Cs, ls, us, d, s, lam, True, self.max_step_iters,
                A1, b1, C, l, u,
            )  # fmt: skip
        if not r.solved:
            return None
        return r.x, r.z, N1, AN, r.iters

    def _level_name(self, k: int) -> str:
        L = self.levels[k]
        names = [task.name for task in L.tasks] + (["Gauss"] if L.gauss else [])
        return f"level {k + 1} {names}"

    def binding_limits(
        self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, rtol: float = 1e-6
    ) -> list[str]:
        """The limits that bind at v̇: "<limit> on '<joint>' (lower|upper)" for every row within ``rtol``
        (relative to its bound) of a bound or beyond it."""
        out = []
        tau = self._torque(kin.M @ vdot + hD)  # the torque actually sent (passive joints: mapped)
        for lim in self.limits:
            if isinstance(lim, EffortLimit):  # bounds on that torque, whatever maps it
                y, ll, ul = tau[lim.idx], -lim.tau_max, lim.tau_max
            else:
                Cl, ll, ul = lim.bounds(kin, hD)
                y = Cl @ vdot
            for i, j in enumerate(lim.idx):
                for side, bnd, sgn in (("lower", ll[i], -1.0), ("upper", ul[i], 1.0)):
                    if np.isfinite(bnd) and sgn * (y[i] - bnd) >= -rtol * (1.0 + abs(bnd)):
                        out.append(f"{lim.name} on '{self.robot.joint_names[j]}' ({side})")
        return out

    def _give_way(self, k: int, kin, hD, x, why: str) -> None:
        info = self.info
        info.saturated = True
        self.saturated_steps += 1
        bind = self.binding_limits(kin, hD, x)
        info.gave_way = f"{self._level_name(k)} gave way: {why}; binding: " + (
            ", ".join(bind[:6]) + (" …" if len(bind) > 6 else "") if bind else "none"
        )
