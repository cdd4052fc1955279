"""Compiled (numba) kernels of the tensor chain's RK4 step and constraint projection
(models/tensor_chain.py, [Eslami] §2).

The same equations as the NumPy methods of :class:`~cmstack.models.tensor_chain.TensorChain`, written
as loops over the N bodies so that one call does a whole step without Python overhead:

    ℳ = blockdiag(m_i I₃, sym(R_i I_i R_iᵀ)),  J = [J_v, J_ω] (30)–(31),  γ (28),  ℱ (33),
    [ℳ Jᵀ; J 0] [ν̇; F_J] = [ℱ; γ]  (32, solved through its Schur complement (35): ℳ is block diagonal),  q̇
    = ½ [0; ω] ⊗ q,  classical RK4,
    quaternion renormalisation, then the mass-weighted projection onto φ = 0 and J ν = 0.

The NumPy methods stay the reference: tests/test_tensor_chain.py compares both to round-off.
Spring laws by code: 0 "euler123" (19), 1 "rotvec", 2 "euler123_conservative".

The rotation maths (quaternions, the SO(3) log) comes from ``models/_lie_kernels.py``.  numba's disk
cache is keyed by this file's own stamp only; ``_kernel_cache.depends_on`` drops it when that module is newer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.models import _lie_kernels
from cmstack.models._kernel_cache import depends_on
from cmstack.models._lie_kernels import _cross, _quat_log, _quat_mul, _quat_to_R, _rotation_vector

depends_on(__file__, _lie_kernels)  # numba's cache does not see a change of a callee in another file

LAW_CODES = {"euler123": 0, "rotvec": 1, "euler123_conservative": 2}


#: a chain's constant tables, as ``TensorChain._kernel_args`` packs them: (masses, inertias, joint parent and
#: child arms, stiffness K, gravity, spring-law code, fixed base)
Chain = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool]


@njit(cache=True)
def _set_skew(A: np.ndarray, r0: int, c0: int, s: float, w: np.ndarray) -> None:
    """A[r0:r0+3, c0:c0+3] = s · skew(w)."""
    A[r0, c0 + 1] = -s * w[2]
    A[r0, c0 + 2] = s * w[1]
    A[r0 + 1, c0] = s * w[2]
    A[r0 + 1, c0 + 2] = -s * w[0]
    A[r0 + 2, c0] = -s * w[1]
    A[r0 + 2, c0 + 1] = s * w[0]


@njit(cache=True)
def _arms(R: np.ndarray, jp: np.ndarray, jc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = jp.shape[0]
    sp, sc = np.empty((m, 3)), np.empty((m, 3))
    for j in range(m):
        sp[j] = -(R[j] @ jp[j])
        sc[j] = -(R[j + 1] @ jc[j])
    return sp, sc


@njit(cache=True)
def _joint_moments(R: np.ndarray, K: np.ndarray, law: int) -> np.ndarray:
    m = R.shape[0] - 1
    MJ = np.empty((m, 3))
    for j in range(m):
        Rrel = R[j].T @ R[j + 1]
        if law == 1:
            th = _rotation_vector(Rrel)
            MJ[j] = R[j] @ (K[j] * th)
            continue
        theta = np.arcsin(min(max(Rrel[0, 2], -1.0), 1.0))
        phi = np.arctan2(-Rrel[1, 2], Rrel[2, 2])
        psi = np.arctan2(-Rrel[0, 1], Rrel[0, 0])
        ang = np.array([phi, theta, psi])
        ax = np.empty((3, 3))
        ax[0] = R[j][:, 0]
        ax[1] = np.sin(psi) * R[j + 1][:, 0] + np.cos(psi) * R[j + 1][:, 1]
        ax[2] = R[j + 1][:, 2]
        ka = K[j] * ang
        if law == 2:
            MJ[j] = np.linalg.solve(ax, ka)
        else:
            MJ[j] = ka[0] * ax[0] + ka[1] * ax[1] + ka[2] * ax[2]
    return MJ


@njit(cache=True)
def _jacobian(R: np.ndarray, jp: np.ndarray, jc: np.ndarray, fixed_base: bool) -> np.ndarray:
    n = R.shape[0]
    nc = 3 * (n - 1) + (6 if fixed_base else 0)
    J = np.zeros((nc, 6 * n))
    sp, sc = _arms(R, jp, jc)
    for j in range(n - 1):
        r = 3 * j
        for k in range(3):
            J[r + k, 3 * j + k] = -1.0
            J[r + k, 3 * j + 3 + k] = 1.0
        _set_skew(J, r, 3 * n + 3 * j, -1.0, sp[j])
        _set_skew(J, r, 3 * n + 3 * j + 3, 1.0, sc[j])
    if fixed_base:
        r = 3 * (n - 1)
        for k in range(3):
            J[r + k, k] = 1.0
            J[r + 3 + k, 3 * n + k] = 1.0
    return J


@njit(cache=True)
def dynamics(
    pos: np.ndarray, quat: np.ndarray, nu: np.ndarray, port: np.ndarray, chain: Chain
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ν̇, F_J, ℳ, J, γ, ℱ, M_J) of (32) at one state (TensorChain.dynamics, method "kkt")."""
    masses, inertias, jp, jc, K, gravity, law, fixed_base = chain
    n = masses.shape[0]
    R = np.empty((n, 3, 3))
    _quat_to_R(quat, R)
    MJ = _joint_moments(R, K, law)
    M = np.zeros((6 * n, 6 * n))
    F = np.zeros(6 * n)
    for i in range(n):
        Iw = R[i] @ inertias[i] @ R[i].T
        Iw = 0.5 * (Iw + Iw.T)
        w = nu[3 * n + 3 * i : 3 * n + 3 * i + 3]
        gyro = _cross(w, Iw @ w)
        for a in range(3):
            M[3 * i + a, 3 * i + a] = masses[i]
            for b in range(3):
                M[3 * n + 3 * i + a, 3 * n + 3 * i + b] = Iw[a, b]
            F[3 * i + a] = gravity[a] * masses[i]
            cfmj = 0.0
            if i < n - 1:
                cfmj += MJ[i, a]
            if i > 0:
                cfmj -= MJ[i - 1, a]
            F[3 * n + 3 * i + a] = cfmj - gyro[a]
    F += port
    J = _jacobian(R, jp, jc, fixed_base)
    nc = J.shape[0]
    gam = np.zeros(nc)
    sp, sc = _arms(R, jp, jc)
    for j in range(n - 1):
        w0 = nu[3 * n + 3 * j : 3 * n + 3 * j + 3]
        w1 = nu[3 * n + 3 * j + 3 : 3 * n + 3 * j + 6]
        g = _cross(w1, _cross(w1, sc[j])) - _cross(w0, _cross(w0, sp[j]))
        gam[3 * j : 3 * j + 3] = g
    # (32) through its Schur complement (35), ℳ being block diagonal: ℳ⁻¹ is 1/m_i and the 3×3 inverses
    # of the world inertias; S = J ℳ⁻¹ Jᵀ, F_J = S⁻¹(J ℳ⁻¹ ℱ − γ), ν̇ = ℳ⁻¹(ℱ − Jᵀ F_J) — the solution of
    # the augmented system (the NumPy "kkt" path) to round-off, with a 3(N−1)×3(N−1) solve instead of
    # a (9N−3)×(9N−3) one
    Jt = J.T.copy()
    MiJt = np.empty((6 * n, nc))
    MiF = np.empty(6 * n)
    for i in range(n):
        inv_m = 1.0 / masses[i]
        k = 3 * n + 3 * i
        Iwi = np.linalg.inv(M[k : k + 3, k : k + 3])
        for a in range(3):
            MiF[3 * i + a] = inv_m * F[3 * i + a]
            MiJt[3 * i + a] = inv_m * Jt[3 * i + a]
        MiJt[k : k + 3] = Iwi @ Jt[k : k + 3]
        MiF[k : k + 3] = Iwi @ F[k : k + 3]
    S = J @ MiJt
    FJ = np.linalg.solve(S, J @ MiF - gam)
    nd = MiF - MiJt @ FJ
    return nd, FJ, M, J, gam, F, MJ


@njit(cache=True)
def _derivative(
    quat: np.ndarray, nu: np.ndarray, nd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = quat.shape[0]
    dp = nu[: 3 * n].copy().reshape(n, 3)
    dq = np.empty((n, 4))
    w4 = np.zeros(4)
    for i in range(n):
        w4[1:] = nu[3 * n + 3 * i : 3 * n + 3 * i + 3]
        dq[i] = 0.5 * _quat_mul(w4, quat[i])
    return dp, dq, nd


@njit(cache=True)
def rk4(
    pos: np.ndarray, quat: np.ndarray, nu: np.ndarray, dt: float, port: np.ndarray, chain: Chain
) -> tuple[
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
]:
    """One classical RK4 step with the port held, quaternions renormalised (no projection): the new
    (pos, quat, ν) and the dynamics at the start of the step (TensorChain.step)."""
    nd1, FJ, M, J, gam, F, MJ = dynamics(pos, quat, nu, port, chain)
    p1, q1, v1 = _derivative(quat, nu, nd1)
    h = dt / 2
    nd2 = dynamics(pos + h * p1, quat + h * q1, nu + h * v1, port, chain)[0]
    p2, q2, v2 = _derivative(quat + h * q1, nu + h * v1, nd2)
    nd3 = dynamics(pos + h * p2, quat + h * q2, nu + h * v2, port, chain)[0]
    p3, q3, v3 = _derivative(quat + h * q2, nu + h * v2, nd3)
    nd4 = dynamics(pos + dt * p3, quat + dt * q3, nu + dt * v3, port, chain)[0]
    p4, q4, v4 = _derivative(quat + dt * q3, nu + dt * v3, nd4)
    pn = pos + dt / 6 * (p1 + 2 * p2 + 2 * p3 + p4)
    qn = quat + dt / 6 * (q1 + 2 * q2 + 2 * q3 + q4)
    vn = nu + dt / 6 * (v1 + 2 * v2 + 2 * v3 + v4)
    for i in range(qn.shape[0]):
        qn[i] = qn[i] / np.sqrt(np.sum(qn[i] * qn[i]))
    return pn, qn, vn, nd1, FJ, M, J, gam, F, MJ


@njit(cache=True)
def _violation(
    pos: np.ndarray,
    R: np.ndarray,
    quat: np.ndarray,
    jp: np.ndarray,
    jc: np.ndarray,
    fixed_base: bool,
    p0: np.ndarray,
    q0: np.ndarray,
    R0: np.ndarray,
) -> np.ndarray:
    n = pos.shape[0]
    sp, sc = _arms(R, jp, jc)
    nc = 3 * (n - 1) + (6 if fixed_base else 0)
    phi = np.empty(nc)
    for j in range(n - 1):
        phi[3 * j : 3 * j + 3] = (pos[j + 1] - sc[j]) - (pos[j] - sp[j])
    if fixed_base:
        r = 3 * (n - 1)
        qc = q0 * np.array([1.0, -1.0, -1.0, -1.0])
        dq = _quat_mul(qc, quat[0])
        phi[r : r + 3] = pos[0] - p0
        phi[r + 3 : r + 6] = R0 @ _quat_log(dq)
    return phi


@njit(cache=True)
def _mass_inv_jt(R: np.ndarray, masses: np.ndarray, inertias_inv: np.ndarray, J: np.ndarray) -> np.ndarray:
    """ℳ⁻¹ Jᵀ with ℳ⁻¹ = blockdiag(1/m_i I₃, R_i I_i⁻¹ R_iᵀ) (TensorChain.mass_matrix_inv)."""
    n = masses.shape[0]
    Mi = np.zeros((6 * n, 6 * n))
    for i in range(n):
        Iwi = R[i] @ inertias_inv[i] @ R[i].T
        for a in range(3):
            Mi[3 * i + a, 3 * i + a] = 1.0 / masses[i]
            for b in range(3):
                Mi[3 * n + 3 * i + a, 3 * n + 3 * i + b] = Iwi[a, b]
    return Mi @ J.T


@njit(cache=True)
def project(
    pos: np.ndarray,
    quat: np.ndarray,
    nu: np.ndarray,
    masses: np.ndarray,
    inertias_inv: np.ndarray,
    jp: np.ndarray,
    jc: np.ndarray,
    fixed_base: bool,
    p0: np.ndarray,
    q0: np.ndarray,
    R0: np.ndarray,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """TensorChain.project: mass-weighted Newton projection of the pose onto φ = 0 (at most
    ``max_iter`` steps, until max|φ| ≤ tol), then ν ← ν − ℳ⁻¹Jᵀ S⁻¹ J ν.  Also returns max|φ| of the
    state given (before any correction)."""
    n = masses.shape[0]
    pos, quat, nu = pos.copy(), quat.copy(), nu.copy()
    R = np.empty((n, 3, 3))
    phi0 = -1.0
    for _ in range(max_iter):
        _quat_to_R(quat, R)
        phi = _violation(pos, R, quat, jp, jc, fixed_base, p0, q0, R0)
        if phi0 < 0:
            phi0 = np.max(np.abs(phi))
        if np.max(np.abs(phi)) <= tol:
            break
        J = _jacobian(R, jp, jc, fixed_base)
        MiJt = _mass_inv_jt(R, masses, inertias_inv, J)
        dx = -(MiJt @ np.linalg.solve(J @ MiJt, phi))
        pos = pos + dx[: 3 * n].copy().reshape(n, 3)
        for i in range(n):
            ph = dx[3 * n + 3 * i : 3 * n + 3 * i + 3]
            a = np.sqrt(ph[0] * ph[0] + ph[1] * ph[1] + ph[2] * ph[2])
            half = 0.5 * a
            k = np.sin(half) / a if a > 1e-4 else 0.5 - a * a / 48.0
            e = np.array([np.cos(half), k * ph[0], k * ph[1], k * ph[2]])
            qi = _quat_mul(e, quat[i])
            quat[i] = qi / np.sqrt(np.sum(qi * qi))
    _quat_to_R(quat, R)
    J = _jacobian(R, jp, jc, fixed_base)
    MiJt = _mass_inv_jt(R, masses, inertias_inv, J)
    nu = nu - MiJt @ np.linalg.solve(J @ MiJt, J @ nu)
    return pos, quat, nu, phi0
