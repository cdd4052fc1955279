"""Compiled kernel of ``ActuatedJointsPIDC``'s completion of the passive joints (controllers/pidc_adapters.py):
one Newton step on the loops φ(q_a, q_p) = 0 with q_a held, or, once |φ| ≤ tol, the passive rates.

Both need the truncated pseudo-inverse J_p⁺ of the passive columns J_p (m×p) of the loops' Jacobian, which the
NumPy path took from an SVD (``svd_rank(J_p, rtol).pinv()``).  When J_p has full column rank p (the passive
joints determined by the actuated ones, e.g. the series-parallel arm's ζ and α) and the SVD keeps every
singular value, J_p⁺ is the least-squares inverse (J_pᵀ J_p)⁻¹ J_pᵀ, which a Householder QR with column
pivoting gives without forming the normal equations:

    J_p Π = Q R   (R p×p upper triangular, |R₀₀| ≥ |R₁₁| ≥ … the pivoted column norms),
    J_p⁺ y = Π R⁻¹ (Qᵀ y)[:p]

(a planar point closure's out-of-plane row is zero: m > p, Qᵀ y's rows past p are the least-squares residual,
dropped).  Rank test.  The SVD path keeps all p singular values iff σ_p > rtol σ₁.  From the pivoted QR,
σ₁ ≤ ‖J_p‖_F ≤ √p |R₀₀| (|R₀₀| the largest column norm) and, for a triangular factor with the pivoting
property |R_kk|² ≥ Σ_{i=k..j} R_ij², ‖R⁻¹‖₂ ≤ √(4^p + 6p − 1) / (3 |R_{p−1,p−1}|) (Faddeev, Kublanovskaya and
Faddeeva's bound, N. J. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §20.1), so

    σ_p / σ₁ ≥ 3 |R_{p−1,p−1}| / (√(4^p + 6p − 1) √p |R₀₀|) =: ρ

and ρ > rtol guarantees the SVD path would have kept every singular value: the two agree to round-off.  When
ρ ≤ rtol (near a singular configuration, where the SVD may truncate) or anything is not finite, the kernel
returns ``FALLBACK`` and the caller takes the SVD path for that iteration, whose result it defines.

Outputs.  Not converged (some |φ_i| > tol, or not finite): q[pas] −= J_p⁺ φ, returns ``STEPPED``.  Converged
(every |φ_i| ≤ tol, ``max|φ| ≤ tol`` of the NumPy path): G = −J_p⁺ J_a (p×a, the tangent map of the
manifold, dq_p = G dq_a, from J_a dq_a + J_p dq_p = 0) and v[pas] = G v_a, returns ``CONVERGED``.
tests/test_pidc_adapters.py compares both with the SVD path, and the fallback on rank-deficient J_p.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.controllers import kernels
from cmstack.controllers.kernels import ABS, apply_qt, qr_pivot
from cmstack.models._kernel_cache import depends_on

depends_on(__file__, kernels)  # numba's cache does not see a change of a callee in another file

CONVERGED, STEPPED, FALLBACK = 0, 1, 2


@njit(cache=True)
def _qr_full(X: np.ndarray, m: int, p: int, piv: np.ndarray, tau: np.ndarray) -> None:
    """Householder QR with column pivoting of X[:m, :p] (m ≥ p) in place, all p steps (no rank stop: the rank is
    judged afterwards by the bound on R): ``kernels.qr_pivot`` with a threshold no column norm is below."""
    qr_pivot(X, m, p, -1.0, ABS, piv, tau)


@njit(cache=True)
def _lsq_apply(
    X: np.ndarray,
    m: int,
    p: int,
    piv: np.ndarray,
    tau: np.ndarray,
    y: np.ndarray,
    z: np.ndarray,
    out: np.ndarray,
) -> None:
    """out[:p] = J_p⁺ y from the factors of ``_qr_full`` (y is not modified; z is m scratch)."""
    for i in range(m):
        z[i] = y[i]
    apply_qt(X, m, p, tau, z)  # z = Qᵀ y = H_{p−1} … H₀ y
    for j in range(p - 1, -1, -1):  # R x = z[:p], then out[piv] = x
        s = z[j]
        for c in range(j + 1, p):
            s -= X[j, c] * z[c]
        z[j] = s / X[j, j]
    for j in range(p):
        out[piv[j]] = z[j]


def layout(m: int, p: int, na: int) -> tuple[int, int]:
    """Sizes of ``passive_step``'s int table (pas, act, piv scratch) and float scratch (tau, z, x, col)."""
    return 2 * p + na, 2 * p + 2 * m


@njit(cache=True)
def prepare(
    qa: np.ndarray,
    va: np.ndarray,
    q_prev: np.ndarray,
    qa_prev: np.ndarray,
    G: np.ndarray,
    ints: np.ndarray,
    predict: bool,
    q: np.ndarray,
    v: np.ndarray,
) -> bool:
    """The Newton start and the known rates: q = q_prev with q[act] = qa and, when ``predict``, the tangent
    prediction q[pas] += G (qa − qa_prev); v = 0 with v[act] = va.  False (nothing meaningful written) when qa or
    va is not finite."""
    p, na = G.shape[0], G.shape[1]
    for c in range(na):
        if not (math.isfinite(qa[c]) and math.isfinite(va[c])):
            return False
    for i in range(q.shape[0]):
        q[i] = q_prev[i]
    for i in range(v.shape[0]):
        v[i] = 0.0
    for c in range(na):
        a = ints[p + c]
        q[a] = qa[c]
        v[a] = va[c]
    if predict:
        for j in range(p):
            s = 0.0
            for c in range(na):
                s += G[j, c] * (qa[c] - qa_prev[c])
            q[ints[j]] += s
    return True


@njit(cache=True)
def passive_step(
    phi: np.ndarray,
    J: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    va: np.ndarray,
    G: np.ndarray,
    X: np.ndarray,
    ints: np.ndarray,
    prm: np.ndarray,
    work: np.ndarray,
) -> int:
    """One iteration of the completion (module docstring): ``STEPPED`` (q[pas] updated), ``CONVERGED`` (G and
    v[pas] written) or ``FALLBACK`` (nothing written: J_p not safely of full column rank, or not finite).
    G (p×a), ints = [pas (p), act (a), piv scratch (p)], prm = [tol, rtol], X (m×p) and work (``layout``) scratch."""
    m = phi.shape[0]
    p, na = G.shape[0], G.shape[1]
    tol, rtol = prm[0], prm[1]
    pas = ints[:p]
    act = ints[p : p + na]
    piv = ints[p + na : 2 * p + na]
    tau = work[:p]
    z = work[p : p + m]
    x = work[p + m : 2 * p + m]
    col = work[2 * p + m : 2 * p + 2 * m]
    if p == 0 or m < p:
        return FALLBACK
    conv = True
    for i in range(m):
        if not (abs(phi[i]) <= tol):  # a NaN is not converged (max|φ| ≤ tol of the NumPy path)
            conv = False
    for i in range(m):
        for j in range(p):
            X[i, j] = J[i, pas[j]]
            if not math.isfinite(X[i, j]):
                return FALLBACK
    _qr_full(X, m, p, piv, tau)
    r0 = abs(X[0, 0])
    rp = abs(X[p - 1, p - 1])
    bound = 3.0 / (math.sqrt(4.0**p + 6.0 * p - 1.0) * math.sqrt(p))
    if not (rp * bound > rtol * r0):
        return FALLBACK
    if not conv:
        for i in range(m):
            if not math.isfinite(phi[i]):
                return FALLBACK
        _lsq_apply(X, m, p, piv, tau, phi, z, x)
        for j in range(p):
            if not math.isfinite(x[j]):
                return FALLBACK
        for j in range(p):
            q[pas[j]] -= x[j]
        return STEPPED
    for c in range(na):
        for i in range(m):
            col[i] = J[i, act[c]]
        _lsq_apply(X, m, p, piv, tau, col, z, x)
        for j in range(p):
            G[j, c] = -x[j]
    for j in range(p):
        s = 0.0
        for c in range(na):
            s += G[j, c] * va[c]
        v[pas[j]] = s
    return CONVERGED
