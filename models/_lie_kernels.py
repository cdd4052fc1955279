"""The quaternion and rotation maths of ``cmstack.models.lie``, written once, compiled by numba: the
Python API (``lie.quat_mul``, ``quat_log``, ``quat_to_matrix``, ``quat_from_matrix``,
``rotation_vector``) calls these kernels, and so do the compiled chain kernels
(``models/_tensor_kernels.py``).  Quaternions are scalar first, (w, x, y, z)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)


@njit(cache=True)
def _quat_to_R(q: np.ndarray, R: np.ndarray) -> None:
    """R_i of every unit quaternion q_i (scalar first): R = [T^{IB}] (body → inertial)."""
    for i in range(q.shape[0]):
        q0, q1, q2, q3 = q[i, 0], q[i, 1], q[i, 2], q[i, 3]
        R[i, 0, 0] = q0 * q0 + q1 * q1 - q2 * q2 - q3 * q3
        R[i, 0, 1] = 2 * (q1 * q2 - q0 * q3)
        R[i, 0, 2] = 2 * (q1 * q3 + q0 * q2)
        R[i, 1, 0] = 2 * (q1 * q2 + q0 * q3)
        R[i, 1, 1] = q0 * q0 - q1 * q1 + q2 * q2 - q3 * q3
        R[i, 1, 2] = 2 * (q2 * q3 - q0 * q1)
        R[i, 2, 0] = 2 * (q1 * q3 - q0 * q2)
        R[i, 2, 1] = 2 * (q2 * q3 + q0 * q1)
        R[i, 2, 2] = q0 * q0 - q1 * q1 - q2 * q2 + q3 * q3


@njit(cache=True)
def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


@njit(cache=True)
def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(4)
    out[0] = a[0] * b[0] - (a[1] * b[1] + a[2] * b[2] + a[3] * b[3])
    c = _cross(a[1:], b[1:])
    for k in range(3):
        out[1 + k] = a[0] * b[1 + k] + b[0] * a[1 + k] + c[k]
    return out


@njit(cache=True)
def _shepperd(
    r00: float, r01: float, r02: float, r10: float, r11: float, r12: float, r20: float, r21: float, r22: float
) -> tuple[float, float, float, float]:
    """The quaternion (w, x, y, z), w ≥ 0, of the rotation R = [r_ij] by Shepperd's method: the square root
    is taken of the largest of 1 + tr R, 1 + 2R₀₀ − tr R, 1 + 2R₁₁ − tr R, 1 + 2R₂₂ − tr R (the largest of
    tr R, R₀₀, R₁₁, R₂₂ decides), so it is never below 1 and the divisions are well conditioned.  Unit
    to round-off for an orthonormal R (not renormalized)."""
    tr = r00 + r11 + r22
    if tr >= r00 and tr >= r11 and tr >= r22:
        s = 2.0 * math.sqrt(1.0 + tr)
        w = 0.25 * s
        x = (r21 - r12) / s
        y = (r02 - r20) / s
        z = (r10 - r01) / s
    elif r00 >= r11 and r00 >= r22:
        s = 2.0 * math.sqrt(1.0 + r00 - r11 - r22)
        w = (r21 - r12) / s
        x = 0.25 * s
        y = (r01 + r10) / s
        z = (r02 + r20) / s
    elif r11 >= r22:
        s = 2.0 * math.sqrt(1.0 + r11 - r00 - r22)
        w = (r02 - r20) / s
        x = (r01 + r10) / s
        y = 0.25 * s
        z = (r12 + r21) / s
    else:
        s = 2.0 * math.sqrt(1.0 + r22 - r00 - r11)
        w = (r10 - r01) / s
        x = (r02 + r20) / s
        y = (r12 + r21) / s
        z = 0.25 * s
    if w < 0.0:
        return -w, -x, -y, -z
    return w, x, y, z


@njit(cache=True)
def _quat_log3(w: float, x: float, y: float, z: float) -> tuple[float, float, float]:
    """Log of the unit quaternion (w, u): R = exp(θ û) with w = cos(θ/2), u = sin(θ/2) û (w ≥ 0: the
    shortest rotation), so Log R = θ û = 2 atan2(|u|, w) u / |u|;  for |u|/w < 1e-5 the factor
    2 atan2(|u|, w)/|u| = (2/w)(1 − |u|²/(3w²) + O(|u|⁴/w⁴)).  Returns a tuple."""
    nu = math.sqrt(x * x + y * y + z * z)
    if nu > 1e-5 * w:
        f = 2.0 * math.atan2(nu, w) / nu
    else:
        f = (2.0 / w) * (1.0 - nu * nu / (3.0 * w * w))
    return f * x, f * y, f * z


@njit(cache=True)
def _log3(
    r00: float, r01: float, r02: float, r10: float, r11: float, r12: float, r20: float, r21: float, r22: float
) -> tuple[float, float, float]:
    """Log(R) ∈ R³ (a tuple) of the rotation R = [r_ij]: the one SO(3) logarithm of the compiled code,
    ``_quat_log3`` of Shepperd's quaternion (``_shepperd``); the task rows (``models/_task_kernels.py``)
    and the chain kernels (``_rotation_vector``) both call it."""
    w, x, y, z = _shepperd(r00, r01, r02, r10, r11, r12, r20, r21, r22)
    return _quat_log3(w, x, y, z)


@njit(cache=True)
def _quat_log(q: np.ndarray) -> np.ndarray:
    """Log of the unit quaternion q (scalar first), the shortest rotation (``_quat_log3``), as an array."""
    if q[0] < 0:
        a, b, c = _quat_log3(-q[0], -q[1], -q[2], -q[3])
    else:
        a, b, c = _quat_log3(q[0], q[1], q[2], q[3])
    return np.array([a, b, c])


@njit(cache=True)
def _quat_from_matrix(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (scalar first, q0 ≥ 0) of a rotation matrix: Shepperd's (``_shepperd``), renormalized."""
    w, x, y, z = _shepperd(R[0, 0], R[0, 1], R[0, 2], R[1, 0], R[1, 1], R[1, 2], R[2, 0], R[2, 1], R[2, 2])
    q = np.array([w, x, y, z])
    return q / np.sqrt(np.sum(q * q))


@njit(cache=True)
def _rotation_vector(R: np.ndarray) -> np.ndarray:
    """Log of one rotation matrix (``_log3``), as an array."""
    a, b, c = _log3(R[0, 0], R[0, 1], R[0, 2], R[1, 0], R[1, 1], R[1, 2], R[2, 0], R[2, 1], R[2, 2])
    return np.array([a, b, c])


@njit(cache=True)
def quat_mul_batch(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out_i = a_i ⊗ b_i (Hamilton product, scalar first), rows of (m, 4) arrays."""
    for i in range(a.shape[0]):
        out[i] = _quat_mul(a[i], b[i])


@njit(cache=True)
def quat_log_batch(q: np.ndarray, out: np.ndarray) -> None:
    """out_i = the rotation vector of the unit quaternion q_i (shortest rotation)."""
    for i in range(q.shape[0]):
        out[i] = _quat_log(q[i].copy())


@njit(cache=True)
def rotation_vector_batch(R: np.ndarray, out: np.ndarray) -> None:
    """out_i = the rotation vector of R_i (``_rotation_vector``)."""
    for i in range(R.shape[0]):
        out[i] = _rotation_vector(R[i])
