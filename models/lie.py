"""SO(3)/SE(3) helpers used by every frame constraint.

Conventions (docs/design.md, thesis seed 002):
  * hat(w) is the skew matrix with hat(w) x = w × x;
  * Log/Exp are the SO(3) logarithm and exponential (Pinocchio's log3/exp3);
  * the SE(3) error of thesis eq. (3.15)

        e(T1, T2) = [ p2 − p1 ; Log(R1ᵀ R2) ] ∈ R⁶

    (position difference in the world frame, rotation error in the frame of T1);
  * right Jacobian of SO(3) and its inverse, thesis (A.14):

        J_r(θ)   = I − (1 − cos|θ|)/|θ|² θ^ + (|θ| − sin|θ|)/|θ|³ θ^²
        J_r⁻¹(θ) = I + ½ θ^ + (1/|θ|² − (1 + cos|θ|)/(2|θ| sin|θ|)) θ^²

    so that d/dt Log(R̃) = J_r⁻¹(Log R̃) (R̃ᵀ dR̃/dt)^∨  (3.21).
"""
from __future__ import annotations

import numpy as np
import pinocchio as pin


def hat(w: np.ndarray) -> np.ndarray:
    """Skew-symmetric matrix of a 3-vector: hat(w) @ x == np.cross(w, x)."""
    x, y, z = w.tolist() if isinstance(w, np.ndarray) else w
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def cross3(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a × b for 3-vectors (about 10× faster than np.cross on single vectors)."""
    a0, a1, a2 = a.tolist()
    b0, b1, b2 = b.tolist()
    return np.array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])


def log3(R: np.ndarray) -> np.ndarray:
    """SO(3) logarithm (rotation vector) of R."""
    return np.asarray(pin.log3(np.asarray(R, dtype=float)))


def exp3(w: np.ndarray) -> np.ndarray:
    """SO(3) exponential of a rotation vector."""
    return np.asarray(pin.exp3(np.asarray(w, dtype=float)))


def se3_error(T1: pin.SE3, T2: pin.SE3) -> np.ndarray:
    """Thesis (3.15): e(T1, T2) = [p2 − p1; Log(R1ᵀ R2)]."""
    e = np.empty(6)
    e[:3] = T2.translation - T1.translation
    e[3:] = log3(T1.rotation.T @ T2.rotation)
    return e


def jr(theta: np.ndarray) -> np.ndarray:
    """Right Jacobian of SO(3), (A.14)."""
    t = float(np.linalg.norm(theta))
    K = hat(theta)
    if t < 1e-6:
        return np.eye(3) - 0.5 * K + K @ K / 6.0
    return np.eye(3) - (1 - np.cos(t)) / t**2 * K + (t - np.sin(t)) / t**3 * K @ K


def jr_inv(theta: np.ndarray) -> np.ndarray:
    """Inverse right Jacobian of SO(3), (A.14)."""
    t = float(np.linalg.norm(theta))
    K = hat(theta)
    if t < 1e-6:
        return np.eye(3) + 0.5 * K + K @ K / 12.0
    return np.eye(3) + 0.5 * K + (1 / t**2 - (1 + np.cos(t)) / (2 * t * np.sin(t))) * K @ K


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF rpy (fixed-axis roll, pitch, yaw): R = Rz(yaw) Ry(pitch) Rx(roll)."""
    return np.asarray(pin.rpy.rpyToMatrix(*[float(a) for a in rpy]))


def matrix_to_quat_wxyz(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of a rotation matrix (MuJoCo's order)."""
    q = pin.Quaternion(np.asarray(R, dtype=float))
    q.normalize()
    return np.array([q.w, q.x, q.y, q.z])
