"""Compiled (numba) kernels of the TITOP causal sweeps (models/titop.py, [Alazard] Alazard, Sanfedino &
Kassarian, "Non-linear dynamics of multibody systems: a system-based approach").

The same block equations as the NumPy path of :class:`~cmstack.models.titop.System`
(``_kinematics_reference``, ``_forward_reference``, ``_inverse_reference``, which stay the reference:
tests/test_titop_kernels.py compares both to round-off), written as loops over the blocks of the tree
flattened into index arrays (:class:`~cmstack.models.titop._Layout`), so that one call does a whole sweep
without Python overhead.  Imported lazily by ``models/titop.py`` (numba's import costs ~0.3 s); the
machine code is cached on disk (``cache=True``).

The tree, one row per block i (parents before children, as ``System.nodes``):

    kind[i]     KIND_FIXED / KIND_FLOATING (root), KIND_WELD, KIND_REVOLUTE, KIND_PRISMATIC
    parent[i]   the parent's row (−1 for the root);  iq[i]: the block's joint coordinate
    P0[i]       P_{a0/b};  axis[i]: r̃ (revolute) or t̃ (prismatic);  S[i]: the joint's S column (6)
    pport[i]    the parent's port the joint sits on, as the vector P_B C in the parent's frame
    D[i]        D_P (4)

Where each quantity of the paper is computed:

* ``kinematics``: the motions at velocity level, root → leaves — the transport v_CP (14) to the
  parent's port, then the joint: (15) weld, (16)–(17) revolute (P_{a/b} = P_{a0/b} e^{θ(*r̃)},
  x'^A = x'^B + θ̇ [0; r̃], c = −θ̇ [r̃ × v^B; r̃ × ω^B]), (24) prismatic (x'^A = τ_{−xt̃} x'_P0 + ẋ [t̃; 0],
  c = −ẋ [t̃ × ω; 0]);
* ``_body_bias``: the acceleration-free part of the Newton–Euler model (11), −D_P [g; 0] + C(x') D_P x'
  with C of (7);
* ``_loads``: the port wrenches moved to P (13), external loads and loop closures L^A_C (Fig. 14);
* ``forward_dynamics``: the leaves → root sweep of each block's affine channel W_{A/B} = −(Z ẋ'^B + z)
  — (22)/(28) solved for q̈ with the child's channel substituted, (18)/(25) for the wrench, (29) for
  the prismatic transport to P0 and the frame change to R_b — then the root → leaves sweep evaluating
  (22)/(28) and (17)/(24) with the loop closed (the root's G_P of Fig. 2 for a floating base);
* ``inverse_dynamics``: accelerations root → leaves ((17)/(24)), wrenches leaves → root ((18)/(25),
  (29)), joint forces u = −Sᵀ W_{A/B,P} (19)/(26).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)

KIND_FIXED, KIND_FLOATING, KIND_WELD, KIND_REVOLUTE, KIND_PRISMATIC = 0, 1, 2, 3, 4
#: the dynamics kernels' tree (kind, parent, iq, P0, axis, S, pport, D): ``System``'s compiled layout ``lay.tree``
Tree = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: external loads (node, port vector PC, wrench W), one row each (``System._load_arrays``)
Loads = tuple[np.ndarray, np.ndarray, np.ndarray]
#: loop closures (node, port, K, D) (``lay.loops``)
Loops = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


# ------------------------------------------------------------------------------------- small algebra
@njit(cache=True)
def _cross_into(
    a0: float, a1: float, a2: float, b0: float, b1: float, b2: float, out: np.ndarray, k: int
) -> None:
    """out[k:k+3] = a × b."""
    out[k] = a1 * b2 - a2 * b1
    out[k + 1] = a2 * b0 - a0 * b2
    out[k + 2] = a0 * b1 - a1 * b0


@njit(cache=True)
def _tau_mv(r: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out = τ_r x = [x_lin + r × x_ang; x_ang] (motion transport (14), x' or ẋ')."""
    out[0] = x[0] + (r[1] * x[5] - r[2] * x[4])
    out[1] = x[1] + (r[2] * x[3] - r[0] * x[5])
    out[2] = x[2] + (r[0] * x[4] - r[1] * x[3])
    out[3] = x[3]
    out[4] = x[4]
    out[5] = x[5]


@njit(cache=True)
def _tauT_mv_add(r: np.ndarray, w: np.ndarray, sign: float, out: np.ndarray) -> None:
    """out += sign · τ_rᵀ w, τ_rᵀ w = [F; T + F × r] (a wrench at C moved to P (13), r = CP)."""
    out[0] += sign * w[0]
    out[1] += sign * w[1]
    out[2] += sign * w[2]
    out[3] += sign * (w[3] + (w[1] * r[2] - w[2] * r[1]))
    out[4] += sign * (w[4] + (w[2] * r[0] - w[0] * r[2]))
    out[5] += sign * (w[5] + (w[0] * r[1] - w[1] * r[0]))


@njit(cache=True)
def _tauT_M_tau_add(r: np.ndarray, Z: np.ndarray, out: np.ndarray) -> None:
    """out += τ_rᵀ Z τ_r (a 6×6 impedance moved from C to P), τ_r = [[1, (*r)], [0, 1]]."""
    # M = Z τ_r: columns 0:3 of Z unchanged, columns 3:6 = Z[:, :3] (*r) + Z[:, 3:]
    M = np.empty((6, 6))
    for a in range(6):
        z0, z1, z2 = Z[a, 0], Z[a, 1], Z[a, 2]
        M[a, 0], M[a, 1], M[a, 2] = z0, z1, z2
        # row · (*r): [z0 z1 z2] [[0, −r2, r1], [r2, 0, −r0], [−r1, r0, 0]]
        M[a, 3] = Z[a, 3] + (z1 * r[2] - z2 * r[1])
        M[a, 4] = Z[a, 4] + (z2 * r[0] - z0 * r[2])
        M[a, 5] = Z[a, 5] + (z0 * r[1] - z1 * r[0])
    # τ_rᵀ M: rows 0:3 of M unchanged, rows 3:6 = (*r)ᵀ M[:3, :] + M[3:, :]
    for b in range(6):
        m0, m1, m2 = M[0, b], M[1, b], M[2, b]
        out[0, b] += m0
        out[1, b] += m1
        out[2, b] += m2
        out[3, b] += M[3, b] + (r[2] * m1 - r[1] * m2)
        out[4, b] += M[4, b] + (r[0] * m2 - r[2] * m0)
        out[5, b] += M[5, b] + (r[1] * m0 - r[0] * m1)


@njit(cache=True)
def _rotT6(P: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out = [Pᵀ x_lin; Pᵀ x_ang] (a dual vector of R_b projected in R_a, P = P_{a/b})."""
    for h in range(2):
        o = 3 * h
        for a in range(3):
            out[o + a] = P[0, a] * x[o] + P[1, a] * x[o + 1] + P[2, a] * x[o + 2]


@njit(cache=True)
def _rot6(P: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out = [P x_lin; P x_ang] (a dual vector of R_a projected in R_b)."""
    for h in range(2):
        o = 3 * h
        for a in range(3):
            out[o + a] = P[a, 0] * x[o] + P[a, 1] * x[o + 1] + P[a, 2] * x[o + 2]


@njit(cache=True)
def _quat_to_R(qx: float, qy: float, qz: float, qw: float, R: np.ndarray) -> None:
    """The DCM of a quaternion (x, y, z, w), normalised first (``titop.quat_to_R``)."""
    nrm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    x, y, z, w = qx / nrm, qy / nrm, qz / nrm, qw / nrm
    R[0, 0], R[0, 1], R[0, 2] = 1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)
    R[1, 0], R[1, 1], R[1, 2] = 2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)
    R[2, 0], R[2, 1], R[2, 2] = 2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)


@njit(cache=True)
def _matmul3(A: np.ndarray, B: np.ndarray, out: np.ndarray) -> None:
    for a in range(3):
        for b in range(3):
            out[a, b] = A[a, 0] * B[0, b] + A[a, 1] * B[1, b] + A[a, 2] * B[2, b]


@njit(cache=True)
def _matTvec3(A: np.ndarray, x: np.ndarray, o: int, out: np.ndarray, k: int) -> None:
    """out[k:k+3] = Aᵀ x[o:o+3]."""
    for a in range(3):
        out[k + a] = A[0, a] * x[o] + A[1, a] * x[o + 1] + A[2, a] * x[o + 2]


# ------------------------------------------------------------------------------------------ sweeps
@njit(cache=True)
def kinematics(
    kind: np.ndarray,
    parent: np.ndarray,
    iq: np.ndarray,
    P0: np.ndarray,
    axis: np.ndarray,
    pport: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    R: np.ndarray,
    pos: np.ndarray,
    tw: np.ndarray,
    Pab: np.ndarray,
    c: np.ndarray,
    r: np.ndarray,
) -> None:
    """Root → leaves at velocity level (``System._kinematics_reference``): for every block its attitude
    R = P_{a/i}, [IP]_a, x'^A_P in R_a, P_{a/b}, the joint's c (ẋ'^A = X ẋ'^B + S q̈ + c) and the
    prismatic offset r = PP0 = −x t̃ (zero for the other blocks), written into the (n, ...) arrays."""
    n = kind.shape[0]
    oq, ov = (7, 6) if kind[0] == KIND_FLOATING else (0, 0)
    tw_in = np.empty(6)
    pos_in = np.empty(3)
    tmp = np.empty(6)
    Rr = np.empty((3, 3))
    for a in range(3):
        for b in range(3):
            R[0, a, b] = 1.0 if a == b else 0.0
            Pab[0, a, b] = 1.0 if a == b else 0.0
    c[0, :] = 0.0
    r[0, :] = 0.0
    if kind[0] == KIND_FLOATING:  # pose [IP in R_i; quaternion], twist ν = [v_P; ω] in R_b
        _quat_to_R(q[3], q[4], q[5], q[6], R[0])
        _matTvec3(R[0], q, 0, pos[0], 0)
        for k in range(6):
            tw[0, k] = v[k]
    else:  # the inertial frame
        pos[0, :] = 0.0
        tw[0, :] = 0.0
    for i in range(1, n):
        p = parent[i]
        pt = pport[i]
        # the parent's motion at the port C, v_CP (14) with CP = −pt: x'_C = τ_CP x'_P, IC = IP + pt
        tw_in[0] = tw[p, 0] + (-pt[1] * tw[p, 5] - -pt[2] * tw[p, 4])
        tw_in[1] = tw[p, 1] + (-pt[2] * tw[p, 3] - -pt[0] * tw[p, 5])
        tw_in[2] = tw[p, 2] + (-pt[0] * tw[p, 4] - -pt[1] * tw[p, 3])
        tw_in[3], tw_in[4], tw_in[5] = tw[p, 3], tw[p, 4], tw[p, 5]
        for a in range(3):
            pos_in[a] = pos[p, a] + pt[a]
        kd = kind[i]
        ax = axis[i]
        if kd == KIND_REVOLUTE:
            # (16): P_{a/b} = P_{a0/b} e^{θ(*r̃)} (Rodrigues), then (17) at velocity level
            th, thd = q[oq + iq[i]], v[ov + iq[i]]
            s, cc = math.sin(th), 1.0 - math.cos(th)
            K = np.array([[0.0, -ax[2], ax[1]], [ax[2], 0.0, -ax[0]], [-ax[1], ax[0], 0.0]])
            for a in range(3):
                for b in range(3):
                    kk = K[a, 0] * K[0, b] + K[a, 1] * K[1, b] + K[a, 2] * K[2, b]
                    Rr[a, b] = (1.0 if a == b else 0.0) + s * K[a, b] + cc * kk
            _matmul3(P0[i], Rr, Pab[i])
            _rotT6(Pab[i], tw_in, tmp)  # [x'^B]_a
            _cross_into(ax[0], ax[1], ax[2], tmp[0], tmp[1], tmp[2], c[i], 0)
            _cross_into(ax[0], ax[1], ax[2], tmp[3], tmp[4], tmp[5], c[i], 3)
            for k in range(6):
                c[i, k] = -thd * c[i, k]  # c = −θ̇ [r̃ × v^B; r̃ × ω^B]
            for k in range(3):
                tw[i, k] = tmp[k]
                tw[i, 3 + k] = tmp[3 + k] + thd * ax[k]  # x'^A = x'^B + θ̇ [0; r̃]
            _matTvec3(Pab[i], pos_in, 0, pos[i], 0)
            _matmul3(R[p], Pab[i], R[i])
            r[i, :] = 0.0
        elif kd == KIND_PRISMATIC:
            # (24): the parent's motion at P0 in R_a, then x'^A_P = τ_{−xt̃} x'_P0 + ẋ [t̃; 0]
            x, xd = q[oq + iq[i]], v[ov + iq[i]]
            for a in range(3):
                for b in range(3):
                    Pab[i, a, b] = P0[i, a, b]
            _rotT6(Pab[i], tw_in, tmp)
            for k in range(3):
                r[i, k] = -x * ax[k]  # PP0
            _tau_mv(r[i], tmp, tw[i])
            for k in range(3):
                tw[i, k] += xd * ax[k]
            _cross_into(ax[0], ax[1], ax[2], tmp[3], tmp[4], tmp[5], c[i], 0)
            for k in range(3):
                c[i, k] = -xd * c[i, k]  # c = −ẋ [t̃ × ω; 0]
                c[i, 3 + k] = 0.0
            _matTvec3(Pab[i], pos_in, 0, pos[i], 0)
            for k in range(3):
                pos[i, k] += x * ax[k]  # IP = IP0 + x t̃
            _matmul3(R[p], Pab[i], R[i])
        else:
            # (15), Fig. 6: the constant frame change P_{a0/b}
            for a in range(3):
                for b in range(3):
                    Pab[i, a, b] = P0[i, a, b]
            _rotT6(Pab[i], tw_in, tw[i])
            _matTvec3(Pab[i], pos_in, 0, pos[i], 0)
            _matmul3(R[p], Pab[i], R[i])
            c[i, :] = 0.0
            r[i, :] = 0.0


@njit(cache=True)
def _body_bias(Di: np.ndarray, Ri: np.ndarray, twi: np.ndarray, g: np.ndarray, out: np.ndarray) -> None:
    """out = −D_P [g_a; 0] + C(x') D_P x' (11 without the acceleration, C of (7)), g_a = Rᵀ g."""
    ga0 = Ri[0, 0] * g[0] + Ri[1, 0] * g[1] + Ri[2, 0] * g[2]
    ga1 = Ri[0, 1] * g[0] + Ri[1, 1] * g[1] + Ri[2, 1] * g[2]
    ga2 = Ri[0, 2] * g[0] + Ri[1, 2] * g[1] + Ri[2, 2] * g[2]
    Dx = np.empty(6)
    for a in range(6):
        s = 0.0
        for b in range(6):
            s += Di[a, b] * twi[b]
        Dx[a] = s
    v0, v1, v2, w0, w1, w2 = twi[0], twi[1], twi[2], twi[3], twi[4], twi[5]
    # C(x') D x' = [ω × (Dx')_lin; v × (Dx')_lin + ω × (Dx')_ang]
    f0, f1, f2, t0, t1, t2 = Dx[0], Dx[1], Dx[2], Dx[3], Dx[4], Dx[5]
    cd0 = w1 * f2 - w2 * f1
    cd1 = w2 * f0 - w0 * f2
    cd2 = w0 * f1 - w1 * f0
    cd3 = (v1 * f2 - v2 * f1) + (w1 * t2 - w2 * t1)
    cd4 = (v2 * f0 - v0 * f2) + (w2 * t0 - w0 * t2)
    cd5 = (v0 * f1 - v1 * f0) + (w0 * t1 - w1 * t0)
    cd = (cd0, cd1, cd2, cd3, cd4, cd5)
    for a in range(6):
        out[a] = -(Di[a, 0] * ga0 + Di[a, 1] * ga1 + Di[a, 2] * ga2) + cd[a]


@njit(cache=True)
def _loads(
    R: np.ndarray,
    pos: np.ndarray,
    tw: np.ndarray,
    load_node: np.ndarray,
    load_port: np.ndarray,
    load_W: np.ndarray,
    loop_node: np.ndarray,
    loop_port: np.ndarray,
    loop_K: np.ndarray,
    loop_D: np.ndarray,
    Wload: np.ndarray,
) -> None:
    """Wload[i] = Σ τ_CPᵀ W over the wrenches applied at block i's ports (13): the external loads
    (node, PC, W in the block's frame at C) and the loop closures' L^A_C (Fig. 14) —
    W_{A_r/A_l,C} = K δx + D δx' with δx = [R_lᵀ(IC_r − IC_l); log(R_lᵀ R_r)],
    δx' = [R_lᵀ(R_r v_r − R_l v_l); R_lᵀ(R_r ω_r − R_l ω_l)], and −P_{l/r} W on A_r."""
    Wload[:, :] = 0.0
    mp = np.empty(3)
    for k in range(load_node.shape[0]):
        for a in range(3):
            mp[a] = -load_port[k, a]
        _tauT_mv_add(mp, load_W[k], 1.0, Wload[load_node[k]])
    if loop_node.shape[0] == 0:
        return
    twC = np.empty((2, 6))
    posw = np.empty((2, 3))
    vw = np.empty((2, 6))
    Rrel = np.empty((3, 3))
    dx = np.empty(6)
    dxd = np.empty(6)
    W = np.empty(6)
    Wr = np.empty(6)
    for L in range(loop_node.shape[0]):
        for s in range(2):  # both ports' motions (14), then world quantities
            i = loop_node[L, s]
            for a in range(3):
                mp[a] = -loop_port[L, s, a]
            _tau_mv(mp, tw[i], twC[s])
            for a in range(3):
                posw[s, a] = 0.0
                vw[s, a] = 0.0
                vw[s, 3 + a] = 0.0
                for b in range(3):
                    posw[s, a] += R[i, a, b] * (pos[i, b] + loop_port[L, s, b])
                    vw[s, a] += R[i, a, b] * twC[s, b]
                    vw[s, 3 + a] += R[i, a, b] * twC[s, 3 + b]
        il, ir = loop_node[L, 0], loop_node[L, 1]
        Rl, Rr = R[il], R[ir]
        for a in range(3):
            dx[a] = (
                Rl[0, a] * (posw[1, 0] - posw[0, 0])
                + Rl[1, a] * (posw[1, 1] - posw[0, 1])
                + Rl[2, a] * (posw[1, 2] - posw[0, 2])
            )
            dxd[a] = (
                Rl[0, a] * (vw[1, 0] - vw[0, 0])
                + Rl[1, a] * (vw[1, 1] - vw[0, 1])
                + Rl[2, a] * (vw[1, 2] - vw[0, 2])
            )
            dxd[3 + a] = (
                Rl[0, a] * (vw[1, 3] - vw[0, 3])
                + Rl[1, a] * (vw[1, 4] - vw[0, 4])
                + Rl[2, a] * (vw[1, 5] - vw[0, 5])
            )
            for b in range(3):
                Rrel[a, b] = Rl[0, a] * Rr[0, b] + Rl[1, a] * Rr[1, b] + Rl[2, a] * Rr[2, b]
        cth = (Rrel[0, 0] + Rrel[1, 1] + Rrel[2, 2] - 1.0) / 2.0
        ang = math.acos(min(1.0, max(-1.0, cth)))
        fac = 1.0 if ang < 1e-8 else ang / math.sin(ang)
        dx[3] = 0.5 * (Rrel[2, 1] - Rrel[1, 2]) * fac
        dx[4] = 0.5 * (Rrel[0, 2] - Rrel[2, 0]) * fac
        dx[5] = 0.5 * (Rrel[1, 0] - Rrel[0, 1]) * fac
        for a in range(6):
            s_ = 0.0
            for b in range(6):
                s_ += loop_K[L, a, b] * dx[b] + loop_D[L, a, b] * dxd[b]
            W[a] = s_
        # on A_r, in its frame: −P_{l/r} W with P_{l/r} = R_rᵀ R_l = Rrelᵀ
        for a in range(3):
            Wr[a] = -(Rrel[0, a] * W[0] + Rrel[1, a] * W[1] + Rrel[2, a] * W[2])
            Wr[3 + a] = -(Rrel[0, a] * W[3] + Rrel[1, a] * W[4] + Rrel[2, a] * W[5])
        for a in range(3):
            mp[a] = -loop_port[L, 0, a]
        _tauT_mv_add(mp, W, 1.0, Wload[il])
        for a in range(3):
            mp[a] = -loop_port[L, 1, a]
        _tauT_mv_add(mp, Wr, 1.0, Wload[ir])


@njit(cache=True)
def _solve6(A: np.ndarray, b: np.ndarray, x: np.ndarray) -> bool:
    """x = A⁻¹ b by LU with partial pivoting (as LAPACK's gesv); False if a pivot is exactly zero."""
    M = A.copy()
    y = b.copy()
    for k in range(6):
        piv, best = k, abs(M[k, k])
        for a in range(k + 1, 6):
            if abs(M[a, k]) > best:
                piv, best = a, abs(M[a, k])
        if best == 0.0:
            return False
        if piv != k:
            for b_ in range(6):
                M[k, b_], M[piv, b_] = M[piv, b_], M[k, b_]
            y[k], y[piv] = y[piv], y[k]
        for a in range(k + 1, 6):
            f = M[a, k] / M[k, k]
            for b_ in range(k + 1, 6):
                M[a, b_] -= f * M[k, b_]
            y[a] -= f * y[k]
    for a in range(5, -1, -1):
        s = y[a]
        for b_ in range(a + 1, 6):
            s -= M[a, b_] * x[b_]
        x[a] = s / M[a, a]
    return True


@njit(cache=True)
def _kinematics_and_loads(
    tree: Tree, q: np.ndarray, v: np.ndarray, loads: Loads, loops: Loops
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sweeps' common start: every block's kinematics (``kinematics``) and the port wrenches of the
    external loads and loop closures on each (``_loads``); (R, pos, tw, Pab, c, r, W)."""
    kind, parent, iq, P0, axis, _, pport, _ = tree
    load_node, load_port, load_W = loads
    loop_node, loop_port, loop_K, loop_D = loops
    n = kind.shape[0]
    R = np.empty((n, 3, 3))
    pos = np.empty((n, 3))
    tw = np.empty((n, 6))
    Pab = np.empty((n, 3, 3))
    c = np.empty((n, 6))
    r = np.empty((n, 3))
    kinematics(kind, parent, iq, P0, axis, pport, q, v, R, pos, tw, Pab, c, r)
    W = np.empty((n, 6))
    _loads(R, pos, tw, load_node, load_port, load_W, loop_node, loop_port, loop_K, loop_D, W)
    return R, pos, tw, Pab, c, r, W


@njit(cache=True, inline="always")
def _to_body_axes(P: np.ndarray, Ia: np.ndarray, zz: np.ndarray, Z: np.ndarray, z: np.ndarray) -> None:
    """A block's channel moved to R_b: Z = Q I^a Qᵀ, z = Q z^a, Q = diag(P_{a/b}, P_{a/b})."""
    # to R_b: Z = Q I^a Qᵀ, z = Q z^a
    for ha in range(2):
        for hb in range(2):
            for a in range(3):
                for b in range(3):
                    s_ = 0.0
                    for k in range(3):
                        for l in range(3):
                            s_ += P[a, k] * Ia[3 * ha + k, 3 * hb + l] * P[b, l]
                    Z[3 * ha + a, 3 * hb + b] = s_
    _rot6(P, zz, z)


@njit(cache=True, inline="always")
def _articulated_sweep(
    kind: np.ndarray,
    parent: np.ndarray,
    iq: np.ndarray,
    S: np.ndarray,
    pport: np.ndarray,
    D: np.ndarray,
    g: np.ndarray,
    tau: np.ndarray,
    ov: int,
    kin: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    IA: np.ndarray,
    pA: np.ndarray,
    IS: np.ndarray,
    dinv: np.ndarray,
) -> bool:
    """``forward_dynamics``' leaves → root sweep: every block's affine channel W_{A/B} = −(Z ẋ'^B + z),
    accumulated into its parent's (IA, pA); I S and d⁻¹ kept for the way back (IS, dinv).  ``kin`` =
    (R, tw, Pab, c, r, Wload).  False when a joint's d = Sᵀ I S is zero or not finite."""
    R, tw, Pab, c, r, Wload = kin
    n = kind.shape[0]
    for i in range(n):
        for a in range(6):
            for b in range(6):
                IA[i, a, b] = D[i, a, b]
        _body_bias(D[i], R[i], tw[i], g, pA[i])
        for a in range(6):
            pA[i, a] -= Wload[i, a]
    Ia = np.empty((6, 6))
    zz = np.empty(6)
    Z = np.empty((6, 6))
    T = np.empty((6, 6))
    z = np.empty(6)
    mp = np.empty(3)
    # leaves → root: every block's affine channel W_{A/B} = −(Z ẋ'^B + z)
    for i in range(n - 1, 0, -1):
        I_i, p_i = IA[i], pA[i]
        if kind[i] == KIND_WELD:
            for a in range(6):
                zz[a] = p_i[a]
                for b in range(6):
                    Ia[a, b] = I_i[a, b]
        else:
            Si, ISi = S[i], IS[i]
            d = 0.0
            for a in range(6):
                s_ = 0.0
                for b in range(6):
                    s_ += I_i[a, b] * Si[b]
                ISi[a] = s_
                d += Si[a] * s_
            if d == 0.0 or not math.isfinite(d):
                return False
            di = 1.0 / d
            dinv[i] = di
            u = tau[ov + iq[i]]
            Stp = 0.0
            for a in range(6):
                Stp += Si[a] * p_i[a]
            f = di * (u - Stp)
            for a in range(6):
                for b in range(6):
                    Ia[a, b] = I_i[a, b] - ISi[a] * di * ISi[b]
            for a in range(6):
                s_ = 0.0
                for b in range(6):
                    s_ += Ia[a, b] * c[i, b]
                zz[a] = s_ + p_i[a] + ISi[a] * f
        if kind[i] == KIND_PRISMATIC:  # (29): from P to P0
            T[:, :] = 0.0
            _tauT_M_tau_add(r[i], Ia, T)
            Ia[:, :] = T
            z[:] = 0.0
            _tauT_mv_add(r[i], zz, 1.0, z)
            zz[:] = z
        _to_body_axes(Pab[i], Ia, zz, Z, z)
        # into the parent, moved from its port C to its P: τ_CPᵀ Z τ_CP, τ_CPᵀ z with CP = −pport
        pi = parent[i]
        for a in range(3):
            mp[a] = -pport[i, a]
        _tauT_M_tau_add(mp, Z, IA[pi])
        _tauT_mv_add(mp, z, 1.0, pA[pi])
    return True


@njit(cache=True, inline="always")
def _acceleration_sweep(
    kind: np.ndarray,
    parent: np.ndarray,
    iq: np.ndarray,
    S: np.ndarray,
    pport: np.ndarray,
    tau: np.ndarray,
    ov: int,
    floating: bool,
    kin: tuple[np.ndarray, np.ndarray, np.ndarray],
    IA: np.ndarray,
    pA: np.ndarray,
    IS: np.ndarray,
    dinv: np.ndarray,
    out: np.ndarray,
) -> bool:
    """``forward_dynamics``' root → leaves sweep: the floating root's ẋ'_P = I₀⁻¹ (W_root − p₀), then per
    block X ẋ'^B + c ((17)/(24)), q̈ = d⁻¹ (u − Sᵀ p − (I S)ᵀ (X ẋ'^B + c)) into ``out`` and
    ẋ'^A = X ẋ'^B + c + S q̈.  ``kin`` = (Pab, c, r).  False when the root's I₀ is singular."""
    Pab, c, r = kin
    n = kind.shape[0]
    mp = np.empty(3)
    # root → leaves: (22)/(28) with the loop closed, then (17)/(24)
    acc = np.empty((n, 6))
    if floating:
        rhs = np.empty(6)
        for a in range(6):
            rhs[a] = tau[a] - pA[0, a]
        if not _solve6(IA[0], rhs, acc[0]):
            return False
        for a in range(6):
            out[a] = acc[0, a]
    else:
        acc[0, :] = 0.0
    a_in = np.empty(6)
    base = np.empty(6)
    for i in range(1, n):
        pt = pport[i]
        ap = acc[parent[i]]
        for a in range(3):
            mp[a] = -pt[a]
        _tau_mv(mp, ap, a_in)  # the parent's acceleration at the port (14)
        _rotT6(Pab[i], a_in, base)
        if kind[i] == KIND_PRISMATIC:
            _tau_mv(r[i], base, a_in)
            base[:] = a_in
        for a in range(6):
            base[a] += c[i, a]
        if kind[i] == KIND_WELD:
            acc[i] = base
        else:
            Si, ISi = S[i], IS[i]
            s1 = 0.0
            s2 = 0.0
            for a in range(6):
                s1 += Si[a] * pA[i, a]
                s2 += ISi[a] * base[a]
            qq = dinv[i] * (tau[ov + iq[i]] - s1 - s2)
            out[ov + iq[i]] = qq
            for a in range(6):
                acc[i, a] = base[a] + Si[a] * qq
    return True


@njit(cache=True)
def forward_dynamics(
    tree: Tree,
    g: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    tau: np.ndarray,
    loads: Loads,
    loops: Loops,
    out: np.ndarray,
) -> bool:
    """v̇ for the generalized forces ``tau`` into ``out`` (``System._forward_reference``); returns False
    when a joint's Sᵀ I S or the root's articulated inertia is singular (the caller then runs the
    reference, which raises).

    Leaves → root, for block i with the children's channels substituted (the loop of (22) closed):
        I = D_P + Σ_children τ_CPᵀ Z_c τ_CP,   p = −D_P [g; 0] + C(x') D_P x' + Σ τ_CPᵀ z_c − Σ τ_CPᵀ W_load
    so that −W_{A/B,P} = I ẋ'^A + p (18)/(25); with ẋ'^A = X ẋ'^B + c + S q̈ and (22)/(28) solved,
        q̈ = d⁻¹ (u − Sᵀ p − (I S)ᵀ (X ẋ'^B + c)),   d = Sᵀ I S,
        I^a = I − (I S) d⁻¹ (I S)ᵀ,   z^a = I^a c + p + (I S) d⁻¹ (u − Sᵀ p),
    moved to P0 by (29) (prismatic) and to R_b: Z = Q I^a Qᵀ, z = Q z^a, Q = diag(P_{a/b}, P_{a/b}).
    Root → leaves: the floating root's G_P (Fig. 2), ẋ'_P = I₀⁻¹ (W_root − p₀), then for each block
    X ẋ'^B + c ((17)/(24)), q̈ above and ẋ'^A = X ẋ'^B + c + S q̈."""
    kind, parent, iq, P0, axis, S, pport, D = tree
    n = kind.shape[0]
    floating = kind[0] == KIND_FLOATING
    oq, ov = (7, 6) if floating else (0, 0)
    R, pos, tw, Pab, c, r, Wload = _kinematics_and_loads(tree, q, v, loads, loops)
    IA = np.empty((n, 6, 6))
    pA = np.empty((n, 6))
    IS = np.zeros((n, 6))
    dinv = np.zeros(n)
    if not _articulated_sweep(
        kind, parent, iq, S, pport, D, g, tau, ov, (R, tw, Pab, c, r, Wload), IA, pA, IS, dinv
    ):
        return False
    return _acceleration_sweep(
        kind, parent, iq, S, pport, tau, ov, floating, (Pab, c, r), IA, pA, IS, dinv, out
    )


@njit(cache=True)
def inverse_dynamics(
    tree: Tree,
    g: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    acc_in: np.ndarray,
    loads: Loads,
    loops: Loops,
    out: np.ndarray,
) -> bool:
    """The generalized forces that produce v̇ = ``acc_in`` into ``out`` (``System._inverse_reference``).

    Root → leaves: ẋ'^A = X ẋ'^B + c + S q̈ ((17)/(24), X: the transport (14) to the port, the frame
    change and, for a prismatic joint, τ_{−xt̃}).  Leaves → root: the wrench the block needs,
    W_{./A,P} = D_P ẋ'^A + (−D_P [g; 0] + C(x') D_P x') − Σ τ_CPᵀ W_./A,C (11), W_{A/B,P} = −W_{./A,P}
    (18)/(25), u = −Sᵀ W_{A/B,P} (19)/(26), then W_{A/B,P0} = τ_{−xt̃}ᵀ W_{A/B,P} (29) in R_b to the
    parent's port; the floating root's output is its W_{./A,P}."""
    kind, parent, iq, P0, axis, S, pport, D = tree
    n = kind.shape[0]
    floating = kind[0] == KIND_FLOATING
    oq, ov = (7, 6) if floating else (0, 0)
    R, pos, tw, Pab, c, r, Wsum = _kinematics_and_loads(tree, q, v, loads, loops)
    acc = np.empty((n, 6))
    if floating:
        for a in range(6):
            acc[0, a] = acc_in[a]
    else:
        acc[0, :] = 0.0
    a_in = np.empty(6)
    base = np.empty(6)
    mp = np.empty(3)
    for i in range(1, n):
        for a in range(3):
            mp[a] = -pport[i, a]
        _tau_mv(mp, acc[parent[i]], a_in)
        _rotT6(Pab[i], a_in, base)
        if kind[i] == KIND_PRISMATIC:
            _tau_mv(r[i], base, a_in)
            base[:] = a_in
        qdd = acc_in[ov + iq[i]] if kind[i] != KIND_WELD else 0.0
        for a in range(6):
            acc[i, a] = base[a] + c[i, a] + S[i, a] * qdd
    W = np.empty(6)
    WP = np.empty(6)
    Wp = np.empty(6)
    stop = -1 if floating else 0
    for i in range(n - 1, stop, -1):
        _body_bias(D[i], R[i], tw[i], g, W)
        for a in range(6):
            s_ = 0.0
            for b in range(6):
                s_ += D[i, a, b] * acc[i, b]
            W[a] += s_ - Wsum[i, a]  # W_{./A,P}
        if i == 0:
            for a in range(6):
                out[a] = W[a]
            break
        for a in range(6):
            WP[a] = -W[a]  # W_{A/B,P}
        if kind[i] != KIND_WELD:
            s_ = 0.0
            for a in range(6):
                s_ += S[i, a] * WP[a]
            out[ov + iq[i]] = -s_
        if kind[i] == KIND_PRISMATIC:
            W[:] = 0.0
            _tauT_mv_add(r[i], WP, 1.0, W)
            WP[:] = W
        _rot6(Pab[i], WP, Wp)
        for a in range(3):
            mp[a] = -pport[i, a]
        _tauT_mv_add(mp, Wp, 1.0, Wsum[parent[i]])
    return True
