"""The quaternion and rotation maths of ``cmstack.models.lie``, written once, compiled by numba: the
Python API (``lie.quat_mul``, ``quat_log``, ``quat_to_matrix``, ``quat_from_matrix``,
``rotation_vector``) calls these kernels, and so do the compiled chain kernels
(``models/_tensor_kernels.py``).  Quaternions are scalar first, (w, x, y, z)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _quat_to_R(q, R):
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
def _cross(a, b):
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


@njit(cache=True)
def _quat_mul(a, b):
    out = np.empty(4)
    out[0] = a[0] * b[0] - (a[1] * b[1] + a[2] * b[2] + a[3] * b[3])
    c = _cross(a[1:], b[1:])
    for k in range(3):
        out[1 + k] = a[0] * b[1 + k] + b[0] * a[1 + k] + c[k]
    return out


@njit(cache=True)
def _quat_log(q):
    if q[0] < 0:
        q = -q
    n = np.sqrt(q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    ang = 2 * np.arctan2(n, q[0])
    k = ang / n if n > 1e-12 else 2.0 / max(q[0], 1e-300)
    return k * q[1:]


@njit(cache=True)
def _quat_from_matrix(R):
    """Unit quaternion (scalar first, q0 ≥ 0) of a rotation matrix, Shepperd's method."""
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    cands = np.array([tr, R[0, 0], R[1, 1], R[2, 2]])
    k = int(np.argmax(cands))
    if k == 0:
        r = np.sqrt(1.0 + tr) * 2
        q = np.array([0.25 * r, (R[2, 1] - R[1, 2]) / r, (R[0, 2] - R[2, 0]) / r, (R[1, 0] - R[0, 1]) / r])
    elif k == 1:
        r = np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2]) * 2
        q = np.array([(R[2, 1] - R[1, 2]) / r, 0.25 * r, (R[0, 1] + R[1, 0]) / r, (R[0, 2] + R[2, 0]) / r])
    elif k == 2:
        r = np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2]) * 2
        q = np.array([(R[0, 2] - R[2, 0]) / r, (R[0, 1] + R[1, 0]) / r, 0.25 * r, (R[1, 2] + R[2, 1]) / r])
    else:
        r = np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1]) * 2
        q = np.array([(R[1, 0] - R[0, 1]) / r, (R[0, 2] + R[2, 0]) / r, (R[1, 2] + R[2, 1]) / r, 0.25 * r])
    q = q / np.sqrt(np.sum(q * q))
    return q if q[0] >= 0 else -q


@njit(cache=True)
def _rotation_vector(R):
    """Log of one rotation matrix: θ = atan2(|v|, (tr R − 1)/2) with v = ½ (R − Rᵀ)^∨ = sin θ · axis,
    accurate for θ ≤ π/2; larger angles go through the quaternion."""
    v = 0.5 * np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    c = 0.5 * (R[0, 0] + R[1, 1] + R[2, 2] - 1.0)
    if c < 0.0:
        return _quat_log(_quat_from_matrix(R))
    s = np.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
    th = np.arctan2(s, c)
    k = th / s if s > 1e-8 else 1.0 + th * th / 6.0
    return k * v


@njit(cache=True)
def quat_mul_batch(a, b, out):
    """out_i = a_i ⊗ b_i (Hamilton product, scalar first), rows of (m, 4) arrays."""
    for i in range(a.shape[0]):
        out[i] = _quat_mul(a[i], b[i])


@njit(cache=True)
def quat_log_batch(q, out):
    """out_i = the rotation vector of the unit quaternion q_i (shortest rotation)."""
    for i in range(q.shape[0]):
        out[i] = _quat_log(q[i].copy())


@njit(cache=True)
def rotation_vector_batch(R, out):
    """out_i = the rotation vector of R_i (``_rotation_vector``)."""
    for i in range(R.shape[0]):
        out[i] = _rotation_vector(R[i])
