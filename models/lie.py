"""The one module of small spatial algebra every paper's code uses: skew/cross, SO(3)/SE(3),
quaternions, elementary rotations and the truncated-SVD pseudo-inverse.

Conventions (docs/design.md, [Milioshin]):
  * skew(w) ([Milioshin]'s θ^) is the skew matrix with skew(w) x = w × x, for one 3-vector or a stack
    (..., 3) → (..., 3, 3); cross(a, b) = a × b along the last axis;
  * Log/Exp are the SO(3) logarithm and exponential (Pinocchio's log3/exp3);
  * the SE(3) error of [Milioshin] eq. (3.15)

        e(T1, T2) = [ p2 − p1 ; Log(R1ᵀ R2) ] ∈ R⁶

    (position difference in the world frame, rotation error in the frame of T1);
  * right Jacobian of SO(3) and its inverse, [Milioshin] (A.14):

        J_r(θ)   = I − (1 − cos|θ|)/|θ|² θ^ + (|θ| − sin|θ|)/|θ|³ θ^²
        J_r⁻¹(θ) = I + ½ θ^ + (1/|θ|² − (1 + cos|θ|)/(2|θ| sin|θ|)) θ^²

    so that d/dt Log(R̃) = J_r⁻¹(Log R̃) (R̃ᵀ dR̃/dt)^∨  (3.21);
  * quaternions q = [q0, q1, q2, q3] are scalar first (MuJoCo's order) unless a name says otherwise;
    q ⊗ p is the Hamilton product; quat_to_matrix(q) is the body → world rotation;
  * A = U diag(s) Vᵀ, rank r = #{s_i > max(atol, rtol·s_1)}, A⁺ = V_r diag(1/s_r) U_rᵀ and the
    null space of A is spanned by the last n − r rows of Vᵀ (full SVD).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike


# ------------------------------------------------------------------------------------ skew, cross
def skew(w: np.ndarray | Sequence[float]) -> np.ndarray:
    """Skew matrix S(w) with S(w) @ x == w × x.  ``w``: a 3-vector (list, tuple or array) → (3, 3),
    or an array (..., 3) → (..., 3, 3)."""
    if isinstance(w, np.ndarray):
        if w.ndim > 1:
            S = np.zeros(w.shape[:-1] + (3, 3))
            S[..., 0, 1], S[..., 0, 2] = -w[..., 2], w[..., 1]
            S[..., 1, 0], S[..., 1, 2] = w[..., 2], -w[..., 0]
            S[..., 2, 0], S[..., 2, 1] = -w[..., 1], w[..., 0]
            return S
        w = w.tolist()
    x, y, z = w
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def cross(a: np.ndarray | Sequence[float], b: np.ndarray | Sequence[float]) -> np.ndarray:
    """a × b along the last axis: two 3-vectors (lists, tuples or arrays) → (3,), or arrays (..., 3)
    that broadcast → (..., 3).  About 10× faster than np.cross on single vectors."""
    if getattr(a, "ndim", 1) == 1 and getattr(b, "ndim", 1) == 1:
        a0, a1, a2 = a.tolist() if isinstance(a, np.ndarray) else a
        b0, b1, b2 = b.tolist() if isinstance(b, np.ndarray) else b
        return np.array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])
    A, B = np.asarray(a), np.asarray(b)  # (arrays already: the same objects)
    a0, a1, a2 = A[..., 0], A[..., 1], A[..., 2]
    b0, b1, b2 = B[..., 0], B[..., 1], B[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


# ------------------------------------------------------------------ truncated SVD, pseudo-inverse
class TruncatedSVD(NamedTuple):
    """A = U diag(s) Vt with the numerical rank ``rank`` (see :func:`svd_rank`)."""

    U: np.ndarray
    s: np.ndarray
    Vt: np.ndarray
    rank: int

    def pinv(self) -> np.ndarray:
        """A⁺ = V_r diag(1/s_r) U_rᵀ (singular values below the threshold dropped), shape (n, m)."""
        r = self.rank
        return (self.Vt[:r].T / self.s[:r]) @ self.U[:, :r].T

    def null_basis(self) -> np.ndarray:
        """Orthonormal basis of N(A), shape (n, n − rank); needs ``full_matrices=True``."""
        return self.Vt[self.rank :].T


def svd_rank(
    A: ArrayLike, *, rtol: float = 0.0, atol: float = 0.0, full_matrices: bool = False
) -> TruncatedSVD:
    """SVD of the (m, n) matrix A and its rank r = #{s_i > max(atol, rtol·s_1)} (``atol`` in A's
    units, ``rtol`` relative to the largest singular value).  An empty A has rank 0."""
    A = np.asarray(A, dtype=float)
    m, n = A.shape
    if A.size == 0:
        k = min(m, n)
        U = np.eye(m) if full_matrices else np.zeros((m, k))
        Vt = np.eye(n) if full_matrices else np.zeros((k, n))
        return TruncatedSVD(U, np.zeros(k), Vt, 0)
    U, s, Vt = np.linalg.svd(A, full_matrices=full_matrices)
    thr = max(atol, rtol * s[0])
    return TruncatedSVD(U, s, Vt, int(np.count_nonzero(s > thr)))


def pinv(A: ArrayLike, *, rtol: float = 0.0, atol: float = 0.0) -> np.ndarray:
    """Truncated pseudo-inverse A⁺ (shape (n, m)) dropping s_i ≤ max(atol, rtol·s_1)."""
    return svd_rank(A, rtol=rtol, atol=atol).pinv()


def kkt_solve(H: np.ndarray, A: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) solving the saddle-point system [H Aᵀ; A 0] [x; y] = [g; b] (H n×n, A m×n) by one dense
    LU solve; raises numpy.linalg.LinAlgError when the matrix is singular."""
    n, m = H.shape[0], A.shape[0]
    K = np.zeros((n + m, n + m))
    K[:n, :n] = H
    K[:n, n:] = A.T
    K[n:, :n] = A
    x = np.linalg.solve(K, np.concatenate([g, b]))
    return x[:n], x[n:]


# --------------------------------------------------------------------------------- SO(3), SE(3)
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
    K = skew(theta)
    if t < 1e-6:
        return np.eye(3) - 0.5 * K + K @ K / 6.0
    return np.eye(3) - (1 - np.cos(t)) / t**2 * K + (t - np.sin(t)) / t**3 * K @ K


def jr_inv(theta: np.ndarray) -> np.ndarray:
    """Inverse right Jacobian of SO(3), (A.14)."""
    t = float(np.linalg.norm(theta))
    K = skew(theta)
    if t < 1e-6:
        return np.eye(3) + 0.5 * K + K @ K / 12.0
    return np.eye(3) + 0.5 * K + (1 / t**2 - (1 + np.cos(t)) / (2 * t * np.sin(t))) * K @ K


# ------------------------------------------------------------------------------------ quaternions
def _kernels() -> ModuleType:
    from cmstack.models import _lie_kernels  # numba: imported on first use, compiled once (cache)

    return _lie_kernels


def _rows(x: np.ndarray, k: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1, k))


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a ⊗ b of scalar-first quaternions, shapes (..., 4) (``_lie_kernels``)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    out = np.empty((int(np.prod(a.shape[:-1], dtype=int)), 4))
    _kernels().quat_mul_batch(_rows(a, 4), _rows(b, 4), out)
    return out.reshape(a.shape)


def quat_conj(q: np.ndarray) -> np.ndarray:
    """Conjugate [q0, −q1, −q2, −q3] (the inverse of a unit quaternion), shapes (..., 4)."""
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """R = [T^{IB}] (body → inertial) of a unit quaternion q^{BI}; (58) gives its transpose [T]^{BI}.
    Shapes (..., 4) → (..., 3, 3) (``_lie_kernels``)."""
    q = np.asarray(q, dtype=float)
    qs = _rows(q, 4)
    R = np.empty((qs.shape[0], 3, 3))
    _kernels()._quat_to_R(qs, R)
    return R.reshape(q.shape[:-1] + (3, 3))


def quat_from_matrix(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (scalar first, q0 ≥ 0) of a rotation matrix (Shepperd's method, ``_lie_kernels``)."""
    return _kernels()._quat_from_matrix(np.ascontiguousarray(np.asarray(R, dtype=float)))


def quat_exp(phi: np.ndarray) -> np.ndarray:
    """Quaternion of the rotation vector phi (shape (..., 3))."""
    phi = np.asarray(phi, dtype=float)
    a = np.linalg.norm(phi, axis=-1, keepdims=True)
    half = 0.5 * a
    # sin(a/2)/a, with its series below 1e-4 (error < 1e-17)
    k = np.where(a > 1e-4, np.sin(half) / np.where(a > 1e-4, a, 1.0), 0.5 - a * a / 48.0)
    return np.concatenate([np.cos(half), k * phi], axis=-1)


def quat_log(q: np.ndarray) -> np.ndarray:
    """Rotation vector of a unit quaternion (shortest rotation: q and −q give the same result);
    shapes (..., 4) → (..., 3) (``_lie_kernels``)."""
    q = np.asarray(q, dtype=float)
    out = np.empty((int(np.prod(q.shape[:-1], dtype=int)), 3))
    _kernels().quat_log_batch(_rows(q, 4), out)
    return out.reshape(q.shape[:-1] + (3,))


def rotation_vector(R: np.ndarray) -> np.ndarray:
    """Log of rotation matrices (…,3,3) → rotation vectors (…,3).  θ = atan2(|v|, (tr R − 1)/2) with
    v = ½ (R − Rᵀ)^∨ = sin θ · axis is accurate for θ ≤ π/2; larger angles go through the quaternion
    (``_lie_kernels``)."""
    R = np.asarray(R, dtype=float)
    out = np.empty((int(np.prod(R.shape[:-2], dtype=int)), 3))
    _kernels().rotation_vector_batch(np.ascontiguousarray(R.reshape(-1, 3, 3)), out)
    return out.reshape(R.shape[:-2] + (3,))


# ------------------------------------------------------------------------ elementary rotations
def rot_x(a: float) -> np.ndarray:
    """Rotation by a (rad) about x."""
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def rot_y(a: float) -> np.ndarray:
    """Rotation by a (rad) about y."""
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def rot_z(a: float) -> np.ndarray:
    """Rotation by a (rad) about z."""
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
