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
``FrameTask``, ``PostureTask`` and their subclasses that keep the row maths; a task with integral action
around one of them; and
``fused=True``, the default), the rows, H, r, the KKT solve of 1. and the effort check run in one
compiled call (``controllers/_uk_kernels.py``, numba, cached on disk) on the arrays of the step's one
``pin.computeAllTerms``; 2. and 3. then run in Python on its rows.  The same torques as the generic
path to rounding (tests/test_uk_kernels.py); any other task takes the generic path.

Forces reported each step (stationarity of the final level, H v̇ + g + Eᵀ λ + Cᵀ z = 0):
    Q_c   = −A₁ᵀ λ₁              the first level's generalized force (when there are ≥ 2 levels);
                                  with only constraints in level 1 this is (3.10)
    Q_u   = −Σ_{1<k<K} A_kᵀ λ_k + Σ_{i∈L_K} ω_i A_iᵀ (b_i − A_i v̇*)   the other tasks' force
    Q_lim = −Cᵀ z                 the limits' force;     M v̇* = Q + Q_c + Q_u + Q_lim.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import numpy as np
from scipy.linalg.lapack import dposv as _dposv

from cmstack.controllers.qp import BoundedQP
from cmstack.models.coupling import FrameTask, PostureTask, RelativeFrameTask, RigidCoupling, Task, stack
from cmstack.models.errors import ConfigError, InfeasibleError, SolverError
from cmstack.models.limits import EffortLimit, Limit
from cmstack.models.robot import Kinematics, Robot



class _Gauss:
    """Gauss' principle ½ (v̇ − a)ᵀ M (v̇ − a), a = M⁻¹ Q, as a member of a level."""

    name = "gauss"

    def __repr__(self) -> str:
        return "GAUSS"


GAUSS = _Gauss()
"""Place Gauss' principle in a level (the last one); weight 1, the tasks' weights are relative to it."""


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
    """What the controller reports every step.  The generalized forces are computed on first
    access (diagnostics, not needed for τ).  ``path``: "kkt" (direct solve), "nullspace", "qp"
    (one QP with the limits) or "sequential" (one QP per level)."""

    status: str = "not run"
    vdot: np.ndarray | None = None
    tau: np.ndarray | None = None
    qp_iter: int = 0
    limits_active: bool = False
    path: str = ""
    cold_retries: int = 0
    saturated: bool = False       # a level below the first gave way to the limits (``gave_way`` says which)
    gave_way: str = ""
    _Qc: np.ndarray | None = None
    _Qu: np.ndarray | None = None
    _Qlim: np.ndarray | None = None
    _lazy: object = None

    def _fill(self):
        if self._lazy is not None:
            self._Qc, self._Qu, self._Qlim = self._lazy()
            self._lazy = None

    @property
    def Qc(self) -> np.ndarray | None:
        """Q_c = −A₁ᵀ λ₁, the first (hard) level's generalized force; (3.10) without tasks."""
        if self.vdot is None:
            return None
        self._fill()
        return self._Qc

    @property
    def Qu(self) -> np.ndarray | None:
        """The other levels' (tasks') generalized force."""
        if self.vdot is None:
            return None
        self._fill()
        return self._Qu

    @property
    def Qlim(self) -> np.ndarray | None:
        """The limits' generalized force −Cᵀ z (zero when no limit is active)."""
        if self.vdot is None:
            return None
        self._fill()
        return self._Qlim


@dataclass
class _Level:
    tasks: list
    weights: np.ndarray
    sqrt_w: np.ndarray
    gauss: bool = False
    dim: int = 0


def _parse_level(level, k: int) -> _Level:
    if isinstance(level, (Task, _Gauss)) or (isinstance(level, tuple) and len(level) == 2):
        level = [level]
    tasks, ws, gauss = [], [], False
    for item in level:
        if item is GAUSS:
            gauss = True
            continue
        w = 1.0
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ConfigError(f"level {k + 1}: a member must be a task, (task, weight) or GAUSS; got {item!r}")
            item, w = item
        if not isinstance(item, Task):
            raise ConfigError(f"level {k + 1}: {item!r} is not a Task (FrameTask, RigidCoupling, PostureTask, …)")
        try:
            w = float(w)
        except (TypeError, ValueError):
            raise ConfigError(f"level {k + 1}: weight of '{item.name}' must be a finite number > 0, got {w!r}") from None
        if not (math.isfinite(w) and w > 0):
            raise ConfigError(f"level {k + 1}: weight of '{item.name}' must be a finite number > 0, got {w}")
        tasks.append(item)
        ws.append(w)
    ws = np.array(ws, dtype=float)
    return _Level(tasks, ws, np.sqrt(ws), gauss, sum(t.dim for t in tasks))


class _FusedPlan:
    """Tables and buffers of the compiled step (``controllers/_uk_kernels.py``), built once per
    controller: the frames the tasks need (each with its joint, placement and support columns), the
    tasks in row order (the levels above the last, scaled by √ω, then the last level's, weighted by ω
    in H), the first ``EffortLimit`` (the others are checked in Python)."""

    @staticmethod
    def _inner(task):
        """The task whose compiled rows stand for ``task``: itself, or the task one with integral action
        wraps (``kernel_biased_inner``: its β = K_i z enters the kernel as a bias of those rows)."""
        biased = getattr(task, "kernel_biased_inner", None)
        return biased() if biased is not None else task

    @classmethod
    def build(cls, ctl: "UdwadiaKalabaController") -> "_FusedPlan | None":
        """The plan, or None when some task has no compiled row builder (``Task.kernel_kind()`` is
        None: a task of another kind, or a subclass that redefines its row maths), or numba is missing."""
        for L in ctl.levels:
            for task in L.tasks:
                inner = cls._inner(task)
                if inner is None or not callable(getattr(inner, "kernel_kind", None)) or inner.kernel_kind() is None:
                    return None
        try:
            from cmstack.controllers import _uk_kernels
        except ImportError:      # numba absent: the generic path
            return None
        return cls(ctl, _uk_kernels)

    def __init__(self, ctl: "UdwadiaKalabaController", K):
        self.step = K.uk_step
        robot, n = ctl.robot, ctl.n
        model = robot.model
        # "absorbed": the last level is Gauss alone and the levels above it have more rows than there are
        # degrees of freedom (e.g. a posture on every joint as the last strict level), so they cannot all
        # be equalities of one KKT system.  The level before Gauss is then solved as the KKT's final level
        # without Gauss (H = Σ ω AᵀA, no M).  When that H is positive definite the level's minimiser
        # over the levels above is unique, so Gauss, strictly after it, has nothing left to decide and
        # the solution is the strict one; otherwise (and whenever a limit is hit) the step takes the
        # generic path (``_call_generic``), whose null-space solve such layouts needed every step.
        self.absorbed = not ctl._final.tasks and len(ctl._upper) >= 1 and ctl.n_eq > n
        upper = ctl._upper[:-1] if self.absorbed else ctl._upper
        last = ctl._upper[-1] if self.absorbed else ctl._final
        entries = [(task, float(sw), 0.0, 0) for L in upper for task, sw in zip(L.tasks, L.sqrt_w)]
        entries += [(task, 1.0, float(w), 1) for task, w in zip(last.tasks, last.weights)]
        self.absorbed_sqrt_w = np.repeat(last.sqrt_w, [t.dim for t in last.tasks]) if self.absorbed else None
        frames: dict = {}
        joints: dict = {}
        fint, fplace = [], []

        def slot(fid: int) -> int:
            if fid not in frames:
                fr = model.frames[fid]
                j = int(fr.parentJoint)
                if j not in joints:
                    joints[j] = len(joints)
                mask = np.zeros(n, dtype=np.int64)
                for ji in model.supports[j]:
                    if ji > 0:
                        mask[model.joints[ji].idx_v] = 1
                fint.append(np.r_[joints[j], mask])
                fplace.append(fr.placement.homogeneous)
                frames[fid] = len(frames)
            return frames[fid]

        nt = len(entries)
        tint = np.zeros((nt, 8), dtype=np.int64)
        tflt = np.zeros((nt, 4))
        pidx: list = []
        self.postures, self.frame_tasks, self.task_items, self.integrals = [], [], [], []
        row = 0
        bounds = []
        for k, (outer, sc, w, final) in enumerate(entries):
            task = self._inner(outer)
            if task is not outer:
                self.integrals.append((k, outer))
            kind = task.kernel_kind()
            a = b = off = 0
            sel0, nsel = task.rows.start, task.dim
            if kind == 0:
                a, b = slot(task.fB), slot(task.f2)
            elif kind == 1:
                a = slot(task.fid)
                self.frame_tasks.append((k, task))
            else:
                off, sel0 = len(pidx), 0
                pidx.extend(int(i) for i in task.idx)
                self.postures.append((off, off + nsel, task))
            tint[k] = (kind, a, b, row, sel0, nsel, off, final)
            tflt[k] = (task.kp, task.kd, sc, w)
            self.task_items.append((k, task))
            bounds.append((row, row + nsel))
            row += nsel
        self.tint, self.tflt = tint, tflt
        width = max([6] + [int(r[5]) for r in tint])
        self.tbias = np.zeros((nt, width))          # β = K_i z of the tasks with integral action
        self.terr = np.zeros((nt, width))           # every task's pose error, written by the kernel
        self.pidx = np.array(pidx, dtype=np.int64)
        self.qref = np.zeros(len(pidx))
        self.fint = np.array(fint, dtype=np.int64).reshape(len(fint), n + 1)
        self.fplace = np.array(fplace, dtype=float).reshape(len(fplace), 4, 4)
        self.fJ = np.zeros((len(fint), 6, n))
        self.fvec = np.zeros((len(fint), 24))
        # the joints' views go to the kernel as tuples; padded (with the universe, never read) to a
        # length 4, 8, 16, … so that one compiled signature serves every plan of up to 4 joints
        ids = [j for j, _ in sorted(joints.items(), key=lambda js: js[1])]
        self.joint_ids = ids + [0] * (max(4, 1 << max(len(ids) - 1, 0).bit_length()) - len(ids))
        self.data = None
        self.tgtH = np.zeros((nt, 4, 4))
        self.tgtVA = np.zeros((nt, 12))
        self.tcirc = np.zeros((nt, 7))
        self.seen = [None] * nt
        self.D = self.tmax = self.args = None
        m = self.m_up = sum(L.dim for L in upper)
        self.gauss = 0.0 if self.absorbed else 1.0
        self.ab_shape = (row, n + 1)
        self.out_len = 3 * n + m
        self.wk = np.zeros(2 * n * n + n + n * (m + 1) + m * m)
        self.H = self.wk[:n * n].reshape(n, n)
        self.r = self.wk[n * n:n * n + n]
        # the effort limit checked in the kernel: an EffortLimit whose bounds are EffortLimit's own
        efforts = [lim for lim in ctl.limits if isinstance(lim, EffortLimit)
                   and type(lim).bounds is EffortLimit.bounds and type(lim).violated is EffortLimit.violated]
        self.effort = efforts[0] if efforts else None
        self.eidx = np.ascontiguousarray(self.effort.idx, dtype=np.int64) if self.effort else np.zeros(0, np.int64)
        self.no_tmax = np.zeros(0)
        self.other_limits = [lim for lim in ctl.limits if lim is not self.effort]
        # row ranges of each upper level and of each last-level task (for the fallbacks and forces)
        self._levels, i = [], 0
        for L in upper:
            j = i + L.dim
            self._levels.append((i, j))
            i = j
        self._final = [(bounds[k][0], bounds[k][1], entries[k][2]) for k in range(nt) if entries[k][3]]

    def bind(self, d, D: np.ndarray, sqrt_tol: float) -> None:
        """Views into the Pinocchio data ``d`` that ``computeAllTerms`` refreshes in place: data.J and
        each needed joint's R_j, p_j (data.oMi) and spatial acceleration (data.a); taken again when
        the robot's data object changes (``Robot.add_frame`` creates a new one), the damping D or
        the effort limit's τ_max array is replaced.  ``args``: everything but the step's own arrays,
        as the kernel takes it."""
        self.J = d.J
        poses = [d.oMi[j] for j in self.joint_ids]
        accs = [d.a[j] for j in self.joint_ids]
        self.jR = tuple(T.rotation for T in poses)
        self.jp = tuple(T.translation for T in poses)
        self.ja = tuple(a.vector for a in accs)
        self._keep = (poses, accs)
        self.data, self.D = d, D
        self.tmax = self.no_tmax if self.effort is None else self.effort.tau_max
        self.args = (self.J, D, self.jR, self.jp, self.ja, self.fint, self.fplace, self.fJ, self.fvec, self.tint,
                     self.tflt, self.tgtH, self.tgtVA, self.tcirc, self.pidx, self.qref, self.tbias, self.terr,
                     self.m_up, self.gauss, sqrt_tol, self.eidx, self.tmax, self.wk)

    def __getstate__(self):
        state = self.__dict__.copy()
        state.update(data=None, J=None, jR=None, jp=None, ja=None, _keep=None, args=None)   # rebound on first use
        return state

    def views(self, Ab: np.ndarray):
        """(E, f, rows, final_rows) of one step's [A | b] (contiguous copies, as the generic path's)."""
        n = Ab.shape[1] - 1
        m = self.m_up
        E, f = Ab[:m, :n].copy(), Ab[:m, n].copy()
        rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy()) for i, j in self._levels]
        final_rows = [(Ab[i:j, :n].copy(), Ab[i:j, n].copy(), w) for i, j, w in self._final]
        return E, f, rows, final_rows


class UdwadiaKalabaController:
    """τ = UK(t, q, v): strict levels of weighted tasks, Gauss' principle last, limits in every level.

    Args:
        robot: the Pinocchio model (``Robot``).
        constraints, tasks, omega, priority: the former interface, kept: ``constraints`` hard,
            ``tasks`` weighted by ``omega`` (scalar or one per task, > 0), with Gauss in the tasks'
            level (``priority="weighted"``, the thesis) or after it (``"strict"``).
        torque_limits: with the former interface and ``limits=None``, add ``EffortLimit(robot)``.
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

    def __init__(self, robot: Robot, constraints: Sequence[Task] | None = None, tasks: Sequence[Task] | None = None,
                 omega: float | Sequence[float] = 50.0, priority: str = "weighted", torque_limits: bool = True,
                 model_damping: bool = True, eps_abs: float = 1e-9, rank_tol: float = 1e-9, *,
                 levels: Sequence | None = None, limits: Sequence[Limit] | None = None,
                 warn_free_dof: bool = True, fused: bool = True, max_step_iters: int = 150):
        self.robot = robot
        self.n = robot.nv
        if levels is None:
            if priority not in ("weighted", "strict"):
                raise ConfigError(f"priority='{priority}' is not one of ['weighted', 'strict']")
            constraints = list(constraints or [])
            tasks = list(tasks or [])
            om = np.broadcast_to(np.asarray(omega, dtype=float), (len(tasks),)).copy()
            if np.any(~np.isfinite(om)) or np.any(om <= 0):
                raise ConfigError(f"task weights omega must be finite and > 0, got {om.tolist()}")
            weighted = [(t, w) for t, w in zip(tasks, om)]
            if priority == "weighted":
                levels = ([constraints] if constraints else []) + [weighted + [GAUSS]]
            else:
                levels = ([constraints] if constraints else []) + ([weighted] if weighted else []) + [[GAUSS]]
        else:
            if constraints or tasks:
                raise ConfigError("give either levels=[...] or constraints/tasks, not both")
            priority = "levels"
        self.priority = priority
        lv = [_parse_level(L, k) for k, L in enumerate(levels)]
        if not lv or not lv[-1].gauss:
            if any(L.gauss for L in lv):
                k = next(i for i, L in enumerate(lv) if L.gauss)
                raise ConfigError(f"GAUSS is in level {k + 1} of {len(lv)}; it must be in the last level "
                                  "(it decides every remaining degree of freedom)")
            lv.append(_Level([], np.zeros(0), np.zeros(0), True, 0))
        if any(L.gauss for L in lv[:-1]):
            raise ConfigError("GAUSS must be in the last level only")
        self.levels = lv
        self._upper = lv[:-1]
        self._final = lv[-1]
        self._final_pairs = [(task, float(w)) for task, w in zip(self._final.tasks, self._final.weights)]
        up = self._upper
        self._single_upper = up[0].tasks[0] if (len(up) == 1 and len(up[0].tasks) == 1
                                                and up[0].weights[0] == 1.0) else None
        self.n_eq = sum(L.dim for L in self._upper)
        # the former attributes: the hard constraints (level 1 when there are several) and the tasks
        self.constraints = list(lv[0].tasks) if len(lv) > 1 else []
        self.tasks = [t for L in lv[(1 if len(lv) > 1 else 0):] for t in L.tasks]
        self.omega = np.concatenate([L.weights for L in lv[(1 if len(lv) > 1 else 0):]]) if self.tasks else np.zeros(0)

        if limits is None:
            if torque_limits:
                tm = np.asarray(robot.effort_limit, dtype=float)
                bad = [n for n, x in zip(robot.joint_names, tm) if not (np.isfinite(x) and x > 0)]
                if bad:
                    raise ConfigError(f"torque_limits=true but joints {bad} have no positive finite effort limit in "
                                      f"{robot.path.name}; give limits=[EffortLimit(robot, tau_max=...)] or limits=[]")
            limits = [EffortLimit(robot)] if torque_limits else []
        for lim in limits:
            if not isinstance(lim, Limit):
                raise ConfigError(f"limits: {lim!r} is not a Limit (EffortLimit, JointPositionLimit, JointVelocityLimit)")
        self.limits = list(limits)
        self.n_in = sum(lim.dim for lim in self.limits)
        self.torque_limits = any(isinstance(lim, EffortLimit) for lim in self.limits)
        self.D = robot.damping.copy() if model_damping else np.zeros(robot.nv)
        self.eps_abs = float(eps_abs)
        self.rank_tol = float(rank_tol)
        self._sqrt_rank_tol = math.sqrt(self.rank_tol)
        if not (isinstance(max_step_iters, int) and max_step_iters > 0):
            raise ConfigError(f"max_step_iters must be an integer > 0, got {max_step_iters!r}")
        self.max_step_iters = max_step_iters
        self._qp = BoundedQP(eps_abs=self.eps_abs)
        # cold starts: a step's QPs do not depend on the steps before (a warm start from the previous step's
        # result, penalties included, was no faster on the limited loops of bench/limits.py and made two
        # controllers fed the same states differ where a level met its cap)
        self.warm_start = False
        self._seq_active = False
        self._last_sequential = False   # the previous limited step needed the levels one by one
        self._levels_exact = False      # in the last sequential step every level above the last held exactly
        self.saturated_steps = 0  # steps in which a level gave way to the limits (info.gave_way)
        self.info = UKStepInfo()
        self.kin: Kinematics | None = None
        self.failures = 0        # steps whose QP stopped short of its tolerance (solution still used)
        self.cold_retries = 0    # warm-started QPs that failed and were solved again from a cold start
        self.warn_free_dof = warn_free_dof
        self._warned = False
        self._plan = _FusedPlan.build(self) if fused else None

    # ------------------------------------------------------------------ compatibility
    @property
    def tau_max(self) -> np.ndarray:
        """Effort bounds of the first ``EffortLimit`` (N·m); setting it changes that limit."""
        for lim in self.limits:
            if isinstance(lim, EffortLimit):
                return lim.tau_max
        return np.full(self.n, np.inf)

    @tau_max.setter
    def tau_max(self, value) -> None:
        for lim in self.limits:
            if isinstance(lim, EffortLimit):
                lim.tau_max = np.broadcast_to(np.asarray(value, dtype=float), lim.tau_max.shape).copy()
                return
        raise ConfigError("tau_max: this controller has no EffortLimit")

    # ------------------------------------------------------------------ building blocks
    def _level_rows(self, L: _Level, kin, t):
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

    def _limit_rows(self, kin, hD):
        if not self.limits:
            return None, None, None
        if len(self.limits) == 1:
            return self.limits[0].bounds(kin, hD)
        Cs, ls, us = zip(*(lim.bounds(kin, hD) for lim in self.limits))
        return np.vstack(Cs), np.concatenate(ls), np.concatenate(us)

    def _violated(self, kin, hD, x, tau) -> bool:
        for lim in self.limits:
            if lim.violated(kin, hD, x, tau):
                return True
        return False

    def _solve(self, key, H, g, A, b, C, l, u, feasible_start: bool = False, budget: int | None = None):
        """One bounded QP (``controllers/qp.py``: empty rows dropped, rows scaled, iterations capped,
        warm-started per ``key``, one cold retry); counts cold retries in ``info``."""
        before = self._qp.cold_retries
        res = self._qp.solve(key, H, g, A, b, C, l, u, warm=self.warm_start, feasible_start=feasible_start, budget=budget)
        if self._qp.cold_retries != before:
            self.cold_retries += 1
            self.info.cold_retries += 1
        return res

    # ------------------------------------------------------------------ control
    def __call__(self, t: float, q: np.ndarray, v: np.ndarray, kin: Kinematics | None = None) -> np.ndarray:
        kin = self.robot.update(q, v) if kin is None else kin   # refuses NaN/inf with a clear StateError
        self.kin = kin
        if self._plan is not None:
            return self._call_fused(t, kin)
        return self._call_generic(t, kin)

    def _call_generic(self, t: float, kin: Kinematics, limits_violated: bool = False) -> np.ndarray:
        """The step in Python/NumPy (every level layout, every fallback).  ``limits_violated``: the
        compiled step found that the unconstrained solution of these levels violates a limit."""
        M = kin.M
        hD = kin.h + self.D * kin.v
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
        if not self._warned and self.warn_free_dof:
            self._warn_free(E, final_rows)
        if limits_violated:
            # the compiled step's exact KKT solution of these levels already violates a limit: the limited
            # solve is next, whatever the equality solve would give
            return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, None, None, "", None, violated=True)
        x, lam, path = self._equality(H, r, E, f, rows, t)
        return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, x, lam, path, M @ x + hD)

    def _finish(self, kin, hD, H, r, E, f, rows, final_rows, t, x, lam, path, tau, violated=None):
        """The limits (QP when v̇ violates one), the step's info, τ."""
        info = self.info
        z = None
        iters = 0
        if violated is None:
            violated = bool(self.limits) and self._violated(kin, hD, x, tau)
        if violated:
            C, l, u = self._limit_rows(kin, hD)
            x, lam, z, iters, path = self._with_limits(kin, H, -r, E, f, rows, C, l, u, -hD, hD, t)
            tau = kin.M @ x + hD
            info.limits_active = bool(np.any(z != 0)) or (path == "sequential" and self._seq_active)
        else:
            info.limits_active = False
            info.saturated, info.gave_way = False, ""
        info.status, info.vdot, info.tau, info.qp_iter, info.path = "solved", x, tau, iters, path
        info._lazy = self._forces_closure(kin, hD, x, lam, z, rows, final_rows, E)
        return tau

    def _call_fused(self, t: float, kin: Kinematics) -> np.ndarray:
        """The step through the compiled kernels (``_FusedPlan``): one kernel call builds every
        task's rows from the Pinocchio pass, solves the KKT system and checks the effort limit; the
        null-space and QP fallbacks run on its rows in Python (``_finish``)."""
        P = self._plan
        d = self.robot.data
        lim = P.effort
        if d is not P.data or self.D is not P.D or (lim is not None and lim.tau_max is not P.tmax):
            P.bind(d, self.D, self._sqrt_rank_tol)
        tgtH, tgtVA, tcirc, seen = P.tgtH, P.tgtVA, P.tcirc, P.seen
        for k, task in P.frame_tasks:
            c = task.constant_target
            if c is None:
                seen[k] = None
                tr = task.trajectory
                circ = tr.kernel_params() if callable(getattr(tr, "kernel_params", None)) else None
                if circ is not None:            # sampled in the kernel (_uk_kernels.circle_sample)
                    tcirc[k, :6] = circ
                    tcirc[k, 6] = 1.0
                    tgtH[k, :3, :3] = tr.R
                    continue
                T, vel, accD = task.desired(t)
            elif c is not seen[k]:
                T, vel, accD = c
                seen[k] = c
            else:
                continue
            tcirc[k, 6] = 0.0
            tgtH[k] = T.homogeneous
            tgtVA[k, :6] = vel
            tgtVA[k, 6:] = accD
        tflt = P.tflt
        for k, task in P.task_items:
            tflt[k, 0] = task.kp
            tflt[k, 1] = task.kd
        qref = P.qref
        for off, stop, task in P.postures:
            qref[off:stop] = task.q_ref
        fresh = []
        for k, task in P.integrals:           # z advanced once per new t, as IntegralTask.compute does
            if task.advance(t):
                fresh.append((k, task))
            P.tbias[k, task.rows] = task.ki * task.z
        Ab = np.empty(P.ab_shape)
        out = np.empty(P.out_len)
        st = P.step(float(t), kin.M, kin.h, kin.q, kin.v, P.args, Ab, out)
        for k, task in fresh:
            task.record(t, P.terr[k, task.rows])
        n = self.n
        x, tau, hD = out[:n], out[n:2 * n], out[2 * n:3 * n]
        lam = out[3 * n:] if P.m_up else None
        if st == 0 and P.other_limits:
            for other in P.other_limits:
                if other.violated(kin, hD, x, tau):
                    st = 1
                    break
        warn = not self._warned and self.warn_free_dof
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
            info._lazy = (partial(self._absorbed_forces, kin, hD, x, tau, Ab) if P.absorbed
                          else partial(self._fused_forces, kin, hD, x, lam, Ab))
            return tau
        self.info.cold_retries = 0
        E, f, rows, final_rows = P.views(Ab)
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
            x, lam, path = np.linalg.solve(H, r), None, "kkt"
        return self._finish(kin, hD, H, r, E, f, rows, final_rows, t, x, lam, path, kin.M @ x + hD)

    def _fused_forces(self, kin, hD, x, lam, Ab):
        E, f, rows, final_rows = self._plan.views(Ab)
        return self._forces_closure(kin, hD, x, lam, None, rows, final_rows, E)()

    def _absorbed_forces(self, kin, hD, x, tau, Ab):
        """The forces of an absorbed step as the generic path reports them (Gauss last, every task level
        above it): λ the minimum-norm solution of Eᵀλ = −(M v̇ + h + D v) = −τ over all levels' √ω-scaled
        rows (τ of this step, kept: the robot's M may hold a later state by the time this is read)."""
        P = self._plan
        E, f, rows, final_rows = P.views(Ab)
        A = np.vstack([a for a, _, _ in final_rows]) * P.absorbed_sqrt_w[:, None]
        b = np.concatenate([b for _, b, _ in final_rows]) * P.absorbed_sqrt_w
        rows = rows + [(A, b)]
        E_all = np.vstack([E, A])
        lam_all = np.linalg.lstsq(E_all.T, -tau, rcond=None)[0]
        return self._forces_closure(kin, hD, x, lam_all, None, rows, [], E_all)()

    def _forces_closure(self, kin, hD, x, lam, z, rows, final_rows, E):
        n = self.n

        def forces():
            Qlim = np.zeros(n)
            if z is not None:
                C = self._limit_rows(kin, hD)[0]
                Qlim = -C.T @ z
            Qu = np.zeros(n)
            for A, b, w in final_rows:
                Qu = Qu + w * (A.T @ (b - A @ x))
            Qc = np.zeros(n)
            lam_v = lam() if callable(lam) else lam
            if lam_v is not None and E.shape[0]:
                i = 0
                for k, (A, _) in enumerate(rows):
                    force = -A.T @ lam_v[i:i + A.shape[0]]
                    i += A.shape[0]
                    if k == 0:
                        Qc = force
                    else:
                        Qu = Qu + force
            return Qc, Qu, Qlim

        return forces

    def _warn_free(self, E, final_rows, stacklevel: int = 3):
        self._warned = True
        allrows = np.vstack([E] + [A for A, _, _ in final_rows])
        r = int(np.linalg.matrix_rank(allrows)) if allrows.shape[0] else 0
        free = self.n - r
        if free > 0:
            warnings.warn(
                f"UdwadiaKalabaController: the tasks constrain {r} of the {self.n} degrees of freedom of "
                f"{self.robot.path.name}; {free} degree(s) of freedom have no task and drift under Gauss' "
                f"principle (gravity, damping). Add a PostureTask in the last level to hold them.",
                UserWarning, stacklevel=stacklevel)

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
                EX = E @ X                                  # [S, E H⁻¹ r]
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
            B = A @ N
            P, NB, r = _null_basis(B, N.shape[1], self.rank_tol)
            x = x + N @ (P @ (b - A @ x))
            if k == 0 and np.linalg.norm(A @ x - b) > 1e-8 * (1 + np.linalg.norm(b)):
                raise self._incompatible(A, b, t)
            N = N @ NB
        if N.shape[1]:
            x = x + N @ np.linalg.solve(N.T @ H @ N, N.T @ (-g - H @ x))
        E = np.vstack([r[0] for r in rows])
        lam = np.linalg.lstsq(E.T, -(H @ x + g), rcond=None)[0]     # Eᵀλ = −(H v̇ + g), minimum norm
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
        out = self._sequential(kin, H, g, rows, C, l, u, Q, hD, t, iters)
        self._last_sequential = not self._levels_exact
        return out

    def _sequential(self, kin, H, g, rows, C, l, u, Q, hD, t, iters: int = 0):
        """Levels one at a time with the limits (module docstring, 3), each a bounded QP
        (``controllers/qp.py``), within the step's budget of ``max_step_iters`` ProxSuite iterations.

        Bounded: the one QP of ``_with_limits`` and level 1's two QPs are capped by ``controllers/qp.py``
        (300 iterations each); the levels below share ``max_step_iters`` (150).  So a step costs at most
        3 · 300 + 150 ProxSuite iterations (``bench/limits.py`` times it).

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
        if rows:
            A1, b1 = rows[0]
            r0 = self._solve(("seq", 0), M, -Q, A1, b1, C, l, u)
            iters += r0.iters
            if r0.solved or (r0.status == "max_iter" and r0.feasible):
                x, z = r0.x, r0.z
            else:
                mu = 1e-6 * max(float(np.trace(A1.T @ A1)), 1e-12) / float(np.trace(M))
                r1 = self._solve(("seq", "ls"), A1.T @ A1 + mu * M, -(A1.T @ b1) - mu * Q, None, None, C, l, u)
                iters += r1.iters
                resid = float(np.linalg.norm(A1 @ r1.x - b1)) if r1.feasible else np.inf
                if not resid <= 1e-6 * (1.0 + float(np.linalg.norm(b1))):
                    raise self._limits_infeasible(kin, hD, Q, rows, t, r0.raw_status or r0.status,
                                                  r1.x if r1.feasible else None, resid)
                x, z = r1.x, r1.z
            N = _null_basis(A1, n, self.rank_tol)[1]
            first = 1
        else:
            x, z, N, first = np.zeros(n), np.zeros(C.shape[0]), np.eye(n), 0
        iters_upper = iters
        margin = 1e-8 * (np.abs(l) + np.abs(u)) + 10.0 * self.eps_abs
        margin = np.where(np.isfinite(margin), margin, 0.0)
        z_last = None
        active = bool(np.any(z != 0))
        for k in range(first, len(rows) + 1):
            nz = N.shape[1]
            if nz == 0:
                break
            spent = iters - iters_upper
            if spent >= self.max_step_iters:
                self._give_way(k, kin, hD, x, f"the step's budget of {self.max_step_iters} QP iterations is spent")
                break
            CN = C @ N
            Cx = C @ x
            # z = 0 (the levels above) is feasible by construction: a bound that v̇_{k−1} meets only to the
            # tolerance of its QP is moved to it, so a lower level never has to repair a higher one
            lo, hi = np.minimum(l - Cx, 0.0) - margin, np.maximum(u - Cx, 0.0) + margin
            if k < len(rows):
                A, b = rows[k]
                AN = A @ N
                mu = 1e-6 * max(np.trace(AN.T @ AN), 1e-12) / np.trace(M)
                Hr = AN.T @ AN + mu * (N.T @ M @ N)
                gr = N.T @ (-A.T @ (b - A @ x) + mu * (M @ x - Q))
            else:
                Hr = N.T @ H @ N
                gr = N.T @ (H @ x + g)
            r = self._solve(("seq", k, nz), Hr, gr, None, None, CN, lo, hi, feasible_start=True,
                            budget=self.max_step_iters - spent)
            iters += r.iters
            active = active or bool(np.any(r.z != 0))
            if not r.solved:
                self.failures += 1
                better = r.feasible and float(0.5 * r.x @ Hr @ r.x + gr @ r.x) < 0.0
                if better:
                    x = x + N @ r.x
                self._give_way(k, kin, hD, x, f"its QP ended '{r.raw_status}' after {r.iters} iterations"
                               + (" (its last feasible iterate is used)" if better else ""))
                break
            x = x + N @ r.x
            if k == len(rows):
                z_last = r.z
            else:
                N = N @ _null_basis(AN, nz, self.rank_tol)[1]
        if z_last is not None:
            z = z_last
        if rows:
            # the split of the equality force, minimum norm, computed when the forces are asked for (on
            # copies: H and g may be the compiled plan's buffers, rewritten by the next step)
            E_up, rhs = np.vstack([a for a, _ in rows]), -(H @ x + g) - C.T @ z

            def lam():
                return np.linalg.lstsq(E_up.T, rhs, rcond=None)[0]
        else:
            lam = None
        self._seq_active = active
        self._levels_exact = bool(rows) and all(
            np.linalg.norm(a @ x - b) <= 1e-8 * (1.0 + np.linalg.norm(b)) for a, b in rows)
        return x, lam, z, iters, "sequential"

    def _level_name(self, k: int) -> str:
        L = self.levels[k]
        names = [task.name for task in L.tasks] + (["Gauss"] if L.gauss else [])
        return f"level {k + 1} {names}"

    def binding_limits(self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, rtol: float = 1e-6) -> list[str]:
        """The limits that bind at v̇: "<limit> on '<joint>' (lower|upper)" for every row within ``rtol``
        (relative to its bound) of a bound or beyond it."""
        out = []
        for lim in self.limits:
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
        info.gave_way = (f"{self._level_name(k)} gave way: {why}; binding: "
                         + (", ".join(bind[:6]) + (" …" if len(bind) > 6 else "") if bind else "none"))

    # ------------------------------------------------------------------ diagnostics
    def errors(self, kin: Kinematics, t: float):
        """Pose errors of every constraint and task at (kin, t), by name."""
        return ({c.name: c.error(kin, t) for c in self.constraints},
                {c.name: c.error(kin, t) for c in self.tasks})

    def _incompatible(self, A, b, t):
        """Explain an infeasible first level: the least-squares residual of each of its tasks."""
        x = np.linalg.lstsq(A, b, rcond=None)[0]
        res = A @ x - b
        parts, i = [], 0
        for task in self.levels[0].tasks:
            parts.append(f"{task.name}: residual {np.linalg.norm(res[i:i + task.dim]):.3g}")
            i += task.dim
        return InfeasibleError(f"hard constraints are incompatible at t={t:.4f} s; the least-squares residual is "
                               f"{np.linalg.norm(res):.3g} — " + "; ".join(parts)
                               + ". Remove one of them or make it a soft task.")

    def _limits_infeasible(self, kin, hD, Q, rows, t, status, closest=None, resid=float("nan")):
        """Level 1 and the limits cannot hold together: the level, the limits and joints that bind at the
        closest step (``closest``: the least-squares step within the limits, residual ``resid``), then
        ``diagnose_infeasible``'s cause."""
        head = ""
        if rows:
            bind = self.binding_limits(kin, hD, closest) if closest is not None else []
            head = (f"{self._level_name(0)} cannot hold within the limits at t={t:.4f} s"
                    + (f": at the closest step (residual {resid:.3g}) {', '.join(bind[:6])} bind" if bind else "")
                    + ". ")
        return InfeasibleError(head + self.diagnose_infeasible(kin, hD, Q, rows[0] if rows else None, t, status))

    def diagnose_infeasible(self, kin, hD, Q, level1, t, status) -> str:
        """Why level 1 cannot hold within the limits.  The torque the hard level alone needs
        (Gauss' solution (3.8) of level 1, no task) names the joint; then the cause: a target out of
        reach (distance of a frame target from its chain's workspace ball), a near-singular
        configuration (a task Jacobian whose σ_min/σ_max < 1e-3), or, if neither, effort limits too
        low for this motion."""
        names = [c.name for c in self.levels[0].tasks] if len(self.levels) > 1 else []
        M = kin.M
        A, b = (np.zeros((0, self.n)), np.zeros(0)) if level1 is None else level1
        x = udwadia_kalaba_closed_form(M, Q, A, b)[0] if A.shape[0] else np.linalg.solve(M, Q)
        tau_free = M @ x + hD
        tm = self.tau_max
        worst = int(np.argmax(np.abs(tau_free) / tm))
        need = (f"joint '{self.robot.joint_names[worst]}' would need {tau_free[worst]:.1f} N·m, "
                f"limit {tm[worst]:.1f}")
        head = f"at t={t:.4f} s the hard constraints {names} cannot be met within the effort limits ({need}"
        causes = []
        for L in self.levels:
            for task in L.tasks:
                far = _out_of_reach(self.robot, kin, task, t)
                if far:
                    causes.append(far)
        for L in self.levels:
            for task in L.tasks:
                if isinstance(task, (FrameTask, RelativeFrameTask, RigidCoupling)):
                    W = task.compute(kin, t)[0]
                    sv = np.linalg.svd(W, compute_uv=False)
                    if sv[-1] < 1e-3 * sv[0]:
                        r = int(np.sum(sv > 1e-3 * sv[0]))
                        causes.append(f"near-singular configuration: the Jacobian of '{task.name}' has rank {r} "
                                      f"of {W.shape[0]} (σ_min/σ_max = {sv[-1] / sv[0]:.1e})")
        if causes:
            return (head + f"; QP status {status}). Cause: " + "; ".join(causes)
                    + ". The tasks drove the robot into a state the limits cannot recover from: "
                      "bring the target into the workspace or away from the singularity.")
        return (head + f"; QP status {status}): the effort limits are too low for this motion (no target out "
                       "of reach, no singular task Jacobian); slow the motion or raise the limits")


def _chain_reach(robot: Robot, fid: int) -> tuple[int, float]:
    """(root joint, reach): the frame's supporting chain from its first moving joint, and an upper
    bound of the distance from that joint's origin to the frame (sum of the link offsets; the stroke
    of prismatic joints added)."""
    m = robot.model
    j = m.frames[fid].parentJoint
    reach = float(np.linalg.norm(m.frames[fid].placement.translation))
    while j > 0 and m.parents[j] > 0:
        if "P" in m.joints[j].shortname().replace("JointModel", ""):
            reach += float(max(abs(m.lowerPositionLimit[m.joints[j].idx_q]), abs(m.upperPositionLimit[m.joints[j].idx_q])))
        reach += float(np.linalg.norm(m.jointPlacements[j].translation))
        j = m.parents[j]
    return j, reach


def _out_of_reach(robot: Robot, kin, task, t) -> str | None:
    """A sentence if the task's target lies outside the workspace ball of its chain(s)."""
    d = robot.data
    if isinstance(task, FrameTask):
        root, reach = _chain_reach(robot, task.fid)
        if root == 0:
            return None
        p = task.desired(t)[0].translation
        dist = float(np.linalg.norm(p - d.oMi[root].translation))
        if dist > reach:
            return (f"the target of '{task.name}' is out of reach: {dist:.3f} m from joint "
                    f"'{robot.model.names[root]}', whose chain reaches {reach:.3f} m ({dist - reach:.3f} m outside "
                    f"the workspace)")
    elif isinstance(task, RigidCoupling):
        ra, reach_a = _chain_reach(robot, task.f1)
        rb, reach_b = _chain_reach(robot, task.f2)
        if ra == 0 or rb == 0:
            return None
        gap = float(np.linalg.norm(d.oMi[ra].translation - d.oMi[rb].translation))
        need = float(np.linalg.norm(task.T_AB.translation))
        if need > reach_a + reach_b + gap:
            return (f"'{task.name}' asks for frames {need:.3f} m apart, more than the chains can span "
                    f"({reach_a + reach_b + gap:.3f} m)")
    return None


def udwadia_kalaba_closed_form(M: np.ndarray, Q: np.ndarray, A: np.ndarray, b: np.ndarray):
    """Thesis (3.8) and (3.10): v̇ = a + M^{-1/2}(A M^{-1/2})⁺(b − A a),  a = M⁻¹ Q,
    Q_c = M^{1/2}(A M^{-1/2})⁺(b − A a).  (An independent reference for tests.)"""
    w, V = np.linalg.eigh(M)
    Mh = (V * np.sqrt(w)) @ V.T
    Mih = (V / np.sqrt(w)) @ V.T
    a = np.linalg.solve(M, Q)
    K = np.linalg.pinv(A @ Mih)
    return a + Mih @ K @ (b - A @ a), Mh @ K @ (b - A @ a)
