"""The joint limits' test on a compiled step's result, compiled (numba): whether v̇ and τ of the step violate any
row of the limits (``models/limits.py``), without leaving the compiled world.  One call per step, right after
the compiled step (``controllers/udwadia_kalaba.py``): while no row is violated the step is the equality solve
it was, and the QP never runs.

Each row r of the table ``LI`` (after ``HEADER`` ints: rows, the step buffer's offsets of q, v, v̇ and τ) is
(kind, joint j); its parameters are ``LF[6 r : 6 r + 6]`` (``LimitCheck.copy``):

* EFFORT    (τ_max):                                  violated iff |τ_j| > τ_max (1 + 1e-9)
                                                     (``EffortLimit.violated``);
* VELOCITY  (v_max, Δt):    l = (−v_max − v_j)/Δt, u = (v_max − v_j)/Δt;
* POSITION  (Δt, a_max, κ, margin, q_min, q_max):  (l, u) = ``JointPositionLimit.acceleration_bounds``,
  the same expressions in the same order (the upper branch ``_upper``, the lower one its mirror image
  −_upper(−q, −v, −q_min));

a VELOCITY or POSITION row is violated iff v̇_j < l − tol or v̇_j > u + tol, tol = 1e-9 (|l| + |u| + 1)
(``Limit.violation`` with C = the joint's unit row).  tests/test_limit_kernels.py compares the test with
the limits' own ``violated`` on states inside, on and beyond every bound.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

EFFORT, VELOCITY, POSITION = 0, 1, 2
#: LI's header: number of rows, then the offsets in the step buffer of q, v, v̇ and τ
HEADER = 5
N_PAR = 6


@njit(cache=True, inline="always")
def _upper(qq: float, vv: float, qmax: float, dt: float, a: float, kappa: float, margin: float) -> float:
    """The upper bound on q̈ of ``JointPositionLimit.acceleration_bounds`` (its ``upper``), one joint."""
    bb = kappa * a
    d = qmax - margin - qq - bb * dt * dt
    y_i = -1.5 * bb * dt + math.sqrt(max(2.25 * bb * bb * dt * dt + 2.0 * bb * d, 0.0))
    y_ii = -0.5 * bb * dt + math.sqrt(max(0.25 * bb * bb * dt * dt + 2.0 * bb * (d - dt * vv), 0.0))
    y = y_i if y_i >= vv else y_ii
    dy = y - vv
    r = dy / dt if dy >= 0.0 else dy / (kappa * dt)
    return max(r, -a)


@njit(cache=True)
def position_bounds(
    q: float, v: float, dt: float, a: float, kappa: float, margin: float, qmin: float, qmax: float
) -> tuple[float, float]:
    """(lower, upper) bound on q̈ of one joint at (q, v) (``JointPositionLimit.acceleration_bounds``)."""
    return -_upper(-q, -v, -qmin, dt, a, kappa, margin), _upper(q, v, qmax, dt, a, kappa, margin)


@njit(cache=True)
def acceleration_bounds(
    q: np.ndarray,
    v: np.ndarray,
    dt: float,
    a: np.ndarray,
    kappa: float,
    margin: float,
    qmin: np.ndarray,
    qmax: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> None:
    """lo, hi = the bounds on q̈ of every joint i at (q_i, v_i) (``JointPositionLimit.acceleration_bounds``): the
    scalar expressions of ``_upper``, joint by joint, into lo and hi."""
    for i in range(q.shape[0]):
        lo[i] = -_upper(-q[i], -v[i], -qmin[i], dt, a[i], kappa, margin)
        hi[i] = _upper(q[i], v[i], qmax[i], dt, a[i], kappa, margin)


@njit(cache=True)
def violated(buf: np.ndarray, LI: np.ndarray, LF: np.ndarray) -> int:
    """Whether the step's result in ``buf`` (q, v, v̇, τ at the offsets LI[1:5]) violates a row of the table
    (module docstring).  Returns the first violated row + 1, or 0 when every row holds."""
    nr = LI[0]
    oq, ov, ox, ot = LI[1], LI[2], LI[3], LI[4]
    for r in range(nr):
        kind = LI[HEADER + 2 * r]
        j = LI[HEADER + 2 * r + 1]
        p = N_PAR * r
        if kind == EFFORT:
            if abs(buf[ot + j]) > LF[p] * (1.0 + 1e-9):
                return r + 1
            continue
        vj = buf[ov + j]
        if kind == VELOCITY:
            vmax, dt = LF[p], LF[p + 1]
            lo = (-vmax - vj) / dt
            hi = (vmax - vj) / dt
        else:
            dt, a, kappa, margin = LF[p], LF[p + 1], LF[p + 2], LF[p + 3]
            qj = buf[oq + j]
            lo = -_upper(-qj, -vj, -LF[p + 4], dt, a, kappa, margin)
            hi = _upper(qj, vj, LF[p + 5], dt, a, kappa, margin)
        x = buf[ox + j]
        tol = 1e-9 * (abs(lo) + abs(hi) + 1.0)
        if x < lo - tol or x > hi + tol:
            return r + 1
    return 0


@njit(cache=True)
def rows(
    q: np.ndarray,
    v: np.ndarray,
    M: np.ndarray,
    hD: np.ndarray,
    LI: np.ndarray,
    LF: np.ndarray,
    C: np.ndarray,
    l: np.ndarray,
    u: np.ndarray,
) -> None:
    """The rows l ≤ C v̇ ≤ u of every limit of the table (module docstring; ``LimitCheck.copy`` lists them in the
    limits' order, each limit's joints in its order), i.e. the limits' ``bounds`` stacked, into C (rows × nv), l, u:

    * EFFORT    C_r = M_j,  l_r = −τ_max − (h + D v)_j,  u_r = τ_max − (h + D v)_j   (``EffortLimit.bounds``);
    * VELOCITY  C_r = e_j,  l_r = (−v_max − v_j)/Δt,  u_r = (v_max − v_j)/Δt   (``JointVelocityLimit.bounds``);
    * POSITION  C_r = e_j,  (l_r, u_r) = ``position_bounds`` at (q_j, v_j)   (``JointPositionLimit.bounds``);

    the same expressions in the same order as the limits' own (tests/test_limit_kernels.py compares them)."""
    nr = LI[0]
    n = C.shape[1]
    for r in range(nr):
        kind = LI[HEADER + 2 * r]
        j = LI[HEADER + 2 * r + 1]
        p = N_PAR * r
        if kind == EFFORT:
            for c in range(n):
                C[r, c] = M[j, c]
            t = LF[p]
            l[r] = -t - hD[j]
            u[r] = t - hD[j]
            continue
        for c in range(n):
            C[r, c] = 0.0
        C[r, j] = 1.0
        vj = v[j]
        if kind == VELOCITY:
            vmax, dt = LF[p], LF[p + 1]
            l[r] = (-vmax - vj) / dt
            u[r] = (vmax - vj) / dt
        else:
            dt, a, kappa, margin = LF[p], LF[p + 1], LF[p + 2], LF[p + 3]
            qj = q[j]
            l[r] = -_upper(-qj, -vj, -LF[p + 4], dt, a, kappa, margin)
            u[r] = _upper(qj, vj, LF[p + 5], dt, a, kappa, margin)
