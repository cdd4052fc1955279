"""Joint limits as linear bounds on the acceleration v̇, for the controllers' QPs: each limit gives
rows l ≤ C v̇ ≤ u at the current state.

* ``EffortLimit``:  −τ_max ≤ τ ≤ τ_max with τ = M v̇ + h + D v, so C = M, l = −τ_max − (h + D v),
  u = τ_max − (h + D v)  (rows of the selected joints).
* ``JointVelocityLimit``: the velocity one horizon Δt ahead, v + Δt v̇, stays in [−v_max, v_max]:
  (−v_max − v)/Δt ≤ v̇ ≤ (v_max − v)/Δt.
* ``JointPositionLimit``: a bound on v̇ that stops the joint before q_max (and, mirrored, q_min) on the
  *plant*, whose achieved acceleration differs from the commanded one (joint damping that the Euler
  integrator treats implicitly, model error, the integrator's own discretisation).  Three things are
  made robust:

  1. **The integrator.**  Over one step Δt with commanded acceleration x, v⁺ = v + Δt x, and the
     position moves by Δt v⁺ (MuJoCo's semi-implicit Euler), Δt (v + v⁺)/2 (exact constant
     acceleration) or Δt v (explicit Euler): in every case q⁺ ≤ q + Δt max(v, v⁺).
  2. **Braking in discrete steps.**  Braking at deceleration b from v ≥ 0 covers v²/(2b) continuously,
     v²/(2b) − Δt v/2 with semi-implicit Euler and v²/(2b) + Δt v/2 with explicit Euler; we take the
     largest, B(v) = v²/(2b) + Δt v/2.  A state is *viable* when v ≤ 0 or B(v) ≤ d, d = q_max − q.
  3. **A deceleration that falls short.**  The braking curve is planned at b = κ a_max
     (``brake_fraction`` κ, default 0.5), while the bound lets the controller command up to a_max of
     braking; so a plant that realises anything from κ to 1 times the commanded deceleration stays
     viable (a Panda wrist with D = 0.5 N·m·s/rad realised 17.5 of 20 rad/s² at 1 ms).  ``margin``
     (rad or m, default 0) moves the bound inwards for whatever else remains.

  Braking in whole steps ends with a remainder of at most b Δt of velocity, which 2. does not count: the
  distance gets a last term b Δt² (d = q_max − margin − q − b Δt² below).
  The next state must be viable under the worst position update of 1.: with y = v⁺ and
  d = q_max − margin − q − b Δt²,
      (i)  y²/(2b) + Δt y/2 + Δt y ≤ d   when y ≥ v,   (ii)  y²/(2b) + Δt y/2 + Δt v ≤ d   when y ≤ v,
  whose largest roots are  y_i = −(3/2) b Δt + √((9/4) b² Δt² + 2 b d)  and
  y_ii = −(1/2) b Δt + √((1/4) b² Δt² + 2 b (d − Δt v)).  The admissible set is y ≤ y_i if y_i ≥ v,
  else y ≤ y_ii (the two branches meet at y = v).  A commanded braking x < 0 may be realised as only
  κ x (3.), so the bound asks for what reaches y* even then:
      x ≤ u = max((y* − v)/Δt, −a_max)            when y* ≥ v,
      x ≤ u = max((y* − v)/(κ Δt), −a_max)        when y* < v.
  Recursive feasibility: from a viable state, braking at b (y = v − b Δt) meets (ii) at worst with
  equality (B(v) ≤ d), so y* ≥ v − bΔt and u ≥ −b/κ = −a_max: the controller can always keep braking;
  a state beyond the curve gets u = −a_max (full braking).  The lower bound is the mirror image with q_min.
  tests/test_limits.py drives a double integrator at the bound under each integrator and with a plant
  that realises only κ of the commanded deceleration: it never passes q_max.

A limit knows its robot's joint order (Pinocchio's); ``joints=None`` means every joint.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from cmstack.models import _params
from cmstack.models.errors import ConfigError
from cmstack.models.robot import Kinematics, Robot


def _select(robot: Robot, joints: Sequence[str] | None, owner: str) -> np.ndarray:
    if joints is None:
        return np.arange(robot.nv)
    if isinstance(joints, str):
        raise ConfigError(f"{owner}: joints must be a list of joint names, got the string {joints!r}")
    return np.array([robot.joint_index(j) for j in joints], dtype=int)


def _flat_position_columns(
    robot: Robot, idx: np.ndarray, every: bool, unlimited_ok: bool, owner: str
) -> np.ndarray:
    """The v columns of ``idx`` that a position limit may hold on a robot with ball or free joints (nq ≠ nv).

    A position limit reads q_j at the joint's v index j (here and in the compiled ``_limit_kernels``), which is
    its q index only for the 1-DoF joints before the first ball or free joint in Pinocchio's order.  ``every``
    (no joints named): the columns of ball and free joints, which have no scalar position limit, are dropped;
    ``unlimited_ok`` (no joints and no bounds given): so are the joints without finite model limits; a 1-DoF
    joint left whose q index differs from its v index → ``ConfigError`` naming it (such limits are not supported
    yet: reading q at the v index would hold the wrong coordinate, silently)."""
    model = robot.model
    lo, hi = model.lowerPositionLimit, model.upperPositionLimit
    chosen = set(idx.tolist())
    keep: list[int] = []
    shifted: list[str] = []
    for j in range(1, model.njoints):
        jm = model.joints[j]
        if not chosen.intersection(range(jm.idx_v, jm.idx_v + jm.nv)):
            continue
        if jm.nv != 1:
            if not every:  # (joint_index already refuses a named ball or free joint)
                raise ConfigError(
                    f"{owner}: joint '{model.names[j]}' has nv={jm.nv}: no scalar position limit"
                )
            continue
        if unlimited_ok and not (np.isfinite(lo[jm.idx_q]) and np.isfinite(hi[jm.idx_q])):
            continue
        if jm.idx_q != jm.idx_v:
            shifted.append(model.names[j])
        keep.append(jm.idx_v)
    if shifted:
        raise ConfigError(
            f"{owner}: position limits on joints after a ball or free joint ({len(shifted)}: {shifted[:4]}"
            f"{' ...' if len(shifted) > 4 else ''}) are not supported yet "
            "(their q index differs from their v index); name only joints before it, or leave the position limit out"
        )
    return np.array(keep, dtype=int)


def _values(
    x: ArrayLike | None,
    default: np.ndarray,
    idx: np.ndarray,
    key: str,
    owner: str,
    robot: Robot,
    allow_negative: bool = False,
) -> np.ndarray:
    """A per-joint value: None (the URDF's), a scalar, or one value per selected joint."""
    if x is None:
        val = default[idx].astype(float)
        src = f"the URDF {robot.path.name}"
    else:
        val = (
            np.broadcast_to(np.asarray(x, dtype=float), idx.shape).astype(float)
            if np.ndim(x) == 0
            else np.asarray(x, dtype=float)
        )
        src = "the argument"
        if val.shape != idx.shape:
            raise ConfigError(f"{owner}: {key} has {val.size} values for {idx.size} joints")
    names = [robot.joint_names[i] for i in idx]
    bad = [
        (n, float(v)) for n, v in zip(names, val) if not math.isfinite(v) or (not allow_negative and v <= 0)
    ]
    if bad:
        raise ConfigError(
            f"{owner}: {key} must be finite{'' if allow_negative else ' and > 0'} for every joint "
            f"(from {src}); got {bad[:4]}"
        )
    return val


#: the parameters a compiled step copies (``LimitCheck``): assigning one announces it (``models/_params.py``), and
#: its array is a read-only copy, so that a change in place, which no assignment would announce, is refused
_PARAMS = ("idx", "tau_max", "v_max", "a_max", "q_min", "q_max", "dt", "brake_fraction", "margin")


class Limit(ABC):
    """Bounds l ≤ C v̇ ≤ u at the current state. ``name`` is shown in infeasibility messages.

    The parameters (``idx``, ``tau_max``, ``v_max``, ``a_max``, ``q_min``, ``q_max``, ``dt``,
    ``brake_fraction``, ``margin``) may be assigned at any time (a compiled step copies them again); their
    arrays are read-only copies (assign a new array instead of writing into one)."""

    name: str
    idx: np.ndarray

    def __setattr__(self, key: str, value) -> None:
        if key in _PARAMS:
            if isinstance(value, np.ndarray):
                value = np.array(value, dtype=np.int64 if key == "idx" else np.float64)
                value.setflags(write=False)
            _params.changed()
        object.__setattr__(self, key, value)

    @abstractmethod
    def bounds(self, kin: Kinematics, hD: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(C, l, u) at ``kin``; hD = h + D v is the model's bias torque (N·m)."""

    def violation(
        self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, tau: np.ndarray, rtol: float = 1e-9
    ) -> float:
        """Largest violation of the bounds by v̇ (in the rows' units; ≤ 0 when within)."""
        C, l, u = self.bounds(kin, hD)
        y = C @ vdot
        tol = rtol * (np.abs(l) + np.abs(u) + 1.0)
        return float(max(np.max(l - tol - y, initial=-np.inf), np.max(y - u - tol, initial=-np.inf)))

    def violated(self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, tau: np.ndarray) -> bool:
        """Whether v̇ (with its torque τ) violates the bounds beyond a 1e-9 relative tolerance."""
        return self.violation(kin, hD, vdot, tau) > 0

    @property
    def dim(self) -> int:
        return len(self.idx)


class EffortLimit(Limit):
    """|τ_i| ≤ τ_max,i (N·m or N).  Args: robot; tau_max: None (URDF effort limits), a scalar or one
    value per joint; joints: None (all) or names."""

    def __init__(
        self,
        robot: Robot,
        tau_max: ArrayLike | None = None,
        joints: Sequence[str] | None = None,
        name: str = "effort",
    ):
        self.name = name
        self.idx = _select(robot, joints, name)
        self.tau_max = _values(tau_max, robot.effort_limit, self.idx, "tau_max", name, robot)
        self._all = joints is None
        urdf = np.asarray(robot.effort_limit, dtype=float)[self.idx]
        over = [
            (robot.joint_names[j], float(a), float(b))
            for j, a, b in zip(self.idx, self.tau_max, urdf)
            if np.isfinite(b) and b > 0 and a > b * (1 + 1e-12)
        ]
        if over:
            warnings.warn(
                f"{name}: tau_max exceeds the effort limit of {robot.path.name} on joints "
                + ", ".join(f"'{j}' ({a:g} > {b:g} N·m)" for j, a, b in over[:4])
                + (" …" if len(over) > 4 else "")
                + "; a plant built from that file (plant_from_urdf) clamps its motors there, so the "
                "controller would count on torque the plant does not give",
                UserWarning,
                stacklevel=2,
            )

    def bounds(self, kin: Kinematics, hD: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._all:
            return kin.M, -self.tau_max - hD, self.tau_max - hD
        i = self.idx
        return kin.M[i], -self.tau_max - hD[i], self.tau_max - hD[i]

    def violation(
        self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, tau: np.ndarray, rtol: float = 1e-9
    ) -> float:
        t = tau if self._all else tau[self.idx]
        return float(np.max(np.abs(t) - self.tau_max * (1.0 + rtol)))

    def violated(self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, tau: np.ndarray) -> bool:
        return bool((np.abs(tau if self._all else tau[self.idx]) > self.tau_max * (1.0 + 1e-9)).any())


class JointVelocityLimit(Limit):
    """|v_i + Δt v̇_i| ≤ v_max,i.  Args: robot; dt: the horizon Δt (s), e.g. the control period;
    v_max: None (URDF velocity limits), scalar or per joint (rad/s or m/s); joints."""

    def __init__(
        self,
        robot: Robot,
        dt: float,
        v_max: ArrayLike | None = None,
        joints: Sequence[str] | None = None,
        name: str = "velocity",
    ):
        self.name = name
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ConfigError(f"{name}: dt must be a finite number > 0 (s), got {dt!r}")
        self.dt = float(dt)
        self.idx = _select(robot, joints, name)
        self.v_max = _values(
            v_max, np.asarray(robot.model.velocityLimit, dtype=float), self.idx, "v_max", name, robot
        )
        self._C = np.eye(robot.nv)[self.idx]

    def bounds(self, kin: Kinematics, hD: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = kin.v[self.idx]
        return self._C, (-self.v_max - v) / self.dt, (self.v_max - v) / self.dt


class JointPositionLimit(Limit):
    """q_min ≤ q ≤ q_max kept through an acceleration bound that brakes in time on the plant (module
    docstring).  Args: robot; dt: horizon Δt (s), the control period; a_max: largest braking the
    controller may command (rad/s² or m/s², scalar or per joint); q_min, q_max: None (URDF limits) or
    values; joints (None: every joint with finite URDF limits, i.e. all but the continuous ones);
    brake_fraction: κ ∈ (0, 1], the braking curve is planned at κ a_max (robust to a plant that realises
    only κ of the commanded deceleration); margin: distance kept from each bound (rad or m, ≥ 0)."""

    def __init__(
        self,
        robot: Robot,
        dt: float,
        a_max: ArrayLike,
        q_min: ArrayLike | None = None,
        q_max: ArrayLike | None = None,
        joints: Sequence[str] | None = None,
        name: str = "position",
        *,
        brake_fraction: float = 0.5,
        margin: float = 0.0,
    ):
        self.name = name
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ConfigError(f"{name}: dt must be a finite number > 0 (s), got {dt!r}")
        if not (isinstance(brake_fraction, (int, float)) and 0 < brake_fraction <= 1):
            raise ConfigError(f"{name}: brake_fraction must be in (0, 1], got {brake_fraction!r}")
        if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
            raise ConfigError(f"{name}: margin must be a finite number >= 0, got {margin!r}")
        self.dt = float(dt)
        self.brake_fraction = float(brake_fraction)
        self.margin = float(margin)
        self.idx = _select(robot, joints, name)
        if robot.nq != robot.nv:
            unlimited_ok = joints is None and q_min is None and q_max is None
            self.idx = _flat_position_columns(robot, self.idx, joints is None, unlimited_ok, name)
        if joints is None and q_min is None and q_max is None:
            # every joint that has position limits (a continuous joint has none: ±inf, models/robot.py)
            lo, hi = robot.model.lowerPositionLimit, robot.model.upperPositionLimit
            self.idx = self.idx[np.isfinite(lo[self.idx]) & np.isfinite(hi[self.idx])]
            if np.ndim(a_max) == 1 and np.size(a_max) == robot.nv:
                a_max = np.asarray(a_max, dtype=float)[self.idx]
        self.a_max = _values(a_max, np.zeros(robot.nv), self.idx, "a_max", name, robot)
        self.q_min = _values(
            q_min,
            np.asarray(robot.model.lowerPositionLimit, dtype=float),
            self.idx,
            "q_min",
            name,
            robot,
            allow_negative=True,
        )
        self.q_max = _values(
            q_max,
            np.asarray(robot.model.upperPositionLimit, dtype=float),
            self.idx,
            "q_max",
            name,
            robot,
            allow_negative=True,
        )
        bad = [robot.joint_names[i] for i, lo, hi in zip(self.idx, self.q_min, self.q_max) if not lo < hi]
        if bad:
            raise ConfigError(f"{name}: q_min < q_max is false for joints {bad}")
        narrow = [
            robot.joint_names[i]
            for i, lo, hi in zip(self.idx, self.q_min, self.q_max)
            if not hi - lo > 2 * self.margin
        ]
        if narrow:
            raise ConfigError(f"{name}: margin {self.margin} leaves no range on joints {narrow}")
        self._C = np.eye(robot.nv)[self.idx]

    def acceleration_bounds(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) bounds on q̈ of the selected joints at (q, v) (module docstring), by the compiled
        ``_limit_kernels.acceleration_bounds`` (the same expressions as ``_acceleration_bounds_numpy``, joint by
        joint: about 25 NumPy operations less on each step that a limit binds)."""
        from cmstack.models._limit_kernels import acceleration_bounds

        q = np.ascontiguousarray(q, dtype=np.float64)
        v = np.ascontiguousarray(v, dtype=np.float64)
        lo, hi = np.empty(q.shape[0]), np.empty(q.shape[0])
        acceleration_bounds(
            q, v, self.dt, self.a_max, self.brake_fraction, self.margin, self.q_min, self.q_max, lo, hi
        )
        return lo, hi

    def _acceleration_bounds_numpy(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``acceleration_bounds`` in NumPy (the module docstring's equations as written; the tests' oracle)."""
        dt, a = self.dt, self.a_max
        bb = self.brake_fraction * a

        def upper(qq, vv, qmax):
            d = qmax - self.margin - qq - bb * dt * dt
            y_i = -1.5 * bb * dt + np.sqrt(np.maximum(2.25 * bb * bb * dt * dt + 2.0 * bb * d, 0.0))
            y_ii = -0.5 * bb * dt + np.sqrt(
                np.maximum(0.25 * bb * bb * dt * dt + 2.0 * bb * (d - dt * vv), 0.0)
            )
            y = np.where(y_i >= vv, y_i, y_ii)
            dy = y - vv
            # braking (dy < 0) is commanded for a plant that realises only κ of it
            return np.maximum(np.where(dy >= 0.0, dy / dt, dy / (self.brake_fraction * dt)), -a)

        return -upper(-q, -v, -self.q_min), upper(q, v, self.q_max)

    def bounds(self, kin: Kinematics, hD: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        l, u = self.acceleration_bounds(kin.q[self.idx], kin.v[self.idx])
        return self._C, l, u


class LimitCheck:
    """The test of limits on a compiled step's result (``models/_limit_kernels.py``: one compiled call, no
    Kinematics, no NumPy temporaries): whether v̇ and τ in the step's buffer violate any row, as the limits' own
    ``violated`` decides.  Built by ``LimitCheck.build`` only for limits whose maths is the built-in one
    (``EffortLimit``, ``JointVelocityLimit``, ``JointPositionLimit``, or subclasses that keep their
    ``bounds``, ``violated`` and ``acceleration_bounds``); the parameters are copied into the tables by
    ``copy`` (run by the caller whenever ``models._params.version`` moved: every assignment of a limit's
    parameter moves it).

    Args:
        limits: the limits to test.
        o_q, o_v, o_x, o_tau: offsets in the step buffer of q, v, v̇ and the torque sent τ (each nv long)."""

    def __init__(self, limits: Sequence[Limit], o_q: int, o_v: int, o_x: int, o_tau: int):
        from cmstack.models import _limit_kernels as K

        self._K = K
        self.limits = list(limits)
        self._offsets = (o_q, o_v, o_x, o_tau)
        self.I = np.zeros(0, dtype=np.int64)
        self.F = np.zeros(0)
        self.violated = K.violated
        self.copy()

    @staticmethod
    def compiled(lim: Limit) -> bool:
        """Whether ``lim``'s rows are the built-in maths the compiled test reproduces."""
        for base in (EffortLimit, JointVelocityLimit, JointPositionLimit):
            if isinstance(lim, base):
                return all(
                    getattr(type(lim), m, None) is getattr(base, m, None)
                    for m in ("bounds", "violated", "violation", "acceleration_bounds")
                )
        return False

    @classmethod
    def build(cls, limits: Sequence[Limit], o_q: int, o_v: int, o_x: int, o_tau: int) -> LimitCheck | None:
        """The check, or None when a limit is not ``compiled`` or numba is missing (the caller then tests in
        Python)."""
        if not limits or not all(cls.compiled(lim) for lim in limits):
            return None
        try:
            return cls(limits, o_q, o_v, o_x, o_tau)
        except ImportError:
            return None

    def copy(self) -> None:
        """The rows (kind, joint) and parameters of every limit into the tables (``_limit_kernels.violated``)."""
        K = self._K
        rows: list[tuple[int, int]] = []
        pars: list[list[float]] = []
        for lim in self.limits:
            for k, j in enumerate(lim.idx):
                if isinstance(lim, EffortLimit):
                    rows.append((K.EFFORT, int(j)))
                    pars.append([float(lim.tau_max[k]), 0, 0, 0, 0, 0])
                elif isinstance(lim, JointVelocityLimit):
                    rows.append((K.VELOCITY, int(j)))
                    pars.append([float(lim.v_max[k]), lim.dt, 0, 0, 0, 0])
                else:
                    assert isinstance(lim, JointPositionLimit)
                    rows.append((K.POSITION, int(j)))
                    pars.append(
                        [
                            lim.dt,
                            float(lim.a_max[k]),
                            lim.brake_fraction,
                            lim.margin,
                            float(lim.q_min[k]),
                            float(lim.q_max[k]),
                        ]
                    )
        nr = len(rows)
        I_len, F_len = K.HEADER + 2 * nr, K.N_PAR * nr
        if self.I.size != I_len or self.F.size != F_len:
            self.I, self.F = np.zeros(I_len, dtype=np.int64), np.zeros(F_len)
        self.I[: K.HEADER] = (nr, *self._offsets)
        if nr:
            self.I[K.HEADER :] = np.array(rows, dtype=np.int64).ravel()
            self.F[:] = np.array(pars, dtype=float).ravel()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_K"], state["violated"]  # a module and a compiled function: imported again
        return state

    def __setstate__(self, state: dict) -> None:
        from cmstack.models import _limit_kernels as K

        self.__dict__.update(state, _K=K, violated=K.violated)

    def __call__(self, buf: np.ndarray) -> bool:
        """Whether the step's result in ``buf`` violates a row."""
        return self.violated(buf, self.I, self.F) != 0


class LimitRows:
    """The limits' rows l ≤ C v̇ ≤ u at a state, stacked in the limits' order (each ``bounds``), built by one compiled
    call (``models/_limit_kernels.rows``) into buffers made once: the controllers' QP rows when a limit binds.  Built
    by ``LimitRows.build`` only for limits of the built-in maths (``LimitCheck.compiled``); the table is copied again
    whenever a parameter was assigned since (``models._params.version``).

    Args:
        limits: the limits, in the order of their rows.
        nv: the robot's velocity dimension."""

    def __init__(self, limits: Sequence[Limit], nv: int):
        from cmstack.models import _limit_kernels as K

        self._check = LimitCheck(limits, 0, 0, 0, 0)  # its table: (kind, joint) and parameters of every row
        self._version = _params.version
        m = sum(lim.dim for lim in limits)
        self.C, self.l, self.u = np.zeros((m, nv)), np.zeros(m), np.zeros(m)
        self._rows = K.rows

    @classmethod
    def build(cls, limits: Sequence[Limit], nv: int) -> LimitRows | None:
        """The rows' builder, or None when a limit is not ``LimitCheck.compiled`` (the caller stacks their
        ``bounds``)."""
        if not limits or not all(LimitCheck.compiled(lim) for lim in limits):
            return None
        return cls(limits, nv)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_rows"]
        return state

    def __setstate__(self, state: dict) -> None:
        from cmstack.models import _limit_kernels as K

        self.__dict__.update(state, _rows=K.rows)

    def __call__(
        self, q: np.ndarray, v: np.ndarray, M: np.ndarray, hD: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(C, l, u) at (q, v) with mass matrix M and bias hD = h + D v (N·m): the buffers, rewritten by the next
        call."""
        if self._version != _params.version:
            self._check.copy()
            self._version = _params.version
        if len(self._check.I) != 5 + 2 * self.l.size:  # a limit's joints were reassigned: its rows changed
            m = (len(self._check.I) - 5) // 2
            self.C, self.l, self.u = np.zeros((m, self.C.shape[1])), np.zeros(m), np.zeros(m)
        C, l, u = self.C, self.l, self.u
        c = self._check
        self._rows(q, v, M, hD, c.I, c.F, C, l, u)
        return C, l, u
