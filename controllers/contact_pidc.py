"""Projected inverse-dynamics control (PIDC, [Aghili] §7) of a floating-base robot standing on point contacts, its legs
closed chains (issue 31, item 2: contacts in PIDC).

Model (``models/contact.py``; world axes for the contact forces, Pinocchio's v ∈ ℝⁿ):

    M v̇ + h + D v = τ + J_hᵀ λ,      J_h = [J_l; J_c],  λ = [λ_l; f]                         (1)

J_l the loops' rows (``robot.loops``), J_c the stacked rows of the **active** contacts (``PointContact.rows``), f
their forces on the robot (N).  The stance contacts are closures to the ground like the loops: together they are
PIDC's constraint A = J_h, with the acceleration constraint

    J_h v̇ = b_h = [b_l; b_c]    (b_l = −J̇_l v − K_d J_l v − K_p φ: the loops' own gains, ``LoopClosure.qp_rows``;
                                 b_c = −J̇_c v (− K_d J_c v − K_p (p − p₀)): the contacts' rows)

**Projector.**  SVD J_h = U Σ Vᵀ, the singular values at or below ``rank_tol`` σ_max dropped (rank r; the level
stance of planar legs has a sideways sway that J_h constrains only at second order, σ ~ 1e-7 σ_max or exactly 0:
left out, as ``ContactUKController`` does, so that no force is asked of a pattern that moves the robot by 1e-6 of
the others): J̄_h = U_r Σ_r V_rᵀ, A⁺ = V_r Σ_r⁻¹ U_rᵀ, P = I − V_r V_rᵀ (the projector onto N(J̄_h), (4), (15)).

**Motion (7.1, task coordinates).**  The admissible accelerations are (I − P) v̇ = A⁺ b_h (13) (the closures'
own error ODE, PIDC's ``stabilize``); among them, the one whose task rows A_t v̇ = b_t (``Task.qp_rows``: the base
pose, a swing foot, stacked, each row times √w) hold in the least-squares sense:

    v̇_des = A⁺ b_h + P z,   z = (A_t P)⁺ (b_t − A_t A⁺ b_h)   [− k (I − (A_t P)⁺ A_t P) v with ``null_damping`` k]

so the task rows that the stance leaves free obey ë + K_d ė + K_p e = 0 (Theorem 4).  With b = M v̇_des + h + D v,
the potent torque is τ_∥ = P b (45), the minimum-norm input that produces v̇_des.

**Passive coordinates (7.4).**  The floating base's 6 coordinates and the joints without a motor (``passive``,
default ``robot.passive_joints``) must get exactly zero torque, (I − B) τ = 0 (55).  PIDC adds an impotent input,
τ = τ_∥ + (I − P) ν (56), which moves nothing and only changes the constraint forces: from (1) projected on
range(I − P), the constraint force is f_c = (I − P)(M v̇ + h + D v − τ) = (I − P) b − (I − P) ν (32).  Writing the
impotent input through the multipliers, (I − P) ν = (I − P) b − J̄_hᵀ λ (every vector of range(I − P) is a J̄_hᵀ λ),

    τ = b − J̄_hᵀ λ,      (I − B) τ = 0  ⇔  G λ = S_P b,   G = S_P J̄_hᵀ                                    (57)

solvable iff S_P b ∈ range(G) (58; the residual ‖G G⁺ S_P b − S_P b‖ is reported, ``on_unsolvable``), and the
solutions are λ = λ_p + N_G ξ, λ_p = G⁺ S_P b, N_G a basis of null(G): the **internal forces** (the stance's
squeezing patterns, and the planar loops' multipliers that do nothing).  The paper's choice (59–62) is the one of
least ‖(I − P) ν‖, i.e. of least actuated torque (τ_∥ ⊥ (I − P) ν):

    ξ₀ = (K N_G)⁺ (b_A − K λ_p),   K = S_A J̄_hᵀ,   τ_A = b_A − K λ                                        (59)

(the minimum-norm least-squares ξ: it equals τ = {I − (I − P)[(I − B)(I − P)]⁺(I − B)} τ_∥ of (60–62), tested).

**The internal forces inside the friction pyramids.**  Each active contact's force f_i must lie in its inner pyramid
(``PointContact.cone_rows``: C_i f_i ≤ 0, row 0 the unilateral f_n ≥ 0; ``cone_margin`` = min −C_i f_i).  When
(59)'s forces are inside every pyramid they are kept; otherwise the internal forces are chosen by a small ProxSuite
QP in ξ (``controllers/qp.py: BoundedQP``), the least actuated torque ε-regularised:

    min_ξ ½ ‖b_A − K (λ_p + N_G ξ)‖² + ½ ε ‖λ_p + N_G ξ‖²   s.t.  C_i f_i(ξ) ≤ −``cone_eps``  (each active i)

(ε = ``force_reg`` × the largest diagonal entry of KᵀK, at least 1: makes the QP strictly convex in the directions
that do not move τ).  The motion v̇_des is not changed by the choice (P (J̄_hᵀ λ) = 0).  If no ξ puts every force
inside its pyramid (the motion asks for more friction than μ gives, or a pull on the ground), the law raises
``InfeasibleError`` naming the contacts outside (``on_infeasible="raise"``, the default) or keeps (59)'s forces,
sets ``info.status`` = "cone_infeasible" and counts the step in ``cone_violations`` (``on_infeasible="report"``,
what ``ContactUKController`` does).

τ = Sᵀ τ_A: zero on the passive coordinates exactly (assigned, not computed); ``info.passive_residual`` =
‖S_P (b − J̄_hᵀ λ)‖_∞, the torque they would have needed (round-off when (58) holds).

Against the UK law (``controllers/contact_uk.py``): the same constraints, passive condition and force choice; the
motion differs: PIDC's v̇ is the projected one above (one level of tasks, least squares, minimum ‖z‖ in the
directions the tasks leave free) where UK runs strict levels and Gauss' principle last.  Limits (effort,
position) are not enforced.  Every step is NumPy (four SVDs of at most 24 × 24 on the quadruped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cmstack.controllers.contact_uk import (
    ContactStepInfo,
    check_nonnegative,
    checked_contacts,
    loop_pass,
    passive_split,
)
from cmstack.controllers.qp import BoundedQP
from cmstack.models.contact import PointContact
from cmstack.models.coupling import Task
from cmstack.models.errors import ConfigError, InfeasibleError
from cmstack.models.robot import Kinematics, Robot

__all__ = ["ContactPIDC", "ContactPIDCInfo"]

#: relative truncation of the task pseudo-inverse (A_t P)⁺ and of (K N_G)⁺ (PIDC's ``_RTOL``)
_RTOL = 1e-10


@dataclass(kw_only=True)
class ContactPIDCInfo(ContactStepInfo):
    """One step of ``ContactPIDC``: the fields of ``ContactStepInfo`` (vdot = v̇_des, tau, forces {contact: f (3,),
    N, world}, cone_margin {contact: N}, cone_margin_min, passive_residual (N·m), cone_qp), and tau_par = τ_∥ = P b
    (N·m), rank of J̄_h, solvable (condition (58)), lam (all multipliers: loops' then contacts'), task_residual
    ‖(A_t P)ᵀ (A_t v̇_des − b_t)‖ (the least-squares optimality of the tasks' rows)."""

    tau_par: np.ndarray | None = None
    rank: int = 0
    solvable: bool = True
    lam: np.ndarray | None = None
    task_residual: float = 0.0


def _parse_tasks(tasks: Any) -> list[tuple[Task, float]]:
    """(task, √w) pairs from a Task, or a list of tasks or (task, weight) pairs."""
    items = [tasks] if isinstance(tasks, Task) else list(tasks)
    out = []
    for it in items:
        task, w = (it, 1.0) if isinstance(it, Task) else it
        if not isinstance(task, Task):
            raise ConfigError(f"ContactPIDC tasks: {task!r} is not a Task (e.g. a FrameTask)")
        w = float(w)
        if not (math.isfinite(w) and w > 0.0):
            raise ConfigError(f"ContactPIDC tasks: the weight of '{task.name}' must be > 0, got {w!r}")
        out.append((task, math.sqrt(w)))
    if not out:
        raise ConfigError("ContactPIDC: give at least one task (e.g. a FrameTask on the base)")
    return out


class ContactPIDC:
    """τ = PIDC(t, q, v) on a floating-base robot standing on point contacts, with loops and passive joints (module
    docstring).

    Args:
        robot: the model (``Robot``; ``robot.loops``, ``robot.passive_joints`` with the free joint among them).
        contacts: the ``PointContact`` objects; only the active ones (``set_active``) are constraints and push.
        tasks: PIDC's task coordinates: a ``Task`` or a list of tasks or (task, weight) pairs, one level, least
            squares (e.g. a ``FrameTask`` on the base; with a lifted foot, its ``FrameTask`` beside it).
        passive: the passive joints (default ``robot.passive_joints``); their coordinates get zero torque.
        model_damping: include the joint damping D (N·m·s/rad).
        rank_tol: relative rank tolerance of J_h (its singular values ≤ rank_tol σ_max dropped).
        force_rank_tol: relative rank tolerance of G = S_P J̄_hᵀ.
        force_reg: ε of the cone QP, relative to the largest diagonal entry of KᵀK (at least 1).
        cone_eps: the QP keeps each force this far inside each facet (N), so that the margins are ≥ 0 despite its
            tolerance.
        null_damping: k (1/s) on the velocity in the directions the tasks leave free (0: none).
        solve_tol: condition (58) holds when its residual is ≤ solve_tol · max(1, ‖b‖).
        on_unsolvable: "report" (status "unsolvable", counted in ``unsolvable_steps``) or "raise" (InfeasibleError).
        on_infeasible: "raise" (InfeasibleError naming the contacts outside their pyramids) or "report" (status
            "cone_infeasible", counted in ``cone_violations``, the minimum-torque forces kept).
    """

    def __init__(
        self,
        robot: Robot,
        contacts: Sequence[PointContact],
        tasks: Any,
        passive: Sequence[str] | None = None,
        *,
        model_damping: bool = True,
        rank_tol: float = 1e-6,
        force_rank_tol: float = 1e-6,
        force_reg: float = 1e-8,
        cone_eps: float = 1e-6,
        null_damping: float = 0.0,
        solve_tol: float = 1e-8,
        on_unsolvable: str = "report",
        on_infeasible: str = "raise",
    ):
        self.robot = robot
        self.n = robot.nv
        self.contacts = checked_contacts(robot, contacts)
        self.tasks = _parse_tasks(tasks)
        self.loops = list(getattr(robot, "loops", []) or [])
        self._cset = loop_pass(self.loops)  # (the loops' rows in one compiled pass when every loop allows it)
        self.passive_joints, self._P, self._A = passive_split(robot, passive)
        self.D = robot.damping.copy() if model_damping else np.zeros(self.n)
        check_nonnegative(
            "ContactPIDC: ",
            (
                ("rank_tol", rank_tol),
                ("force_rank_tol", force_rank_tol),
                ("force_reg", force_reg),
                ("cone_eps", cone_eps),
                ("null_damping", null_damping),
                ("solve_tol", solve_tol),
            ),
        )
        if on_unsolvable not in ("report", "raise"):
            raise ConfigError(
                f"ContactPIDC: on_unsolvable={on_unsolvable!r} is not one of ['report', 'raise']"
            )
        if on_infeasible not in ("report", "raise"):
            raise ConfigError(
                f"ContactPIDC: on_infeasible={on_infeasible!r} is not one of ['raise', 'report']"
            )
        self.rank_tol, self.force_rank_tol = float(rank_tol), float(force_rank_tol)
        self.force_reg, self.cone_eps = float(force_reg), float(cone_eps)
        self.null_damping, self.solve_tol = float(null_damping), float(solve_tol)
        self.on_unsolvable, self.on_infeasible = on_unsolvable, on_infeasible
        self._qp = BoundedQP(eps_abs=1e-9, max_iter=40, max_iter_in=25)
        self.info = ContactPIDCInfo()
        self.kin: Kinematics | None = None
        self.cone_violations = 0  # steps whose forces could not be kept in the pyramids ("cone_infeasible")
        self.cone_qp_steps = 0  # steps that needed the cone QP
        self.unsolvable_steps = 0  # steps where (58) failed

    # ------------------------------------------------------------------ rows
    def _rows(self, kin: Kinematics, t: float, act: list) -> tuple[np.ndarray, np.ndarray, int]:
        """(J_h, b_h, number of loop rows): the loops' ``qp_rows`` then the active contacts' ``rows``."""
        As, bs = [], []
        cs = self._cset
        if (
            cs is not None
        ):  # b_l = −J̇_l v − K_d J_l v − K_p φ, each loop's own gains (``LoopClosure.qp_rows``)
            J, jdv = cs.jacobian_and_jdot_v(kin.q, kin.v)
            phi, Jv = cs.phi(kin.q), J @ kin.v
            b = -jdv
            for c, s in zip(cs.closures, cs.slices):
                b[s] -= c.kd * Jv[s] + c.kp * phi[s]
            As.append(J)
            bs.append(b)
        else:
            for c in self.loops:
                A, b = c.qp_rows(kin, t)
                As.append(A)
                bs.append(b)
        nl = sum(a.shape[0] for a in As)
        for c in act:
            A, b = c.rows(kin)
            As.append(A)
            bs.append(b)
        if not As:
            return np.zeros((0, self.n)), np.zeros(0), 0
        return np.vstack(As), np.concatenate(bs), nl

    def _task_rows(self, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        As, bs = [], []
        for task, sw in self.tasks:
            A, b = task.qp_rows(kin, t)
            As.append(sw * A)
            bs.append(sw * b)
        return np.vstack(As), np.concatenate(bs)

    # ------------------------------------------------------------------ the step
    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ (nv,) at (t, q, v): zero on the passive coordinates, the motors' torques on the others."""
        robot, n = self.robot, self.n
        kin = robot.update(q, v)  # StateError naming a non-finite entry or a wrong size
        self.kin = kin
        M, v = kin.M, kin.v
        hD = kin.h + self.D * v
        act = [c for c in self.contacts if c.active]
        Jh, bh, nl = self._rows(kin, t, act)
        m = Jh.shape[0]
        # the projector (module docstring): J_h's SVD truncated at rank_tol σ_max
        if m:
            U, s, Vt = np.linalg.svd(Jh, full_matrices=True)
            r = int((s > self.rank_tol * s[0]).sum()) if s[0] > 0 else 0
        else:
            U, s, Vt, r = np.zeros((0, 0)), np.zeros(0), np.eye(n), 0
        V0 = Vt[r:].T  # P = V₀V₀ᵀ
        P = V0 @ V0.T
        Cv = Vt[:r].T @ ((U[:, :r].T @ bh) / s[:r])  # A⁺ b_h
        # the motion (7.1): v̇_des = A⁺ b_h + P z, z = (A_t P)⁺ (b_t − A_t A⁺ b_h); with P = V₀V₀ᵀ (orthonormal
        # columns) (A_t P)⁺ = V₀ (A_t V₀)⁺: one SVD of A_t V₀ (k × (n − r)) instead of A_t P (k × n)
        At, bt = self._task_rows(kin, t)
        AV = At @ V0
        Ut, st, Vtt = np.linalg.svd(AV, full_matrices=False)
        kt = int((st > _RTOL * st[0]).sum()) if st.size and st[0] > 0 else 0
        W = V0 @ Vtt[:kt].T  # orthonormal basis of range((A_t P)ᵀ)
        z = W @ ((Ut[:, :kt].T @ (bt - At @ Cv)) / st[:kt])
        if self.null_damping:
            kv = self.null_damping * v
            z = z - (kv - W @ (W.T @ kv))
        vdot = Cv + P @ z
        AP = At @ P
        b = M @ vdot + hD
        tau_par = P @ b
        Jbar = (U[:, :r] * s[:r]) @ Vt[:r]  # J̄_h
        lam, status, used_qp, pres, solvable = self._forces(t, q, b, Jbar, act, nl)
        tau_full = b - Jbar.T @ lam
        tau = np.zeros(n)
        tau[self._A] = tau_full[self._A]
        info = ContactPIDCInfo(status=status, vdot=vdot, tau=tau, tau_par=tau_par, rank=r, lam=lam)
        info.solvable, info.cone_qp, info.passive_residual = solvable, used_qp, pres
        info.forces = {c.name: lam[nl + 3 * i : nl + 3 * i + 3].copy() for i, c in enumerate(act)}
        info.cone_margin = {c.name: c.cone_margin(info.forces[c.name]) for c in act}
        info.cone_margin_min = min(info.cone_margin.values()) if act else math.inf
        info.task_residual = float(np.linalg.norm(AP.T @ (At @ vdot - bt)))
        self.info = info
        return tau

    def _forces(
        self, t: float, q: np.ndarray, b: np.ndarray, Jbar: np.ndarray, act: list, nl: int
    ) -> tuple[np.ndarray, str, bool, float, bool]:
        """λ (module docstring, "Passive coordinates" and "internal forces"): (λ, status, cone QP used, passive
        residual, (58) holds)."""
        m = Jbar.shape[0]
        P, A = self._P, self._A
        if m == 0:
            pres = float(np.abs(b[P]).max()) if P.size else 0.0
            return np.zeros(0), "solved", False, pres, True
        G = Jbar.T[P]  # S_P J̄_hᵀ
        K = Jbar.T[A]  # τ_A = b_A − K λ
        if P.size:
            Ug, sg, Vgt = np.linalg.svd(G, full_matrices=True)
            kg = int((sg > self.force_rank_tol * sg[0]).sum()) if sg.size and sg[0] > 0 else 0
            lam_p = Vgt[:kg].T @ ((Ug[:, :kg].T @ b[P]) / sg[:kg])
            Ng = Vgt[kg:].T
        else:
            lam_p, Ng = np.zeros(m), np.eye(m)
        # (59): the minimum-norm least-squares ξ of min ‖b_A − K (λ_p + N_G ξ)‖
        KN = K @ Ng
        r_a = b[A] - K @ lam_p
        if KN.shape[1]:
            Uk, sk, Vkt = np.linalg.svd(KN, full_matrices=False)
            kk = int((sk > _RTOL * sk[0]).sum()) if sk[0] > 0 else 0
            lam = lam_p + Ng @ (Vkt[:kk].T @ ((Uk[:, :kk].T @ r_a) / sk[:kk]))
        else:
            lam = lam_p
        res_p = b[P] - G @ lam
        pres = float(np.abs(res_p).max()) if P.size else 0.0
        solvable = pres <= self.solve_tol * max(1.0, float(np.linalg.norm(b)))
        if not solvable:
            self.unsolvable_steps += 1
            if self.on_unsolvable == "raise":
                raise InfeasibleError(
                    f"ContactPIDC at t={t:.4f} s: the motors cannot produce the desired motion with zero torque on "
                    f"the passive coordinates {self.passive_joints} (residual {pres:.3g} N·m, condition (58))"
                )
        status = "solved" if solvable else "unsolvable"
        if not act:
            return lam, status, False, pres, solvable
        margins = {c.name: c.cone_margin(lam[nl + 3 * i : nl + 3 * i + 3]) for i, c in enumerate(act)}
        if min(margins.values()) >= 0.0:
            return lam, status, False, pres, solvable
        # the cone QP in ξ
        nz = Ng.shape[1]
        sol = None
        if nz:
            self.cone_qp_steps += 1
            Cf = np.zeros((sum(c.facets + 1 for c in act), m))
            r0 = 0
            for i, c in enumerate(act):
                C = c.cone_rows()
                Cf[r0 : r0 + C.shape[0], nl + 3 * i : nl + 3 * i + 3] = C
                r0 += C.shape[0]
            H = K.T @ K
            eps = self.force_reg * max(float(np.max(np.diag(H), initial=0.0)), 1.0)
            H[np.diag_indices(m)] += eps
            Hz = Ng.T @ H @ Ng
            gz = Ng.T @ (H @ lam_p - K.T @ b[A])
            Cz = Cf @ Ng
            u = -self.cone_eps - Cf @ lam_p
            res = self._qp.solve(
                ("cone", nz, Cz.shape[0]), Hz, gz, C=Cz, l=np.full(u.shape, -np.inf), u=u, warm=False
            )
            if res.status != "infeasible" and res.feasible:
                sol = lam_p + Ng @ res.x
        if sol is not None:
            pres = float(np.abs(b[P] - G @ sol).max()) if P.size else 0.0
            return sol, status, True, pres, solvable
        outside = {k: round(x, 6) for k, x in margins.items() if x < 0.0}
        if self.on_infeasible == "raise":
            mu = {c.name: c.mu for c in act}
            raise InfeasibleError(
                f"ContactPIDC at t={t:.4f} s: no internal force keeps contacts {sorted(outside)} inside their friction "
                f"pyramids (μ {mu}; least-torque margins {outside} N) while producing the desired motion with the "
                f"stance {[c.name for c in act]}; q={np.round(q, 6).tolist()}"
            )
        self.cone_violations += 1
        return lam, "cone_infeasible", nz > 0, pres, solvable
