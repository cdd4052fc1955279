"""Projected inverse-dynamics control, PIDC ([Aghili] §7).

Motion (7.1).  Independent coordinates θ = S q (a selection of joints, gains per coordinate),
e = θ_d − θ, u = θ̈_d + K_v ė + K_p e (46).  The desired acceleration must satisfy the constraint
(13), (I − P) q̈ = C q̇; among those, we take the one with S q̈ = u:

    q̈_des = C q̇ + P z,   z = (S P)⁺ (u − S C q̇)

(with an explicit parameterization q = f(θ), N = ∂f/∂θ, this equals N u + Ṅ θ̇ of (45): both satisfy
(13) and S q̈ = u, and S N = I fixes the solution — checked in tests).  Then

    τ_∥ = P (M q̈_des + h)                                                           (45)

which gives ë + K_v ė + K_p e = 0 (Theorem 4) and is the minimum-norm torque producing q̈_des (48):
every τ with P τ = P b, b = M q̈_des + h, produces it, and P b ⊥ range(I − P).

Weighted norm (7.2).  minimize ‖W τ‖ s.t. P τ = P b, τ_passive = 0.  With τ = W⁻¹ x this is the
min-norm solution of the stacked system G x = g, G = [P W⁻¹; (I−B) W⁻¹], g = [P b; 0]:
τ = W⁻¹ G⁺ g (SVD, no KKT matrix).  Solvable iff ‖G G⁺ g − g‖ = 0.

Passive joints (7.4), W = I, the paper's closed form (60–62):

    τ = { I − (I − P) [(I − B)(I − P)]⁺ (I − B) } τ_∥

solvable iff (I − B) τ_∥ ∈ range((I − B)(I − P)) (58); the residual (I − B) τ is reported each step.

Constraint force (7.3).  f_d = Aᵀ λ_d, e_f = f_d − f_c (f_c measured, or estimated from
(32) with a finite-difference acceleration), integral I_f = ∫ e_f:

    τ_⊥ = (I − P) [ M q̈_des + h − (f_d + K_pf e_f + K_if I_f) ]                   (51–52)

Since f_c = (I − P)(M q̈ + h − τ) (32), with q̈ = q̈_des this gives f_c = f_d + K_pf e_f + K_if I_f:
the force loop does not involve the motion error and τ_⊥ does not move the system (P τ_⊥ = 0).
Hybrid law τ = τ_∥ + τ_⊥.  f_d and the integral are frozen while A is rank deficient (Remark 5).

The rank tolerance.  P, A⁺ and C drop the singular values of A at or below a threshold.  A user's ``rank_tol`` is
that threshold (absolute, in A's units).  The default (``rank_tol=None``) scales with what it compares:

    tol(q) = max(τ₀ max(1, s_A),  min(κ ‖d(q)‖, ρ s_A)),
    τ₀ = 1e-9,  s_A = maxᵢ ‖Aᵢ‖ (σ₁/√m ≤ s_A ≤ σ₁),  κ = 10 √n,  ρ = 1e-3

with d the loops' gaps p_b − p_a stacked (the position part of φ; a plane closure's left out, below).

Why the residual term.  A closure's rows use J_d = J_b − J_a (models/_loop_kernels.py).  A revolute joint j that moves
both of its frames (an ancestor of both), axis ω_j through o_j, has the columns [ω_j × (p − o_j); ω_j] in each
(LOCAL_WORLD_ALIGNED), so its column of A is [ω_j × d; 0], d = p_b − p_a the position part of φ (a prismatic
joint's is 0; a revolute closure's angular rows [x_A; y_A]ᵀ(ω_j − ω_j) = 0; a plane row's
n·(ω_j × d) + (n × d)·ω_j = 0 identically).  So A = A₀ + E with E those columns: on the loops (d = 0) E = 0, and
A₀ keeps the mechanism's own rank deficiency (a planar triangle: the row across its plane).  Off the loops, by
Weyl's inequality the spurious singular value is at most ‖E‖₂ ≤ ‖E‖_F ≤ √n_s ‖d‖ ≤ √n ‖d‖ (n_s ≤ n shared joints;
tests/test_sensors.py: a triangle opened by ε has σ₃ = |ε_⊥| exactly).  A soft plant's loops are open (MuJoCo's
series-parallel arm by ~6e-8 m, σ₃ ~ 8e-8, 80× an absolute 1e-9), so the absolute test counted the spurious row
as a constraint and the law tracked what that row dictated (J̇v/σ₃), not its reference.  κ = 10 √n is ten times
that bound (the margin covers A₀'s own change off the loops); it drops a real singular value only within 10 √n ‖d‖
of a singularity, where the state cannot resolve that direction anyway.  The cap ρ s_A: far from the loops (a
coupling that the law's own error ODE is still closing, ``stabilize``; a state off a model) the bound no longer tells a
spurious value from a real one, and dropping every row would leave the loops to themselves; capped, the residual term
drops only what is below 10⁻³ of A's scale (every spurious value of openings up to ρ s_A/√n).  On a rigid plant
(‖d‖ ~ 1e-12) the threshold is τ₀ max(1, s_A): the former absolute 1e-9 for rows of norm ≤ 1, relative above.
One constraint row (the compiled ``kernels.pidc_one_row``, a plane closure or a single user row) keeps τ₀: its only
singular value is its norm, so the relative term says nothing, and a single row has no redundancy for a residual
to fill (a plane row's shared columns vanish identically, above).

QP version (ProxSuite): variables τ_a (actuated joints only, so passive torques are zero by
construction), minimize ½‖W Sₐᵀ τ_a‖², s.t. V₀ᵀ Sₐᵀ τ_a = V₀ᵀ b (P = V₀V₀ᵀ: produce q̈_des) and
−τ_max ≤ τ_a ≤ τ_max.  Without active limits it is the closed form above.  When the limits make it
infeasible, a second QP minimizes ‖V₀ᵀ(Sₐᵀ τ_a − b)‖² + ε‖W Sₐᵀ τ_a‖² within the limits (the
closest potent torque the actuators can give), and the step is reported as saturated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cmstack.controllers._pidc_kernels import (
    NONFINITE_STATE,
    UNSOLVABLE,
    pidc_closed_step,
    pidc_rows,
    pidc_rows_work,
)
from cmstack.controllers.base import StepInfo
from cmstack.controllers.kernels import pidc_one_row, pidc_params
from cmstack.controllers.pidc_plan import ClosedChainPlan
from cmstack.controllers.qp import BoundedQP
from cmstack.models import _params
from cmstack.models.coupling import Task
from cmstack.models.errors import ConfigError, InfeasibleError, SolverError, StateError
from cmstack.models.lie import pinv
from cmstack.models.loops import as_constraint
from cmstack.models.projection import DEFAULT_TOL, Projection, c_times_v, project
from cmstack.models.robot import Kinematics, Robot
from cmstack.models.trajectory import Trajectory, as_trajectory

#: relative rank tolerance of the pseudo-inverses (singular values ≤ _RTOL·s_1 are dropped)
_RTOL = 1e-10
#: the cap ρ of the default rank threshold's residual term, relative to A's largest row norm (module docstring)
_RANK_CAP = 1e-3
#: closed-form (S P)⁺ only while 1 − ‖u‖² (the smallest eigenvalue of S P Sᵀ) exceeds this; below, the
#: SVD (condition number ≤ 1e4 keeps the closed form within ~1e-12 of the SVD)
_SM_MIN = 1e-4


@dataclass(kw_only=True)
class PIDCInfo(StepInfo):
    """One PIDC step: ``solvable`` false when the passive-joint condition (58) fails (status
    "unsolvable"), ``rank`` of A, the constraint forces f_c/f_d [N·m], desired q̈, τ_∥ and τ_⊥."""

    solvable: bool = True
    passive_residual: float = 0.0  # ‖(I − B) τ‖ before zeroing (58)
    rank: int = 0
    limit_active: bool = False
    qp_status: str = ""
    f_c: np.ndarray | None = (
        None  # constraint force (joint space): measured/estimated by the force loop, else (32)
    )
    lam: np.ndarray | None = None  # its multipliers λ = (A⁺)ᵀ f_c, one per constraint row
    f_d: np.ndarray | None = None
    qdd_des: np.ndarray | None = None
    tau_par: np.ndarray | None = None
    tau_perp: np.ndarray | None = None


def _buffered(name: str, index: Any) -> property:
    """A field of ``_BufferedInfo``: read from the step's buffer (``index(buffer, n, m)``) when first asked for
    after a step, kept until the next one; a value set by hand is kept likewise."""
    key = "_c_" + name

    def get(self: _BufferedInfo) -> Any:
        c = self.__dict__.get(key)
        buf = self._buf
        if c is not None and c[0] is buf:
            return c[1]
        val = None if buf is None else index(buf, self._n, self._m)
        self.__dict__[key] = (buf, val)
        return val

    def put(self: _BufferedInfo, value: Any) -> None:
        self.__dict__[key] = (self._buf, value)

    return property(get, put, doc=f"{name} of the last step (sliced from its buffer when read)")


class _BufferedInfo(PIDCInfo):
    """The record of the compiled closed-chain step (``PIDC._closed_step``): one per controller, refilled each
    step with that step's buffer ``_buf`` = [q̈_des, τ_∥, τ, f_c (n each), λ (m), q (nq), v, rank, passive residual]
    (``_pidc_kernels.pidc_closed_step``); the arrays and numbers are read from it when asked for, not at every
    step.  Same fields and values as the ``PIDCInfo`` the other steps make."""

    _buf: np.ndarray | None = None

    def __init__(self, n: int, m: int) -> None:
        self._n, self._m = n, m
        super().__init__(status="solved")

    rank = _buffered("rank", lambda b, n, m: int(b[-2]))  # (the buffer's last two entries)
    passive_residual = _buffered("passive_residual", lambda b, n, m: float(b[-1]))
    qdd_des = _buffered("qdd_des", lambda b, n, m: b[:n])
    tau_par = _buffered("tau_par", lambda b, n, m: b[n : 2 * n])
    f_c = _buffered("f_c", lambda b, n, m: b[3 * n : 4 * n])
    lam = _buffered("lam", lambda b, n, m: b[4 * n : 4 * n + m])


class Squeeze:
    """λ_d of an internal force along the line between two frames (two hands holding one body by a 6-row weld, e.g.
    a ``RigidCoupling``, whose linear rows act on frame 2 and their opposite on frame 1):

        λ_d = [s d; 0],   d = (p_2 − p_1) / ‖p_2 − p_1‖   (world axes)

    s [N] > 0: the body pushes the hands apart with s newtons.  Called by the force loop as ``(t, kin)`` (the step's
    kinematics snapshot); ``d`` keeps the last direction (read it to express a measured force along the line).

    Args: robot; frame1, frame2: frame names; force: s [N]."""

    takes_state = True  # ForceLaw calls it with (t, kin)

    def __init__(self, robot: Robot, frame1: str, frame2: str, force: float) -> None:
        self.s = float(force)
        if not math.isfinite(self.s):
            raise ConfigError(f"Squeeze({frame1!r}, {frame2!r}): force must be finite, got {force!r}")
        self.f1, self.f2 = robot.frame_id(frame1), robot.frame_id(frame2)
        self.d = np.zeros(3)

    def __call__(self, t: float, kin: Kinematics) -> np.ndarray:
        p1, p2 = kin.frame(self.f1).T.translation, kin.frame(self.f2).T.translation
        self.d = (p2 - p1) / np.linalg.norm(p2 - p1)
        return np.concatenate([self.s * self.d, np.zeros(3)])


class ForceLaw:
    """Constraint-force regulation (7.3): λ_d(t) (or a constant, or an object with ``takes_state = True`` called as
    λ_d(t, kin), e.g. ``Squeeze``), PI gains on e_f = f_d − f_c.  ``measure``: ``measure(t, q, v) -> f_c`` (n,) if a
    sensor is available, or "plant": the plant's constraint force on the model's joints (MuJoCo's
    ``qfrc_constraint``: a wrist force sensor of a simulated plant; the PIDC then ``SensesPlant``, given the plant
    by ``simulate`` and, across processes, ``sensed_data``), taken as f_d before a plant is given; None: f_c is
    estimated from (32)."""

    def __init__(
        self,
        lambda_d: ArrayLike | Callable[..., np.ndarray],
        kp: float = 0.0,
        ki: float = 0.0,
        measure: Callable[[float, np.ndarray, np.ndarray], np.ndarray] | str | None = None,
    ) -> None:
        if not (np.isfinite(kp) and kp >= 0 and np.isfinite(ki) and ki >= 0):
            raise ConfigError(f"ForceLaw: gains must be >= 0, got kp={kp}, ki={ki}")
        if isinstance(measure, str) and measure != "plant":
            raise ConfigError(f"ForceLaw: measure={measure!r} is not a function, 'plant' or None")
        self.takes_state = bool(getattr(lambda_d, "takes_state", False))
        if callable(lambda_d):
            self.lambda_d = lambda_d
        else:
            constant = np.atleast_1d(np.asarray(lambda_d, float))
            self.lambda_d = lambda t: constant
        self.kp, self.ki, self.measure = float(kp), float(ki), measure
        self.integral: np.ndarray | None = None  # ∫e_f dt (N·s), sized on the first step


class PIDC:
    """τ = PIDC(t, q, v) for a Pinocchio robot with constraints (phi, jacobian, jdot_v).

    coords: names of the joints used as independent coordinates θ; reference: a Trajectory on R^k
    (models/trajectory.py: t → (θ_d, θ̇_d, θ̈_d)), or a constant θ_d, or a function of t giving that triple.
    Or coords: a ``Task`` of the core contract (or a list of them), e.g. ``FrameTask(robot, "ee", Circle(...),
    rows="position")``: task-space coordinates following the task's own trajectory and gains (reference,
    kp, kv not given; ``_task_acceleration``).
    constraint: a ``LoopClosure``, a list of them, None (``robot.loops``; passive defaults to
    ``robot.passive_joints``), or an object with phi, jacobian, jdot_v.  ``info.f_c`` is the constraint force
    (32) and ``info.lam`` its multipliers.
    passive: joint names without actuator.  weights: per-joint W (diag) for ‖Wτ‖ (7.2).
    qp=True: the ProxSuite version with torque limits (URDF effort, or ``torque_limits``).
    stabilize=True: the constraint's acceleration is that of its own error ODE (a loop's gains kp, kd, a Baumgarte
    term), q̈_c = A⁺ b_c with (A, b_c) = the closures' ``compute`` rows (b_c = −J̇v − K_d J v − K_p e), in place of
    C q̇ = −A⁺ J̇v (the thesis' coupling as [Aghili]'s constraint, [Milioshin] (3.30); needs closures that are
    tasks).  null_damping k [1/s] (task coordinates): the velocity in the null space of the tasks and the constraint
    is damped, z ← z − (I − (A_t P)⁺ A_t P) k q̇.

    Compiled steps (no QP, weights or force law): one constraint row in closed form (``kernels.pidc_one_row``),
    several rows through complete orthogonal decompositions instead of SVDs (``_pidc_kernels.pidc_rows``,
    derived there); ``_numpy_step`` is the reference both are tested against.

    rank_tol: None (default) for the threshold that scales with A and with the loops' residual (module docstring,
    "The rank tolerance"), or an absolute threshold in A's units (the singular values at or below it are dropped)."""

    def __init__(
        self,
        robot: Robot,
        constraint: Any,
        coords: Task | Sequence[Task] | Sequence[str],
        reference: Any = None,
        kp: ArrayLike | None = None,
        kv: ArrayLike | None = None,
        *,
        passive: Sequence[str] | None = None,
        weights: ArrayLike | None = None,
        force: ForceLaw | None = None,
        qp: bool = False,
        torque_limits: ArrayLike | None = None,
        rank_tol: float | None = None,
        solve_tol: float = 1e-8,
        on_unsolvable: str = "report",
        model_damping: bool = True,
        eps_reg: float = 1e-6,
        stabilize: bool = False,
        null_damping: float = 0.0,
    ) -> None:
        if constraint is None:
            if not getattr(robot, "loops", None):
                raise ConfigError(f"PIDC: no constraint given and {robot.label} has no loops (robot.loops)")
            constraint = robot.loops
        if passive is None:
            passive = tuple(getattr(robot, "passive_joints", ()))
        self.robot, self.c = robot, as_constraint(constraint)
        self._rows_fn = getattr(self.c, "jacobian_and_jdot_v", None)
        # loops of this robot: their rows are read from the step's own kinematics snapshot (no second pass)
        self._rows_kin = (
            getattr(self.c, "rows_from", None) if getattr(self.c, "robot", None) is robot else None
        )
        n = robot.nv
        self._set_coordinates(coords, reference, kp, kv)
        self._set_actuation(list(passive), weights, force)
        self.stabilize = bool(stabilize)
        self._closures = list(getattr(self.c, "closures", None) or [self.c])
        if self.stabilize and not all(isinstance(c, Task) for c in self._closures):
            raise ConfigError(
                "PIDC: stabilize=True needs a constraint of loop closures (tasks: their compute rows)"
            )
        self.null_damping = float(null_damping)
        if not (math.isfinite(self.null_damping) and self.null_damping >= 0):
            raise ConfigError(f"PIDC: null_damping must be a finite number >= 0, got {null_damping!r}")
        self.qp = bool(qp)
        if on_unsolvable not in ("report", "raise"):
            raise ConfigError(f"on_unsolvable='{on_unsolvable}' is not 'report' or 'raise'")
        self.on_unsolvable = on_unsolvable
        self.tau_max = np.asarray(robot.effort_limit if torque_limits is None else torque_limits, dtype=float)
        self.tau_max = np.broadcast_to(self.tau_max, (n,)).copy()
        if self.qp and np.any(~(self.tau_max[self.actuated] > 0)):
            raise ConfigError(
                f"PIDC qp=True needs positive torque limits on actuated joints, got {self.tau_max}"
            )
        self._set_rank_tol(rank_tol, n)
        self.solve_tol, self.eps_reg = float(solve_tol), float(eps_reg)
        self.D = robot.damping.copy() if model_damping else np.zeros(n)
        self._reset_step_state()
        self._choose_step(constraint)

    def _set_rank_tol(self, rank_tol: float | None, n: int) -> None:
        """``rank_tol`` None: τ₀ = 1e-9 and κ = 10 √n of the scaled threshold (module docstring, "The rank
        tolerance"); a number: that absolute threshold (κ = 0)."""
        self._rank_kappa = 10.0 * math.sqrt(n) if rank_tol is None else 0.0
        tol = DEFAULT_TOL if rank_tol is None else rank_tol
        if not (math.isfinite(tol) and tol >= 0):
            raise ConfigError(f"PIDC: rank_tol must be None or a finite number >= 0, got {rank_tol!r}")
        self.rank_tol = float(tol)

    def _set_coordinates(
        self,
        coords: Task | Sequence[Task] | Sequence[str],
        reference: Any,
        kp: ArrayLike | None,
        kv: ArrayLike | None,
    ) -> None:
        """The independent coordinates: task coordinates (``tasks``, following their own trajectories and
        gains) or joint coordinates (``coords`` names, the selection S, ``ref`` and the gains kp, kv)."""
        robot, n = self.robot, self.robot.nv
        if isinstance(coords, Task) or (
            isinstance(coords, (list, tuple)) and coords and all(isinstance(c, Task) for c in coords)
        ):
            self.tasks = [coords] if isinstance(coords, Task) else list(coords)
            if reference is not None:
                raise ConfigError(
                    "PIDC: task coordinates follow their own trajectories (the task's); pass reference=None"
                )
            coords, reference = [], 0.0
            kp = 0.0 if kp is None else kp
            kv = 0.0 if kv is None else kv
        else:
            self.tasks = []
            if reference is None or kp is None or kv is None:
                raise ConfigError("PIDC: joint coordinates need a reference and the gains kp, kv")
        names = [str(c) for c in coords] if not self.tasks else []  # joint coordinates (names)
        self.S = np.zeros((len(names), n))
        for i, name in enumerate(names):
            self.S[i, robot.joint_index(name)] = 1.0
        self.coords = names
        self._ci = np.array([robot.joint_index(name) for name in names], dtype=np.intp)  # S x = x[_ci]
        self.ref = reference
        self.kp = np.broadcast_to(np.asarray(kp, dtype=float), (len(names),)).copy()
        self.kv = np.broadcast_to(np.asarray(kv, dtype=float), (len(names),)).copy()
        if np.any(self.kp < 0) or np.any(self.kv < 0):
            raise ConfigError(f"PIDC gains must be >= 0, got kp={kp}, kv={kv}")
        shifted = [c for c in names if robot.joint_q_index(c) != robot.joint_index(c)]
        if shifted:
            raise ConfigError(
                f"PIDC: joint coordinates {shifted} sit after a ball or free joint (their q and v indices "
                "differ), which PIDC's joint law does not map yet; give it task coordinates (a FrameTask)"
            )

    def _set_actuation(self, passive: list[str], weights: ArrayLike | None, force: ForceLaw | None) -> None:
        """The actuated joints (``actuated``, I − B), the torque weights W and the force law (with the plant's
        constraint force as its sensor when ``force.measure == "plant"``)."""
        n = self.robot.nv
        self.actuated = np.ones(n, dtype=bool)
        self.actuated[self.robot.v_indices(passive)] = False  # (a ball or free joint: all its coordinates)
        self.passive = passive
        self.IB = np.diag((~self.actuated).astype(float))  # I − B
        self._passive_mask = (~self.actuated).astype(float)  # diagonal of I − B
        if weights is None:
            self.w = None
        else:
            w = np.broadcast_to(np.asarray(weights, dtype=float), (n,)).copy()
            if np.any(~(w > 0)) or not np.all(np.isfinite(w)):
                raise ConfigError(f"PIDC weights must be finite and > 0, got {weights}")
            self.w = w
        if force is not None and passive:
            raise ConfigError(
                "PIDC: constraint-force control needs the impotent input (I−P)τ on every joint; "
                f"it cannot be combined with passive joints {passive}"
            )
        self.force = force
        if force is not None and force.measure == "plant":  # SensesPlant (controllers/base.py): this one only
            self.plant: Any = None
            self.attach_plant = self._attach_plant
            self.sensed_data = ("qfrc_constraint",)

    def _reset_step_state(self) -> None:
        """The step's bookkeeping before the first step: the info record, counters and caches."""
        self.info = PIDCInfo()
        self.unsolvable_steps = 0
        self.saturated_steps = 0
        # every QP of this law: conditioned and bounded (controllers/qp.py)
        self._qp = BoundedQP(eps_abs=1e-10)
        self.failures = 0
        self._kin: Kinematics | None = None
        self._kin_src: Any = None  # what ``kin`` was built from (a compiled step's buffer or (q, v))
        self._terr_of: Any = None  # the closed-chain step buffer whose task errors the plan's ``terr`` holds
        self._kin_qv: tuple[np.ndarray, np.ndarray] | np.ndarray | None = None  # (q, v), or a buffer of them
        # (t, v, τ) of the previous step, for the force estimate
        self._prev: tuple[float, np.ndarray, np.ndarray] | None = None
        # the force loop's measured and desired forces (set by _force_term)
        self._fc: np.ndarray | None = None
        self._fd: np.ndarray | None = None

    def _choose_step(self, constraint: Any) -> None:
        """Which step runs: compiled with one constraint row in closed form (``kernels.pidc_one_row``),
        compiled with several rows (``_pidc_kernels.pidc_rows``, its plan set up here), or NumPy.  Both
        compiled steps need no QP, weights, force loop or stabilization.  A ball or free joint (nq ≠ nv) is
        theirs too: q is only copied and read at the joint coordinates' indices, which ``_set_coordinates``
        keeps before any such joint; every other vector is sized by nv."""
        robot = self.robot
        self._compiled = (
            not self.qp
            and self.w is None
            and self.force is None
            and not self.stabilize
            and not self.tasks
            and getattr(constraint, "m", None) == 1
        )
        self._reference_tables()
        self._kref = np.zeros((3, len(self.coords)))
        # the dynamics read in place (Robot.update_in_place): for a Robot whose update is its own
        self._direct = (
            isinstance(robot, Robot)
            and type(robot).update is Robot.update
            and type(robot).update_in_place is Robot.update_in_place
        )
        self._kinfo: PIDCInfo | None = None  # the info record the compiled steps refill
        self._row = getattr(constraint, "row_and_jdot_v", None)
        self._has_passive = bool(self.passive)
        m = getattr(self.c, "m", None)
        self._rows_compiled = (
            not self._compiled
            and not self.qp
            and self.w is None
            and self.force is None
            and not self.stabilize
            and self.null_damping == 0.0
            and isinstance(m, int)
            and m >= 1
        )
        self._plan: ClosedChainPlan | None = None
        if self._rows_compiled and isinstance(m, int):
            self._rows_setup(m)

    # ------------------------------------------------------------------ pieces (pure given inputs)
    def desired_acceleration(
        self, t: float, q: np.ndarray, v: np.ndarray, pr: Projection, Cv: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.tasks:
            return self._task_acceleration(t, pr, Cv)
        ci = self._ci
        th_d, thd_d, thdd_d = (np.atleast_1d(np.asarray(x, dtype=float)) for x in self.ref(t))
        e, ed = th_d - q[ci], thd_d - v[ci]
        u = thdd_d + self.kv * ed + self.kp * e
        z = self._sp_pinv(pr) @ (u - Cv[ci])
        return Cv + pr.P @ z, e

    def _task_acceleration(self, t: float, pr: Projection, Cv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Task coordinates: each task's rows (A_t, b_t) = (W, −drift − K_d w − K_p e) from the step's kinematics
        snapshot (the core contract), stacked; among the accelerations the loops allow, q̈ = C q̇ + P z, the
        one with A_t q̈ = b_t in the least-squares sense:

            z = (A_t P)⁺ (b_t − A_t C q̇)

        (the joint case with S → A_t and u → b_t; A_t P may be rank deficient, e.g. a planar mechanism's
        out-of-plane row: the truncated SVD drops it).  With e = the tasks' errors, the tracked rows then obey
        ẅ + K_d w + K_p e = 0 (Theorem 4 of the joint case, the same argument)."""
        kin = self.kin
        assert kin is not None  # built from the step's state (``kin``)
        A, b, e = self._task_rows(kin, t)
        AP = A @ pr.P
        AP_pinv = pinv(AP, rtol=_RTOL)
        z = AP_pinv @ (b - A @ Cv)
        if self.null_damping:
            v = kin.v
            z = z - (v * self.null_damping - AP_pinv @ (AP @ (v * self.null_damping)))
        return Cv + pr.P @ z, e

    def _task_rows(self, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A_t, b_t, e) of the task coordinates at (kin, t), stacked (``_task_acceleration``)."""
        As, bs, es = [], [], []
        for task in self.tasks:  # one error_dynamics per task: its rows, b and e at once
            W, drift, w, e = task.error_dynamics(kin, t)
            r = task.rows
            As.append(W[r])
            bs.append((-drift - task.kd * w - task.kp * e)[r])
            es.append(e[r])
        A = As[0] if len(As) == 1 else np.vstack(As)
        b = bs[0] if len(bs) == 1 else np.concatenate(bs)
        return A, b, (es[0] if len(es) == 1 else np.concatenate(es))

    def _sp_pinv(self, pr: Projection) -> np.ndarray:
        """(S P)⁺.  One constraint row (P = I − y yᵀ, y = a/‖a‖, or P = I at rank 0), closed form:
        (S P)(S P)ᵀ = S P Sᵀ = I − u uᵀ with u = S y, so when 1 − ‖u‖² is well away from 0

            (S P)⁺ = P Sᵀ (I − u uᵀ)⁻¹ = P Sᵀ (I + u uᵀ / (1 − ‖u‖²))        (Sherman–Morrison)

        and (S I)⁺ = Sᵀ (S selects distinct joints).  Otherwise the truncated SVD."""
        ci = self._ci
        if pr.m == 1:
            if pr.rank == 0:
                return self.S.T
            y = pr.A_pinv[:, 0] * pr.sigma[0]
            u = y[ci]
            d = 1.0 - float(u @ u)
            if d > _SM_MIN:
                K = np.outer(u, u / d)
                K.flat[:: len(ci) + 1] += 1.0
                return pr.P[:, ci] @ K
        return pinv(self.S @ pr.P, rtol=_RTOL)

    def passive_closed_form(
        self, tau_par: np.ndarray, P: np.ndarray, pr: Projection | None = None
    ) -> np.ndarray:
        """(60–62): τ = {I − (I−P)[(I−B)(I−P)]⁺(I−B)} τ_∥.

        With one constraint row of rank 1 (``pr`` given), I − P = y yᵀ and (I−B)(I−P) = x yᵀ with
        x = (I−B) y, whose pseudo-inverse is y xᵀ/‖x‖² (zero if x = 0), so τ = τ_∥ − y (x·τ_∥)/‖x‖²;
        at rank 0, I − P = 0 and τ = τ_∥."""
        if pr is not None and pr.m == 1:
            if pr.rank == 0:
                return tau_par.copy()
            y = pr.A_pinv[:, 0] * pr.sigma[0]
            x = y * self._passive_mask
            nx2 = float(x @ x)
            if nx2 == 0.0:
                return tau_par.copy()
            return tau_par - y * (float(x @ tau_par) / nx2)
        Q = np.eye(len(tau_par)) - P
        return tau_par - Q @ (pinv(self.IB @ Q, rtol=_RTOL) @ (self.IB @ tau_par))

    def weighted_closed_form(self, b: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, float]:
        """min ‖Wτ‖ s.t. Pτ = Pb, (I−B)τ = 0:  τ = W⁻¹ G⁺ g."""
        n = len(b)
        winv = np.ones(n) if self.w is None else 1.0 / self.w
        G = np.vstack([P * winv, self.IB * winv])
        g = np.concatenate([P @ b, np.zeros(n)])
        x = pinv(G, rtol=_RTOL) @ g
        return winv * x, float(np.linalg.norm(G @ x - g))

    # ------------------------------------------------------------------ the law
    @property
    def ref(self) -> Trajectory:
        """The reference of the coordinates, t ↦ (x_d, ẋ_d, ẍ_d)."""
        return self._ref

    @ref.setter
    def ref(self, reference: Any) -> None:
        self._ref = as_trajectory(reference)
        # a user function is called directly by the compiled step (no Sample built around its result)
        direct = getattr(self._ref, "kernel_function", None)
        self._ref_call = (direct() if callable(direct) else None) or self._ref
        if "_kprm" in vars(self):  # set after construction: the compiled steps' copies follow it
            self._reference_tables()
            if self._rows_compiled:
                self._rows_setup(self._rk_m)

    def _reference_tables(self) -> None:
        """The compiled steps' copy of the reference: one that samples itself as a sinusoid in the kernel
        (``kernel_sinusoid()``: chosen by what the reference does, not by its type, so a subclass that
        redefines its sampling is called instead) has its (c, a, ω, φ) in the kernels' parameters; any other
        reference is called at each step.  Built at construction and again whenever ``ref`` is set."""
        k = len(self.coords)
        params = getattr(self._ref, "kernel_sinusoid", None)
        sin = params() if callable(params) and not self.tasks else None
        if sin is not None and any(np.shape(x) != (k,) for x in sin):
            sin = None
        self._sin = sin
        self._sinus = sin is not None
        self._ref_sampled = not self.tasks and not self._sinus  # the reference called in Python each step
        self._kprm = (
            None
            if self.tasks
            else pidc_params(
                self.kp,
                self.kv,
                self._ci,
                self._passive_mask,
                self.D,
                bool(self.passive),
                self.rank_tol,
                _SM_MIN,
                sin,
            )
        )

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self._plan is not None:  # the compiled closed-chain step (``_rows_step``'s fast case)
            tau = self._closed_step(t, q, v)
            if tau is not None:
                return tau
        elif self._compiled:
            tau = self._compiled_step(t, q, v)
            if tau is not None:
                return tau
        elif self._rows_compiled:
            tau = self._rows_step(t, q, v)
            if tau is not None:
                return tau
        return self._numpy_step(t, q, v)

    # ------------------------------------------------------------------ compiled step, several rows
    def _rows_setup(self, m: int) -> None:
        """Constant tables of ``_pidc_kernels.pidc_rows`` (its docstring: ``prm``, ``ints``) and its scratch."""
        n = self.robot.nv
        k = sum(t.dim for t in self.tasks) if self.tasks else len(self._ci)
        pj = np.flatnonzero(~self.actuated)
        ci = np.zeros(k, dtype=np.int64) if self.tasks else self._ci  # (not read with task rows)
        self._rk_ints = np.concatenate([[m, 1 if self.tasks else 0, k, pj.size], ci, pj]).astype(np.int64)
        if self._sin is not None:
            sin = np.concatenate([np.broadcast_to(np.asarray(x, float), (k,)) for x in self._sin])
        else:
            sin = np.zeros(4 * k)
        kp = np.zeros(k) if self.tasks else self.kp
        kv = np.zeros(k) if self.tasks else self.kv
        self._rk_prm = np.concatenate(
            [[self.rank_tol, _RTOL, self.solve_tol], self.D, kp, kv, sin, [self._rank_kappa, _RANK_CAP]]
        )
        self._rk_work = pidc_rows_work(n, m, k, pj.size)
        self._rk_ref = np.zeros((3, k))
        self._rk_S = np.zeros((k, n))  # B₀ of the joint case is not read (the kernel selects the joints)
        self._rk_m = m
        self._plan = ClosedChainPlan.build(self)  # the frames and rows compiled too (robot.loops)
        if self._plan is not None:
            self._rk_ref = self._plan.ref  # the reference buffer the kernel reads (a view of its table)

    def _closed_step(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray | None:
        """The closed-chain step as the robot's lean pass (``Robot.update_for_kernel``: crba) and one compiled call
        (``_pidc_kernels.pidc_closed_step``: h, frames, loop rows, task rows and the law of ``pidc_rows`` on the
        pass's arrays, read in place; ``controllers/pidc_plan.py``).  The tasks' gains and targets are copied into
        the plan's tables only when one was set since (``models/_params.py``); the info record is one
        (``_BufferedInfo``), refilled, its arrays sliced from the step's buffer when read; ``kin`` is built from
        the buffer's copies of (q, v) on first access.  None: take the NumPy path (non-finite rows, which it
        names)."""
        robot = self.robot
        P = self._plan
        assert P is not None  # set up with the closed-chain step (``_rows_setup``)
        q, v = robot.update_for_kernel(
            q, v
        )  # crba (data.J, data.oMi, M); sizes checked, finiteness in the kernel
        if robot.data is not P.data:
            P.bind(robot.data)
        if P.version != _params.version:
            P.copy_parameters()
        if P.traj_tasks:
            P.sample(t)
        if P.python:  # the tasks without a compiled row builder: their rows from their own Python
            P.python.fill(t, q, v)
        if self._ref_sampled:
            self._sample_reference(t, self._rk_ref)
        out = np.empty(P.out_len)
        st = pidc_closed_step(float(t), q, v, P.ptr, P.I, P.F, out)
        if st and st != UNSOLVABLE:
            if st == NONFINITE_STATE:
                robot.refuse_state(q, v)  # raises with the non-finite entries named
            return None
        self._kin, self._kin_qv = None, out  # (q, v) of the step: out's copies (``kin``)
        self._terr_of = out  # the plan's task errors (``terr``) are this step's (``errors``)
        info = self._kinfo
        if info is not self.info or not isinstance(
            info, _BufferedInfo
        ):  # one record, refilled with this step's buffer
            info = self._kinfo = _BufferedInfo(v.size, self._rk_m)
        elif not info.solvable:
            info.status, info.solvable = "solved", True
        info._buf = out
        self.info = info
        if st:
            self._unsolvable(info, t, q, info.rank, f"‖(I−B)τ‖ = {info.passive_residual:.3g}")
        return out[P.sl_tau]

    def _sample_reference(self, t: float, ref: np.ndarray) -> None:
        """(x_d, ẋ_d, ẍ_d) at t into the rows of ``ref`` (3 × k: the compiled steps' reference buffer)."""
        r0, r1, r2 = self._ref_call(t)
        try:
            ref[0], ref[1], ref[2] = r0, r1, r2
        except ValueError:
            raise ConfigError(
                f"PIDC: the reference at t={t} does not have one entry per coordinate {self.coords}"
            ) from None

    def _rows_step(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray | None:
        """The law of ``_numpy_step`` for several constraint rows as one compiled kernel
        (``_pidc_kernels.pidc_rows``: the SVD pseudo-inverses replaced by complete orthogonal decompositions,
        derived there); None when the rows are not finite (the NumPy path then names them)."""
        if self._plan is not None:
            return self._closed_step(t, q, v)
        kin = self.robot.update(q, v)
        self.kin = kin
        q, v = kin.q, kin.v
        if self._rows_kin is not None:
            A, jdv = self._rows_kin(kin)  # from Robot.update's pass
        elif self._rows_fn is not None:
            A, jdv = self._rows_fn(q, v)
        else:
            A, jdv = self.c.jacobian(q), self.c.jdot_v(q, v)
        A = np.asarray(A, dtype=float)
        jdv = np.asarray(jdv, dtype=float).reshape(-1)
        n, m = v.size, self._rk_m
        if A.shape != (m, n) or jdv.shape != (m,):
            return None
        ref = self._rk_ref
        if self.tasks:
            B0, bt, _ = self._task_rows(kin, t)
            ref[0] = bt
        else:
            B0 = self._rk_S
            if not self._sinus:
                self._sample_reference(t, self._rk_ref)
        out = np.empty(4 * n + m)
        st, rank, res, bn, unsolvable = pidc_rows(
            kin.M,
            kin.h,
            q,
            v,
            A,
            jdv,
            B0,
            float(t),
            ref,
            self._sinus and not self.tasks,
            self._rk_prm,
            self._rk_ints,
            self._rk_work,
            out,
            self._residual_norm(kin) if self._rank_kappa and m > 1 else 0.0,
        )
        if st:
            return None
        return self._rows_finish(t, q, v, out, rank, res, unsolvable)

    def _rows_finish(
        self, t: float, q: np.ndarray, v: np.ndarray, out: np.ndarray, rank: int, res: float, unsolvable: bool
    ) -> np.ndarray:
        """The info record and the unsolvable-step bookkeeping of a compiled several-rows step (as ``_numpy_step``);
        q, v: the step's own copies of the state."""
        n = v.size
        tau = out[2 * n : 3 * n]
        info = PIDCInfo(
            status="solved",
            rank=rank,
            qdd_des=out[:n],
            tau_par=out[n : 2 * n],
            f_c=out[3 * n : 4 * n],
            lam=out[4 * n :],
        )
        if self._has_passive:
            info.passive_residual = res
        if unsolvable:
            self._unsolvable(info, t, q, rank, f"‖(I−B)τ‖ = {res:.3g}")
        self.info = info
        self._prev = (t, v, tau)  # the step's own copy of v, and τ (a view of this step's buffer)
        return tau

    @property
    def kin(self) -> Kinematics | None:
        """The robot's kinematics at the last step's state (``Robot.update``; built on first access after a
        compiled step, which reads M and h from Pinocchio directly)."""
        qv = self._kin_qv
        if self._kin is None and qv is not None:
            if isinstance(qv, tuple):
                q, v = qv
            else:  # a closed-chain step's buffer (``_closed_step``): its copies of q, v
                P = self._plan
                assert P is not None  # (a buffer is a closed-chain step's)
                q, v = qv[P.sl_q], qv[P.sl_v]
            self._kin = self.robot.update(q, v)
            self._kin_src, self._kin_qv = qv, None
        return self._kin

    @kin.setter
    def kin(self, k: Kinematics | None) -> None:
        self._kin, self._kin_qv, self._kin_src = k, None, None

    def errors(self, kin: Kinematics, t: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The errors of the constraint and of the tracked coordinates at (kin, t), by name (``ReportsErrors``):

        * constraints: each loop closure's residual φ (``LoopClosure.error``: m on position rows, rad on
          rotation rows) under its name; a constraint object of another kind, φ(q) under its ``name``
          (or "constraint");
        * a closure whose error is in frame b's axes (``error_axes="b"``, a ``RigidCoupling``): ``Task.error``;
        * tasks: each task's error (``Task.error``, its own units and axes) under its name; joint coordinates
          θ their error θ_d(t) − θ [rad or m] under "coords" (the sign of ``PostureTask``'s q_ref − q).

        ``simulate`` keeps them per step in ``run.errors`` (``run.error_arrays()``).  Cost: the loops' φ from the
        closure set's one compiled pass (φ(q) is what ``LoopClosure.error`` returns); for ``kin`` the last
        compiled closed-chain step's own snapshot, the task errors that step's kernel wrote (its ``terr``
        table, ``Task.error``'s definition: tested equal), else ``Task.error`` on ``kin``."""
        c = self.c
        closures = getattr(c, "closures", None)
        if closures is None and callable(getattr(c, "error", None)):
            closures = [c]
        if closures is not None:
            own = [getattr(x, "error_axes", "world") == "b" for x in closures]  # (errors in their own axes)
            phi = None if all(own) else np.asarray(c.phi(kin.q), dtype=float)
            cons = {
                x.name: x.error(kin, t) if o else phi[s]  # type: ignore[index]
                for x, s, o in zip(closures, getattr(c, "slices", [slice(None)] * len(closures)), own)
            }
        else:
            cons = {str(getattr(c, "name", "constraint")): np.asarray(c.phi(kin.q), dtype=float)}
        if self.tasks:
            P = self._plan
            if (
                P is not None
                and kin is self._kin
                and self._kin_src is not None
                and self._kin_src is self._terr_of
            ):
                return cons, {task.name: P.terr[k, task.rows].copy() for k, task in enumerate(P.tasks)}
            return cons, {task.name: task.error(kin, t) for task in self.tasks}
        k = len(self.coords)
        theta_d = np.broadcast_to(np.asarray(self._ref(t)[0], dtype=float), (k,))
        return cons, {"coords": theta_d - kin.q[self._ci]}

    @property
    def python_tasks(self) -> tuple[Any, ...]:
        """The task coordinates whose rows Python fills inside the compiled closed-chain step (kind ``PYTHON``:
        their own ``qp_rows``, the others compiled; docs/add_a_task.md), in row order; empty when every task is
        compiled or the step is not the compiled closed-chain one."""
        P = self._plan
        return tuple(P.python.tasks) if P is not None else ()

    @property
    def compiled(self) -> bool:
        """Whether a step can take the compiled one-row kernel (one constraint row, no QP, no force law)."""
        return self._compiled

    def step_given_dynamics(
        self, t: float, q: np.ndarray, v: np.ndarray, M: np.ndarray, h: np.ndarray, a: np.ndarray, jdv: float
    ) -> np.ndarray | None:
        """The compiled step on dynamics the caller computed: M, h (n×n, n) at (q, v), the constraint row
        a (n) and Ȧq̇ = jdv (for an adapter that builds them itself: a lifted state, a bordered mass
        matrix).  ``kin`` is built from (q, v) on first access.  None when the step needs the SVD path
        (then call the controller itself) or when this controller has no compiled step."""
        if not self._compiled:
            return None
        self._kin, self._kin_qv = None, (q, v)
        return self._compiled_core(t, q, v, M, h, a, jdv)

    def _compiled_step(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray | None:
        """The closed-form step for one constraint row as one compiled kernel (``kernels.pidc_one_row``: the
        equations of ``_numpy_step`` with the rank-1 closed forms, derived in its docstring); None when that
        step needs the SVD path ((S P)⁺ ill-conditioned, or a non-finite A), which the caller then takes.
        For a ``Robot`` the dynamics are one ``pin.computeAllTerms`` read in place (what ``Robot.update``
        runs, without its copies); a constraint with ``row_and_jdot_v(q, v) -> (a, Ȧq̇)`` gives its row at once."""
        robot = self.robot
        if self._direct:
            if type(q) is not np.ndarray or q.dtype != np.float64:
                q = np.asarray(q, dtype=float)
            if type(v) is not np.ndarray or v.dtype != np.float64:
                v = np.asarray(v, dtype=float)
            if q.shape != (robot.nq,) or v.shape != (robot.nv,):
                return None  # Robot.update names the sizes
            M, h = robot.update_in_place(
                q, v
            )  # the robot's data now holds this state (older snapshots: stale)
            M = M.T  # M is symmetric; its transpose is the C-ordered view (one kernel type)
            self._kin, self._kin_qv = None, (q.copy(), v.copy())
        else:
            kin = robot.update(q, v)
            self.kin = kin
            M, h, q, v = kin.M, kin.h, kin.q, kin.v
        c = self.c
        if self._row is not None:
            a, jdv = self._row(q, v)
        else:
            a, jdv = c.jacobian(q)[0], float(c.jdot_v(q, v)[0])
        return self._compiled_core(t, q, v, M, h, a, jdv)

    def _compiled_core(
        self, t: float, q: np.ndarray, v: np.ndarray, M: np.ndarray, h: np.ndarray, a: np.ndarray, jdv: float
    ) -> np.ndarray | None:
        """``pidc_one_row`` on M, h (n×n, n), the state and the constraint row a (n) with Ȧq̇ = jdv, then the
        bookkeeping of ``_numpy_step`` (unsolvable steps, the info record).  None: take the SVD path."""
        ref = self._kref
        if not self._sinus:
            self._sample_reference(t, ref)
        n = v.size
        out = np.empty((n + 3, n))
        prm = self._kprm
        assert prm is not None  # joint coordinates (``_compiled``)
        st, rank, res, bn = pidc_one_row(M, h, q, v, a, jdv, float(t), ref, self._sinus, prm, out)
        qdd, tau_par, tau = out[n], out[n + 1], out[n + 2]
        if st:
            if st == 3:
                self.robot.update(q, v)  # raises with the non-finite entries named
            return None
        info = self._kinfo
        if info is not self.info:  # one record, refilled with this step's values and arrays
            info = self._kinfo = PIDCInfo()
        info.status, info.solvable, info.rank, info.passive_residual = "solved", True, rank, res
        info.qdd_des, info.tau_par = qdd, tau_par
        if self._has_passive and res > self.solve_tol * max(1.0, bn):
            self._unsolvable(info, t, q, rank, f"‖(I−B)τ‖ = {res:.3g}")
            tau = tau * self.actuated  # the plant cannot apply them; reported in info / unsolvable_steps
        # (32) on the one row a: f_c = a (a·r)/‖a‖², r = M q̈_des + h + D v − τ; λ = a·r/‖a‖²
        r = M @ qdd + h + self.D * v - tau
        aa = float(a @ a)
        lam = float(a @ r) / aa if rank else 0.0
        info.f_c, info.lam, info.f_d = a * lam, np.array([lam]), None
        self.info = info
        self._prev = (t, v, tau)  # read by the force loop only, which this path does not have
        return tau

    def _unsolvable(
        self, info: PIDCInfo, t: float, q: np.ndarray, rank: int, residual: str, law: str = "PIDC"
    ) -> None:
        """Condition (58) failed: the actuated joints cannot produce q̈_des with the passive joints at zero
        torque.  Marks the step's info, counts it, and raises when ``on_unsolvable`` is "raise"."""
        info.solvable, info.status = False, "unsolvable"
        self.unsolvable_steps += 1
        if self.on_unsolvable == "raise":
            raise InfeasibleError(
                f"{law} at t={t:.4f} s: the actuated joints cannot produce the desired motion with passive "
                f"joints {self.passive} at q={np.round(q, 6).tolist()} (rank A = {rank}; residual "
                f"{residual}, condition (58))"
            )

    def _numpy_step(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The law as NumPy calls: every case (QP, weights, passive joints, force loop, any number of rows);
        the reference of ``_compiled_step``."""
        kin = self.robot.update(q, v)
        self.kin = kin
        M, h = kin.M, kin.h + self.D * v
        if self.stabilize:  # the closures' own error ODE: (A, b_c) = their compute rows, q̈_c = A⁺ b_c
            rows = [c.compute(kin, t) for c in self._closures]
            A = rows[0][0] if len(rows) == 1 else np.vstack([r[0] for r in rows])
            bc = rows[0][1] if len(rows) == 1 else np.concatenate([r[1] for r in rows])
            pr = project(A, self._rank_threshold(A, kin))
            Cv = pr.A_pinv @ bc
        else:
            if self._rows_kin is not None:
                A, jdv = self._rows_kin(kin)  # from Robot.update's pass
            elif self._rows_fn is not None:
                A, jdv = self._rows_fn(q, v)  # one kinematics pass for both
            else:
                A, jdv = self.c.jacobian(q), self.c.jdot_v(q, v)
            pr = project(A, self._rank_threshold(A, kin))
            Cv = c_times_v(pr, jdv)
        qdd, _ = self.desired_acceleration(t, q, v, pr, Cv)
        b = M @ qdd + h
        tau_par = pr.P @ b
        info = PIDCInfo(status="solved", rank=pr.rank, qdd_des=qdd, tau_par=tau_par)
        scale = max(1.0, math.sqrt(float(b @ b)))
        if self.qp:
            tau = self._solve_qp(t, q, b, pr, info)
        elif self.w is not None:
            tau, res = self.weighted_closed_form(b, pr.P)
            info.passive_residual = res
        elif self.passive:
            tau = self.passive_closed_form(tau_par, pr.P, pr)
            r = tau * self._passive_mask
            info.passive_residual = math.sqrt(float(r @ r))
        else:
            tau = tau_par
        if not self.qp and self.passive and info.passive_residual > self.solve_tol * scale:
            self._unsolvable(info, t, q, pr.rank, f"‖(I−B)τ‖ = {info.passive_residual:.3g}")
            tau = tau * self.actuated  # the plant cannot apply them; reported in info / unsolvable_steps
        if self.force is not None:
            tau_perp = self._force_term(t, q, v, M, h, qdd, pr, A)
            tau = tau + tau_perp
            info.tau_perp = tau_perp
            info.f_c, info.f_d = self._fc, self._fd
            info.lam = pr.A_pinv.T @ self._fc  # the multipliers of the force used (N, N·m)
        else:
            # (32): the loops' generalized force when the plant realises q̈_des under τ, and its multipliers
            # λ = (A⁺)ᵀ f_c (N on position rows, N·m on rotation rows; least norm where A is rank deficient)
            r = M @ qdd + h - tau
            info.f_c = r - pr.P @ r
            info.lam = pr.A_pinv.T @ info.f_c
        self.info = info
        self._prev = (t, v.copy(), tau.copy())
        return tau

    def _residual_norm(self, kin: Kinematics) -> float:
        """‖d‖, the loops' gaps d = p_b − p_a at the snapshot ``kin`` (module docstring, "The rank tolerance"): each
        closure's two frames (from the snapshot's frames: those its rows were read from), but a plane's (its shared
        columns vanish for any d) and a joint coupling's (constant rows); a constraint object without frames gives
        ‖φ(q)‖ (its ``phi``, if any)."""
        total = 0.0
        for c in self._closures:
            kind = getattr(c, "kind", None)
            if kind in ("plane", "joint"):
                continue
            fa, fb = getattr(c, "fa", None), getattr(c, "fb", None)
            if fa is not None and fb is not None:
                d = kin.frame(fb).p - kin.frame(fa).p
                total += float(d @ d)
            elif callable(getattr(c, "phi", None)):
                phi = np.asarray(c.phi(kin.q), dtype=float)
                total += float(phi @ phi)
        return math.sqrt(total)

    def _rank_threshold(self, A: np.ndarray, kin: Kinematics) -> float:
        """The rank threshold at the snapshot ``kin`` (module docstring, "The rank tolerance"): ``rank_tol`` as given,
        or the default max(τ₀ max(1, s_A), min(κ‖d‖, ρ s_A)) for several rows (τ₀ for one row)."""
        if not self._rank_kappa or A.ndim != 2 or A.shape[0] < 2 or not np.all(np.isfinite(A)):
            return self.rank_tol
        s_a = math.sqrt(float(np.max(np.einsum("ij,ij->i", A, A))))
        gap = self._residual_norm(kin)
        return max(self.rank_tol * max(1.0, s_a), min(self._rank_kappa * gap, _RANK_CAP * s_a))

    def _force_term(
        self,
        t: float,
        q: np.ndarray,
        v: np.ndarray,
        M: np.ndarray,
        h: np.ndarray,
        qdd: np.ndarray,
        pr: Projection,
        A: np.ndarray,
    ) -> np.ndarray:
        fl = self.force
        assert fl is not None  # called with a force law only
        Q = pr.Q
        n = len(v)
        if fl.integral is None:
            fl.integral = np.zeros(n)
        lam_d = fl.lambda_d(t, self.kin) if fl.takes_state else fl.lambda_d(t)
        lam_d = np.atleast_1d(np.asarray(lam_d, dtype=float))
        if lam_d.shape != (A.shape[0],):
            raise ConfigError(f"ForceLaw: λ_d has {lam_d.size} entries, the constraint has {A.shape[0]} rows")
        full = pr.full_row_rank
        f_d = A.T @ lam_d if full else np.zeros(n)
        if (
            fl.measure == "plant"
        ):  # the plant's constraint force on the model's joints, or f_d before it is given
            plant = self.plant
            f_c = f_d.copy() if plant is None else plant.data.qfrc_constraint[plant.map.dadr].copy()
        elif callable(fl.measure):
            f_c = np.asarray(fl.measure(t, q, v), dtype=float)
        elif self._prev is not None and t > self._prev[0]:
            t0, v0, tau0 = self._prev
            f_c = Q @ (M @ ((v - v0) / (t - t0)) + h - tau0)  # (32) with a finite-difference q̈
        else:
            f_c = f_d.copy()  # no measurement yet: assume on target
        e_f = f_d - f_c
        if full and self._prev is not None:
            fl.integral = Q @ (fl.integral + e_f * (t - self._prev[0]))
        self._fc, self._fd = f_c, f_d
        return Q @ (M @ qdd + h - (f_d + fl.kp * e_f + fl.ki * fl.integral))

    def _attach_plant(self, plant: Any) -> None:
        """The plant whose constraint force the force loop reads (``ForceLaw(measure="plant")``; ``SensesPlant``)."""
        self.plant = plant

    # ------------------------------------------------------------------ QP version
    def _solve_qp(self, t: float, q: np.ndarray, b: np.ndarray, pr: Projection, info: PIDCInfo) -> np.ndarray:
        n = len(b)
        Sa = np.eye(n)[self.actuated]  # τ = Saᵀ τ_a
        na = Sa.shape[0]
        w = np.ones(n) if self.w is None else self.w
        H = Sa @ np.diag(w**2) @ Sa.T
        U, s, Vt = np.linalg.svd(pr.P)
        V0 = U[:, s > 0.5]  # P = V₀V₀ᵀ (eigenvalues 0/1)
        Aeq = V0.T @ Sa.T
        beq = V0.T @ b
        lim = self.tau_max[self.actuated]
        C, lo, hi = np.eye(na), -lim, lim
        # (58) without limits: can the actuated joints produce q̈_des at all?
        res_ls = float(np.linalg.norm(Aeq @ (pinv(Aeq, rtol=_RTOL) @ beq) - beq)) if Aeq.size else 0.0
        if res_ls > self.solve_tol * max(1.0, float(np.linalg.norm(b))):
            self._unsolvable(info, t, q, pr.rank, f"{res_ls:.3g}", law="PIDC QP")
        res = self._qp.solve("exact", H, np.zeros(na), Aeq, beq, C, lo, hi, warm=False)
        ok = res.solved and np.linalg.norm(Aeq @ res.x - beq) <= 1e-7 * max(1.0, float(np.linalg.norm(beq)))
        info.qp_status = res.raw_status
        if ok:
            x = res.x
            info.limit_active = bool(np.any(np.abs(x) >= lim * (1 - 1e-9)))
        else:
            # the actuators cannot produce q̈_des within their limits: closest potent torque
            H2 = Aeq.T @ Aeq + self.eps_reg * H
            g2 = -Aeq.T @ beq
            r2 = self._qp.solve("relaxed", H2, g2, None, None, C, lo, hi, warm=False, feasible_start=True)
            if not (r2.solved or r2.feasible):
                self.failures += 1
                raise SolverError(
                    f"PIDC QP failed at t={t:.4f} s, q={np.round(q, 6).tolist()}: status "
                    f"{r2.raw_status} (relaxed) after {info.qp_status} (exact)"
                )
            x = r2.x
            info.qp_status += " -> relaxed"
            if info.solvable:  # solvable without limits: the limits are what binds
                info.limit_active = True
                self.saturated_steps += 1
        if self.passive:
            info.passive_residual = float(np.linalg.norm(Aeq @ x - beq))
        tau = Sa.T @ x
        if not np.all(np.isfinite(tau)):
            raise StateError(f"PIDC QP returned a non-finite torque at t={t:.4f} s")
        return tau
