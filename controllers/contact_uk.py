"""Udwadia–Kalaba control of a floating-base robot on point contacts, its legs closed chains (issue 31).

Model (world axes for the contact forces, Pinocchio's v; ``models/contact.py``):

    M v̇ + h + D v = Sᵀ τ + J_lᵀ λ_l + J_cᵀ f                                          (1)

with J_l the loops' rows (``robot.loops``), J_c the stacked rows of the **active** contacts, f their forces on the
robot (N), S the selection of the actuated coordinates.  The passive coordinates P (the floating base's 6 and the
joints without a motor, ``robot.passive_joints``) get **exactly zero torque**: S_P (M v̇ + h + D v − J_hᵀ λ) = 0,
J_h = [J_l; J_c], λ = [λ_l; f].

**Motion: strict levels on v̇ (the UK hierarchy).**  Level 0 is hard and holds, stacked,

    J_c v̇ = −J̇_c v (− K_d J_c v − K_p (p − p₀))     the active contacts (``PointContact.rows``)
    J_l v̇ = b_l                                       the loops (``LoopClosure.qp_rows``: Baumgarte terms)
    U_⊥ᵀ S_P M v̇ = −U_⊥ᵀ S_P (h + D v)                the passive rows: (1) has a λ with τ_P = 0 iff y = M v̇ + h + D v
                                                      has U_⊥ᵀ S_P y = 0, U_⊥ the left null space of G = S_P J_hᵀ

Then each level k of tasks (``levels``, weighted within a level by √ω), strictly below the ones above, and Gauss'
principle last (min ½ (v̇ − a)ᵀ M (v̇ − a), a = −M⁻¹ (h + D v)), all by null-space projections with truncated
SVDs (a rank-revealing solve: the level stance of ``mjcf/quadruped_five_bar.xml`` is rank deficient and nearby
states nearly so; a singular value below ``rank_tol`` σ_max of a level is left out):

    v̇₀ = E₀⁺ b₀,  N₀ = null(E₀)
    v̇_k = v̇_{k−1} + N_{k−1} (A_k N_{k−1})⁺ (b_k − A_k v̇_{k−1}),  N_k = N_{k−1} null(A_k N_{k−1})
    v̇* = v̇_K + N_K z,  (N_Kᵀ M N_K) z = −N_Kᵀ (M v̇_K + h + D v)

**Forces: the internal forces inside the friction pyramids.**  With y = M v̇* + h + D v, every λ with G λ = S_P y
realises v̇* with τ_P = 0, and τ_A = S_A (y − J_hᵀ λ).  The stance's internal forces (and the planar loops'
out-of-plane multipliers) make λ not unique; the controller takes the least actuated torque, ε-regularised, with
every active contact's force in its inner pyramid (``PointContact.cone_rows``: C_i f_i ≤ 0, kept at −``cone_eps``):

    min_λ ½ ‖S_A (y − J_hᵀ λ)‖² + ½ ε ‖λ‖²   s.t.  G λ = S_P y,   C_i f_i ≤ −cone_eps  (each active contact i)

solved on λ = λ_p + N_G z (λ_p = G⁺ S_P y, N_G = null(G)): first without the cones (a linear solve); when a force
leaves its pyramid, as a ProxSuite QP in z (``controllers/qp.py: BoundedQP``, the cone rows as inequalities).  If
that QP has no solution (the motion asked for needs more friction than μ gives, or a pull on the ground), the
unconstrained forces are kept, ``info.status`` is "cone_infeasible" and ``cone_violations`` counts the step.

**Nearly singular stance.**  A level stance of planar legs lets the base sway sideways (roll with a lateral shift)
at first order: J_h has a singular value ~1e-7 of its largest there.  Level 0 leaves that direction out
(``rank_tol``), and the reactions do too (``truncate_reactions``): J_h is replaced in G, in τ_A and in the force
choice by its truncated SVD (the singular values below ``rank_tol`` σ_max dropped), so that no force is asked of a
pattern that moves the robot by less than 1e-6 of the others.  Keeping it (the rigid model's answer) asked the
three stance feet of a foot lift for lateral squeezing forces of ±36 N (±66,000 N in the rigid dynamics), far
outside any friction cone, while the plant's own contact forces stayed inside with 0.5 N to spare; the sway's
acceleration is then the one the passive rows leave (the U_⊥ rows of the truncated G).

τ = Sᵀ τ_A (τ_P = 0 exactly); ``info`` reports v̇*, τ, each active contact's force f (N, world) and cone margin
(``PointContact.cone_margin``), ``passive_residual`` = ‖S_P (y − J_hᵀ λ)‖_∞ (N·m or N: the torque the passive
coordinates would need; zero to round-off), each level's residual ‖A_k v̇* − b_k‖.

Limits (effort, position) are not enforced by this law (the quadruped's motors saturate at ±20 N·m in the plant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cmstack.controllers.base import StepInfo
from cmstack.controllers.qp import BoundedQP
from cmstack.controllers.uk_levels import _parse_level
from cmstack.models.contact import PointContact
from cmstack.models.errors import ConfigError
from cmstack.models.loops import ClosureSet, LoopClosure
from cmstack.models.robot import Kinematics, Robot

__all__ = ["ContactStepInfo", "ContactUKController"]


@dataclass(kw_only=True)
class ContactStepInfo(StepInfo):
    """One step of ``ContactUKController``: vdot (nv,), tau (nv,), forces {contact: f (3,), N, world} and
    cone_margin {contact: N} of the active contacts, cone_margin_min (N; +inf without contacts), passive_residual
    (N·m), level_residuals (one per level, level 0 first), cone_qp (the cones needed the QP)."""

    vdot: np.ndarray | None = None
    tau: np.ndarray | None = None
    forces: dict = field(default_factory=dict)
    cone_margin: dict = field(default_factory=dict)
    cone_margin_min: float = math.inf
    passive_residual: float = 0.0
    level_residuals: list = field(default_factory=list)
    cone_qp: bool = False


def _svd_rank(A: np.ndarray, tol: float | np.floating) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    U, s, Vt = np.linalg.svd(A, full_matrices=True)
    k = int((s > tol).sum()) if s.size else 0
    return U, s, Vt, k


class ContactUKController:
    """τ = UK(t, q, v) on a floating-base robot with point contacts, loops and passive joints (module docstring).

    Args:
        robot: the model (``Robot``; ``robot.loops`` and ``robot.passive_joints``, the free joint among them).
        contacts: the ``PointContact`` objects; only the active ones (``set_active``) hold and push.
        levels: the task levels below the hard one, strict between levels: each a list of tasks or
            (task, weight) pairs (``models/coupling.py``: ``FrameTask`` on the base, ``CenterOfMassTask``,
            swing-foot ``FrameTask``s, ``PostureTask`` on the actuated joints).  Gauss' principle is last.
        passive: the passive joints (default ``robot.passive_joints``); their coordinates get zero torque.
        model_damping: include the joint damping D (N·m·s/rad).
        rank_tol: relative rank tolerance of each level's truncated SVD (and of the reactions').
        force_rank_tol: relative rank tolerance of G = S_P J_hᵀ.
        truncate_reactions: drop J_h's singular values below ``rank_tol`` from the reactions (module docstring).
        force_reg: ε of the force choice, relative to the largest diagonal entry of the torque term.
        cone_eps: the force is kept this far inside each facet (N), so that the reported margins are ≥ 0 despite
            the QP's tolerance.
    """

    def __init__(
        self,
        robot: Robot,
        contacts: Sequence[PointContact],
        levels: Sequence = (),
        passive: Sequence[str] | None = None,
        *,
        model_damping: bool = True,
        rank_tol: float = 1e-6,
        force_rank_tol: float = 1e-6,
        truncate_reactions: bool = True,
        force_reg: float = 1e-8,
        cone_eps: float = 1e-6,
    ):
        self.robot = robot
        self.n = robot.nv
        for c in contacts:
            if not isinstance(c, PointContact):
                raise ConfigError(f"contacts: {c!r} is not a PointContact")
            if c.robot is not robot:
                raise ConfigError(f"contact '{c.name}' was made for another Robot")
        names = [c.name for c in contacts]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise ConfigError(f"contacts: the names {dup} are used twice")
        self.contacts = list(contacts)
        self.levels = [_parse_level(L, k + 1) for k, L in enumerate(levels)]
        if any(L.gauss for L in self.levels):
            raise ConfigError("levels: GAUSS is implied (the last level); do not name it")
        self.loops = list(getattr(robot, "loops", []) or [])
        # the loops' rows in one compiled pass (``ClosureSet``: φ, J, J̇v of every loop) when each loop is a plain
        # LoopClosure with the kind's row maths, whole rows and world-axes errors; else each loop's ``qp_rows``
        self._cset: ClosureSet | None = None
        if self.loops and all(
            isinstance(c, LoopClosure)
            and type(c).qp_rows is LoopClosure.qp_rows
            and type(c).compute is LoopClosure.compute
            and getattr(c, "error_axes", "world") == "world"
            for c in self.loops
        ):
            try:
                self._cset = ClosureSet(self.loops)
            except ConfigError:  # rows kept or row maths of its own: the per-loop path
                self._cset = None
        pas = list(robot.passive_joints) if passive is None else list(passive)
        self.passive_joints = pas
        self._P = np.asarray(robot.v_indices(pas), dtype=np.int64)
        actm = np.ones(self.n, dtype=bool)
        actm[self._P] = False
        self._A = np.flatnonzero(actm)
        self.D = robot.damping.copy() if model_damping else np.zeros(self.n)
        for what, x in (
            ("rank_tol", rank_tol),
            ("force_rank_tol", force_rank_tol),
            ("force_reg", force_reg),
            ("cone_eps", cone_eps),
        ):
            if not (math.isfinite(float(x)) and float(x) >= 0.0):
                raise ConfigError(f"{what} must be a finite number >= 0, got {x!r}")
        self.rank_tol = float(rank_tol)
        self.force_rank_tol = float(force_rank_tol)
        self.truncate_reactions = bool(truncate_reactions)
        self.force_reg = float(force_reg)
        self.cone_eps = float(cone_eps)
        self._qp = BoundedQP(eps_abs=1e-9, max_iter=40, max_iter_in=25)
        self.info = ContactStepInfo()
        self.kin: Kinematics | None = None
        self.cone_violations = (
            0  # steps whose forces could not be kept in the cones (status "cone_infeasible")
        )
        self.cone_qp_steps = 0  # steps that needed the cone QP
        self._margins: list[float] | None = None

    # ------------------------------------------------------------------ the step
    def _rows(self, tasks_w, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        As, bs = [], []
        for task, sw in tasks_w:
            A, b = task.qp_rows(kin, t)
            As.append(sw * A)
            bs.append(sw * b)
        if not As:
            return np.zeros((0, self.n)), np.zeros(0)
        return np.vstack(As), np.concatenate(bs)

    def _loop_rows(self, kin: Kinematics) -> tuple[np.ndarray, np.ndarray]:
        """(J_l, b_l) of every loop from one ``ClosureSet`` pass: b_l = −J̇_l v − K_d J_l v − K_p φ, each loop's own
        gains (``Task.compute`` on the whole rows, as ``LoopClosure.qp_rows`` gives them)."""
        cs = self._cset
        assert cs is not None
        phi, J, jdv = cs._pass(kin.q, kin.v)
        Jv = J @ kin.v
        b = np.empty(cs.m)
        for c, s in zip(cs.closures, cs.slices):
            b[s] = -jdv[s] - c.kd * Jv[s] - c.kp * phi[s]
        return J.copy(), b

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ (nv,) at (t, q, v): zero on the passive coordinates, the motors' torques on the others."""
        robot = self.robot
        kin = robot.update(q, v)
        self.kin = kin
        n = self.n
        M = kin.M
        hD = kin.h + self.D * kin.v
        act = [c for c in self.contacts if c.active]
        # level 0: the contacts, the loops, then the passive rows
        if self._cset is not None:
            Jl, bl = self._loop_rows(kin)
        else:
            Jl, bl = self._rows([(c, 1.0) for c in self.loops], kin, t)
        cr = [c.rows(kin) for c in act]
        Jc = np.vstack([J for J, _ in cr]) if cr else np.zeros((0, n))
        bc = np.concatenate([b for _, b in cr]) if cr else np.zeros(0)
        Jh = np.vstack((Jl, Jc))
        if self.truncate_reactions and Jh.shape[0]:
            # the reactions the rows can be relied on for: J_h without its singular values below rank_tol σ_max
            # (module docstring, "Nearly singular stance")
            Uh, sh, Vh = np.linalg.svd(Jh, full_matrices=False)
            kh = int((sh > self.rank_tol * sh[0]).sum())
            Jh = (Uh[:, :kh] * sh[:kh]) @ Vh[:kh]
        P, A = self._P, self._A
        G = Jh.T[P]  # S_P J_hᵀ
        E0, b0 = np.vstack((Jc, Jl)), np.concatenate((bc, bl))
        gsvd = None
        if P.size:
            # one SVD of G per step: its left null space gives the passive rows, its pseudo-inverse and null
            # space the forces (_forces)
            gsvd = _svd_rank(G, self.force_rank_tol * (np.linalg.norm(G) if G.size else 0.0))
            Ug, kg = gsvd[0], gsvd[3]
            Uperp = Ug[:, kg:]
            if Uperp.shape[1]:
                SPM = M[P]
                E0 = np.vstack((E0, Uperp.T @ SPM))
                b0 = np.concatenate((b0, -Uperp.T @ hD[P]))
        # the cascade (module docstring)
        x = np.zeros(n)
        N: np.ndarray | None = None  # the null-space basis so far; None: the identity (before level 0's rows)
        residuals = []
        for E, b in [(E0, b0)] + [self._rows(list(zip(L.tasks, L.sqrt_w)), kin, t) for L in self.levels]:
            if E.shape[0] == 0:
                residuals.append(0.0)
                continue
            if N is None or N.shape[1]:
                EN = E if N is None else E @ N  # N = I: E itself, no product
                scale = np.linalg.norm(E)
                U, s, Vt, kr = _svd_rank(EN, self.rank_tol * scale)
                r = b - E @ x
                if kr:
                    dz = Vt[:kr].T @ ((U[:, :kr].T @ r) / s[:kr])
                    x = x + (dz if N is None else N @ dz)
                N = Vt[kr:].T if N is None else N @ Vt[kr:].T
            residuals.append(float(np.linalg.norm(E @ x - b)))  # (level 0 inconsistent: its least squares)
        if N is None:
            N = np.eye(n)
        if N.shape[1]:
            MN = M @ N
            z = np.linalg.solve(N.T @ MN, -N.T @ (M @ x + hD))
            x = x + N @ z
        vdot = x
        y = M @ vdot + hD
        # the forces (module docstring)
        lam, status, used_qp = self._forces(y, Jh, gsvd, act, Jl.shape[0])
        tau_full = y - Jh.T @ lam
        tau = np.zeros(n)
        tau[A] = tau_full[A]
        info = self.info
        info.status = status
        info.cone_qp = used_qp
        info.vdot, info.tau = vdot, tau
        nl = Jl.shape[0]
        info.forces = {c.name: lam[nl + 3 * i : nl + 3 * i + 3].copy() for i, c in enumerate(act)}
        mg = self._margins  # _forces' margins of the λ it returned (None: recompute, after the cone QP)
        if mg is None:
            mg = [c.cone_margin(info.forces[c.name]) for c in act]
        info.cone_margin = {c.name: x for c, x in zip(act, mg)}
        info.cone_margin_min = min(info.cone_margin.values()) if act else math.inf
        info.passive_residual = float(np.abs(tau_full[P]).max()) if P.size else 0.0
        info.level_residuals = residuals
        return tau

    def _forces(self, y, Jh, gsvd, act, nl) -> tuple[np.ndarray, str, bool]:
        """λ (module docstring, "Forces"); gsvd: the step's ``_svd_rank`` of G = S_P J_hᵀ (None without passive
        coordinates)."""
        m = Jh.shape[0]
        self._margins = None
        if m == 0:
            return np.zeros(0), "solved", False
        P, A = self._P, self._A
        K = Jh.T[A]  # τ_A = y_A − K λ
        if gsvd is not None:
            U, s, Vt, k = gsvd
            lam_p = Vt[:k].T @ ((U[:, :k].T @ y[P]) / s[:k]) if k else np.zeros(m)
            Ng = Vt[k:].T
        else:
            lam_p, Ng = np.zeros(m), np.eye(m)
        H = K.T @ K
        eps = self.force_reg * max(float(np.max(np.diag(H), initial=0.0)), 1.0)
        H = H + eps * np.eye(m)
        g = -K.T @ y[A]
        if Ng.shape[1] == 0:
            lam = lam_p
        else:
            Hz = Ng.T @ H @ Ng
            gz = Ng.T @ (H @ lam_p + g)
            lam = lam_p + Ng @ np.linalg.solve(Hz, -gz)
        if not act:
            return lam, "solved", False
        margins = [c.cone_margin(lam[nl + 3 * i : nl + 3 * i + 3]) for i, c in enumerate(act)]
        self._margins = margins
        if min(margins) >= 0.0:
            return lam, "solved", False
        if Ng.shape[1] == 0:  # no internal force to choose
            self.cone_violations += 1
            return lam, "cone_infeasible", False
        # the cone QP in z (λ = λ_p + N_G z)
        self.cone_qp_steps += 1
        Cf = np.zeros((sum(c.facets + 1 for c in act), m))
        r0 = 0
        for i, c in enumerate(act):
            C = c.cone_rows()
            Cf[r0 : r0 + C.shape[0], nl + 3 * i : nl + 3 * i + 3] = C
            r0 += C.shape[0]
        Cz = Cf @ Ng
        u = -self.cone_eps - Cf @ lam_p
        l = np.full(u.shape, -np.inf)
        res = self._qp.solve(("cone", Ng.shape[1], Cz.shape[0]), Hz, gz, C=Cz, l=l, u=u, warm=False)
        if res.status == "infeasible" or not res.feasible:
            self.cone_violations += 1
            return lam, "cone_infeasible", True
        self._margins = None  # λ moved: the step recomputes them
        return lam_p + Ng @ res.x, "solved", True
