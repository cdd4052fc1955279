"""Compiled per-step kernels of the control laws (issue 12: control at the kernel floor).

Each kernel fuses the small-array algebra of one law's control step — the part that, written as NumPy
calls on 3- to 30-vectors, costs 1–3 µs of interpreter and dispatch overhead per operation — into one
``numba.njit(cache=True)`` function fed by arrays the models compute (Pinocchio stays in charge of the
kinematics and dynamics).  The kernels allocate nothing they return: the caller passes preallocated
buffers.  Every kernel's docstring derives the equation it evaluates; tests/test_kernels.py compares each
one with the NumPy formulation it replaced (kept in the controllers as the reference path) on the states of
closed-loop runs, to 1e-9 relative.

The compiled code is cached next to this file (``__pycache__``), so only the first import after an edit
compiles (a few seconds); later processes load the machine code.  Compiling them all at once (one step of
each controller as the scenarios build it) is the application tier's job: ``python -m cmstack.warmup``
(cmstack/warmup.py; this library module never imports a scenario).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.models import _lie_kernels
from cmstack.models._kernel_cache import depends_on
from cmstack.models._lie_kernels import _quat_to_R

depends_on(__file__, _lie_kernels)  # numba's cache does not see a change of a callee in another file


# ------------------------------------------------------------------------------------------ small helpers
@njit(cache=True)
def _cross3(a0: float, a1: float, a2: float, b0: float, b1: float, b2: float) -> tuple[float, float, float]:
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@njit(cache=True)
def cholesky_inplace(S: np.ndarray, n: int) -> bool:
    """Lower Cholesky factor L (S = L Lᵀ) of the leading n×n block of S, written into its lower triangle.
    Returns False (S untouched beyond the failing column) when a pivot is not positive, as LAPACK dpotrf."""
    for j in range(n):
        d = S[j, j]
        for k in range(j):
            d -= S[j, k] * S[j, k]
        if not d > 0.0:
            return False
        d = math.sqrt(d)
        S[j, j] = d
        for i in range(j + 1, n):
            x = S[i, j]
            for k in range(j):
                x -= S[i, k] * S[j, k]
            S[i, j] = x / d
    return True


@njit(cache=True)
def cholesky_solve_inplace(L: np.ndarray, n: int, b: np.ndarray) -> None:
    """b ← S⁻¹ b with S = L Lᵀ (``cholesky_inplace``): forward substitution L y = b, back Lᵀ x = y."""
    for i in range(n):
        x = b[i]
        for k in range(i):
            x -= L[i, k] * b[k]
        b[i] = x / L[i, i]
    for i in range(n - 1, -1, -1):
        x = b[i]
        for k in range(i + 1, n):
            x -= L[k, i] * b[k]
        b[i] = x / L[i, i]


# ------------------------------------------------------------------------------------------ truncated pseudo-inverses
# The truncated Moore–Penrose inverse of a small matrix X (p×s) without an SVD: a complete orthogonal
# decomposition (COD) from two Householder QR factorizations, O(p s min(p, s)) flops, no iteration:
#
#     X Π = Q [R₁₁ R₁₂; 0 R₂₂]   (column pivoting; stop when the largest remaining column norm ρ is at or below
#                                 the threshold: rank r, R₂₂ dropped, ‖R₂₂‖₂ ≤ √(s−r) ρ)
#     T = [R₁₁ R₁₂] (r×s),  Tᵀ = Z [U; 0]   (U r×r upper triangular, nonsingular)
#     X ≈ Q_r T Πᵀ = Q_r Uᵀ Z_rᵀ Πᵀ,   X⁺ = Π Z_r U⁻ᵀ Q_rᵀ
#
# (X X⁺ = Q_r Q_rᵀ and X⁺ X = Π Z_r Z_rᵀ Πᵀ are symmetric projectors: the four Penrose conditions hold).  Range
# and left null space of X: Q_r and Q[:, r:].  The rank test reads pivoted column norms instead of singular
# values (σ₁/√s ≤ |R₀₀| ≤ σ₁); the two agree whenever no singular value lies near the threshold.
# numpy integers, not Python ints: numba types a global Python int as a literal, so a kernel called with
# each mode compiled once per mode (cod_factor and qr_pivot three times each, ~5 s of a cold warm-up)
ABS, REL, REL1 = np.int64(0), np.int64(1), np.int64(2)


@njit(cache=True)
def qr_pivot(
    X: np.ndarray, p: int, s: int, tol: float, mode: int | np.integer, piv: np.ndarray, tau: np.ndarray
) -> int:
    """Householder QR with column pivoting of X[:p, :s] in place (LAPACK's layout: R on and above the diagonal,
    reflector j's vector below X[j, j] with a unit first entry implied, its factor in tau[j]; H_j = I − τ v vᵀ),
    stopped at the first step whose largest remaining column norm is ≤ the threshold: tol (mode ``ABS``),
    tol·|R₀₀| (``REL``) or tol·max(1, |R₀₀|) (``REL1``), |R₀₀| the largest column norm.  piv[:s] receives the
    column order (X Π = Q R with Π's column j = e_piv[j]).  Returns the rank r."""
    for c in range(s):
        piv[c] = c
    r00 = 0.0
    for j in range(min(p, s)):
        best, bn = j, -1.0
        for c in range(j, s):
            x = 0.0
            for i in range(j, p):
                x += X[i, c] * X[i, c]
            if x > bn:
                bn, best = x, c
        nrm = math.sqrt(bn)
        big = nrm if j == 0 else r00
        thr = tol if mode == ABS else (tol * big if mode == REL else tol * max(1.0, big))
        if not nrm > thr:
            return j
        if best != j:
            for i in range(p):
                X[i, j], X[i, best] = X[i, best], X[i, j]
            piv[j], piv[best] = piv[best], piv[j]
        x0 = X[j, j]
        tail = 0.0
        for i in range(j + 1, p):
            tail += X[i, j] * X[i, j]
        if tail == 0.0:  # nothing below the diagonal: H_j = I
            tau[j] = 0.0
            if j == 0:
                r00 = abs(x0)
            continue
        _householder_column(X, j, p, s, nrm, tau)
        if j == 0:
            r00 = nrm
    return min(p, s)


@njit(cache=True, inline="always")
def _householder_column(X: np.ndarray, j: int, p: int, s: int, nrm: float, tau: np.ndarray) -> None:
    """Step j of a Householder QR of X[:p, :s] in place: the reflector H_j = I − τ_j v vᵀ that maps X[j:p, j]
    (norm ``nrm``, not zero below the diagonal) to β e₁, β = −sign(x₀) nrm; X[j, j] = β, v below it (its unit
    first entry implied), τ_j = (β − x₀)/β into tau[j]; then H_j applied to the columns j+1 … s−1."""
    x0 = X[j, j]
    beta = -nrm if x0 >= 0.0 else nrm
    tau[j] = (beta - x0) / beta
    f = 1.0 / (x0 - beta)
    for i in range(j + 1, p):
        X[i, j] *= f
    X[j, j] = beta
    for c in range(j + 1, s):
        w = X[j, c]
        for i in range(j + 1, p):
            w += X[i, j] * X[i, c]
        w *= tau[j]
        X[j, c] -= w
        for i in range(j + 1, p):
            X[i, c] -= w * X[i, j]


@njit(cache=True, inline="always")
def _reflect_all(X: np.ndarray, p: int, k: int, tau: np.ndarray, y: np.ndarray, step: int) -> None:
    """y ← H_j y for the first k reflectors of ``qr_pivot`` in X, j = 0 … k−1 (step 1) or k−1 … 0 (step −1):
    H_j y = y − τ_j u_j (u_jᵀ y), u_j = [0…0, 1, X[j+1:p, j]]; H_j = H_jᵀ.  (Inlined whole into apply_q and
    apply_qt: a reflector step inlined inside their loops made PIDC's Delta step 19.8 → 26.7 µs.)"""
    j = 0 if step > 0 else k - 1
    for _ in range(k):
        if tau[j] != 0.0:
            w = y[j]
            for i in range(j + 1, p):
                w += X[i, j] * y[i]
            w *= tau[j]
            y[j] -= w
            for i in range(j + 1, p):
                y[i] -= w * X[i, j]
        j += step


@njit(cache=True)
def apply_qt(X: np.ndarray, p: int, k: int, tau: np.ndarray, y: np.ndarray) -> None:
    """y ← Qᵀ y = H_{k−1} ⋯ H₀ y for the first k reflectors stored in X (``qr_pivot``), y of length p."""
    _reflect_all(X, p, k, tau, y, 1)


@njit(cache=True)
def apply_q(X: np.ndarray, p: int, k: int, tau: np.ndarray, y: np.ndarray) -> None:
    """y ← Q y = H₀ ⋯ H_{k−1} y (the reflectors of ``qr_pivot``), y of length p."""
    _reflect_all(X, p, k, tau, y, -1)


@njit(cache=True)
def _unpivoted(Zt: np.ndarray, s: int, r: int, ztau: np.ndarray) -> None:
    """Householder QR of Zt[:s, :r] without pivoting (the second factor of the COD)."""
    for j in range(r):
        x0 = Zt[j, j]
        tail = 0.0
        for i in range(j + 1, s):
            tail += Zt[i, j] * Zt[i, j]
        if tail == 0.0:
            ztau[j] = 0.0
            continue
        _householder_column(Zt, j, s, r, math.sqrt(x0 * x0 + tail), ztau)


@njit(cache=True)
def cod_factor(
    X: np.ndarray,
    p: int,
    s: int,
    tol: float,
    mode: int | np.integer,
    piv: np.ndarray,
    tau: np.ndarray,
    Zt: np.ndarray,
    ztau: np.ndarray,
) -> int:
    """The complete orthogonal decomposition of X[:p, :s]: pivoted QR in X (rank r), then the unpivoted QR of
    Tᵀ = [R₁₁ R₁₂]ᵀ (s×r) in Zt (U on and above its diagonal), so X ≈ Q_r Uᵀ Z_rᵀ Πᵀ.  Returns r."""
    r = qr_pivot(X, p, s, tol, mode, piv, tau)
    for i in range(s):
        for j in range(r):
            Zt[i, j] = X[j, i] if i >= j else 0.0
    _unpivoted(Zt, s, r, ztau)
    return r


@njit(cache=True)
def cod_pinv_apply(
    X: np.ndarray,
    p: int,
    s: int,
    r: int,
    piv: np.ndarray,
    tau: np.ndarray,
    Zt: np.ndarray,
    ztau: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    out: np.ndarray,
) -> None:
    """out ← X⁺ y = Π Z_r U⁻ᵀ Q_rᵀ y from ``cod_factor``'s result (y of length p, out of length s; w scratch
    of length max(p, s); y is left unchanged)."""
    for i in range(p):
        w[i] = y[i]
    apply_qt(X, p, r, tau, w)
    cod_pinv_from_qty(Zt, s, r, ztau, piv, w, out)


@njit(cache=True, inline="always")
def cod_pinv_from_qty(
    Zt: np.ndarray, s: int, r: int, ztau: np.ndarray, piv: np.ndarray, w: np.ndarray, out: np.ndarray
) -> None:
    """out ← Π Z_r U⁻ᵀ w[:r] (out of length s), the last steps of X⁺ y = Π Z_r U⁻ᵀ Q_rᵀ y when w[:r] holds
    Q_rᵀ y already (``cod_factor``'s Zt, ztau, piv; w of length s, overwritten)."""
    for i in range(r):  # Uᵀ c = (Q_rᵀ y)[:r]: forward substitution (U upper)
        x = w[i]
        for k in range(i):
            x -= Zt[k, i] * w[k]
        w[i] = x / Zt[i, i]
    for i in range(r, s):
        w[i] = 0.0
    apply_q(Zt, s, r, ztau, w)
    for i in range(s):
        out[piv[i]] = w[i]


def passive_work(m: int, q: int) -> tuple[int, int]:
    """Sizes (floats, ints) of ``passive_factor``'s work arrays for m loop rows and q passive joints."""
    L = max(m, q) + 1
    return 2 * L * L + 5 * L, 2 * L


@njit(cache=True, inline="always")
def passive_factor(
    Jc: np.ndarray,
    p: np.ndarray,
    tol: float,
    X: np.ndarray,
    Z: np.ndarray,
    piv: np.ndarray,
    tq: np.ndarray,
    tz: np.ndarray,
) -> int:
    """G = S_p J_cᵀ (q×m; J_c the loops' rows, m×n; p the q passive joints' indices) into X and its complete
    orthogonal decomposition (``cod_factor``, rank test σ > tol·max(1, σ₁) read on the pivoted column norms, mode
    ``REL1``): X, Z (≥ (max(m, q) + 1) square), piv (≥ 2 (max(m, q) + 1)), tq, tz (≥ max(m, q) + 1).  Returns the
    rank r.  ``passive_map`` and the compiled UK step (``controllers/_uk_kernels.py: passive_level``) start here."""
    m = Jc.shape[0]
    q = p.shape[0]
    for i in range(q):
        for j in range(m):
            X[i, j] = Jc[j, p[i]]
    return cod_factor(X, q, m, tol, REL1, piv, tq, Z, tz)


@njit(cache=True, inline="always")
def passive_null(X: np.ndarray, q: int, r: int, tq: np.ndarray, c: int, e: np.ndarray) -> None:
    """e[:q] ← column c ≥ r of Q of ``passive_factor``'s G: a basis vector of U_⊥, the left null space of G."""
    for i in range(q):
        e[i] = 0.0
    e[c] = 1.0
    apply_q(X, q, r, tq, e)


@njit(cache=True, inline="always")
def passive_torque(
    Jc: np.ndarray,
    p: np.ndarray,
    X: np.ndarray,
    Z: np.ndarray,
    r: int,
    piv: np.ndarray,
    tq: np.ndarray,
    tz: np.ndarray,
    y: np.ndarray,
    yp: np.ndarray,
    w: np.ndarray,
    lam: np.ndarray,
    tau: np.ndarray,
) -> None:
    """τ = T y = y − J_cᵀ λ with λ = G⁺ S_p y (the loop reaction; ``passive_map``'s T applied to one vector, without
    forming G⁺ or T), then τ_p = 0 exactly (it is (I − G G⁺) S_p y, zero to round-off when S_p y ∈ range(G)).
    From ``passive_factor``'s result; yp, w: scratch (≥ max(m, q) + 1); lam (m) out."""
    m, n = Jc.shape
    q = p.shape[0]
    for i in range(q):
        yp[i] = y[p[i]]
    cod_pinv_apply(X, q, m, r, piv, tq, Z, tz, yp, w, lam)
    for i in range(n):
        x = y[i]
        for a in range(m):
            x -= Jc[a, i] * lam[a]
        tau[i] = x
    for i in range(q):
        tau[p[i]] = 0.0


@njit(cache=True)
def passive_map(Jc: np.ndarray, p: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The torque map of UK with passive joints (``UdwadiaKalabaController._passive_rows``) from the COD of
    G = S_p J_cᵀ (np×m; J_c the loops' rows, m×n; p the passive joints' indices; ``passive_factor``):

        G⁺ = Π Z_r U⁻ᵀ Q_rᵀ,   T = I − J_cᵀ G⁺ S_p,   U_⊥ = Q[:, r:]  (the left null space of G)

    Returns (T (n×n), G⁺ (m×np), U_⊥ (np×(np−r))).  U_⊥ is another orthonormal basis of the space the SVD's
    last left singular vectors span: its rows U_⊥ᵀ S_p M v̇ = −U_⊥ᵀ S_p (h + D v) are the same constraint.
    (``passive_torque`` applies T to one vector without forming it.)"""
    m, n = Jc.shape
    q = p.shape[0]
    L = max(m, q) + 1
    X = np.zeros((L, L))
    Z = np.zeros((L, L))
    piv = np.empty(2 * L, np.int64)
    tq, tz, w, e, col = np.zeros(L), np.zeros(L), np.zeros(L), np.zeros(L), np.zeros(L)
    r = passive_factor(Jc, p, tol, X, Z, piv, tq, tz)
    Gp = np.empty((m, q))
    for j in range(q):
        for i in range(q):
            e[i] = 0.0
        e[j] = 1.0
        cod_pinv_apply(X, q, m, r, piv, tq, Z, tz, e, w, col)
        for i in range(m):
            Gp[i, j] = col[i]
    Up = np.empty((q, q - r))
    for c in range(r, q):
        passive_null(X, q, r, tq, c, e)
        for i in range(q):
            Up[i, c - r] = e[i]
    T = np.zeros((n, n))
    for i in range(n):
        T[i, i] = 1.0
    for j in range(q):
        c = p[j]
        for i in range(n):
            x = 0.0
            for a in range(m):
                x += Jc[a, i] * Gp[a, j]
            T[i, c] -= x
    return T, Gp, Up


@njit(cache=True, inline="always")
def vanishing_rows(E: np.ndarray, f: np.ndarray, sizes: np.ndarray, tol: float, keep: np.ndarray) -> int:
    """keep[i] ← False for the rows of E v̇ = f that vanish within their level (consecutive blocks of ``sizes``
    rows): ‖E_i‖ ≤ tol·max(1, max_j ‖E_j‖) and |f_i| ≤ tol·max(1, max_j |f_j|), j over the same level; else True.
    Returns the number of rows dropped (``UdwadiaKalabaController._without_empty_rows``)."""
    n = E.shape[1]
    i0 = 0
    dropped = 0
    for L in range(sizes.shape[0]):
        i1 = i0 + sizes[L]
        big, fbig = 0.0, 0.0
        for i in range(i0, i1):
            x = 0.0
            for c in range(n):
                x += E[i, c] * E[i, c]
            keep[i] = False
            big = max(big, x)
            fbig = max(fbig, abs(f[i]))
        thr = tol * max(1.0, math.sqrt(big))
        fthr = tol * max(1.0, fbig)
        for i in range(i0, i1):
            x = 0.0
            for c in range(n):
                x += E[i, c] * E[i, c]
            keep[i] = x > thr * thr or abs(f[i]) > fthr
            if not keep[i]:
                dropped += 1
        i0 = i1
    return dropped


# ------------------------------------------------------------------------------------------ DAC law (III)
@njit(cache=True)
def _obstacle_wish(
    R: np.ndarray,
    pos: np.ndarray,
    nu: np.ndarray,
    n: int,
    points: np.ndarray,
    centers: np.ndarray,
    radii: np.ndarray,
    gain: float,
    d0: float,
    dc: float,
    g: np.ndarray,
    gdot: np.ndarray,
) -> tuple[float, float]:
    """g = −∇U_o and ġ into g, gdot (zeroed here); returns (U_o, d_min): law (III)'s obstacle wish, written once
    (``controllers.dac.null_space_wish`` calls it; its NumPy oracle is tests/_dac_reference.py).

    For body i < N, body-fixed point r_k and sphere (c_o, r_o): x = p_i + R_i r_k, δ = x − c_o, ρ = ‖δ‖,
    d = ρ − r_o.  The potential φ(ρ) — Khatib's FIRAS form ½η(1/d − 1/d₀)² for d_c ≤ d < d₀, continued inside
    the core ρ < ρ_c = r_o + d_c by a + bρ² + cρ⁴ with φ, φ', φ'' continuous at ρ_c (p = φ'(ρ_c) < 0,
    k = φ''(ρ_c) > 0: c = (kρ_c − p)/(8ρ_c³) > 0, b = (3p/ρ_c − k)/4 < 0, a = φ(ρ_c) − bρ_c² − cρ_c⁴, so
    φ' = 2ρ(b + 2cρ²) < 0 inside and φ'(0) = 0: one C² function, repulsive everywhere) — has ∇φ = α δ and
    ∇²φ = α I + β δδᵀ with
        d₀ ≤ d:        φ = α = β = 0
        d_c ≤ d < d₀:  a = 1/d − 1/d₀,  φ = ½ η a²,  α = φ'/ρ = −η a/(d² ρ),
                       β = (φ'' − α)/ρ²,  φ'' = η (1/d⁴ + 2a/d³)
        d < d_c:       φ = a_q + b_q ρ² + c_q ρ⁴,  α = 2b_q + 4c_q ρ²,  β = 8c_q
    (a_q, b_q, c_q matching φ, φ', φ'' at ρ_c = r_o + d_c).  With f = Σ_o α δ (= ∂U/∂x at the point),
    ẋ = v_i + ω_i × R_i r_k and ḟ = Σ_o (α ẋ + β δ (δ·ẋ)):
        g_{v,i} = −Σ_k f,   g_{ω,i} = −Σ_k R_i r_k × f,
        ġ_{v,i} = −Σ_k ḟ,   ġ_{ω,i} = −Σ_k ((ω_i × R_i r_k) × f + R_i r_k × ḟ);   body N: zero.
    Every d is computed first: if none is below d₀ the wish is zero (as the NumPy path)."""
    g[:] = 0.0
    gdot[:] = 0.0
    no = radii.shape[0]
    nk = points.shape[0]
    if no == 0:
        return 0.0, np.inf
    dmin = np.inf
    for i in range(n - 1):
        for k in range(nk):
            rx = R[i, 0, 0] * points[k, 0] + R[i, 0, 1] * points[k, 1] + R[i, 0, 2] * points[k, 2]
            ry = R[i, 1, 0] * points[k, 0] + R[i, 1, 1] * points[k, 1] + R[i, 1, 2] * points[k, 2]
            rz = R[i, 2, 0] * points[k, 0] + R[i, 2, 1] * points[k, 1] + R[i, 2, 2] * points[k, 2]
            for o in range(no):
                dx = pos[i, 0] + rx - centers[o, 0]
                dy = pos[i, 1] + ry - centers[o, 1]
                dz = pos[i, 2] + rz - centers[o, 2]
                d = math.sqrt(dx * dx + dy * dy + dz * dz) - radii[o]
                if d < dmin:
                    dmin = d
    if dmin >= d0:
        return 0.0, dmin
    n3 = 3 * n
    U = 0.0
    for i in range(n - 1):
        wx, wy, wz = nu[n3 + 3 * i], nu[n3 + 3 * i + 1], nu[n3 + 3 * i + 2]
        vx, vy, vz = nu[3 * i], nu[3 * i + 1], nu[3 * i + 2]
        for k in range(nk):
            rx = R[i, 0, 0] * points[k, 0] + R[i, 0, 1] * points[k, 1] + R[i, 0, 2] * points[k, 2]
            ry = R[i, 1, 0] * points[k, 0] + R[i, 1, 1] * points[k, 1] + R[i, 1, 2] * points[k, 2]
            rz = R[i, 2, 0] * points[k, 0] + R[i, 2, 1] * points[k, 1] + R[i, 2, 2] * points[k, 2]
            qx, qy, qz = _cross3(wx, wy, wz, rx, ry, rz)  # ω_i × R_i r_k
            xdx, xdy, xdz = vx + qx, vy + qy, vz + qz  # ẋ
            fx = fy = fz = 0.0
            fdx = fdy = fdz = 0.0
            for o in range(no):
                dx = pos[i, 0] + rx - centers[o, 0]
                dy = pos[i, 1] + ry - centers[o, 1]
                dz = pos[i, 2] + rz - centers[o, 2]
                rho = math.sqrt(dx * dx + dy * dy + dz * dz)
                d = rho - radii[o]
                if d >= d0:
                    continue
                if d >= dc:
                    a = 1.0 / d - 1.0 / d0
                    du = -gain * a / (d * d)
                    alpha = du / rho
                    beta = (gain * (1.0 / d**4 + 2.0 * a / d**3) - alpha) / (rho * rho)
                    phi = 0.5 * gain * a * a
                else:
                    rc = radii[o] + dc
                    ac = 1.0 / dc - 1.0 / d0
                    pc = -gain * ac / dc**2
                    kc = gain * (1.0 / dc**4 + 2.0 * ac / dc**3)
                    cq = (kc * rc - pc) / (8.0 * rc**3)
                    bq = (3.0 * pc / rc - kc) / 4.0
                    aq = 0.5 * gain * ac * ac - bq * rc**2 - cq * rc**4
                    r2 = rho * rho
                    phi = aq + bq * r2 + cq * r2 * r2
                    alpha = 2.0 * bq + 4.0 * cq * r2
                    beta = 8.0 * cq
                U += phi
                fx += alpha * dx
                fy += alpha * dy
                fz += alpha * dz
                bd = beta * (dx * xdx + dy * xdy + dz * xdz)
                fdx += alpha * xdx + bd * dx
                fdy += alpha * xdy + bd * dy
                fdz += alpha * xdz + bd * dz
            g[3 * i] -= fx
            g[3 * i + 1] -= fy
            g[3 * i + 2] -= fz
            gdot[3 * i] -= fdx
            gdot[3 * i + 1] -= fdy
            gdot[3 * i + 2] -= fdz
            mx, my, mz = _cross3(rx, ry, rz, fx, fy, fz)
            g[n3 + 3 * i] -= mx
            g[n3 + 3 * i + 1] -= my
            g[n3 + 3 * i + 2] -= mz
            ax, ay, az = _cross3(qx, qy, qz, fx, fy, fz)
            bx, by, bz = _cross3(rx, ry, rz, fdx, fdy, fdz)
            gdot[n3 + 3 * i] -= ax + bx
            gdot[n3 + 3 * i + 1] -= ay + by
            gdot[n3 + 3 * i + 2] -= az + bz
    return U, dmin


@njit(cache=True, inline="always")
def _attitude_error(
    a0: float, a1: float, a2: float, a3: float, b0: float, b1: float, b2: float, b3: float
) -> tuple[float, float, float, float]:
    """[Eslami] (44) in world axes, the one definition (laws (II) and (III), compiled and Python alike):
    q_e = q_d⁻¹ ⊗ q for q_d = (a₀, u), q = (b₀, b) (unit, scalar first), its sign chosen so that its scalar
    part η ≥ 0, vector part ε; e_att = R_d ε, evaluated as ε + 2a₀ (u × ε) + 2 u × (u × ε).
    Returns (η, e_x, e_y, e_z)."""
    e0 = a0 * b0 + a1 * b1 + a2 * b2 + a3 * b3
    e1 = a0 * b1 - a1 * b0 - a2 * b3 + a3 * b2
    e2 = a0 * b2 + a1 * b3 - a2 * b0 - a3 * b1
    e3 = a0 * b3 - a1 * b2 + a2 * b1 - a3 * b0
    if e0 < 0:
        e0, e1, e2, e3 = -e0, -e1, -e2, -e3
    c1, c2, c3 = a2 * e3 - a3 * e2, a3 * e1 - a1 * e3, a1 * e2 - a2 * e1
    x = e1 + 2.0 * (a0 * c1 + a2 * c3 - a3 * c2)
    y = e2 + 2.0 * (a0 * c2 + a3 * c1 - a1 * c3)
    z = e3 + 2.0 * (a0 * c3 + a1 * c2 - a2 * c1)
    return e0, x, y, z


@njit(cache=True, inline="always")
def _attitude_error_rate(
    x: float,
    y: float,
    z: float,
    eta: float,
    w0: float,
    w1: float,
    w2: float,
    wd0: float,
    wd1: float,
    wd2: float,
) -> tuple[float, float, float]:
    """D e_att = ω_d × e_att + ½ (η (ω − ω_d) − e_att × (ω − ω_d)) for e_att = (x, y, z), η of (44) and the
    angular velocities ω, ω_d (world axes).  Returns its three components."""
    d0 = w0 - wd0
    d1 = w1 - wd1
    d2 = w2 - wd2
    de3 = wd1 * z - wd2 * y + 0.5 * (eta * d0 - (y * d2 - z * d1))
    de4 = wd2 * x - wd0 * z + 0.5 * (eta * d1 - (z * d0 - x * d2))
    de5 = wd0 * y - wd1 * x + 0.5 * (eta * d2 - (x * d1 - y * d0))
    return de3, de4, de5


@njit(cache=True)
def attitude_error_batch(q: np.ndarray, q_d: np.ndarray, e: np.ndarray, eta: np.ndarray) -> None:
    """``_attitude_error`` row by row: q, q_d (k, 4) → e (k, 3), η (k)."""
    for i in range(q.shape[0]):
        eta[i], e[i, 0], e[i, 1], e[i, 2] = _attitude_error(
            q_d[i, 0], q_d[i, 1], q_d[i, 2], q_d[i, 3], q[i, 0], q[i, 1], q[i, 2], q[i, 3]
        )


@njit(cache=True)
def attitude_error_rate_batch(
    e: np.ndarray, eta: np.ndarray, w: np.ndarray, w_d: np.ndarray, out: np.ndarray
) -> None:
    """``_attitude_error_rate`` row by row: e, w, w_d (k, 3), η (k) → out (k, 3)."""
    for i in range(e.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = _attitude_error_rate(
            e[i, 0], e[i, 1], e[i, 2], eta[i], w[i, 0], w[i, 1], w[i, 2], w_d[i, 0], w_d[i, 1], w_d[i, 2]
        )


@njit(cache=True)
def _ee_task(
    quat_e: np.ndarray,
    pos_e: np.ndarray,
    nu: np.ndarray,
    n: int,
    p_d: np.ndarray,
    q_d: np.ndarray,
    nu_ed: np.ndarray,
    nu_ed_dot: np.ndarray,
    lam6: np.ndarray,
    nu_er: np.ndarray,
    nu_er_dot: np.ndarray,
    e_ep: np.ndarray,
) -> None:
    """ν_{e,r} = ν_{e,d} − Λ_e e_{e,p} and its rate (52) for the end effector (body N), e_{e,p} = [p − p_d; e_att],
    e_att = R_d ε of (44) (``_attitude_error``) with its rate (``_attitude_error_rate``)."""
    e0, x, y, z = _attitude_error(q_d[0], q_d[1], q_d[2], q_d[3], quat_e[0], quat_e[1], quat_e[2], quat_e[3])
    n3 = 3 * n
    for a in range(3):
        e_ep[a] = pos_e[a] - p_d[a]
    e_ep[3], e_ep[4], e_ep[5] = x, y, z
    de3, de4, de5 = _attitude_error_rate(
        x, y, z, e0, nu[6 * n - 3], nu[6 * n - 2], nu[6 * n - 1], nu_ed[3], nu_ed[4], nu_ed[5]
    )
    for a in range(6):
        nu_er[a] = nu_ed[a] - lam6[a] * e_ep[a]
    for a in range(3):
        nu_er_dot[a] = nu_ed_dot[a] - lam6[a] * (nu[n3 - 3 + a] - nu_ed[a])
    nu_er_dot[3] = nu_ed_dot[3] - lam6[3] * de3
    nu_er_dot[4] = nu_ed_dot[4] - lam6[4] * de4
    nu_er_dot[5] = nu_ed_dot[5] - lam6[5] * de5


@njit(cache=True, inline="always")
def _dac_world_inertias(
    quat: np.ndarray,
    nu: np.ndarray,
    inertias: np.ndarray,
    inertias_inv: np.ndarray,
    R: np.ndarray,
    Iw: np.ndarray,
    Ii: np.ndarray,
    WI: np.ndarray,
) -> None:
    """Per body of ``dac_law3_step``: R_i = R(q_i), I_i = sym(R_i I_B,i R_iᵀ) (64), I_i⁻¹ = R_i I_B,i⁻¹ R_iᵀ
    and Ω_i I_i (16), into R, Iw, Ii, WI (N,3,3)."""
    n = quat.shape[0]
    n3 = 3 * n
    # rotations and world inertias
    _quat_to_R(quat, R)  # R_i = R(q_i): models/_lie_kernels.py, the one formula
    for i in range(n):
        for a in range(3):
            for b in range(3):
                sI = 0.0
                sJ = 0.0
                for c in range(3):
                    tI = 0.0
                    tJ = 0.0
                    for e in range(3):
                        tI += inertias[i, c, e] * R[i, b, e]
                        tJ += inertias_inv[i, c, e] * R[i, b, e]
                    sI += R[i, a, c] * tI
                    sJ += R[i, a, c] * tJ
                Iw[i, a, b] = sI
                Ii[i, a, b] = sJ
        for a in range(3):
            for b in range(a + 1, 3):
                h = 0.5 * (Iw[i, a, b] + Iw[i, b, a])
                Iw[i, a, b] = h
                Iw[i, b, a] = h
        wx, wy, wz = nu[n3 + 3 * i], nu[n3 + 3 * i + 1], nu[n3 + 3 * i + 2]
        for b in range(3):  # Ω I column by column: ω × I[:, b]
            cx, cy, cz = _cross3(wx, wy, wz, Iw[i, 0, b], Iw[i, 1, b], Iw[i, 2, b])
            WI[i, 0, b], WI[i, 1, b], WI[i, 2, b] = cx, cy, cz


@njit(cache=True, inline="always")
def _dac_constraint_blocks(
    R: np.ndarray,
    nu: np.ndarray,
    joint_parent: np.ndarray,
    joint_child: np.ndarray,
    A: np.ndarray,
    Ad: np.ndarray,
) -> None:
    """The configuration-dependent blocks of A and Ȧ (``dac_law3_step``): joint row j holds −S(s_{B_jJ_j})
    on body j and S(s_{B_{j+1}J_j}) on body j+1, s_{B_jJ_j} = −R_j a_j, s_{B_{j+1}J_j} = −R_{j+1} b_j, and Ȧ
    their rates S(ω × s)."""
    n = R.shape[0]
    n3 = 3 * n
    # constraint rows: angular blocks of A and Ȧ
    for j in range(n - 1):
        spx = -(
            R[j, 0, 0] * joint_parent[j, 0]
            + R[j, 0, 1] * joint_parent[j, 1]
            + R[j, 0, 2] * joint_parent[j, 2]
        )
        spy = -(
            R[j, 1, 0] * joint_parent[j, 0]
            + R[j, 1, 1] * joint_parent[j, 1]
            + R[j, 1, 2] * joint_parent[j, 2]
        )
        spz = -(
            R[j, 2, 0] * joint_parent[j, 0]
            + R[j, 2, 1] * joint_parent[j, 1]
            + R[j, 2, 2] * joint_parent[j, 2]
        )
        k = j + 1
        scx = -(
            R[k, 0, 0] * joint_child[j, 0] + R[k, 0, 1] * joint_child[j, 1] + R[k, 0, 2] * joint_child[j, 2]
        )
        scy = -(
            R[k, 1, 0] * joint_child[j, 0] + R[k, 1, 1] * joint_child[j, 1] + R[k, 1, 2] * joint_child[j, 2]
        )
        scz = -(
            R[k, 2, 0] * joint_child[j, 0] + R[k, 2, 1] * joint_child[j, 1] + R[k, 2, 2] * joint_child[j, 2]
        )
        wjx, wjy, wjz = nu[n3 + 3 * j], nu[n3 + 3 * j + 1], nu[n3 + 3 * j + 2]
        wkx, wky, wkz = nu[n3 + 3 * k], nu[n3 + 3 * k + 1], nu[n3 + 3 * k + 2]
        dpx, dpy, dpz = _cross3(wjx, wjy, wjz, spx, spy, spz)
        dcx, dcy, dcz = _cross3(wkx, wky, wkz, scx, scy, scz)
        r = 3 * j
        cj = n3 + 3 * j
        ck = n3 + 3 * k
        # S(a) = [[0, −a_z, a_y], [a_z, 0, −a_x], [−a_y, a_x, 0]]
        A[r, cj + 1], A[r, cj + 2] = spz, -spy
        A[r + 1, cj], A[r + 1, cj + 2] = -spz, spx
        A[r + 2, cj], A[r + 2, cj + 1] = spy, -spx
        A[r, ck + 1], A[r, ck + 2] = -scz, scy
        A[r + 1, ck], A[r + 1, ck + 2] = scz, -scx
        A[r + 2, ck], A[r + 2, ck + 1] = -scy, scx
        Ad[r, cj + 1], Ad[r, cj + 2] = dpz, -dpy
        Ad[r + 1, cj], Ad[r + 1, cj + 2] = -dpz, dpx
        Ad[r + 2, cj], Ad[r + 2, cj + 1] = dpy, -dpx
        Ad[r, ck + 1], Ad[r, ck + 2] = -dcz, dcy
        Ad[r + 1, ck], Ad[r + 1, ck + 2] = dcz, -dcx
        Ad[r + 2, ck], Ad[r + 2, ck + 1] = -dcy, dcx


@njit(cache=True, inline="always")
def _dac_schur(A: np.ndarray, masses: np.ndarray, Ii: np.ndarray, MiAt: np.ndarray, S: np.ndarray) -> None:
    """ℳ⁻¹Aᵀ block by block (ℳ = blockdiag(m_i I₃ …, I_i …)) into MiAt, and S = A ℳ⁻¹ Aᵀ into S."""
    nr = A.shape[0]
    n = masses.shape[0]
    n3, m6 = 3 * n, 6 * n
    # ℳ⁻¹Aᵀ, block by block
    for c in range(nr):
        for i in range(n):
            for a in range(3):
                MiAt[3 * i + a, c] = A[c, 3 * i + a] / masses[i]
            for a in range(3):
                MiAt[n3 + 3 * i + a, c] = (
                    Ii[i, a, 0] * A[c, n3 + 3 * i]
                    + Ii[i, a, 1] * A[c, n3 + 3 * i + 1]
                    + Ii[i, a, 2] * A[c, n3 + 3 * i + 2]
                )
    for a in range(nr):
        for b in range(a + 1):
            sab = 0.0
            for c in range(m6):
                sab += A[a, c] * MiAt[c, b]
            S[a, b] = sab
            S[b, a] = sab


@njit(cache=True, inline="always")
def _dac_reference(
    A: np.ndarray,
    Ad: np.ndarray,
    S: np.ndarray,
    MiAt: np.ndarray,
    masses: np.ndarray,
    Iw: np.ndarray,
    Ii: np.ndarray,
    nu: np.ndarray,
    g: np.ndarray,
    gdot: np.ndarray,
    wtask: np.ndarray,
    wtask_dot: np.ndarray,
    work: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    nu_r_out: np.ndarray,
    nrd: np.ndarray,
) -> None:
    """ν_r and D^Iν_r of ``dac_law3_step`` (its (*)), S = L Lᵀ already factored in place:
        λ = S⁻¹ (w − A g),  u = ℳ⁻¹Aᵀλ,  ν_r = g + u,  r₁ = Ȧᵀλ − D^Iℳ u,  r₂ = ẇ − Ȧ ν_r − A ġ,
        D^Iν_r = ġ + ℳ⁻¹r₁ − ℳ⁻¹Aᵀ S⁻¹(A ℳ⁻¹ r₁ − r₂).
    ``work`` = (λ, x, u, r₁, ℳ⁻¹r₁) scratch vectors."""
    lam, x, u, r1, Mir1 = work
    nr = A.shape[0]
    nc = nr - 6
    n = masses.shape[0]
    n3, m6 = 3 * n, 6 * n
    # λ = S⁻¹(w − A g)
    for a in range(nr):
        sa = 0.0
        for c in range(m6):
            sa += A[a, c] * g[c]
        lam[a] = (wtask[a - nc] if a >= nc else 0.0) - sa
    cholesky_solve_inplace(S, nr, lam)
    for c in range(m6):
        sc = 0.0
        for a in range(nr):
            sc += MiAt[c, a] * lam[a]
        u[c] = sc
        nu_r_out[c] = g[c] + u[c]
    # r₁ = Ȧᵀλ − D^Iℳ u,  D^Iℳ u = ω × (I u) − I (ω × u) per body (angular part only)
    for c in range(m6):
        sc = 0.0
        for a in range(nr):
            sc += Ad[a, c] * lam[a]
        r1[c] = sc
    for i in range(n):
        k = n3 + 3 * i
        wx, wy, wz = nu[k], nu[k + 1], nu[k + 2]
        ux, uy, uz = u[k], u[k + 1], u[k + 2]
        t0 = Iw[i, 0, 0] * ux + Iw[i, 0, 1] * uy + Iw[i, 0, 2] * uz
        t1 = Iw[i, 1, 0] * ux + Iw[i, 1, 1] * uy + Iw[i, 1, 2] * uz
        t2 = Iw[i, 2, 0] * ux + Iw[i, 2, 1] * uy + Iw[i, 2, 2] * uz
        a0, a1, a2 = _cross3(wx, wy, wz, t0, t1, t2)
        cx, cy, cz = _cross3(wx, wy, wz, ux, uy, uz)
        r1[k] -= a0 - (Iw[i, 0, 0] * cx + Iw[i, 0, 1] * cy + Iw[i, 0, 2] * cz)
        r1[k + 1] -= a1 - (Iw[i, 1, 0] * cx + Iw[i, 1, 1] * cy + Iw[i, 1, 2] * cz)
        r1[k + 2] -= a2 - (Iw[i, 2, 0] * cx + Iw[i, 2, 1] * cy + Iw[i, 2, 2] * cz)
    # ℳ⁻¹ r₁
    for i in range(n):
        for a in range(3):
            Mir1[3 * i + a] = r1[3 * i + a] / masses[i]
            Mir1[n3 + 3 * i + a] = (
                Ii[i, a, 0] * r1[n3 + 3 * i]
                + Ii[i, a, 1] * r1[n3 + 3 * i + 1]
                + Ii[i, a, 2] * r1[n3 + 3 * i + 2]
            )
    # x = S⁻¹(A ℳ⁻¹r₁ − r₂), r₂ = ẇ − Ȧ ν_r − A ġ
    for a in range(nr):
        sa = 0.0
        for c in range(m6):
            sa += A[a, c] * (Mir1[c] + gdot[c]) + Ad[a, c] * nu_r_out[c]
        x[a] = sa - (wtask_dot[a - nc] if a >= nc else 0.0)
    cholesky_solve_inplace(S, nr, x)
    for c in range(m6):
        sc = 0.0
        for a in range(nr):
            sc += MiAt[c, a] * x[a]
        nrd[c] = gdot[c] + Mir1[c] - sc


@njit(cache=True, inline="always")
def _dac_law_torque(
    nu: np.ndarray,
    nu_r: np.ndarray,
    nrd: np.ndarray,
    masses: np.ndarray,
    Iw: np.ndarray,
    WI: np.ndarray,
    kd_mass: float,
    kd: np.ndarray,
    s_out: np.ndarray,
    tau: np.ndarray,
    scalars: np.ndarray,
) -> None:
    """The law (37)/(46) of ``dac_law3_step`` but its ℱ_{g,J} term, s = ν − ν_r:
    τ = ℳ D^Iν_r + 𝒞 ν_r − K_d s,  V = ½ sᵀℳs (scalars[0]),  V̇_cl = −sᵀK_d s (scalars[1])."""
    n = masses.shape[0]
    n3, m6 = 3 * n, 6 * n
    nu_r_out = nu_r
    # the law
    V = 0.0
    Vd = 0.0
    for c in range(m6):
        s_out[c] = nu[c] - nu_r_out[c]
    for i in range(n):
        mi = masses[i]
        for a in range(3):
            r = 3 * i + a
            Ms = mi * s_out[r]
            kds = kd_mass * Ms if kd_mass > 0.0 else kd[r] * s_out[r]
            tau[r] = mi * nrd[r] - kds
            V += s_out[r] * Ms
            Vd -= s_out[r] * kds
        for a in range(3):
            r = n3 + 3 * i + a
            Ms = 0.0
            Mn = 0.0
            Cn = 0.0
            for b in range(3):
                Ms += Iw[i, a, b] * s_out[n3 + 3 * i + b]
                Mn += Iw[i, a, b] * nrd[n3 + 3 * i + b]
                Cn += WI[i, a, b] * nu_r_out[n3 + 3 * i + b]
            kds = kd_mass * Ms if kd_mass > 0.0 else kd[r] * s_out[r]
            tau[r] = Mn + Cn - kds
            V += s_out[r] * Ms
            Vd -= s_out[r] * kds
    scalars[0] = 0.5 * V
    scalars[1] = Vd


@njit(cache=True, inline="always")
def _dac_gravity_springs(
    quat: np.ndarray,
    R: np.ndarray,
    masses: np.ndarray,
    gravity: np.ndarray,
    stiffness: np.ndarray,
    tau: np.ndarray,
) -> None:
    """τ −= ℱ_{g,J} = [m_i g; C_F M_J] (37) with the joint moments M_J = R_j K_j Log(R_jᵀR_{j+1}) from the
    relative quaternion q_j⁻¹ ⊗ q_{j+1} = (c, v): θ = 2 atan2(‖v‖, |c|), Log = sgn(c) θ v/‖v‖ (→ 2v/|c|)."""
    n = quat.shape[0]
    n3 = 3 * n
    for i in range(n):
        for a in range(3):
            tau[3 * i + a] -= masses[i] * gravity[a]
    for j in range(n - 1):
        qa0, qa1, qa2, qa3 = quat[j, 0], quat[j, 1], quat[j, 2], quat[j, 3]
        qb0, qb1, qb2, qb3 = quat[j + 1, 0], quat[j + 1, 1], quat[j + 1, 2], quat[j + 1, 3]
        cw = qa0 * qb0 + qa1 * qb1 + qa2 * qb2 + qa3 * qb3
        xx, xy, xz = _cross3(qa1, qa2, qa3, qb1, qb2, qb3)
        vx = qa0 * qb1 - qb0 * qa1 - xx
        vy = qa0 * qb2 - qb0 * qa2 - xy
        vz = qa0 * qb3 - qb0 * qa3 - xz
        sv = math.sqrt(vx * vx + vy * vy + vz * vz)
        sgn = -1.0 if cw < 0 else 1.0
        th = 2.0 * math.atan2(sv, sgn * cw)
        kk = th / sv if sv > 1e-12 else 2.0 / abs(cw)
        kk *= sgn
        tx, ty, tz = stiffness[j, 0] * kk * vx, stiffness[j, 1] * kk * vy, stiffness[j, 2] * kk * vz
        for a in range(3):
            mJ = R[j, a, 0] * tx + R[j, a, 1] * ty + R[j, a, 2] * tz
            tau[n3 + 3 * j + a] -= mJ  # −ℱ: C_F M_J is + M_J on body j, − M_J on body j+1
            tau[n3 + 3 * j + 3 + a] += mJ


@njit(cache=True)
def dac_law3_step(
    quat: np.ndarray,
    pos: np.ndarray,
    nu: np.ndarray,
    p_d: np.ndarray,
    q_d: np.ndarray,
    nu_ed: np.ndarray,
    nu_ed_dot: np.ndarray,
    masses: np.ndarray,
    inertias: np.ndarray,
    inertias_inv: np.ndarray,
    joint_parent: np.ndarray,
    joint_child: np.ndarray,
    stiffness: np.ndarray,
    gravity: np.ndarray,
    rotvec: bool,
    F_known: np.ndarray,
    lam6: np.ndarray,
    kd_mass: float,
    kd: np.ndarray,
    points: np.ndarray,
    centers: np.ndarray,
    radii: np.ndarray,
    gain: float,
    d0: float,
    dc: float,
    A: np.ndarray,
    Ad: np.ndarray,
    work: np.ndarray,
    tau: np.ndarray,
    s_out: np.ndarray,
    nu_r_out: np.ndarray,
    e_ep: np.ndarray,
    scalars: np.ndarray,
) -> bool:
    """One step of [Eslami] law (III) in closed form (``TaskSpaceLaw``'s step; the generic path
    ``PortLaw.__call__`` with ``TaskSpaceLaw.reference`` solves the same (*) by dense KKT solves).

    State: quaternions (N,4), CoM positions (N,3), ν = [v_1…v_N; ω_1…ω_N].  Per body, R_i = R(q_i),
    I_i = sym(R_i I_B,i R_iᵀ) (64), I_i⁻¹ = R_i I_B,i⁻¹ R_iᵀ, Ω_i = [ω_i]×, so that
        ℳ = blockdiag(m_i I₃ …, I_i …),  D^Iℳ = blockdiag(0, Ω_i I_i − I_i Ω_i) (76),  𝒞 = blockdiag(0, Ω_i I_i) (16).
    A = [J; J_t] (30)–(31), (51): only the angular blocks of joint row j change, −S(s_{B_jJ_j}) on body j
    and S(s_{B_{j+1}J_j}) on body j+1 with s_{B_jJ_j} = −R_j a_j, s_{B_{j+1}J_j} = −R_{j+1} b_j; their rates
    D^I S(s) = S(ω × s) fill Ȧ (the caller's ``A``/``Ad`` hold every constant block; this writes the others).
    Wish g = −∇U_o and ġ (``_obstacle_wish``), task w = [0; ν_{e,r}], ẇ = [0; D ν_{e,r}] (``_ee_task``).
    (*) through the Schur complement S = A ℳ⁻¹ Aᵀ = L Lᵀ (ℳ⁻¹Aᵀ formed block by block):
        λ = S⁻¹ (w − A g),  u = ℳ⁻¹Aᵀλ,  ν_r = g + u,
        r₁ = Ȧᵀλ − D^Iℳ u,  r₂ = ẇ − Ȧ(g + u) − A ġ,
        D^Iν_r = ġ + ℳ⁻¹r₁ − ℳ⁻¹Aᵀ S⁻¹(A ℳ⁻¹ r₁ − r₂),
    and the law (37)/(46) with s = ν − ν_r:
        τ = ℳ D^Iν_r + 𝒞 ν_r − ℱ_{g,J} − K_d s,   K_d s = k ℳ s (kd_mass = k > 0) or diag(kd) s,
        V = ½ sᵀℳs,  V̇_cl = −sᵀK_d s.
    ℱ_{g,J} = [m_i g; C_F M_J] (37): with ``rotvec`` the joint moments M_J = R_j K_j Log(R_jᵀR_{j+1}) come from
    the relative quaternion q_j⁻¹ ⊗ q_{j+1} = (c, v): θ = 2 atan2(‖v‖, |c|), Log = sgn(c) θ v/‖v‖ (→ 2v/|c| as
    ‖v‖ → 0); else ``F_known`` (given) is used.
    Outputs: tau, s_out, nu_r_out (6N), e_ep (6), scalars = [V, V̇_cl, U_o, d_min].  Returns False when S
    is not positive definite (task rows dependent on the constraints)."""
    n = quat.shape[0]
    m6 = 6 * n
    nr = A.shape[0]
    # work layout (rows): R (n·9) | I (n·9) | I⁻¹ (n·9) | WI (n·9) | vectors
    R = work[0 : 9 * n].reshape((n, 3, 3))
    Iw = work[9 * n : 18 * n].reshape((n, 3, 3))
    Ii = work[18 * n : 27 * n].reshape((n, 3, 3))
    WI = work[27 * n : 36 * n].reshape((n, 3, 3))
    o = 36 * n
    g = work[o : o + m6]
    gdot = work[o + m6 : o + 2 * m6]
    u = work[o + 2 * m6 : o + 3 * m6]
    r1 = work[o + 3 * m6 : o + 4 * m6]
    Mir1 = work[o + 4 * m6 : o + 5 * m6]
    nrd = work[o + 5 * m6 : o + 6 * m6]
    o2 = o + 6 * m6
    lam = work[o2 : o2 + nr]
    x = work[o2 + nr : o2 + 2 * nr]
    wtask = work[o2 + 2 * nr : o2 + 2 * nr + 6]
    wtask_dot = work[o2 + 2 * nr + 6 : o2 + 2 * nr + 12]
    o3 = o2 + 2 * nr + 12
    MiAt = work[o3 : o3 + m6 * nr].reshape((m6, nr))
    S = work[o3 + m6 * nr : o3 + m6 * nr + nr * nr].reshape((nr, nr))
    _dac_world_inertias(quat, nu, inertias, inertias_inv, R, Iw, Ii, WI)
    _dac_constraint_blocks(R, nu, joint_parent, joint_child, A, Ad)
    # reference pieces
    _ee_task(quat[n - 1], pos[n - 1], nu, n, p_d, q_d, nu_ed, nu_ed_dot, lam6, wtask, wtask_dot, e_ep)
    U, dmin = _obstacle_wish(R, pos, nu, n, points, centers, radii, gain, d0, dc, g, gdot)
    scalars[2] = U
    scalars[3] = dmin
    _dac_schur(A, masses, Ii, MiAt, S)
    if not cholesky_inplace(S, nr):
        return False
    _dac_reference(
        A, Ad, S, MiAt, masses, Iw, Ii, nu, g, gdot, wtask, wtask_dot, (lam, x, u, r1, Mir1), nu_r_out, nrd
    )
    _dac_law_torque(nu, nu_r_out, nrd, masses, Iw, WI, kd_mass, kd, s_out, tau, scalars)
    if not rotvec:
        for c in range(m6):
            tau[c] -= F_known[c]
        return True
    _dac_gravity_springs(quat, R, masses, gravity, stiffness, tau)
    return True


def dac_work_size(n: int, nr: int) -> int:
    """Length of ``dac_law3_step``'s scratch buffer for N bodies and nr rows of A."""
    return 36 * n + 36 * n + 2 * nr + 12 + 6 * n * nr + nr * nr


# ------------------------------------------------------------------------------------------ series-parallel
@njit(cache=True)
def triangle(delta: float, L0: float, l0: float) -> tuple[float, float, float]:
    """The elbow triangle of [Dastranj] (28) (``models.partition.TriangleMap``): with u = l₀ + δ,
    c = u²/(2L₀²) − 1 and s = √(1 − c²),  ζ = −acos c,  ζ' = u/(L₀² s),  ζ'' = 1/(L₀² s) + u² c/(L₀⁴ s³)."""
    u = delta + l0
    L2 = L0 * L0
    c = u * u / (2.0 * L2) - 1.0
    s = math.sqrt(1.0 - c * c)
    return -math.acos(c), u / (L2 * s), 1.0 / (L2 * s) + u * u * c / (L2 * L2 * s * s * s)


# ------------------------------------------------------------------------------------------ robust law (18)
@njit(cache=True)
def robust18_pre(
    t: float,
    q: np.ndarray,
    v: np.ndarray,
    sinus: bool,
    with_actuator: bool,
    prm: np.ndarray,
    ref: np.ndarray,
    H: np.ndarray,
    out: np.ndarray,
) -> tuple[int, float]:
    """The law (18) of [Dastranj] up to its one RNEA: errors, reference acceleration and the lifted state.

    ``prm`` = [c (3), a (3), w (3), p (3), Λ (3), L₀, l₀, δ_lo, δ_hi] (the last two: the stroke with its slack).
    Reference: if ``sinus``, q_d = c + a sin(w t + p), q̇_d = a w cos(w t + p), q̈_d = −a w² sin(w t + p)
    (``models.trajectory.Sinusoid``, written into ``ref`` = [q_d; q̇_d; q̈_d]), else ``ref`` as given.  Then (14)–(16):
        e = q − q_d,  ė = q̇ − q̇_d,  s = ė + Λe,  q̈_r = q̈_d − Λė     (out[0] = e, out[1] = s).
    Lift to the open tree (``PartitionModel.model_force``): u = l₀ + δ, c_ζ = u²/(2L₀²) − 1, s_ζ = √(1 − c_ζ²),
        ζ = −acos c_ζ,  ζ' = u/(L₀² s_ζ),  ζ'' = 1/(L₀² s_ζ) + u² c_ζ/(L₀⁴ s_ζ³),
        q̂ = (φ, θ, ζ[, ζ/2, δ]),  q̂̇ = E q̇,  q̂̈ = E q̈_r + Ė q̇  (ζ rows: ζ' δ̇, ζ' δ̈_r + ζ'' δ̇²)
    into H = [q̂; q̂̇; q̂̈].  Returns (status, ζ'): status 0 ok, 1 δ outside [δ_lo, δ_hi], 2 a non-finite input."""
    if sinus:
        for i in range(3):
            ph = prm[6 + i] * t + prm[9 + i]
            sn, cs = math.sin(ph), math.cos(ph)
            ai, wi = prm[3 + i], prm[6 + i]
            ref[0, i] = prm[i] + ai * sn
            ref[1, i] = ai * wi * cs
            ref[2, i] = -ai * wi * wi * sn
    chk = 0.0
    for i in range(3):
        chk += q[i] + v[i] + ref[0, i] + ref[1, i] + ref[2, i]
    if not math.isfinite(chk):
        return 2, 0.0
    dl = q[2]
    if not (prm[17] <= dl <= prm[18]):
        return 1, 0.0
    ar0 = ar1 = ar2 = 0.0
    for i in range(3):
        e = q[i] - ref[0, i]
        ed = v[i] - ref[1, i]
        lam = prm[12 + i]
        out[0, i] = e
        out[1, i] = ed + lam * e
        ar = ref[2, i] - lam * ed
        if i == 0:
            ar0 = ar
        elif i == 1:
            ar1 = ar
        else:
            ar2 = ar
    z, dz, d2z = triangle(dl, prm[15], prm[16])
    H[0, 0], H[0, 1], H[0, 2] = q[0], q[1], z
    H[1, 0], H[1, 1], H[1, 2] = v[0], v[1], dz * v[2]
    H[2, 0], H[2, 1], H[2, 2] = ar0, ar1, dz * ar2 + d2z * v[2] * v[2]
    if with_actuator:
        H[0, 3], H[0, 4] = 0.5 * z, dl
        H[1, 3], H[1, 4] = 0.5 * H[1, 2], v[2]
        H[2, 3], H[2, 4] = 0.5 * H[2, 2], ar2
    return 0, dz


@njit(cache=True)
def robust18_post(
    tau: np.ndarray, dz: float, with_actuator: bool, gains: np.ndarray, out: np.ndarray
) -> None:
    """Γ q̈_r + h − Q_e = Eᵀ τ̂ (τ̂ the open tree's RNEA at the lifted state; E = identity but for the ζ row,
    and the α = ζ/2, δ rows with the actuator bodies), then (18) with ``gains`` = [K; −κ; 1/ε]:
        Q_a = (Γ q̈_r + h − Q_e) − K s − κ sat(s/ε),   sat(x) = min(1, max(−1, x))
    (out[2] = the model part, out[3] = −κ sat(s/ε), out[4] = Q_a; s = out[1])."""
    Q = out[4]
    out[2, 0] = tau[0]
    out[2, 1] = tau[1]
    out[2, 2] = dz * tau[2] + ((0.5 * dz * tau[3] + tau[4]) if with_actuator else 0.0)
    for i in range(3):
        s = out[1, i]
        out[3, i] = gains[1, i] * min(1.0, max(-1.0, s * gains[2, i]))
        Q[i] = out[2, i] - gains[0, i] * s + out[3, i]


# ------------------------------------------------------------------------------------------ PIDC, one row
@njit(cache=True, inline="always")
def generalized_force(
    M: np.ndarray, h: np.ndarray, D: np.ndarray, v: np.ndarray, qdd: np.ndarray, b: np.ndarray
) -> float:
    """b = M q̈ + h + D q̇ (n), the generalized force that gives q̈ on the model (PIDC's b, before its
    projections); returns ‖b‖."""
    bb = 0.0
    for i in range(b.shape[0]):
        x = h[i] + D[i] * v[i]
        for j in range(b.shape[0]):
            x += M[i, j] * qdd[j]
        b[i] = x
        bb += x * x
    return math.sqrt(bb)


@njit(cache=True, inline="always")
def _sinusoid_reference(t: float, prm: np.ndarray, o: int, ref: np.ndarray) -> None:
    """``pidc_one_row``'s reference from the sinusoid θ_d = c + α sin(ω t + φ) (``models.trajectory.Sinusoid``):
    ref = [θ_d; θ̇_d = α ω cos(·); θ̈_d = −α ω² sin(·)], with (c, α, ω, φ) (k each) at ``prm[o:]``."""
    k = ref.shape[1]
    for j in range(k):
        ph = prm[o + 2 * k + j] * t + prm[o + 3 * k + j]
        sn, cs = math.sin(ph), math.cos(ph)
        al, om = prm[o + k + j], prm[o + 2 * k + j]
        ref[0, j] = prm[o + j] + al * sn
        ref[1, j] = al * om * cs
        ref[2, j] = -al * om * om * sn


@njit(cache=True, inline="always")
def _passive_projection(
    a: np.ndarray, s2: float, sigma: float, rank: int, mask: np.ndarray, tau_par: np.ndarray, tau: np.ndarray
) -> float:
    """``pidc_one_row`` with passive joints (mask = diag(I − B)): at rank 1, y = a/σ, x = mask ∘ y,
    τ = τ_∥ − y (x·τ_∥)/‖x‖² (60–62; τ = τ_∥ if x = 0), and the residual ‖mask ∘ τ‖ of (58), returned."""
    n = a.shape[0]
    res = 0.0
    if rank == 1:
        nx2 = 0.0
        xt = 0.0
        for i in range(n):
            yi = a[i] / s2 * sigma
            xi = yi * mask[i]
            nx2 += xi * xi
            xt += xi * tau_par[i]
        if nx2 != 0.0:
            f = xt / nx2
            for i in range(n):
                tau[i] = tau_par[i] - (a[i] / s2 * sigma) * f
    for i in range(n):
        ri = tau[i] * mask[i]
        res += ri * ri
    return math.sqrt(res)


@njit(cache=True)
def pidc_one_row(
    M: np.ndarray,
    h: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    a: np.ndarray,
    jdv: float,
    t: float,
    ref: np.ndarray,
    sinus: bool,
    prm: np.ndarray,
    out: np.ndarray,
) -> tuple[int, int, float, float]:
    """The closed-form PIDC step of [Aghili] §7.1/§7.4 for one constraint row a (A = aᵀ, 1×n), as
    ``controllers.pidc.PIDC`` with ``project`` and the rank-1 closed forms:

    Projector (``models.projection.project``, m = 1): σ = ‖a‖; rank 1 if σ > tol, then
        A⁺ = a/σ²,  P = I − a aᵀ/σ²,  C q̇ = −A⁺ (Ȧq̇)   (14);   rank 0: P = I, C q̇ = 0.
    Motion (46): e = θ_d − q[ci], ė = θ̇_d − q̇[ci], u = θ̈_d + K_v ė + K_p e, r = u − (C q̇)[ci], and
        q̈_des = C q̇ + P z,   z = (S P)⁺ r
    with (S P)⁺ = Sᵀ at rank 0, and at rank 1, y = a/σ, w = y[ci], d = 1 − ‖w‖² (Sherman–Morrison):
        (S P)⁺ = P Sᵀ (I + w wᵀ/d)                     (valid while d > sm_min; else status 1: the SVD path)
    Then b = M q̈_des + h + D q̇ (D the joint damping), τ_∥ = P b (45), and with passive joints (mask = diag(I − B))
        τ = τ_∥ − y (x·τ_∥)/‖x‖²,  x = mask ∘ y        (60–62 at rank 1; τ = τ_∥ if x = 0 or rank 0)
    and the residual ‖mask ∘ τ‖ of (58); without passive joints τ = τ_∥.
    Reference ``ref`` = [θ_d; θ̇_d; θ̈_d] (3, k); if ``sinus`` it is written here from the sinusoid
    θ_d = c + α sin(ω t + φ) (``models.trajectory.Sinusoid``: θ̇_d = α ω cos(·), θ̈_d = −α ω² sin(·)), whose
    (c, α, ω, φ) follow the constants in ``prm`` =
    [K_p (k) | K_v (k) | ci (k) | mask (n) | D (n) | passive (0/1), tol, sm_min | c, α, ω, φ (k each)]
    (``pidc_params``).
    Writes ``out`` (n+3, n) = [P; q̈_des; τ_∥; τ]; returns (status, rank, residual, ‖b‖): status 0 ok, 1 the
    closed form of (S P)⁺ is ill-conditioned (caller takes the SVD path), 2 a non-finite a, 3 a non-finite q
    or q̇."""
    n = v.shape[0]  # q (nq,) a point of the joint manifold: nq ≠ n with a ball joint
    k = ref.shape[1]
    o = 3 * k + 2 * n + 3
    if sinus:
        _sinusoid_reference(t, prm, o, ref)
    th_d = ref[0]
    thd_d = ref[1]
    thdd_d = ref[2]
    kp = prm[0:k]
    kv = prm[k : 2 * k]
    ci = np.empty(k, np.int64)
    for j in range(k):
        ci[j] = int(prm[2 * k + j])
    mask = prm[3 * k : 3 * k + n]
    D = prm[3 * k + n : 3 * k + 2 * n]
    passive = prm[3 * k + 2 * n] != 0.0
    tol = prm[3 * k + 2 * n + 1]
    sm_min = prm[3 * k + 2 * n + 2]
    P = out[0:n]
    qdd = out[n]
    tau_par = out[n + 1]
    tau = out[n + 2]
    s2 = 0.0
    for i in range(q.shape[0]):
        s2 += q[i]
    for i in range(n):
        s2 += v[i]
    if not math.isfinite(s2):
        return 3, 0, 0.0, 0.0
    s2 = 0.0
    for i in range(n):
        s2 += a[i] * a[i]
    if not math.isfinite(s2):
        return 2, 0, 0.0, 0.0
    sigma = math.sqrt(s2)
    rank = 1 if sigma > tol else 0
    cv = np.zeros(n)
    if rank == 1:
        for i in range(n):
            ai = a[i] / s2
            cv[i] = -(ai * jdv)
            for j in range(n):
                P[i, j] = ai * (-a[j])
            P[i, i] += 1.0
    else:
        for i in range(n):
            for j in range(n):
                P[i, j] = 0.0
            P[i, i] = 1.0
    r = np.empty(k)
    for j in range(k):
        c = ci[j]
        e = th_d[j] - q[c]
        ed = thd_d[j] - v[c]
        r[j] = thdd_d[j] + kv[j] * ed + kp[j] * e - cv[c]
    z = np.zeros(n)
    if rank == 0:
        for j in range(k):
            z[ci[j]] = r[j]
    else:
        w = np.empty(k)
        ww = 0.0
        for j in range(k):
            w[j] = a[ci[j]] / s2 * sigma
            ww += w[j] * w[j]
        d = 1.0 - ww
        if not d > sm_min:
            return 1, rank, 0.0, 0.0
        wr = 0.0
        for j in range(k):
            wr += w[j] * r[j]
        for i in range(n):
            zi = 0.0
            for j in range(k):
                zi += P[i, ci[j]] * (r[j] + w[j] * (wr / d))  # P Sᵀ (I + w wᵀ/d) r
            z[i] = zi
    for i in range(n):
        x = cv[i]
        for j in range(n):
            x += P[i, j] * z[j]
        qdd[i] = x
    b = np.empty(n)
    bn = generalized_force(M, h, D, v, qdd, b)
    for i in range(n):
        x = 0.0
        for j in range(n):
            x += P[i, j] * b[j]
        tau_par[i] = x
        tau[i] = x
    res = _passive_projection(a, s2, sigma, rank, mask, tau_par, tau) if passive else 0.0
    return 0, rank, res, bn


def pidc_params(
    kp: np.ndarray,
    kv: np.ndarray,
    ci: np.ndarray,
    mask: np.ndarray,
    D: np.ndarray,
    passive: bool,
    tol: float,
    sm_min: float,
    sinus: tuple | None = None,
) -> np.ndarray:
    """The constant ``prm`` vector of ``pidc_one_row``; ``sinus`` = (c, α, ω, φ) of a sinusoid reference."""
    k = len(ci)
    sin = (
        np.zeros(4 * k)
        if sinus is None
        else np.concatenate([np.broadcast_to(np.asarray(x, float), (k,)) for x in sinus])
    )
    return np.concatenate(
        [kp, kv, np.asarray(ci, float), mask, D, [1.0 if passive else 0.0, tol, sm_min], sin]
    )


if __name__ == "__main__":
    raise SystemExit("the kernels' warm-up is the application tier's: run `python -m cmstack.warmup`")
