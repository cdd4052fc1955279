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

Implementation: by default the rows come from one ``pin.computeAllTerms`` through the compiled frame table and the
algebra runs compiled (``controllers/_contact_kernels.py``: J_h's SVD by warm-started Jacobi, G's rank certified by a
Cholesky, the levels by Jacobi, Gauss by Cholesky; the same τ as the NumPy path to round-off, tests/
test_contact_kernels.py); ``compiled=False``, a loop outside the compiled encoding, no passive coordinate or a G
of deficient row rank take the NumPy path written out above (``_numpy``).

Limits (effort, position) are not enforced by this law (the quadruped's motors saturate at ±20 N·m in the plant).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pinocchio as pin

from cmstack.controllers.base import StepInfo
from cmstack.controllers.qp import BoundedQP
from cmstack.controllers.uk_levels import _parse_level
from cmstack.models import _params
from cmstack.models import contact as _contact_model
from cmstack.models.com import CenterOfMassTask
from cmstack.models.contact import PointContact
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.errors import ConfigError
from cmstack.models.loops import ClosureSet, LoopClosure
from cmstack.models.robot import Kinematics, Robot
from cmstack.models.step_engine import FrameSlots, data_addresses

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


_perf = time.perf_counter


def _contact_kernels():
    from cmstack.controllers import _contact_kernels  # numba: imported on first use, compiled once (cache)

    return _contact_kernels


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
        compiled: False: every row from a ``Kinematics`` in Python and the algebra in NumPy (the reference the
            compiled step, ``controllers/_contact_kernels.py``, is tested against; the same τ to round-off).
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
        compiled: bool = True,
    ):
        self.robot = robot
        self.n = robot.nv
        self.contacts = checked_contacts(robot, contacts)
        self.levels = [_parse_level(L, k + 1) for k, L in enumerate(levels)]
        if any(L.gauss for L in self.levels):
            raise ConfigError("levels: GAUSS is implied (the last level); do not name it")
        self.loops = list(getattr(robot, "loops", []) or [])
        self._cset = loop_pass(self.loops)
        self.passive_joints, self._P, self._A = passive_split(robot, passive)
        self.D = robot.damping.copy() if model_damping else np.zeros(self.n)
        check_nonnegative(
            "",
            (
                ("rank_tol", rank_tol),
                ("force_rank_tol", force_rank_tol),
                ("force_reg", force_reg),
                ("cone_eps", cone_eps),
            ),
        )
        self.rank_tol = float(rank_tol)
        self.force_rank_tol = float(force_rank_tol)
        self.truncate_reactions = bool(truncate_reactions)
        self.force_reg = float(force_reg)
        self.cone_eps = float(cone_eps)
        self._qp = BoundedQP(eps_abs=1e-9, max_iter=40, max_iter_in=25)
        self.info = ContactStepInfo()
        self._kin: Kinematics | None = None
        self._last: tuple | None = None  # (q, v, robot generation) of the last compiled step
        self.cone_violations = (
            0  # steps whose forces could not be kept in the cones (status "cone_infeasible")
        )
        self.cone_qp_steps = 0  # steps that needed the cone QP
        self._margins: list[float] | None = None
        self._buf: dict = {}  # the compiled step's buffers, per (rows, active set)
        self._Vw = np.eye(self.n)  # J_h's right singular vectors of the last step (svd_jacobi's warm start)
        self._nsvd = 0  # svd_jacobi's calls (it re-orthonormalises _Vw every 16th)
        self.compiled = bool(compiled)
        # None: the rows in Python (not compiled, or a loop the plan does not compile)
        self._plan = _RowPlan.make(self) if self.compiled else None
        self._clock: list | None = None  # bench/legged.py: the step's clocks (perf_counter) appended here

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

    @property
    def kin(self) -> Kinematics | None:
        """The last step's state as a ``Kinematics`` (q, v, M, h; frames on demand), made when asked for: the
        compiled step does not build one."""
        if self._kin is None and self._last is not None:
            q, v, gen = self._last
            robot = self.robot
            if robot.generation == gen:  # the robot's data still holds the step's pass
                M, h = robot.dynamics_views()
                self._kin = Kinematics(robot, q, v, M.copy(), h.copy(), gen)
            else:
                self._kin = robot.update(q, v)
        return self._kin

    @kin.setter
    def kin(self, kin: Kinematics | None) -> None:
        self._kin = kin

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """τ (nv,) at (t, q, v): zero on the passive coordinates, the motors' torques on the others."""
        robot = self.robot
        n = self.n
        act = [c for c in self.contacts if c.active]
        plan = self._plan
        ck = self._clock
        if ck is not None:
            ck.append(_perf())
        if plan is not None:  # the rows from one Pinocchio pass, compiled (_RowPlan)
            q, v = robot.state_arrays(q, v)
            if not math.isfinite(q @ q + v @ v):
                robot.refuse_state(q, v)
            M, h = robot.update_in_place(q, v)
            if ck is not None:
                ck.append(_perf())
            q, v = q.copy(), v.copy()
            self._kin, self._last = None, (q, v, robot.generation)
            Jh, bh, levels, nl = plan.rows(t, q, v, M, h, act)
            if self._P.size and Jh.shape[0]:
                tau = self._compiled(M, h, v, Jh, bh, levels, act, nl, ck)
                if tau is not None:
                    return tau
            hD = h + self.D * v
            Jl, bl, Jc, bc = Jh[:nl], bh[:nl], Jh[nl:], bh[nl:]
        else:  # every row in Python, from a Kinematics
            kin = robot.update(q, v)
            self._kin, self._last = kin, None
            M = kin.M
            hD = kin.h + self.D * kin.v
            if self._cset is not None:
                Jl, bl = self._loop_rows(kin)
            else:
                Jl, bl = self._rows([(c, 1.0) for c in self.loops], kin, t)
            cr = [c.rows(kin) for c in act]
            Jc = np.vstack([J for J, _ in cr]) if cr else np.zeros((0, n))
            bc = np.concatenate([b for _, b in cr]) if cr else np.zeros(0)
            levels = [self._rows(list(zip(L.tasks, L.sqrt_w)), kin, t) for L in self.levels]
            Jh, bh = np.vstack((Jl, Jc)), np.concatenate((bl, bc))
            nl = Jl.shape[0]
        # not compiled, no passive coordinate, no row, or G not of full row rank: the NumPy path
        vdot, tau_full, lam, residuals, status, used_qp = self._numpy(M, hD, Jh, Jl, bl, Jc, bc, levels, act)
        if ck is not None:
            ck.append(_perf())
        P, A = self._P, self._A
        tau = np.zeros(n)
        tau[A] = tau_full[A]
        info = self.info
        info.status = status
        info.cone_qp = used_qp
        info.vdot, info.tau = vdot, tau
        info.forces = {c.name: lam[nl + 3 * i : nl + 3 * i + 3].copy() for i, c in enumerate(act)}
        mg = self._margins  # the margins of the λ returned (None: recompute, after the cone QP)
        if mg is None:
            mg = [c.cone_margin(info.forces[c.name]) for c in act]
        info.cone_margin = {c.name: x for c, x in zip(act, mg)}
        info.cone_margin_min = min(info.cone_margin.values()) if act else math.inf
        info.passive_residual = float(np.abs(tau_full[P]).max()) if P.size else 0.0
        info.level_residuals = residuals
        if ck is not None:
            ck.append(_perf())
        return tau

    # ------------------------------------------------------------------ the compiled algebra
    def _buffers(self, m: int, act: list) -> _Buffers:
        """The compiled step's buffers for m reaction rows and this active set (made once per set)."""
        key = (m, tuple(id(c) for c in act))
        buf = self._buf.get(key)
        if buf is None:
            buf = self._buf[key] = _Buffers(self.n, self._P.size, m, len(self.levels), act)
        return buf

    def _compiled(self, M, h, v, Jh, bh, levels, act, nl, ck) -> np.ndarray | None:
        """τ from the plan's rows: one LAPACK SVD of J_h, then the algebra in one compiled call
        (``controllers/_contact_kernels.py: algebra``), the cone QP when a force leaves its pyramid, and ``info``.
        None when G = S_P J_hᵀ is not of full row rank (the NumPy path then adds the passive rows)."""
        if ck is not None:
            ck.append(_perf())
        K = _contact_kernels()
        b = self._buffers(Jh.shape[0], act)
        Uh, sh, Vth = b.Uh, b.sh, b.Vth
        self._nsvd += 1
        if (
            K.svd_jacobi(Jh, self._Vw, Uh, sh, Vth, self._nsvd % 16 == 0) >= K.JACOBI_SWEEPS
        ):  # (LAPACK's then)
            self._Vw[:] = np.eye(self.n)
            Uh, sh, Vth = np.linalg.svd(Jh)
        if ck is not None:
            ck.append(_perf())
        E, f, sizes = levels
        ok, Ng, least, pres = K.algebra(
            M, h, self.D, v, Jh, bh, Uh, sh, Vth, self.rank_tol, self.truncate_reactions, self._P, self._A,
            self.force_rank_tol, self.force_reg, E, f, sizes, b.Cf3, b.crow, nl, b.Jk, b.G, b.S, b.S0, b.hD, b.x, b.N,
            b.res, b.y, b.lam, b.lam_p, b.Hz, b.gz, b.tau_full, b.tau, b.mg, b.F,
        )  # fmt: skip
        if not ok:
            return None
        if ck is not None:
            ck.append(_perf())
        info = self.info
        status, used_qp = "solved", False
        if least < 0.0:  # a force outside its pyramid: the cone QP on the internal forces
            lam, status = self._cone_qp(b.lam, b.lam_p, Ng, b.Hz, b.gz, act, nl, Jh.shape[0])
            used_qp = Ng.shape[1] > 0
            if lam is not b.lam:
                K.torque(b.Jk, b.y, lam, b.tau_full)
                pres = K.finish(b.tau_full, lam, nl, self._P, self._A, b.tau, b.F)
                least = K.margins(lam, nl, b.Cf3, b.crow, b.mg)
        info.status, info.cone_qp = status, used_qp
        info.vdot, info.tau = b.x.copy(), b.tau.copy()
        F = b.F.copy()
        info.forces = dict(zip(b.names, F))
        info.cone_margin = dict(zip(b.names, b.mg.tolist()))
        info.cone_margin_min = least if act else math.inf
        info.passive_residual = pres
        info.level_residuals = b.res.tolist()
        if ck is not None:
            ck.append(_perf())
        return info.tau

    def _cone_qp(self, lam, lam_p, Ng, Hz, gz, act, nl, m) -> tuple[np.ndarray, str]:
        """The internal forces inside the pyramids (module docstring): the ProxSuite QP in z, λ = λ_p + N_G z.
        Returns (λ, status); the unconstrained λ itself when the QP has no solution or there is no z."""
        if Ng.shape[1] == 0:  # no internal force to choose
            self.cone_violations += 1
            return lam, "cone_infeasible"
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
            return lam, "cone_infeasible"
        self._margins = None  # λ moved: the step recomputes them
        return lam_p + Ng @ res.x, "solved"

    # ------------------------------------------------------------------ the NumPy path
    def _numpy(self, M, hD, Jh, Jl, bl, Jc, bc, levels, act):
        """The step's algebra in NumPy (module docstring), for the cases the compiled path does not take (no passive
        coordinate, no reaction row, G rank deficient).  Returns (v̇, y − J_hᵀ λ, λ, level residuals, status,
        cone QP used)."""
        n = self.n
        if self.truncate_reactions and Jh.shape[0]:
            # the reactions the rows can be relied on for: J_h without its singular values below rank_tol σ_max
            # (module docstring, "Nearly singular stance")
            Uh, sh, Vh = np.linalg.svd(Jh, full_matrices=False)
            kh = int((sh > self.rank_tol * sh[0]).sum())
            Jh = (Uh[:, :kh] * sh[:kh]) @ Vh[:kh]
        P = self._P
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
        if isinstance(levels, tuple):  # the plan's stacked rows, split per level
            E, f, sizes = levels
            cut = np.cumsum(sizes)[:-1]
            levels = list(zip(np.split(E, cut), np.split(f, cut))) if sizes.size else []
        for E, b in [(E0, b0)] + levels:
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
        return vdot, y - Jh.T @ lam, lam, residuals, status, used_qp

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
        Hz = gz = None
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
        lam2, status = self._cone_qp(lam, lam_p, Ng, Hz, gz, act, nl, m)
        return lam2, status, Ng.shape[1] > 0


def checked_contacts(robot: Robot, contacts: Sequence[PointContact]) -> list[PointContact]:
    """The contacts of a contact law (``ContactUKController``, ``ContactPIDC``): each a ``PointContact`` made for
    ``robot``, each name once; else a one-line ``ConfigError`` naming the contact."""
    for c in contacts:
        if not isinstance(c, PointContact):
            raise ConfigError(f"contacts: {c!r} is not a PointContact")
        if c.robot is not robot:
            raise ConfigError(f"contact '{c.name}' was made for another Robot")
    names = [c.name for c in contacts]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise ConfigError(f"contacts: the names {dup} are used twice")
    return list(contacts)


def loop_pass(loops: Sequence[Any]) -> ClosureSet | None:
    """The loops' rows in one compiled pass (``ClosureSet``: φ, J, J̇v of every loop) when each loop is a plain
    ``LoopClosure`` with the kind's row maths, whole rows and world-axes errors; else None (each loop's
    ``qp_rows``)."""
    if not loops or not all(
        isinstance(c, LoopClosure)
        and type(c).qp_rows is LoopClosure.qp_rows
        and type(c).compute is LoopClosure.compute
        and getattr(c, "error_axes", "world") == "world"
        for c in loops
    ):
        return None
    try:
        return ClosureSet(list(loops))
    except ConfigError:  # rows kept or row maths of its own: the per-loop path
        return None


def passive_split(robot: Robot, passive: Sequence[str] | None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(passive joint names, their v indices P, the other v indices A) of ``robot``; ``passive`` None: the
    robot's own passive joints."""
    pas = list(robot.passive_joints) if passive is None else list(passive)
    P = np.asarray(robot.v_indices(pas), dtype=np.int64)
    act = np.ones(robot.nv, dtype=bool)
    act[P] = False
    return pas, P, np.flatnonzero(act)


def check_nonnegative(prefix: str, values: Sequence[tuple[str, object]]) -> None:
    """Each (name, value) a finite number ≥ 0; else ``ConfigError("{prefix}{name} must be …")``."""
    for what, x in values:
        if not (math.isfinite(float(x)) and float(x) >= 0.0):  # type: ignore[arg-type]
            raise ConfigError(f"{prefix}{what} must be a finite number >= 0, got {x!r}")


class _Buffers:
    """The compiled algebra's buffers for one active set (n coordinates, np passive, m reaction rows, K levels)."""

    def __init__(self, n: int, npas: int, m: int, nlev: int, act: list):
        nz = max(m - npas, 0)
        self.Jk, self.G, self.S = np.empty((m, n)), np.empty((npas, m)), np.empty((npas, npas))
        self.S0 = np.empty((npas, npas))
        self.hD, self.x, self.N, self.y = np.empty(n), np.empty(n), np.empty((n, n)), np.empty(n)
        self.res = np.empty(1 + nlev)
        self.lam, self.lam_p, self.Hz, self.gz = np.empty(m), np.empty(m), np.empty((nz, nz)), np.empty(nz)
        self.tau_full, self.tau = np.empty(n), np.empty(n)
        self.Cf3 = np.ascontiguousarray(np.vstack([c.cone_rows() for c in act]) if act else np.zeros((0, 3)))
        self.crow = np.cumsum([0] + [c.facets + 1 for c in act]).astype(np.int64)
        self.mg, self.F = np.empty(len(act)), np.empty((len(act), 3))
        self.names = tuple(c.name for c in act)
        self.Uh, self.sh, self.Vth = np.empty((m, n)), np.empty(n), np.empty((n, n))


def _same_maths(task, cls) -> bool:
    """The task computes its rows with ``cls``'s maths (no override of the row maths: ``Task._ROW_MATHS``)."""
    return isinstance(task, cls) and all(getattr(type(task), m) is getattr(cls, m) for m in task._ROW_MATHS)


class _RowPlan:
    """The rows of one ``ContactUKController`` step from one Pinocchio pass, compiled (``_contact_kernels``' module
    docstring): ``pin.computeAllTerms`` on the robot's data (``Robot.update_in_place``), the centre of mass's drift
    from it (``pin.centerOfMass`` at the ACCELERATION level, no second kinematics pass) when a centre-of-mass task
    is there, then ``reaction_rows`` (every frame, the loops' and the active contacts' rows) and ``task_rows`` (the
    frame, centre-of-mass and posture tasks).  A task of another kind, or one that redefines its row maths, fills
    its own rows with ``qp_rows`` on a ``Kinematics`` of the same pass (the fallback per task).  The targets are
    sampled in Python (``desired(t)``: the users' trajectories), the gains copied when ``models._params.version``
    moved.  ``make`` returns None when a loop is not in the compiled encoding (the controller's Python rows)."""

    @classmethod
    def make(cls, ctl: ContactUKController) -> _RowPlan | None:
        if ctl.loops and ctl._cset is None:
            return None
        if ctl._cset is not None and any(not isinstance(c, LoopClosure) for c in ctl._cset.closures):
            return None
        return cls(ctl)

    def __init__(self, ctl: ContactUKController):
        self.ctl = ctl
        self.robot = ctl.robot
        self.frame_tasks: list = []  # (task, √ω, first row in E)
        self.com_tasks: list = []
        self.posture_tasks: list = []
        self.py_tasks: list = []
        row = 0
        sizes = []
        for L in ctl.levels:
            r0 = row
            for task, sw in zip(L.tasks, L.sqrt_w):
                if _same_maths(task, FrameTask) and task.kernel_kind() == 1:
                    self.frame_tasks.append((task, float(sw), row))
                elif _same_maths(task, CenterOfMassTask):
                    self.com_tasks.append((task, float(sw), row))
                elif _same_maths(task, PostureTask) and type(task) is PostureTask:
                    self.posture_tasks.append((task, float(sw), row))
                else:
                    self.py_tasks.append((task, float(sw), row))
                row += task.dim
            sizes.append(row - r0)
        n = ctl.n
        self.sizes = np.array(sizes, dtype=np.int64)
        self.E = np.zeros((row, n))
        self.f = np.zeros(row)
        self.version = -1
        self._data = None

    def _tables(self) -> None:
        """The frame table's slots and addresses in the robot's current Pinocchio data (again after ``add_frame``
        made a new one), the loops' and contacts' tables and the tasks' index tables."""
        robot, ctl = self.robot, self.ctl
        model, d = robot.model, robot.data
        slots = FrameSlots(model, compact=True)
        cs = ctl._cset
        loops = [(c, s) for c, s in zip(cs.closures, cs.slices) if isinstance(c, LoopClosure)] if cs else []
        self.lint = np.array(
            [(c.code, slots.slot(c.fa), slots.slot(c.fb), s.start) for c, s in loops], dtype=np.int64
        ).reshape(len(loops), 4)
        self.ml = 0 if cs is None else cs.m
        self.cslot_of = {id(c): slots.slot(c.fid) for c in ctl.contacts}
        self.fti = np.array(
            [(slots.slot(tk.fid), tk.rows.start, tk.dim, row) for tk, _, row in self.frame_tasks],
            dtype=np.int64,
        ).reshape(len(self.frame_tasks), 4)
        self.cti = np.array(
            [(tk.rows.start, tk.dim, row) for tk, _, row in self.com_tasks], dtype=np.int64
        ).reshape(len(self.com_tasks), 3)
        j0, pti = 0, []
        for tk, _, row in self.posture_tasks:
            pti.append((j0, len(tk.idx), row))
            j0 += len(tk.idx)
        self.pti = np.array(pti, dtype=np.int64).reshape(len(pti), 3)
        self.pidx = np.array([i for tk, _, _ in self.posture_tasks for i in tk.idx], dtype=np.int64)
        self.pqidx = np.array([i for tk, _, _ in self.posture_tasks for i in tk.qidx], dtype=np.int64)
        self.pref = np.zeros(self.pidx.size)
        self.fint, self.fplace = slots.fint, slots.fplace
        self.fJ = np.zeros((len(slots), 6, model.nv))
        self.fvec = np.zeros((len(slots), 24))
        self.jpose = slots.joint_pose_table()
        ptr, self._keep = data_addresses(d, [d.J], slots.joint_ids, "ContactUKController")
        self.ptr = np.array(ptr, dtype=np.int64)
        nft, nct = len(self.frame_tasks), len(self.com_tasks)
        self.ftf, self.fH, self.fva = np.zeros((nft, 3)), np.zeros((nft, 4, 4)), np.zeros((nft, 12))
        self.ctf, self.cdes = np.zeros((nct, 3)), np.zeros((nct, 9))
        self.ptf = np.zeros((len(self.posture_tasks), 3))
        # views of the data's centre-of-mass Jacobian, position, velocity and drift (at v̇ = 0): read in place
        self._com = (d.Jcom, d.com[0], d.vcom[0], d.acom[0])
        self.jdv, self.phi = np.zeros(max(self.ml, 1)), np.zeros(max(self.ml, 1))
        self.lgain = np.zeros((len(loops), 2))
        self._contact_tables: dict = {}
        self._unanchored = False  # a contact had no anchor yet (set from its frame after the rows)
        self._cversion: tuple = ()  # (models.contact.version, active set) when the gains and anchors were copied
        self.version = -1
        self._data = d

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(
            ptr=None, _keep=None, _com=None, _data=None
        )  # addresses and views: made again on first use
        return state

    def _copy_params(self) -> None:
        """The gains (and the postures' references) into the tables: when ``models._params.version`` moved."""
        cs = self.ctl._cset
        for k, c in enumerate([] if cs is None else cs.closures):
            self.lgain[k] = (c.kp, c.kd)
        for tab, tasks in (
            (self.ftf, self.frame_tasks),
            (self.ctf, self.com_tasks),
            (self.ptf, self.posture_tasks),
        ):
            for k, (tk, sw, _) in enumerate(tasks):
                tab[k] = (tk.kp, tk.kd, sw)
        j0 = 0
        for tk, _, _ in self.posture_tasks:
            self.pref[j0 : j0 + len(tk.idx)] = tk.q_ref
            j0 += len(tk.idx)
        self.version = _params.version

    def _contacts(self, act: list) -> tuple:
        """(slots, gains, anchors, J_h, b_h) of this active set (tables made once per set; gains and anchors copied
        when ``models.contact.version`` moved)."""
        key = tuple(id(c) for c in act)
        tab = self._contact_tables.get(key)
        if tab is not None and self._cversion == (_contact_model.version, key):
            return tab
        if tab is None:
            m = self.ml + 3 * len(act)
            n = self.ctl.n
            tab = self._contact_tables[key] = (
                np.array([self.cslot_of[id(c)] for c in act], dtype=np.int64),
                np.zeros((len(act), 2)),
                np.zeros((len(act), 3)),
                np.zeros((m, n)),
                np.zeros(m),
            )
        cslot, cgain, anchor, Jh, bh = tab
        for i, c in enumerate(act):
            cgain[i, 1] = c.kd
            if c.anchor is not None:
                cgain[i, 0] = c.kp
                anchor[i] = c.anchor
            else:  # anchored at p this step (``rows``): K_p (p − p₀) = 0
                cgain[i, 0] = 0.0
                self._unanchored = True
        self._cversion = (_contact_model.version, key)
        return tab

    def rows(self, t: float, q: np.ndarray, v: np.ndarray, M: np.ndarray, h: np.ndarray, act: list) -> tuple:
        """(J_h, b_h, (E, f, sizes), loop rows) at (t, q, v) after the step's ``computeAllTerms`` (M, h: its views)."""
        robot = self.robot
        d = robot.data
        if d is not self._data:
            self._tables()
        if self.version != _params.version:
            self._copy_params()
        for k, (tk, _, _) in enumerate(self.frame_tasks):
            T, vel, acc = tk.desired(t)
            self.fH[k] = T.homogeneous
            self.fva[k, :6] = vel
            self.fva[k, 6:] = acc
        if self.com_tasks:  # c, ċ, J̇_com v from the pass (read in place by the kernel: self._com)
            pin.centerOfMass(robot.model, d, pin.KinematicLevel.ACCELERATION, False)
            for k, (tk, _, _) in enumerate(self.com_tasks):
                cd, vd, ad = tk.desired(t)
                self.cdes[k, :3], self.cdes[k, 3:6], self.cdes[k, 6:] = cd, vd, ad
        cslot, cgain, anchor, Jh, bh = self._contacts(act)
        Jcom, com, vcom, acom = self._com
        E, f = self.E, self.f
        _contact_kernels().rows(
            self.ptr, q, v, self.jpose, self.fint, self.fplace, self.fJ, self.fvec, self.lint, self.lgain, self.ml,
            cslot, cgain, anchor, Jh, bh, self.jdv, self.phi, self.fti, self.ftf, self.fH, self.fva, Jcom, com, vcom,
            acom, self.cti, self.ctf, self.cdes, self.pti, self.ptf, self.pidx, self.pqidx, self.pref, E, f,
        )  # fmt: skip
        if self._unanchored:
            self._unanchored = False
            for i, c in enumerate(act):
                if (
                    c.anchor is None
                ):  # anchored where it stands now (``PointContact.rows``): its K_p (p − p₀) was 0
                    c.anchor = self.fvec[cslot[i], 9:12].copy()
        if self.py_tasks:  # the fallback per task: its own rows, on a Kinematics of this pass
            kin = Kinematics(robot, q, v, M, h)
            for tk, sw, row in self.py_tasks:
                A, b = tk.qp_rows(kin, t)
                E[row : row + tk.dim] = sw * A
                f[row : row + tk.dim] = sw * b
        return Jh, bh, (E, f, self.sizes), self.ml
