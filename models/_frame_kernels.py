"""Frames from one Pinocchio pass, compiled (numba): every frame's pose, LOCAL_WORLD_ALIGNED Jacobian, twist and
classical acceleration at v̇ = 0 from the joints' poses (``data.oMi``) and the joint Jacobians (``data.J``, world
axes, the linear part the velocity of the point at the world origin: column c = [v_O,c; ω_c]) and v alone, which
``pin.computeJointJacobians`` (or ``pin.crba`` in the WORLD convention) leaves.  The models layer's loop closures
(``models/loops.py: ClosureSet``) and the controllers' compiled steps (``controllers/_uk_kernels.py``,
``_pidc_kernels.py``) share it; the derivation is in ``frame_states``' docstring, and
tests/test_uk_kernels.py checks it against Pinocchio's frame Jacobian and classical acceleration.

A frame f rigidly attached to joint j at the placement ʲM_f = (R_f, t_f), the joint's pose ⁰M_j = (R_j, p_j):

    R = R_j R_f,   p = p_j + R_j t_f
    J[:, c] = [J_O,v[:, c] + J_ω[:, c] × p;  J_ω[:, c]]   for c in the support of j, 0 elsewhere
    [v_p; ω] = J v,   acc = [a_O + α × p + ω × v_p;  α],   [a_O; α] = Σ_c (V_c × J_c) v_c

``_f64_at``: a float64 pointer at an integer address, so that a kernel reads Pinocchio's Eigen storage in place
(addresses taken in Python once per ``Data`` object, whose storage stays put while it lives).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numba import carray, farray, njit, types
from numba.extending import intrinsic

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)


def _pointer_at(dtype: types.Type) -> Callable[..., Any]:
    """An intrinsic: the ``dtype`` pointer at an integer address (an array's data pointer, taken in Python)."""
    ptr = types.CPointer(dtype)

    def at(typingctx: Any, address: types.Type) -> tuple[Any, Callable[..., Any]]:
        sig = ptr(types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Sequence[Any]) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(ptr))

        return sig, codegen

    return intrinsic(at)


_f64_at = _pointer_at(types.float64)
"""The float64 pointer at an integer address."""
_i64_at = _pointer_at(types.int64)
"""The int64 pointer at an integer address."""


@njit(cache=True, inline="always")
def read_joint_poses(ptr: np.ndarray, first: int, nj: int, jpose: np.ndarray) -> None:
    """jpose[k] = [R row-major (9), p (3)] of joint k's pose ⁰M_k, k < nj, read in place from Pinocchio's data.oMi:
    the addresses of its rotation (Eigen's column-major 3×3) and translation at ptr[first + 2k], ptr[first + 2k + 1]."""
    for k in range(nj):
        R = farray(_f64_at(ptr[first + 2 * k]), (3, 3))
        p = carray(_f64_at(ptr[first + 1 + 2 * k]), (3,))
        for i in range(3):
            for c in range(3):
                jpose[k, 3 * i + c] = R[i, c]
            jpose[k, 9 + i] = p[i]


@njit(cache=True, inline="always")
def cross_axis_add(
    acc: tuple, V: tuple, S: tuple, vc: float
) -> tuple[float, float, float, float, float, float]:
    """acc + (V × S) vc, the term a joint column adds to a spatial acceleration acc = [a; α] (6-tuples, world axes,
    at the origin): V = [u; ω] the velocity of the body that carries the axis S = [l; w],
    V × S = [ω × l + u × w; ω × w] (the motion cross product).  Shared by ``frame_states`` and
    ``_uk_kernels.bias_forces``."""
    a0, a1, a2, b0, b1, b2 = acc
    u0, u1, u2, o0, o1, o2 = V
    l0, l1, l2, w0, w1, w2 = S
    return (
        a0 + (o1 * l2 - o2 * l1 + u1 * w2 - u2 * w1) * vc,
        a1 + (o2 * l0 - o0 * l2 + u2 * w0 - u0 * w2) * vc,
        a2 + (o0 * l1 - o1 * l0 + u0 * w1 - u1 * w0) * vc,
        b0 + (o1 * w2 - o2 * w1) * vc,
        b1 + (o2 * w0 - o0 * w2) * vc,
        b2 + (o0 * w1 - o1 * w0) * vc,
    )


@njit(cache=True, inline="always")
def frame_states(
    Jw: np.ndarray,
    v: np.ndarray,
    jpose: np.ndarray,
    fint: np.ndarray,
    fplace: np.ndarray,
    fJ: np.ndarray,
    fvec: np.ndarray,
) -> None:
    """Every frame's pose, LOCAL_WORLD_ALIGNED Jacobian, twist and classical acceleration (module
    docstring).  Jw: data.J (6×nv); v (nv,); jpose (nj + 1, 12): every joint's [R_j row-major (9), p_j (3)],
    the world's last;
    fint (nf, 1+nv): [the frame's joint's row in jpose, support mask of the nv columns]; fplace (nf, 4, 4):
    ʲM_f.  Out: fJ (nf, 6, nv); fvec (nf, 24) = [R row-major (9), p (3), twist (6), acc (6)].

    The acceleration at v̇ = 0 comes from data.J and v alone: the support columns c of the frame's
    joint, in index order, are its ancestors in order, so the body of column c moves with the spatial
    velocity V_c = Σ_{c' ≤ c} J_c' v_c' (world axes, at the origin), and its joint axis J_c (fixed in that
    body) changes at dJ_c/dt = V_c × J_c (the motion cross product [ω × l + u × w; ω × w] of V = [u; ω] and
    J_c = [l; w]); so the spatial acceleration is a_O = Σ_c (V_c × J_c) v_c = [a_O; α], and at p
    a_sp(p) = a_O + α × p, the classical a_cl = a_sp(p) + ω × v_p.
    A joint of several columns (ball: 3, free: 6; mask 1 on its first column, 2 on the others) has its axes fixed
    in its child body, which moves with V_before + ΔV (ΔV = its own columns' J v): the joint contributes
    (V_before + ΔV) × ΔV = V_before × ΔV, i.e. each of its columns V_before × J_c v_c.  The first column's term is
    written with the running V (V_before + J_c v_c, the same since J_c × J_c = 0, and the 1-DoF joints' unchanged
    expression), a later column's with V_before."""
    n = v.shape[0]
    for k in range(fint.shape[0]):
        s = fint[k, 0]
        for i in range(3):
            r0, r1, r2 = jpose[s, 3 * i], jpose[s, 3 * i + 1], jpose[s, 3 * i + 2]
            for j in range(3):
                fvec[k, 3 * i + j] = r0 * fplace[k, 0, j] + r1 * fplace[k, 1, j] + r2 * fplace[k, 2, j]
            fvec[k, 9 + i] = (
                jpose[s, 9 + i] + r0 * fplace[k, 0, 3] + r1 * fplace[k, 1, 3] + r2 * fplace[k, 2, 3]
            )
        p0, p1, p2 = fvec[k, 9], fvec[k, 10], fvec[k, 11]
        t0 = t1 = t2 = t3 = t4 = t5 = 0.0
        u0 = u1 = u2 = 0.0  # V = [u; ω] at the origin (ω = t3, t4, t5)
        s0 = s1 = s2 = s3 = s4 = s5 = 0.0  # V before the current multi-DoF joint's columns
        a0 = a1 = a2 = al0 = al1 = al2 = 0.0
        for c in range(n):
            mk = fint[k, 1 + c]
            if mk != 0:
                l0, l1, l2 = Jw[0, c], Jw[1, c], Jw[2, c]
                wx, wy, wz = Jw[3, c], Jw[4, c], Jw[5, c]
                vc = v[c]
                if mk == 1:  # a joint's first column: V before it
                    s0, s1, s2, s3, s4, s5 = u0, u1, u2, t3, t4, t5
                u0 += l0 * vc
                u1 += l1 * vc
                u2 += l2 * vc
                t3 += wx * vc
                t4 += wy * vc
                t5 += wz * vc
                # the column's axis turns with the running V, a later column of a ball or free joint's with V
                # before the joint
                V = (u0, u1, u2, t3, t4, t5) if mk == 1 else (s0, s1, s2, s3, s4, s5)
                acc = cross_axis_add((a0, a1, a2, al0, al1, al2), V, (l0, l1, l2, wx, wy, wz), vc)
                a0, a1, a2, al0, al1, al2 = acc
                j0 = l0 + wy * p2 - wz * p1
                j1 = l1 + wz * p0 - wx * p2
                j2 = l2 + wx * p1 - wy * p0
                fJ[k, 0, c] = j0
                fJ[k, 1, c] = j1
                fJ[k, 2, c] = j2
                fJ[k, 3, c] = wx
                fJ[k, 4, c] = wy
                fJ[k, 5, c] = wz
                t0 += j0 * vc
                t1 += j1 * vc
                t2 += j2 * vc
            else:
                for i in range(6):
                    fJ[k, i, c] = 0.0
        fvec[k, 12], fvec[k, 13], fvec[k, 14] = t0, t1, t2
        fvec[k, 15], fvec[k, 16], fvec[k, 17] = t3, t4, t5
        fvec[k, 18] = a0 + al1 * p2 - al2 * p1 + t4 * t2 - t5 * t1
        fvec[k, 19] = a1 + al2 * p0 - al0 * p2 + t5 * t0 - t3 * t2
        fvec[k, 20] = a2 + al0 * p1 - al1 * p0 + t3 * t1 - t4 * t0
        fvec[k, 21], fvec[k, 22], fvec[k, 23] = al0, al1, al2
