"""State from the actuators: a closed chain's passive joints reconstructed from its motors' encoders.

A parallel robot, a linkage leg or a parallel ankle measures its actuated joints only.  With the loops
φ(q) = 0 of ``robot.loops`` (models/loops.py) and the joints split q = (q_a, q_p), v = (v_a, v_p) (every joint
1-DoF: q and v share their indices), the passive part of the state is a function of the actuated part
wherever the passive columns J_p of the loops' Jacobian J = [J_a J_p] have full column rank:

    position   φ(q_a, q_p) = 0 with q_a held, by Newton's iteration on the stacked rows
                   q_p ← q_p − J_p⁺(q) φ(q)                                   (J_p⁺: least squares)
               started from the tangent prediction of the previous cycle's solution (q_a⁻, q_p⁻, G⁻)
                   q_p⁰ = q_p⁻ + G⁻ (q_a − q_a⁻),   G = −J_p⁺ J_a   (dq_p = G dq_a on the manifold)
               whose error is second order in the change of q_a, so one or two iterations reach ``tol``;
    rate       φ̇ = J_a v_a + J_p v_p = 0   →   v_p = −J_p⁺ J_a v_a = G v_a,  G at the converged q.

J_p⁺ is the least-squares inverse of the pivoted QR of J_p (``controllers/_passive_kernels.passive_step``,
the compiled iteration ``ActuatedJointsPIDC`` uses; the truncated SVD when J_p is not safely of full rank).
Each iteration is one lean Pinocchio pass (``ClosureSet.phi_and_jacobian``: computeJointJacobians, then the
loops' rows in one compiled call) and one QR; at most ``max_iter`` of them (a bounded time per cycle).

Faults (``SensorFault``, its ``kind`` one of ``FAULTS``), checked every cycle, never a silent wrong answer:

    bad_encoder     an encoder reading (position or rate) that is not a finite number;
    encoder_jump    an encoder whose position change disagrees with its rates by more than ``jump_tol``:
                        |q_a − q_a⁻ − ½ (v_a + v_a⁻) dt| > jump_tol
                    (the trapezoid rule's error is dt³ |q⃛_a| / 12: 1e-10 rad at 1 kHz for a jerk of 1e3 rad/s³,
                    a 2¹⁷-counts-a-turn encoder's quantum is 4.8e-5 rad; a jump or a dead encoder reading 0
                    breaks it by the jump itself).  Needs ``dt`` and rates measured, not differentiated from the
                    positions (then the test is empty: ``jump_tol = inf`` says so);
    no_closure      Newton stalls with max|φ| > tol (the last iteration did not halve the residual): no
                    closure exists near this encoder frame (outside the workspace, an encoder off);
    not_converged   max|φ| > tol after ``max_iter`` iterations while still decreasing: the budget is spent;
    singular        c = |R_pp| / |R_11| < ``singular_tol``, R the pivoted QR factor of J_p at the solution
                    (c ≥ σ_min(J_p)/σ_max(J_p) ≥ c · 3/√(p(4ᵖ + 6p − 1)), [Higham] §20.1): near a parallel
                    singularity the passive rates are not determined by the actuated ones;
    branch_flip     max|q_p − q_p⁰| > ``branch_tol``: the solution left the tangent prediction by more than the
                    motion allows (the prediction's error is ½ |∂²q_p/∂q_a²| |Δq_a|², ≈1e-6 rad for 1 rad/s at
                    1 kHz and unit curvature), e.g. Newton crossing to a five-bar's other elbow assembly.

A fault raises ``SensorFault`` and leaves the estimator's last good solution (the next call warm-starts there).

    est = LoopStateEstimator(robot, dt=0.001)
    q, v = est.reconstruct(q_a, v_a)       # q_a, v_a in robot.actuated_joints order; q, v in model order
    est.iterations, est.residual, est.conditioning, est.prediction_gap   # the last cycle's figures
"""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.controllers._passive_kernels import CONVERGED, STEPPED, layout, passive_step, prepare
from cmstack.controllers.kernels import cholesky_inplace, cholesky_solve_inplace
from cmstack.models.errors import ConfigError, SensorFault, StateError
from cmstack.models.lie import svd_rank
from cmstack.models.loops import ClosureSet
from cmstack.models.robot import Robot

FAULTS = ("bad_encoder", "bad_base", "encoder_jump", "no_closure", "not_converged", "singular", "branch_flip")
"""The named faults of a reconstruction (``SensorFault.kind``); the module docstring says when each is raised."""


class LoopStateEstimator:
    """The state (q, v) of a closed chain from its actuated joints' encoders (module docstring).

    Args:
        robot: a ``Robot`` with ``loops`` and ``passive_joints`` (every joint 1-DoF, no floating base).
        q_guess: a configuration near the first measured one (default ``robot.q_initial``), model order.
        dt: the period between two calls [s], for the encoder-jump test (None: no such test).
        tol: Newton's tolerance on max|φ| (m, rad).
        max_iter: the iteration budget per call (each a Pinocchio pass and a QR of J_p).
        jump_tol: ``encoder_jump`` threshold [rad or m], a number or one per actuated joint (inf: off).
        branch_tol: ``branch_flip`` threshold on max|q_p − q_p⁰| [rad or m] (inf: off).
        singular_tol: ``singular`` threshold on the conditioning estimate c of J_p (0: off).
    """

    def __init__(
        self,
        robot: Robot,
        q_guess: ArrayLike | None = None,
        *,
        dt: float | None = None,
        tol: float = 1e-12,
        max_iter: int = 8,
        jump_tol: float | ArrayLike = 0.05,
        branch_tol: float = 0.1,
        singular_tol: float = 1e-4,
    ) -> None:
        if not robot.loops:
            raise ConfigError(f"LoopStateEstimator: {robot.label} has no loops (robot.loops) to close")
        model = robot.model
        free = [n for n in robot.passive_joints if model.joints[model.getJointId(n)].nv != 1]
        for n in free:
            jm = model.joints[model.getJointId(n)]
            if jm.shortname() != "JointModelFreeFlyer" or model.parents[model.getJointId(n)] != 0:
                raise ConfigError(
                    f"LoopStateEstimator: passive joint '{n}' of {robot.label} ({jm.shortname()}, nv={jm.nv}) is "
                    "neither a 1-DoF joint nor the floating base (a free joint on the world): not reconstructed"
                )
        if len(free) > 1:
            raise ConfigError(
                f"LoopStateEstimator: {robot.label} has {len(free)} floating bases {free}; one is taken"
            )
        if not [n for n in robot.passive_joints if n not in free]:
            raise ConfigError(
                f"LoopStateEstimator: {robot.label} has no passive joints: nothing to reconstruct"
            )
        if dt is not None and not dt > 0:
            raise ConfigError(f"LoopStateEstimator: dt must be > 0 s, got {dt}")
        if not tol > 0 or int(max_iter) < 1:
            raise ConfigError(f"LoopStateEstimator: tol must be > 0 and max_iter >= 1, got {tol}, {max_iter}")
        self.robot = robot
        self.loops = ClosureSet(robot.loops)  # its own Pinocchio data: no controller's snapshot is touched
        self.actuated = list(robot.actuated_joints)
        #: the floating base (a free joint on the world, its pose and twist given with the encoders) or None
        self.base: str | None = free[0] if free else None
        self.passive = [n for n in robot.passive_joints if n != self.base]  # the reconstructed (1-DoF) joints
        self.act = np.array([robot.joint_index(n) for n in self.actuated], dtype=np.int64)  # v (τ) indices
        self.pas = np.array([robot.joint_index(n) for n in self.passive], dtype=np.int64)
        self.act_q = np.array([robot.joint_q_index(n) for n in self.actuated], dtype=np.int64)  # q indices
        self.pas_q = np.array([robot.joint_q_index(n) for n in self.passive], dtype=np.int64)
        if self.base is None:
            self.base_q = self.base_v = np.zeros(0, dtype=np.int64)
        else:
            jb = model.joints[model.getJointId(self.base)]
            self.base_q = np.arange(jb.idx_q, jb.idx_q + 7, dtype=np.int64)  # (x, y, z, qx, qy, qz, qw)
            self.base_v = np.arange(jb.idx_v, jb.idx_v + 6, dtype=np.int64)  # (v, ω) in the base's frame
        nb = self.base_v.size
        self.dt = None if dt is None else float(dt)
        self.tol, self.max_iter = float(tol), int(max_iter)
        a = self.act.size
        jt = np.broadcast_to(np.asarray(jump_tol, dtype=float), (a,)).copy()
        if jt.shape != (a,) or np.any(~(jt > 0)):
            raise ConfigError(
                f"LoopStateEstimator: jump_tol must be > 0 (one or {a} values), got {jump_tol!r}"
            )
        self.jump_tol = jt
        self.branch_tol, self.singular_tol = float(branch_tol), float(singular_tol)
        q0 = robot.q_initial if q_guess is None else q_guess
        q0 = np.array(q0, dtype=float)
        if q0.shape != (robot.nq,) or not np.all(np.isfinite(q0)):
            raise StateError(
                f"LoopStateEstimator: q_guess must be {robot.nq} finite numbers, got {q_guess!r}"
            )
        m, p = self.loops.m, self.pas.size
        ni, nw = layout(m, p, a + nb)
        self._ints = np.zeros(ni, dtype=np.int64)
        # the measured columns of J: the motors', then the base's (G = −J_p⁺ [J_a J_b], v_p = G [v_a; v_b])
        self._ints[:p], self._ints[p : p + a], self._ints[p + a : p + a + nb] = (
            self.pas,
            self.act,
            self.base_v,
        )
        self._ext = self._ints[p : p + a + nb].copy()
        self._w = np.zeros(a + nb)  # [v_a; v_b]
        self._z = np.zeros(robot.nv)  # (floating base) q_p in v's layout, where the kernel steps it
        self._prm = np.array([self.tol, 1e-10])
        self._X = np.zeros((m, max(p, 1)))
        self._work = np.zeros(nw)
        self._G = np.zeros((p, a + nb))
        self._q = q0
        self._qa_prev = np.zeros(a)
        self._base_prev = q0[self.base_q]
        self._va_prev = np.zeros(a)
        self._predict = False
        self._qp0 = np.zeros(p)  # the tangent prediction of this cycle's q_p from the last returned solution
        self._qp_last = np.zeros(p)  # q_p and G of the last returned solution (the branch test's reference)
        self._G_last = np.zeros((p, a + nb))
        self._bound = 3.0 / math.sqrt(p * (4.0**p + 6.0 * p - 1.0))
        #: the last call's figures: Newton iterations (Pinocchio passes), max|φ| at the solution (m, rad), the
        #: conditioning estimate c of J_p, max|q_p − q_p⁰| (rad, m; 0 on the first call)
        self.iterations, self.residual, self.conditioning, self.prediction_gap = 0, math.nan, math.nan, 0.0
        #: over every call: calls, the most iterations, the smallest c, the largest prediction gap
        self.calls, self.max_iterations, self.min_conditioning, self.max_prediction_gap = 0, 0, math.inf, 0.0

    def reset(self, q: ArrayLike | None = None) -> None:
        """Forget the previous cycle: the next call starts Newton from ``q`` (default ``robot.q_initial``) without
        a prediction and skips the jump and branch tests."""
        q = self.robot.q_initial if q is None else q
        self._q = np.array(q, dtype=float)
        self._predict = False

    def warm_start(self, q: ArrayLike) -> None:
        """Start the next call's Newton from ``q`` (model order; its actuated entries are replaced by the encoders)
        instead of the last solution, keeping the jump and branch tests' reference (the last returned solution):
        a start on another branch is then reported as ``branch_flip``, not followed."""
        q = np.asarray(q, dtype=float)
        if q.shape != self._q.shape:
            raise StateError(
                f"LoopStateEstimator.warm_start: q must have {self._q.size} entries, got {q.shape}"
            )
        self._q[:] = q

    @property
    def q(self) -> np.ndarray:
        """The last solution (model order), where the next call starts."""
        return self._q.copy()

    def _fault(self, kind: str, msg: str, joint: str | None = None) -> SensorFault:
        """The fault, the Newton start put back on the last returned solution (a moved start is not kept)."""
        if self._predict:
            self._q[self.pas_q] = self._qp_last
            self._q[self.act_q] = self._qa_prev
            self._q[self.base_q] = self._base_prev
        return SensorFault(kind, f"{kind}: {msg} ({self.robot.label})", joint)

    def reconstruct(
        self, qa: ArrayLike, va: ArrayLike, base_q: ArrayLike | None = None, base_v: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(q, v) in model order from the actuated joints' positions q_a [rad, m] and rates v_a [rad/s, m/s]
        (``robot.actuated_joints`` order), and for a floating base its pose ``base_q`` (x, y, z [m] and the unit
        quaternion qx, qy, qz, qw: Pinocchio's free-joint q) and twist ``base_v`` (linear [m/s] and angular [rad/s]
        velocity in the base's own frame: Pinocchio's free-joint v), as motion capture or an on-board estimator
        gives them: q_p on the loops by Newton, v_p = G [v_a; v_b].  Raises ``SensorFault`` (module docstring) and
        then keeps the previous solution."""
        qa = np.asarray(qa, dtype=float)
        va = np.asarray(va, dtype=float)
        act, pas = self.act, self.pas
        if qa.shape != act.shape or va.shape != act.shape:
            raise StateError(
                f"LoopStateEstimator: expected {act.size} positions and rates of {self.actuated}, got shapes "
                f"{qa.shape} and {va.shape}"
            )
        floating = self.base is not None
        if floating != (base_q is not None and base_v is not None):
            raise StateError(
                f"LoopStateEstimator: {self.robot.label} "
                + (
                    f"has a floating base '{self.base}': give its pose base_q (7) and twist base_v (6)"
                    if floating
                    else "has no floating base: base_q and base_v are not taken"
                )
            )
        G, X, ints, prm, work = self._G, self._X, self._ints, self._prm, self._work
        if floating:
            assert base_q is not None and base_v is not None  # (checked above; says so to mypy)
            q, v, z, w = self._start_floating(qa, va, base_q, base_v)
        else:
            n = self.robot.nq
            q, v = np.empty(n), np.empty(n)
            if not prepare(qa, va, self._q, self._qa_prev, G, ints, self._predict, q, v):
                bad = [
                    j for j, x, y in zip(self.actuated, qa, va) if not (math.isfinite(x) and math.isfinite(y))
                ]
                raise self._fault("bad_encoder", f"encoder(s) {bad} read {qa!r}, rates {va!r}", bad[0])
            z, w = q, va  # (1-DoF joints: q and v share their indices)
        if self._predict and self.dt is not None:
            dev = np.abs(qa - self._qa_prev - 0.5 * (va + self._va_prev) * self.dt)
            over = dev > self.jump_tol
            if over.any():
                k = int(np.argmax(np.where(over, dev / self.jump_tol, 0.0)))
                raise self._fault(
                    "encoder_jump",
                    f"encoder '{self.actuated[k]}' moved {qa[k] - self._qa_prev[k]:+.4g} in one cycle where its "
                    f"rates allow {0.5 * (va[k] + self._va_prev[k]) * self.dt:+.4g} (|difference| {dev[k]:.3g} > "
                    f"jump_tol {self.jump_tol[k]:.3g})",
                    self.actuated[k],
                )
        qp0 = self._qp0
        if (
            self._predict and not floating
        ):  # from the last returned solution (the Newton start's unless it was moved)
            np.matmul(self._G_last, qa - self._qa_prev, out=qp0)
            qp0 += self._qp_last
        pas_q, ext = self.pas_q, self._ext
        st, k, r_prev, r = STEPPED, 0, math.inf, math.inf
        cond = math.nan
        while k < self.max_iter + 1:
            phi, J = self.loops.phi_and_jacobian(q)
            r_prev, r = r, float(np.max(np.abs(phi)))
            if k == self.max_iter and not r <= self.tol:
                break  # budget spent: one more pass only to measure the residual
            k += 1
            st = passive_step(phi, J, z, v, w, G, X, ints, prm, work)
            if st == CONVERGED:
                p = pas.size
                cond = float(abs(X[p - 1, p - 1]) / abs(X[0, 0]))
                break
            if st == STEPPED:
                if floating:
                    q[pas_q] = z[pas]
                continue
            # FALLBACK: J_p not safely of full rank (or not finite): the truncated SVD decides
            svd = svd_rank(J[:, pas], rtol=1e-10)
            s = svd.s
            if r <= self.tol:
                cond = float(s[-1] / s[0]) if s.size and s[0] > 0 else 0.0
                Jp = svd.pinv()
                G[:] = -(Jp @ J[:, ext])
                v[pas] = G @ w
                st = CONVERGED
                break
            q[pas_q] -= svd.pinv() @ phi
            z[pas] = q[pas_q]
            if not np.all(np.isfinite(q)):
                break
        self.iterations = k
        self.residual = r
        if st != CONVERGED:
            kind = "no_closure" if not (r <= 0.5 * r_prev) or not math.isfinite(r) else "not_converged"
            worst = self.loops.residuals(q) if math.isfinite(r) else [math.nan] * len(self.loops.closures)
            i = int(np.nanargmax(worst)) if np.isfinite(worst).any() else 0
            c = self.loops.closures[i]
            raise self._fault(
                kind,
                f"the encoders {dict(zip(self.actuated, np.round(qa, 6).tolist()))} leave loop '{c.name}' open "
                f"by {r:.3g} (m or rad) after {k} Newton iterations (tol {self.tol:g}, max_iter {self.max_iter})",
            )
        self.conditioning = cond
        qp = q[pas_q]
        gap = float(np.max(np.abs(qp - qp0))) if self._predict else 0.0
        self.prediction_gap = gap
        if not cond >= self.singular_tol:
            raise self._fault(
                "singular",
                f"the passive joints {self.passive} are not determined by the encoders here: J_p's conditioning "
                f"estimate {cond:.3g} < singular_tol {self.singular_tol:g} (a parallel singularity)",
            )
        if gap > self.branch_tol:
            j = int(np.argmax(np.abs(qp - qp0)))
            raise self._fault(
                "branch_flip",
                f"passive joint '{self.passive[j]}' came out {qp[j] - qp0[j]:+.4g} from its prediction "
                f"{qp0[j]:.6g} (> branch_tol {self.branch_tol:g}): the loops closed on another branch",
                self.passive[j],
            )
        self._q[:] = q
        self._qp_last[:] = qp
        self._G_last[:] = G
        self._qa_prev[:] = qa
        self._va_prev[:] = va
        if floating:
            self._base_prev[:] = q[self.base_q]
        self._predict = True
        self.calls += 1
        self.max_iterations = max(self.max_iterations, k)
        self.min_conditioning = min(self.min_conditioning, cond)
        self.max_prediction_gap = max(self.max_prediction_gap, gap)
        return q, v

    def _start_floating(
        self, qa: np.ndarray, va: np.ndarray, base_q: ArrayLike, base_v: ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The Newton start of a floating-base robot: (q, v, z, w) with q = the last solution, the encoders and the
        base pose written in, and, after a returned solution, q_p moved along the loops' tangent,
        q_p⁰ = q_p⁻ + G⁻ [Δq_a; Δb], Δb = log(b⁻⁻¹ b) the base's motion in its frame (``pin.difference``); v = 0
        but v_a and the twist; z = q_p in v's layout (where ``passive_step`` steps it), w = [v_a; v_b].  A
        reading that is not finite, or a quaternion whose norm is not 1 within 1e-6, raises ``bad_encoder`` /
        ``bad_base``."""
        bq = np.asarray(base_q, dtype=float)
        bv = np.asarray(base_v, dtype=float)
        if bq.shape != (7,) or bv.shape != (6,):
            raise StateError(
                f"LoopStateEstimator: the base '{self.base}' needs a pose of 7 numbers (x, y, z, qx, qy, qz, qw) "
                f"and a twist of 6, got shapes {bq.shape} and {bv.shape}"
            )
        if not (np.isfinite(qa).all() and np.isfinite(va).all()):
            bad = [j for j, x, y in zip(self.actuated, qa, va) if not (math.isfinite(x) and math.isfinite(y))]
            raise self._fault("bad_encoder", f"encoder(s) {bad} read {qa!r}, rates {va!r}", bad[0])
        nrm = float(np.linalg.norm(bq[3:]))
        if not (np.isfinite(bq).all() and np.isfinite(bv).all() and abs(nrm - 1.0) <= 1e-6):
            raise self._fault(
                "bad_base",
                f"the base '{self.base}' pose {bq!r} (quaternion norm {nrm:.9g}) or twist {bv!r} is not a pose and "
                "a twist",
                self.base,
            )
        q = self._q.copy()
        q[self.act_q] = qa
        q[self.base_q] = bq
        a = qa.size
        if self._predict:  # the tangent prediction from the last returned solution
            dq = pin.difference(self.robot.model, self._q, q)
            qp0 = self._qp0
            np.matmul(self._G_last, dq[self._ext], out=qp0)
            qp0 += self._qp_last
            q[self.pas_q] = qp0
        v = np.zeros(self.robot.nv)
        v[self.act] = va
        v[self.base_v] = bv
        w = self._w
        w[:a], w[a:] = va, bv
        z = self._z
        z[self.pas] = q[self.pas_q]
        return q, v, z, w

    def stats(self) -> dict[str, float]:
        """The figures over every call (for metrics.json)."""
        return {
            "estimator_calls": self.calls,
            "estimator_iterations_max": self.max_iterations,
            "estimator_conditioning_min": self.min_conditioning,
            "estimator_prediction_gap_max": self.max_prediction_gap,
        }


class DelayPredictor:
    """The state a closed chain will be in one control period ahead, from the model's own forward dynamics: what a
    law across a process boundary (``cmstack rt``) should answer, since the torque computed from the state published
    at t_k is applied from t_{k+1} on (sim/rt_driver.py: one cycle of delay, as on a real robot).

    **Derivation.**  The model's rigid closed-chain dynamics, joint damping D as the plant's:

        M(q) v̇ + h(q, v) + D v = τ + Jᵀλ,      J v̇ + J̇v = 0      (J: the loops' Jacobian, ``ClosureSet``),

    with the joints split v = (v_a, v_p) (motors, passive) and J_p of full column rank (the estimator's condition),
    every v̇ on the loops is v̇ = T v̇_a + c with

        T = [I; G],  G = −J_p⁺ J_a,      c = [0; −J_p⁺ J̇v]

    (J v̇ = (J_a + J_p G) v̇_a − J_p J_p⁺ J̇v = −J̇v wherever J_a's and J̇v's columns lie in J_p's range, as on a
    closed state).  J T = 0, so Tᵀ Jᵀλ = 0 and projecting the dynamics on T removes λ:

        (Tᵀ M T) v̇_a = Tᵀ (τ − b),      b = M c + h(q, v) + D v = rnea(q, v, c) + D v.

    (Without loops T = I, c = 0: v̇ = M⁻¹ (τ − h − D v).)  Over the period h_p the torque τ is held (the one being
    applied: the previous command), and one semi-implicit Euler step on the joint manifold gives

        v⁺ = v + h_p v̇,      q⁺ = q ⊕ h_p v⁺   (``pin.integrate``),

    whose error against the model's exact flow is h_p² (|v̇| + …)/2 in q and O(h_p²) in v (the unpredicted state's,
    q(t + h_p) − q(t), is h_p |v|: one order less).  q⁺ is then put back on the loops, the motors held: Newton on
    the passive joints q_p ← q_p − J_p⁺ φ(q) (it starts O(h_p²) off the manifold, ~1e-7 m: one step, then a
    pass that finds |φ| ≤ ``tol``), and v⁺ on their tangent, v_p⁺ = G(q⁺) v_a⁺ (the Euler v_p⁺ differs from it by
    O(h_p²)), G from that last pass.

    Cost: one closure pass (J, J̇v) at (q, v), ``crba`` and ``rnea``, one compiled QR of J_p for G and J_p⁺ J̇v
    together, two closure passes and QRs for the projection (tests/test_delay_predictor.py checks
    v̇ against ``ProjectionPlant.accel``, the O(h_p²) order of the prediction against a fine integration of the same
    dynamics, and its error one period ahead of the MuJoCo plant).

    Args:
        robot: the law's model (its ``loops``, ``actuated_joints``, ``damping``); a fixed base (a floating base's
            motion depends on contacts the model does not have: refused).
        dt: the default horizon h_p [s] (the control period).
        tol: Newton's tolerance on max|φ| of the projection (m, rad); max_iter: its iteration budget.

    ``predict(q, v, tau, h=None)`` returns (q⁺, v⁺) (model order); ``failures`` counts projections that did not
    reach ``tol`` (the caller then keeps the measured state)."""

    def __init__(self, robot: Robot, dt: float, *, tol: float = 1e-12, max_iter: int = 6) -> None:
        if not dt > 0:
            raise ConfigError(f"DelayPredictor: dt must be > 0 s, got {dt}")
        if robot.floating_base is not None:
            raise ConfigError(
                f"DelayPredictor: {robot.label} has a floating base '{robot.floating_base}': its motion depends on "
                "contacts the model does not have; not predicted"
            )
        if robot.loops and robot.nq != robot.nv:
            raise ConfigError(
                f"DelayPredictor: {robot.label} closes loops over joints that are not all 1-DoF (nq {robot.nq}, "
                f"nv {robot.nv}); not predicted"
            )
        self.robot, self.dt, self.tol, self.max_iter = robot, float(dt), float(tol), int(max_iter)
        model = robot.model
        self._data = model.createData()
        self.loops = ClosureSet(robot.loops) if robot.loops else None
        nv = robot.nv
        if self.loops is None:
            self.act = np.arange(nv, dtype=np.int64)
        else:
            self.act = np.array([robot.joint_index(n) for n in robot.actuated_joints], dtype=np.int64)
        motors = set(self.act.tolist())
        self.pas = np.array([i for i in range(nv) if i not in motors], dtype=np.int64)
        a, p = self.act.size, self.pas.size
        m = self.loops.m if self.loops is not None else 0
        self.D = robot.damping.copy()
        self._T = np.zeros((nv, a))
        self._T[self.act, np.arange(a)] = 1.0
        self._c = np.zeros(nv)
        self._lower = np.tril_indices(nv, -1)
        self._S = np.zeros((a, a))
        # passive_step's tables: the motors' columns (the projection's G), and those plus J̇v as column nv of
        # [J  J̇v] (G_ext = −J_p⁺ [J_a  J̇v]: T's G and c's −J_p⁺ J̇v from one QR)
        ni, nw = layout(m, p, a + 1)
        self._ints = np.zeros(ni, dtype=np.int64)
        self._ints[:p], self._ints[p : p + a], self._ints[p + a] = self.pas, self.act, nv
        self._ints_proj = np.zeros(layout(m, p, a)[0], dtype=np.int64)
        self._ints_proj[:p], self._ints_proj[p : p + a] = self.pas, self.act
        self._Jx = np.zeros((m, nv + 1))
        self._Gx = np.zeros((p, a + 1))
        self._G = np.zeros((p, a))
        self._X = np.zeros((m, max(p, 1)))
        self._work = np.zeros(nw)
        self._zero_m = np.zeros(m)
        self._zero_w = np.zeros(a + 1)
        self._scratch_v = np.zeros(nv)
        self._prm = np.array([self.tol, 1e-10])
        self.vdot = np.zeros(nv)  #: the last prediction's v̇ (model order)
        self.iterations = 0  #: the last projection's Newton iterations
        self.residual = 0.0  #: max|φ| where the last failed projection stopped (m, rad)
        self.failures = 0

    def warm_up(self) -> None:
        """One prediction at the model's initial pose, at rest, unforced, its figures then forgotten: the compiled
        kernels are loaded (tens of ms the first time) before a timed loop calls ``predict``."""
        r = self.robot
        self.predict(r.q_initial.copy(), np.zeros(r.nv), np.zeros(r.nv))
        self.iterations, self.residual, self.failures = 0, 0.0, 0

    def accel(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """v̇ (model order) of the rigid closed-chain dynamics at (q, v) under τ (class docstring); also kept in
        ``vdot``.  A StateError where J_p is not safely of full column rank (the estimator's ``singular``)."""
        m, d = self.robot.model, self._data
        T, c, a = self._T, self._c, self.act.size
        if self.loops is not None:
            _, J, jdv = self.loops._pass(q, v)
            Jx, Gx = self._Jx, self._Gx
            Jx[:, :-1] = J
            Jx[:, -1] = jdv
            st = passive_step(
                self._zero_m,
                Jx,
                self._scratch_v,
                self._scratch_v,
                self._zero_w,
                Gx,
                self._X,
                self._ints,
                self._prm,
                self._work,
            )
            if st != CONVERGED:
                raise StateError(
                    f"DelayPredictor: the passive joints of {self.robot.label} are not determined here"
                )
            T[self.pas] = Gx[:, :a]
            c[self.pas] = Gx[:, a]
        M = pin.crba(m, d, q)  # (its upper triangle)
        M[self._lower] = M.T[self._lower]
        b = pin.rnea(m, d, q, v, c)
        b += self.D * v
        S = self._S
        np.matmul(T.T, M @ T, out=S)
        rhs = T.T @ (tau - b)
        if not cholesky_inplace(S, a):
            raise StateError(
                f"DelayPredictor: the reduced inertia of {self.robot.label} is not positive definite"
            )
        cholesky_solve_inplace(S, a, rhs)
        np.matmul(T, rhs, out=self.vdot)
        self.vdot += c
        return self.vdot

    def predict(
        self, q: np.ndarray, v: np.ndarray, tau: np.ndarray, h: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(q⁺, v⁺): the state ``h`` s (default ``dt``) after (q, v) with ``tau`` held [N·m, N], on the loops (class
        docstring).  A projection that does not converge (or a J_p not safely of full column rank) counts in
        ``failures`` and returns the measured (q, v)."""
        h = self.dt if h is None else float(h)
        model = self.robot.model
        try:
            vd = self.accel(q, v, tau)
        except StateError:
            self.failures += 1
            return q.copy(), v.copy()
        v1 = v + h * vd
        q1 = pin.integrate(model, q, h * v1)
        if self.loops is None:
            self.iterations, self.residual = 0, 0.0
            return q1, v1
        va1 = v1[self.act]
        G, X, ints, prm, work = self._G, self._X, self._ints_proj, self._prm, self._work
        st, k = STEPPED, 0
        phi = self._zero_m
        while k <= self.max_iter:
            phi, J, _ = self.loops._pass(q1, None)
            st = passive_step(phi, J, q1, v1, va1, G, X, ints, prm, work)
            if st != STEPPED:
                break
            k += 1
        self.iterations = k
        if st != CONVERGED:
            self.residual = float(np.max(np.abs(phi)))
            self.failures += 1
            return q.copy(), v.copy()
        return q1, v1
