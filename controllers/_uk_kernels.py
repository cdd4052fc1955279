"""Compiled kernels of the Udwadia–Kalaba control step (issue 12): the per-step small-array algebra of
``controllers/udwadia_kalaba.py`` fused into a few ``numba.njit`` functions fed by what one Pinocchio
pass (``pin.computeAllTerms``) already holds.  Imported lazily by the controller (numba's import costs
~0.3 s); the machine code is cached on disk (``cache=True``), so a process pays the compilation once
per source change, later ones only the cache load.

Notation (everything LOCAL_WORLD_ALIGNED, as ``models/robot.py: FrameState``): a frame f rigidly
attached to joint j at the placement ʲM_f = (R_f, t_f); the joint's pose ⁰M_j = (R_j, p_j)
(``data.oMi``); the joint Jacobians ``data.J`` (6×nv, world axes, the linear part being the velocity
of the point at the world origin: column c = [v_O,c; ω_c]); the joint's spatial acceleration at
v̇ = 0, ``data.a[j]`` = [a_j; α_j] in the joint's own axes (the linear part at the joint origin).

``frame_states`` — the frame's pose, Jacobian, twist and classical acceleration:

    R = R_j R_f,   p = p_j + R_j t_f
    J[:, c] = [J_O,v[:, c] + J_ω[:, c] × p;  J_ω[:, c]]   for c in the support of j, 0 elsewhere
              (the velocity field of a rigid motion: v_p = v_O + ω × p)
    [v_p; ω] = J v
    α = R_j α_j,   a_sp(p) = R_j a_j + α × (p − p_j)     (a spatial acceleration is a motion field too)
    a_cl = a_sp(p) + ω × v_p                           (classical = spatial + ω × v at a material point)
    acc = [a_cl; α] = J̇ v                              (v̇ = 0: Pinocchio's frame classical acceleration)

``task_rows`` — the rows A v̇ = b of each task in the controller's form (``Task.qp_rows``: world axes),
scaled by √ω for the levels above the last: each task's error dynamics (W, drift, w, e) from the kernel
of its kind in ``models/_task_kernels.py`` (``coupling_error``, ``frame_error``, ``joint_error``: the
functions the tasks' Python ``error_dynamics`` calls, derived there), then the law
A = W,  b = −drift − K_d w − K_p e − P β (``task_law``), β = K_i z for a task with integral action
(``uk_robust.IntegralTask``) in the task's own axes, rotated to world axes with the rows.

``kkt_solve`` — the last level and the equality levels above it (``_equality`` of the controller):

    H = M + Σ_final ω AᵀA,   r = −(h + D v) + Σ_final ω Aᵀ b,   E v̇ = f the rows above
    H = L Lᵀ (Cholesky),  X = H⁻¹ [Eᵀ r],  S = E X_E = L_S L_Sᵀ,  S λ = E X_r − f,
    v̇ = X_r − X_E λ,  τ = M v̇ + h + D v
    status 2 (to the null-space path) when H is not positive definite or a pivot of L_S is below
    √rank_tol × the largest one (the test of ``_equality``); status 3 when there is no row above and
    H is not positive definite.

``effort_violated`` — |τ_i| > τ_max,i (1 + 1e-9) on the selected joints (``EffortLimit.violated``).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from cmstack.models._task_kernels import coupling_error, frame_error, joint_error, log3, task_law  # noqa: F401 (log3: re-exported)
from cmstack.models._trajectory_kernels import circle_sample

COUPLING, FRAME, POSTURE = 0, 1, 2
OK, LIMIT, NULLSPACE, SINGULAR = 0, 1, 2, 3


@njit(cache=True)
def frame_states(Jw, v, jR, jp, ja, fint, fplace, fJ, fvec):
    """Every frame's pose, LOCAL_WORLD_ALIGNED Jacobian, twist and classical acceleration (module
    docstring).  Jw: data.J (6×nv); v (nv,); jR, jp, ja: tuples of the joints' R_j (3×3), p_j (3,)
    and data.a[j] (6,) (views into Pinocchio's data); fint (nf, 1+nv): [joint slot, support mask of
    the nv columns]; fplace (nf, 4, 4): ʲM_f.
    Out: fJ (nf, 6, nv); fvec (nf, 24) = [R row-major (9), p (3), twist (6), acc (6)]."""
    n = v.shape[0]
    for k in range(fint.shape[0]):
        s = fint[k, 0]
        Rj, pj, aj = jR[s], jp[s], ja[s]
        for i in range(3):
            for j in range(3):
                fvec[k, 3 * i + j] = Rj[i, 0] * fplace[k, 0, j] + Rj[i, 1] * fplace[k, 1, j] \
                    + Rj[i, 2] * fplace[k, 2, j]
            fvec[k, 9 + i] = pj[i] + Rj[i, 0] * fplace[k, 0, 3] + Rj[i, 1] * fplace[k, 1, 3] \
                + Rj[i, 2] * fplace[k, 2, 3]
        p0, p1, p2 = fvec[k, 9], fvec[k, 10], fvec[k, 11]
        t0 = t1 = t2 = t3 = t4 = t5 = 0.0
        for c in range(n):
            if fint[k, 1 + c] != 0:
                wx, wy, wz = Jw[3, c], Jw[4, c], Jw[5, c]
                j0 = Jw[0, c] + wy * p2 - wz * p1
                j1 = Jw[1, c] + wz * p0 - wx * p2
                j2 = Jw[2, c] + wx * p1 - wy * p0
                fJ[k, 0, c] = j0
                fJ[k, 1, c] = j1
                fJ[k, 2, c] = j2
                fJ[k, 3, c] = wx
                fJ[k, 4, c] = wy
                fJ[k, 5, c] = wz
                vc = v[c]
                t0 += j0 * vc
                t1 += j1 * vc
                t2 += j2 * vc
                t3 += wx * vc
                t4 += wy * vc
                t5 += wz * vc
            else:
                for i in range(6):
                    fJ[k, i, c] = 0.0
        fvec[k, 12], fvec[k, 13], fvec[k, 14] = t0, t1, t2
        fvec[k, 15], fvec[k, 16], fvec[k, 17] = t3, t4, t5
        # α = R_j α_j, a_j (world) = R_j a_j (local), at p: + α × (p − p_j), classical: + ω × v_p
        al0 = Rj[0, 0] * aj[3] + Rj[0, 1] * aj[4] + Rj[0, 2] * aj[5]
        al1 = Rj[1, 0] * aj[3] + Rj[1, 1] * aj[4] + Rj[1, 2] * aj[5]
        al2 = Rj[2, 0] * aj[3] + Rj[2, 1] * aj[4] + Rj[2, 2] * aj[5]
        a0 = Rj[0, 0] * aj[0] + Rj[0, 1] * aj[1] + Rj[0, 2] * aj[2]
        a1 = Rj[1, 0] * aj[0] + Rj[1, 1] * aj[1] + Rj[1, 2] * aj[2]
        a2 = Rj[2, 0] * aj[0] + Rj[2, 1] * aj[1] + Rj[2, 2] * aj[2]
        d0, d1, d2 = p0 - pj[0], p1 - pj[1], p2 - pj[2]
        fvec[k, 18] = a0 + al1 * d2 - al2 * d1 + t4 * t2 - t5 * t1
        fvec[k, 19] = a1 + al2 * d0 - al0 * d2 + t5 * t0 - t3 * t2
        fvec[k, 20] = a2 + al0 * d1 - al1 * d0 + t3 * t1 - t4 * t0
        fvec[k, 21], fvec[k, 22], fvec[k, 23] = al0, al1, al2


@njit(cache=True)
def task_rows(t, q, v, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, Ab):
    """Rows [A | b] of every task into Ab: each task's error dynamics from its kernel in
    ``models/_task_kernels.py`` (the functions its Python ``error_dynamics`` calls), then ``task_law``.
    tint (nt, 8) = [kind, frame slot a, frame slot b, first row in Ab, first selected row of the 6,
    selected row count, offset in pidx/qref, 1 if in the last level]; tflt (nt, 4) = [K_p, K_d, scale
    (√ω above the last level, 1 in it), ω]; tgtH (nt, 4, 4), tgtVA (nt, 12): a frame task's target pose and
    [v_D; ω_D^D; a_D; ε_D^D]; tcirc (nt, 7): [c_x, c_y, c_z, r, ω, φ, 1] for a frame task following a
    ``Circle`` (its sample at time t written here into the position and tgtVA, the orientation R given in
    tgtH), else 0 last.  tbias (nt, w ≥ 6): a bias β in the task's own axes, A v̇ = b − P β (the integral
    action K_i z of ``uk_robust.IntegralTask``; zero otherwise).  terr (nt, w) out: each task's pose error
    in its own axes, as ``Task.error`` on all rows (coupling [p₂ − p_B; Log(R_Bᵀ R₂)], frame
    [p_D − p_C; Log(R_Cᵀ R_D)], posture q_ref − q)."""
    n = v.shape[0]
    width = terr.shape[1]
    W = np.empty((width, n))
    ed = np.empty((4, width))
    R = np.empty((3, 3))
    zero = np.zeros(width)
    for k in range(tint.shape[0]):
        kind, row0, sel0, nsel = tint[k, 0], tint[k, 3], tint[k, 4], tint[k, 5]
        a, b = tint[k, 1], tint[k, 2]
        if kind == COUPLING:
            coupling_error(fvec[a], fJ[a], fvec[b], fJ[b], W, ed, R)
            m = 6
        elif kind == FRAME:
            if tcirc[k, 6] != 0.0:
                circle_sample(t, tcirc[k], tgtH[k], tgtVA[k])
            frame_error(fvec[a], fJ[a], tgtH[k], tgtVA[k], W, ed, R)
            m = 6
        else:
            off = tint[k, 6]
            m = nsel
            joint_error(q, v, pidx[off:off + m], qref[off:off + m], zero, zero, W, ed)
        for i in range(m):
            terr[k, i] = ed[3, i]
        task_law(W, ed, R, kind != POSTURE, tflt[k, 0], tflt[k, 1], tflt[k, 2], sel0, nsel, tbias[k],
                 Ab[row0:row0 + nsel, :n], Ab[row0:row0 + nsel, n])


@njit(cache=True)
def _cholesky(A, L, m):
    """L Lᵀ = A[:m, :m] (the upper triangle of A read; the lower triangle of L written), right-looking
    so that the inner loops are independent updates.  Returns False if a pivot is not > 0 (A not
    positive definite, or NaN), as LAPACK's potrf."""
    for i in range(m):
        for j in range(i + 1):
            L[i, j] = A[j, i]
    for j in range(m):
        d = L[j, j]
        if not d > 0.0:
            return False
        d = math.sqrt(d)
        L[j, j] = d
        for i in range(j + 1, m):
            L[i, j] /= d
        for i in range(j + 1, m):
            lij = L[i, j]
            for k in range(j + 1, i + 1):
                L[i, k] -= lij * L[k, j]
    return True


@njit(cache=True)
def _chol_solve(L, m, B, ncol):
    """B[:m, :ncol] ← (L Lᵀ)⁻¹ B[:m, :ncol]: forward then back substitution, a row of B at a time."""
    for i in range(m):
        for p in range(i):
            lip = L[i, p]
            for c in range(ncol):
                B[i, c] -= lip * B[p, c]
        d = L[i, i]
        for c in range(ncol):
            B[i, c] /= d
    for i in range(m - 1, -1, -1):
        for p in range(i + 1, m):
            lpi = L[p, i]
            for c in range(ncol):
                B[i, c] -= lpi * B[p, c]
        d = L[i, i]
        for c in range(ncol):
            B[i, c] /= d


@njit(cache=True)
def kkt_solve(M, h, D, v, Ab, tint, tflt, m_up, gauss, sqrt_tol, wk, out):
    """The equality-constrained last level by the Schur complement (module docstring).  gauss: 1.0 (H
    and r start from Gauss' M and −(h + D v)) or 0.0 (the last level without Gauss: H = Σ ω AᵀA,
    r = Σ ω Aᵀ b; the controller's "absorbed" plans).  wk: work array of n² + n + n² + n(m+1) + m² + m
    values, [H | r | L | X | S | L_S-diagonal]; out (3n + m): [v̇ | τ | h + D v | λ].  Returns OK,
    NULLSPACE or SINGULAR."""
    n = v.shape[0]
    m = m_up
    H = wk[:n * n].reshape(n, n)
    r = wk[n * n:n * n + n]
    o = n * n + n
    L = wk[o:o + n * n].reshape(n, n)
    o += n * n
    X = wk[o:o + n * (m + 1)].reshape(n, m + 1)
    o += n * (m + 1)
    S = wk[o:o + m * m].reshape(m, m)
    x = out[:n]
    tau = out[n:2 * n]
    hD = out[2 * n:3 * n]
    lam = out[3 * n:3 * n + m]
    for i in range(n):
        hD[i] = h[i] + D[i] * v[i]
        r[i] = -gauss * hD[i]
        for j in range(n):
            H[i, j] = gauss * M[i, j]
    for k in range(tint.shape[0]):
        if tint[k, 7] == 0:
            continue
        w = tflt[k, 3]
        row0, nsel = tint[k, 3], tint[k, 5]
        for rr in range(row0, row0 + nsel):
            b = Ab[rr, n]
            for i in range(n):
                ai = Ab[rr, i] * w
                r[i] += ai * b
                for j in range(i, n):
                    H[i, j] += ai * Ab[rr, j]
    for i in range(n):
        for j in range(i + 1, n):
            H[j, i] = H[i, j]
    if not _cholesky(H, L, n):
        return NULLSPACE if m > 0 else SINGULAR
    for i in range(n):
        for c in range(m):
            X[i, c] = Ab[c, i]
        X[i, m] = r[i]
    _chol_solve(L, n, X, m + 1)
    if m > 0:
        row = np.empty(m + 1)
        for i in range(m):                      # [S | E X_r] row i = E[i] X
            for j in range(m + 1):
                row[j] = 0.0
            for c in range(n):
                e = Ab[i, c]
                for j in range(m + 1):
                    row[j] += e * X[c, j]
            for j in range(m):
                S[i, j] = row[j]
            lam[i] = row[m] - Ab[i, n]
        LS = np.empty((m, m))
        if not _cholesky(S, LS, m):
            return NULLSPACE
        dmin = LS[0, 0]
        dmax = LS[0, 0]
        for i in range(1, m):
            dmin = min(dmin, LS[i, i])
            dmax = max(dmax, LS[i, i])
        if not dmin > sqrt_tol * dmax:
            return NULLSPACE
        lm = np.empty((m, 1))
        for i in range(m):
            lm[i, 0] = lam[i]
        _chol_solve(LS, m, lm, 1)
        for i in range(m):
            lam[i] = lm[i, 0]
    for i in range(n):
        x[i] = X[i, m]
        tau[i] = hD[i]
    for c in range(m):
        lc = lam[c]
        for i in range(n):
            x[i] -= X[i, c] * lc
    for j in range(n):
        xj = x[j]
        for i in range(n):
            tau[i] += M[i, j] * xj
    return OK


@njit(cache=True)
def effort_violated(tau, eidx, tmax):
    """|τ_i| > τ_max,i (1 + 1e-9) for some selected joint i (``EffortLimit.violated``)."""
    for k in range(eidx.shape[0]):
        if abs(tau[eidx[k]]) > tmax[k] * (1.0 + 1e-9):
            return True
    return False


@njit(cache=True)
def uk_step(t, M, h, q, v, S, Ab, out):
    """One fused step: frame_states → task_rows → kkt_solve → effort_violated.  t (s); M, h, q, v of
    this step; S: the plan's arrays in one tuple (one argument is cheaper to pass than twenty),
    (data.J, D, jR, jp, ja, fint, fplace, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr,
    m_up, gauss, √rank_tol, effort joints, τ_max, wk); Ab (rows, nv+1) and out (3 nv + m) fresh each step.
    Returns OK, LIMIT (the KKT solution violates the effort limit: the caller solves the QP),
    NULLSPACE or SINGULAR."""
    (Jw, D, jR, jp, ja, fint, fplace, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, m_up,
     gauss, sqrt_tol, eidx, tmax, wk) = S
    frame_states(Jw, v, jR, jp, ja, fint, fplace, fJ, fvec)
    task_rows(t, q, v, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, Ab)
    st = kkt_solve(M, h, D, v, Ab, tint, tflt, m_up, gauss, sqrt_tol, wk, out)
    if st == OK and effort_violated(out[v.shape[0]:2 * v.shape[0]], eidx, tmax):
        return LIMIT
    return st
