"""The step of ``ContactUKController`` compiled (numba): its rows from one Pinocchio pass, J_h's SVD, the reactions,
the strict cascade and the force choice of ``controllers/contact_uk.py`` (its module docstring has the equations),
into buffers kept between steps, instead of about 50 NumPy operations and 4 LAPACK SVDs (each LAPACK call on these
6–24-row matrices cost more than its arithmetic: an SVD of J_h took 75–200 µs on the 2-core machine, interleaved
with ``pin.constraintDynamics`` about twice that call).

**The rows from one Pinocchio pass** (``reaction_rows``, ``task_rows``): after ``pin.computeAllTerms`` (data.J,
data.oMi, M, nle, the centre of mass and its Jacobian) every frame the step names (the feet, the loops' frames, the
frame tasks') comes from ``_frame_kernels.frame_states`` (pose, LOCAL_WORLD_ALIGNED Jacobian, twist, classical
acceleration at v̇ = 0: the numbers ``Kinematics.frame`` reads from Pinocchio), then

    loop k (its rows s_k):  J_l = closure_rows,  b_l = −J̇_l v − K_d,k J_l v − K_p,k φ       (``LoopClosure.qp_rows``)
    contact i:              J_c = J_f[:3],      b_c = −J̇_c v − K_d J_c v − K_p (p − p₀)   (``PointContact.rows``)
    frame task:             (W, drift, w, e) by ``_task_kernels.frame_error``               (``FrameTask``)
    centre of mass:         W = −J_com, drift = c̈_d − J̇_com v, w = ċ_d − ċ, e = c_d − c    (``CenterOfMassTask``)
    posture:                W = −S, drift = 0, w = −v_S, e = q_ref − q_S                   (``PostureTask``)
    each task:              A = √ω W[rows],  b = √ω (−drift − K_d w − K_p e)[rows]          (``Task.compute``)

What each decomposition is, and why it gives the NumPy law's numbers to round-off:

* **J_h's SVD, once a step, by one-sided Jacobi warm-started from the last step's right singular vectors**
  (``svd_jacobi``: 3–4 sweeps; a Jacobi SVD is as accurate as LAPACK's, tests/test_contact_kernels.py compares the
  two on consecutive matrices): it truncates the reactions (σ ≤ ``rank_tol`` σ₁ dropped; J_h has a singular value
  ~1e-10–1e-6 σ₁ on the level stance, a real one, so a pivoted QR would keep a different rank-k matrix) and, when
  the passive rows add nothing to level 0 (G of full row rank, below), it *is* level 0's SVD: E₀ = [J_c; J_l] is
  J_h with its rows permuted, so E₀⁺ b₀ = V_k S_k⁻¹ U_kᵀ b_h and null(E₀) = the right singular vectors past k
  (threshold ``rank_tol`` ‖J_h‖_F, as the law's level 0).
* **G = S_P J_hᵀ of full row rank, certified by a Cholesky**: the law's rank of G counts σ_i(G) > τ_G
  (τ_G = ``force_rank_tol`` ‖G‖_F); all |P| count iff G Gᵀ − τ_G² I is positive definite, i.e. its Cholesky
  factorisation succeeds (``reactions``).  Then U_⊥ is empty (no passive row joins level 0) and
  λ_p = G⁺ S_P y = Gᵀ (G Gᵀ)⁻¹ S_P y (one refinement step), N_G = null(G) by a Householder LQ of G
  (``null_rows``); the forces λ = λ_p + N_G z*, z* = argmin of the law's quadratic, do not depend on which basis of
  null(G) is used.  When the certificate fails the caller takes the NumPy path.
* **the levels below level 0 by one-sided (Hestenes) Jacobi** (``jacobi_columns``): A_k N is at most a few rows by
  the few columns left (6 × 4 on the quadruped); its singular values, its min-norm least-squares solution and its
  null space are the SVD's (to round-off; Jacobi is an SVD), with the same truncation σ > ``rank_tol`` ‖A_k‖_F,
  without LAPACK's set-up.
* **Gauss' principle by Cholesky** of Nᵀ M N (symmetric positive definite; the law solved it by LU).

**Speed.**  These kernels are compiled with ``fastmath={"reassoc", "contract"}`` (``_FAST``): LLVM may reorder the
terms of a sum and fuse a multiply and an add, which lets it vectorise the dot products (strictly in order, each sum
waited on its previous term: the SVD's column products were latency-bound).  No other fast-math liberty is taken
(no NaN/∞ assumptions, no reciprocal approximations).  The results change at round-off only: on the 300 states of
``bench/legged.py`` for each robot, 3 passes, this and ``svd_jacobi``'s sorted order together moved τ by ≤ 1.7e-13 of
max |τ| (biped) and 1.4e-13 (quadruped), the compiled step's own distance to the NumPy law (1.4e-13 and 9.5e-14
before, 1.0e-13 and 9.6e-14 after).

tests/test_contact_kernels.py checks each kernel against its NumPy formulation and the compiled step against the
NumPy path of the law (``compiled=False``) on standing, moving, swing and cone-QP states.
"""

from __future__ import annotations

import math

import numpy as np
from numba import farray, njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.controllers import kernels
from cmstack.controllers.kernels import cholesky_inplace, cholesky_solve_inplace
from cmstack.models import _frame_kernels, _loop_kernels, _task_kernels
from cmstack.models._frame_kernels import _f64_at, frame_states, read_joint_poses
from cmstack.models._kernel_cache import depends_on
from cmstack.models._loop_kernels import closure_phi, closure_rows
from cmstack.models._task_kernels import frame_error

#: LLVM may reassociate sums and fuse multiply-adds in these kernels (module docstring, "Speed")
_FAST = {"reassoc", "contract"}

# callees in other files
depends_on(__file__, kernels, _frame_kernels, _loop_kernels, _task_kernels)


@njit(cache=True, fastmath=_FAST)
def cholesky_in_place(S, shift):
    """S ← L (lower, S − shift·I = L Lᵀ; the strict upper triangle is left as it was).  Returns False when a pivot
    is not > 0 (S − shift·I not positive definite)."""
    n = S.shape[0]
    if shift != 0.0:
        for j in range(n):
            S[j, j] -= shift  # d_j = (S_jj − shift) − Σ_k L_jk²: the same operations, in the same order
    return cholesky_inplace(S, n)


@njit(cache=True, fastmath=_FAST)
def cholesky_solve(L, b, x):
    """x = (L Lᵀ)⁻¹ b for the lower factor L (``cholesky_in_place``); x may be b."""
    for i in range(x.shape[0]):
        x[i] = b[i]
    cholesky_solve_inplace(L, L.shape[0], x)


@njit(cache=True, fastmath=_FAST)
def jacobi_columns(X, V, s):
    """One-sided Jacobi SVD: rotate the columns of X (p × q) in place until they are orthogonal (to round-off),
    accumulating the rotations in V (q × q, set to I here).  Then X = U diag(s) with unit columns U (where s > 0)
    and the input X₀ = X Vᵀ = U diag(s) Vᵀ: s (q,) the column norms, the singular values in no particular order."""
    p, q = X.shape
    for i in range(q):
        for j in range(q):
            V[i, j] = 1.0 if i == j else 0.0
    for _ in range(60):
        rotated = False
        for a in range(q - 1):
            for b in range(a + 1, q):
                al = 0.0
                be = 0.0
                g = 0.0
                for i in range(p):
                    xa, xb = X[i, a], X[i, b]
                    al += xa * xa
                    be += xb * xb
                    g += xa * xb
                if g == 0.0 or abs(g) <= 1e-15 * math.sqrt(al * be):
                    continue
                rotated = True
                z = (be - al) / (2.0 * g)
                t = (1.0 if z >= 0.0 else -1.0) / (abs(z) + math.sqrt(1.0 + z * z))
                c = 1.0 / math.sqrt(1.0 + t * t)
                sn = c * t
                for i in range(p):
                    xa, xb = X[i, a], X[i, b]
                    X[i, a] = c * xa - sn * xb
                    X[i, b] = sn * xa + c * xb
                for i in range(q):
                    va, vb = V[i, a], V[i, b]
                    V[i, a] = c * va - sn * vb
                    V[i, b] = sn * va + c * vb
        if not rotated:
            break
    for j in range(q):
        a = 0.0
        for i in range(p):
            a += X[i, j] * X[i, j]
        s[j] = math.sqrt(a)


@njit(cache=True, fastmath=_FAST)
def reactions(Jh, Uh, sh, Vth, rank_tol, truncate, P, force_rank_tol, Jk, G, S, S0):
    """The reactions of the step: Jk = J_h truncated (J_h − Σ σ_r u_r v_rᵀ over the σ_r ≤ rank_tol σ₁, from J_h's SVD
    Uh (m×m), sh, Vth (n×n); a copy of J_h when not ``truncate``), G = (Jkᵀ)[P] (|P| × m), and whether G has full
    row rank in the law's sense (module docstring: Cholesky of G Gᵀ − τ_G² I into S, |P| × |P|).  Returns that
    flag (True also when there is no passive coordinate: no passive row); S0 ← G Gᵀ."""
    m, n = Jh.shape
    if truncate and m:
        kh = 0
        for i in range(sh.size):
            if sh[i] > rank_tol * sh[0]:
                kh += 1
        for i in range(m):  # J_h minus its dropped terms (4-5 on the quadruped; the kept ones are 18)
            for j in range(n):
                a = Jh[i, j]
                for r in range(kh, sh.size):
                    a -= Uh[i, r] * sh[r] * Vth[r, j]
                Jk[i, j] = a
    else:
        for i in range(m):
            for j in range(n):
                Jk[i, j] = Jh[i, j]
    npas = P.size
    fro = 0.0
    for a in range(npas):
        for i in range(m):
            G[a, i] = Jk[i, P[a]]
            fro += G[a, i] * G[a, i]
    if npas == 0:
        return True
    for a in range(npas):
        for b in range(a + 1):
            acc = 0.0
            for i in range(m):
                acc += G[a, i] * G[b, i]
            S[a, b] = acc
            S[b, a] = acc
            S0[a, b] = acc
            S0[b, a] = acc
    tol = force_rank_tol * math.sqrt(fro)
    return cholesky_in_place(S, tol * tol)


@njit(cache=True, fastmath=_FAST)
def cascade(M, hD, E0, b0, U0, s0, Vt0, tol0, E, f, sizes, rank_tol, x, N, res):
    """v̇* of the strict levels and Gauss' principle (``contact_uk`` module docstring) into x (n,); res (1 + K,):
    each level's residual ‖A_k x − b_k‖.  Level 0 from its SVD (U0 (m0 × m0), s0, Vt0 (n × n) of E0 (m0 × n),
    kept σ > tol0); levels 1…K the next ``sizes[k]`` rows of (E, f) (weighted), each by ``jacobi_columns`` of
    A_k N with kept σ > rank_tol ‖A_k‖_F; N (n × n) the null-space basis in its first nz columns.  Returns nz."""
    n = x.size
    m0 = E0.shape[0]
    for i in range(n):
        x[i] = 0.0
    if m0 == 0:  # no level-0 row: N = I
        for i in range(n):
            for j in range(n):
                N[i, j] = 1.0 if i == j else 0.0
        nz = n
        res[0] = 0.0
    else:
        k0 = 0
        for i in range(s0.size):
            if s0[i] > tol0:
                k0 += 1
        for r in range(k0):
            c = 0.0
            for i in range(m0):
                c += U0[i, r] * b0[i]
            c /= s0[r]
            for j in range(n):
                x[j] += Vt0[r, j] * c
        nz = n - k0
        for j in range(nz):
            for i in range(n):
                N[i, j] = Vt0[k0 + j, i]
        res[0] = _residual(E0, b0, 0, m0, x)
    row = 0
    for k in range(sizes.size):
        p = sizes[k]
        if p == 0:
            res[k + 1] = 0.0
            continue
        if nz:
            nz = _level(E, f, row, p, rank_tol, x, N, nz)
        res[k + 1] = _residual(E, f, row, p, x)
        row += p
    if nz:
        _gauss(M, hD, x, N, nz)
    return nz


@njit(cache=True, fastmath=_FAST)
def _residual(E, f, row, p, x):
    r2 = 0.0
    for i in range(row, row + p):
        a = -f[i]
        for j in range(x.size):
            a += E[i, j] * x[j]
        r2 += a * a
    return math.sqrt(r2)


@njit(cache=True, fastmath=_FAST)
def _level(E, f, row, p, rank_tol, x, N, nz):
    """One strict level (rows row … row + p of E, f) in the null space N[:, :nz]: x += N (A N)⁺ (b − A x) (the
    singular values ≤ rank_tol ‖A‖_F dropped), N ← N null(A N).  Returns the new nz."""
    n = x.size
    AN = np.empty((p, nz))
    fro = 0.0
    for i in range(p):
        for j in range(n):
            fro += E[row + i, j] * E[row + i, j]
        for c in range(nz):
            a = 0.0
            for j in range(n):
                a += E[row + i, j] * N[j, c]
            AN[i, c] = a
    r = np.empty(p)
    for i in range(p):
        a = f[row + i]
        for j in range(n):
            a -= E[row + i, j] * x[j]
        r[i] = a
    V = np.empty((nz, nz))
    s = np.empty(nz)
    jacobi_columns(AN, V, s)
    tol = rank_tol * math.sqrt(fro)
    dz = np.zeros(nz)
    for c in range(nz):
        if s[c] > tol:  # AN[:, c] = σ_c u_c: the coefficient (u_c · r) / σ_c = (AN_c · r) / σ_c²
            a = 0.0
            for i in range(p):
                a += AN[i, c] * r[i]
            a /= s[c] * s[c]
            for j in range(nz):
                dz[j] += V[j, c] * a
    for i in range(n):
        a = 0.0
        for j in range(nz):
            a += N[i, j] * dz[j]
        x[i] += a
    # N ← N V[:, dropped]
    Nn = np.empty((n, nz))
    k = 0
    for c in range(nz):
        if not s[c] > tol:
            for i in range(n):
                a = 0.0
                for j in range(nz):
                    a += N[i, j] * V[j, c]
                Nn[i, k] = a
            k += 1
    for c in range(k):
        for i in range(n):
            N[i, c] = Nn[i, c]
    return k


@njit(cache=True, fastmath=_FAST)
def _gauss(M, hD, x, N, nz):
    """x += N z, (Nᵀ M N) z = −Nᵀ (M x + hD), by Cholesky."""
    n = x.size
    MN = np.empty((n, nz))
    for i in range(n):
        for c in range(nz):
            a = 0.0
            for j in range(n):
                a += M[i, j] * N[j, c]
            MN[i, c] = a
    H = np.empty((nz, nz))
    for a_ in range(nz):
        for b_ in range(a_ + 1):
            acc = 0.0
            for i in range(n):
                acc += N[i, a_] * MN[i, b_]
            H[a_, b_] = acc
            H[b_, a_] = acc
    w = np.empty(n)
    for i in range(n):
        a = hD[i]
        for j in range(n):
            a += M[i, j] * x[j]
        w[i] = a
    z = np.empty(nz)
    for c in range(nz):
        a = 0.0
        for i in range(n):
            a -= N[i, c] * w[i]
        z[c] = a
    if not cholesky_in_place(H, 0.0):  # N ᵀ M N is positive definite for M > 0; round-off: LU as the law did
        z[:] = np.linalg.solve(_sym(H), z)
    else:
        cholesky_solve(H, z, z)
    for i in range(n):
        a = 0.0
        for c in range(nz):
            a += N[i, c] * z[c]
        x[i] += a


@njit(cache=True, fastmath=_FAST)
def _sym(L):
    """The symmetric matrix whose lower triangle L holds (``cholesky_in_place`` leaves the upper one as it was)."""
    n = L.shape[0]
    H = np.empty((n, n))
    for i in range(n):
        for j in range(i + 1):
            H[i, j] = L[j, i]
            H[j, i] = L[j, i]
    return H


@njit(cache=True, fastmath=_FAST)
def null_rows(G):
    """An orthonormal basis of null(G) (m × (m − p)) for G (p × m) of full row rank (``reactions``' certificate), by a
    Householder LQ of G:  G H_0 ⋯ H_{p−1} = [L 0],  H_j = I − v_j v_jᵀ (‖v_j‖ = √2, v_j zero before j), so that with
    Q = H_0 ⋯ H_{p−1}, G Q e_c = [L 0] e_c = 0 for c ≥ p: null(G) = Q [e_p … e_{m−1}].  The reflectors act on rows
    (contiguous here; ``_qp_kernels.null_basis`` pivots the columns of Gᵀ, which full row rank does not need, and read
    them with a stride: 76 of the biped's 145 µs of algebra).  Backward stable as any Householder QR: the basis is
    null(G + δG) with ‖δG‖ ~ ε ‖G‖."""
    p, m = G.shape
    nz = m - p
    W = G.copy()
    V = np.zeros((p, m))
    for j in range(p):
        nrm = 0.0
        for i in range(j, m):
            nrm += W[j, i] * W[j, i]
        nrm = math.sqrt(nrm)
        alpha = -nrm if W[j, j] >= 0.0 else nrm
        for i in range(j, m):
            V[j, i] = W[j, i]
        V[j, j] -= alpha
        vn = 0.0
        for i in range(j, m):
            vn += V[j, i] * V[j, i]
        if vn > 0.0:
            sc = math.sqrt(2.0 / vn)
            for i in range(j, m):
                V[j, i] *= sc
        for r in range(j, p):  # W[r] ← W[r] H_j
            d = 0.0
            for i in range(j, m):
                d += W[r, i] * V[j, i]
            for i in range(j, m):
                W[r, i] -= d * V[j, i]
    B = np.zeros((nz, m))  # row c: Q e_{p+c} = H_0 (⋯ (H_{p−1} e_{p+c}))
    for c in range(nz):
        B[c, p + c] = 1.0
        for h in range(p - 1, -1, -1):
            d = 0.0
            for i in range(h, m):
                d += V[h, i] * B[c, i]
            for i in range(h, m):
                B[c, i] -= d * V[h, i]
    Ng = np.empty((m, nz))
    for c in range(nz):
        for i in range(m):
            Ng[i, c] = B[c, i]
    return Ng


@njit(cache=True, fastmath=_FAST)
def forces(Jk, G, S, y, P, A, force_reg, lam, lam_p, Hz, gz, tau_full):
    """The least-actuated-torque forces (``contact_uk`` module docstring, "Forces") when G = (Jkᵀ)[P] has full row
    rank (S: G Gᵀ from ``reactions``, factored here in place):

        λ_p = Gᵀ (G Gᵀ)⁻¹ y_P (+ one refinement),  N_G = null(G),  K = (Jkᵀ)[A],  H = Kᵀ K + ε I,
        ε = force_reg max(max_i H_ii, 1),  Hz = N_Gᵀ H N_G,  gz = N_Gᵀ (H λ_p − Kᵀ y_A),  λ = λ_p − N_G Hz⁻¹ gz

    into lam, lam_p, Hz, gz (the cone QP's problem when a force leaves its pyramid) and tau_full = y − Jkᵀ λ.
    Returns N_G (m × (m − |P|))."""
    m, n = Jk.shape
    npas, nact = P.size, A.size
    # λ_p (G Gᵀ − τ_G² I was positive definite: so is G Gᵀ)
    cholesky_in_place(S, 0.0)
    w = np.empty(npas)
    r = np.empty(npas)
    for a in range(npas):
        r[a] = y[P[a]]
    cholesky_solve(S, r, w)
    for i in range(m):
        acc = 0.0
        for a in range(npas):
            acc += G[a, i] * w[a]
        lam_p[i] = acc
    for a in range(npas):  # one refinement: λ_p += Gᵀ (G Gᵀ)⁻¹ (y_P − G λ_p)
        acc = y[P[a]]
        for i in range(m):
            acc -= G[a, i] * lam_p[i]
        r[a] = acc
    cholesky_solve(S, r, w)
    for i in range(m):
        acc = 0.0
        for a in range(npas):
            acc += G[a, i] * w[a]
        lam_p[i] += acc
    Ng = null_rows(G)
    nz = Ng.shape[1]
    # K = (Jkᵀ)[A] (nact × m): K[a, i] = Jk[i, A[a]]; ε from max_i ‖K[:, i]‖²
    hmax = 0.0
    for i in range(m):
        acc = 0.0
        for a in range(nact):
            acc += Jk[i, A[a]] * Jk[i, A[a]]
        if acc > hmax:
            hmax = acc
    eps = force_reg * max(hmax, 1.0)
    # KN = K N_G (nact × nz), Kl = K λ_p − y_A
    KN = np.empty((nact, nz))
    Kl = np.empty(nact)
    for a in range(nact):
        ja = A[a]
        for c in range(nz):
            acc = 0.0
            for i in range(m):
                acc += Jk[i, ja] * Ng[i, c]
            KN[a, c] = acc
        acc = -y[ja]
        for i in range(m):
            acc += Jk[i, ja] * lam_p[i]
        Kl[a] = acc
    # Hz = KNᵀ KN + ε I; gz = N_Gᵀ (Kᵀ (K λ_p − y_A) + ε λ_p)
    for c in range(nz):
        for d in range(c + 1):
            acc = 0.0
            for a in range(nact):
                acc += KN[a, c] * KN[a, d]
            if c == d:
                acc += eps
            Hz[c, d] = acc
            Hz[d, c] = acc
        acc = 0.0
        for a in range(nact):
            acc += KN[a, c] * Kl[a]
        for i in range(m):
            acc += eps * Ng[i, c] * lam_p[i]
        gz[c] = acc
    z = np.empty(nz)
    L = Hz.copy()
    if cholesky_in_place(L, 0.0):
        for c in range(nz):
            z[c] = -gz[c]
        cholesky_solve(L, z, z)
    else:  # (Hz ≥ ε I: cannot happen)
        z[:] = -np.linalg.solve(Hz, gz)
    for i in range(m):
        acc = lam_p[i]
        for c in range(nz):
            acc += Ng[i, c] * z[c]
        lam[i] = acc
    torque(Jk, y, lam, tau_full)
    return Ng


@njit(cache=True, fastmath=_FAST)
def torque(Jk, y, lam, tau_full):
    """tau_full = y − Jkᵀ λ."""
    m, n = Jk.shape
    for j in range(n):
        acc = y[j]
        for i in range(m):
            acc -= Jk[i, j] * lam[i]
        tau_full[j] = acc


@njit(cache=True, fastmath=_FAST)
def margins(lam, nl, Cf, crow, out):
    """Each active contact's cone margin min_r −(C_i f_i)_r (N; ``PointContact.cone_margin``): contact i's force
    λ[nl + 3i : nl + 3i + 3], its rows Cf[crow[i] : crow[i + 1]] (3 columns).  Returns the least margin (+inf
    without contacts)."""
    least = math.inf
    for i in range(out.size):
        best = -math.inf
        for r in range(crow[i], crow[i + 1]):
            a = Cf[r, 0] * lam[nl + 3 * i] + Cf[r, 1] * lam[nl + 3 * i + 1] + Cf[r, 2] * lam[nl + 3 * i + 2]
            if a > best:
                best = a
        out[i] = -best
        if -best < least:
            least = -best
    return least


@njit(cache=True, fastmath=_FAST)
def reaction_rows(
    ptr, v, jpose, fint, fplace, fJ, fvec, lint, lgain, ml, cslot, cgain, anchor, Jh, bh, jdv, phi
):
    """The frame table and the reaction rows (module docstring) after one ``pin.computeAllTerms``: ptr = [data.J,
    (R_j, p_j) of each joint of the table in data.oMi] (``step_engine.data_addresses``); lint (nl, 4) = [kind code,
    frame slot a, frame slot b, first row] and lgain (nl, 2) = [K_p, K_d] of each loop (ml rows in all); cslot (nc,),
    cgain (nc, 2) = [K_p, K_d] and anchor (nc, 3) of each active contact, whose rows follow the loops'.  Out: the
    frame table fJ, fvec, and J_h = Jh (ml + 3 nc, n), b_h = bh."""
    n = v.shape[0]
    Jw = farray(_f64_at(ptr[0]), (6, n))
    read_joint_poses(ptr, 1, jpose.shape[0], jpose)
    frame_states(Jw, v, jpose, fint, fplace, fJ, fvec)
    for k in range(lint.shape[0]):
        a, b, r0 = lint[k, 1], lint[k, 2], lint[k, 3]
        closure_rows(lint[k, 0], fvec[a], fJ[a], fvec[b], fJ[b], Jh, jdv, r0)
        mk = closure_phi(lint[k, 0], fvec[a], fvec[b], phi, r0)
        kp, kd = lgain[k, 0], lgain[k, 1]
        for i in range(r0, r0 + mk):
            jv = 0.0
            for j in range(n):
                jv += Jh[i, j] * v[j]
            bh[i] = -jdv[i] - kd * jv - kp * phi[i]
    for c in range(cslot.size):
        s = cslot[c]
        kp, kd = cgain[c, 0], cgain[c, 1]
        for i in range(3):
            r = ml + 3 * c + i
            for j in range(n):
                Jh[r, j] = fJ[s, i, j]
            b = -fvec[s, 18 + i]
            if kd:
                b = b - kd * fvec[s, 12 + i]
            if kp:
                b = b - kp * (fvec[s, 9 + i] - anchor[c, i])
            bh[r] = b


@njit(cache=True, fastmath=_FAST)
def task_rows(
    q,
    v,
    fJ,
    fvec,
    fti,
    ftf,
    fH,
    fva,
    Jcom,
    com,
    vcom,
    acom,
    cti,
    ctf,
    cdes,
    pti,
    ptf,
    pidx,
    pqidx,
    pref,
    E,
    f,
):
    """The compiled tasks' rows into E, f (module docstring):

    * frame tasks: fti (k, 4) = [frame slot, first selected row, rows, row in E], ftf (k, 3) = [K_p, K_d, √ω],
      fH (k, 4, 4) the target pose, fva (k, 12) = [velocity (6), acceleration (6)] (``FrameTask.desired``);
    * centre-of-mass tasks: Jcom (3, n) = data.Jcom, com, vcom, acom = c, ċ, J̇_com v (views of data.com[0], vcom[0],
      acom[0]);
      cti (k, 3) = [first selected axis, axes, row in E], ctf (k, 3) = [K_p, K_d, √ω], cdes (k, 9) = [c_d, ċ_d, c̈_d];
    * posture tasks: pti (k, 3) = [first joint in pidx, joints, row in E], ptf (k, 3) = [K_p, K_d, √ω]; pidx, pqidx,
      pref: each joint's v index, q index and q_ref."""
    n = v.shape[0]
    W = np.empty((6, n))
    ed = np.empty((4, 6))
    R = np.empty((3, 3))
    for k in range(fti.shape[0]):
        s, sel0, nsel, row = fti[k, 0], fti[k, 1], fti[k, 2], fti[k, 3]
        kp, kd, sw = ftf[k, 0], ftf[k, 1], ftf[k, 2]
        frame_error(fvec[s], fJ[s], fH[k], fva[k], 0, 6, 1.0, W, 0, ed, R)
        for i in range(nsel):
            r = sel0 + i
            for j in range(n):
                E[row + i, j] = sw * W[r, j]
            f[row + i] = sw * (-ed[0, r] - kd * ed[1, r] - kp * ed[2, r])
    for k in range(cti.shape[0]):
        sel0, nsel, row = cti[k, 0], cti[k, 1], cti[k, 2]
        kp, kd, sw = ctf[k, 0], ctf[k, 1], ctf[k, 2]
        for i in range(nsel):
            r = sel0 + i
            for j in range(n):
                E[row + i, j] = sw * -Jcom[r, j]
            drift = cdes[k, 6 + r] - acom[r]
            w = cdes[k, 3 + r] - vcom[r]
            e = cdes[k, r] - com[r]
            f[row + i] = sw * (-drift - kd * w - kp * e)
    for k in range(pti.shape[0]):
        j0, nj, row = pti[k, 0], pti[k, 1], pti[k, 2]
        kp, kd, sw = ptf[k, 0], ptf[k, 1], ptf[k, 2]
        for i in range(nj):
            jv, jq = pidx[j0 + i], pqidx[j0 + i]
            for j in range(n):
                E[row + i, j] = 0.0
            E[row + i, jv] = sw * -1.0
            f[row + i] = sw * (-0.0 - kd * (0.0 - v[jv]) - kp * (pref[j0 + i] - q[jq]))


@njit(cache=True, fastmath=_FAST)
def algebra(
    M, h, D, v, Jh, bh, Uh, sh, Vth, rank_tol, truncate, P, A, force_rank_tol, force_reg, E, f, sizes, Cf3, crow,
    nl, Jk, G, S, S0, hD, x, N, res, y, lam, lam_p, Hz, gz, tau_full, tau, mg, F,
):  # fmt: skip
    """The whole algebra of one step after J_h's SVD, in one call: ``reactions``, ``cascade`` (v̇* into x),
    y = M v̇* + h + D v, ``forces``, ``margins``, τ = Sᵀ S_A (y − Jkᵀ λ) into tau (zero on P) and each active
    contact's force into F (nc, 3).  Returns (G of full row rank, N_G, least cone margin, ‖S_P (y − Jkᵀ λ)‖_∞);
    when the first is False nothing after ``reactions`` is computed (the caller's NumPy path)."""
    n = v.size
    if not reactions(Jh, Uh, sh, Vth, rank_tol, truncate, P, force_rank_tol, Jk, G, S, S0):
        return False, np.zeros((0, 0)), 0.0, 0.0
    fro = 0.0
    for i in range(Jh.shape[0]):
        for j in range(n):
            fro += Jh[i, j] * Jh[i, j]
    for i in range(n):
        hD[i] = h[i] + D[i] * v[i]
    cascade(M, hD, Jh, bh, Uh, sh, Vth, rank_tol * math.sqrt(fro), E, f, sizes, rank_tol, x, N, res)
    for i in range(n):
        a = hD[i]
        for j in range(n):
            a += M[i, j] * x[j]
        y[i] = a
    Ng = forces(Jk, G, S0, y, P, A, force_reg, lam, lam_p, Hz, gz, tau_full)
    least = margins(lam, nl, Cf3, crow, mg)
    pres = finish(tau_full, lam, nl, P, A, tau, F)
    return True, Ng, least, pres


@njit(cache=True, fastmath=_FAST)
def finish(tau_full, lam, nl, P, A, tau, F):
    """τ = tau_full on A, 0 on P; F[i] = contact i's force; returns max_P |tau_full| (the passive residual)."""
    for i in range(tau.size):
        tau[i] = 0.0
    for a in range(A.size):
        tau[A[a]] = tau_full[A[a]]
    pres = 0.0
    for a in range(P.size):
        t = abs(tau_full[P[a]])
        if t > pres:
            pres = t
    for i in range(F.shape[0]):
        for k in range(3):
            F[i, k] = lam[nl + 3 * i + k]
    return pres


#: sweeps after which ``svd_jacobi`` gives up (the caller then takes LAPACK's SVD)
JACOBI_SWEEPS = 30


@njit(cache=True, fastmath=_FAST)
def svd_jacobi(A, Vw, Uh, sh, Vth, reortho):
    """The SVD of A (m × n) by one-sided Jacobi started from the previous step's right singular vectors: Vw (n × n,
    rows; in: the last call's, I at first; out: this call's; when ``reortho``, re-orthonormalised first by modified
    Gram–Schmidt, so that round-off does not build up over the steps: the caller asks every 16 calls, ~1e-15 of
    drift a call).  The rows of X = Vw Aᵀ (A v_j) are rotated pairwise until
    orthogonal (Hestenes: a pair is rotated while |x_a·x_b| > 1e-15 ‖x_a‖ ‖x_b‖; rows of norm ≤ 1e-15 ‖A‖_F, zero to
    working precision, are left as they are), Vw alike, so that A = Σ_j x_j v_jᵀ with orthogonal x_j: σ_j = ‖x_j‖,
    u_j = x_j / σ_j.  A sweep whose largest |cos| was ≤ 1e-8 ends it (Jacobi converges quadratically: the next would
    rotate by ≤ 1e-16).  The pairs (a, b) are visited row by row in the order of the rows' norms at the start, largest
    first: the last step's null-space rows, whose images A v_j are small but not zero once A has moved (1e-8–1e-6 of
    ‖A‖ between the bench's states) and point along the range rows, then come last in every row's pairs, after that
    row's own rotations in the sweep, so that one sweep takes them to round-off; in the stored order they took one
    more sweep for each factor ~1e-3 (biped: 3–5 sweeps, now 2–3; the same SVD to round-off,
    tests/test_contact_kernels.py).  Out, sorted by σ (descending): sh (n,), Uh (m × n; the columns of σ = 0 are
    0), Vth (n × n, rows).  Returns the sweeps done (``JACOBI_SWEEPS``: not converged)."""
    m, n = A.shape
    for j in range(n if reortho else 0):
        for k in range(j):
            d = 0.0
            for i in range(n):
                d += Vw[j, i] * Vw[k, i]
            for i in range(n):
                Vw[j, i] -= d * Vw[k, i]
        d = 0.0
        for i in range(n):
            d += Vw[j, i] * Vw[j, i]
        d = 1.0 / math.sqrt(d)
        for i in range(n):
            Vw[j, i] *= d
    X = np.empty((n, m))
    fro = 0.0
    for j in range(n):
        for i in range(m):
            a = 0.0
            for k in range(n):
                a += A[i, k] * Vw[j, k]
            X[j, i] = a
            fro += a * a
    tiny = 1e-30 * fro
    nrm = np.empty(n)
    order = np.arange(n)
    sweeps = JACOBI_SWEEPS
    for sweep in range(JACOBI_SWEEPS):
        for j in range(n):
            a = 0.0
            for i in range(m):
                a += X[j, i] * X[j, i]
            nrm[j] = a
        worst = 0.0
        if sweep == 0:  # the pairs in the order of the rows' norms at the start, largest first (docstring)
            order = np.argsort(-nrm)
        for ia in range(n - 1):
            a_ = order[ia]
            xa = X[a_]
            wa = Vw[a_]
            for ib in range(ia + 1, n):
                b_ = order[ib]
                al, be = nrm[a_], nrm[b_]
                if al <= tiny or be <= tiny:
                    continue
                xb = X[b_]
                g = 0.0
                for i in range(m):
                    g += xa[i] * xb[i]
                rel = abs(g) / math.sqrt(al * be)
                if rel <= 1e-15:
                    continue
                if rel > worst:
                    worst = rel
                z = (be - al) / (2.0 * g)
                t = (1.0 if z >= 0.0 else -1.0) / (abs(z) + math.sqrt(1.0 + z * z))
                c = 1.0 / math.sqrt(1.0 + t * t)
                sn = c * t
                for i in range(m):
                    u, w = xa[i], xb[i]
                    xa[i] = c * u - sn * w
                    xb[i] = sn * u + c * w
                wb = Vw[b_]
                for i in range(n):
                    u, w = wa[i], wb[i]
                    wa[i] = c * u - sn * w
                    wb[i] = sn * u + c * w
                nrm[a_] = al - t * g
                nrm[b_] = be + t * g
        if worst <= 1e-8:
            sweeps = sweep + 1
            break
    for j in range(n):
        a = 0.0
        for i in range(m):
            a += X[j, i] * X[j, i]
        nrm[j] = math.sqrt(a)
    order = np.argsort(-nrm)
    for r in range(n):
        j = order[r]
        s = nrm[j]
        sh[r] = s
        for i in range(n):
            Vth[r, i] = Vw[j, i]
        for i in range(m):
            Uh[i, r] = X[j, i] / s if s > 0.0 else 0.0
    return sweeps


@njit(cache=True, fastmath=_FAST)
def rows(
    ptr, q, v, jpose, fint, fplace, fJ, fvec, lint, lgain, ml, cslot, cgain, anchor, Jh, bh, jdv, phi, fti, ftf, fH,
    fva, Jcom, com, vcom, acom, cti, ctf, cdes, pti, ptf, pidx, pqidx, pref, E, f,
):  # fmt: skip
    """``reaction_rows`` then ``task_rows`` in one call (their arguments, in order)."""
    reaction_rows(
        ptr, v, jpose, fint, fplace, fJ, fvec, lint, lgain, ml, cslot, cgain, anchor, Jh, bh, jdv, phi
    )
    task_rows(
        q,
        v,
        fJ,
        fvec,
        fti,
        ftf,
        fH,
        fva,
        Jcom,
        com,
        vcom,
        acom,
        cti,
        ctf,
        cdes,
        pti,
        ptf,
        pidx,
        pqidx,
        pref,
        E,
        f,
    )
