"""Prioritized Udwadia–Kalaba control ([Milioshin] §3.2, §3.5, §4.3) with any number of strict levels.

Model: M(q) v̇ + h(q, v) + D v = τ, so the "given" force without actuation is Q = −h − D v
(D = joint damping, taken into the model because the plant has it) and a = M⁻¹ Q.

Levels.  ``levels=[L₁, L₂, …, L_K]``; each level is a list of tasks (``Task``), of ``(task, weight)``
pairs, and possibly ``GAUSS``, Gauss' principle ½ (v̇ − a)ᵀ M (v̇ − a).  The last level holds
``GAUSS`` (it is appended as a level of its own if no level names it), so it decides every degree of
freedom left.  Strict priority between levels, weighted least squares within a level, the limits
(``models/limits.py``) in every level:

    level k < K:   v̇ ∈ argmin Σ_{i∈L_k} ω_i ‖A_i v̇ − b_i‖²   over the optimal set of levels < k, limits
    level K:       min ½ v̇ᵀ H v̇ + gᵀ v̇,  H = M + Σ_{i∈L_K} ω_i A_iᵀA_i,  g = −Q − Σ ω_i A_iᵀ b_i

Level 1 is hard: when it cannot hold (incompatible rows, or not within the limits) the controller
raises ``InfeasibleError`` naming the cause.  Special cases:

* thesis weighted mode (3.40)/(4.2): ``[[constraints], [(task, ω), GAUSS]]`` — constraints hard,
  tasks weighted against Gauss (``priority="weighted"``);
* strict mode: ``[[constraints], [(task, ω)…], [GAUSS]]`` (``priority="strict"``).

Solution, cheapest first:
1. every level k < K exactly achievable: E v̇ = f with E = [A₁; …; A_{K−1}] (√ω-scaled rows) of full
   row rank; the final level is then the equality-constrained QP whose KKT system
   [H Eᵀ; E 0] [v̇; λ] = [−g; f] is solved directly (Schur complement S = E H⁻¹ Eᵀ; a Cholesky
   factorisation of S that fails or has a pivot below ``rank_tol`` relative sends to 2);
   1'. Gauss alone last and more rows above it than degrees of freedom (e.g. ``[[coupling], [task],
   [posture]]`` with a posture on every joint): the level before Gauss, L_{K−1}, is the final level of
   that KKT system without Gauss, H = Σ_{L_{K−1}} ω AᵀA, g = −Σ ω Aᵀ b, E = [A₁; …; A_{K−2}]; when
   that H is positive definite the minimiser of L_{K−1} over the levels above is unique, so Gauss has
   nothing left and this is the strict solution of 2 (equal to round-off, tested) at the cost of 1
   (compiled step only; otherwise, or with a limit hit, 2 and 3 as usual);
2. rank-deficient or inconsistent levels: null-space projections (SVD, relative rank tolerance):
   v̇_k = v̇_{k−1} + N_{k−1} (A_k N_{k−1})⁺ (b_k − A_k v̇_{k−1}),  N_k = N_{k−1} null(A_k N_{k−1}),
   then y = (N_Kᵀ H N_K)⁻¹ N_Kᵀ (−g − H v̇), v̇* = v̇ + N_K y;
3. if v̇* violates a limit: one ProxSuite QP of the final level with E v̇ = f and the limits; if it is
   infeasible (after one cold-start retry), the levels one after another, each a QP with the earlier
   levels' achieved values as equalities and the limits (level k's least squares plus μ·Gauss to break
   ties; μ = 1e-6 tr(A_kᵀA_k)/tr(M)).

The torque is τ = M v̇* + h + D v = RNEA(q, v, v̇*) + D v.

Fused path: when every task has a compiled row builder (``Task.kernel_kind()``: ``RigidCoupling``,
``FrameTask``, ``PostureTask``, ``JointTrajectoryTask`` (a ``Sinusoid`` sampled in the kernel, any other
trajectory in Python), ``LoopClosure`` and their subclasses that keep the row maths; a task with integral action
around one of them; and
``fused=True``, the default), the rows, H, r, the KKT solve of 1. and the effort check run in one
compiled call (``controllers/_uk_kernels.py``, numba, cached on disk) on the Pinocchio data of the
robot's lean pass (``Robot.update_for_kernel``: one ``pin.crba`` in the WORLD convention; the kernel
computes h by its own Newton–Euler pass and its frames' J̇v from data.J and v); 2. and 3. then run in
Python on its rows.  The tasks' gains and targets
are copied into the kernel's tables when one was set (``models/_params.py``); the step's ``kin`` is
made from the kernel's copies of q, v, M, h when first read.  The same torques as the generic path to
rounding (tests/test_uk_kernels.py); any other task takes the generic path.

Closed chains.  The robot's loop closures (``robot.loops``: ``cmstack.models.loops.LoopClosure``, from an
MJCF's equalities or a URDF's loops sidecar) are the top level unless the levels already hold them, and the
joints without an actuator (``robot.passive_joints``, or ``passive=``) get a hard zero-torque condition
in that level: with y = M v̇ + h + D v, the mechanism supplies any loop reaction J_cᵀλ, so τ = y − J_cᵀλ and
τ_p = 0 is solvable in λ iff U_⊥ᵀ S_p y = 0 (U_⊥ spanning the left null space of G = S_p J_cᵀ); those rows
join level 1, λ = G⁺ S_p y, and τ = (I − J_cᵀ G⁺ S_p) y, on which the effort limits act
(``_passive_rows``; U_⊥ and G⁺ from a complete orthogonal decomposition of G, ``kernels.passive_map``).  The
levels' rows that vanish (a planar mechanism's out-of-plane loop and task rows) are left out, so that the
KKT path of 1. applies to the rows left (``_without_empty_rows``: the same solution).  The fused path knows
them too when every loop has compiled rows and residual (``LoopClosure.kernel_kind()``: the kinds of
``models/_loop_kernels.py``, whose ``closure_rows`` PIDC's compiled step uses as well): the loops are task rows of
kind LOOP in the kernel's level 1, the zero-torque rows, the vanishing-row test and the torque map run in the
same compiled call (``_uk_kernels.passive_level`` on ``kernels.passive_factor``/``passive_null``, τ = T y by
``kernels.passive_torque`` without forming T); T itself is formed (``kernels.passive_map``) only when a fallback,
the limits' rows or ``binding_limits`` read it.  Passive joints without loops, or a loop of another kind, take the
generic path.

Forces reported each step (stationarity of the final level, H v̇ + g + Eᵀ λ + Cᵀ z = 0):
    Q_c   = −A₁ᵀ λ₁              the first level's generalized force (when there are ≥ 2 levels);
                                  with only constraints in level 1 this is (3.10)
    Q_u   = −Σ_{1<k<K} A_kᵀ λ_k + Σ_{i∈L_K} ω_i A_iᵀ (b_i − A_i v̇*)   the other tasks' force
    Q_lim = −Cᵀ z                 the limits' force;     M v̇* = Q + Q_c + Q_u + Q_lim.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cmstack.controllers.kernels import passive_map, vanishing_rows
from cmstack.controllers.qp import BoundedQP
from cmstack.controllers.uk_diagnostics import Diagnostics, udwadia_kalaba_closed_form
from cmstack.controllers.uk_levels import GAUSS, UKStepInfo, _Level, _parse_level
from cmstack.controllers.uk_plan import _FusedPlan
from cmstack.controllers.uk_solve import LevelSolver
from cmstack.models import _params
from cmstack.models.coupling import Task
from cmstack.models.errors import ConfigError
from cmstack.models.limits import EffortLimit, Limit, LimitCheck, LimitRows
from cmstack.models.robot import Kinematics, Robot
from cmstack.models.step_engine import StepRecord

#: a level's stacked rows (A, b), one pair a level; the last level's rows (A, b, ω), one triple a task
_Rows = list[tuple[np.ndarray, np.ndarray]]
_FinalRows = list[tuple[np.ndarray, np.ndarray, float]]
#: the limits' rows (C, l, u), or (None, None, None) without limits
_Bounds = tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[None, None, None]
#: the generalized forces (Q_c, Q_u, Q_lim) of a step (N·m)
_Forces = tuple[np.ndarray, np.ndarray, np.ndarray]

_PENDING = object()  # ``_T`` of a compiled closed-chain step, not formed yet

__all__ = ["GAUSS", "UKStepInfo", "UdwadiaKalabaController", "udwadia_kalaba_closed_form"]


def _level_specs(
    constraints: Sequence[Task] | None,
    tasks: Sequence[Task] | None,
    omega: float | Sequence[float],
    priority: str,
    levels: Sequence | None,
) -> tuple[Sequence, str]:
    """The level specifications and the priority name: ``levels`` as given (priority "levels"), or built
    from ``constraints`` (level 1 when given) and ``tasks`` with their weights ``omega`` ("weighted": the
    tasks share Gauss' level; "strict": the tasks are a level of their own above Gauss')."""
    if levels is not None:
        if constraints or tasks:
            raise ConfigError("give either levels=[...] or constraints/tasks, not both")
        return levels, "levels"
    if priority not in ("weighted", "strict"):
        raise ConfigError(f"priority='{priority}' is not one of ['weighted', 'strict']")
    constraints = list(constraints or [])
    tasks = list(tasks or [])
    om = np.broadcast_to(np.asarray(omega, dtype=float), (len(tasks),)).copy()
    if np.any(~np.isfinite(om)) or np.any(om <= 0):
        raise ConfigError(f"task weights omega must be finite and > 0, got {om.tolist()}")
    weighted = [(t, w) for t, w in zip(tasks, om)]
    top = [constraints] if constraints else []
    if priority == "weighted":
        return top + [weighted + [GAUSS]], priority
    return top + ([weighted] if weighted else []) + [[GAUSS]], priority


def _parsed_levels(levels: Sequence) -> list[_Level]:
    """The parsed levels, Gauss' principle in the last one only (an empty Gauss level appended when no
    level holds it)."""
    lv = [_parse_level(L, k) for k, L in enumerate(levels)]
    if not lv or not lv[-1].gauss:
        if any(L.gauss for L in lv):
            k = next(i for i, L in enumerate(lv) if L.gauss)
            raise ConfigError(
                f"GAUSS is in level {k + 1} of {len(lv)}; it must be in the last level "
                "(it decides every remaining degree of freedom)"
            )
        lv.append(_Level([], np.zeros(0), np.zeros(0), True, 0))
    if any(L.gauss for L in lv[:-1]):
        raise ConfigError("GAUSS must be in the last level only")
    return lv


def _with_loops_on_top(lv: list[_Level], loops: list) -> list[_Level]:
    """``lv`` with the robot's loop closures as a new unit-weight top level when the user placed none of
    them; placed, they must all be in the first level (they are hard constraints)."""
    placed = {id(task) for L in lv for task in L.tasks}
    if loops and not all(id(c) in placed for c in loops):
        if any(id(c) in placed for c in loops):
            raise ConfigError(
                "levels: give all of robot.loops in the first level, or none of them (they are "
                "then the top level)"
            )
        ones = np.ones(len(loops))
        return [_Level(list(loops), ones, ones.copy(), False, sum(c.dim for c in loops)), *lv]
    if loops and not all(id(c) in {id(t) for t in lv[0].tasks} for c in loops):
        raise ConfigError("levels: robot.loops must be in the first level (they are hard constraints)")
    return lv


def _loop_rows_in(top: _Level, loops: list) -> tuple[np.ndarray, np.ndarray]:
    """(rows, √ω): the indices of the loops' rows among the top level's stacked rows, and each row's √ω."""
    loop_ids = {id(c) for c in loops}
    idx: list[int] = []
    scale: list[float] = []
    i = 0
    for task, sw in zip(top.tasks, top.sqrt_w):
        if id(task) in loop_ids:
            idx.extend(range(i, i + task.dim))
            scale.extend([float(sw)] * task.dim)
        i += task.dim
    return np.array(idx, dtype=np.int64), np.array(scale, dtype=float)


def _default_limits(robot: Robot, torque_limits: bool, passive: list[str]) -> list[Limit]:
    """The limits when none are given: one ``EffortLimit`` on the actuated joints when ``torque_limits``
    (each needs a positive finite effort limit in the model; a passive joint's torque is zero by the hard
    condition, so it needs none), else none."""
    if not torque_limits:
        return []
    tm = np.asarray(robot.effort_limit, dtype=float)
    pset = set(passive)
    act = [n for n in robot.joint_names if n not in pset]
    bad = [n for n, x in zip(robot.joint_names, tm) if n not in pset and not (np.isfinite(x) and x > 0)]
    if bad:
        raise ConfigError(
            f"torque_limits=true but joints {bad} have no positive finite effort limit in "
            f"{robot.path.name} (actuated joints need one, passive joints do not); give "
            "limits=[EffortLimit(robot, tau_max=...)] or limits=[]"
        )
    return [EffortLimit(robot, joints=act if pset else None)] if act else []


class UdwadiaKalabaController(LevelSolver, Diagnostics):
    """τ = UK(t, q, v): strict levels of weighted tasks, Gauss' principle last, limits in every level.

    Args:
        robot: the Pinocchio model (``Robot``).
        constraints: the former interface, kept (with ``tasks``, ``omega``, ``priority``): the hard level.
        tasks: the former interface: the tasks, weighted by ``omega``.
        omega: the former interface: the tasks' weights (scalar or one per task, > 0).
        priority: the former interface: Gauss in the tasks' level (``"weighted"``, the thesis) or after it
            (``"strict"``).
        torque_limits: with ``limits=None``, add ``EffortLimit(robot)`` on the actuated joints (every
            joint but the passive ones; a passive joint needs no effort limit, its torque is zero).
        model_damping: include the joint damping D of the URDF in the model (N·m·s/rad).
        levels: the priority levels (module docstring); excludes ``constraints``/``tasks``.
        limits: list of ``Limit`` objects (``EffortLimit``, ``JointPositionLimit``,
            ``JointVelocityLimit``), enforced in every level.
        eps_abs: ProxSuite's absolute tolerance (on unit-norm rows, ``controllers/qp.py``); rank_tol:
            relative rank tolerance.
        max_step_iters: the step's budget of ProxSuite iterations over all its QPs (each QP is capped
            on its own as well); the levels that find it spent give way (``_sequential``).
        warn_free_dof: warn once when the tasks leave degrees of freedom to Gauss alone.
        fused: run the step through the compiled kernels of ``controllers/_uk_kernels.py`` when every
            task has a compiled row builder (``Task.kernel_kind()``; the same torques;
            any other task, or ``fused=False``, takes the generic Python path).
    """

    def __init__(
        self,
        robot: Robot,
        constraints: Sequence[Task] | None = None,
        tasks: Sequence[Task] | None = None,
        omega: float | Sequence[float] = 50.0,
        priority: str = "weighted",
        torque_limits: bool = True,
        model_damping: bool = True,
        eps_abs: float = 1e-9,
        rank_tol: float = 1e-9,
        *,
        levels: Sequence | None = None,
        limits: Sequence[Limit] | None = None,
        warn_free_dof: bool = True,
        fused: bool = True,
        max_step_iters: int = 150,
        passive: Sequence[str] | None = None,
    ):
        self.robot = robot
        self.n = robot.nv
        levels, self.priority = _level_specs(constraints, tasks, omega, priority, levels)
        lv = _parsed_levels(levels)
        # closed chains (module docstring, "Closed chains"): the robot's loops are the top level unless the
        # user placed them; the passive joints get a hard zero-torque condition in that level
        self.loops = list(getattr(robot, "loops", []) or [])
        lv = _with_loops_on_top(lv, self.loops)
        # where the loops' rows sit in level 1's rows (and their √ω), so a step reads them instead of recomputing
        self._loop_rows, self._loop_scale = _loop_rows_in(lv[0], self.loops)
        names = list(getattr(robot, "passive_joints", []) or []) if passive is None else list(passive)
        self.passive_joints = names
        self._passive = np.asarray(robot.v_indices(names), dtype=int)  # (a ball joint: its 3 coordinates)
        if self._passive.size and len(lv) < 2:
            raise ConfigError("passive joints need a level above Gauss' (the zero-torque condition is hard)")
        self._set_levels(lv)
        if limits is None:
            limits = _default_limits(robot, torque_limits, names)
        self._set_limits(limits)
        self.D = robot.damping.copy() if model_damping else np.zeros(robot.nv)
        self.eps_abs = float(eps_abs)
        self.rank_tol = float(rank_tol)
        self._sqrt_rank_tol = math.sqrt(self.rank_tol)
        if not (isinstance(max_step_iters, int) and max_step_iters > 0):
            raise ConfigError(f"max_step_iters must be an integer > 0, got {max_step_iters!r}")
        self.max_step_iters = max_step_iters
        self._qp = BoundedQP(eps_abs=self.eps_abs)
        self._reset_step_state()
        self.warn_free_dof = warn_free_dof
        self._warned = False
        # passive joints with the robot's loops: the plan's closed-chain step (``_uk_kernels.passive_level``)
        self._plan = _FusedPlan.build(self) if fused else None
        # the other limits' test on the compiled step's result (``models/limits.py: LimitCheck``), or None
        P = self._plan
        self._limcheck = (
            LimitCheck.build(P.other_limits, 0, P.nq, P.o_out, P.o_out + self.n) if P is not None else None
        )
        self._Tmap: object = None  # the step's torque map (passive joints), else None (``_T``)
        self._t_last = 0.0  # t of the last step (``record``)

    def _set_levels(self, lv: list[_Level]) -> None:
        """The levels and what a step reads of them: the upper levels, the last (Gauss') level's pairs, the
        single upper task (when one unit-weight task is the only upper level), and the former attributes
        ``constraints`` (level 1 when there are several), ``tasks`` and ``omega``."""
        self.levels = lv
        self._upper = lv[:-1]
        self._final = lv[-1]
        self._final_pairs = [(task, float(w)) for task, w in zip(self._final.tasks, self._final.weights)]
        up = self._upper
        self._single_upper = (
            up[0].tasks[0] if (len(up) == 1 and len(up[0].tasks) == 1 and up[0].weights[0] == 1.0) else None
        )
        self.n_eq = sum(L.dim for L in self._upper)
        # the former attributes: the hard constraints (level 1 when there are several) and the tasks
        self.constraints = list(lv[0].tasks) if len(lv) > 1 else []
        self.tasks = [t for L in lv[(1 if len(lv) > 1 else 0) :] for t in L.tasks]
        self.omega = (
            np.concatenate([L.weights for L in lv[(1 if len(lv) > 1 else 0) :]])
            if self.tasks
            else np.zeros(0)
        )

    def _set_limits(self, limits: Sequence[Limit]) -> None:
        """Check that every entry of ``limits`` is a ``Limit`` and keep them, with their row count and
        whether one bounds the effort."""
        for lim in limits:
            if not isinstance(lim, Limit):
                raise ConfigError(
                    f"limits: {lim!r} is not a Limit (EffortLimit, JointPositionLimit, JointVelocityLimit)"
                )
        self.limits = list(limits)
        self.n_in = sum(lim.dim for lim in self.limits)
        self.torque_limits = any(isinstance(lim, EffortLimit) for lim in self.limits)

    def _reset_step_state(self) -> None:
        """The step's bookkeeping before the first step: QP policy, counters, the info record, caches."""
        # cold starts: a step's QPs do not depend on the steps before (a warm start from the previous step's
        # result, penalties included, was no faster on the limited loops of bench/limits.py and made two
        # controllers fed the same states differ where a level met its cap)
        self.warm_start = False
        # levels 1 and 2 of a binding step in one QP when it solves within the budget (``LevelSolver._merged_top``)
        self.merge_top = True
        self._seq_active = False
        self._last_sequential = False  # the previous limited step needed the levels one by one
        self._levels_exact = False  # in the last sequential step every level above the last held exactly
        self._seq_residuals: tuple = (None, ())  # (v̇, per-level residuals) of the last sequential solve
        self.saturated_steps = 0  # steps in which a level gave way to the limits (info.gave_way)
        self.info = UKStepInfo()
        self._info_kkt: UKStepInfo | None = None  # the info whose constant fields hold a compiled KKT step's
        self._kin: Kinematics | None = None
        self._kin_buf: tuple | None = None  # (buffer, generation) of the last compiled step
        self.failures = 0  # steps whose QP stopped short of its tolerance (solution still used)
        self.cold_retries = 0  # warm-started QPs that failed and were solved again from a cold start

    # ------------------------------------------------------------------ compatibility
    @property
    def tau_max(self) -> np.ndarray:
        """Effort bounds of the first ``EffortLimit`` (N·m); setting it changes that limit."""
        for lim in self.limits:
            if isinstance(lim, EffortLimit):
                return lim.tau_max
        return np.full(self.n, np.inf)

    @tau_max.setter
    def tau_max(self, value: ArrayLike) -> None:
        for lim in self.limits:
            if isinstance(lim, EffortLimit):
                lim.tau_max = np.broadcast_to(np.asarray(value, dtype=float), lim.tau_max.shape).copy()
                return
        raise ConfigError("tau_max: this controller has no EffortLimit")

    # ------------------------------------------------------------------ building blocks
    def _level_rows(self, L: _Level, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        if len(L.tasks) == 1:
            A, b = L.tasks[0].qp_rows(kin, t)
            sw = L.sqrt_w[0]
            return (A, b) if sw == 1.0 else (sw * A, sw * b)
        if not L.tasks:
            return np.zeros((0, self.n)), np.zeros(0)
        As, bs = [], []
        for task, sw in zip(L.tasks, L.sqrt_w):
            A, b = task.qp_rows(kin, t)
            As.append(sw * A)
            bs.append(sw * b)
        return np.vstack(As), np.concatenate(bs)

    def _limit_rows(self, kin: Kinematics, hD: np.ndarray) -> _Bounds:
        if self._T is not None:
            return self._mapped_limit_rows(kin, hD)
        return self._plain_limit_rows(kin, hD)

    def _mapped_limit_rows(self, kin: Kinematics, hD: np.ndarray) -> _Bounds:
        """The limits with passive joints: an effort limit bounds τ = T (M v̇ + h + D v) on its actuated
        joints (``_passive_rows``); the other limits as they are."""
        if not self.limits:
            return None, None, None
        T = self._T
        assert T is not None  # set by ``_passive_rows`` (``_limit_rows``)
        Cs, ls, us = [], [], []
        act = np.ones(self.n, dtype=bool)
        act[self._passive] = False
        for lim in self.limits:
            if isinstance(lim, EffortLimit):
                keep = act[lim.idx]
                i = lim.idx[keep]
                TM, Th = T[i] @ kin.M, T[i] @ hD
                tm = lim.tau_max[keep]
                Cs.append(TM)
                ls.append(-tm - Th)
                us.append(tm - Th)
            else:
                C, l, u = lim.bounds(kin, hD)
                Cs.append(C)
                ls.append(l)
                us.append(u)
        return np.vstack(Cs), np.concatenate(ls), np.concatenate(us)

    def _plain_limit_rows(self, kin: Kinematics, hD: np.ndarray) -> _Bounds:
        if not self.limits:
            return None, None, None
        # the built-in limits' rows by one compiled call into buffers made once (``models/limits.py: LimitRows``),
        # made again when the list of limits is another
        lr = self.__dict__.get("_limit_rows_of")
        if lr is None or lr[0] is not self.limits or len(lr[1]) != len(self.limits):
            lr = self._limit_rows_of = (self.limits, list(self.limits), LimitRows.build(self.limits, self.n))
        if lr[2] is not None and all(a is b for a, b in zip(lr[1], self.limits)):
            return lr[2](kin.q, kin.v, kin.M, hD)
        if len(self.limits) == 1:
            return self.limits[0].bounds(kin, hD)
        Cs, ls, us = zip(*(lim.bounds(kin, hD) for lim in self.limits))
        return np.vstack(Cs), np.concatenate(ls), np.concatenate(us)

    def _violated(self, kin: Kinematics, hD: np.ndarray, x: np.ndarray, tau: np.ndarray) -> bool:
        for lim in self.limits:
            if lim.violated(kin, hD, x, tau):
                return True
        return False

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray, kin: Kinematics | None = None) -> np.ndarray:
        """τ at (t, q, v), or at the given snapshot ``kin`` (``Robot.update``'s) with its q, v."""
        P = self._plan
        if P is None:
            kin = self.robot.update(q, v) if kin is None else kin  # refuses NaN/inf with a clear StateError
            self.kin = kin
            return self._call_generic(t, kin)
        # the compiled step (``_FusedPlan``): the robot's lean Pinocchio pass (``Robot.update_for_kernel``;
        # with a given ``kin``, the data its ``Robot.update`` left), then one kernel call that tests the
        # state, copies q, v, M, h for the step's Kinematics, builds every task's rows, solves the KKT system
        # and checks the effort limit; the null-space and QP fallbacks run on its rows in Python
        # (``_fused_rest``).  The tasks' gains and targets are copied into the plan's tables only when one
        # was set since (``models/_params.py``).
        robot = self.robot
        if kin is None:
            q, v = robot.update_for_kernel(q, v)
        else:
            kin._check_current()  # the data must hold this snapshot's state: the kernel reads it
            q, v = kin.q, kin.v
        gen = robot.generation
        d = robot.data
        lim = P.effort
        if d is not P.data or self.D is not P.D or (lim is not None and lim.tau_max is not P.tmax):
            P.bind(d, self.D, self._sqrt_rank_tol)
        if P.version != _params.version:
            P.version = _params.version
            P.copy_parameters()
            if self._limcheck is not None:
                self._limcheck.copy()
        if P.sampled:
            P.sample(t)
        fresh = None
        if P.integrals:
            fresh = []
            for k, task in P.integrals:  # z advanced once per new t, as IntegralTask.compute does
                if task.advance(t):
                    fresh.append((k, task))
                P.tbias[k, task.rows] = task.ki * task.z
        buf = np.empty(P.buf_len)
        self._t_last = t
        if P.py_tasks:  # the tasks without a compiled row builder write their rows first, in Python
            P.python.fill(t, q, v, kin)
        st = P.step(float(t), q, v, P.ptr, P.I, P.F, buf)
        if st == 4:  # _uk_kernels.NONFINITE: |q|² + |v|² is not finite
            robot.refuse_state(q, v)
        if P.closed:  # the step's torque map: made when first asked for (``_T``)
            self._Tmap = _PENDING
        if fresh:
            for k, task in fresh:
                task.record(t, P.terr[k, task.rows])
        if kin is None:
            self._kin = None
            self._kin_buf = (buf, gen)
        else:
            self.kin = kin
        lc = self._limcheck
        if st == 0 and lc is not None and lc.violated(buf, lc.I, lc.F):
            st = 1  # _uk_kernels.LIMIT: the KKT solution violates one of the other limits
        if st == 0 and (P.plain or lc is not None) and (self._warned or not self.warn_free_dof):
            info = self.info
            if self._info_kkt is not info:
                info.cold_retries = 0
                info.limits_active = False
                info.saturated, info.gave_way = False, ""
                info.status, info.qp_iter, info.path = "solved", 0, "kkt"
                info.level_residuals = None
                self._info_kkt = info
                self._forces_of = self._buffer_forces  # (bound once: the step pays no method object)
            tau = buf[P.sl_tau]
            info._vdot, info._vsrc, info.tau = None, (buf, P.sl_x), tau  # v̇: sliced when read
            info._lazy = (self._forces_of, buf)
            return tau
        return self._fused_rest(t, st, buf)

    def record(self) -> StepRecord | None:
        """The typed, read-only record of the last compiled step (``models/step_engine.StepRecord``: t, q, v, M,
        h, the frames it computed, each priority group's rows, each task's error), or None when the last step was
        not a compiled one on the controller's own pass (``fused=False``, a layout the plan does not compile, a
        step given ``kin=``).  Take it before the next step: the frames and errors are read from this step's
        tables and the robot's data."""
        P = self._plan
        if P is None or self._kin_buf is None:
            return None
        buf = self._kin_buf[0]
        _, _, _, _, Ab = P.results(buf)
        _, _, rows, final_rows = P.views(Ab, buf)
        groups = list(rows)
        if final_rows:
            groups.append(
                (np.vstack([A for A, _, _ in final_rows]), np.concatenate([b for _, b, _ in final_rows]))
            )
        weights = (
            np.concatenate([np.full(A.shape[0], w) for A, _, w in final_rows]) if final_rows else np.zeros(0)
        )
        kin = self.kin
        assert kin is not None
        t = self._t_last
        errors = {task.name: task.error(kin, t) for L in self.levels for task in L.tasks}
        frames = {fid: (P.fJ[k], P.fvec[k]) for fid, k in P.frame_index.items()}
        return StepRecord(t, kin.q, kin.v, kin.M, kin.h, groups, weights, errors, frames)

    @property
    def python_tasks(self) -> tuple[Task, ...]:
        """The tasks whose rows Python fills inside the compiled step (kind ``PYTHON``: their own ``qp_rows``, the
        other tasks' rows compiled; docs/add_a_task.md), in row order; empty when every task is compiled or the
        controller has no compiled step (``fused=False``, a layout the plan does not compile)."""
        P = self._plan
        return tuple(P.python.tasks) if P is not None else ()

    @property
    def kin(self) -> Kinematics | None:
        """The last step's kinematics snapshot (``Robot.update``'s ``Kinematics``).  After a compiled step
        it is made on first access from the copies of q, v, M and h that the kernel wrote, with that
        step's generation (so it refuses to read a frame once the robot's data has moved on)."""
        k = self._kin
        if k is None and self._kin_buf is not None:
            buf, gen = self._kin_buf
            n, nq = self.n, self.robot.nq  # the buffer's [q (nq) | v | M | h] (``_FusedPlan``)
            k = Kinematics(
                self.robot,
                buf[:nq],
                buf[nq : nq + n],
                buf[nq + n : nq + n + n * n].reshape(n, n),
                buf[nq + n + n * n : nq + 2 * n + n * n],
                generation=gen,
            )
            self._kin = k
        return k

    @kin.setter
    def kin(self, value: Kinematics | None) -> None:
        self._kin = value
        self._kin_buf = None

    def _call_generic(self, t: float, kin: Kinematics, limits_violated: bool = False) -> np.ndarray:
        """The step in Python/NumPy (every level layout, every fallback).  ``limits_violated``: the
        compiled step found that the unconstrained solution of these levels violates a limit."""
        M = kin.M
        hD = kin.h + self.D * kin.v
        self._info_kkt = None
        self.info.cold_retries = 0
        # the final level: H = M + Σ ω AᵀA, r = −g = −h − D v + Σ ω Aᵀ b
        H, r, final_rows = M, -hD, []
        for task, w in self._final_pairs:
            A, b = task.qp_rows(kin, t)
            Aw = A.T * w
            H = H + Aw @ A
            r = r + Aw @ b
            final_rows.append((A, b, w))
        if self._single_upper is not None:
            E, f = self._single_upper.qp_rows(kin, t)
            rows = [(E, f)]
        else:
            rows = [self._level_rows(L, kin, t) for L in self._upper]
            if len(rows) == 1:
                E, f = rows[0]
            elif rows:
                E, f = np.vstack([x[0] for x in rows]), np.concatenate([x[1] for x in rows])
            else:
                E, f = np.zeros((0, self.n)), np.zeros(0)
        if self._passive.size:
            rows, E, f = self._passive_rows(kin, hD, t, rows)
        else:
            self._T = None
        if not self._warned and self.warn_free_dof:
            self._warn_free(E, final_rows)
        if limits_violated:
            # the compiled step's exact KKT solution of these levels already violates a limit: the limited
            # solve is next, whatever the equality solve would give
            return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, None, None, "", None, violated=True)
        x, lam, path = self._equality(H, r, E, f, rows, t)
        return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, x, lam, path, self._torque(M @ x + hD))

    def _finish(
        self,
        kin: Kinematics,
        hD: np.ndarray,
        H: np.ndarray,
        r: np.ndarray,
        E: np.ndarray,
        f: np.ndarray,
        rows: _Rows,
        final_rows: _FinalRows,
        t: float,
        x: np.ndarray | None,
        lam: Any,
        path: str,
        tau: np.ndarray | None,
        violated: bool | None = None,
    ) -> np.ndarray:
        """The limits (QP when v̇ violates one), the step's info, τ."""
        info = self.info
        z = None
        iters = 0
        if violated is None:
            assert x is not None and tau is not None  # the equality solve's (``__call__``)
            violated = bool(self.limits) and self._violated(kin, hD, x, tau)
        if violated:
            C, l, u = self._limit_rows(kin, hD)
            x, lam, z, iters, path = self._with_limits(kin, H, -r, E, f, rows, C, l, u, -hD, hD, t)
            tau = self._torque(kin.M @ x + hD)
            info.limits_active = bool(np.count_nonzero(z)) or (path == "sequential" and self._seq_active)
            done = self._seq_residuals  # (v̇, residuals) of the last sequential solve
            info.level_residuals = (
                done[1] if done[0] is x else tuple(float(np.linalg.norm(a @ x - b)) for a, b in rows)
            )
        else:
            info.limits_active = False
            info.saturated, info.gave_way = False, ""
            info.level_residuals = None
        assert x is not None and tau is not None  # given, or the limited solve's
        info.status, info.vdot, info.tau, info.qp_iter, info.path = "solved", x, tau, iters, path
        info._lazy = self._forces_closure(kin, hD, x, lam, z, rows, final_rows, E)
        self._info_kkt = None
        return tau

    # ------------------------------------------------------------------ closed chains, passive joints
    def _passive_rows(
        self, kin: Kinematics, hD: np.ndarray, t: float, rows: _Rows
    ) -> tuple[_Rows, np.ndarray, np.ndarray]:
        """Level 1 with the passive joints' zero-torque condition; sets the step's torque map ``_T``.

        The mechanism closes its loops itself: the torque that realises v̇ is τ = y − J_cᵀλ, y = M v̇ + h + D v,
        for any loop reaction λ (J_c: the loops' rows).  The passive joints p get zero torque iff
        S_p y = G λ has a solution, G = S_p J_cᵀ, i.e. U_⊥ᵀ S_p y = 0 with U_⊥ a basis of the left null
        space of G: the rows U_⊥ᵀ S_p M v̇ = −U_⊥ᵀ S_p (h + D v), added to level 1.  Then λ = G⁺ S_p y
        (the least-norm reaction) and τ = T y with T = I − J_cᵀ G⁺ S_p: τ_p = (I − G G⁺) S_p y = 0, and the
        effort limits bound T y, the torque actually sent.  Without loops, G is empty: M_p v̇ = −(h + D v)_p."""
        p = self._passive
        A1, b1 = rows[0]
        if self.loops:
            Jc = A1[self._loop_rows] / self._loop_scale[:, None]  # the loops' rows of this step's level 1
            T, Gp, Up = passive_map(Jc, p, self.rank_tol)  # COD of G = S_p J_cᵀ (kernels.passive_map)
        else:
            Up, T, Jc, Gp = np.eye(p.size), None, None, None
        self._T = T
        self._loop_reaction = (Jc, Gp)
        if Up.shape[1]:
            A_p = Up.T @ kin.M[p]
            b_p = -(Up.T @ hD[p])
            rows = [(np.vstack([A1, A_p]), np.concatenate([b1, b_p]))] + list(rows[1:])
        E = np.vstack([a for a, _ in rows]) if len(rows) > 1 else rows[0][0]
        f = np.concatenate([b for _, b in rows]) if len(rows) > 1 else rows[0][1]
        return self._without_empty_rows(rows, E, f)

    def _without_empty_rows(
        self, rows: _Rows, E: np.ndarray, f: np.ndarray
    ) -> tuple[_Rows, np.ndarray, np.ndarray]:
        """The levels without their rows that vanish (‖A_i‖ ≤ rank_tol·max(1, max_j ‖A_j‖) and |b_i| ≤
        rank_tol·max(1, ‖b‖∞), over the rows j of the same level: ``kernels.vanishing_rows``), e.g. a planar
        mechanism's out-of-plane loop and task rows.  The same law: the null-space path (``_null_basis``,
        relative rank test) gives such a row a singular value below its threshold and so ignores it, and its
        b_i is far below level 1's compatibility test (1e-8); without it the KKT path (``_equality``) applies
        where the rows left have full rank, and its solution is then the strict one (every level held
        exactly), as the null-space path's."""
        sizes = np.fromiter((a.shape[0] for a, _ in rows), dtype=np.int64, count=len(rows))
        keep = np.empty(E.shape[0], dtype=np.bool_)
        if vanishing_rows(E, f, sizes, self.rank_tol, keep) == 0:
            return rows, E, f
        out, i = [], 0
        for size in sizes.tolist():
            k = keep[i : i + size]
            out.append((E[i : i + size][k], f[i : i + size][k]))
            i += size
        return out, E[keep], f[keep]

    @property
    def _T(self) -> np.ndarray | None:
        """The step's torque map T (passive joints, ``_passive_rows``), or None.  After a compiled closed-chain step
        (which applies it without forming it, ``kernels.passive_torque``) it is made on first use from the loops'
        rows that step wrote (``_FusedPlan.torque_map``: ``kernels.passive_map``, the step's COD)."""
        T = self._Tmap
        if T is _PENDING:
            P = self._plan
            assert P is not None
            T, self._loop_reaction = P.torque_map()
            self._Tmap = T
        return T  # type: ignore[return-value]

    @_T.setter
    def _T(self, value: np.ndarray | None) -> None:
        self._Tmap = value

    def _torque(self, y: np.ndarray) -> np.ndarray:
        """τ from y = M v̇ + h + D v: y itself, or T y with passive joints (``_passive_rows``)."""
        if self._T is None:
            return y
        tau = self._T @ y
        tau[self._passive] = 0.0  # exactly: it is zero to round-off by construction
        return tau

    def loop_reaction(self) -> np.ndarray | None:
        """λ of the last step: the loops' reaction (in the units of their rows: N for point rows, N·m
        for rotation rows) that the torque leaves to the mechanism, or None without passive joints."""
        if self.info.vdot is None:
            return None
        if self._Tmap is _PENDING and self._kin_buf is not None:  # a compiled step's λ (its buffer)
            P = self._plan
            assert P is not None
            return P.loop_reaction(self._kin_buf[0]).copy()
        if self._T is None:
            return None
        Jc, Gp = self._loop_reaction
        kin = self.kin
        if Jc is None or kin is None:
            return None
        y = kin.M @ self.info.vdot + kin.h + self.D * kin.v
        return Gp @ y[self._passive]

    def _fused_rest(self, t: float, st: int, buf: np.ndarray) -> np.ndarray:
        """A compiled step that is not a plain KKT solution: the other limits' check, the first step's
        free-DoF warning, the absorbed plans' strict path, the fallbacks."""
        P = self._plan
        assert P is not None
        self._info_kkt = None
        kin = self.kin
        assert kin is not None
        if P.closed:  # the fallbacks and the limits' rows read the torque map: made now
            self._T, self._loop_reaction = P.torque_map()
        x, tau, hD, lam, Ab = P.results(buf)
        if st == 0 and P.other_limits:
            for other in P.other_limits:
                if other.violated(kin, hD, x, tau):
                    st = 1
                    break
        warn = not self._warned and self.warn_free_dof
        if P.absorbed and st == 1 and not warn:
            # a limit is hit: the strict path on the kernel's rows (the generic path's layout: every task level
            # above Gauss, √ω-scaled; H = M, r = −(h + D v)) instead of the tasks' rows made again in Python
            self.info.cold_retries = 0
            # every level's rows from the kernel's [A | b] in one product with the rows' scales (1 above the last
            # task level, √ω in it: the rows are laid out level after level, ``_FusedPlan``), each level a view
            sc = self.__dict__.get("_absorbed_scales")
            if sc is None or sc[0] is not P:
                sw = P.absorbed_sqrt_w
                assert sw is not None  # (an absorbed plan has it)
                m_up = P._levels[-1][1] if P._levels else 0
                rs = np.concatenate([np.ones(m_up), sw])
                sc = self._absorbed_scales = (P, rs[:, None], rs, P._levels + [(m_up, rs.size)])
            _, rs2, rs, ranges = sc
            mt = rs.size
            E = Ab[:mt, :-1] * rs2
            f = Ab[:mt, -1] * rs
            rows = [(E[i:j], f[i:j]) for i, j in ranges]
            return self._finish(kin, hD, kin.M, -hD, E, f, rows, [], t, None, None, "", None, violated=True)
        if P.absorbed and (st != 0 or warn):
            # limits, rank loss, first-step warning: the strict path (st == 1: the strict KKT solution, exact
            # when it exists, already violates a limit, so the generic path need not solve it again)
            return self._call_generic(t, kin, limits_violated=(st == 1 and not warn))
        if st == 0 and not warn:
            info = self.info
            info.cold_retries = 0
            info.limits_active = False
            info.saturated, info.gave_way = False, ""
            info.status, info.vdot, info.tau, info.qp_iter, info.path = "solved", x, tau, 0, "kkt"
            info.level_residuals = None
            info._lazy = (self._buffer_forces, buf)
            return tau
        self.info.cold_retries = 0
        E, f, rows, final_rows = P.views(Ab, buf)
        if warn:
            self._warn_free(E, final_rows, stacklevel=4)
        H, r = P.H, P.r
        if st == 0:
            return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, x, lam, "kkt", tau, violated=False)
        if st == 1:
            return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, x, lam, "kkt", tau, violated=True)
        if st == 2:
            x, lam, path = self._nullspace(H, -r, rows, t)
        else:
            x, lam, path = np.asarray(np.linalg.solve(H, r), dtype=np.float64), None, "kkt"
        return self._finish(
            kin, hD, H, r, E, f, rows, final_rows, t, x, lam, path, self._torque(kin.M @ x + hD)
        )

    def _buffer_forces(self, buf: np.ndarray) -> _Forces:
        """(Q_c, Q_u, Q_lim) of a compiled KKT step from its buffer (``UKStepInfo``'s lazy forces)."""
        P = self._plan
        assert P is not None
        x, tau, hD, lam, Ab = P.results(buf)
        if P.absorbed:
            return self._absorbed_forces(hD, x, tau, Ab)
        E, f, rows, final_rows = P.views(Ab, buf)
        return self._forces_closure(None, hD, x, lam, None, rows, final_rows, E)()

    def _absorbed_forces(self, hD: np.ndarray, x: np.ndarray, tau: np.ndarray, Ab: np.ndarray) -> _Forces:
        """The forces of an absorbed step as the generic path reports them (Gauss last, every task level
        above it): λ the minimum-norm solution of Eᵀλ = −(M v̇ + h + D v) = −τ over all levels' √ω-scaled
        rows (τ of this step, kept: the robot's M may hold a later state by the time this is read)."""
        P = self._plan
        assert P is not None
        E, f, rows, final_rows = P.views(Ab)
        sw = P.absorbed_sqrt_w
        assert sw is not None  # an absorbed plan's
        A = np.vstack([a for a, _, _ in final_rows]) * sw[:, None]
        b = np.concatenate([b for _, b, _ in final_rows]) * sw
        rows = rows + [(A, b)]
        E_all = np.vstack([E, A])
        lam_all = np.linalg.lstsq(E_all.T, -tau, rcond=None)[0]
        return self._forces_closure(None, hD, x, lam_all, None, rows, [], E_all)()

    def _forces_closure(
        self,
        kin: Kinematics | None,
        hD: np.ndarray,
        x: np.ndarray,
        lam: Any,
        z: np.ndarray | None,
        rows: _Rows,
        final_rows: _FinalRows,
        E: np.ndarray,
    ) -> Callable[[], _Forces]:
        n = self.n

        def forces() -> _Forces:
            Qlim = np.zeros(n)
            if z is not None:
                assert kin is not None  # z: the limited solve of a generic step, which has its kin
                C = self._limit_rows(kin, hD)[0]
                assert C is not None  # z is not None: there are limits
                Qlim = -C.T @ z
            Qu = np.zeros(n)
            for A, b, w in final_rows:
                Qu = Qu + w * (A.T @ (b - A @ x))
            Qc = np.zeros(n)
            lam_v = lam() if callable(lam) else lam
            if lam_v is not None and E.shape[0]:
                i = 0
                for k, (A, _) in enumerate(rows):
                    force = -A.T @ lam_v[i : i + A.shape[0]]
                    i += A.shape[0]
                    if k == 0:
                        Qc = force
                    else:
                        Qu = Qu + force
            return Qc, Qu, Qlim

        return forces

    def _warn_free(self, E: np.ndarray, final_rows: _FinalRows, stacklevel: int = 3) -> None:
        self._warned = True
        allrows = np.vstack([E] + [A for A, _, _ in final_rows])
        r = int(np.linalg.matrix_rank(allrows)) if allrows.shape[0] else 0
        free = self.n - r
        if free > 0:
            warnings.warn(
                f"UdwadiaKalabaController: the tasks constrain {r} of the {self.n} degrees of freedom of "
                f"{self.robot.path.name}; {free} degree(s) of freedom have no task and drift under Gauss' "
                f"principle (gravity, damping). Add a PostureTask in the last level to hold them.",
                UserWarning,
                stacklevel=stacklevel,
            )

    def errors(self, kin: Kinematics, t: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Pose errors of every constraint and task at (kin, t), by name."""
        return (
            {c.name: c.error(kin, t) for c in self.constraints},
            {c.name: c.error(kin, t) for c in self.tasks},
        )
