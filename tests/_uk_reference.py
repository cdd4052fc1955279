"""FROZEN REFERENCE for the tests: the UK controller as it was before the `levels` rewrite (issue 11),
kept verbatim so that tests can compare torques of the new implementation against it on recorded
states (to 1e-9 relative).  Not part of the package; do not edit.

Prioritized Udwadia–Kalaba control ([Milioshin] §3.2, §3.5, §4.3).

Model: M(q) v̇ + h(q, v) + D v = τ, so the "given" force without actuation is Q = −h − D v
(D = joint damping, taken into the model because the plant has it) and a = M⁻¹ Q.

Weighted priority (thesis (3.40), solved as (4.2) with ProxSuite's dense solver):

    min_v̇  ½ v̇ᵀ (M + Σᵢ ωᵢ A_uiᵀ A_ui) v̇ + (−Q − Σᵢ ωᵢ A_uiᵀ b_ui)ᵀ v̇
    s.t.   A_c v̇ = b_c                         (hard constraints: coupling)
           −τ_max ≤ M v̇ + h + D v ≤ τ_max       (URDF effort limits, on v̇)

Strict priority (beyond the thesis, ``priority="strict"``): constraints exactly, then the tasks in
weighted least squares within N(A_c), then Gauss' principle in what remains — by null-space
projections (SVD with an explicit rank tolerance):

    v̇₁ = A_c⁺ b_c,            N₁ = null-space basis of A_c
    z  = (W A_u N₁)⁺ W (b_u − A_u v̇₁),   v̇₂ = v̇₁ + N₁ z,   N₂ = N₁ · null(W A_u N₁)
    y  = (N₂ᵀ M N₂)⁻¹ N₂ᵀ (Q − M v̇₂),    v̇* = v̇₂ + N₂ y

If that v̇* would exceed an effort limit, the same hierarchy is solved as two ProxSuite QPs with the
limits as inequalities (tasks within constraints and limits; then Gauss with the task accelerations
fixed).  The torque is τ = M v̇* + h + D v = RNEA(q, v, v̇*) + D v.

Forces reported each step (from the KKT conditions of (4.2), H v̇ + g + A_cᵀ y = 0):
    Q_c = −A_cᵀ y            the hard constraints' generalized force, equal to (3.10) without tasks
    Q_u = Σ ωᵢ A_uiᵀ (b_ui − A_ui v̇*)   the soft tasks' force;   M v̇* = Q + Q_c + Q_u + Q_lim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import proxsuite

from cmstack.controllers.uk_diagnostics import udwadia_kalaba_closed_form  # (3.8), (3.10): written once
from cmstack.models.coupling import Task, stack
from cmstack.models.errors import ConfigError, InfeasibleError, SolverError
from cmstack.models.robot import Kinematics, Robot

_SOLVED = proxsuite.proxqp.QPSolverOutput.PROXQP_SOLVED


def _null_basis(A: np.ndarray, n: int, tol: float):
    """(pinv(A), orthonormal basis of N(A), rank) by SVD with relative rank tolerance ``tol``."""
    if A.shape[0] == 0:
        return np.zeros((n, 0)), np.eye(n), 0
    U, s, Vt = np.linalg.svd(A, full_matrices=True)
    r = int(np.sum(s > tol * max(1.0, s[0]))) if s.size else 0
    pinv = (Vt[:r].T / s[:r]) @ U[:, :r].T
    return pinv, Vt[r:].T, r


@dataclass
class UKStepInfo:
    """What the controller reports every step.  The generalized forces Q_c and Q_u are computed
    on first access (they are diagnostics, not needed for τ)."""

    status: str = "not run"
    vdot: np.ndarray | None = None
    tau: np.ndarray | None = None
    qp_iter: int = 0
    limits_active: bool = False
    _y: np.ndarray | None = None
    _A_c: np.ndarray | None = None
    _A_u: np.ndarray | None = None
    _b_u: np.ndarray | None = None

    @property
    def Qc(self) -> np.ndarray | None:
        """Q_c = −A_cᵀ y, the hard constraints' generalized force ((3.10) when there are no tasks)."""
        if self.vdot is None:
            return None
        return -self._A_c.T @ self._y if self._y is not None else np.zeros_like(self.vdot)

    @property
    def Qu(self) -> np.ndarray | None:
        """Q_u = Σ ωᵢ A_uiᵀ (b_ui − A_ui v̇*), the soft tasks' generalized force."""
        if self.vdot is None:
            return None
        return self._A_u.T @ (self._b_u - self._A_u @ self.vdot)


class UdwadiaKalabaController:
    """τ = UK(t, q, v): hard constraints, weighted soft tasks, effort limits; ProxSuite QP."""

    def __init__(
        self,
        robot: Robot,
        constraints: list[Task],
        tasks: list[Task],
        omega: float | list[float] = 50.0,
        priority: str = "weighted",
        torque_limits: bool = True,
        model_damping: bool = True,
        eps_abs: float = 1e-9,
        rank_tol: float = 1e-9,
    ):
        if priority not in ("weighted", "strict"):
            raise ConfigError(f"priority='{priority}' is not one of ['weighted', 'strict']")
        self.robot = robot
        self.constraints = list(constraints)
        self.tasks = list(tasks)
        om = np.broadcast_to(np.asarray(omega, dtype=float), (len(self.tasks),)).copy()
        if np.any(om <= 0):
            raise ConfigError(f"task weights omega must be > 0, got {om.tolist()}")
        self.omega = om
        self._sqrt_omega = np.sqrt(om)
        self.priority = priority
        self.torque_limits = bool(torque_limits)
        self.D = robot.damping.copy() if model_damping else np.zeros(robot.nv)
        self.tau_max = robot.effort_limit.copy()
        if self.torque_limits and not np.all(self.tau_max > 0):
            bad = [n for n, x in zip(robot.joint_names, self.tau_max) if not x > 0]
            raise ConfigError(
                f"torque_limits=true but joints {bad} have no positive effort limit in {robot.path.name}"
            )
        self.eps_abs = eps_abs
        self.rank_tol = rank_tol
        self.n = robot.nv
        self.n_eq = sum(c.dim for c in self.constraints)
        self._qp = None
        self._qp_strict = None
        self.info = UKStepInfo()
        self.kin: Kinematics | None = None
        self.failures = 0  # steps whose QP stopped short of its tolerance (solution still used if finite)

    # ------------------------------------------------------------------ helpers
    def _new_qp(self, n_eq: int, n_in: int):
        qp = proxsuite.proxqp.dense.QP(self.n, n_eq, n_in)
        qp.settings.eps_abs = self.eps_abs
        qp.settings.eps_rel = 0.0
        qp.settings.verbose = False
        qp.settings.max_iter = 1000
        return qp

    def _solve(self, qp, first: bool, H, g, A, b, C, l, u):
        if first:
            qp.init(H, g, A, b, C, l, u)
        else:
            # the scaling of (4.2) changes little between control steps: keep the first step's
            # Ruiz preconditioner (saves ~20 µs a step; the solution is unchanged to eps_abs)
            qp.update(H, g, A, b, C, l, u, update_preconditioner=False)
        qp.solve()
        if first:
            # Warm start from the previous step from now on.  (ProxSuite 0.8 segfaults if this is
            # switched on between init() and the first solve(): there is no previous result yet.)
            qp.settings.initial_guess = proxsuite.proxqp.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT
        return qp.results

    def _weighted_tasks(self, kin, t):
        if len(self.tasks) == 1:
            A, b = self.tasks[0].compute(kin, t)
            sw = self._sqrt_omega[0]
            return sw * A, sw * b
        rows_A, rows_b = [], []
        for task, w in zip(self.tasks, self.omega):
            A, b = task.compute(kin, t)
            sw = np.sqrt(w)
            rows_A.append(sw * A)
            rows_b.append(sw * b)
        if not rows_A:
            return np.zeros((0, self.n)), np.zeros(0)
        return np.vstack(rows_A), np.concatenate(rows_b)

    def _infeasible(self, A_c, b_c, slices, t, where):
        """Explain an infeasible hard-constraint set: the least-squares residual of each."""
        x = np.linalg.lstsq(A_c, b_c, rcond=None)[0]
        res = A_c @ x - b_c
        parts = [f"{c.name}: residual {np.linalg.norm(res[s]):.3g}" for c, s in zip(self.constraints, slices)]
        return InfeasibleError(
            f"hard constraints are incompatible at t={t:.4f} s ({where}); the least-squares "
            f"residual is {np.linalg.norm(res):.3g} — "
            + "; ".join(parts)
            + ". Remove one of them or make it a soft task."
        )

    # ------------------------------------------------------------------ control
    def __call__(self, t: float, q: np.ndarray, v: np.ndarray, kin: Kinematics | None = None) -> np.ndarray:
        kin = self.robot.update(q, v) if kin is None else kin  # refuses NaN/inf with a clear StateError
        self.kin = kin
        M, h = kin.M, kin.h
        Dv = self.D * v
        Q = -h - Dv
        A_c, b_c, slices = stack(self.constraints, kin, t, self.n)
        A_u, b_u = self._weighted_tasks(kin, t)  # rows scaled by √ωᵢ
        if self.priority == "weighted":
            vdot, y, iters = self._weighted(M, Q, h + Dv, A_c, b_c, A_u, b_u, t, q, v, slices)
            limits_active = False
        else:
            vdot, y, iters, limits_active = self._strict(M, Q, h + Dv, A_c, b_c, A_u, b_u, t, q, v, slices)
        tau = M @ vdot + h + Dv
        info = self.info
        info.status, info.vdot, info.tau, info.qp_iter = "solved", vdot, tau, iters
        info._y, info._A_c, info._A_u, info._b_u = y, A_c, A_u, b_u
        info.limits_active = limits_active
        return tau

    def errors(self, kin: Kinematics, t: float):
        """Pose errors of every constraint and task at (kin, t), by name."""
        return (
            {c.name: c.error(kin, t) for c in self.constraints},
            {c.name: c.error(kin, t) for c in self.tasks},
        )

    def _limits(self, M, hD):
        if not self.torque_limits:
            return None, None, None
        return M, -self.tau_max - hD, self.tau_max - hD

    def _limits_infeasible(self, M, Q, hD, A_c, b_c, t):
        """Hard constraints and effort limits cannot hold together: name the joint whose limit the
        unlimited Gauss solution (3.8) exceeds most (an infeasible QP's iterate means nothing)."""
        x = udwadia_kalaba_closed_form(M, Q, A_c, b_c)[0] if A_c.shape[0] else np.linalg.solve(M, Q)
        tau_free = M @ x + hD
        worst = int(np.argmax(np.abs(tau_free) / self.tau_max))
        return InfeasibleError(
            f"at t={t:.4f} s the hard constraints {[c.name for c in self.constraints]} cannot be met "
            f"within the effort limits (joint '{self.robot.joint_names[worst]}' would need "
            f"{tau_free[worst]:.1f} N·m, limit {self.tau_max[worst]:.1f}); slow the motion or raise the limits"
        )

    def _weighted(self, M, Q, hD, A_c, b_c, A_u, b_u, t, q, v, slices):
        H = M + A_u.T @ A_u
        g = -Q - A_u.T @ b_u
        C, l, u = self._limits(M, hD)
        first = self._qp is None
        if first:
            self._qp = self._new_qp(A_c.shape[0], 0 if C is None else self.n)
        res = self._solve(self._qp, first, H, g, A_c, b_c, C, l, u)
        if res.info.status != _SOLVED:
            self.info.status = str(res.info.status)
            if A_c.shape[0] and np.linalg.norm(A_c @ np.linalg.lstsq(A_c, b_c, rcond=None)[0] - b_c) > 1e-6:
                raise self._infeasible(A_c, b_c, slices, t, f"QP status {res.info.status}")
            if res.info.status == proxsuite.proxqp.QPSolverOutput.PROXQP_PRIMAL_INFEASIBLE:
                raise self._limits_infeasible(M, Q, hD, A_c, b_c, t)
            self.failures += 1
            if np.all(np.isfinite(res.x)) and np.linalg.norm(A_c @ res.x - b_c) < 1e-6 * (
                1 + np.linalg.norm(b_c)
            ):
                return res.x.copy(), res.y.copy(), res.info.iter
            raise SolverError(
                f"UK QP failed at t={t:.4f} s with status {res.info.status} after "
                f"{res.info.iter} iterations; q={np.array2string(q, precision=4)}, "
                f"v={np.array2string(v, precision=4)}"
            )
        return res.x.copy(), res.y.copy(), res.info.iter

    def _strict(self, M, Q, hD, A_c, b_c, A_u, b_u, t, q, v, slices):
        n = self.n
        P1, N1, r1 = _null_basis(A_c, n, self.rank_tol)
        x1 = P1 @ b_c
        if A_c.shape[0] and np.linalg.norm(A_c @ x1 - b_c) > 1e-8 * (1 + np.linalg.norm(b_c)):
            raise self._infeasible(A_c, b_c, slices, t, "strict priority, level 1")
        B = A_u @ N1
        if B.shape[0]:
            PB, NB, _ = _null_basis(B, N1.shape[1], self.rank_tol)
            x2 = x1 + N1 @ (PB @ (b_u - A_u @ x1))
            N2 = N1 @ NB
        else:
            x2, N2 = x1, N1
        if N2.shape[1]:
            Mr = N2.T @ M @ N2
            x = x2 + N2 @ np.linalg.solve(Mr, N2.T @ (Q - M @ x2))
        else:
            x = x2
        # multipliers of the hard constraints: A_cᵀ y = −(M x − Q − A_uᵀ(b_u − A_u x)), in least
        # squares y = (A_cᵀ)⁺ rhs = (A_c⁺)ᵀ rhs, reusing the pseudo-inverse of level 1
        y = None
        if A_c.shape[0]:
            y = P1.T @ (Q + A_u.T @ (b_u - A_u @ x) - M @ x)
        if not self.torque_limits or np.all(np.abs(M @ x + hD) <= self.tau_max * (1 + 1e-9)):
            return x, y, 0, False
        return (*self._strict_qp(M, Q, hD, A_c, b_c, A_u, b_u, t, q, v, slices), True)

    def _strict_qp(self, M, Q, hD, A_c, b_c, A_u, b_u, t, q, v, slices):
        """Strict hierarchy with active effort limits: two ProxSuite QPs.
        QP1: min ‖A_u v̇ − b_u‖² + μ Gauss  s.t. A_c v̇ = b_c, limits
        QP2: min Gauss  s.t. A_c v̇ = b_c, A_u v̇ = A_u v̇₁, limits.
        μ only breaks the ties inside N(A_u) (which QP2 re-decides); it is scaled to 1e-6 of the
        task Hessian's mean eigenvalue so that QP1 stays well conditioned (a fixed tiny μ gave a
        condition number ~1e13 and ProxSuite stopped at its iteration cap)."""
        C, l, u = self._limits(M, hD)
        mu = 1e-6 * max(np.trace(A_u.T @ A_u), 1e-12) / np.trace(M)
        if self._qp_strict is None:
            self._qp_strict = (
                self._new_qp(A_c.shape[0], self.n),
                self._new_qp(A_c.shape[0] + A_u.shape[0], self.n),
            )
            for qp in self._qp_strict:
                qp.settings.max_iter = 10000
            first = True
        else:
            first = False
        r1 = self._solve(
            self._qp_strict[0], first, A_u.T @ A_u + mu * M, -A_u.T @ b_u - mu * Q, A_c, b_c, C, l, u
        )
        if r1.info.status == proxsuite.proxqp.QPSolverOutput.PROXQP_PRIMAL_INFEASIBLE:
            raise self._limits_infeasible(M, Q, hD, A_c, b_c, t)
        if r1.info.status != _SOLVED:
            raise SolverError(f"strict UK QP (level 2 with limits) failed at t={t:.4f} s: {r1.info.status}")
        x1 = r1.x.copy()
        A2 = np.vstack([A_c, A_u])
        b2 = np.r_[b_c, A_u @ x1]
        # v̇₁ meets the limits only to the solver's tolerance: give level 3 a 1e-6 relative margin so
        # that "A_u v̇ = A_u v̇₁ and limits" stays feasible; if it still fails, v̇₁ itself is a valid
        # (level-2 optimal) answer — use it and count the step.
        margin = 1e-6 * self.tau_max
        r2 = self._solve(self._qp_strict[1], first, M, -Q, A2, b2, C, l - margin, u + margin)
        if r2.info.status != _SOLVED:
            self.failures += 1
            return x1, r1.y.copy(), r1.info.iter + r2.info.iter
        return r2.x.copy(), r2.y[: A_c.shape[0]].copy(), r1.info.iter + r2.info.iter
