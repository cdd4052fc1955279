"""Joint limits as linear bounds on the acceleration v̇, for the controllers' QPs: each limit gives
rows l ≤ C v̇ ≤ u at the current state.

* ``EffortLimit``:  −τ_max ≤ τ ≤ τ_max with τ = M v̇ + h + D v, so C = M, l = −τ_max − (h + D v),
  u = τ_max − (h + D v)  (rows of the selected joints).
* ``JointVelocityLimit``: the velocity one horizon Δt ahead, v + Δt v̇, stays in [−v_max, v_max]:
  (−v_max − v)/Δt ≤ v̇ ≤ (v_max − v)/Δt.
* ``JointPositionLimit``: a bound on v̇ that stops the joint before q_max (and, mirrored, q_min).
  Braking at the deceleration a_max from velocity v ≥ 0 covers v²/(2 a_max); the joint can still stop
  before q_max iff  v² ≤ 2 a_max (q_max − q)  (viability).  Over one horizon Δt with constant v̇ = x
  (exactly what a zero-order-hold controller applies), v⁺ = v + Δt x and q⁺ = q + Δt v + ½ Δt² x.
  Requiring the next state to be viable, (v + Δt x)² ≤ 2 a (q_max − q − Δt v − ½ Δt² x), is the
  quadratic Δt² x² + (2 v Δt + a Δt²) x + v² − 2 a (q_max − q − Δt v) ≤ 0, whose upper root is

      x ≤ u = ( −2 v − a Δt + √(a² Δt² − 4 a v Δt + 8 a (q_max − q)) ) / (2 Δt).

  (Viability also gives q⁺ ≤ q_max.)  On the braking curve u = −a exactly, so braking stays admissible
  at every later step (recursive feasibility); a state beyond the curve gets u = −a (full braking).
  The lower bound is the mirror image with q_min.  A double integrator driven at the bound never
  passes q_max (tests/test_limits.py checks it in discrete time).

A limit knows its robot's joint order (Pinocchio's); ``joints=None`` means every joint.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from cmstack.models.errors import ConfigError
from cmstack.models.robot import Kinematics, Robot


def _select(robot: Robot, joints: Sequence[str] | None, owner: str) -> np.ndarray:
    if joints is None:
        return np.arange(robot.nv)
    if isinstance(joints, str):
        raise ConfigError(f"{owner}: joints must be a list of joint names, got the string {joints!r}")
    return np.array([robot.joint_index(j) for j in joints], dtype=int)


def _values(x, default: np.ndarray, idx: np.ndarray, key: str, owner: str, robot: Robot,
            allow_negative: bool = False) -> np.ndarray:
    """A per-joint value: None (the URDF's), a scalar, or one value per selected joint."""
    if x is None:
        val = default[idx].astype(float)
        src = f"the URDF {robot.path.name}"
    else:
        val = np.broadcast_to(np.asarray(x, dtype=float), idx.shape).astype(float) if np.ndim(x) == 0 \
            else np.asarray(x, dtype=float)
        src = "the argument"
        if val.shape != idx.shape:
            raise ConfigError(f"{owner}: {key} has {val.size} values for {idx.size} joints")
    names = [robot.joint_names[i] for i in idx]
    bad = [(n, float(v)) for n, v in zip(names, val) if not math.isfinite(v) or (not allow_negative and v <= 0)]
    if bad:
        raise ConfigError(f"{owner}: {key} must be finite{'' if allow_negative else ' and > 0'} for every joint "
                          f"(from {src}); got {bad[:4]}")
    return val


class Limit(ABC):
    """Bounds l ≤ C v̇ ≤ u at the current state. ``name`` is shown in infeasibility messages."""

    name: str
    idx: np.ndarray

    @abstractmethod
    def bounds(self, kin: Kinematics, hD: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(C, l, u) at ``kin``; hD = h + D v is the model's bias torque (N·m)."""

    def violation(self, kin: Kinematics, hD: np.ndarray, vdot: np.ndarray, tau: np.ndarray,
                  rtol: float = 1e-9) -> float:
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

    def __init__(self, robot: Robot, tau_max=None, joints: Sequence[str] | None = None, name: str = "effort"):
        self.name = name
        self.idx = _select(robot, joints, name)
        self.tau_max = _values(tau_max, robot.effort_limit, self.idx, "tau_max", name, robot)
        self._all = joints is None

    def bounds(self, kin, hD):
        if self._all:
            return kin.M, -self.tau_max - hD, self.tau_max - hD
        i = self.idx
        return kin.M[i], -self.tau_max - hD[i], self.tau_max - hD[i]

    def violation(self, kin, hD, vdot, tau, rtol=1e-9):
        t = tau if self._all else tau[self.idx]
        return float(np.max(np.abs(t) - self.tau_max * (1.0 + rtol)))

    def violated(self, kin, hD, vdot, tau):
        return bool((np.abs(tau if self._all else tau[self.idx]) > self.tau_max * (1.0 + 1e-9)).any())


class JointVelocityLimit(Limit):
    """|v_i + Δt v̇_i| ≤ v_max,i.  Args: robot; dt: the horizon Δt (s), e.g. the control period;
    v_max: None (URDF velocity limits), scalar or per joint (rad/s or m/s); joints."""

    def __init__(self, robot: Robot, dt: float, v_max=None, joints: Sequence[str] | None = None,
                 name: str = "velocity"):
        self.name = name
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ConfigError(f"{name}: dt must be a finite number > 0 (s), got {dt!r}")
        self.dt = float(dt)
        self.idx = _select(robot, joints, name)
        self.v_max = _values(v_max, np.asarray(robot.model.velocityLimit, dtype=float), self.idx, "v_max", name, robot)
        self._C = np.eye(robot.nv)[self.idx]

    def bounds(self, kin, hD):
        v = kin.v[self.idx]
        return self._C, (-self.v_max - v) / self.dt, (self.v_max - v) / self.dt


class JointPositionLimit(Limit):
    """q_min ≤ q ≤ q_max kept through an acceleration bound that brakes in time (module docstring).
    Args: robot; dt: horizon Δt (s); a_max: braking deceleration (rad/s² or m/s², scalar or per
    joint); q_min, q_max: None (URDF limits) or values; joints (None: every joint with finite URDF
    limits, i.e. all but the continuous ones)."""

    def __init__(self, robot: Robot, dt: float, a_max, q_min=None, q_max=None,
                 joints: Sequence[str] | None = None, name: str = "position"):
        self.name = name
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ConfigError(f"{name}: dt must be a finite number > 0 (s), got {dt!r}")
        self.dt = float(dt)
        self.idx = _select(robot, joints, name)
        if joints is None and q_min is None and q_max is None:
            # every joint that has position limits (a continuous joint has none: ±inf, models/robot.py)
            lo, hi = robot.model.lowerPositionLimit, robot.model.upperPositionLimit
            self.idx = self.idx[np.isfinite(lo[self.idx]) & np.isfinite(hi[self.idx])]
            if np.ndim(a_max) == 1 and len(a_max) == robot.nv:
                a_max = np.asarray(a_max, dtype=float)[self.idx]
        self.a_max = _values(a_max, np.zeros(robot.nv), self.idx, "a_max", name, robot)
        self.q_min = _values(q_min, np.asarray(robot.model.lowerPositionLimit, dtype=float), self.idx, "q_min",
                             name, robot, allow_negative=True)
        self.q_max = _values(q_max, np.asarray(robot.model.upperPositionLimit, dtype=float), self.idx, "q_max",
                             name, robot, allow_negative=True)
        bad = [robot.joint_names[i] for i, lo, hi in zip(self.idx, self.q_min, self.q_max) if not lo < hi]
        if bad:
            raise ConfigError(f"{name}: q_min < q_max is false for joints {bad}")
        self._C = np.eye(robot.nv)[self.idx]

    def acceleration_bounds(self, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) bounds on q̈ of the selected joints at (q, v) (module docstring)."""
        dt, a = self.dt, self.a_max

        def upper(qq, vv, qmax):
            disc = np.maximum(a * a * dt * dt - 4.0 * a * vv * dt + 8.0 * a * (qmax - qq), 0.0)
            return np.maximum((-2.0 * vv - a * dt + np.sqrt(disc)) / (2.0 * dt), -a)

        return -upper(-q, -v, -self.q_min), upper(q, v, self.q_max)

    def bounds(self, kin, hD):
        l, u = self.acceleration_bounds(kin.q[self.idx], kin.v[self.idx])
        return self._C, l, u
