"""Loop closures: one declaration of a closed kinematic chain for every law and every plant.

A closed chain is modelled as a tree (Pinocchio's model, a URDF or an MJCF body tree) plus closures: a
frame ``b`` of one branch must meet a frame ``A = a·T_off`` of another.  ``LoopClosure`` is a ``Task`` of the
core contract (models/coupling.py), so a law takes it as a hard task (UK's top level), and it also gives
the constraint functions PIDC and ``ProjectionPlant`` use (φ(q), A(q) = J, Ȧq̇), all from one Pinocchio
pass.

Kinds and their rows, everything in world axes (LOCAL_WORLD_ALIGNED Jacobians J_a, J_b of frames A and b,
6×n: [ṗ; ω] = J v; classical accelerations c = J̇ v = [p̈; ω̇] at v̇ = 0):

* ``point`` (3 rows, a ball joint, MJCF ``connect``):
      φ = p_b − p_A,   J = J_b,v − J_A,v,   J̇v = c_b,v − c_A,v.
  φ's Jacobian is J exactly.  In a planar mechanism (hinge axes ∥ y) the y row of J is identically zero:
  rank 2; every consumer works with the rank (SVD projectors, QP rows dropped when numerically empty).
* ``weld`` (6 rows, MJCF ``weld``): the point rows and
      φ_R = Log(R_b R_Aᵀ) (the rotation from A to b, world axes),
      J_R = J_b,ω − J_A,ω,   J̇_R v = c_b,ω − c_A,ω.
  With R = R_b R_Aᵀ, Ṙ = (ω_b − R ω_A)^ R, so dφ_R/dt = J_l⁻¹(φ_R)(ω_b − R ω_A), which is J_R v at
  closure (φ_R = 0, R = I): J is ∂φ/∂q on the closed manifold, where every consumer uses it (Newton's
  step q ← q − J⁺φ converges quadratically there; its error is O(|φ_R|) away from it).
* ``revolute`` (5 rows, a hinge about A's z axis n = R_A ẑ): the point rows and the two rotation components
  orthogonal to the hinge, along x_A = R_A x̂ and y_A = R_A ŷ (X = [x_Aᵀ; y_Aᵀ], 2×3):
      φ_R = X (z_A × z_b),   J_R = X (J_b,ω − J_A,ω),
      J̇_R v = X (c_b,ω − c_A,ω) + [(ω_A × x_A)ᵀ; (ω_A × y_A)ᵀ] (ω_b − ω_A)
  (the last term: X turns with A, Ẋᵀ = ω_A × Xᵀ).  d/dt(z_A × z_b) = (ω_A × z_A) × z_b + z_A × (ω_b × z_b),
  which at closure (z_b = z_A = n) is ω_b,⊥ − ω_A,⊥ (components orthogonal to n): φ̇_R = J_R v there.
  J̇v is d/dt(J v) at v̇ = 0 exactly, everywhere (tests: finite differences).
* ``plane`` (1 row, point b on the plane through A normal to A's z axis n = R_A ẑ: a slider on a planar rail,
  e.g. the slider-crank's C on the line z = 0 of its plane of motion; no MuJoCo equality, no Pinocchio constraint
  model): with d = p_b − p_A,
      φ = n·d,   J = nᵀ(J_b,v − J_A,v) + (n × d)ᵀ J_A,ω,
      J̇v = ṅ·Δv + n·Δc + (ṅ × d + n × Δv)·ω_A + (n × d)·c_A,ω,   ṅ = ω_A × n,
  Δv = (J_b,v − J_A,v) v, Δc = c_b,v − c_A,v.  φ̇ = ṅ·d + n·ḋ = (ω_A × n)·d + n·Δv = ω_A·(n × d) + n·Δv
  (the triple product), so J = ∂φ/∂q everywhere, and J̇v is the time derivative of that expression at v̇ = 0
  (ḋ = Δv, d(ω_A)/dt = c_A,ω).  With A fixed (ω_A = 0, c_A = 0) the rows are φ = n·p_b, J = nᵀJ_b,v,
  J̇v = n·c_b,v.

The task (the core contract): e = φ (the closure's residual, driven to zero), w = J v (the relative
velocity; ė = w on the point rows everywhere and on the rotation rows at closure), W = J, drift = J̇v, so
``compute`` gives A = J, b = −J̇v − K_d J v − K_p φ: the acceleration-level closure A v̇ + J̇v = 0 plus a
Baumgarte term that removes drift.  As a constraint function (PIDC, ProjectionPlant): ``phi(q)``,
``jacobian(q)``, ``jdot_v(q, v)`` and ``jacobian_and_jdot_v(q, v)``, from one pass of the closure's own
Pinocchio data (``computeJointJacobians``: the joints' poses and Jacobians; the frames, their accelerations at
v̇ = 0 and the rows in one compiled call, ``models/_loop_kernels.py: closure_pass``), cached on (q, v): the three
calls of a step cost one pass.  ``ClosureSet`` stacks several closures (``robot.loops``) on
one pass.

``assemble(robot, q_guess)`` closes every loop near a guess: Newton's iteration on the stacked residual
q ← q − J⁺(q) φ(q) ([Aghili] (39)), J⁺ the truncated pseudo-inverse (rank-deficient rows are fine), each step
kept inside the joint ranges (``joint_ranges``, ``_bounded_step``).

The sidecar of a URDF (``Robot.from_urdf(path, loops=PATH)``), TOML::

    passive = ["elbow_l", "tip", "elbow_r"]      # joints without an actuator
    [[loop]]
    name = "tip"                                 # optional
    frame_a = "tool"                             # frames of the model (links, joints, sites)
    frame_b = "dist_r"
    kind = "weld"                                # point | weld | revolute | plane
    offset = [0.3, 0.0, 0.18]                    # optional: pose of the closure frame in frame_a:
                                                 #   [x, y, z] or {xyz = [...], rpy = [...]} (m, rad)
    offset_b = [0.0, 0.0, 0.0]                   # optional, the same on frame_b
    kp = 400.0                                   # optional gains of the closure's error ODE (1/s², 1/s)
    kd = 40.0
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pinocchio as pin
import tomllib
from numpy.typing import ArrayLike

from cmstack.models import _loop_kernels
from cmstack.models.coupling import (
    ErrorDynamics,
    Task,
    _as_se3,
    _frame_or_offset,
    _frame_vec,
    _kernels,
    _rows,
)
from cmstack.models.errors import ConfigError, FrameNotFoundError, InfeasibleError, StateError
from cmstack.models.lie import jr_inv, svd_rank
from cmstack.models.step_engine import FrameSlots, data_addresses

if TYPE_CHECKING:  # (models/robot.py imports this module: no import cycle at run time)
    from cmstack.models.robot import Kinematics, Robot

LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
KINDS = {"point": 3, "weld": 6, "revolute": 5, "plane": 1}
"""Loop closure kinds and their number of rows."""


def as_offset(x: object, where: str) -> pin.SE3 | None:
    """An offset pose: None, a ``pin.SE3``, a 4×4 matrix, a position [x, y, z] (m), or a dict
    {xyz = [..], rpy = [..]} (m, rad; URDF's roll-pitch-yaw)."""
    if x is None:
        return None
    if isinstance(x, pin.SE3):
        return x.copy()
    if isinstance(x, dict):
        unknown = set(x) - {"xyz", "rpy"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown offset key(s) {sorted(unknown)}; use xyz = [x, y, z], rpy = [r, p, y]"
            )
        xyz = _vec3(x.get("xyz", [0.0, 0.0, 0.0]), f"{where}.xyz")
        rpy = _vec3(x.get("rpy", [0.0, 0.0, 0.0]), f"{where}.rpy")
        return pin.SE3(pin.rpy.rpyToMatrix(*rpy), xyz)
    A = np.asarray(x, dtype=float) if not isinstance(x, str) else np.array([np.nan])
    if A.shape == (3,):
        return pin.SE3(np.eye(3), _vec3(A, where))
    if A.shape == (4, 4) and np.all(np.isfinite(A)):
        R = A[:3, :3]
        if not np.allclose(R.T @ R, np.eye(3), atol=1e-9) or np.linalg.det(R) < 0:
            raise ConfigError(f"{where}: the offset's 3×3 block is not a rotation matrix")
        return pin.SE3(R, A[:3, 3])
    raise ConfigError(
        f"{where}: an offset is [x, y, z], {{xyz = [...], rpy = [...]}}, a 4×4 matrix or a "
        f"pinocchio.SE3, got {x!r}"
    )


def _vec3(x: ArrayLike, where: str) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected 3 finite numbers, got {x!r}") from None
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ConfigError(f"{where}: expected 3 finite numbers, got {x!r}")
    return a


def closure_rows(
    kind: str,
    Ra: np.ndarray,
    pa: np.ndarray,
    Ja: np.ndarray,
    ca: np.ndarray,
    Rb: np.ndarray,
    pb: np.ndarray,
    Jb: np.ndarray,
    cb: np.ndarray,
    v: np.ndarray,
    code: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(φ, J, J̇v) of a closure from the two frames' rotation R (3×3), position p (3), LWA Jacobian J (6×n)
    and classical acceleration c = J̇ v (6), all world axes (formulas in the module docstring), by the compiled rows
    (``models/_loop_kernels.py: frame_rows``, the kernels PIDC's and UK's compiled steps call too: the one copy of
    that algebra).  ``code``: the kernel's code of the closure (``LoopClosure.code``; default: the kind's)."""
    m = KINDS[kind]
    phi, J, jdv = np.empty(m), np.empty((m, Ja.shape[1])), np.empty(m)
    c = np.ascontiguousarray
    _loop_kernels.frame_rows(
        _loop_kernels.KIND_CODES[kind] if code is None else code,
        c(Ra, dtype=float),
        c(pa, dtype=float),
        c(Ja, dtype=float),
        c(ca, dtype=float),
        c(Rb, dtype=float),
        c(pb, dtype=float),
        c(Jb, dtype=float),
        c(cb, dtype=float),
        c(v, dtype=float),
        phi,
        J,
        jdv,
        0,
    )
    return phi, J, jdv


class LoopClosure(Task):
    """Frame ``frame_b`` (· ``offset_b``) meets frame ``frame_a`` · ``offset``: a hard task and a constraint.

    Args:
        robot: the tree model (``Robot``).
        frame_a: a frame name (a link, joint, MJCF body or site).
        frame_b: the other frame's name.
        kind: "point" (3 rows), "weld" (6), "revolute" (5; hinge about the z axis of frame_a·offset) or
            "plane" (1; b on the plane through frame_a·offset normal to its z axis).
        offset: pose of the closure frame A in frame_a ([x, y, z] m, {xyz, rpy}, 4×4, SE3); None: identity.
        offset_b: the same on frame_b.
        kp (1/s²), kd (1/s): gains of the error ODE ë + K_d ė + K_p e = 0 (a Baumgarte stabilization).
        name: shown in errors and logs.
        error_axes: "world" (default: the error ODE on φ in world axes) or, on a weld, "b": the rotation's error
            ODE in frame b's axes, the coupling of [Milioshin] (3.27)–(3.30) (``RigidCoupling``): e = [φ_p; R_bᵀ φ_R]
            in b's axes (``axes``: R_b), whose world-axes rows are the weld's J and J̇v − [0; ω_b × (ω_b − ω_A)]
            (``models/_loop_kernels.py``, code ``WELD_B``); the same constraint, the same φ and J, another Baumgarte
            law on the rotation rows away from closure.

    Rows and their derivation: the module docstring.  ``dim`` = ``m`` = the number of rows."""

    def __init__(
        self,
        robot: Robot,
        frame_a: str,
        frame_b: str,
        kind: str = "point",
        offset: object = None,
        *,
        offset_b: object = None,
        kp: float = 400.0,
        kd: float = 40.0,
        name: str | None = None,
        error_axes: str = "world",
    ):
        if kind not in KINDS:
            raise ConfigError(
                f"LoopClosure({frame_a!r}, {frame_b!r}): kind={kind!r} is not one of {list(KINDS)}"
            )
        if error_axes not in ("world", "b") or (error_axes == "b" and kind != "weld"):
            raise ConfigError(
                f"LoopClosure({frame_a!r}, {frame_b!r}): error_axes={error_axes!r} is not 'world' or, on a weld, 'b'"
            )
        self.error_axes = error_axes
        self.name = name or f"loop({frame_a}~{frame_b})"
        self.robot = robot
        self.kind = kind
        self.frame_a, self.frame_b = frame_a, frame_b
        self.offset = as_offset(offset, f"{self.name}: offset")
        self.offset_b = as_offset(offset_b, f"{self.name}: offset_b")
        self.fa = _frame_or_offset(robot, frame_a, self.offset, f"{self.name}:a")
        self.fb = _frame_or_offset(robot, frame_b, self.offset_b, f"{self.name}:b")
        self.m = KINDS[kind]
        self.rows = slice(0, self.m)
        self._set_gains(kp, kd)
        self._set: ClosureSet | None = None

    def __repr__(self) -> str:
        axes = ", error_axes='b'" if self.error_axes == "b" else ""
        return f"{type(self).__name__}({self.name!r}, {self.frame_a!r}, {self.frame_b!r}, kind={self.kind!r}{axes})"

    @property
    def code(self) -> int:
        """The closure's code in the compiled kernels (``models/_loop_kernels.py``: the kind's, or ``WELD_B`` for a
        weld with ``error_axes="b"``): the one encoding a loop reaches the kernels in (the UK and PIDC plans' task
        and loop tables, ``ClosureSet``'s pass)."""
        return _loop_kernels.WELD_B if self.error_axes == "b" else _loop_kernels.KIND_CODES[self.kind]

    # ------------------------------------------------------------------ the core contract
    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        """ErrorDynamics(W = J, drift = J̇v, w = J v, e = φ) from the kinematics snapshot; with error_axes "b" the
        coupling's ([Milioshin] (3.27)–(3.30), ``models/_task_kernels.py: coupling_error``, world axes)."""
        A, b = kin.frame(self.fa), kin.frame(self.fb)
        if self.error_axes == "b":
            W, ed = np.empty(A.J.shape), np.empty((4, 6))
            _kernels().coupling_error(
                _frame_vec(A), A.J, _frame_vec(b), b.J, 0, 6, 1.0, W, 0, ed, np.empty((3, 3))
            )
            return ErrorDynamics(W, ed[0], ed[1], ed[2])
        phi, J, jdv = closure_rows(self.kind, A.R, A.p, A.J, A.acc, b.R, b.p, b.J, b.acc, kin.v)
        return ErrorDynamics(J, jdv, J @ kin.v, phi)

    def axes(self, kin: Kinematics, t: float) -> np.ndarray | None:
        """R_b with error_axes "b" (the error is in frame b's axes), else None (world axes)."""
        return kin.frame(self.fb).R if self.error_axes == "b" else None

    # compute / qp_rows: Task's, (A, b) = (J, −J̇v − K_d J v − K_p φ) (the rows are in world axes, P = I)

    #: the compiled UK step's row builder (``controllers/_uk_kernels.py: task_rows_into``, kind LOOP: the rows of
    #: ``models/_loop_kernels.py``, the kernels PIDC's compiled step uses)
    _KERNEL = 3

    def kernel_kind(self) -> int | None:
        """3 (the loop rows of the compiled UK step) when the closure's kind has compiled rows and residual
        (``models/_loop_kernels.py``: ``KIND_CODES``, ``PHI_KINDS``) and the class keeps this one's row maths
        (``Task.kernel_kind``); else None (the rows are computed in Python)."""
        k = super().kernel_kind()
        if k is None:
            return None
        from cmstack.models._loop_kernels import KIND_CODES, PHI_KINDS  # numba: imported on first use

        return k if (self.kind in KIND_CODES and self.kind in PHI_KINDS) else None

    # ------------------------------------------------------------------ constraint functions (one pass)
    def _evaluator(self) -> ClosureSet:
        if self._set is None:
            self._set = ClosureSet([self])
        return self._set

    def phi(self, q: np.ndarray) -> np.ndarray:
        """The residual φ(q) (m, m and rad)."""
        return self._evaluator().phi(q)

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """A(q) = J (m×n)."""
        return self._evaluator().jacobian(q)

    def jdot_v(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Ȧ q̇ = J̇ v (m)."""
        return self._evaluator().jdot_v(q, v)

    def jacobian_and_jdot_v(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A, Ȧq̇) from one Pinocchio pass."""
        return self._evaluator().jacobian_and_jdot_v(q, v)

    def rows_from(self, kin: Kinematics) -> tuple[np.ndarray, np.ndarray]:
        """(A, Ȧq̇) read from a kinematics snapshot of the robot (``Robot.update``): no pass of its own."""
        return self._evaluator().rows_from(kin)

    def residual(self, q: np.ndarray) -> float:
        """max |φ(q)| (m or rad)."""
        return float(np.max(np.abs(self.phi(q))))


class RigidCoupling(LoopClosure):
    """Two arms holding one rigid body ([Milioshin] Algorithm 3.3.1, eqs. 3.26–3.30): frame E₂ must coincide with
    B = E₁·T_A^B.  A weld closure (frame_a = E₁ with offset T_A^B, frame_b = E₂) whose error ODE is in E₂'s axes
    (``error_axes="b"``): e = e_SE3(T_B, T_E2) = [p_E2 − p_B; Log(R_Bᵀ R_E2)] (3.14–3.15), w = [v_E2 − v_B;
    R_E2ᵀ(ω_E2 − ω_B)] (3.27), the rows in world axes (``axes``: R_E2); the maths is
    ``models/_task_kernels.py: coupling_error``, and the kernels take it as the loop code ``WELD_B``
    (``models/_loop_kernels.py``), as any loop.

    Args: robot; frame1, frame2: frame names E₁, E₂; T_AB: pose of E₂ in E₁ when coupled (SE3 or 4×4, metres);
    kp (1/s²), kd (1/s): gains of the error ODE; rows: "full" | "position" | "orientation" (the rows kept as a
    task; a constraint set, ``ClosureSet``, takes the full weld); name: shown in errors and logs.
    Attributes besides LoopClosure's: ``T_AB``, ``f1``, ``f2`` (E₁'s and E₂'s frame ids), ``fB`` (B's, = ``fa``)."""

    def __init__(
        self,
        robot: Robot,
        frame1: str,
        frame2: str,
        T_AB: pin.SE3 | ArrayLike,
        kp: float,
        kd: float,
        rows: str = "full",
        name: str | None = None,
    ):
        name = name or f"coupling({frame1}->{frame2})"
        T = _as_se3(T_AB, name)
        self.f1 = robot.frame_id(frame1)
        super().__init__(robot, frame1, frame2, "weld", T, kp=kp, kd=kd, name=name, error_axes="b")
        self.T_AB = T
        self.f2, self.fB = self.fb, self.fa
        self.rows = _rows(rows, self.name)

    @classmethod
    def from_configuration(
        cls,
        robot: Robot,
        frame_a: str,
        frame_b: str,
        q0: ArrayLike,
        kp: float,
        kd: float,
        rows: str = "full",
        name: str | None = None,
    ) -> RigidCoupling:
        """The coupling that holds frame_b where it is relative to frame_a at configuration q0:
        T_AB = T_a(q0)⁻¹ T_b(q0)."""
        q0 = np.asarray(q0, dtype=float)
        if q0.shape != (robot.nq,):
            raise ConfigError(
                f"RigidCoupling.from_configuration: q0 has shape {q0.shape}, "
                f"the model {robot.path.name} needs ({robot.nq},)"
            )
        fa, fb = robot.frame_id(frame_a), robot.frame_id(frame_b)
        data = robot.model.createData()
        pin.framesForwardKinematics(robot.model, data, q0)
        T_AB = data.oMf[fa].actInv(data.oMf[fb])
        return cls(robot, frame_a, frame_b, T_AB, kp, kd, rows=rows, name=name)


class JointCoupling(Task):
    """A joint coupling (MuJoCo's ``<equality joint joint1="b" joint2="a" polycoef="c0 … c4">``: a gear, a
    linkage's fitted law, a parallel gripper's mimic finger), one row, a closure kind ``"joint"``:

        φ = (q_b − q_b0) − P(x),   x = q_a − q_a0,   P(x) = c0 + c1 x + c2 x² + c3 x³ + c4 x⁴
        J = e_bᵀ − P'(x) e_aᵀ                      (e_j: the unit row of joint j's v index)
        J̇v = −P''(x) v_a²

    (q_a0, q_b0: the joints' values at MuJoCo's qpos0, zero in this stack's MJCF loader; without joint a,
    φ = q_b − q_b0 − c0 and J = e_bᵀ).  φ̇ = v_b − P'(x) v_a = J v exactly, and d/dt(J v) at v̇ = 0 is
    −P''(x) v_a² (J's only q-dependent entry is P'(x)).  Both joints are 1-DoF joints.

    Args: robot; joint_b (MuJoCo's joint1), joint_a (joint2, or None); polycoef: up to 5 coefficients
    (m or rad per unit of x^k); q_b0, q_a0: reference values; kp (1/s²), kd (1/s): the error ODE's gains; name.

    A task of the core contract (``error_dynamics``: W = J, drift = J̇v, w = J v, e = φ) and a constraint
    (``phi``, ``jacobian``, ``jdot_v``), like ``LoopClosure``; its rows are computed in Python (a 1×n row
    with two entries), so a law that compiles its loops' rows takes its generic path with it."""

    kind = "joint"

    def __init__(
        self,
        robot: Robot,
        joint_b: str,
        joint_a: str | None = None,
        polycoef: ArrayLike = (0.0, 1.0, 0.0, 0.0, 0.0),
        *,
        q_b0: float = 0.0,
        q_a0: float = 0.0,
        kp: float = 400.0,
        kd: float = 40.0,
        name: str | None = None,
    ):
        self.name = name or f"coupling({joint_b}~{joint_a})"
        self.robot = robot
        self.joint_b, self.joint_a = joint_b, joint_a
        #: the two ends as messages name a loop's (``assemble``'s error): the joints
        self.frame_a, self.frame_b = f"joint {joint_a}", f"joint {joint_b}"
        try:
            self.ib, self.qb = robot.joint_index(joint_b), robot.joint_q_index(joint_b)
            self.ia, self.qa = (
                (robot.joint_index(joint_a), robot.joint_q_index(joint_a))
                if joint_a is not None
                else (-1, -1)
            )
        except (FrameNotFoundError, ConfigError) as exc:
            raise ConfigError(f"joint coupling '{self.name}': {exc}") from None
        c = np.zeros(5)
        pc = np.asarray(polycoef, dtype=float).ravel()
        if pc.size > 5 or not np.all(np.isfinite(pc)):
            raise ConfigError(
                f"joint coupling '{self.name}': polycoef must be up to 5 finite numbers, got {polycoef!r}"
            )
        c[: pc.size] = pc
        if joint_a is None:
            c[1:] = 0.0
        self.coef = c
        self.q_b0, self.q_a0 = float(q_b0), float(q_a0)
        self.m = 1
        self.rows = slice(0, 1)
        self._set_gains(kp, kd)

    def __repr__(self) -> str:
        return (
            f"JointCoupling({self.name!r}, {self.joint_b!r}, {self.joint_a!r}, polycoef={self.coef.tolist()})"
        )

    def _poly(self, x: float) -> tuple[float, float, float]:
        """P(x), P'(x), P''(x)."""
        c0, c1, c2, c3, c4 = self.coef.tolist()
        p = c0 + x * (c1 + x * (c2 + x * (c3 + x * c4)))
        dp = c1 + x * (2 * c2 + x * (3 * c3 + x * 4 * c4))
        ddp = 2 * c2 + x * (6 * c3 + x * 12 * c4)
        return p, dp, ddp

    def rows_into(
        self, q: np.ndarray, v: np.ndarray | None, phi: np.ndarray, J: np.ndarray, jdv: np.ndarray, row: int
    ) -> None:
        """φ, J, J̇v (module docstring of the class) into row ``row`` of the stacked arrays."""
        x = float(q[self.qa]) - self.q_a0 if self.ia >= 0 else 0.0
        p, dp, ddp = self._poly(x)
        phi[row] = float(q[self.qb]) - self.q_b0 - p
        J[row, :] = 0.0
        J[row, self.ib] = 1.0
        if self.ia >= 0:
            J[row, self.ia] -= dp
        va = float(v[self.ia]) if (v is not None and self.ia >= 0) else 0.0
        jdv[row] = -ddp * va * va

    def error_dynamics(self, kin: Kinematics, t: float) -> ErrorDynamics:
        phi, J, jdv = np.empty(1), np.empty((1, kin.v.shape[0])), np.empty(1)
        self.rows_into(kin.q, kin.v, phi, J, jdv, 0)
        return ErrorDynamics(J, jdv, J @ kin.v, phi)

    def phi(self, q: np.ndarray) -> np.ndarray:
        return ClosureSet([self]).phi(q)

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        return ClosureSet([self]).jacobian(q)

    def jdot_v(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        return ClosureSet([self]).jdot_v(q, v)

    def jacobian_and_jdot_v(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ClosureSet([self]).jacobian_and_jdot_v(q, v)

    def residual(self, q: np.ndarray) -> float:
        return float(np.max(np.abs(self.phi(q))))


class ClosureSet:
    """Several closures stacked (e.g. ``robot.loops``): ``phi``, ``jacobian``, ``jdot_v``,
    ``jacobian_and_jdot_v`` with every closure's rows in order, from one Pinocchio pass on the set's own
    ``Data`` (never the robot's: a controller's snapshot is not touched), cached on (q, v)."""

    def __init__(self, closures: Sequence[LoopClosure | JointCoupling]):
        self.closures = list(closures)
        if not self.closures:
            raise ConfigError("ClosureSet: no loop closure given")
        robots = {id(c.robot) for c in self.closures}
        if len(robots) != 1:
            raise ConfigError("ClosureSet: the closures belong to different robots")
        # the rows below are the kind's (compiled): a closure's own maths is not called
        for c in self.closures:
            if isinstance(c, JointCoupling):
                continue
            if c.rows != slice(0, c.m):
                raise ConfigError(
                    f"ClosureSet: loop {c.name!r} keeps rows {c.rows.start}:{c.rows.stop} of its {c.m}; a closure set "
                    "(PIDC, ProjectionPlant, assemble) takes whole closures (rows='full')"
                )
            if c.kernel_kind() is None:
                raise ConfigError(
                    f"ClosureSet: loop {c.name!r} ({type(c).__name__}) redefines its row maths "
                    f"({', '.join(m for m in c._ROW_MATHS if getattr(type(c), m) is not getattr(LoopClosure, m))}),"
                    f" which a closure set (PIDC, ProjectionPlant, assemble) does not call: it computes a "
                    f"loop's rows from its kind {c.kind!r}; give UK such a loop as a task instead"
                )
        self.robot = self.closures[0].robot
        self.m = sum(c.m for c in self.closures)
        self.slices = []
        i = 0
        for c in self.closures:
            self.slices.append(slice(i, i + c.m))
            i += c.m
        self.name = "+".join(c.name for c in self.closures)
        self._data = None
        self._key: tuple | None = None
        self._out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _tables(self, model: pin.Model) -> None:
        """The compiled pass's tables (``_loop_kernels.closure_pass``): each frame's joint slot, support mask and
        placement, each closure's [kind, frame a, frame b, first row], and the addresses of data.J and of the
        slots' joint poses in a fresh ``Data`` (held, so its storage stays)."""
        n = model.nv
        slots = FrameSlots(model, compact=True)  # only the joints the loops' frames hang on (step_engine)
        lint = [
            (c.code, slots.slot(c.fa), slots.slot(c.fb), s.start)
            for c, s in zip(self.closures, self.slices)
            if not isinstance(c, JointCoupling)
        ]
        self._lint = np.array(lint, dtype=np.int64).reshape(len(lint), 4)
        self._fint, self._fplace = slots.fint, slots.fplace
        self._fJ = np.zeros((len(slots), 6, n))
        self._fvec = np.zeros((len(slots), 24))
        self._jpose = slots.joint_pose_table()
        d = model.createData()
        ptr, self._keep = data_addresses(d, [d.J], slots.joint_ids, self.name)
        self._ptr = np.array(ptr, dtype=np.int64)
        self._data = d

    def _pass(self, q: ArrayLike, v: ArrayLike | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """φ, J, J̇v at (q, v) (v = 0 when None): one ``pin.computeJointJacobians`` (data.oMi, data.J), then every
        frame and every closure's rows in one compiled call (``_loop_kernels.closure_pass``)."""
        q = np.asarray(q, dtype=float)
        with_v = v is not None
        v = np.zeros(self.robot.nv) if v is None else np.asarray(v, dtype=float)
        key = (q.tobytes(), v.tobytes() if with_v else None)
        if self._key is not None and self._key[0] == key[0] and (key[1] is None or self._key[1] == key[1]):
            assert self._out is not None  # set with _key
            return self._out
        model = self.robot.model
        d = self._data
        if d is None or len(d.oMf) != model.nframes:
            self._tables(model)
            d = self._data
        if q.shape != (model.nq,) or v.shape != (model.nv,):
            raise StateError(
                f"{self.name}: expected q of size {model.nq} and v of size {model.nv}, got "
                f"{q.shape} and {v.shape}"
            )
        phi, J, jdv = np.empty(self.m), np.empty((self.m, model.nv)), np.empty(self.m)
        for c, s in zip(self.closures, self.slices):
            if isinstance(c, JointCoupling):  # a joint coupling's row: two entries, in Python
                c.rows_into(q, v if with_v else None, phi, J, jdv, s.start)
        if self._lint.shape[0] == 0:
            self._key = key
            self._out = (phi, J, jdv)
            return self._out
        pin.computeJointJacobians(model, d, q)
        _loop_kernels.closure_pass(
            self._ptr,
            np.ascontiguousarray(v),
            self._jpose,
            self._fint,
            self._fplace,
            self._fJ,
            self._fvec,
            self._lint,
            phi,
            J,
            jdv,
        )
        self._key = key
        self._out = (phi, J, jdv)
        return self._out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_data=None, _ptr=None, _keep=None, _key=None, _out=None)  # rebuilt on first use
        return state

    def phi(self, q: np.ndarray) -> np.ndarray:
        return self._pass(q, None)[0].copy()

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        return self._pass(q, None)[1].copy()

    def jdot_v(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self._pass(q, v)[2].copy()

    def jacobian_and_jdot_v(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, J, jdv = self._pass(q, v)
        return J.copy(), jdv.copy()

    def phi_and_jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(φ, A) at q from one pass (a Newton iteration's pair)."""
        phi, J, _ = self._pass(q, None)
        return phi.copy(), J.copy()

    def rows_from(self, kin: Kinematics) -> tuple[np.ndarray, np.ndarray]:
        """(A, Ȧq̇) at the snapshot's (q, v), from its frames (a law that has run ``Robot.update`` already
        needs no second pass): the same rows as ``jacobian_and_jdot_v``."""
        v = kin.v
        J = np.empty((self.m, v.size))
        jdv = np.empty(self.m)
        for c, s in zip(self.closures, self.slices):
            if isinstance(c, JointCoupling):
                c.rows_into(kin.q, v, np.empty(self.m), J, jdv, s.start)
                continue
            a, b = kin.frame(c.fa), kin.frame(c.fb)
            _, J[s], jdv[s] = closure_rows(c.kind, a.R, a.p, a.J, a.acc, b.R, b.p, b.J, b.acc, v, c.code)
        return J, jdv

    def residuals(self, q: np.ndarray) -> list[float]:
        """max |φ| of each closure at q."""
        phi = self.phi(q)
        return [float(np.max(np.abs(phi[s]))) for s in self.slices]


def as_constraint(c: object) -> Any:
    """What PIDC and ProjectionPlant take: a LoopClosure, a sequence of them (stacked in a ``ClosureSet``),
    a ``ClosureSet``, or any object with phi, jacobian and jdot_v (returned as it is)."""
    if isinstance(c, (list, tuple)):
        if all(isinstance(x, (LoopClosure, JointCoupling)) for x in c):
            return ClosureSet(c)
        raise ConfigError(
            f"a constraint list must hold LoopClosure objects, got {[type(x).__name__ for x in c]}"
        )
    missing = [a for a in ("phi", "jacobian", "jdot_v") if not hasattr(c, a)]
    if missing:
        raise ConfigError(f"{type(c).__name__} is not a constraint: it lacks {missing} (give a LoopClosure)")
    return c


_REVOLUTE = {"JointModelRX", "JointModelRY", "JointModelRZ", "JointModelRevoluteUnaligned"}


def joint_ranges(robot: Robot) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, revolute) per velocity index: the position range of each 1-DoF joint (rad or m; ±inf where the
    model has none: Pinocchio's lowerPositionLimit/upperPositionLimit, i.e. the MJCF ``range`` of a limited joint,
    the URDF ``<limit>``) and whether it is a hinge.  A joint with nq ≠ 1 or nv ≠ 1 gets (−inf, inf), not a
    hinge."""
    model = robot.model
    lo, hi = np.full(model.nv, -np.inf), np.full(model.nv, np.inf)
    rev = np.zeros(model.nv, dtype=bool)
    for j in range(1, model.njoints):
        jm = model.joints[j]
        if jm.nq == 1 and jm.nv == 1:
            a, b = float(model.lowerPositionLimit[jm.idx_q]), float(model.upperPositionLimit[jm.idx_q])
            lo[jm.idx_v] = a if np.isfinite(a) and a > -1e8 else -np.inf  # (URDF continuous: ±1e9)
            hi[jm.idx_v] = b if np.isfinite(b) and b < 1e8 else np.inf
            rev[jm.idx_v] = jm.shortname() in _REVOLUTE
    return lo, hi, rev


def v_names(robot: Robot) -> list[str]:
    """The joint name of each velocity index (a joint with nv > 1 names each of its columns)."""
    model = robot.model
    out = [""] * model.nv
    for j in range(1, model.njoints):
        jm = model.joints[j]
        for k in range(jm.nv):
            out[jm.idx_v + k] = model.names[j]
    return out


def _bounded_step(
    J: np.ndarray, phi: np.ndarray, q: np.ndarray, free: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """The Newton step dq of ``assemble`` inside the box lo ≤ q + dq ≤ hi: dq_F = −J_F⁺ φ on the free joints F;
    a joint that this step would take out of its range is set on the bound it crosses, leaves F, and the others'
    step is solved again for the linearised residual φ + J_k dq_k (an active set, at most one pass per joint).
    With every range inactive it is the plain step −J⁺φ."""
    F = free.copy()
    dq = np.zeros(q.size)
    r = phi
    for _ in range(q.size + 1):
        idx = np.flatnonzero(F)
        if idx.size == 0:
            break
        step = -(svd_rank(J[:, idx], rtol=1e-10).pinv() @ r)
        trial = q[idx] + step
        out = (trial < lo[idx]) | (trial > hi[idx])
        if not out.any():
            dq[idx] = step
            break
        k = idx[out]
        dq[k] = np.clip(trial[out], lo[k], hi[k]) - q[k]
        r = r + J[:, k] @ dq[k]
        F[k] = False
    return dq


def _newton_rows(cs: ClosureSet, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e, J_e) of ``assemble``'s Newton step at q: every closure's (φ, J), except that the rotation rows of a closure
    whose error is in frame b's axes (``error_axes="b"``) are that error e_R = R_bᵀ φ_R = Log(R_Aᵀ R_b) and its exact
    Jacobian J_r⁻¹(e_R) R_bᵀ J_R (ė_R = J_r⁻¹(e_R) R_bᵀ(ω_b − ω_A), [Milioshin] (3.22); J_R = J_b,ω − J_A,ω)."""
    phi, J = cs.phi_and_jacobian(q)
    for c, s in zip(cs.closures, cs.slices):
        if not isinstance(c, LoopClosure) or c.error_axes != "b":
            continue
        Rbt = pin.updateFramePlacement(cs.robot.model, cs._data, c.fb).rotation.T  # (the pass's data, at q)
        r = slice(s.start + 3, s.start + 6)
        e = Rbt @ phi[r]
        phi[r] = e
        J[r] = jr_inv(e) @ (Rbt @ J[r])
    return phi, J


def assemble(
    robot: Robot,
    q_guess: ArrayLike,
    loops: Iterable[LoopClosure] | None = None,
    *,
    tol: float = 1e-12,
    max_iter: int = 50,
    fixed: Sequence[str] = (),
    within_ranges: bool = True,
) -> np.ndarray:
    """A configuration near ``q_guess`` that closes every loop (``robot.loops`` unless given) inside the joints'
    ranges: Newton's iteration q ← q + dq, dq = −J⁺(q) φ(q) ([Aghili] (39)) until max |φ| ≤ tol (m, rad), each
    step kept in the ranges lo ≤ q ≤ hi (``joint_ranges``; a joint the step would take out is held on that bound
    for the step, the others solved again: ``_bounded_step``; the guess is first clipped into the ranges).  J⁺
    drops singular values below 1e-10·σ₁ (a planar point closure's empty row).  A hinge without a range ends
    within π of its guess (a multiple of 2π removed: φ is unchanged).  Raises ``InfeasibleError`` naming the loop
    with the largest residual, and the joints held on a range limit, when it does not converge within
    ``max_iter`` steps.  ``fixed``: joints held at their value in ``q_guess`` (their columns of J are left out),
    e.g. the actuated joints at a reference.  ``within_ranges=False``: the joints' ranges are not imposed (a plant
    without position limits, e.g. the YuMi's: the guess is not clipped, the steps are the plain −J⁺φ).

    A closure whose error is in frame b's axes (``error_axes="b"``: ``RigidCoupling``) is closed on that error
    with its exact Jacobian: rows e_R = R_bᵀ φ_R and J_r⁻¹(e_R) R_bᵀ J_R in place of φ_R and J_R (ė_R = J_r⁻¹(e_R)
    R_bᵀ(ω_b − ω_A), [Milioshin] (3.22); ``_newton_rows``), the thesis' projection of a pose onto the coupling
    manifold, and the convergence test is max |e| ≤ tol on those rows."""
    loops = list(robot.loops if loops is None else loops)
    q = np.array(q_guess, dtype=float)
    if q.shape != (robot.nq,) or not np.all(np.isfinite(q)):
        raise StateError(f"assemble: q_guess must be {robot.nq} finite numbers, got shape {q.shape}")
    if not loops:
        return q
    cs = ClosureSet(loops)
    free = np.ones(robot.nv, dtype=bool)
    for name in fixed:
        free[robot.joint_index(name)] = False
    lo, hi, rev = joint_ranges(robot)
    if not within_ranges:
        lo, hi = np.full(robot.nv, -np.inf), np.full(robot.nv, np.inf)
    # the ranges are per v index; a 1-DoF joint's coordinate at its q index (they differ after a ball or free
    # joint), a ball or free joint's coordinates without a range (their entries of ``scalar`` stay 0)
    sc = np.full(robot.nv, -1, dtype=np.int64)
    for j in range(1, robot.model.njoints):
        jm = robot.model.joints[j]
        if jm.nq == 1 and jm.nv == 1:
            sc[jm.idx_v] = jm.idx_q
    one = sc >= 0

    def scalar(x: np.ndarray) -> np.ndarray:
        out = np.zeros(robot.nv)
        out[one] = x[sc[one]]
        return out

    q0 = q.copy()
    fo = free & one
    q[sc[fo]] = np.clip(q[sc[fo]], lo[fo], hi[fo])
    best = (math.inf, q)
    for _ in range(max_iter + 1):
        phi, J = _newton_rows(cs, q)
        r = float(np.max(np.abs(phi)))
        if r < best[0]:
            best = (r, q.copy())
        if r <= tol:
            wrap = sc[free & rev & np.isinf(lo) & np.isinf(hi)]
            q[wrap] -= 2.0 * np.pi * np.round((q[wrap] - q0[wrap]) / (2.0 * np.pi))
            return q
        # the step in v's tangent space (a ball or free joint: its rotation vector), applied by pin.integrate
        q = pin.integrate(robot.model, q, _bounded_step(J, phi, scalar(q), free, lo, hi))
        if not np.all(np.isfinite(q)):
            break
    res = cs.residuals(best[1])
    k = int(np.argmax(res))
    c = cs.closures[k]
    J = cs.jacobian(best[1])[cs.slices[k]]
    qb = scalar(best[1])
    held = [
        i
        for i in range(robot.nv)
        if free[i] and np.any(J[:, i] != 0.0) and (qb[i] <= lo[i] + 1e-9 or qb[i] >= hi[i] - 1e-9)
    ]
    names = v_names(robot)
    at = ", ".join(
        f"{names[i]} = {qb[i]:.4g} {'rad' if rev[i] else 'm'} (range [{lo[i]:.4g}, {hi[i]:.4g}])"
        for i in held
    )
    raise InfeasibleError(
        f"loop '{c.name}' ({c.kind}, {c.frame_a} ~ {c.frame_b}) of {robot.label} cannot be "
        f"closed near the given configuration"
        + (" inside the joint ranges" if held else "")
        + f": residual {res[k]:.3g} (m or rad) after {max_iter} Newton steps"
        + (f" with joints at their range limits: {at}; widen the ranges or" if held else ";")
        + " start closer to an assembled pose"
    )


# ---------------------------------------------------------------------------------------- sidecar
_LOOP_KEYS = {"name", "frame_a", "frame_b", "kind", "offset", "offset_b", "kp", "kd"}


def read_sidecar(path: str | Path) -> dict:
    """The loops TOML beside a URDF: {"passive": [...], "loop": [{frame_a, frame_b, kind, ...}, ...]}
    (format in the module docstring); a missing file, bad TOML or an unknown key → ``ConfigError``
    naming the file and the key."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"loops file {p} not found")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"loops file {p} is not valid TOML: {exc}") from None
    unknown = set(data) - {"passive", "loop"}
    if unknown:
        raise ConfigError(
            f"loops file {p}: unknown key(s) {sorted(unknown)}; expected 'passive' and [[loop]]"
        )
    passive = data.get("passive", [])
    if not isinstance(passive, list) or not all(isinstance(x, str) for x in passive):
        raise ConfigError(f"loops file {p}: 'passive' must be a list of joint names, got {passive!r}")
    loops = data.get("loop", [])
    if not isinstance(loops, list):
        raise ConfigError(f"loops file {p}: 'loop' must be an array of tables ([[loop]])")
    for k, lp in enumerate(loops):
        if not isinstance(lp, dict):
            raise ConfigError(f"loops file {p}: loop {k} is not a table")
        bad = set(lp) - _LOOP_KEYS
        if bad:
            close = difflib.get_close_matches(sorted(bad)[0], sorted(_LOOP_KEYS), n=1)
            raise ConfigError(
                f"loops file {p}: loop {k}: unknown key '{sorted(bad)[0]}'"
                + (f"; did you mean '{close[0]}'?" if close else f"; keys: {sorted(_LOOP_KEYS)}")
            )
        for key in ("frame_a", "frame_b"):
            if not isinstance(lp.get(key), str):
                raise ConfigError(f"loops file {p}: loop {k}: '{key}' (a frame name) is missing")
    return {"passive": list(passive), "loop": [dict(x) for x in loops], "path": p}


def apply_sidecar(robot: Robot, side: dict, prefix: str = "") -> None:
    """Add the sidecar's loops to ``robot.loops`` and its passive joints to ``robot.passive_joints`` (names
    prefixed with ``prefix``, a composed part's); a missing frame or joint → ``ConfigError`` naming the file,
    the loop and the frame."""
    p = side["path"]
    for name in side["passive"]:
        try:
            robot.joint_index(prefix + name)
        except FrameNotFoundError as exc:
            raise ConfigError(f"loops file {p}: passive joint: {exc}") from None
        if prefix + name not in robot.passive_joints:
            robot.passive_joints.append(prefix + name)
    for k, lp in enumerate(side["loop"]):
        name = prefix + str(lp.get("name", f"loop{k}"))
        kw = {x: lp[x] for x in ("kp", "kd") if x in lp}
        try:
            c = LoopClosure(
                robot,
                prefix + lp["frame_a"],
                prefix + lp["frame_b"],
                kind=lp.get("kind", "point"),
                offset=lp.get("offset"),
                offset_b=lp.get("offset_b"),
                name=name,
                **kw,
            )
        except (FrameNotFoundError, ConfigError) as exc:
            raise ConfigError(f"loops file {p}: loop '{name}': {exc}") from None
        robot.loops.append(c)


def pinocchio_constraint_models(robot: Robot, loops: Iterable[LoopClosure] | None = None) -> tuple[Any, Any]:
    """Pinocchio's rigid constraint models of the loops (for ``pin.constraintDynamics``): ``point`` → one
    CONTACT_3D between the two frames' joints at the frames' placements, ``weld`` → CONTACT_6D, ``revolute`` →
    two CONTACT_3D, at the frames and 0.05 m along the hinge axis (rank 5 of 6); all LOCAL.  Returns
    (models, datas) as Pinocchio's vectors, ``initConstraintDynamics`` not yet called."""
    model = robot.model
    cms = pin.StdVec_RigidConstraintModel()
    for c in robot.loops if loops is None else loops:
        if c.kind == "joint":
            raise ConfigError(
                f"loop '{c.name}' is a joint coupling (1 row): Pinocchio has no rigid constraint model for it; "
                "cross-validate it against MuJoCo's <equality joint>"
            )
        if c.kind == "plane":
            raise ConfigError(
                f"loop '{c.name}' is a plane closure (1 row): Pinocchio has no rigid constraint model "
                "for a point on a plane; cross-validate it on a mechanism with the slider as a body "
                "(e.g. mjcf/slider_crank.xml)"
            )
        fa, fb = model.frames[c.fa], model.frames[c.fb]
        offs = [pin.SE3.Identity()]
        if c.kind == "revolute":
            offs.append(pin.SE3(np.eye(3), np.array([0.0, 0.0, 0.05])))
        for off in offs:
            typ = pin.ContactType.CONTACT_6D if c.kind == "weld" else pin.ContactType.CONTACT_3D
            cms.append(
                pin.RigidConstraintModel(
                    typ,
                    model,
                    fa.parentJoint,
                    fa.placement * off,
                    fb.parentJoint,
                    fb.placement * off,
                    pin.ReferenceFrame.LOCAL,
                )
            )
    cds = pin.StdVec_RigidConstraintData()
    for cm in cms:
        cds.append(cm.createData())
    return cms, cds
