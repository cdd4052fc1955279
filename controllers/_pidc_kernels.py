"""Compiled kernel of PIDC's step with several constraint rows ([Aghili] §7.1, §7.4; ``controllers/pidc.py``):
the law of ``PIDC._numpy_step`` (its reference, kept) without its three SVDs, in one ``numba.njit(cache=True)``
call on arrays the caller computed (M, h, the constraint rows A, Ȧq̇, the coordinates' rows).  The one-row
case has its own closed form (``controllers/kernels.py: pidc_one_row``).

Factorizations.  Every pseudo-inverse of the NumPy path is the truncated Moore–Penrose inverse of a small
matrix X (p×s) (singular values at or below a threshold dropped).  Here it is a complete orthogonal
decomposition (COD) from two Householder QR factorizations, O(p s min(p, s)) flops with no iteration
(``controllers/kernels.py``: ``qr_pivot``, ``cod_factor``, ``cod_pinv_apply``):

    X Π = Q [R₁₁ R₁₂; 0 R₂₂]      (QR with column pivoting: |R₁₁| decreasing on the diagonal; stop at the
                                   first step whose largest remaining column norm ρ is at or below the
                                   threshold: rank r, R₂₂ dropped, ‖R₂₂‖₂ ≤ √(s−r) ρ)
    T = [R₁₁ R₁₂] (r×s),   Tᵀ = Z [U; 0]   (QR of Tᵀ, U r×r upper triangular, nonsingular)
    X ≈ Q_r T Πᵀ = Q_r Uᵀ Z_rᵀ Πᵀ,   X⁺ = Π Z_r U⁻ᵀ Q_rᵀ

(check: X X⁺ = Q_r Q_rᵀ and X⁺ X = Π Z_r Z_rᵀ Πᵀ, both symmetric projectors, so the four Penrose conditions
hold).  The rank test is on the pivoted column norms instead of the singular values; the two agree whenever
no singular value lies near the threshold, as on every state of the shipped mechanisms (the planar
closures' rows that vanish identically give ρ ~ 1e-17, the kept ones are of order 0.01–1).  ``dropped
column norm ≤ tol`` stands for ``σ ≤ tol`` (absolute, the projector's ``rank_tol``) and ``≤ rtol·|R₀₀|`` for
``σ ≤ rtol·σ₁`` (relative, ``_RTOL``; |R₀₀| is the largest column norm, σ₁/√s ≤ |R₀₀| ≤ σ₁).

The constraint's rank threshold.  A user's ``rank_tol`` is absolute.  PIDC's default (``prm``'s κ > 0,
``controllers/pidc.py``: "The rank tolerance") scales with what it compares: at a state whose loops are open by
the gaps d = p_b − p_a (a soft plant's), tol = max(τ₀·max(1, s_A), min(κ‖d‖, ρ s_A)) with τ₀ = prm[0], s_A = the
largest row norm of A (|R₀₀| of the COD of Aᵀ, within √m of σ₁), κ = 10√n and ρ = 10⁻³ (one row keeps τ₀).
``pidc_closed_step`` takes the gaps from its frame table (every closure but a plane's); ``pidc_rows`` is given ‖d‖
by its caller.

The step.  A (m×n) the loops' rows, Ȧq̇ = jdv.  The COD of Aᵀ (n×m): Aᵀ Π = Q R, rank r, Y = Q[:, :r] an
orthonormal basis of range(Aᵀ), N = Q[:, r:] one of N(A) (Q is orthogonal), so

    P = I − A⁺A = N Nᵀ,   A⁺ = (Aᵀ⁺)ᵀ = Q_r U⁻¹ Z_rᵀ Πᵀ,   C q̇ = −A⁺ Ȧq̇   (14)

Motion (46).  With coordinates' rows B₀ (k×n) and right-hand side y (joints: B₀ = S, y = u − S C q̇; tasks:
B₀ = A_t, y = b_t − A_t C q̇), the NumPy path's z = (B₀ P)⁺ y, q̈ = C q̇ + P z.  Since B₀ P = (B₀ N) Nᵀ and Nᵀ
has orthonormal rows, (B₀ P)⁺ = N (B₀ N)⁺ with the same nonzero singular values (the same relative
truncation), and P N = N:

    q̈_des = C q̇ + N (B₀ N)⁺ y        ((B₀ N)⁺ by the COD of the k×(n−r) matrix B₀ N)

Passive joints (60–62).  With S_p the passive rows, (I − B)(I − P) = S_pᵀ (S_p Y) Yᵀ, whose nonzero singular
values are those of C = S_p Y (p×r); [(I − B)(I − P)]⁺ = Y C⁺ S_p, hence

    τ = τ_∥ − (I − P)[(I − B)(I − P)]⁺(I − B) τ_∥ = τ_∥ − Y C⁺ (τ_∥)_p,   τ_∥ = N Nᵀ b,  b = M q̈_des + h + D q̇

and the residual ‖τ_p‖ of (58).  Constraint force (32) f_c = (I − P) r = Y Yᵀ r, r = M q̈_des + h + D q̇ − τ, and its
multipliers λ = A⁺ᵀ f_c = Π Z_r U⁻ᵀ Q_rᵀ f_c (the COD of Aᵀ applied to f_c).

tests/test_pidc_kernels.py compares every output with ``PIDC._numpy_step`` on closed-loop states of the
shipped mechanisms and on random rank-deficient matrices (the COD against NumPy's pinv).
"""

from __future__ import annotations

import math

import numpy as np
from numba import carray, farray, njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.controllers import _uk_kernels, kernels
from cmstack.controllers._uk_kernels import _f64_at, _i64_at, bias_forces, frame_states, task_rows_into
from cmstack.controllers.kernels import (
    ABS,
    REL,
    _sinusoid_reference,
    apply_q,
    apply_qt,
    cod_factor,
    cod_pinv_apply,
    cod_pinv_from_qty,
    generalized_force,
)
from cmstack.models import _frame_kernels, _loop_kernels, _task_kernels, _trajectory_kernels
from cmstack.models._frame_kernels import read_joint_poses
from cmstack.models._kernel_cache import depends_on
from cmstack.models._loop_kernels import PLANE, closure_rows
from cmstack.models.trajectory import CIRCLE_ROW

# numba's cache does not see a change of a callee in another file: the kernels here call these (task_rows_into calls
# the task and trajectory kernels)
depends_on(__file__, kernels, _uk_kernels, _frame_kernels, _loop_kernels, _task_kernels, _trajectory_kernels)

OK, SINGULAR_ROWS, NONFINITE_ROWS, NONFINITE_STATE = 0, 1, 2, 3


@njit(cache=True)
def pidc_rows(
    M: np.ndarray,
    h: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    A: np.ndarray,
    jdv: np.ndarray,
    B0: np.ndarray,
    t: float,
    ref: np.ndarray,
    sinus: bool,
    prm: np.ndarray,
    ints: np.ndarray,
    work: np.ndarray,
    out: np.ndarray,
    phin: float,
) -> tuple[int, int, float, float, bool]:
    """One PIDC step with the m constraint rows A (m×n) and Ȧq̇ = jdv (m), as ``PIDC._numpy_step`` without
    weights, QP or force loop (module docstring).  Coordinates: ``B0`` (k×n) the task rows with the right-hand
    side b_t in ``ref[0]`` (ints[1] = 1), or joint coordinates (ints[1] = 0: B₀ = S, the joints ints[4:4+k],
    u = θ̈_d + K_v(θ̇_d − q̇_S) + K_p(θ_d − q_S) from ``ref`` = [θ_d; θ̇_d; θ̈_d] (3, k), written from the
    sinusoid in ``prm`` when ``sinus``, as ``pidc_one_row``).
    prm = [rank_tol, rtol, solve_tol, D (n), K_p (k), K_v (k), c, α, ω, φ (k each), κ, ρ]; ints = [m, task?, k, p,
    coordinate joints (k), passive joints (p)]; work: scratch (``pidc_rows_work``); phin: the loops' gap
    ‖d‖ (read when κ > 0: the rank threshold of the module docstring; κ = 0: rank_tol, absolute).
    Writes out (4n + m) = [q̈_des (n), τ_∥ (n), τ (n), f_c (n), λ (m)]; returns (status, rank, residual, ‖b‖,
    unsolvable): status 0 ok, 2 a non-finite A or Ȧq̇, 3 a non-finite q or q̇; unsolvable: the passive
    residual exceeds solve_tol·max(1, ‖b‖) (58), τ is then zeroed on the passive joints (as the NumPy path)."""
    n = v.shape[0]  # q (nq,) a point of the joint manifold: nq ≠ n with a ball joint
    chk = 0.0
    for i in range(q.shape[0]):
        chk += q[i]
    for i in range(n):
        chk += v[i]
    if not math.isfinite(chk):
        return NONFINITE_STATE, 0, 0.0, 0.0, False
    m, k, np_ = ints[0], ints[2], ints[3]
    L = max(n, m, k, np_) + 1
    piv = np.empty(4 * L, np.int64)
    st, r, res, bn, unsolvable = _law(M, h, q, v, A, jdv, B0, t, ref, sinus, prm, ints, work, piv, out, phin)
    return st, r, res, bn, unsolvable


@njit(cache=True, inline="always")
def _constraint_basis(
    A: np.ndarray,
    jdv: np.ndarray,
    n: int,
    m: int,
    rank_tol: float,
    Xa: np.ndarray,
    Za: np.ndarray,
    Qf: np.ndarray,
    pa: np.ndarray,
    ta: np.ndarray,
    za: np.ndarray,
    w1: np.ndarray,
    cv: np.ndarray,
) -> int:
    """The COD of Aᵀ (n×m, module docstring): its rank r (returned), Q = [Y N] written whole into Qf (n×n), the
    factors kept in Xa, Za, pa, ta, za; and the constrained acceleration
    cv = C q̇ = −A⁺ Ȧq̇ = −Q_r U⁻¹ Z_rᵀ Πᵀ Ȧq̇ (14)."""
    for i in range(n):
        for c in range(m):
            Xa[i, c] = A[c, i]
    r = cod_factor(Xa, n, m, rank_tol, ABS, pa, ta, Za, za)
    for c in range(n):  # column c of Q = Q e_c
        for i in range(n):
            w1[i] = 1.0 if i == c else 0.0
        apply_q(Xa, n, r, ta, w1)
        for i in range(n):
            Qf[i, c] = w1[i]
    for i in range(m):
        w1[i] = jdv[pa[i]]
    apply_qt(Za, m, r, za, w1)
    for i in range(r - 1, -1, -1):  # U x = w1[:r]: back substitution
        x = w1[i]
        for c in range(i + 1, r):
            x -= Za[i, c] * w1[c]
        w1[i] = x / Za[i, i]
    for i in range(n):
        x = 0.0
        for j in range(r):
            x += Qf[i, j] * w1[j]
        cv[i] = -x
    return r


@njit(cache=True, inline="always")
def _coordinate_rows(
    q: np.ndarray,
    v: np.ndarray,
    B0: np.ndarray,
    t: float,
    ref: np.ndarray,
    sinus: bool,
    prm: np.ndarray,
    task: int,
    n: int,
    k: int,
    r: int,
    d: int,
    ci: np.ndarray,
    Qf: np.ndarray,
    cv: np.ndarray,
    Xb: np.ndarray,
    yv: np.ndarray,
) -> None:
    """The coordinates' rows in the null space X = B₀ N (k×d, into Xb) and their right-hand side y (into yv):
    tasks (task = 1) y = b_t − A_t C q̇ with b_t in ref[0]; joints y = θ̈_d + K_v(θ̇_d − q̇_S) + K_p(θ_d − q_S) − S C q̇,
    ref = [θ_d; θ̇_d; θ̈_d] written first from the sinusoid θ_d = c + α sin(ω t + φ) of ``prm`` when ``sinus``."""
    if task == 1:
        for i in range(k):
            x = ref[0, i]
            for c in range(n):
                x -= B0[i, c] * cv[c]
            yv[i] = x
            for j in range(d):
                x = 0.0
                for c in range(n):
                    x += B0[i, c] * Qf[c, r + j]
                Xb[i, j] = x
    else:
        o2 = 3 + n + 2 * k
        if sinus:
            _sinusoid_reference(t, prm, o2, ref)
        for i in range(k):
            c = ci[i]
            e = ref[0, i] - q[c]
            ed = ref[1, i] - v[c]
            yv[i] = ref[2, i] + prm[3 + n + k + i] * ed + prm[3 + n + i] * e - cv[c]
            for j in range(d):
                Xb[i, j] = Qf[c, r + j]


@njit(cache=True, inline="always")
def _span(Qf: np.ndarray, n: int, j0: int, nj: int, w: np.ndarray, out: np.ndarray) -> None:
    """out = Q[:, j0:j0+nj] w[:nj] (n): a vector of the span of nj columns of Q (Y: j0 = 0, N: j0 = r)."""
    for i in range(n):
        x = 0.0
        for j in range(nj):
            x += Qf[i, j0 + j] * w[j]
        out[i] = x


@njit(cache=True, inline="always")
def _project_on_columns(
    Qf: np.ndarray, n: int, j0: int, nj: int, y: np.ndarray, w: np.ndarray, out: np.ndarray
) -> None:
    """out = Q_J Q_Jᵀ y (n) for the nj orthonormal columns J = j0 … j0+nj−1 of Q: N Nᵀ y = P y (j0 = r) or
    Y Yᵀ y = (I − P) y (j0 = 0); the coefficients Q_Jᵀ y are left in w[:nj]."""
    for j in range(nj):
        x = 0.0
        for c in range(n):
            x += Qf[c, j0 + j] * y[c]
        w[j] = x
    _span(Qf, n, j0, nj, w, out)


@njit(cache=True, inline="always")
def _passive_correction(
    Qf: np.ndarray,
    n: int,
    r: int,
    np_: int,
    pj: np.ndarray,
    rtol: float,
    tau_par: np.ndarray,
    Xb: np.ndarray,
    Zb: np.ndarray,
    pb: np.ndarray,
    tb: np.ndarray,
    zb: np.ndarray,
    yv: np.ndarray,
    w1: np.ndarray,
    w2: np.ndarray,
    cv: np.ndarray,
    tau: np.ndarray,
) -> float:
    """τ = τ_∥ − Y C⁺ (τ_∥)_p with C = S_p Y (p×r) (60–62): the passive joints' share moved into the
    constraint space (cv is scratch here); returns the residual ‖τ_p‖ of (58)."""
    if r > 0:
        for i in range(np_):
            yv[i] = tau_par[pj[i]]
            for j in range(r):
                Xb[i, j] = Qf[pj[i], j]
        rc = cod_factor(Xb, np_, r, rtol, REL, pb, tb, Zb, zb)
        cod_pinv_apply(Xb, np_, r, rc, pb, tb, Zb, zb, yv, w1, w2)
        _span(Qf, n, 0, r, w2, cv)
        for i in range(n):
            tau[i] -= cv[i]
    res = 0.0
    for i in range(np_):
        res += tau[pj[i]] * tau[pj[i]]
    return math.sqrt(res)


@njit(cache=True, inline="always")
def _law(
    M: np.ndarray,
    h: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    A: np.ndarray,
    jdv: np.ndarray,
    B0: np.ndarray,
    t: float,
    ref: np.ndarray,
    sinus: bool,
    prm: np.ndarray,
    ints: np.ndarray,
    work: np.ndarray,
    piv: np.ndarray,
    out: np.ndarray,
    phin: float,
) -> tuple[int, int, float, float, bool]:  # the types of pidc_rows'; piv: int64
    """``pidc_rows`` after the state's test, with the caller's pivot scratch piv (4 L ints, L = max(n, m, k, p) + 1);
    its arrays' parts are views made from addresses (``carray``: no reference counts for the calls below).
    phin: the loops' gap ‖d‖, for the rank threshold (module docstring)."""
    n = v.shape[0]
    m, task, k, np_ = ints[0], ints[1], ints[2], ints[3]
    i0 = ints.ctypes.data
    ci = carray(_i64_at(i0 + 8 * 4), (k,))
    pj = carray(_i64_at(i0 + 8 * (4 + k)), (np_,))
    rank_tol, rtol, solve_tol = prm[0], prm[1], prm[2]
    D = carray(_f64_at(prm.ctypes.data + 8 * 3), (n,))
    o0 = out.ctypes.data
    qdd = carray(_f64_at(o0), (n,))
    tau_par = carray(_f64_at(o0 + 8 * n), (n,))
    tau = carray(_f64_at(o0 + 16 * n), (n,))
    fc = carray(_f64_at(o0 + 24 * n), (n,))
    lam = carray(_f64_at(o0 + 32 * n), (m,))
    chk = 0.0
    s2 = 0.0  # the largest squared row norm of A
    for i in range(m):
        chk += jdv[i]
        x = 0.0
        for c in range(n):
            chk += A[i, c]
            x += A[i, c] * A[i, c]
        s2 = max(s2, x)
    if not math.isfinite(chk):
        return NONFINITE_ROWS, 0, 0.0, 0.0, False
    kappa = prm[3 + n + 6 * k]
    if kappa > 0.0 and m > 1:  # the default threshold (module docstring; one row: τ₀)
        s_a = math.sqrt(s2)
        rank_tol = max(rank_tol * max(1.0, s_a), min(kappa * phin, prm[4 + n + 6 * k] * s_a))
    # scratch layout: Aᵀ then its QR (n×L), Tᵀ of A's COD (L×L), Q = [Y N] (n×n), B₀N or C = S_p Y and its
    # second factor (L×L each), six vectors of L, then cv (n), yv (L), bv (n)
    L = max(n, m, k, np_) + 1
    w0 = work.ctypes.data
    Xa = carray(_f64_at(w0), (n, L))
    Za = carray(_f64_at(w0 + 8 * n * L), (L, L))
    Qf = carray(_f64_at(w0 + 8 * (n * L + L * L)), (n, n))
    Xb = carray(_f64_at(w0 + 8 * (n * L + L * L + n * n)), (L, L))
    Zb = carray(_f64_at(w0 + 8 * (n * L + 2 * L * L + n * n)), (L, L))
    o = n * L + 3 * L * L + n * n
    vecs = carray(_f64_at(w0 + 8 * o), (6, L))
    ta, za, tb, zb, w1, w2 = vecs[0], vecs[1], vecs[2], vecs[3], vecs[4], vecs[5]
    o += 6 * L
    cv = carray(_f64_at(w0 + 8 * o), (n,))
    yv = carray(_f64_at(w0 + 8 * (o + n)), (L,))
    bv = carray(_f64_at(w0 + 8 * (o + n + L)), (n,))
    pa = carray(_i64_at(piv.ctypes.data), (2 * L,))
    pb = carray(_i64_at(piv.ctypes.data + 16 * L), (2 * L,))
    r = _constraint_basis(A, jdv, n, m, rank_tol, Xa, Za, Qf, pa, ta, za, w1, cv)
    d = n - r
    # q̈_des = C q̇ + N (B₀N)⁺ y
    _coordinate_rows(q, v, B0, t, ref, sinus, prm, task, n, k, r, d, ci, Qf, cv, Xb, yv)
    for i in range(n):
        qdd[i] = cv[i]
    if d > 0 and k > 0:
        rb = cod_factor(Xb, k, d, rtol, REL, pb, tb, Zb, zb)
        cod_pinv_apply(Xb, k, d, rb, pb, tb, Zb, zb, yv, w1, w2)  # w2 = (B₀N)⁺ y
        _span(Qf, n, r, d, w2, cv)
        for i in range(n):
            qdd[i] += cv[i]
    bn = generalized_force(M, h, D, v, qdd, bv)  # b = M q̈_des + h + D q̇
    _project_on_columns(Qf, n, r, d, bv, w1, tau_par)  # τ_∥ = N Nᵀ b
    for i in range(n):
        tau[i] = tau_par[i]
    res = 0.0
    unsolvable = False
    if np_ > 0:
        res = _passive_correction(Qf, n, r, np_, pj, rtol, tau_par, Xb, Zb, pb, tb, zb, yv, w1, w2, cv, tau)
        if res > solve_tol * max(1.0, bn):
            unsolvable = True
            for i in range(np_):
                tau[pj[i]] = 0.0
    # f_c = Y Yᵀ (b − τ),  λ = A⁺ᵀ f_c = Π Z_r U⁻ᵀ Q_rᵀ f_c  (Q_rᵀ Y Yᵀ = Yᵀ: Q_rᵀ f_c = Yᵀ (b − τ))
    for i in range(n):
        bv[i] -= tau[i]
    _project_on_columns(Qf, n, 0, r, bv, w1, fc)
    cod_pinv_from_qty(Za, m, r, za, pa, w1, lam)
    return OK, r, res, bn, unsolvable


#: header of the plan's integer table I (``ClosedChainPlan``): sizes, then offsets into I and into the float table F
(
    H_N,
    H_M,
    H_K,
    H_NF,
    H_NJ,
    H_NT,
    H_NROWS,
    H_SINUS,
    H_O_INTS,
    H_N_INTS,
    H_O_FINT,
    H_O_LINT,
    H_NL,
    H_O_TINT,
    H_O_PIDX,
    H_N_PIDX,
    H_O_PRM,
    H_N_PRM,
    H_O_FPLACE,
    H_O_FJ,
    H_O_FVEC,
    H_O_JPOSE,
    H_O_A,
    H_O_JDV,
    H_O_TFLT,
    H_O_TGTH,
    H_O_TGTVA,
    H_O_TCIRC,
    H_O_TBIAS,
    H_O_TERR,
    H_O_AB,
    H_O_REF,
    H_O_WORK,
    H_N_WORK,
    H_O_QREF,
    H_O_PARENT,
    H_O_INERT,
    H_O_GRAV,
    H_O_RNEA,
    H_O_H,
    H_O_PIV,
    H_O_SCR,
    H_NQ,  # nq: the configuration's size (a ball joint's quaternion: nq ≠ n); every other table is sized by n
) = range(43)
HEADER = 48
#: what ``pidc_closed_step`` returns besides ``pidc_rows``' statuses: solved, but the passive residual fails (58)
UNSOLVABLE = 4


@njit(cache=True)
def pidc_closed_step(
    t: float, q: np.ndarray, v: np.ndarray, ptr: np.ndarray, I: np.ndarray, F: np.ndarray, out: np.ndarray
) -> int:
    """The whole closed-chain step after the robot's lean pass (``Robot.update_for_kernel``: ``pin.crba`` in the
    WORLD convention; ``controllers/pidc_plan.py``): Pinocchio's data read at the addresses ``ptr`` = [data.J,
    data.M, (R_j, p_j) of every joint in data.oMi] (Eigen's column-major storage, refreshed in place); h by the
    recursive Newton–Euler pass of ``_uk_kernels.bias_forces`` (no ``pin.nonLinearEffects``), the frames
    (``_uk_kernels.frame_states``: their classical accelerations at v̇ = 0 from data.J and v), the loops' rows
    (``models/_loop_kernels.closure_rows``), the task coordinates' rows (``_uk_kernels.task_rows_into``, their
    right-hand sides into ref[0]) and the law of ``pidc_rows``.  I, F: the plan's integer and float tables (a
    header of sizes and offsets, ``HEADER`` ints, then every table), so that a call passes seven arguments; every
    table's view is made from its address (``carray``: no size checks, no reference counts).
    out (5n + nq + m + 2) = [q̈_des, τ_∥, τ, f_c (n each), λ (m), q (nq), v (the step's copies), rank, passive
    residual].
    Returns a status: OK, UNSOLVABLE (solved, but the passive residual exceeds solve_tol·max(1, ‖b‖), (58): τ
    zeroed on the passive joints), NONFINITE_ROWS (a non-finite A or Ȧq̇) or NONFINITE_STATE (|q|² + |v|² is not
    finite; nothing else is computed)."""
    n, nq = I[H_N], I[H_NQ]
    chk = 0.0
    for i in range(nq):
        chk += q[i] * q[i]
    for i in range(n):
        chk += v[i] * v[i]
    if not math.isfinite(chk):
        return NONFINITE_STATE
    m, k, nf, nj, nt, nrows, nl = I[H_M], I[H_K], I[H_NF], I[H_NJ], I[H_NT], I[H_NROWS], I[H_NL]
    i0, f0, o0 = I.ctypes.data, F.ctypes.data, out.ctypes.data
    ints = carray(_i64_at(i0 + 8 * I[H_O_INTS]), (I[H_N_INTS],))
    fint = carray(_i64_at(i0 + 8 * I[H_O_FINT]), (nf, n + 1))
    lint = carray(_i64_at(i0 + 8 * I[H_O_LINT]), (nl, 4))
    tint = carray(_i64_at(i0 + 8 * I[H_O_TINT]), (nt, 8))
    pidx = carray(_i64_at(i0 + 8 * I[H_O_PIDX]), (I[H_N_PIDX],))
    parent = carray(_i64_at(i0 + 8 * I[H_O_PARENT]), (nj, 3))
    piv = carray(_i64_at(i0 + 8 * I[H_O_PIV]), (4 * (max(n, m, k, ints[3]) + 1),))
    prm = carray(_f64_at(f0 + 8 * I[H_O_PRM]), (I[H_N_PRM],))
    fplace = carray(_f64_at(f0 + 8 * I[H_O_FPLACE]), (nf, 4, 4))
    fJ = carray(_f64_at(f0 + 8 * I[H_O_FJ]), (nf, 6, n))
    fvec = carray(_f64_at(f0 + 8 * I[H_O_FVEC]), (nf, 24))
    jpose = carray(_f64_at(f0 + 8 * I[H_O_JPOSE]), (nj + 1, 12))  # every joint's pose, the world's last
    A = carray(_f64_at(f0 + 8 * I[H_O_A]), (m, n))
    jdv = carray(_f64_at(f0 + 8 * I[H_O_JDV]), (m,))
    tflt = carray(_f64_at(f0 + 8 * I[H_O_TFLT]), (nt, 4))
    tgtH = carray(_f64_at(f0 + 8 * I[H_O_TGTH]), (nt, 4, 4))
    tgtVA = carray(_f64_at(f0 + 8 * I[H_O_TGTVA]), (nt, 12))
    tcirc = carray(_f64_at(f0 + 8 * I[H_O_TCIRC]), (nt, CIRCLE_ROW))
    tbias = carray(_f64_at(f0 + 8 * I[H_O_TBIAS]), (nt, 6))
    terr = carray(_f64_at(f0 + 8 * I[H_O_TERR]), (nt, 6))
    Ab = carray(_f64_at(f0 + 8 * I[H_O_AB]), (nrows, n + 1))
    ref = carray(_f64_at(f0 + 8 * I[H_O_REF]), (3, k))
    work = carray(_f64_at(f0 + 8 * I[H_O_WORK]), (I[H_N_WORK],))
    qref = carray(_f64_at(f0 + 8 * I[H_O_QREF]), (I[H_N_PIDX],))
    inert = carray(_f64_at(f0 + 8 * I[H_O_INERT]), (nj, 13))
    grav = carray(_f64_at(f0 + 8 * I[H_O_GRAV]), (3,))
    rnea = carray(_f64_at(f0 + 8 * I[H_O_RNEA]), (nj, 18))
    h = carray(_f64_at(f0 + 8 * I[H_O_H]), (n,))
    osc = I[H_O_SCR]
    ed = carray(_f64_at(f0 + 8 * osc), (4, 6))
    Rs = carray(_f64_at(f0 + 8 * (osc + 24)), (3, 3))
    Jw = farray(_f64_at(ptr[0]), (6, n))
    M = farray(_f64_at(ptr[1]), (n, n))
    bq = carray(_f64_at(o0 + 8 * (4 * n + m)), (nq,))
    bv = carray(_f64_at(o0 + 8 * (4 * n + m + nq)), (n,))
    for i in range(nq):
        bq[i] = q[i]
    for i in range(n):
        bv[i] = v[i]
    read_joint_poses(ptr, 2, nj, jpose)
    bias_forces(Jw, bv, jpose, parent, inert, grav, rnea, h)
    frame_states(Jw, bv, jpose, fint, fplace, fJ, fvec)
    gap = 0.0  # Σ ‖p_b − p_a‖² over the closures but the planes (the rank threshold's residual)
    for c in range(nl):
        a, b = lint[c, 1], lint[c, 2]
        closure_rows(lint[c, 0], fvec[a], fJ[a], fvec[b], fJ[b], A, jdv, lint[c, 3])
        if lint[c, 0] != PLANE:
            for i in range(9, 12):
                gap += (fvec[b, i] - fvec[a, i]) ** 2
    if ints[1] == 1:
        task_rows_into(
            t, bq, bv, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, Ab, ed, Rs
        )
        for i in range(nrows):
            ref[0, i] = Ab[i, n]
    st, r, res, bn, unsolvable = _law(
        M, h, bq, bv, A, jdv, Ab, t, ref, I[H_SINUS] != 0, prm, ints, work, piv, out, math.sqrt(gap)
    )
    out[5 * n + nq + m] = r
    out[5 * n + nq + m + 1] = res
    if st == OK and unsolvable:
        return UNSOLVABLE
    return st


def pidc_rows_work(n: int, m: int, k: int, p: int) -> np.ndarray:
    """A scratch buffer for ``pidc_rows`` (n joints, m constraint rows, k coordinates, p passive joints); its pivots
    take 4 (max(n, m, k, p) + 1) ints more (``pidc_closed_step``: in the plan's integer table)."""
    L = max(n, m, k, p) + 1
    return np.zeros(n * L + 4 * L * L + n * n + 7 * L + 2 * n)


if __name__ == "__main__":
    raise SystemExit("the kernels' warm-up is the application tier's: run `python -m cmstack.warmup`")
