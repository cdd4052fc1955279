"""Compiled kernels of the Udwadia–Kalaba control step (issues 12, 22): the per-step small-array algebra of
``controllers/udwadia_kalaba.py`` fused into a few ``numba.njit`` functions fed by what the robot's lean
Pinocchio pass (``Robot.update_for_kernel``: one ``pin.crba`` in the WORLD convention: the joints' poses,
data.J and M) holds, read through addresses bound once (``uk_step``); h, the frames and everything after
are computed here.  Imported lazily by the
controller (numba's import costs ~0.3 s); the machine code is cached on disk (``cache=True``), so a
process pays the compilation once per source change, later ones only the cache load.

Notation (everything LOCAL_WORLD_ALIGNED, as ``models/robot.py: FrameState``): a frame f rigidly
attached to joint j at the placement ʲM_f = (R_f, t_f); the joint's pose ⁰M_j = (R_j, p_j)
(``data.oMi``); the joint Jacobians ``data.J`` (6×nv, world axes, the linear part being the velocity
of the point at the world origin: column c = [v_O,c; ω_c]).

``frame_states`` (``models/_frame_kernels.py``, which the loop closures' Python path shares) — the frame's pose,
Jacobian, twist and classical acceleration:

    R = R_j R_f,   p = p_j + R_j t_f
    J[:, c] = [J_O,v[:, c] + J_ω[:, c] × p;  J_ω[:, c]]   for c in the support of j, 0 elsewhere
              (the velocity field of a rigid motion: v_p = v_O + ω × p)
    [v_p; ω] = J v
    [a_O; α] = Σ_c (V_c × J_c) v_c,  V_c = Σ_{c' ≤ c} J_c' v_c'   (c, c' in the support, in index order:
              the spatial acceleration at v̇ = 0, at the world origin; d/dt J_c = V_c × J_c, V_c the
              velocity of the body that carries joint c's axis, × the motion cross product)
    a_sp(p) = a_O + α × p                              (a spatial acceleration is a motion field too)
    a_cl = a_sp(p) + ω × v_p                           (classical = spatial + ω × v at a material point)
    acc = [a_cl; α] = J̇ v                              (v̇ = 0: Pinocchio's frame classical acceleration)

``bias_forces`` — h = nle(q, v) by the recursive Newton–Euler algorithm in world axes, from data.J and
the joints' poses (what ``pin.crba`` in the WORLD convention leaves), so no second Pinocchio pass:

    V_k = V_λ(k) + J_k v_k,   A_k = A_λ(k) + (V_k × J_k) v_k,   V_0 = 0,  A_0 = [−g; 0]
              (gravity as the base's upward acceleration, uniform in space, so the same at the origin)
    body k: c = p_k + R_k λ_k, I_c = R_k Ī_k R_kᵀ; a spatial inertia applied at the origin,
    Y [u; ω] = [m (u − c × ω);  I_c ω + c × m (u − c × ω)]
    f_k = Y_k A_k + V_k ×* (Y_k V_k),   [u; ω] ×* [f; n] = [ω × f; ω × n + u × f]
    F_k = f_k + Σ_children F,   h_k = J_kᵀ F_k
(tests/test_uk_kernels.py: equal to Pinocchio's nonLinearEffects to 1e-14 relative.)

``task_rows_into`` — the rows A v̇ = b of each task in the controller's form (``Task.qp_rows``: world axes),
scaled by √ω for the levels above the last: each task's error dynamics (W, drift, w, e) from the kernel
of its kind in ``models/_task_kernels.py`` (``coupling_error``, ``frame_error``, ``joint_error``: the
functions the tasks' Python ``error_dynamics`` calls, derived there), then the law
A = W,  b = −drift − K_d w − K_p e − P β (``task_law``), β = K_i z for a task with integral action
(``uk_robust.IntegralTask``) in the task's own axes, rotated to world axes with the rows.

``kkt_solve`` — the last level and the equality levels above it (``_equality`` of the controller):

    H = M + Σ_final ω AᵀA,   r = −(h + D v) + Σ_final ω Aᵀ b,   E v̇ = f the rows above
    H = L Lᵀ (Cholesky),  Y = L⁻¹ [Eᵀ r],  S = E H⁻¹ Eᵀ = Y_Eᵀ Y_E = L_S L_Sᵀ,  S λ = Y_Eᵀ Y_r − f,
    v̇ = L⁻ᵀ (Y_r − Y_E λ),  τ = M v̇ + h + D v
    status 2 (to the null-space path) when H is not positive definite or a pivot of L_S is below
    √rank_tol × the largest one (the test of ``_equality``); status 3 when there is no row above and
    H is not positive definite.

``effort_violated`` — |τ_i| > τ_max,i (1 + 1e-9) on the selected joints (``EffortLimit.violated``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import carray, farray, njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.controllers import kernels
from cmstack.controllers.kernels import passive_factor, passive_null, passive_torque, vanishing_rows
from cmstack.models import _frame_kernels, _loop_kernels, _task_kernels, _trajectory_kernels
from cmstack.models._frame_kernels import _f64_at, _i64_at, cross_axis_add, frame_states, read_joint_poses  # noqa: F401 (re-exported: _pidc_kernels, tests, bench)
from cmstack.models._kernel_cache import depends_on
from cmstack.models._loop_kernels import WELD_B, closure_phi, closure_rows
from cmstack.models._task_kernels import coupling_error, frame_error, joint_error, log3, task_law  # noqa: F401 (log3: re-exported)
from cmstack.models._trajectory_kernels import circle_sample, sinusoid_sample
from cmstack.models.trajectory import CIRCLE_ROW

depends_on(
    __file__, kernels, _frame_kernels, _loop_kernels, _task_kernels, _trajectory_kernels
)  # numba's cache does not see a change of a callee in another file

FRAME, POSTURE, LOOP, PYTHON = 1, 2, 3, 4
"""The row builders of ``task_rows_into``; LOOP: any loop closure, a ``RigidCoupling`` too (the loop code ``WELD_B``,
``models/_loop_kernels.py``); PYTHON: a task whose rows its own Python wrote into Ab before the call
(``models/step_engine.PythonRows``), left as they are."""
OK, LIMIT, NULLSPACE, SINGULAR = 0, 1, 2, 3


@njit(cache=True, inline="always")
def loop_error(
    code: int,
    xa: np.ndarray,
    Ja: np.ndarray,
    xb: np.ndarray,
    Jb: np.ndarray,
    v: np.ndarray,
    nsel: int,
    sc: float,
    Ab: np.ndarray,
    row0: int,
    ed: np.ndarray,
) -> None:
    """A loop closure as a task (``models/loops.py``: W = J, drift = J̇v, w = J v, e = φ, P = I): its rows J and
    J̇v from ``models/_loop_kernels.closure_rows`` (the kernel PIDC's compiled step uses) into Ab[row0:row0 + nsel]
    (J̇v in the b column, until ``task_law`` writes b there), φ from ``closure_phi``; ed (4, ≥ nsel) ←
    [J̇v; J v; φ; φ]; then the rows of A scaled by sc (w is that of the unscaled J, as ``Task.compute`` before the
    level's √ω)."""
    n = v.shape[0]
    closure_rows(code, xa, Ja, xb, Jb, Ab, Ab[:, n], row0)
    closure_phi(code, xa, xb, ed[2], np.int64(0))  # an int64, as ClosureSet's pass gives: one compiled copy
    for i in range(nsel):
        r = row0 + i
        w = 0.0
        for c in range(n):
            w += Ab[r, c] * v[c]
        ed[0, i] = Ab[r, n]
        ed[1, i] = w
        ed[3, i] = ed[2, i]
        if sc != 1.0:
            for c in range(n):
                Ab[r, c] *= sc


@njit(cache=True, inline="always")
def task_rows_into(
    t: float,
    q: np.ndarray,
    v: np.ndarray,
    fJ: np.ndarray,
    fvec: np.ndarray,
    tint: np.ndarray,
    tflt: np.ndarray,
    tgtH: np.ndarray,
    tgtVA: np.ndarray,
    tcirc: np.ndarray,
    pidx: np.ndarray,
    qref: np.ndarray,
    tbias: np.ndarray,
    terr: np.ndarray,
    Ab: np.ndarray,
    ed: np.ndarray,
    R: np.ndarray,
) -> None:
    """Rows [A | b] of every task into Ab: each task's error dynamics from its kernel in
    ``models/_task_kernels.py`` (the functions its Python ``error_dynamics`` calls), then ``task_law``.
    tint (nt, 8) = [kind, frame slot a, frame slot b, first row in Ab, first selected row of the 6,
    selected row count, offset in pidx/qref (a loop: its code in ``models/_loop_kernels.py``), 1 if in
    the last level]; a joint task (posture, joint trajectory) has in place of its frame slot a 1 when its
    reference is a sinusoid sampled here, else 0.  pidx (2 np,) the joint tasks' joints: their v indices, then
    their q indices (they differ after a ball or free joint: q is a point of the joint manifold); qref (7 np,) =
    [q_d | v_d | a_d | c | a | ω | φ]: their references (a posture's q_ref, v_d = a_d = 0; a joint trajectory's
    sample, written here from the sinusoid's c, a, ω, φ, or by the caller); tflt (nt, 4) = [K_p, K_d, scale
    (√ω above the last level, 1 in it), ω]; tgtH (nt, 4, 4), tgtVA (nt, 12): a frame task's target pose and
    [v_D; ω_D^D; a_D; ε_D^D]; tcirc (nt, CIRCLE_ROW): [c_x, c_y, c_z, r, ω, φ, 1, u, w] for a frame task following a
    ``Circle`` (its sample at time t written here into the position and tgtVA, the orientation R given in
    tgtH), else 0 last.  tbias (nt, w ≥ 6): a bias β in the task's own axes, A v̇ = b − P β (the integral
    action K_i z of ``uk_robust.IntegralTask``; zero otherwise).  terr (nt, w) out: each task's pose error
    in its own axes, as ``Task.error`` on all rows (coupling [p₂ − p_B; Log(R_Bᵀ R₂)], frame
    [p_D − p_C; Log(R_Cᵀ R_D)], posture q_ref − q, loop φ).  A loop closure (kind ``LOOP``): ``loop_error``; one
    whose error is in frame b's axes (code ``WELD_B``: a ``RigidCoupling``): ``coupling_error``, its rows selected.
    Kind ``PYTHON``: rows the task's own Python wrote before the call, skipped (its terr row is not written).
    ed (4, terr's width), R (3×3): the caller's scratch (``_FusedPlan.task_tables`` gives the tables in this order)."""
    n = v.shape[0]
    np_ = (
        pidx.shape[0] // 2
    )  # pidx = [v indices | q indices]; qref = [q_d | v_d | a_d | c | a | ω | φ], np_ each
    for k in range(tint.shape[0]):
        kind, row0, sel0, nsel = tint[k, 0], tint[k, 3], tint[k, 4], tint[k, 5]
        if kind == PYTHON:  # rows written by the task's own Python before the call
            continue
        a, b, sc = tint[k, 1], tint[k, 2], tflt[k, 2]
        rotated = kind == FRAME or (kind == LOOP and tint[k, 6] == WELD_B)
        if kind == LOOP and rotated:  # a weld in b's axes (the coupling of [Milioshin] 3.27–3.30)
            coupling_error(fvec[a], fJ[a], fvec[b], fJ[b], sel0, nsel, sc, Ab, row0, ed, R)
            m = 6
        elif kind == FRAME:
            if tcirc[k, 6] != 0.0:
                circle_sample(t, tcirc[k], tgtH[k], tgtVA[k])
            frame_error(fvec[a], fJ[a], tgtH[k], tgtVA[k], sel0, nsel, sc, Ab, row0, ed, R)
            m = 6
        elif kind == LOOP:
            loop_error(tint[k, 6], fvec[a], fJ[a], fvec[b], fJ[b], v, nsel, sc, Ab, row0, ed)
            m = nsel
        else:
            off = tint[k, 6]
            m = nsel
            o1, o2 = np_ + off, 2 * np_ + off
            if a != 0:  # a joint sinusoid, sampled here (``Sinusoid.sample``'s kernel)
                sinusoid_sample(
                    t,
                    qref[3 * np_ + off : 3 * np_ + off + m],
                    qref[4 * np_ + off : 4 * np_ + off + m],
                    qref[5 * np_ + off : 5 * np_ + off + m],
                    qref[6 * np_ + off : 6 * np_ + off + m],
                    qref[off : off + m],
                    qref[o1 : o1 + m],
                    qref[o2 : o2 + m],
                )
            joint_error(
                q,
                v,
                pidx[off : off + m],
                pidx[np_ + off : np_ + off + m],
                qref[off : off + m],
                qref[o1 : o1 + m],
                qref[o2 : o2 + m],
                sc,
                Ab,
                row0,
                ed,
            )
        for i in range(m):
            terr[k, i] = ed[3, i]
        task_law(
            ed,
            R,
            rotated,
            tflt[k, 0],
            tflt[k, 1],
            sc,
            sel0,
            nsel,
            tbias[k],
            Ab[:, n],
            row0,
        )


@njit(cache=True, inline="always")
def python_rows(tint: np.ndarray, tflt: np.ndarray, pyab: np.ndarray, Ab: np.ndarray) -> None:
    """The rows of the tasks of kind PYTHON into Ab: Ab[row0 + i] = sc pyab[off + i], i < nsel (tint[k] = [kind, ·, ·,
    row0, ·, nsel, off, ·], sc = tflt[k, 2]: √ω above the last level, 1 in it), as the generic path scales a
    level's rows."""
    ncol = Ab.shape[1]
    for k in range(tint.shape[0]):
        if tint[k, 0] != PYTHON:
            continue
        row0, nsel, off, sc = tint[k, 3], tint[k, 5], tint[k, 6], tflt[k, 2]
        for i in range(nsel):
            for c in range(ncol):
                Ab[row0 + i, c] = sc * pyab[off + i, c] if sc != 1.0 else pyab[off + i, c]


@njit(cache=True, inline="always")
def inertia_times(
    m: float, c: tuple, R: np.ndarray, inert: np.ndarray, V: tuple
) -> tuple[float, float, float, float, float, float]:
    """Y [u; ω] = [p; L] = [m (u − c × ω); I_c ω + c × p]: a body's spatial inertia (world axes, at the origin)
    applied to the motion V = [u; ω] (6-tuple); mass m, centre of mass c (3-tuple, world), R (12,) its joint's pose
    [R row-major | p] (I_c = R Ī Rᵀ, applied as R (Ī (Rᵀ ω))), inert (13,) = [m, lever (3), Ī (3×3 row-major)]."""
    c0, c1, c2 = c
    u0, u1, u2, o0, o1, o2 = V
    p0 = m * (u0 - (c1 * o2 - c2 * o1))
    p1 = m * (u1 - (c2 * o0 - c0 * o2))
    p2 = m * (u2 - (c0 * o1 - c1 * o0))
    y0 = R[0] * o0 + R[3] * o1 + R[6] * o2
    y1 = R[1] * o0 + R[4] * o1 + R[7] * o2
    y2 = R[2] * o0 + R[5] * o1 + R[8] * o2
    z0 = inert[4] * y0 + inert[5] * y1 + inert[6] * y2
    z1 = inert[7] * y0 + inert[8] * y1 + inert[9] * y2
    z2 = inert[10] * y0 + inert[11] * y1 + inert[12] * y2
    L0 = R[0] * z0 + R[1] * z1 + R[2] * z2 + c1 * p2 - c2 * p1
    L1 = R[3] * z0 + R[4] * z1 + R[5] * z2 + c2 * p0 - c0 * p2
    L2 = R[6] * z0 + R[7] * z1 + R[8] * z2 + c0 * p1 - c1 * p0
    return p0, p1, p2, L0, L1, L2


@njit(cache=True, inline="always")
def bias_forces(
    Jw: np.ndarray,
    v: np.ndarray,
    jpose: np.ndarray,
    parent: np.ndarray,
    inert: np.ndarray,
    g: np.ndarray,
    work: np.ndarray,
    h: np.ndarray,
) -> None:
    """h = nle(q, v) = C(q, v) v + g(q) (Pinocchio's ``nonLinearEffects``) by the recursive Newton–Euler
    algorithm in world axes, from data.J, v and every joint's pose (module docstring, "bias_forces").
    Joints k = 0 … nj−1 (Pinocchio's 1 … nj, parents first); parent (nj, 3): [the parent's row (−1 for the
    root), the joint's first velocity column, its number of columns (1; a ball joint 3, a free joint 6)]
    (``models/step_engine.body_tables``); inert (nj, 13): [m, lever (3), Ī (3×3 row-major)] of each joint's body
    in its own frame (``model.inertias``); g: gravity (3,); work (nj, 18): [V | A | F].

    A joint of several columns c (their axes J_c fixed in its child body, as Pinocchio's spherical and free
    joints' motion subspaces): ΔV = Σ_c J_c v_c, V_k = V_λ + ΔV and A_k = A_λ + V_k × ΔV = A_λ + V_λ × ΔV
    (ΔV × ΔV = 0), and h_c = J_cᵀ F_k for each of its columns; one column is the case above."""
    nj = parent.shape[0]
    for k in range(nj):
        pk, c0, nc = parent[k, 0], parent[k, 1], parent[k, 2]
        l0, l1, l2, w0, w1, w2 = Jw[0, c0], Jw[1, c0], Jw[2, c0], Jw[3, c0], Jw[4, c0], Jw[5, c0]
        vk = v[c0]
        if nc == 1:
            d0, d1, d2, e0, e1, e2 = l0 * vk, l1 * vk, l2 * vk, w0 * vk, w1 * vk, w2 * vk
        else:  # ΔV = Σ_c J_c v_c over the joint's columns
            d0 = d1 = d2 = e0 = e1 = e2 = 0.0
            for c in range(c0, c0 + nc):
                vc = v[c]
                d0 += Jw[0, c] * vc
                d1 += Jw[1, c] * vc
                d2 += Jw[2, c] * vc
                e0 += Jw[3, c] * vc
                e1 += Jw[4, c] * vc
                e2 += Jw[5, c] * vc
        if pk >= 0:
            s0, s1, s2 = work[pk, 0], work[pk, 1], work[pk, 2]
            r0, r1, r2 = work[pk, 3], work[pk, 4], work[pk, 5]
            a0, a1, a2 = work[pk, 6], work[pk, 7], work[pk, 8]
            b0, b1, b2 = work[pk, 9], work[pk, 10], work[pk, 11]
            u0, u1, u2 = s0 + d0, s1 + d1, s2 + d2
            o0, o1, o2 = r0 + e0, r1 + e1, r2 + e2
        else:
            s0 = s1 = s2 = r0 = r1 = r2 = 0.0
            u0, u1, u2 = d0, d1, d2
            o0, o1, o2 = e0, e1, e2
            a0, a1, a2 = -g[0], -g[1], -g[2]
            b0 = b1 = b2 = 0.0
        # A_k = A_parent + (V_k × J_k) v_k (one column), A_parent + V_parent × ΔV (several: ΔV carries v, so 1)
        if nc == 1:
            V, S, x = (u0, u1, u2, o0, o1, o2), (l0, l1, l2, w0, w1, w2), vk
        else:
            V, S, x = (s0, s1, s2, r0, r1, r2), (d0, d1, d2, e0, e1, e2), 1.0
        a0, a1, a2, b0, b1, b2 = cross_axis_add((a0, a1, a2, b0, b1, b2), V, S, x)
        work[k, 0], work[k, 1], work[k, 2], work[k, 3], work[k, 4], work[k, 5] = u0, u1, u2, o0, o1, o2
        work[k, 6], work[k, 7], work[k, 8], work[k, 9], work[k, 10], work[k, 11] = a0, a1, a2, b0, b1, b2
        # the body in world axes: c = p + R λ, I_c = R Ī Rᵀ (applied as R Ī Rᵀ x)
        m = inert[k, 0]
        R = jpose[k]
        c0 = R[9] + R[0] * inert[k, 1] + R[1] * inert[k, 2] + R[2] * inert[k, 3]
        c1 = R[10] + R[3] * inert[k, 1] + R[4] * inert[k, 2] + R[5] * inert[k, 3]
        c2 = R[11] + R[6] * inert[k, 1] + R[7] * inert[k, 2] + R[8] * inert[k, 3]
        # Y V = [p; L],  Y A = [f; n]
        p0, p1, p2, L0, L1, L2 = inertia_times(m, (c0, c1, c2), R, inert[k], (u0, u1, u2, o0, o1, o2))
        f0, f1, f2, n0, n1, n2 = inertia_times(m, (c0, c1, c2), R, inert[k], (a0, a1, a2, b0, b1, b2))
        # f = Y A + V ×* (Y V),  V ×* [p; L] = [ω × p; ω × L + u × p]
        work[k, 12] = f0 + o1 * p2 - o2 * p1
        work[k, 13] = f1 + o2 * p0 - o0 * p2
        work[k, 14] = f2 + o0 * p1 - o1 * p0
        work[k, 15] = n0 + o1 * L2 - o2 * L1 + u1 * p2 - u2 * p1
        work[k, 16] = n1 + o2 * L0 - o0 * L2 + u2 * p0 - u0 * p2
        work[k, 17] = n2 + o0 * L1 - o1 * L0 + u0 * p1 - u1 * p0
    for k in range(nj - 1, -1, -1):  # F_k = f_k + Σ children's F;  h_c = J_cᵀ F_k for the joint's columns c
        for c in range(parent[k, 1], parent[k, 1] + parent[k, 2]):
            h[c] = (
                Jw[0, c] * work[k, 12]
                + Jw[1, c] * work[k, 13]
                + Jw[2, c] * work[k, 14]
                + Jw[3, c] * work[k, 15]
                + Jw[4, c] * work[k, 16]
                + Jw[5, c] * work[k, 17]
            )
        pk = parent[k, 0]
        if pk >= 0:
            for i in range(12, 18):
                work[pk, i] += work[k, i]


@njit(cache=True)
def _cholesky(A: np.ndarray, L: np.ndarray, m: int) -> bool:
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
def _chol_solve(L: np.ndarray, m: int, B: np.ndarray, ncol: int) -> None:
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


def kkt_work_size(n: int, m: int) -> int:
    """Length of ``kkt_solve``'s work array for n degrees of freedom and m rows above the last level."""
    return 2 * n * n + n + n * (m + 1) + 2 * m * m + m


@njit(cache=True, inline="always")
def kkt_solve(
    M: np.ndarray,
    h: np.ndarray,
    D: np.ndarray,
    v: np.ndarray,
    Ab: np.ndarray,
    tint: np.ndarray,
    tflt: np.ndarray,
    m_up: int,
    gauss: float,
    sqrt_tol: float,
    wk: np.ndarray,
    out: np.ndarray,
) -> int:
    """The equality-constrained last level by the Schur complement (module docstring).  gauss: 1.0 (H
    and r start from Gauss' M and −(h + D v)) or 0.0 (the last level without Gauss: H = Σ ω AᵀA,
    r = Σ ω Aᵀ b; the controller's "absorbed" plans).  wk: work array of ``kkt_work_size(n, m)`` values,
    [H | r | L | Y | S | L_S | λ], H and r left for the caller's fallbacks; out (3n + m): [v̇ | τ | h + D v | λ].
    Only forward substitutions touch the m + 1 right-hand sides: with Y = L⁻¹ [Eᵀ r] (H = L Lᵀ),
    S = E H⁻¹ Eᵀ = Y_Eᵀ Y_E and E H⁻¹ r = Y_Eᵀ Y_r, then v̇ = H⁻¹(r − Eᵀλ) = L⁻ᵀ (Y_r − Y_E λ), one back
    substitution.  Returns OK, NULLSPACE or SINGULAR."""
    n = v.shape[0]
    m = m_up
    if wk.shape[0] < 2 * n * n + n + n * (m + 1) + 2 * m * m + m:
        raise ValueError("kkt_solve: the work array is shorter than kkt_work_size(n, m)")
    w0 = wk.ctypes.data  # views without reshape's checks (wk is contiguous, long enough)
    H = carray(_f64_at(w0), (n, n))
    r = wk[n * n : n * n + n]
    o = n * n + n
    L = carray(_f64_at(w0 + 8 * o), (n, n))
    o += n * n
    Y = carray(_f64_at(w0 + 8 * o), (n, m + 1))
    o += n * (m + 1)
    S = carray(_f64_at(w0 + 8 * o), (m, m))
    o += m * m
    LS = carray(_f64_at(w0 + 8 * o), (m, m))
    o += m * m
    lm = carray(_f64_at(w0 + 8 * o), (m, 1))
    x = out[:n]
    tau = out[n : 2 * n]
    hD = out[2 * n : 3 * n]
    lam = out[3 * n : 3 * n + m]
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
                if ai == 0.0:  # (a posture's row has one entry: skip the others' zero terms)
                    continue
                r[i] += ai * b
                for j in range(i, n):
                    H[i, j] += ai * Ab[rr, j]
    for i in range(n):
        for j in range(i + 1, n):
            H[j, i] = H[i, j]
    if not _cholesky(H, L, n):
        return NULLSPACE if m > 0 else SINGULAR
    for i in range(n):  # Y = L⁻¹ [Eᵀ r], a row at a time
        for c in range(m):
            Y[i, c] = Ab[c, i]
        Y[i, m] = r[i]
        for p in range(i):
            lip = L[i, p]
            for c in range(m + 1):
                Y[i, c] -= lip * Y[p, c]
        d = L[i, i]
        for c in range(m + 1):
            Y[i, c] /= d
    if m > 0:
        for i in range(m):  # S = Y_Eᵀ Y_E (upper triangle), E H⁻¹ r − f
            for j in range(i, m + 1):
                acc = 0.0
                for c in range(n):
                    acc += Y[c, i] * Y[c, j]
                if j < m:
                    S[i, j] = acc
                else:
                    lam[i] = acc - Ab[i, n]
        if not _cholesky(S, LS, m):
            return NULLSPACE
        dmin = LS[0, 0]
        dmax = LS[0, 0]
        for i in range(1, m):
            dmin = min(dmin, LS[i, i])
            dmax = max(dmax, LS[i, i])
        if not dmin > sqrt_tol * dmax:
            return NULLSPACE
        for i in range(m):
            lm[i, 0] = lam[i]
        _chol_solve(LS, m, lm, 1)
        for i in range(m):
            lam[i] = lm[i, 0]
    for i in range(n):  # z = Y_r − Y_E λ
        acc = Y[i, m]
        for c in range(m):
            acc -= Y[i, c] * lam[c]
        x[i] = acc
    for i in range(n - 1, -1, -1):  # v̇ = L⁻ᵀ z
        acc = x[i]
        for p in range(i + 1, n):
            acc -= L[p, i] * x[p]
        x[i] = acc / L[i, i]
    for i in range(n):
        tau[i] = hD[i]
    for j in range(n):
        xj = x[j]
        for i in range(n):
            tau[i] += M[i, j] * xj
    return OK


@njit(cache=True, inline="always")
def effort_violated(tau: np.ndarray, eidx: np.ndarray, tmax: np.ndarray) -> bool:
    """|τ_i| > τ_max,i (1 + 1e-9) for some selected joint i (``EffortLimit.violated``)."""
    for k in range(eidx.shape[0]):
        if abs(tau[eidx[k]]) > tmax[k] * (1.0 + 1e-9):
            return True
    return False


@njit(cache=True, inline="always")
def passive_level(
    M: np.ndarray,
    h: np.ndarray,
    D: np.ndarray,
    v: np.ndarray,
    Ab: np.ndarray,
    m_max: int,
    pas: np.ndarray,
    lrows: np.ndarray,
    lscale: np.ndarray,
    lvl: np.ndarray,
    tol: float,
    Jc: np.ndarray,
    X: np.ndarray,
    Z: np.ndarray,
    piv: np.ndarray,
    tq: np.ndarray,
    tz: np.ndarray,
    e: np.ndarray,
    counts: np.ndarray,
    keep: np.ndarray,
    sizes: np.ndarray,
) -> tuple[int, int]:
    """Level 1 with the passive joints' zero-torque condition, then every upper level without its vanishing rows,
    as ``UdwadiaKalabaController._passive_rows`` and ``_without_empty_rows`` (derived there), on the rows
    ``task_rows_into`` wrote into Ab: level 1's lvl[0] rows first, then a gap of p = len(pas) rows, then the other
    upper levels (lvl[1:] rows), m_max = Σ lvl + p rows in all.

        J_c = level 1's loop rows lrows / their √ω,  G = S_p J_cᵀ and its COD (``kernels.passive_factor``: rank r),
        rows U_⊥ᵀ S_p M v̇ = −U_⊥ᵀ S_p (h + D v) (U_⊥: ``kernels.passive_null``) into the gap (p − r of its p
        rows), the other levels moved up by the r rows left; ``kernels.vanishing_rows`` per level, the kept
        rows moved up in order.

    J_c (a table), X, Z, piv, tq, tz: the COD, kept for ``kernels.passive_torque`` after the solve; e, keep (int,
    ≥ m_max), sizes (int, the levels' count): scratch; counts (float) ← the kept rows of each upper level.
    Returns (the kept rows, E = Ab[:that]; the rank r)."""
    n = v.shape[0]
    nl = lrows.shape[0]
    npas = pas.shape[0]
    for i in range(nl):
        r = lrows[i]
        s = lscale[i]
        for c in range(n):
            Jc[i, c] = Ab[r, c] / s
    rank = passive_factor(Jc, pas, tol, X, Z, piv, tq, tz)
    k = npas - rank
    d0 = lvl[0]
    for j in range(k):
        passive_null(X, npas, rank, tq, rank + j, e)
        row = d0 + j
        x = 0.0
        for i in range(npas):
            pi = pas[i]
            x += e[i] * (h[pi] + D[pi] * v[pi])
        Ab[row, n] = -x
        for c in range(n):
            x = 0.0
            for i in range(npas):
                x += e[i] * M[pas[i], c]
            Ab[row, c] = x
    if rank > 0:  # the gap's r unused rows: the levels below move up
        for row in range(d0 + npas, m_max):
            for c in range(n + 1):
                Ab[row - rank, c] = Ab[row, c]
    mu = m_max - rank
    nlv = lvl.shape[0]
    sizes[0] = d0 + k
    for L in range(1, nlv):
        sizes[L] = lvl[L]
    dropped = vanishing_rows(Ab[:mu, :n], Ab[:mu, n], sizes, tol, keep)
    i0 = 0
    out = 0
    for L in range(nlv):
        kept = 0
        for row in range(i0, i0 + sizes[L]):
            if keep[row]:
                if out != row:
                    for c in range(n + 1):
                        Ab[out, c] = Ab[row, c]
                out += 1
                kept += 1
        counts[L] = kept
        i0 += sizes[L]
    return mu - dropped, rank


#: header of the plan's integer table (``uk_plan._FusedPlan``): sizes, then offsets into the two tables; the
#: closed-chain part (N_PAS > 0, ``passive_level``): the passive joints, the loops' rows in level 1 and their √ω,
#: the upper levels' sizes, the table J_c, the rank tolerance, the COD's work arrays (``kernels.passive_work``);
#: O_SCR: the step's float scratch (4 width + 9 + n), O_KEEP: its integer scratch (m + levels, closed plans)
(
    N,
    NT,
    NF,
    NJ,
    M_UP,
    NROWS,
    WIDTH,
    O_TINT,
    O_FINT,
    O_PIDX,
    N_PIDX,
    O_EIDX,
    N_EIDX,
    O_FPLACE,
    O_FJ,
    O_FVEC,
    O_TFLT,
    O_TGTH,
    O_TGTVA,
    O_TCIRC,
    O_QREF,
    O_TBIAS,
    O_TERR,
    O_WK,
    N_WK,
    O_JPOSE,
    O_PARENT,
    O_INERT,
    O_GRAV,
    O_RNEA,
    O_PAS,
    N_PAS,
    O_LROWS,
    N_LROWS,
    O_LVL,
    N_LVL,
    O_LSCALE,
    O_JC,
    O_CTOL,
    O_PWORK,
    O_PPIV,
    O_SCR,
    O_KEEP,
) = range(43)
#: the rows of the tasks without a compiled row builder (kind PYTHON): a table of N_PYAB rows × (nv + 1), [A | b]
#: unscaled as the task's own ``qp_rows`` gave them (``models/step_engine.PythonRows``), tint[k, 6] the
#: task's first row in it; the step copies them, scaled by √ω, into its Ab
O_PYAB, N_PYAB = 43, 44
#: nq, the configuration's size (nv + 1 per ball joint, + 1 for a free joint): q is a point of the joint manifold,
#: copied as it is; every other table is sized by nv
NQ = 45
#: ptr: data.J, data.M, the damping D, the effort limit's τ_max, then every joint's (R, p) in data.oMi
P_JOINTS = 4
HEADER = 48
NONFINITE = 4


@njit(cache=True)
def uk_step(
    t: float, q: np.ndarray, v: np.ndarray, ptr: np.ndarray, I: np.ndarray, F: np.ndarray, buf: np.ndarray
) -> int:
    """One fused step: the state's test, bias_forces (h) → frame_states → task_rows_into → kkt_solve →
    effort_violated.

    t (s); q (nq,), v (nv,) of this step.  ptr: addresses of Pinocchio's data.J (6×nv) and data.M (nv×nv)
    (``pin.crba``'s), of the controller's damping D (nv,) and the effort limit's τ_max (as many as its
    joints), then of every joint's rotation (3×3) and translation (3,) in data.oMi — Eigen's
    column-major storage, owned by the data object the plan holds (``_FusedPlan.bind``), refreshed in
    place by Pinocchio; D and τ_max are read where they live, so a change in place is seen.  I, F: the
    plan's integer and float tables (``_FusedPlan``: a header of sizes and offsets, ``HEADER`` ints, then
    every table), so that a call passes seven arguments; the tables' views are made from their addresses
    (``carray``: no size checks, no reference counts), the sizes checked once here.  buf (per
    step, written): [q (nq) | v | M | h | v̇ | τ | h + D v | λ | Ab], the copies the step's Kinematics holds
    and the step's results.  Returns OK, LIMIT (the KKT solution violates the effort limit: the caller
    solves the QP), NULLSPACE, SINGULAR, or NONFINITE (|q|² + |v|² is not finite: ``Robot.update``'s
    test; nothing else is computed)."""
    n, nq = I[N], I[NQ]
    s = 0.0
    for i in range(nq):
        s += q[i] * q[i]
    for i in range(n):
        s += v[i] * v[i]
    if not math.isfinite(s):
        return NONFINITE
    nt, nf, nj, m, nrows, width = I[NT], I[NF], I[NJ], I[M_UP], I[NROWS], I[WIDTH]
    Jw = farray(_f64_at(ptr[0]), (6, n))
    Md = farray(_f64_at(ptr[1]), (n, n))
    if buf.shape[0] != nq + 5 * n + n * n + m + nrows * (n + 1) + I[N_LROWS] + I[N_LVL]:
        raise ValueError("uk_step: the step buffer's length does not match the plan")
    b0, i0, f0 = buf.ctypes.data, I.ctypes.data, F.ctypes.data  # views without reshape's checks
    bq = carray(_f64_at(b0), (nq,))
    bv = carray(_f64_at(b0 + 8 * nq), (n,))
    M = carray(_f64_at(b0 + 8 * (nq + n)), (n, n))
    o = nq + n + n * n
    h = carray(_f64_at(b0 + 8 * o), (n,))
    o += n
    out = carray(_f64_at(b0 + 8 * o), (3 * n + m,))
    o += 3 * n + m
    Ab = carray(_f64_at(b0 + 8 * o), (nrows, n + 1))
    for i in range(nq):
        bq[i] = q[i]
    for i in range(n):
        bv[i] = v[i]
        for j in range(n):
            M[i, j] = Md[i, j]
    jpose = carray(_f64_at(f0 + 8 * I[O_JPOSE]), (nj + 1, 12))  # the world's pose last (constant)
    read_joint_poses(ptr, P_JOINTS, nj, jpose)
    tint = carray(_i64_at(i0 + 8 * I[O_TINT]), (nt, 8))
    fint = carray(_i64_at(i0 + 8 * I[O_FINT]), (nf, n + 1))
    pidx = carray(_i64_at(i0 + 8 * I[O_PIDX]), (2 * I[N_PIDX],))  # [v indices | q indices]
    eidx = carray(_i64_at(i0 + 8 * I[O_EIDX]), (I[N_EIDX],))
    D = carray(_f64_at(ptr[2]), (n,))
    fplace = carray(_f64_at(f0 + 8 * I[O_FPLACE]), (nf, 4, 4))
    fJ = carray(_f64_at(f0 + 8 * I[O_FJ]), (nf, 6, n))
    fvec = carray(_f64_at(f0 + 8 * I[O_FVEC]), (nf, 24))
    tflt = carray(_f64_at(f0 + 8 * I[O_TFLT]), (nt, 4))
    tgtH = carray(_f64_at(f0 + 8 * I[O_TGTH]), (nt, 4, 4))
    tgtVA = carray(_f64_at(f0 + 8 * I[O_TGTVA]), (nt, 12))
    tcirc = carray(_f64_at(f0 + 8 * I[O_TCIRC]), (nt, CIRCLE_ROW))
    qref = carray(_f64_at(f0 + 8 * I[O_QREF]), (7 * I[N_PIDX],))
    tbias = carray(_f64_at(f0 + 8 * I[O_TBIAS]), (nt, width))
    terr = carray(_f64_at(f0 + 8 * I[O_TERR]), (nt, width))
    tmax = carray(_f64_at(ptr[3]), (I[N_EIDX],))
    wk = carray(_f64_at(f0 + 8 * I[O_WK]), (I[N_WK],))
    parent = carray(_i64_at(i0 + 8 * I[O_PARENT]), (nj, 3))
    inert = carray(_f64_at(f0 + 8 * I[O_INERT]), (nj, 13))
    grav = carray(_f64_at(f0 + 8 * I[O_GRAV]), (3,))
    rnea = carray(_f64_at(f0 + 8 * I[O_RNEA]), (nj, 18))
    bias_forces(Jw, bv, jpose, parent, inert, grav, rnea, h)
    frame_states(Jw, bv, jpose, fint, fplace, fJ, fvec)
    osc = I[O_SCR]  # scratch: ed (4, width), R (3×3), y (n)
    ed = carray(_f64_at(f0 + 8 * osc), (4, width))
    Rs = carray(_f64_at(f0 + 8 * (osc + 4 * width)), (3, 3))
    task_rows_into(t, bq, bv, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, Ab, ed, Rs)
    if I[N_PYAB] > 0:
        python_rows(tint, tflt, carray(_f64_at(f0 + 8 * I[O_PYAB]), (I[N_PYAB], n + 1)), Ab)
    npas = I[N_PAS]
    if npas == 0:
        st = kkt_solve(M, h, D, bv, Ab, tint, tflt, m, F[0], F[1], wk, out)
        if st == OK and effort_violated(out[n : 2 * n], eidx, tmax):
            return LIMIT
        return st
    # closed chain with passive joints: level 1 gets the zero-torque rows, the vanishing rows are left out
    nl, nlv = I[N_LROWS], I[N_LVL]
    pas = carray(_i64_at(i0 + 8 * I[O_PAS]), (npas,))
    lrows = carray(_i64_at(i0 + 8 * I[O_LROWS]), (nl,))
    lvl = carray(_i64_at(i0 + 8 * I[O_LVL]), (nlv,))
    lscale = carray(_f64_at(f0 + 8 * I[O_LSCALE]), (nl,))
    Jc = carray(_f64_at(f0 + 8 * I[O_JC]), (nl, n))
    L = max(nl, npas) + 1  # ``kernels.passive_work``'s layout: X, Z (L×L), tq, tz, e, yp, w (L)
    o = I[O_PWORK]
    X = carray(_f64_at(f0 + 8 * o), (L, L))
    Z = carray(_f64_at(f0 + 8 * (o + L * L)), (L, L))
    o += 2 * L * L
    tq, tz, e = (
        carray(_f64_at(f0 + 8 * o), (L,)),
        carray(_f64_at(f0 + 8 * (o + L)), (L,)),
        carray(_f64_at(f0 + 8 * (o + 2 * L)), (L,)),
    )
    yp, w = carray(_f64_at(f0 + 8 * (o + 3 * L)), (L,)), carray(_f64_at(f0 + 8 * (o + 4 * L)), (L,))
    piv = carray(_i64_at(i0 + 8 * I[O_PPIV]), (2 * L,))
    nb = buf.shape[0]
    counts = carray(_f64_at(b0 + 8 * (nb - nlv)), (nlv,))
    lam = carray(_f64_at(b0 + 8 * (nb - nlv - nl)), (nl,))
    keep = carray(_i64_at(i0 + 8 * I[O_KEEP]), (m,))
    sizes = carray(_i64_at(i0 + 8 * (I[O_KEEP] + m)), (nlv,))
    mk, rank = passive_level(
        M,
        h,
        D,
        bv,
        Ab,
        m,
        pas,
        lrows,
        lscale,
        lvl,
        F[I[O_CTOL]],
        Jc,
        X,
        Z,
        piv,
        tq,
        tz,
        e,
        counts,
        keep,
        sizes,
    )
    st = kkt_solve(M, h, D, bv, Ab, tint, tflt, mk, F[0], F[1], wk, out)
    if mk > n and st == OK:
        st = NULLSPACE  # more rows than degrees of freedom: the null-space path (``_equality``)
    tau = out[n : 2 * n]  # y = M v̇ + h + D v, then the torque sent T y and the loop reaction λ
    y = carray(_f64_at(f0 + 8 * (osc + 4 * width + 9)), (n,))
    for i in range(n):
        y[i] = tau[i]
    passive_torque(Jc, pas, X, Z, rank, piv, tq, tz, y, yp, w, lam, tau)
    if st == OK and effort_violated(tau, eidx, tmax):
        return LIMIT
    return st
