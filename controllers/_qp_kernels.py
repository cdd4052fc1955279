"""The conditioning of ``controllers/qp.py`` compiled (numba): what ``BoundedQP.solve`` does to a problem before
ProxSuite sees it, in one call into buffers of the problem's shape (no NumPy temporaries: at the sizes of the
control laws, 14 variables and up to 28 rows, each NumPy operation cost about as much as ProxSuite's whole
warm solve).

    s = max(max_i |H_ii|, ‖g‖_∞) (1 when not > 0 or not finite),   Ĥ = H/s,   ĝ = g/s
    r_i = ‖C_i‖,  empty_i = r_i ≤ row_tol · max(1, max_j r_j),  free_i = neither bound finite
    d_i = 0 if empty_i or free_i, else 1/r_i;   Ĉ_i = d_i C_i
    l̂_i = d_i l_i  (−1e20 when d_i = 0 or d_i l_i = −∞, +1e20 when d_i l_i = +∞),  û_i likewise
    bad: empty_i and (l_i > check_tol (1 + |l_i|) or u_i < −check_tol (1 + |u_i|))   (finite bounds only)
    λ_min(Ĥ) by LAPACK's symmetric eigenvalue solver (ρ of the module docstring of qp.py)

tests/test_qp_kernels.py checks every output against the NumPy formulation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from cmstack.controllers import kernels as _kernels
from cmstack.controllers.kernels import cholesky_inplace, cholesky_solve_inplace
from cmstack.models._kernel_cache import depends_on

depends_on(__file__, _kernels)


@njit(cache=True)
def condition(H, g, C, l, u, row_tol, check_tol, Hs, gs, Cs, ls, us, d, bad):
    """Fill Ĥ, ĝ, Ĉ, l̂, û, d (module docstring) and ``bad`` (the empty rows violated as constants, their indices,
    first ``nbad``).  Returns (s, λ_min(Ĥ), nbad)."""
    n = H.shape[0]
    s = 0.0
    for i in range(n):
        a = abs(H[i, i])
        if a > s:
            s = a
    for i in range(n):
        a = abs(g[i])
        if a > s:
            s = a
    if not (s > 0.0 and math.isfinite(s)):
        s = 1.0
    inv = 1.0 / s
    for i in range(n):
        gs[i] = g[i] * inv
        for j in range(n):
            Hs[i, j] = H[i, j] * inv
    lam = np.linalg.eigvalsh(Hs)[0] if n else 1.0
    m = C.shape[0]
    big = 1.0
    for i in range(m):
        r = 0.0
        for j in range(n):
            r += C[i, j] * C[i, j]
        r = math.sqrt(r)
        d[i] = r
        if r > big:
            big = r
    thr = row_tol * big
    nbad = 0
    for i in range(m):
        r = d[i]
        li, ui = l[i], u[i]
        empty = r <= thr
        if empty:
            lo_bad = math.isfinite(li) and li > check_tol * (1.0 + abs(li))
            hi_bad = math.isfinite(ui) and ui < -check_tol * (1.0 + abs(ui))
            if lo_bad or hi_bad:
                bad[nbad] = i
                nbad += 1
        free = not math.isfinite(li) and not math.isfinite(ui)
        di = 0.0 if (empty or free) else 1.0 / r
        d[i] = di
        for j in range(n):
            Cs[i, j] = C[i, j] * di
        if di == 0.0:
            ls[i], us[i] = -1e20, 1e20
            continue
        a = li * di
        b = ui * di
        ls[i] = a if math.isfinite(a) else (1e20 if a > 0 else -1e20)
        us[i] = b if math.isfinite(b) else (-1e20 if b < 0 else 1e20)
    return s, lam, nbad


@njit(cache=True)
def pivoted_qr(B, rank_tol, perm):
    """Householder QR with column pivoting of Bᵀ (B: m × k), the factorization ``null_basis`` and ``null_step`` share:
    Bᵀ Π = Q R.  Returns (X, V, r): X (k × m) holds R in its first r rows (the columns in the pivoted order), V the
    reflectors (v_j in V[j:, j], ‖v_j‖ = √2, H_j = I − v vᵀ, Q = H_0 ⋯ H_{r−1}), r the rank: the factorization stops
    at the first pivot column whose norm is not above rank_tol · max(1, the first pivot's norm).  perm (m) holds the
    column order Π on return (start it at 0, 1, …, m − 1)."""
    m, k = B.shape
    X = np.empty((k, m))
    for i in range(m):
        for j in range(k):
            X[j, i] = B[i, j]
    V = np.zeros((k, min(k, m)))
    r = 0
    first = 0.0
    for j in range(min(k, m)):
        # pivot: the remaining column of largest norm (rows j.. of the columns j..)
        best, p = -1.0, j
        for c in range(j, m):
            acc = 0.0
            for i in range(j, k):
                acc += X[i, c] * X[i, c]
            if acc > best:
                best, p = acc, c
        nrm = math.sqrt(best)
        if j == 0:
            first = nrm
        if not nrm > rank_tol * max(1.0, first):
            break
        if p != j:
            for i in range(k):
                X[i, j], X[i, p] = X[i, p], X[i, j]
            perm[j], perm[p] = perm[p], perm[j]
        # v = x + sign(x_0) ‖x‖ e_0, scaled to ‖v‖ = √2
        alpha = -nrm if X[j, j] >= 0.0 else nrm
        vn = 0.0
        for i in range(j, k):
            V[i, j] = X[i, j]
        V[j, j] -= alpha
        for i in range(j, k):
            vn += V[i, j] * V[i, j]
        vn = math.sqrt(vn)
        if vn > 0.0:
            sc = math.sqrt(2.0) / vn
            for i in range(j, k):
                V[i, j] *= sc
        # X ← H_j X on the columns j..
        for c in range(j, m):
            dot = 0.0
            for i in range(j, k):
                dot += V[i, j] * X[i, c]
            for i in range(j, k):
                X[i, c] -= V[i, j] * dot
        r += 1
    return X, V, r


@njit(cache=True)
def null_basis(B, rank_tol):
    """Orthonormal basis of N(B) (B: m × k, any m ≥ 0) by Householder QR with column pivoting of Bᵀ:
    Bᵀ P = Q R, N(B) = range(Bᵀ)^⊥ = the columns r.. of Q, r = #{j: |R_jj| > rank_tol · max(1, |R_00|)} (the
    pivoted diagonal estimates the singular values: the relative rank test of the SVD (σ_i > rank_tol · max(1, σ_1))
    that the hierarchy used before (an SVD, as ``uk_levels`` did), to which tests/test_limits_hierarchy.py
    compares it; at these sizes an SVD's LAPACK set-up cost more than the whole level: 4.6 against 31 µs).
    A k × (k − r) array, Q = H_0 ⋯ H_{r−1} applied to the last k − r columns of the identity."""
    m, k = B.shape
    _, V, r = pivoted_qr(B, rank_tol, np.arange(m))
    out = np.zeros((k, k - r))
    for j in range(k - r):
        out[r + j, j] = 1.0
    for h in range(r - 1, -1, -1):  # Q e_c = H_0 ⋯ H_{r−1} e_c: the last reflector first
        for c in range(k - r):
            dot = 0.0
            for i in range(h, k):
                dot += V[i, h] * out[i, c]
            for i in range(h, k):
                out[i, c] -= V[i, h] * dot
    return out


@njit(cache=True)
def hierarchy_level(N, dx, x, Bprev, rank_tol, C, l, u, eps_abs, A, b, last, M, Q, H, g):
    """One step down the hierarchy of ``uk_solve._sequential``, in one compiled call: the levels above solved
    (x, in the basis N of their null space: x ← x + N dx), the basis of the next level's null space
    N' = N null(B_prev) (B_prev = A_{k−1} N, ``null_basis``), and level k's QP in the coordinates z of N'
    (v̇ = x + N' z):

        level k < K:  Ĥ = (A N')ᵀ(A N') + μ N'ᵀ M N',   ĝ = N'ᵀ (−Aᵀ (b − A x) + μ (M x − Q)),
                      μ = 1e-6 max(tr((A N')ᵀ A N'), 1e-12) / tr(M)
        level K:      Ĥ = N'ᵀ H N',   ĝ = N'ᵀ (H x + g)   (``last``; A, b unused)
        C N' z ∈ [min(l − C x, 0) − m, max(u − C x, 0) + m],   m = 1e-8 (|l| + |u|) + 10 eps_abs (0 where not finite)

    Returns (x, N', Ĥ, ĝ, C N', lo, hi, A N') (A N' empty for the last level); N' may have no column."""
    n = x.size
    nz0 = N.shape[1]
    xn = x.copy()
    if dx.size:
        for i in range(n):
            acc = 0.0
            for j in range(nz0):
                acc += N[i, j] * dx[j]
            xn[i] += acc
    V = null_basis(Bprev, rank_tol)
    Nn = np.ascontiguousarray(N) @ V if Bprev.shape[0] else np.ascontiguousarray(N)
    nz = Nn.shape[1]
    m = C.shape[0]
    CN = np.ascontiguousarray(C) @ Nn
    Cx = np.ascontiguousarray(C) @ xn
    lo = np.empty(m)
    hi = np.empty(m)
    for i in range(m):
        mg = 1e-8 * (abs(l[i]) + abs(u[i])) + 10.0 * eps_abs
        if not math.isfinite(mg):
            mg = 0.0
        lo[i] = min(l[i] - Cx[i], 0.0) - mg
        hi[i] = max(u[i] - Cx[i], 0.0) + mg
    MN = np.ascontiguousarray(M) @ Nn
    if last:
        HN = np.ascontiguousarray(H) @ Nn
        Hr = Nn.T @ HN
        gr = Nn.T @ (np.ascontiguousarray(H) @ xn + g)
        AN = np.zeros((0, nz))
    else:
        Ac = np.ascontiguousarray(A)
        AN = Ac @ Nn
        trA = 0.0
        for i in range(AN.shape[0]):
            for j in range(nz):
                trA += AN[i, j] * AN[i, j]
        trM = 0.0
        for i in range(n):
            trM += M[i, i]
        mu = 1e-6 * max(trA, 1e-12) / trM
        Hr = AN.T @ AN + mu * (Nn.T @ MN)
        res = b - Ac @ xn
        w = -(Ac.T @ res) + mu * (np.ascontiguousarray(M) @ xn - Q)
        gr = Nn.T @ w
    return xn, Nn, Hr, gr, CN, lo, hi, AN


@njit(cache=True)
def condition_eq(A, b, row_tol, check_tol, As, bs, e):
    """The equality rows of ``BoundedQP.solve`` conditioned (``controllers/qp.py``, module docstring 1.–2.):
    e_i = ‖A_i‖, Â_i = A_i / e_i, b̂_i = b_i / e_i into ``As``, ``bs``, ``e``.  Returns the number of rows that
    are numerically empty (e_i ≤ row_tol · max(1, max_j e_j)); when it is not 0 the caller drops them (and checks
    them as constants) instead, and ``As``, ``bs`` are not to be used."""
    m, n = A.shape
    big = 1.0
    for i in range(m):
        r = 0.0
        for j in range(n):
            r += A[i, j] * A[i, j]
        r = math.sqrt(r)
        e[i] = r
        if r > big:
            big = r
    thr = row_tol * big
    nempty = 0
    for i in range(m):
        r = e[i]
        if r <= thr:
            nempty += 1
            continue
        for j in range(n):
            As[i, j] = A[i, j] / r
        bs[i] = b[i] / r
    return nempty


@njit(cache=True)
def level_residuals(E, f, x, sizes, res, bnorm):
    """Per level k (its rows E_k = the next ``sizes[k]`` rows of E): res_k = ‖E_k x − f_k‖ and bnorm_k = ‖f_k‖
    (``uk_solve``: ``info.level_residuals`` and whether every level above the last held exactly)."""
    n = x.size
    i = 0
    for k in range(sizes.size):
        r2 = 0.0
        b2 = 0.0
        for _ in range(sizes[k]):
            acc = -f[i]
            for j in range(n):
                acc += E[i, j] * x[j]
            r2 += acc * acc
            b2 += f[i] * f[i]
            i += 1
        res[k] = math.sqrt(r2)
        bnorm[k] = math.sqrt(b2)


@njit(cache=True)
def condition_qp(H, g, A, b, C, l, u, row_tol, check_tol, Hs, gs, As, bs, e, Cs, ls, us, d, bad):
    """``condition`` and ``condition_eq`` of one problem in one call (``BoundedQP.solve``; A, C may have no row).
    Returns (s, λ_min(Ĥ), nbad, nempty): ``condition``'s and ``condition_eq``'s counts."""
    s, lam, nbad = condition(H, g, C, l, u, row_tol, check_tol, Hs, gs, Cs, ls, us, d, bad)
    nempty = condition_eq(A, b, row_tol, check_tol, As, bs, e) if A.shape[0] else 0
    return s, lam, nbad, nempty


@njit(cache=True)
def merged_problem(
    A1,
    b1,
    AtA,
    Atb,
    A2,
    M,
    trM,
    Q,
    C,
    l,
    u,
    rank_tol,
    row_tol,
    check_tol,
    Hs,
    gs,
    As,
    bs,
    e,
    Cs,
    ls,
    us,
    d,
    bad,
):
    """Levels 1 and 2 of the hierarchy as one QP (``uk_solve.LevelSolver._merged_top``), built and conditioned in
    one call:

        N₁ = null_basis(A₁),  μ = 1e-6 max(‖A₂ N₁‖²_F, 1e-12) / tr(M),
        H = A₂ᵀA₂ + μ M,  g = −A₂ᵀ b₂ − μ Q,   s.t.  A₁ v̇ = b₁,  l ≤ C v̇ ≤ u,

    with A₂ᵀA₂, A₂ᵀb₂ and tr(M) given (``AtA``, ``Atb``, ``trM``: NumPy's, as the QP was built before, to the bit:
    the lower levels of a binding step can move with a rounding of H, ``_merged_top``), then ``condition_qp`` of
    (H, g, A₁, b₁, C, l, u) into the given buffers (Ĥ, ĝ, Â, b̂, e, Ĉ, l̂, û, d, bad; Â, b̂ not to be used when
    nempty > 0).  Returns (N₁, A₂ N₁, s, λ_min, nbad, nempty)."""
    n = M.shape[0]
    N1 = null_basis(A1, rank_tol)
    AN = np.ascontiguousarray(A2) @ N1
    ANf = AN.ravel()
    trA = np.vdot(ANf, ANf)
    mu = 1e-6 * max(trA, 1e-12) / trM
    H = np.empty((n, n))
    g = np.empty(n)
    for i in range(n):
        g[i] = -Atb[i] - mu * Q[i]
        for j in range(n):
            H[i, j] = AtA[i, j] + mu * M[i, j]
    s, lam, nbad, nempty = condition_qp(
        H, g, A1, b1, C, l, u, row_tol, check_tol, Hs, gs, As, bs, e, Cs, ls, us, d, bad
    )
    return N1, AN, s, lam, nbad, nempty


@njit(cache=True)
def inactive_minimizer(Hs, gs, Cs, ls, us, d, zf):
    """The unconstrained minimizer z* = −Ĥ⁻¹ ĝ of a conditioned level (Cholesky of Ĥ) into ``zf`` (its first
    nz = Ĥ's order entries), and whether it meets every kept row: l̂_i ≤ Ĉ_i z* ≤ û_i for all i with d_i ≠ 0 (a
    zeroed row, vanished or free, constrains nothing).  When it does, z* is the level's QP solution (it minimizes
    the convex cost over a superset of the feasible set and lies in that set), every multiplier is 0 and no solver
    is needed.  False when Ĥ is not positive definite to working precision (its Cholesky fails) or a row is
    violated (zf then holds z*, or nothing useful when the Cholesky failed)."""
    nz = Hs.shape[0]
    L = np.empty((nz, nz))
    for i in range(nz):
        for j in range(nz):
            L[i, j] = Hs[i, j]
    if not cholesky_inplace(L, nz):
        return False
    for i in range(nz):
        zf[i] = -gs[i]
    cholesky_solve_inplace(L, nz, zf)
    for i in range(nz):
        if not math.isfinite(zf[i]):
            return False
    for i in range(Cs.shape[0]):
        if d[i] == 0.0:
            continue
        y = 0.0
        for j in range(nz):
            y += Cs[i, j] * zf[j]
        if y < ls[i] or y > us[i]:
            return False
    return True


@njit(cache=True)
def level_problem(
    N,
    dx,
    x,
    Bprev,
    rank_tol,
    C,
    l,
    u,
    eps_abs,
    A,
    b,
    last,
    M,
    Q,
    H,
    g,
    row_tol,
    check_tol,
    lo,
    hi,
    ls,
    us,
    d,
    bad,
    zf,
):
    """``hierarchy_level``, the ``condition`` of its QP and ``inactive_minimizer`` in one call
    (``uk_solve.LevelSolver._sequential``); the bounds of the level (lo, hi, unscaled: the feasibility test of a
    capped solve) and of its conditioned form (l̂, û, the rows' scales d, the vanished rows violated as constants
    ``bad``) into the given buffers (one entry per row of C), the unconstrained minimizer into ``zf`` (n entries,
    the first nz used).  Returns (x, N', A N', Ĥ, ĝ, C N', Ĉ, s, λ_min, nbad, free, nz_next): ``free`` when no row
    of the level can be active (``inactive_minimizer``; never with a violated constant row): the level's solution
    is zf[:nz] with zero multipliers; ``nz_next`` the dimension of the next level's null space, nz − rank(A N') by
    the rank test of ``null_basis`` (0 for the last level: the caller stops after this level when it is 0, without
    a call for a level that has no freedom left).  N' may have no column (then Ĥ … are not set)."""
    xn, Nn, Hr, gr, CN, lo_, hi_, AN = hierarchy_level(
        N, dx, x, Bprev, rank_tol, C, l, u, eps_abs, A, b, last, M, Q, H, g
    )
    nz = Nn.shape[1]
    m = C.shape[0]
    lo[:] = lo_
    hi[:] = hi_
    Hs, gs, Cs = np.empty((nz, nz)), np.empty(nz), np.empty((m, nz))
    if nz == 0:
        return xn, Nn, AN, Hs, gs, CN, Cs, 1.0, 1.0, 0, False, 0
    s, lam, nbad = condition(Hr, gr, CN, lo, hi, row_tol, check_tol, Hs, gs, Cs, ls, us, d, bad)
    free = nbad == 0 and inactive_minimizer(Hs, gs, Cs, ls, us, d, zf)
    nz_next = 0
    if not last:
        nz_next = nz - pivoted_qr(AN, rank_tol, np.arange(AN.shape[0]))[2]
    return xn, Nn, AN, Hs, gs, CN, Cs, s, lam, nbad, free, nz_next


@njit(cache=True)
def level_tail(E, f, x, sizes, H, g, C, z, res, bnorm, rhs):
    """The end of ``uk_solve.LevelSolver._sequential`` in one call: ``level_residuals`` of v̇ = x (res_k, ‖f_k‖ into
    ``res``, ``bnorm``), the right side of the equality force's minimum-norm split rhs = −(H x + g) − Cᵀ z (Eᵀλ = rhs,
    solved when the forces are asked for), and whether every level holds exactly: res_k ≤ 1e-8 (1 + ‖f_k‖) for
    every k (False on a NaN)."""
    level_residuals(E, f, x, sizes, res, bnorm)
    exact = True
    for k in range(sizes.size):
        if not res[k] <= 1e-8 * (1.0 + bnorm[k]):
            exact = False
    n = x.size
    for i in range(n):
        acc = g[i]
        for j in range(n):
            acc += H[i, j] * x[j]
        rhs[i] = -acc
    for r in range(C.shape[0]):
        zr = z[r]
        if zr != 0.0:
            for i in range(n):
                rhs[i] -= C[r, i] * zr
    return exact


@njit(cache=True)
def null_step(B, y, rank_tol):
    """(dz, N): the minimum-norm least-squares solution dz of B dz ≈ y and an orthonormal basis N of N(B), from one
    Householder QR with column pivoting of Bᵀ (``null_basis``'s, the same rank test): Bᵀ Π = Q R, rank r, so
    B = Π R₁ᵀ Q₁ᵀ (R₁: the first r rows of R, Q₁: the first r columns of Q) and dz = Q₁ w with
    w = argmin ‖R₁ᵀ w − Πᵀ y‖ (R₁ᵀ has full column rank: forward substitution on its first r rows when r = m, a
    least-squares solve otherwise); dz ∈ range(Bᵀ) is the minimum-norm one, pinv(B) y of the SVD it replaces
    (``uk_levels._nullspace_step``; tests/test_limit_rows.py compares the two).  B: m × k, y: m."""
    m, k = B.shape
    perm = np.arange(m)
    X, V, r = pivoted_qr(B, rank_tol, perm)
    # w: R₁ᵀ w = Πᵀ y (row c of R₁ᵀ is column c of X's first r rows)
    w = np.zeros(r)
    if r == m:
        for c in range(r):
            acc = y[perm[c]]
            for i in range(c):
                acc -= X[i, c] * w[i]
            w[c] = acc / X[c, c]
    elif r > 0:
        S = np.empty((m, r))
        yp = np.empty(m)
        for c in range(m):
            yp[c] = y[perm[c]]
            for i in range(r):
                S[c, i] = X[i, c]
        w = np.linalg.lstsq(S, yp)[0]
    dz = np.zeros(k)
    dz[:r] = w
    out = np.zeros((k, k - r))
    for j in range(k - r):
        out[r + j, j] = 1.0
    for h in range(r - 1, -1, -1):  # Q e = H_0 ⋯ H_{r−1} e: the last reflector first
        dot = 0.0
        for i in range(h, k):
            dot += V[i, h] * dz[i]
        for i in range(h, k):
            dz[i] -= V[i, h] * dot
        for c in range(k - r):
            dot = 0.0
            for i in range(h, k):
                dot += V[i, h] * out[i, c]
            for i in range(h, k):
                out[i, c] -= V[i, h] * dot
    return dz, out
