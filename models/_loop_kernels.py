"""The loop closures' rows compiled (numba): the one copy of their algebra (derived in ``models/loops.py``'s
docstring), for the compiled control steps that read their frames from a frame table (``_frame_kernels.frame_states``;
PIDC's and UK's) and for the Python path (``models/loops.py``: ``closure_rows`` calls ``frame_rows``, ``ClosureSet``'s
pass ``closure_pass``): the rows (J, J̇v) (``closure_rows``) and the residual φ (``closure_phi``, below).

A frame is a row x (24,) = [R row-major (9), p (3), twist [v; ω] (6), acc [a; α] (6)] with its Jacobian (6×n)
(LOCAL_WORLD_ALIGNED, world axes).  With J_d = J_b − J_a, c_d = acc_b − acc_a:

* point (3 rows):     J = J_d,v,                 J̇v = c_d,v
* weld (6 rows):      J = J_d,                   J̇v = c_d
* weld in b's axes (6 rows, code ``WELD_B``: ``LoopClosure(kind="weld", error_axes="b")``, ``RigidCoupling``, the
  coupling of [Milioshin] (3.27)–(3.30)): the weld's rows with the rotation's error ODE taken in frame b's axes, i.e.
  the rows R_bᵀ(ω_b − ω_a) rotated back to world axes by R_b: J = J_d and, since d/dt(R_bᵀ ω_d) = R_bᵀ(ω̇_d − ω_b × ω_d),
      J̇v = c_d − [0; ω_b × ω_d]          (ω_d = J_d,ω v; on a closed loop at rest relative, ω_d = 0, it is the weld's)
  φ is the weld's (R_b Log(R_aᵀ R_b) = Log(R_b R_aᵀ): the rotation's axis is fixed by R_aᵀ R_b)
* revolute (5 rows):  the point rows and, with x_A, y_A the first two columns of R_A,
      J = [x_Aᵀ; y_Aᵀ] J_d,ω,   J̇v = [x_A·c_d,ω + (ω_A × x_A)·ω_d;  y_A·c_d,ω + (ω_A × y_A)·ω_d]
  (ω_A = J_a,ω v, ω_d = J_d,ω v: the twists' angular parts).
* plane (1 row):      with n = R_A ẑ (the third column of R_A), d = p_b − p_A, Δv = v_b − v_A (the twists' linear
  parts, (J_b,v − J_a,v) v), Δc = c_d,v, ṅ = ω_A × n,
      J = nᵀ J_d,v + (n × d)ᵀ J_a,ω,   J̇v = ṅ·Δv + n·Δc + (ṅ × d + n × Δv)·ω_A + (n × d)·c_a,ω

The residual φ (``closure_phi``; a control step that drives it, UK's loop task ``b = −J̇v − K_d J v − K_p φ``,
needs it) with d = p_b − p_a, R_a, R_b the two frames' rotations:

* point:     φ = d
* weld:      φ = [d; Log(R_b R_aᵀ)]              (the one SO(3) log, ``models._lie_kernels._log3``)
* revolute:  φ = [d; x_A·(z_A × z_b); y_A·(z_A × z_b)]
* plane:     φ = n·d,  n = z_A

Checked independently of this code: tests/test_loop_kernels.py (J against finite differences of φ, J̇v against
finite differences of J v along q + t v, φ against Pinocchio's placements and ``pin.log3``, every kind),
tests/test_loops.py (the same on ``LoopClosure``'s constraint functions), tests/test_loops_plane.py (the plane rows on
moving frames and the slider-crank's closed form (67)-(69)).
"""

from __future__ import annotations

import numpy as np
from numba import farray, njit

import cmstack.models._compile_notice  # noqa: F401  (says when these kernels compile)
from cmstack.models import _frame_kernels, _lie_kernels
from cmstack.models._frame_kernels import _f64_at, frame_states, read_joint_poses
from cmstack.models._kernel_cache import depends_on
from cmstack.models._lie_kernels import _log3

depends_on(
    __file__, _frame_kernels, _lie_kernels
)  # numba's cache does not see a change of a callee in another file

POINT, WELD, REVOLUTE, PLANE, WELD_B = 0, 1, 2, 3, 4
KIND_CODES = {"point": POINT, "weld": WELD, "revolute": REVOLUTE, "plane": PLANE}
"""The kinds this kernel knows (``LoopClosure.kind`` → code); a closure of another kind is not compiled.  A weld whose
error ODE is in frame b's axes (``error_axes="b"``) has the code ``WELD_B`` (``LoopClosure.code``)."""
PHI_KINDS = ("point", "weld", "revolute", "plane")
"""The kinds whose residual ``closure_phi`` computes (a control step that needs φ compiles only these)."""


@njit(cache=True)
def closure_rows(
    kind: int,
    xa: np.ndarray,
    Ja: np.ndarray,
    xb: np.ndarray,
    Jb: np.ndarray,
    J: np.ndarray,
    jdv: np.ndarray,
    row0: int,
) -> int:
    """The rows of one closure (module docstring) into J[row0:row0 + m], jdv[row0:row0 + m]; returns m."""
    n = Ja.shape[1]
    if kind == PLANE:
        n0, n1, n2 = xa[2], xa[5], xa[8]  # n = R_A[:, 2] (x row-major)
        d0, d1, d2 = xb[9] - xa[9], xb[10] - xa[10], xb[11] - xa[11]
        m0, m1, m2 = n1 * d2 - n2 * d1, n2 * d0 - n0 * d2, n0 * d1 - n1 * d0  # n × d
        for c in range(n):
            J[row0, c] = (
                n0 * (Jb[0, c] - Ja[0, c])
                + n1 * (Jb[1, c] - Ja[1, c])
                + n2 * (Jb[2, c] - Ja[2, c])
                + m0 * Ja[3, c]
                + m1 * Ja[4, c]
                + m2 * Ja[5, c]
            )
        wa0, wa1, wa2 = xa[15], xa[16], xa[17]
        u0, u1, u2 = xb[12] - xa[12], xb[13] - xa[13], xb[14] - xa[14]  # Δv
        k0, k1, k2 = wa1 * n2 - wa2 * n1, wa2 * n0 - wa0 * n2, wa0 * n1 - wa1 * n0  # ṅ = ω_A × n
        g0 = k1 * d2 - k2 * d1 + n1 * u2 - n2 * u1  # ṅ × d + n × Δv
        g1 = k2 * d0 - k0 * d2 + n2 * u0 - n0 * u2
        g2 = k0 * d1 - k1 * d0 + n0 * u1 - n1 * u0
        jdv[row0] = (
            k0 * u0
            + k1 * u1
            + k2 * u2
            + n0 * (xb[18] - xa[18])
            + n1 * (xb[19] - xa[19])
            + n2 * (xb[20] - xa[20])
            + g0 * wa0
            + g1 * wa1
            + g2 * wa2
            + m0 * xa[21]
            + m1 * xa[22]
            + m2 * xa[23]
        )
        return 1
    if kind == REVOLUTE:
        for i in range(3):
            for c in range(n):
                J[row0 + i, c] = Jb[i, c] - Ja[i, c]
            jdv[row0 + i] = xb[18 + i] - xa[18 + i]
        wa0, wa1, wa2 = xa[15], xa[16], xa[17]
        wd0, wd1, wd2 = xb[15] - wa0, xb[16] - wa1, xb[17] - wa2
        for r in range(2):  # x_A = R_A[:, 0], y_A = R_A[:, 1] (x row-major)
            e0, e1, e2 = xa[r], xa[3 + r], xa[6 + r]
            for c in range(n):
                J[row0 + 3 + r, c] = (
                    e0 * (Jb[3, c] - Ja[3, c]) + e1 * (Jb[4, c] - Ja[4, c]) + e2 * (Jb[5, c] - Ja[5, c])
                )
            g0 = wa1 * e2 - wa2 * e1  # ω_A × e
            g1 = wa2 * e0 - wa0 * e2
            g2 = wa0 * e1 - wa1 * e0
            jdv[row0 + 3 + r] = (
                e0 * (xb[21] - xa[21])
                + e1 * (xb[22] - xa[22])
                + e2 * (xb[23] - xa[23])
                + g0 * wd0
                + g1 * wd1
                + g2 * wd2
            )
        return 5
    m = 3 if kind == POINT else 6
    for i in range(m):
        for c in range(n):
            J[row0 + i, c] = Jb[i, c] - Ja[i, c]
        jdv[row0 + i] = xb[18 + i] - xa[18 + i]
    if kind == WELD_B:  # − ω_b × ω_d (module docstring)
        o0, o1, o2 = xb[15], xb[16], xb[17]
        w0, w1, w2 = xb[15] - xa[15], xb[16] - xa[16], xb[17] - xa[17]
        jdv[row0 + 3] -= o1 * w2 - o2 * w1
        jdv[row0 + 4] -= o2 * w0 - o0 * w2
        jdv[row0 + 5] -= o0 * w1 - o1 * w0
    return m


@njit(cache=True)
def frame_rows(
    kind: int,
    Ra: np.ndarray,
    pa: np.ndarray,
    Ja: np.ndarray,
    ca: np.ndarray,
    Rb: np.ndarray,
    pb: np.ndarray,
    Jb: np.ndarray,
    cb: np.ndarray,
    v: np.ndarray,
    phi: np.ndarray,
    J: np.ndarray,
    jdv: np.ndarray,
    row0: int,
) -> int:
    """One closure from its two frames as Pinocchio gives them (rotation R (3×3), position p (3), LWA Jacobian J
    (6×n), classical acceleration c (6); ``models/loops.py: closure_rows``): the frames' rows x = [R, p, J v, c],
    then ``closure_rows`` (J, J̇v) and ``closure_phi`` (φ) into rows row0:row0 + m; returns m."""
    xa, xb = np.empty(24), np.empty(24)
    for i in range(3):
        for j in range(3):
            xa[3 * i + j] = Ra[i, j]
            xb[3 * i + j] = Rb[i, j]
        xa[9 + i], xb[9 + i] = pa[i], pb[i]
    for i in range(6):
        ta, tb = 0.0, 0.0
        for c in range(v.shape[0]):
            ta += Ja[i, c] * v[c]
            tb += Jb[i, c] * v[c]
        xa[12 + i], xb[12 + i] = ta, tb
        xa[18 + i], xb[18 + i] = ca[i], cb[i]
    closure_rows(kind, xa, Ja, xb, Jb, J, jdv, row0)
    return closure_phi(kind, xa, xb, phi, row0)


@njit(cache=True)
def closure_pass(
    ptr: np.ndarray,
    v: np.ndarray,
    jpose: np.ndarray,
    fint: np.ndarray,
    fplace: np.ndarray,
    fJ: np.ndarray,
    fvec: np.ndarray,
    lint: np.ndarray,
    phi: np.ndarray,
    J: np.ndarray,
    jdv: np.ndarray,
) -> None:
    """Every closure's φ, J and J̇v after one ``pin.computeJointJacobians`` (``models/loops.py: ClosureSet``): the
    joints' poses and data.J read in place at the addresses ptr = [data.J, (R_j, p_j) of each joint slot in
    data.oMi] (Eigen's column-major storage), the frames by ``_frame_kernels.frame_states``, the rows by
    ``closure_rows`` and ``closure_phi``; lint (nl, 4) = [kind code, frame slot a, frame slot b, first row]."""
    n = v.shape[0]
    Jw = farray(_f64_at(ptr[0]), (6, n))
    read_joint_poses(ptr, 1, jpose.shape[0], jpose)
    frame_states(Jw, v, jpose, fint, fplace, fJ, fvec)
    for k in range(lint.shape[0]):
        a, b = lint[k, 1], lint[k, 2]
        closure_rows(lint[k, 0], fvec[a], fJ[a], fvec[b], fJ[b], J, jdv, lint[k, 3])
        closure_phi(lint[k, 0], fvec[a], fvec[b], phi, lint[k, 3])


@njit(cache=True)
def loop_rows(lint: np.ndarray, fJ: np.ndarray, fvec: np.ndarray, J: np.ndarray, jdv: np.ndarray) -> None:
    """Every closure's rows from the frame table: lint (nl, 4) = [kind code, frame slot a, frame slot b, first
    row]."""
    for k in range(lint.shape[0]):
        a, b = lint[k, 1], lint[k, 2]
        closure_rows(lint[k, 0], fvec[a], fJ[a], fvec[b], fJ[b], J, jdv, lint[k, 3])


@njit(cache=True, inline="always")  # inlined: called with literal offsets, it compiled once per (i, j) pair
def _dot3(x: np.ndarray, i: int, y: np.ndarray, j: int) -> float:
    return x[i] * y[j] + x[i + 1] * y[j + 1] + x[i + 2] * y[j + 2]


@njit(cache=True)
def closure_phi(kind: int, xa: np.ndarray, xb: np.ndarray, phi: np.ndarray, row0: int | np.integer) -> int:
    """The residual φ of one closure (module docstring) into phi[row0:row0 + m] from the two frame rows; returns
    m (0 for a kind it does not know)."""
    if kind == PLANE:
        phi[row0] = (xa[2] * (xb[9] - xa[9]) + xa[5] * (xb[10] - xa[10])) + xa[8] * (xb[11] - xa[11])
        return 1
    for i in range(3):
        phi[row0 + i] = xb[9 + i] - xa[9 + i]
    if kind == POINT:
        return 3
    if kind == WELD or kind == WELD_B:
        # (R_b R_aᵀ)_ij = Σ_k R_b[i, k] R_a[j, k] = row i of R_b · row j of R_a (rows stored row-major in x[0:9])
        phi[row0 + 3], phi[row0 + 4], phi[row0 + 5] = _log3(
            _dot3(xb, 0, xa, 0),
            _dot3(xb, 0, xa, 3),
            _dot3(xb, 0, xa, 6),
            _dot3(xb, 3, xa, 0),
            _dot3(xb, 3, xa, 3),
            _dot3(xb, 3, xa, 6),
            _dot3(xb, 6, xa, 0),
            _dot3(xb, 6, xa, 3),
            _dot3(xb, 6, xa, 6),
        )
        return 6
    if kind == REVOLUTE:
        za0, za1, za2 = xa[2], xa[5], xa[8]
        zb0, zb1, zb2 = xb[2], xb[5], xb[8]
        c0, c1, c2 = za1 * zb2 - za2 * zb1, za2 * zb0 - za0 * zb2, za0 * zb1 - za1 * zb0
        phi[row0 + 3] = xa[0] * c0 + xa[3] * c1 + xa[6] * c2
        phi[row0 + 4] = xa[1] * c0 + xa[4] * c1 + xa[7] * c2
        return 5
    return 0
