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
