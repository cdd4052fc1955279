"""Tasks of the Udwadia–Kalaba controller: rigid-body coupling constraints, frame-control laws
([Milioshin] §3.3–3.4), relative-frame and posture tasks, all as acceleration-level affine rows
A v̇ = b built from a stable error ODE.

Every task is a ``Task`` (an ABC): ``error_dynamics(kin, t)`` returns, from one kinematics snapshot, the
named tuple ``ErrorDynamics(W, drift, w, e)`` of a velocity error w(v) = W v + w₀(t) and a pose error e,
with the law  ẇ + K_d w + K_p e = 0  ⇒  A = W,  b = −drift − K_d w − K_p e.  The rows are in **world
axes**: a task whose error lives in axes of its own (the frame tasks' angular error, in the target's
axes R) returns its own-axes rows turned by the orthogonal P = diag(I, R) (``Task.axes`` gives R), which
changes neither the solution of A v̇ = b nor a least-squares cost, so ``compute`` is the rows every
controller stacks (``qp_rows``), a loop closure's rows are exactly a constraint's A and Ȧq̇, and
``error`` turns e back to the task's own axes.  The maths of the built-in tasks is written once, in
``models/_task_kernels.py`` (numba): their ``error_dynamics`` calls it, and so does the compiled UK step.

A frame rigidly offset from a link (the coupling body's B = E₁·T_A^B, or C = E·T_A^C) is registered
once as an operational frame of the Pinocchio model (``Robot.add_frame``), so that Pinocchio computes
its pose, LOCAL_WORLD_ALIGNED Jacobian and Jacobian time variation in C++.  That is the thesis' offset
algebra, (3.27) and (3.29): with r = R_E p_EC,

    v_C = v_E + ω_E × r          →  J_C,v = J_E,v − r^ J_E,ω,          J_C,ω = J_E,ω
    d/dt J_C,v = dJ_E,v − (ω_E × r)^ J_E,ω − r^ dJ_E,ω

* ``RigidCoupling`` (Algorithm 3.3.1, eqs. 3.26–3.30; a weld ``LoopClosure`` with its error in E₂'s axes, in
  ``models/loops.py``): B = E₁·T_A^B must coincide with E₂, in E₂'s axes
      e = e_SE3(T_B, T_E2) = [p_E2 − p_B; Log(R_Bᵀ R_E2)]                                  (3.14–3.15)
      w = [v_E2 − v_B; R_E2ᵀ(ω_E2 − ω_B)]                                                   (3.27)
      Ẇ v = [J̇_d,v v; R_E2ᵀ(J̇_d,ω − ω_E2^ J_d,ω) v],  J_d = J_E2 − J_B                    (3.29–3.30)
* ``FrameTask`` (Algorithm 3.4.1, eqs. 3.32–3.34; with an offset, Algorithm 3.4.2, 3.35–3.36):
  frame C follows a desired D(t) = (T_D, [v_D; ω_D^D], [a_D; ε_D^D]) (linear parts in world
  axes, angular parts in D's axes), in D's axes:
      e = e_SE3(T_C, T_D) = [p_D − p_C; Log(R_Cᵀ R_D)]
      w = [v_D − v_C; ω_D^D − R_Dᵀ ω_C]
      A = [−J_C,v; −R_Dᵀ J_C,ω]
      b = [J̇_C,v v; R_Dᵀ(J̇_C,ω − ω_D^ J_C,ω) v] − [a_D; ε_D^D] − K_d w − K_p e           (3.34)
  (The thesis writes J̃_ω of (3.36) in E's axes; here both terms use D's axes, as in (3.34), so the
  angular error ODE (3.19) holds exactly.)  Both in world axes: models/_task_kernels.py.
* ``RelativeFrameTask``: frame b follows a pose of frame a given relative to a, B(t) = T_a·T_D(t):
  the coupling (3.14–3.15, 3.27) of b with B, B's motion from the offset algebra with a moving offset
  (derivation in the class docstring).  With a constant target it is ``RigidCoupling``.
* ``PostureTask``: selected joints follow q_ref, e = q_ref − q, w = −v (W = −S, drift = 0);
  ``JointTrajectoryTask``: they follow (q_d, v_d, a_d), e = q_d − q, w = v_d − v (W = −S, drift = a_d).

The angular error is stable by the Lyapunov argument (3.20)–(3.23): ė = J_r⁻¹(e) ω̃ and
eᵀ J_r⁻¹(e) = eᵀ.  ``rows`` selects a variant of the frame tasks: "full" (6), "position" (3),
"orientation" (3).

Trajectories: a frame task calls ``trajectory(t)`` and unpacks three values
(pose SE3, 6-vector velocity, 6-vector acceleration); a constant target is set with ``set_target``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models import _params
from cmstack.models.errors import ConfigError

if TYPE_CHECKING:  # (annotations only: models/loops.py, which models/robot.py imports, imports this module)
    from cmstack.models.kinematics import FrameState
    from cmstack.models.robot import Kinematics, Robot

ROWS = {"full": slice(0, 6), "position": slice(0, 3), "orientation": slice(3, 6)}


def _rows(name: str, owner: str) -> slice:
    if name not in ROWS:
        raise ConfigError(f"{owner}: rows='{name}' is not one of {list(ROWS)}")
    return ROWS[name]


def _as_se3(T: pin.SE3 | ArrayLike, owner: str = "pose") -> pin.SE3:
    if isinstance(T, pin.SE3):
        return T.copy()
    T = np.asarray(T, dtype=float)
    if T.shape == (4, 4):
        return pin.SE3(T[:3, :3], T[:3, 3])
    raise ConfigError(f"{owner}: expected a pinocchio.SE3 or a 4×4 matrix, got an array of shape {T.shape}")


def _gain(x: float, key: str, owner: str) -> float:
    try:
        val = float(x)
    except (TypeError, ValueError):
        raise ConfigError(f"{owner}: {key} must be a finite number ≥ 0, got {x!r}") from None
    if not math.isfinite(val) or val < 0:
        raise ConfigError(f"{owner}: {key} must be a finite number ≥ 0, got {val}")
    return val


def _frame_or_offset(robot: Robot, frame: str, offset: pin.SE3 | None, tag: str) -> int:
    if offset is None or offset.isIdentity(1e-15):
        return robot.frame_id(frame)
    name, k = f"{frame}*{tag}", 1
    while robot.model.existFrame(name):  # same name, another offset: a new operational frame
        f = robot.model.frames[robot.model.getFrameId(name)]
        parent = robot.model.frames[robot.frame_id(frame)]
        if f.parentJoint == parent.parentJoint and f.placement.isApprox(parent.placement * offset, 1e-12):
            break
        k += 1
        name = f"{frame}*{tag}#{k}"
    return robot.add_frame(name, frame, offset)


class ErrorDynamics(NamedTuple):
    """Error dynamics of a task at one (q, v, t), all rows (the task's ``rows`` select a subset):
    W (k×nv) and drift (k,) with ẇ = W v̇ + drift; w (k,) the velocity error; e (k,) the pose error
    (metres and radians, e = desired − actual)."""

    W: np.ndarray
    drift: np.ndarray
    w: np.ndarray
    e: np.ndarray


Trajectory = Callable[[float], tuple]
"""t ↦ (T_D: SE3, [v_D; ω_D^D] (6,), [a_D; ε_D^D] (6,)); linear parts world, angular parts in D."""

_ZERO6 = np.zeros(6)


class Task(ABC):
    """A named acceleration-level task A v̇ = b from the error ODE ẇ + K_d w + K_p e = 0.

    Subclasses implement ``error_dynamics`` (the rows in world axes, ``ErrorDynamics``); ``compute`` turns
    it into (A, b) on the selected rows.  A task whose error has axes of its own (a frame task's angular
    error is in the target's axes) says so with ``axes``: its rows are those axes' rows turned to world
    axes by P = diag(I, R), and ``error`` gives the error in its own axes.
    Attributes: ``name``; ``kp`` (1/s²) and ``kd`` (1/s), the gains; ``rows``, the selected rows."""

    name: str
    kp: float
    kd: float
    rows: slice

    #: attributes a compiled step copies (``models/_params.py``): setting one announces the change
    _COPIED = frozenset({"kp", "kd", "q_ref", "_const", "trajectory"})

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name in Task._COPIED:
            _params.changed()

    @abstractmethod
    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        """ErrorDynamics(W, drift, w, e) at (kin, t), all rows, in world axes (``ErrorDynamics``)."""

    def compute(self, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(A, b) of A v̇ = b on the selected rows: A = W, b = −drift − K_d w − K_p e (world axes)."""
        W, drift, w, e = self.error_dynamics(kin, t)
        r = self.rows
        return W[r], (-drift - self.kd * w - self.kp * e)[r]

    def qp_rows(self, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The rows the controllers stack: ``compute`` (one form: world axes)."""
        return self.compute(kin, t)

    def axes(self, kin: Kinematics, t: float) -> np.ndarray | None:
        """R of P = diag(I, R), the rotation from the task's own axes (those of ``error``) to world axes,
        or None when the task has no axes of its own (P = I: a joint task, a loop closure)."""
        return None

    def error(self, kin: Kinematics, t: float) -> np.ndarray:
        """The pose error on the selected rows in the task's own axes, Pᵀ e (metres and radians; a frame
        task's [p_D − p; Log(Rᵀ R_D)], docs/design.md "Pose error"): what is logged and integrated."""
        e = self.error_dynamics(kin, t).e
        R = self.axes(kin, t)
        if R is not None:
            e = np.concatenate((e[:3], R.T @ e[3:6], e[6:]))
        return e[self.rows]

    @property
    def dim(self) -> int:
        """Number of rows the task contributes."""
        return self.rows.stop - self.rows.start

    def _set_gains(self, kp: float, kd: float) -> None:
        self.kp = _gain(kp, "kp", self.name)
        self.kd = _gain(kd, "kd", self.name)

    #: the row builder of the compiled UK step (controllers/_uk_kernels.py) that computes exactly this
    #: class's rows: 1 frame, 2 posture, 3 loop closure (a coupling too: models/loops.py); None: none (the rows are
    #: computed in Python)
    _KERNEL: int | None = None
    _ROW_MATHS = ("error_dynamics", "compute", "qp_rows", "error", "axes")

    def kernel_kind(self) -> int | None:
        """The compiled row builder that computes this task's rows, or None.  Dispatch by what the
        object does, not by its exact type: a subclass keeps its parent's kernel as long as it does not
        redefine the row maths (``error_dynamics``, ``compute``, ``qp_rows``, ``error``, ``axes``); one
        that does gets None, and its own maths runs (the generic path)."""
        cls = type(self)
        owner: type[Task] | None = next((c for c in cls.__mro__ if "_KERNEL" in c.__dict__), None)
        if owner is None or owner._KERNEL is None:
            return None
        if any(getattr(cls, m) is not getattr(owner, m) for m in self._ROW_MATHS):
            return None
        return owner._KERNEL


def _kernels() -> ModuleType:
    from cmstack.models import _task_kernels  # numba: imported on first use, compiled once (cache)

    return _task_kernels


def _frame_vec(F: FrameState) -> np.ndarray:
    """A FrameState as the kernels' frame row x = [R row-major (9); p; twist; acc] (models/_task_kernels.py)."""
    return np.concatenate((F.R.ravel(), F.p, F.twist, F.acc))


def _floats(x: ArrayLike, k: int) -> np.ndarray:
    """x (a scalar or k values) as a fresh float array of k values."""
    out = np.empty(k)
    out[:] = x
    return out


class _PoseTarget:
    """A pose target shared by FrameTask and RelativeFrameTask: either a trajectory t ↦ (T_D, [v; ω],
    [a; ε]) or a constant pose set by :meth:`set_target` (zero velocity and acceleration)."""

    name: str
    trajectory: Callable[[float], tuple] | None  # a Trajectory, or any t ↦ (T_D, velocity, acceleration)
    _const: tuple | None

    def set_target(self, T: pin.SE3 | ArrayLike) -> None:
        """Hold the target at the constant pose T (SE3 or 4×4 homogeneous matrix): the world pose of
        the frame for FrameTask, the pose of frame b in frame a for RelativeFrameTask."""
        self._const = (_as_se3(T, self.name), _ZERO6, _ZERO6)
        self.trajectory = None

    @property
    def constant_target(self) -> tuple | None:
        """(T_D, 0, 0) when the target is held by ``set_target``, else None (a trajectory)."""
        return self._const

    def desired(self, t: float) -> tuple[pin.SE3, np.ndarray, np.ndarray]:
        """(T_D, velocity, acceleration) at time t [s]."""
        if self._const is not None:
            return self._const
        if self.trajectory is None:
            raise ConfigError(f"{self.name}: no target; pass a trajectory or call set_target(SE3)")
        return self.trajectory(t)


class FrameTask(_PoseTarget, Task):
    """Algorithms 3.4.1 (offset None) and 3.4.2 (offset T_E^C): frame E·T_EC follows the desired
    trajectory D(t), or a constant target set with ``set_target``.  Its error is in D's axes (``axes``:
    R_D); the maths is ``frame_error`` of models/_task_kernels.py.

    Args: robot; frame: frame name E; trajectory: t ↦ (SE3, 6-vector velocity, 6-vector
    acceleration) (linear parts in world axes, m/s and m/s²; angular parts in D's axes, rad/s and
    rad/s²), or None and call ``set_target``; kp (1/s²), kd (1/s); offset: SE3 or 4×4 pose of C in E;
    rows: "full" | "position" | "orientation"; name."""

    _KERNEL = 1

    def __init__(
        self,
        robot: Robot,
        frame: str,
        trajectory: Trajectory | None = None,
        kp: float = 100.0,
        kd: float = 20.0,
        offset: pin.SE3 | ArrayLike | None = None,
        rows: str = "full",
        name: str | None = None,
    ):
        self.name = name or f"task({frame})"
        self.offset = None if offset is None else _as_se3(offset, self.name)
        self.trajectory = trajectory
        self._const = None
        self._set_gains(kp, kd)
        self.frame = frame
        self.fid = _frame_or_offset(robot, frame, self.offset, self.name)
        self.rows = _rows(rows, self.name)

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        C = kin.frame(self.fid)
        T_D, vel_D, acc_D = self.desired(t)
        va = np.empty(12)
        va[:6] = vel_D
        va[6:] = acc_D
        W, ed = np.empty(C.J.shape), np.empty((4, 6))
        _kernels().frame_error(_frame_vec(C), C.J, T_D.homogeneous, va, 0, 6, 1.0, W, 0, ed, np.empty((3, 3)))
        return ErrorDynamics(W, ed[0], ed[1], ed[2])

    def axes(self, kin: Kinematics, t: float) -> np.ndarray | None:
        return self.desired(t)[0].rotation


class RelativeFrameTask(_PoseTarget, Task):
    """Frame b follows a pose T_D(t) given relative to frame a: b should coincide with B = T_a·T_D.

    The trajectory gives (T_D, [ṗ_D; ω^D], [p̈_D; ω̇^D]): ṗ_D, p̈_D are derivatives of D's position
    in a's axes; ω^D is D's angular velocity relative to a in D's axes (Ṙ_D = R_D ω^D^).
    With r = R_a p_D and R_B = R_a R_D, differentiating B = T_a·T_D:

        v_B = v_a + ω_a × r + R_a ṗ_D,                ω_B = ω_a + R_B ω^D
        a_B = a_a + ω̇_a × r + ω_a × (ω_a × r + 2 R_a ṗ_D) + R_a p̈_D
        ω̇_B = ω̇_a + ω_a × (R_B ω^D) + R_B ω̇^D

    The error and the velocity error are those of the coupling (3.14–3.15, 3.27) of B with b, in b's axes
    (``axes``: R_b): the task is ``coupling_error`` of B's frame row and Jacobian (``moving_frame``), both in
    models/_task_kernels.py, so its rows are the coupling's with J_B,v = J_a,v − r^ J_a,ω and B's motion
    (v_B, ω_B, a_B, α_B above) in place of a registered frame's.

    Args: robot; frame_a, frame_b: frame names; trajectory (or None and ``set_target``);
    kp (1/s²), kd (1/s); rows; name."""

    def __init__(
        self,
        robot: Robot,
        frame_a: str,
        frame_b: str,
        trajectory: Trajectory | None = None,
        kp: float = 100.0,
        kd: float = 20.0,
        rows: str = "full",
        name: str | None = None,
    ):
        self.name = name or f"relative({frame_a}->{frame_b})"
        self.fa, self.fb = robot.frame_id(frame_a), robot.frame_id(frame_b)
        self.trajectory = trajectory
        self._const = None
        self._set_gains(kp, kd)
        self.rows = _rows(rows, self.name)

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        a, b = kin.frame(self.fa), kin.frame(self.fb)
        T_D, vel_D, acc_D = self.desired(t)
        va = np.empty(12)
        va[:6] = vel_D
        va[6:] = acc_D
        K = _kernels()
        xB, JB = np.empty(24), np.empty(a.J.shape)
        K.moving_frame(_frame_vec(a), a.J, T_D.homogeneous, va, xB, JB)
        W, ed = np.empty(b.J.shape), np.empty((4, 6))
        K.coupling_error(xB, JB, _frame_vec(b), b.J, 0, 6, 1.0, W, 0, ed, np.empty((3, 3)))
        return ErrorDynamics(W, ed[0], ed[1], ed[2])

    def axes(self, kin: Kinematics, t: float) -> np.ndarray | None:
        return kin.frame(self.fb).R


class PostureTask(Task):
    """Selected joints follow a reference posture: e = q_ref − q, w = −v, so W = −S and drift = 0
    (S selects the joints), and the law gives q̈ = K_p (q_ref − q) − K_d v on those joints
    (``joint_error`` of models/_task_kernels.py with v_d = a_d = 0).

    Args: robot; q_ref: reference (rad or m), of size nq or of size len(joints); joints: None (all)
    or a list of joint names; kp (1/s²), kd (1/s); name."""

    _KERNEL: int | None = 2

    def __init__(
        self,
        robot: Robot,
        q_ref: ArrayLike | None = None,
        joints: Sequence[str] | None = None,
        kp: float = 10.0,
        kd: float = 2 * math.sqrt(10.0),
        name: str | None = None,
    ):
        self.name = name or "posture"
        self.robot = robot
        if joints is None:
            if robot.nq != robot.nv:
                raise ConfigError(
                    f"{self.name}: {robot.label} has ball or free joints; name the 1-DoF joints to hold "
                    "(joints=[...], e.g. robot.actuated_joints)"
                )
            self.idx = np.arange(robot.nv)
            self.qidx = self.idx
        else:
            if isinstance(joints, str):
                raise ConfigError(
                    f"{self.name}: joints must be a list of joint names, got the string {joints!r}"
                )
            try:
                self.idx = np.array([robot.joint_index(j) for j in joints], dtype=np.int64)
            except ConfigError as exc:
                raise ConfigError(f"{self.name}: {exc}") from None
            # q index of each joint: the v index but after a free or ball joint (its q has one more entry)
            self.qidx = np.array([robot.joint_q_index(j) for j in joints], dtype=np.int64)
            if len(set(self.idx.tolist())) != len(self.idx):
                raise ConfigError(f"{self.name}: joints {list(joints)} name a joint twice")
        self._zero = np.zeros(len(self.idx))
        self._set_gains(kp, kd)
        self.rows = slice(0, len(self.idx))
        self.set_target(np.zeros(robot.nq) if q_ref is None else q_ref)

    def set_target(self, q_ref: ArrayLike) -> None:
        """New reference posture, of size nq (all joints) or of the selected joints' count (copied: the
        task's ``q_ref`` is read-only, a new reference is set here)."""
        q_ref = np.asarray(q_ref, dtype=float).ravel()
        if q_ref.shape == (self.robot.nq,):
            q_ref = q_ref[self.qidx]
        elif q_ref.shape != (len(self.idx),):
            raise ConfigError(
                f"{self.name}: q_ref has {q_ref.size} values; expected {self.robot.nq} (all joints) "
                f"or {len(self.idx)} (the selected joints)"
            )
        if not np.all(np.isfinite(q_ref)):
            raise ConfigError(f"{self.name}: q_ref must be finite, got {q_ref.tolist()}")
        q_ref = q_ref.copy()  # the task's own, read-only: set a new one with set_target (models/_params.py)
        q_ref.flags.writeable = False
        self.q_ref = q_ref

    def _joint_rows(self, kin: Kinematics, qd: ArrayLike, vd: ArrayLike, ad: ArrayLike) -> ErrorDynamics:
        k = len(self.idx)
        W, ed = np.empty((k, kin.v.shape[0])), np.empty((4, k))
        _kernels().joint_error(kin.q, kin.v, self.idx, self.qidx, qd, vd, ad, 1.0, W, 0, ed)
        return ErrorDynamics(W, ed[0], ed[1], ed[2])

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        return self._joint_rows(kin, self.q_ref, self._zero, self._zero)


class JointTrajectoryTask(PostureTask):
    """Selected joints follow a trajectory t ↦ (q_d, v_d, a_d) (rad, rad/s, rad/s², one entry per selected
    joint; e.g. ``Sinusoid``): e = q_d − q, w = v_d − v, ẇ = a_d − v̇, so W = −S, drift = a_d, and the law
    gives q̈ = a_d + K_d (v_d − v) + K_p (q_d − q) on those joints (``joint_error``).  With a constant
    trajectory it is a ``PostureTask``.  Args: robot; trajectory; joints: names (None: all); kp (1/s²),
    kd (1/s); name."""

    #: the compiled UK step's joint rows (``joint_error``), its reference a ``Sinusoid`` sampled in the kernel, any
    #: other trajectory sampled in Python each step (``controllers/uk_plan.py``)
    _KERNEL = 2

    def __init__(
        self,
        robot: Robot,
        trajectory: Callable[[float], tuple],
        joints: Sequence[str] | None = None,
        kp: float = 100.0,
        kd: float = 20.0,
        name: str | None = None,
    ):
        super().__init__(robot, None, joints, kp, kd, name or "joint trajectory")
        if not callable(trajectory):
            raise ConfigError(
                f"{self.name}: trajectory must be callable t -> (q_d, v_d, a_d), got {trajectory!r}"
            )
        self.trajectory = trajectory

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        k = len(self.idx)
        qd, vd, ad = (_floats(x, k) for x in self.trajectory(t))
        return self._joint_rows(kin, qd, vd, ad)


def stack(
    constraints: Sequence[Task], kin: Kinematics, t: float, nv: int
) -> tuple[np.ndarray, np.ndarray, list[slice]]:
    """Stack several constraints: (A, b, slices) with each constraint's rows in A."""
    if len(constraints) == 1:
        A, b = constraints[0].compute(kin, t)
        return A, b, [slice(0, A.shape[0])]
    As, bs, sl, i = [], [], [], 0
    for c in constraints:
        A, b = c.compute(kin, t)
        As.append(A)
        bs.append(b)
        sl.append(slice(i, i + A.shape[0]))
        i += A.shape[0]
    if not As:
        return np.zeros((0, nv)), np.zeros(0), []
    return np.vstack(As), np.concatenate(bs), sl
