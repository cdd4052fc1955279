"""The error dynamics of the built-in tasks, compiled by numba and written once (issue 22): the Python tasks
(``models/coupling.py``: ``RigidCoupling``, ``FrameTask``, ``PostureTask``, ``JointTrajectoryTask``) call these
kernels from ``error_dynamics``, and the fused UK step (``controllers/_uk_kernels.py: task_rows_into``) calls the
same ones on its frame table; ``task_law`` turns them into the rows A v̇ = b of the controller.

Conventions (``models/robot.py: FrameState``, LOCAL_WORLD_ALIGNED).  A frame is given as
x (24,) = [R row-major (9), p (3), twist [v; ω] (6), acc [a; α] (6)] and its Jacobian J (6×n), with
[v; ω] = J v and [p̈; ω̇] = J v̇ + acc (``acc`` = J̇ v, the classical acceleration at v̇ = 0): the layout
of the fused step's frame table ``fvec``.

Every kernel writes, in world axes,

    W (k×n) (its selected rows, scaled: the controller's A) and ed (4, k) = [drift; w; e; e_own],
    and the rotation R of P = diag(I, R)

where, for the task's error in its own axes (``models/coupling.py``: e_own = [p_D − p; Log(Rᵀ R_D)], w_own,
ẇ_own = W_own v̇ + drift_own), the world-axes rows are the same rows rotated by the orthogonal P:
W = P W_own, drift = P drift_own, w = P w_own, e = P e_own.  So W v̇ + drift = P ẇ_own (the error's
derivative taken in the task's own, rotating, axes), and the law ẇ_own + K_d w_own + K_p e_own = 0 is
P(…) = 0:

    A = W,   b = −drift − K_d w − K_p e            (``task_law``; the same solution and the same
                                                   least-squares cost as the own-axes rows, ‖P x‖ = ‖x‖)

Derivations (J_d = J_b − J_a, tw_d = tw_b − tw_a, acc_d = acc_b − acc_a):

* coupling, frames a = B (= E₁·T_A^B) and b = E₂, P = diag(I, R₂) ([Milioshin] 3.14–3.15, 3.27–3.30):
  e_own = [p₂ − p_B; Log(R_Bᵀ R₂)], w_own = [v_d; R₂ᵀ ω_d], and Ṙ₂ᵀ = −R₂ᵀ ω₂^ gives
  ẇ_own,ω = R₂ᵀ(ω̇_d − ω₂ × ω_d), so
      W = J_d,   w = tw_d,   drift = acc_d − [0; ω₂ × ω_d],   e = [p₂ − p_B; R₂ Log(R_Bᵀ R₂)]
* frame task, frame C, target D = (R_D, p_D), [v_D; ω_D^D], [a_D; ε_D^D] (angular parts in D's axes),
  P = diag(I, R_D) (3.32–3.36): e_own = [p_D − p_C; Log(R_Cᵀ R_D)], w_own = [v_D − v_C; ω_D^D − R_Dᵀ ω_C],
  ẇ_own,ω = ε_D^D − R_Dᵀ(ω̇_C − ω_D × ω_C) with ω_D = R_D ω_D^D, so
      W = −J_C,   w = [v_D − v_C; ω_D − ω_C],   drift = [a_D − a_C; R_D ε_D^D − α_C + ω_D × ω_C],
      e = [p_D − p_C; R_D Log(R_Cᵀ R_D)]
* relative frame task (``RelativeFrameTask``), frame b following B = T_a·T_D(t), a pose given relative to frame
  a: the coupling of B with b, B's frame row and Jacobian from the offset algebra with a moving offset
  (``moving_frame``, derived there)
* joints S (indices idx) following (q_d, v_d, a_d), P = I: e = q_d − q_S, w = v_d − v_S, ẇ = a_d − S v̇:
      W = −S,   drift = a_d   (a posture: v_d = a_d = 0)
"""

from __future__ import annotations

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.models import _lie_kernels
from cmstack.models._kernel_cache import depends_on
from cmstack.models._lie_kernels import _log3

depends_on(__file__, _lie_kernels)  # numba's cache does not see a change of a callee in another file


@njit(cache=True)
def log3(R: np.ndarray, out: np.ndarray) -> None:
    """out ← Log(R) ∈ R³, R a 3×3 rotation matrix (``models._lie_kernels._log3``, the one SO(3) log)."""
    out[0], out[1], out[2] = _log3(
        R[0, 0], R[0, 1], R[0, 2], R[1, 0], R[1, 1], R[1, 2], R[2, 0], R[2, 1], R[2, 2]
    )


@njit(cache=True)
def _pose_error(xa: np.ndarray, Rb: np.ndarray, pb: np.ndarray, ed: np.ndarray, R: np.ndarray) -> None:
    """ed[3] ← e_own = [p_b − p_a; Log(R_aᵀ R_b)] of frame a (row x) against the pose (R_b, p_b), and
    ed[2] ← e = [e_own,lin; R e_own,ang] (R: the rotation of P)."""
    a = xa  # R_a[i, j] = a[3 i + j], so (R_aᵀ R_b)_ij = a[i] R_b[0, j] + a[3 + i] R_b[1, j] + a[6 + i] R_b[2, j]
    l0, l1, l2 = _log3(
        a[0] * Rb[0, 0] + a[3] * Rb[1, 0] + a[6] * Rb[2, 0],
        a[0] * Rb[0, 1] + a[3] * Rb[1, 1] + a[6] * Rb[2, 1],
        a[0] * Rb[0, 2] + a[3] * Rb[1, 2] + a[6] * Rb[2, 2],
        a[1] * Rb[0, 0] + a[4] * Rb[1, 0] + a[7] * Rb[2, 0],
        a[1] * Rb[0, 1] + a[4] * Rb[1, 1] + a[7] * Rb[2, 1],
        a[1] * Rb[0, 2] + a[4] * Rb[1, 2] + a[7] * Rb[2, 2],
        a[2] * Rb[0, 0] + a[5] * Rb[1, 0] + a[8] * Rb[2, 0],
        a[2] * Rb[0, 1] + a[5] * Rb[1, 1] + a[8] * Rb[2, 1],
        a[2] * Rb[0, 2] + a[5] * Rb[1, 2] + a[8] * Rb[2, 2],
    )
    ed[3, 3], ed[3, 4], ed[3, 5] = l0, l1, l2
    for i in range(3):
        ed[3, i] = pb[i] - xa[9 + i]
        ed[2, i] = ed[3, i]
        ed[2, 3 + i] = R[i, 0] * l0 + R[i, 1] * l1 + R[i, 2] * l2


@njit(cache=True)
def coupling_error(
    xa: np.ndarray,
    Ja: np.ndarray,
    xb: np.ndarray,
    Jb: np.ndarray,
    sel0: int,
    nsel: int,
    sc: float,
    A: np.ndarray,
    row0: int,
    ed: np.ndarray,
    R: np.ndarray,
) -> None:
    """The coupling of frame a = B with frame b = E₂ (module docstring): ed (4, 6), R = R₂, and the rows
    sel0 … sel0 + nsel − 1 of W scaled by sc into the rows row0 … of A (all of W: 0, 6, 1.0, A (6×n), 0)."""
    n = Ja.shape[1]
    for i in range(nsel):
        for c in range(n):
            A[row0 + i, c] = sc * (Jb[sel0 + i, c] - Ja[sel0 + i, c])
    for i in range(3):
        for j in range(3):
            R[i, j] = xb[3 * i + j]
    _pose_error(xa, R, xb[9:12], ed, R)
    for i in range(6):
        ed[1, i] = xb[12 + i] - xa[12 + i]
        ed[0, i] = xb[18 + i] - xa[18 + i]
    o0, o1, o2 = xb[15], xb[16], xb[17]
    w0, w1, w2 = ed[1, 3], ed[1, 4], ed[1, 5]
    ed[0, 3] -= o1 * w2 - o2 * w1
    ed[0, 4] -= o2 * w0 - o0 * w2
    ed[0, 5] -= o0 * w1 - o1 * w0


@njit(cache=True)
def frame_error(
    x: np.ndarray,
    J: np.ndarray,
    H: np.ndarray,
    va: np.ndarray,
    sel0: int,
    nsel: int,
    sc: float,
    A: np.ndarray,
    row0: int,
    ed: np.ndarray,
    R: np.ndarray,
) -> None:
    """Frame C (row x, Jacobian J) following the target H = T_D (4×4: R_D, p_D) with
    va = [v_D; ω_D^D; a_D; ε_D^D] (module docstring): ed (4, 6), R = R_D, and the rows sel0 … of W
    scaled by sc into the rows row0 … of A (as ``coupling_error``)."""
    n = J.shape[1]
    for i in range(nsel):
        for c in range(n):
            A[row0 + i, c] = sc * -J[sel0 + i, c]
    for i in range(3):
        for j in range(3):
            R[i, j] = H[i, j]
    _pose_error(x, R, H[:3, 3], ed, R)
    d0 = R[0, 0] * va[3] + R[0, 1] * va[4] + R[0, 2] * va[5]  # ω_D = R_D ω_D^D
    d1 = R[1, 0] * va[3] + R[1, 1] * va[4] + R[1, 2] * va[5]
    d2 = R[2, 0] * va[3] + R[2, 1] * va[4] + R[2, 2] * va[5]
    c0, c1, c2 = x[15], x[16], x[17]
    for i in range(3):
        ed[1, i] = va[i] - x[12 + i]
        ed[0, i] = va[6 + i] - x[18 + i]
        ed[0, 3 + i] = R[i, 0] * va[9] + R[i, 1] * va[10] + R[i, 2] * va[11] - x[21 + i]
    ed[1, 3], ed[1, 4], ed[1, 5] = d0 - c0, d1 - c1, d2 - c2
    ed[0, 3] += d1 * c2 - d2 * c1
    ed[0, 4] += d2 * c0 - d0 * c2
    ed[0, 5] += d0 * c1 - d1 * c0


@njit(cache=True)
def moving_frame(
    xa: np.ndarray, Ja: np.ndarray, H: np.ndarray, va: np.ndarray, xB: np.ndarray, JB: np.ndarray
) -> None:
    """Frame B = T_a·T_D(t) of a frame a (row xa, Jacobian Ja) and a pose T_D = H (4×4) given in a, moving with
    va = [ṗ_D; ω^D; p̈_D; ω̇^D] (ṗ_D, p̈_D: derivatives of p_D in a's axes; ω^D: D's angular velocity relative
    to a, in D's axes, Ṙ_D = R_D ω^D^): xB ← its frame row [R_B; p_B; v_B; ω_B; a_B; α_B], JB ← its Jacobian.
    With r = R_a p_D, R_B = R_a R_D, p_B = p_a + r, differentiating (Ṙ_a = ω_a^ R_a):

        v_B = v_a + ω_a × r + R_a ṗ_D,                ω_B = ω_a + R_B ω^D
        a_B = a_a + α_a × r + ω_a × (ω_a × r + 2 R_a ṗ_D) + R_a p̈_D      (at v̇ = 0: a_a, α_a = J̇_a v)
        α_B = α_a + ω_a × (R_B ω^D) + R_B ω̇^D
        J_B = [J_a,v − r^ J_a,ω; J_a,ω]        (the part of [v_B; ω_B] that is J_B v; the rest is T_D's own motion)"""
    n = Ja.shape[1]
    r0 = xa[0] * H[0, 3] + xa[1] * H[1, 3] + xa[2] * H[2, 3]
    r1 = xa[3] * H[0, 3] + xa[4] * H[1, 3] + xa[5] * H[2, 3]
    r2 = xa[6] * H[0, 3] + xa[7] * H[1, 3] + xa[8] * H[2, 3]
    for i in range(3):
        for j in range(3):
            xB[3 * i + j] = xa[3 * i] * H[0, j] + xa[3 * i + 1] * H[1, j] + xa[3 * i + 2] * H[2, j]
    xB[9], xB[10], xB[11] = xa[9] + r0, xa[10] + r1, xa[11] + r2
    pd0 = xa[0] * va[0] + xa[1] * va[1] + xa[2] * va[2]  # R_a ṗ_D
    pd1 = xa[3] * va[0] + xa[4] * va[1] + xa[5] * va[2]
    pd2 = xa[6] * va[0] + xa[7] * va[1] + xa[8] * va[2]
    od0 = xB[0] * va[3] + xB[1] * va[4] + xB[2] * va[5]  # R_B ω^D
    od1 = xB[3] * va[3] + xB[4] * va[4] + xB[5] * va[5]
    od2 = xB[6] * va[3] + xB[7] * va[4] + xB[8] * va[5]
    w0, w1, w2 = xa[15], xa[16], xa[17]  # ω_a
    al0, al1, al2 = xa[21], xa[22], xa[23]  # α_a
    c0, c1, c2 = w1 * r2 - w2 * r1, w2 * r0 - w0 * r2, w0 * r1 - w1 * r0  # ω_a × r
    xB[12], xB[13], xB[14] = xa[12] + c0 + pd0, xa[13] + c1 + pd1, xa[14] + c2 + pd2
    xB[15], xB[16], xB[17] = w0 + od0, w1 + od1, w2 + od2
    u0, u1, u2 = c0 + 2.0 * pd0, c1 + 2.0 * pd1, c2 + 2.0 * pd2  # ω_a × r + 2 R_a ṗ_D
    pa0 = xa[0] * va[6] + xa[1] * va[7] + xa[2] * va[8]  # R_a p̈_D
    pa1 = xa[3] * va[6] + xa[4] * va[7] + xa[5] * va[8]
    pa2 = xa[6] * va[6] + xa[7] * va[7] + xa[8] * va[8]
    xB[18] = xa[18] + (al1 * r2 - al2 * r1) + (w1 * u2 - w2 * u1) + pa0
    xB[19] = xa[19] + (al2 * r0 - al0 * r2) + (w2 * u0 - w0 * u2) + pa1
    xB[20] = xa[20] + (al0 * r1 - al1 * r0) + (w0 * u1 - w1 * u0) + pa2
    xB[21] = al0 + (w1 * od2 - w2 * od1) + (xB[0] * va[9] + xB[1] * va[10] + xB[2] * va[11])
    xB[22] = al1 + (w2 * od0 - w0 * od2) + (xB[3] * va[9] + xB[4] * va[10] + xB[5] * va[11])
    xB[23] = al2 + (w0 * od1 - w1 * od0) + (xB[6] * va[9] + xB[7] * va[10] + xB[8] * va[11])
    for c in range(n):
        j0, j1, j2 = Ja[3, c], Ja[4, c], Ja[5, c]
        JB[0, c] = Ja[0, c] - (r1 * j2 - r2 * j1)
        JB[1, c] = Ja[1, c] - (r2 * j0 - r0 * j2)
        JB[2, c] = Ja[2, c] - (r0 * j1 - r1 * j0)
        JB[3, c], JB[4, c], JB[5, c] = j0, j1, j2


@njit(cache=True)
def joint_error(
    q: np.ndarray,
    v: np.ndarray,
    idx: np.ndarray,
    qidx: np.ndarray,
    qd: np.ndarray,
    vd: np.ndarray,
    ad: np.ndarray,
    sc: float,
    A: np.ndarray,
    row0: int,
    ed: np.ndarray,
) -> None:
    """1-DoF joints following (q_d, v_d, a_d) (module docstring): ed (4, k); P = I; W = −S scaled by sc
    into the rows row0 … row0 + k − 1 of A.  idx: the joints' v indices (their columns of W, their rates);
    qidx: their q indices (q (nq,) a point of the joint manifold: after a ball or free joint qidx ≠ idx)."""
    n = v.shape[0]
    for i in range(idx.shape[0]):
        j = idx[i]
        for c in range(n):
            A[row0 + i, c] = 0.0
        A[row0 + i, j] = -sc
        ed[0, i] = ad[i]
        ed[1, i] = vd[i] - v[j]
        ed[2, i] = qd[i] - q[qidx[i]]
        ed[3, i] = ed[2, i]


@njit(cache=True)
def task_law(
    ed: np.ndarray,
    R: np.ndarray,
    rotated: bool,
    kp: float,
    kd: float,
    sc: float,
    sel0: int,
    nsel: int,
    beta: np.ndarray,
    b: np.ndarray,
    row0: int,
) -> None:
    """b[row0 + i] of the law on the selected rows sel0 + i, i < nsel, scaled by sc (√ω above the last
    level, else 1): b = sc(−drift − K_d w − K_p e − P β) (A = sc W is written by the task's kernel),
    where β is a bias in the task's own axes (the integral action K_i z of ``uk_robust.IntegralTask``;
    zero otherwise), rotated to world axes by P = diag(I, R) when ``rotated`` (a task of 6 rows with axes
    of its own), else P = I."""
    for i in range(nsel):
        s = sel0 + i
        bs = beta[s]
        if rotated and s >= 3:
            bs = R[s - 3, 0] * beta[3] + R[s - 3, 1] * beta[4] + R[s - 3, 2] * beta[5]
        b[row0 + i] = sc * (((-ed[0, s] - kd * ed[1, s]) - kp * ed[2, s]) - bs)
