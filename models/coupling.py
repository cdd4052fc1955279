"""Rigid-body coupling constraints and frame-control laws of the thesis (seed 002, §3.3–3.4) as
acceleration-level affine constraints A v̇ = b.

All three act on frames of the model; a frame rigidly offset from a link (the coupling body's
B = E₁·T_A^B, or C = E·T_A^C) is registered once as an operational frame of the Pinocchio model
(``Robot.add_frame``), so that Pinocchio computes its pose, LOCAL_WORLD_ALIGNED Jacobian and Jacobian
time variation in C++.  That is the thesis' offset algebra, (3.27) and (3.29): with r = R_E p_EC,

    v_C = v_E + ω_E × r          →  J_C,v = J_E,v − r^ J_E,ω,          J_C,ω = J_E,ω
    d/dt J_C,v = dJ_E,v − (ω_E × r)^ J_E,ω − r^ dJ_E,ω

Each law is a stable error ODE on a velocity error w(v) = W v + w₀(t) and a pose error e:

    ẇ + K_d w + K_p e = 0,   ẇ = W v̇ + (Ẇ v + ẇ₀)   ⇒   A = W,  b = −(Ẇ v + ẇ₀) − K_d w − K_p e

* ``RigidCoupling`` (Algorithm 3.3.1, eqs. 3.26–3.30): B = E₁·T_A^B must coincide with E₂,
      e = e_SE3(T_B, T_E2) = [p_E2 − p_B; Log(R_Bᵀ R_E2)]                                  (3.14–3.15)
      w = [v_E2 − v_B; R_E2ᵀ(ω_E2 − ω_B)]                                                   (3.27)
      Ẇ v = [J̇_d,v v; R_E2ᵀ(J̇_d,ω − ω_E2^ J_d,ω) v],  J_d = J_E2 − J_B                    (3.29–3.30)
* ``FrameTask`` (Algorithm 3.4.1, eqs. 3.32–3.34; with an offset, Algorithm 3.4.2, 3.35–3.36):
  frame C follows a desired D(t) = (T_D, [v_D; ω_D^D], [a_D; ε_D^D]) (linear parts in world
  axes, angular parts in D's axes):
      e = e_SE3(T_C, T_D) = [p_D − p_C; Log(R_Cᵀ R_D)]
      w = [v_D − v_C; ω_D^D − R_Dᵀ ω_C]
      A = [−J_C,v; −R_Dᵀ J_C,ω]
      b = [J̇_C,v v; R_Dᵀ(J̇_C,ω − ω_D^ J_C,ω) v] − [a_D; ε_D^D] − K_d w − K_p e           (3.34)
  (The thesis writes J̃_ω of (3.36) in E's axes; here both terms use D's axes, as in (3.34), so the
  angular error ODE (3.19) holds exactly.)

The angular error is stable by the Lyapunov argument (3.20)–(3.23): ė = J_r⁻¹(e) ω̃ and
eᵀ J_r⁻¹(e) = eᵀ.  ``rows`` selects a variant: "full" (6), "position" (3), "orientation" (3).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pinocchio as pin

from cmstack.models.errors import ConfigError
from cmstack.models.lie import cross3, se3_error
from cmstack.models.robot import Kinematics, Robot

ROWS = {"full": slice(0, 6), "position": slice(0, 3), "orientation": slice(3, 6)}


def _rows(name: str, owner: str) -> slice:
    if name not in ROWS:
        raise ConfigError(f"{owner}: rows='{name}' is not one of {list(ROWS)}")
    return ROWS[name]


def _as_se3(T) -> pin.SE3:
    if isinstance(T, pin.SE3):
        return T.copy()
    T = np.asarray(T, dtype=float)
    if T.shape == (4, 4):
        return pin.SE3(T[:3, :3], T[:3, 3])
    raise ConfigError(f"expected a pinocchio.SE3 or a 4×4 matrix, got an array of shape {T.shape}")


def _frame_or_offset(robot: Robot, frame: str, offset: pin.SE3 | None, tag: str) -> int:
    if offset is None or offset.isIdentity(1e-15):
        return robot.frame_id(frame)
    return robot.add_frame(f"{frame}*{tag}", frame, offset)


class AffineConstraint:
    """Base: a named constraint A v̇ = b built from an error ODE ẇ + K_d w + K_p e = 0."""

    name: str
    kp: float
    kd: float
    rows: slice

    def terms(self, kin: Kinematics, t: float):
        """Return (W, drift, w, e): A = W, ẇ = W v̇ + drift (6-vectors / 6×nv, all rows)."""
        raise NotImplementedError

    def compute(self, kin: Kinematics, t: float) -> tuple[np.ndarray, np.ndarray]:
        W, drift, w, e = self.terms(kin, t)
        r = self.rows
        return W[r], (-drift - self.kd * w - self.kp * e)[r]

    def error(self, kin: Kinematics, t: float) -> np.ndarray:
        return self.terms(kin, t)[3][self.rows]

    @property
    def dim(self) -> int:
        return self.rows.stop - self.rows.start


class RigidCoupling(AffineConstraint):
    """Algorithm 3.3.1: frame E₁·T_A^B coincides with frame E₂ (two arms holding one rigid body)."""

    def __init__(self, robot: Robot, frame1: str, frame2: str, T_AB, kp: float, kd: float,
                 rows: str = "full", name: str | None = None):
        self.f1, self.f2 = robot.frame_id(frame1), robot.frame_id(frame2)
        self.T_AB = _as_se3(T_AB)
        self.kp, self.kd = float(kp), float(kd)
        self.name = name or f"coupling({frame1}->{frame2})"
        self.fB = _frame_or_offset(robot, frame1, self.T_AB, f"{self.name}:B")
        self.rows = _rows(rows, self.name)

    def terms(self, kin, t):
        B = kin.frame(self.fB)
        E2 = kin.frame(self.f2)
        R2t = E2.T.rotation.T
        Jd = E2.J - B.J
        dJd_v = (E2.dJ - B.dJ) @ kin.v
        W = Jd.copy()
        W[3:] = R2t @ Jd[3:]
        rel = E2.twist - B.twist                      # = Jd v
        drift = dJd_v
        drift[3:] = R2t @ (dJd_v[3:] - cross3(E2.twist[3:], rel[3:]))
        wd = rel.copy()
        wd[3:] = R2t @ rel[3:]
        e = se3_error(B.T, E2.T)
        return W, drift, wd, e


Trajectory = Callable[[float], tuple]
"""t ↦ (T_D: SE3, [v_D; ω_D^D] (6,), [a_D; ε_D^D] (6,)); linear parts world, angular parts in D."""


class FrameTask(AffineConstraint):
    """Algorithms 3.4.1 (offset None) and 3.4.2 (offset T_A^C on the coupling body): frame
    E·T_EC follows the desired trajectory D(t)."""

    def __init__(self, robot: Robot, frame: str, trajectory: Trajectory, kp: float, kd: float,
                 offset=None, rows: str = "full", name: str | None = None):
        self.offset = None if offset is None else _as_se3(offset)
        self.trajectory = trajectory
        self.kp, self.kd = float(kp), float(kd)
        self.name = name or f"task({frame})"
        self.fid = _frame_or_offset(robot, frame, self.offset, self.name)
        self.rows = _rows(rows, self.name)

    def terms(self, kin, t):
        C = kin.frame(self.fid)
        T_D, vel_D, acc_D = self.trajectory(t)
        RDt = T_D.rotation.T
        wD_world = T_D.rotation @ vel_D[3:]
        W = -C.J
        W[3:] = RDt @ W[3:]
        dJv = C.dJ @ kin.v
        drift = acc_D - dJv
        drift[3:] = acc_D[3:] - RDt @ (dJv[3:] - cross3(wD_world, C.twist[3:]))
        wd = vel_D - C.twist
        wd[3:] = vel_D[3:] - RDt @ C.twist[3:]
        e = se3_error(C.T, T_D)
        return W, drift, wd, e


def circle_trajectory(center, radius: float, omega: float, phase: float, R=None) -> Trajectory:
    """Thesis §4.4: p(t) = c + r (cos(ω t + φ), 0, sin(ω t + φ)) in the x–z plane, fixed orientation R,
    with its exact first and second derivatives as feed-forward."""
    import math

    cx, cy, cz = (float(x) for x in center)
    R = np.eye(3) if R is None else np.asarray(R, dtype=float)
    r, w = float(radius), float(omega)

    def traj(t: float):
        a = w * t + phase
        ca, sa = math.cos(a), math.sin(a)
        T = pin.SE3(R, np.array([cx + r * ca, cy, cz + r * sa]))
        vel = np.array([-r * w * sa, 0.0, r * w * ca, 0.0, 0.0, 0.0])
        acc = np.array([-r * w * w * ca, 0.0, -r * w * w * sa, 0.0, 0.0, 0.0])
        return T, vel, acc

    return traj


def stack(constraints, kin: Kinematics, t: float, nv: int):
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
