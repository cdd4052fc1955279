"""Non-linear Two-Input Two-Output Port (TITOP) models of rigid bodies and joints ([Alazard],
Alazard, Sanfedino & Kassarian, "Non-linear dynamics of multibody systems: a system-based approach").

Conventions (the paper's, which are also Pinocchio's for the quantities that meet it):

* dual vectors are [linear; angular]: twist x'_P = [v_P; ω], wrench W_P = [F; T_P];
* every block works in its own body frame R_a, whose origin is the block's reference point P
  (the joint point); ``P_ab`` is the DCM P_{a/b}: [u]_b = P_ab [u]_a;
* the spatial acceleration is ẋ'_P = [v̇_P; ω̇] with v̇_P = d v_P/dt |_{R_b} (derivative in the body
  frame, projected in it).  For a free body this is d/dt of the body-frame twist, i.e. Pinocchio's
  ν̇ (ddq of a free-flyer, ``data.a`` in LOCAL);
* τ_CP = [[1, (*CP)], [0, 1]] maps the twist at P to the twist at C (nomenclature), and its
  transpose moves a wrench from C to P (13).

**The 18-component motion vector (nomenclature, (14)).**  m_P = [ẋ'_P; x'_P; x_P] with
x_P = [IP; Θ].  Here it is the :class:`Motion` object: ``acc`` = ẋ'_P, ``tw`` = x'_P, ``pos`` = [IP]
projected in the motion's frame, and ``R`` = P_{f/i}, the DCM of the projection frame f with respect
to the inertial frame, in place of the Euler vector Θ (Θ = Θ(P_{f/i}) is given by
:meth:`Motion.vector`, but the DCM has no gimbal singularity; the paper's Θ^A = Θ(P_{./i}(Θ^B) P_{a/b})
becomes R_a = R_b P_{a/b}).  A motion vector is always projected in the body frame of its body, so
``R`` is the body's attitude, as in the paper.

**Blocks.**  Each block knows only its own body: mass, centre of mass, inertia, the points of its
ports (children or external loads) in its frame, its joint axis and the DCM P_{a0/b} of its frame
relative to the parent's at zero joint configuration.

* :class:`RigidBody`: D_P (4), the Newton–Euler equation with gravity (11), its inverse channel
  (motion → wrench, Fig. 1) and its forward channel G_P (wrench → motion, Fig. 2).
* :class:`Weld` R^A_{P,C} (15), :class:`Revolute` R^{A,r}_{P,C} (16)–(23),
  :class:`Prismatic` R^{A,t}_{P0,C} (24)–(29): ``titop_forward`` is the paper's block (inputs: the
  parent's motion m_P^B in R_b, the wrenches of the children at the ports, the driving torque/force;
  outputs: motions at the ports, wrench W_{A/B,P} on the parent in R_b, joint motion
  m_r = [q̈, q̇, q]); ``titop_inverse`` is the inverse-dynamics block (joint acceleration in,
  driving torque out).
* :class:`FloatingBase` G^B_{P,C...}(s) and :class:`FixedBase` (the inertial frame) are roots.
* :class:`CompliantLoop` L^A_C (Fig. 14): spring–damper on the relative motion of two ports.

**Causal evaluation** (:class:`System`).  The inverse dynamics is a pure causal sweep: motions
root → leaves, wrenches leaves → root.  The forward dynamics has an algebraic loop at every joint
(the child's wrench depends on the accelerations the joint produces).  It is resolved by the
structure of the tree: every block's channel from the acceleration it receives to the wrench it
returns is affine, W_{A/B} = −(Z ẋ'_P + z), so a leaves → root sweep builds (Z, z) from the
children's (the block substitutes the child's affine wrench into its own (22)), and a root → leaves
sweep then evaluates (22) with the loop closed.  (This is the articulated-body idea, written per
block; the test suite checks that the resolved signals satisfy each block's own TITOP equations.)

**Compiled sweeps.**  :meth:`System.kinematics`, :meth:`System.forward` and :meth:`System.inverse` evaluate
these same block equations in one compiled call each (``models/_titop_kernels.py``, numba, cached on
disk; its docstring says where each of (14)–(29) is computed), over the tree flattened once into index
arrays (:class:`_Layout`).  The NumPy sweeps, block by block through the blocks' own methods (``joint``, ``bias``) —
``System._kinematics_reference``, ``_forward_reference``, ``_inverse_reference`` — stay the reference
(tests/test_titop_kernels.py: equal to 1e-12 relative) and are taken for block, body or loop types the
kernels do not know, or with ``System.fast = False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, FrameNotFoundError, StateError
from cmstack.models.lie import cross, skew  # skew(v) is the paper's (*v)

__all__ = [
    "skew",
    "tau",
    "dynamic_model",
    "Motion",
    "transport",
    "change_frame",
    "RigidBody",
    "Weld",
    "Revolute",
    "Prismatic",
    "FloatingBase",
    "FixedBase",
    "CompliantLoop",
    "System",
    "rodrigues",
    "quat_to_R",
    "rpy",
    "from_pinocchio",
]

_I3 = np.eye(3)


# ---------------------------------------------------------------------------------- small algebra
def tau(r: np.ndarray) -> np.ndarray:
    """Kinematic model τ_CP = [[1, (*CP)], [0, 1]] with r = CP (nomenclature): x'_C = τ_CP x'_P."""
    T = np.eye(6)
    T[:3, 3:] = skew(r)
    return T


_taumat = tau


def _tau_mv(r: np.ndarray, x: np.ndarray) -> np.ndarray:
    """τ_r x without building the matrix: [x_lin + r × x_ang; x_ang]."""
    return np.concatenate((x[:3] + cross(r, x[3:]), x[3:]))


def _tauT_mv(r: np.ndarray, w: np.ndarray) -> np.ndarray:
    """τ_rᵀ w: a wrench at C moved to P (13): [F; T + F × r] with r = CP."""
    return np.concatenate((w[:3], w[3:] + cross(w[:3], r)))


def _tauT_M_tau(r: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """τ_rᵀ Z τ_r (a 6×6 impedance moved from C to P)."""
    T = tau(r)
    return T.T @ Z @ T


def _rot6(P: np.ndarray) -> np.ndarray:
    Q = np.zeros((6, 6))
    Q[:3, :3] = P
    Q[3:, 3:] = P
    return Q


def rodrigues(axis: np.ndarray, angle: float) -> np.ndarray:
    """e^{θ (*r̃)} for a unit vector r̃ (16)."""
    K = skew(axis)
    return _I3 + np.sin(angle) * K + (1.0 - np.cos(angle)) * (K @ K)


def quat_rows(x: float, y: float, z: float, w: float) -> tuple:
    """The rows of the DCM of the quaternion (x, y, z, w) (Pinocchio's order), normalised first, as
    Python floats (for per-evaluation helpers that avoid small NumPy calls)."""
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return (
        (1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)),
        (2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)),
        (2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)),
    )


def quat_to_R(quat: ArrayLike) -> np.ndarray:
    """DCM of a unit quaternion in Pinocchio's order (x, y, z, w); normalised first."""
    return np.array(quat_rows(*np.asarray(quat, dtype=float).tolist()))


def rpy(R: np.ndarray) -> np.ndarray:
    """Euler angles Θ = (φ, θ, ψ) with R = Rz(ψ) Ry(θ) Rx(φ) (the paper's Θ(P_{b/i}); sequence chosen here)."""
    return np.array(
        [np.arctan2(R[2, 1], R[2, 2]), np.arcsin(np.clip(-R[2, 0], -1.0, 1.0)), np.arctan2(R[1, 0], R[0, 0])]
    )


def dynamic_model(mass: float, com: ArrayLike, inertia_com: ArrayLike) -> np.ndarray:
    """D_P = τ_BPᵀ diag(m 1₃, I_B) τ_BP (4), with com = PB (so BP = −com), all in the body frame."""
    D_B = np.zeros((6, 6))
    D_B[:3, :3] = mass * _I3
    D_B[3:, 3:] = np.asarray(inertia_com, dtype=float)
    T = tau(-np.asarray(com, dtype=float))
    return T.T @ D_B @ T


def coriolis_operator(tw: np.ndarray) -> np.ndarray:
    """C(x'_P) = [[(*ω), 0], [(*v), (*ω)]] of (7)."""
    C = np.zeros((6, 6))
    W = skew(tw[3:])
    C[:3, :3] = W
    C[3:, 3:] = W
    C[3:, :3] = skew(tw[:3])
    return C


def _cdx(tw: np.ndarray, Dx: np.ndarray) -> np.ndarray:
    """C(x') (D x') without matrices."""
    v, w = tw[:3], tw[3:]
    return np.concatenate((cross(w, Dx[:3]), cross(v, Dx[:3]) + cross(w, Dx[3:])))


# --------------------------------------------------------------------------------- motion vector
@dataclass
class Motion:
    """The 18-component motion vector m_P of a body at a point P, projected in the body frame.

    acc = ẋ'_P = [v̇_P; ω̇] (derivatives in the body frame), tw = x'_P = [v_P; ω], pos = [IP] in the
    body frame, R = P_{b/i} (body frame → inertial), standing for the Euler vector Θ.  ``acc`` may be
    None in a velocity-level (kinematics only) sweep."""

    tw: np.ndarray
    pos: np.ndarray
    R: np.ndarray
    acc: np.ndarray | None = None

    def vector(self) -> np.ndarray:
        """The paper's 18-vector [ẋ'; x'; IP; Θ] (Θ from :func:`rpy`)."""
        acc = np.full(6, np.nan) if self.acc is None else self.acc
        return np.concatenate((acc, self.tw, self.pos, rpy(self.R)))

    def world_point(self) -> np.ndarray:
        """[IP] in the inertial frame."""
        return self.R @ self.pos


def transport(m: Motion, CP: ArrayLike) -> Motion:
    """Motion transport v_CP (14), m_C = v_CP(m_P), in the body frame: x'_C = τ_CP x'_P,
    ẋ'_C = τ_CP ẋ'_P (CP is constant in the body frame), IC = IP + PC = IP − CP; attitude unchanged."""
    CP = np.asarray(CP, dtype=float)
    return Motion(_tau_mv(CP, m.tw), m.pos - CP, m.R, None if m.acc is None else _tau_mv(CP, m.acc))


def change_frame(m: Motion, P_ab: ArrayLike) -> Motion:
    """[m]_{R_b} from [m]_{R_a} with the augmented DCM P^18_{a/b} = diag(P, P, P, P, P, 1) — the
    dual vectors and IP are rotated — and the attitude becomes that of R_b: R_b = R_a P_{a/b}ᵀ
    (the inverse of the paper's Θ^A = Θ(P_{./i}(Θ^B) P_{a/b})).  Valid for frames fixed to the same
    body (for a moving joint the acceleration changes too: (17), (24))."""
    P = np.asarray(P_ab, dtype=float)
    acc = None if m.acc is None else np.concatenate((P @ m.acc[:3], P @ m.acc[3:]))
    return Motion(np.concatenate((P @ m.tw[:3], P @ m.tw[3:])), P @ m.pos, m.R @ P.T, acc)


def _rot_w(P: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.concatenate((P @ w[:3], P @ w[3:]))


# ---------------------------------------------------------------------------------------- bodies
def _kept_kind(obj: object, maths: tuple[str, ...]) -> str | None:
    """What the compiled sweeps know ``obj`` as: the ``kind`` of the nearest class in its MRO that sets one,
    provided obj's class takes every method of ``maths`` from that class; else None.  Dispatch by what an
    object does, not by its exact type: a subclass that adds no maths keeps its parent's kernel, one that
    redefines them has its own maths run (the NumPy sweeps), never silently replaced by the kernel's."""
    cls = type(obj)
    owner = next((c for c in cls.__mro__ if "kind" in c.__dict__), None)
    if owner is None or any(getattr(cls, m) is not getattr(owner, m) for m in maths):
        return None
    return owner.__dict__["kind"]


def _kernel_kind(obj: object) -> str | None:
    """``obj.kernel_kind()``, or None for an object without one (a user's own type)."""
    f = getattr(obj, "kernel_kind", None)
    return f() if callable(f) else None


class RigidBody:
    """A rigid body's parameters in its own frame (origin = reference point P) and its
    Newton–Euler model at P with gravity (11):

        W_ext/B,P = D_P (ẋ'_P − [g; 0]) + C(x'_P) D_P x'_P.

    ``ports`` maps a port name to the point C as the vector PC in the body frame (children,
    external loads, loop cuts).  Point masses (zero inertia at the centre of mass) are allowed."""

    kind = "rigid"

    def __init__(
        self,
        name: str,
        mass: float,
        com: ArrayLike = (0.0, 0.0, 0.0),
        inertia: ArrayLike | None = None,
        ports: dict[str, ArrayLike] | None = None,
    ) -> None:
        if not (np.isfinite(mass) and mass >= 0.0):
            raise ConfigError(f"body '{name}': mass must be a finite number >= 0, got {mass}")
        I = np.zeros((3, 3)) if inertia is None else np.asarray(inertia, dtype=float)
        if I.shape != (3, 3) or not np.allclose(I, I.T, atol=1e-12):
            raise ConfigError(f"body '{name}': inertia must be a symmetric 3×3 matrix, got {I.tolist()}")
        if np.linalg.eigvalsh(I).min() < -1e-12:
            raise ConfigError(f"body '{name}': inertia at the centre of mass is not positive semi-definite")
        self.name = name
        self.mass = float(mass)
        self.com = np.asarray(com, dtype=float).reshape(3)
        self.inertia = I
        self.D = dynamic_model(self.mass, self.com, I)
        self.ports = {k: np.asarray(v, dtype=float).reshape(3) for k, v in (ports or {}).items()}

    def kernel_kind(self) -> str | None:
        """ "rigid" when the compiled sweeps compute this body's model (11) from its ``D`` and ``ports``; None
        when a subclass redefines the model (``bias``, ``inverse``, ``forward``, ``kinetic_energy``, ``port``)."""
        return _kept_kind(self, ("bias", "inverse", "forward", "kinetic_energy", "port"))

    def port(self, name: str) -> np.ndarray:
        try:
            return self.ports[name]
        except KeyError:
            raise FrameNotFoundError(
                f"body '{self.name}' has no port '{name}'; ports: {sorted(self.ports)}"
            ) from None

    def bias(self, tw: np.ndarray, g_b: np.ndarray) -> np.ndarray:
        """−D_P [g; 0] + C(x') D_P x': the part of (11) that does not depend on the acceleration."""
        return -self.D[:, :3] @ g_b + _cdx(tw, self.D @ tw)

    def inverse(self, acc: np.ndarray, tw: np.ndarray, g_b: np.ndarray) -> np.ndarray:
        """Fig. 1 (inverse dynamics): the total external wrench at P (11), body frame."""
        return self.D @ acc + self.bias(tw, g_b)

    def forward(self, W_ext: np.ndarray, tw: np.ndarray, g_b: np.ndarray) -> np.ndarray:
        """Fig. 2, G_P(s) (forward dynamics): ẋ'_P = [g; 0] + D_P⁻¹ (W_ext − C(x') D x')."""
        try:
            return np.linalg.solve(self.D, W_ext - self.bias(tw, g_b))
        except np.linalg.LinAlgError:
            raise StateError(
                f"body '{self.name}': D_P is singular (point mass?); its forward channel needs a full inertia"
            ) from None

    def kinetic_energy(self, tw: np.ndarray) -> float:
        """½ x'ᵀ D_P x' (10)."""
        return 0.5 * float(tw @ self.D @ tw)


# ------------------------------------------------------------------------------------ joint blocks
class _Block:
    """A body with the joint that connects it to its parent (the joint belongs to the child, as in the
    paper).  Subclasses define the joint map ẋ'^A_P = X [ẋ'^B]_a + S q̈ + c."""

    ndof = 0
    kind = "block"

    def __init__(self, body: RigidBody, P_a0b: ArrayLike | None = None) -> None:
        self.body = body
        self.name = body.name
        self.P0 = _I3.copy() if P_a0b is None else np.asarray(P_a0b, dtype=float)
        if (
            self.P0.shape != (3, 3)
            or not np.allclose(self.P0.T @ self.P0, _I3, atol=1e-9)
            or np.linalg.det(self.P0) < 0
        ):
            raise ConfigError(f"block '{self.name}': P_a0/b must be a rotation matrix")

    def kernel_kind(self) -> str | None:
        """The compiled sweeps' joint kind of this block ("weld", "revolute", "prismatic"), or None when its
        class redefines the joint maths (``joint``, ``_accel``, ``_to_parent``, ``_port_sum``,
        ``titop_forward``, ``titop_inverse``) or is not one the kernels know."""
        return _kept_kind(
            self, ("joint", "_accel", "_to_parent", "_port_sum", "titop_forward", "titop_inverse")
        )

    # -- joint geometry (overridden) --
    def joint(
        self, m_in: Motion, q: np.ndarray, qd: np.ndarray
    ) -> tuple[np.ndarray, Motion, np.ndarray | None, np.ndarray, np.ndarray | None]:
        """From the parent's motion at the joint (in R_b, velocity level) and the joint state: the
        DCM P_{a/b}, A's motion at P in R_a (no acc), the joint's S (6×ndof), c (6), and the
        offset r = PP0 of the prismatic transport (zero otherwise)."""
        raise NotImplementedError

    def _accel(
        self,
        a_in_b: np.ndarray | None,
        P_ab: np.ndarray,
        r: np.ndarray | None,
        S: np.ndarray | None,
        c: np.ndarray,
        qdd: np.ndarray | None,
    ) -> np.ndarray:
        if a_in_b is None:
            raise StateError(f"TITOP block '{self.name}': its parent's motion carries no acceleration")
        a = np.concatenate((P_ab.T @ a_in_b[:3], P_ab.T @ a_in_b[3:]))
        if r is not None:
            a = _tau_mv(r, a)
        a = a + c
        if S is not None:
            a = a + S @ qdd
        return a

    def _to_parent(self, W_P: np.ndarray, P_ab: np.ndarray, r: np.ndarray | None) -> np.ndarray:
        """W_{A/B,P0} in R_b: (29) then the frame change."""
        if r is not None:
            W_P = _tauT_mv(r, W_P)
        return _rot_w(P_ab, W_P)

    def _port_sum(self, W_ports: dict[str, np.ndarray] | None) -> np.ndarray:
        s = np.zeros(6)
        for name, W in (W_ports or {}).items():
            s += _tauT_mv(-self.body.port(name), W)
        return s

    # -- the paper's blocks, one at a time --
    def titop_forward(
        self, m_in: Motion, W_ports: dict, drive: ArrayLike, q: np.ndarray, qd: np.ndarray, g_i: np.ndarray
    ) -> tuple[np.ndarray, dict[str, Motion], np.ndarray, Motion]:
        """The TITOP block itself (Fig. 4 / Fig. 9 / Fig. 12): inputs m_P^B (full, in R_b), the wrenches
        W_./A,C applied by the children at the ports (R_a), the driving torque/force and the joint
        state; outputs (q̈, {port: m_C in R_a}, W_{A/B,P0} in R_b).

        q̈ = (u − Sᵀ [D_P (X ẋ'^B + c − [g;0]) + C(x'^A) D_P x'^A − Σ τ_CPᵀ W_./A,C]) / (Sᵀ D_P S)   (22), (28)
        −W_{A/B,P} = D_P (ẋ'^A − [g;0]) + C(x'^A) D_P x'^A − Σ τ_CPᵀ W_./A,C                     (18), (25)
        """
        P_ab, m_A, S, c, r = self.joint(m_in, q, qd)
        g_a = m_A.R.T @ g_i
        base = self._accel(m_in.acc, P_ab, r, None, c, None)
        rhs = self.body.bias(m_A.tw, g_a) + self.body.D @ base - self._port_sum(W_ports)
        if S is not None:
            J = S.T @ self.body.D @ S
            qdd = np.linalg.solve(J, np.atleast_1d(drive) - S.T @ rhs)
            acc = base + S @ qdd
        else:
            qdd, acc = np.zeros(0), base
        m_A.acc = acc
        W_P = -(self.body.D @ acc + self.body.bias(m_A.tw, g_a) - self._port_sum(W_ports))
        ports = {k: transport(m_A, -p) for k, p in self.body.ports.items()}
        return qdd, ports, self._to_parent(W_P, P_ab, r), m_A

    def titop_inverse(
        self, m_in: Motion, W_ports: dict, qdd: ArrayLike, q: np.ndarray, qd: np.ndarray, g_i: np.ndarray
    ) -> tuple[np.ndarray, dict[str, Motion], np.ndarray, Motion]:
        """The inverse-dynamics block: joint acceleration in, driving torque/force out (19), (26):
        u = −Sᵀ W_{A/B,P}.  Returns (u, ports, W_{A/B,P0} in R_b, m_P^A)."""
        P_ab, m_A, S, c, r = self.joint(m_in, q, qd)
        g_a = m_A.R.T @ g_i
        acc = self._accel(m_in.acc, P_ab, r, S, c, np.atleast_1d(qdd))
        m_A.acc = acc
        W_P = -(self.body.inverse(acc, m_A.tw, g_a) - self._port_sum(W_ports))
        u = -S.T @ W_P if S is not None else np.zeros(0)
        ports = {k: transport(m_A, -p) for k, p in self.body.ports.items()}
        return u, ports, self._to_parent(W_P, P_ab, r), m_A

    def _unit_axis(self, axis: ArrayLike) -> np.ndarray:
        """``axis`` (3) made a unit vector; a ConfigError naming the block if it is zero."""
        a = np.asarray(axis, dtype=float).reshape(3)
        if not np.linalg.norm(a) > 0:
            raise ConfigError(f"{self.kind} '{self.name}': the axis must be non-zero")
        return a / np.linalg.norm(a)


class Weld(_Block):
    """R^A_{P,C} (15) with the frame change of Fig. 6: A clamped to its parent at P with the constant
    DCM P_{a/b}.  No joint state."""

    kind = "weld"

    def joint(
        self, m_in: Motion, q: np.ndarray, qd: np.ndarray
    ) -> tuple[np.ndarray, Motion, np.ndarray | None, np.ndarray, np.ndarray | None]:
        m_A = change_frame(Motion(m_in.tw, m_in.pos, m_in.R), self.P0.T)
        return self.P0, m_A, None, np.zeros(6), None


class Revolute(_Block):
    """R^{A,r}_{P,C} (16)–(23): A turns about the unit axis r̃ (in R_a) at P.

    P_{aθ/b} = P_{a0/b} e^{θ(*r̃)} (16); with the parent's motion projected in R_a (17):
        x'^A = x'^B + θ̇ [0; r̃],   ẋ'^A = ẋ'^B + θ̈ [0; r̃] − θ̇ [(*r̃) v^B; (*r̃) ω^B],
    so S = [0; r̃] and c = −θ̇ [r̃ × v^B; r̃ × ω^B]."""

    ndof = 1
    kind = "revolute"

    def __init__(self, body: RigidBody, axis: ArrayLike, P_a0b: ArrayLike | None = None) -> None:
        super().__init__(body, P_a0b)
        self.axis = self._unit_axis(axis)
        self.S = np.concatenate((np.zeros(3), self.axis)).reshape(6, 1)

    def joint(
        self, m_in: Motion, q: np.ndarray, qd: np.ndarray
    ) -> tuple[np.ndarray, Motion, np.ndarray | None, np.ndarray, np.ndarray | None]:
        th, thd = float(q[0]), float(qd[0])
        P_ab = self.P0 @ rodrigues(self.axis, th)
        v = P_ab.T @ m_in.tw[:3]
        w = P_ab.T @ m_in.tw[3:]
        r = self.axis
        c = -thd * np.concatenate((cross(r, v), cross(r, w)))
        tw = np.concatenate((v, w + thd * r))
        m_A = Motion(tw, P_ab.T @ m_in.pos, m_in.R @ P_ab)
        return P_ab, m_A, self.S, c, None


class Prismatic(_Block):
    """R^{A,t}_{P0,C} (24)–(29): A slides along the unit axis t̃ (in R_a); P (fixed in A) coincides with
    P0 (fixed in the parent) at x = 0; P_{a/b} is constant.  With PP0 = −x t̃ (24):
        IP = IP0 + x t̃,  x'^A_P = τ_{−xt̃} x'_P0 + ẋ [t̃; 0],
        ẋ'^A_P = τ_{−xt̃} ẋ'_P0 + ẍ [t̃; 0] − ẋ [(*t̃) ω; 0],
    and W_{A/B,P0} = τ_{−xt̃}ᵀ W_{A/B,P} (29)."""

    ndof = 1
    kind = "prismatic"

    def __init__(self, body: RigidBody, axis: ArrayLike, P_a0b: ArrayLike | None = None) -> None:
        super().__init__(body, P_a0b)
        self.axis = self._unit_axis(axis)
        self.S = np.concatenate((self.axis, np.zeros(3))).reshape(6, 1)

    def joint(
        self, m_in: Motion, q: np.ndarray, qd: np.ndarray
    ) -> tuple[np.ndarray, Motion, np.ndarray | None, np.ndarray, np.ndarray | None]:
        x, xd = float(q[0]), float(qd[0])
        P_ab = self.P0
        t = self.axis
        m0 = change_frame(Motion(m_in.tw, m_in.pos, m_in.R), P_ab.T)  # parent's motion at P0, in R_a
        r = -x * t  # PP0
        tw = _tau_mv(r, m0.tw)
        tw[:3] += xd * t
        c = np.concatenate((-xd * cross(t, m0.tw[3:]), np.zeros(3)))
        m_A = Motion(tw, m0.pos + x * t, m0.R)
        return P_ab, m_A, self.S, c, r


# ------------------------------------------------------------------------------------------ roots
class FloatingBase:
    """The free root body G^B_{P,C...}(s) (Fig. 2, Fig. 3): its state is the pose (IP in R_i, attitude)
    and the twist x'_P in R_b — Pinocchio's free-flyer coordinates [p; quat(x,y,z,w)] and
    ν = [v_P; ω] (body frame), so ẋ'_P is Pinocchio's ν̇."""

    ndof = 6
    kind = "floating"

    def __init__(self, body: RigidBody) -> None:
        self.body = body
        self.name = body.name


class FixedBase:
    """The inertial frame as the root: zero motion, attitude 1₃; ``ports`` are points of R_i."""

    ndof = 0
    kind = "fixed"

    def __init__(self, name: str = "ground", ports: dict | None = None) -> None:
        self.body = RigidBody(name, 0.0, ports=ports)
        self.name = name


# ----------------------------------------------------------------------------------- loop closure
class CompliantLoop:
    """L^A_C (Fig. 14), the paper's loop-closure block: a compliant loop (a spring–damper, not the hard
    constraint ``cmstack.models.loops.LoopClosure`` of the control laws).  The loop is cut in body A at point
    C into A_l (port ``port_l`` of block
    ``left``) and A_r (port ``port_r`` of ``right``); the mechanical impedance of A at C feeds back the
    relative motion δm = m_C^{A_r} − m_C^{A_l} to the interaction wrench through 6×6 K and D:

        W_{A_r/A_l,C} = K δx + D δx',   W_{A_l/A_r,C} = −W_{A_r/A_l,C},

    with δx = [R_lᵀ(IC_r − IC_l); log(R_lᵀ R_r)] and δx' = [R_lᵀ(v_r − v_l); R_lᵀ(ω_r − ω_l)] (world
    velocities of the two points, projected in A_l's frame — which is A_r's when the loop is closed).
    The wrench depends on positions and velocities only, so it closes no algebraic loop."""

    kind = "impedance"

    def __init__(
        self, left: str, port_l: str, right: str, port_r: str, K: ArrayLike, D: ArrayLike, name: str = "loop"
    ) -> None:
        self.left, self.port_l, self.right, self.port_r = left, port_l, right, port_r
        self.K = np.asarray(K, dtype=float) * (np.eye(6) if np.ndim(K) == 0 else 1.0)
        self.D = np.asarray(D, dtype=float) * (np.eye(6) if np.ndim(D) == 0 else 1.0)
        if self.K.shape != (6, 6) or self.D.shape != (6, 6):
            raise ConfigError(f"loop '{name}': K and D must be scalars or 6×6 matrices")
        self.name = name

    def kernel_kind(self) -> str | None:
        """ "impedance" when the compiled sweeps compute this loop's wrenches from its ``K`` and ``D``; None
        when a subclass redefines them (``relative``, ``wrenches``, ``energy``)."""
        return _kept_kind(self, ("relative", "wrenches", "energy"))

    def relative(self, m_l: Motion, m_r: Motion) -> tuple[np.ndarray, np.ndarray]:
        """(δx, δx') in A_l's frame."""
        Rl, Rr = m_l.R, m_r.R
        dp = Rl.T @ (Rr @ m_r.pos - Rl @ m_l.pos)
        Rrel = Rl.T @ Rr
        ang = np.arccos(np.clip((np.trace(Rrel) - 1.0) / 2.0, -1.0, 1.0))
        vee = 0.5 * np.array([Rrel[2, 1] - Rrel[1, 2], Rrel[0, 2] - Rrel[2, 0], Rrel[1, 0] - Rrel[0, 1]])
        dth = vee if ang < 1e-8 else vee * ang / np.sin(ang)
        dv = Rl.T @ (Rr @ m_r.tw[:3] - Rl @ m_l.tw[:3])
        dw = Rl.T @ (Rr @ m_r.tw[3:] - Rl @ m_l.tw[3:])
        return np.concatenate((dp, dth)), np.concatenate((dv, dw))

    def wrenches(self, m_l: Motion, m_r: Motion) -> tuple[np.ndarray, np.ndarray]:
        """(W on A_l in A_l's frame, W on A_r in A_r's frame), both at C."""
        dx, dxd = self.relative(m_l, m_r)
        W_l = self.K @ dx + self.D @ dxd
        P_lr = m_r.R.T @ m_l.R
        return W_l, -_rot_w(P_lr, W_l)

    def energy(self, m_l: Motion, m_r: Motion) -> float:
        dx, _ = self.relative(m_l, m_r)
        return 0.5 * float(dx @ self.K @ dx)


# ------------------------------------------------------------------------------------------ system
@dataclass
class _Node:
    block: _Block | FloatingBase | FixedBase
    parent: int  # index of the parent node, -1 for the root
    port: str | None  # parent's port the joint sits on
    iq: int  # first joint coordinate
    children: list = field(default_factory=list)


_KERNELS: ModuleType | None = None


def _kernels() -> ModuleType:
    """models/_titop_kernels.py, imported at the first compiled sweep (numba's import costs ~0.3 s)."""
    global _KERNELS
    if _KERNELS is None:
        from cmstack.models import _titop_kernels

        _KERNELS = _titop_kernels
    return _KERNELS


class _Layout:
    """A :class:`System`'s tree flattened into the index arrays of the compiled sweeps
    (``models/_titop_kernels.py``: one row per block, parents first), built at the first sweep after the
    last ``add``/``add_loop``.  It copies the blocks' constant parameters (D_P, P_{a0/b}, axes, ports):
    blocks are not to be modified once in a system (or set ``System._layout = None`` after doing so)."""

    @classmethod
    def build(cls, sysm):
        """The layout, or False when a block, body or loop is not one the kernels compute (``kernel_kind()``)."""
        k = _kernels()
        n = len(sysm.nodes)
        kinds = {"weld": k.KIND_WELD, "revolute": k.KIND_REVOLUTE, "prismatic": k.KIND_PRISMATIC}
        kind, parent, iq = (
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int64),
        )
        P0, axis, S = np.zeros((n, 3, 3)), np.zeros((n, 3)), np.zeros((n, 6))
        pport, D = np.zeros((n, 3)), np.zeros((n, 6, 6))
        port_keys, port_node, port_vec, port_of = [], [], [], {}
        for i, nd in enumerate(sysm.nodes):
            b = nd.block
            if _kernel_kind(b.body) != "rigid":
                return False
            if i == 0:
                kind[0] = k.KIND_FLOATING if sysm.floating else k.KIND_FIXED
                P0[0] = _I3
            elif _kernel_kind(b) in kinds:
                kind[i] = kinds[_kernel_kind(b)]
                P0[i] = b.P0
                if kind[i] != k.KIND_WELD:
                    axis[i] = b.axis
                    S[i] = b.S[:, 0]
                pport[i] = sysm.nodes[nd.parent].block.body.ports[nd.port]
            else:
                return False
            parent[i], iq[i] = nd.parent, nd.iq
            D[i] = b.body.D
            for name, vec in b.body.ports.items():
                port_keys.append((i, name))
                port_node.append(i)
                port_vec.append(vec)
                port_of[(b.name, name)] = (i, vec)
        if any(_kernel_kind(L) != "impedance" for L in sysm.loops):
            return False
        nL = len(sysm.loops)
        loop_node, loop_port = np.empty((nL, 2), dtype=np.int64), np.empty((nL, 2, 3))
        loop_K, loop_D = np.empty((nL, 6, 6)), np.empty((nL, 6, 6))
        for j, L in enumerate(sysm.loops):
            for s, (bname, pname) in enumerate(((L.left, L.port_l), (L.right, L.port_r))):
                loop_node[j, s], loop_port[j, s] = port_of[(bname, pname)]
            loop_K[j], loop_D[j] = L.K, L.D
        lay = cls()
        lay.kind = kind
        lay.joints = (kind, parent, iq, P0, axis, pport)  # kinematics' arguments
        lay.tree = (kind, parent, iq, P0, axis, S, pport, D)  # the dynamics kernels' first ones
        lay.loops = (loop_node, loop_port, loop_K, loop_D)
        lay.no_loads = (np.empty(0, dtype=np.int64), np.empty((0, 3)), np.empty((0, 6)))
        lay.port_keys = port_keys
        lay.port_node = np.array(port_node, dtype=np.int64)
        lay.port_vec = np.array(port_vec, dtype=float).reshape(-1, 3)
        lay.port_of = port_of
        return lay


class System:
    """A tree of TITOP blocks (Fig. 16), optionally closed by :class:`CompliantLoop` blocks.

    Coordinates follow Pinocchio's layout for the same tree built in the same order: a floating root
    contributes q = [IP in R_i; quaternion (x, y, z, w)], v = [v_P; ω] in its body frame; each joint
    block one coordinate, in the order the blocks were added.  Generalized forces: the wrench on the
    floating root at P (body frame), then the joint torques/forces.

    ``gravity`` is [g]_{R_i}.  External loads: ``forward(..., ext={(block, port): wrench in the
    block's frame at the port})``."""

    def __init__(self, root: FloatingBase | FixedBase, gravity: ArrayLike = (0.0, 0.0, -9.81)) -> None:
        if not isinstance(root, (FloatingBase, FixedBase)):
            raise ConfigError("the root of a TITOP system must be a FloatingBase or a FixedBase")
        self.g = np.asarray(gravity, dtype=float).reshape(3)
        self.nodes = [_Node(root, -1, None, 0)]
        self.index = {root.name: 0}
        self.loops: list[CompliantLoop] = []
        self.floating = isinstance(root, FloatingBase)
        self.nj = 0
        self.fast = True  # sweeps through the compiled kernels (models/_titop_kernels.py)
        self._layout = None  # the flattened tree, built at the first sweep after the last add
        self._last_call: tuple[np.ndarray, np.ndarray, np.ndarray, dict | None] | None = None

    @property
    def nq(self) -> int:
        return self.nj + (7 if self.floating else 0)

    @property
    def nv(self) -> int:
        return self.nj + (6 if self.floating else 0)

    def add(self, block: _Block, parent: str, port: str) -> _Block:
        if block.name in self.index:
            raise ConfigError(f"a block named '{block.name}' is already in the system")
        if parent not in self.index:
            raise FrameNotFoundError(
                f"block '{block.name}': parent '{parent}' is not in the system; blocks: {list(self.index)}"
            )
        ip = self.index[parent]
        self.nodes[ip].block.body.port(port)  # raises if the port does not exist
        node = _Node(block, ip, port, self.nj)
        self.nj += block.ndof
        self.index[block.name] = len(self.nodes)
        self.nodes[ip].children.append(len(self.nodes))
        self.nodes.append(node)
        self._layout = None
        return block

    def add_loop(self, loop: CompliantLoop) -> CompliantLoop:
        for b, p in ((loop.left, loop.port_l), (loop.right, loop.port_r)):
            if b not in self.index:
                raise FrameNotFoundError(f"loop '{loop.name}': block '{b}' is not in the system")
            self.nodes[self.index[b]].block.body.port(p)
        self.loops.append(loop)
        self._layout = None
        return loop

    def block(self, name: str) -> _Block | FloatingBase | FixedBase:
        try:
            return self.nodes[self.index[name]].block
        except KeyError:
            raise FrameNotFoundError(f"no block '{name}' in the system; blocks: {list(self.index)}") from None

    # -- coordinates --
    def _split(
        self, q: ArrayLike, v: ArrayLike
    ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray]:
        q = np.asarray(q, dtype=float)
        v = np.asarray(v, dtype=float)
        if q.shape != (self.nq,) or v.shape != (self.nv,):
            raise StateError(
                f"TITOP system: q must have {self.nq} and v {self.nv} entries, got {q.shape}, {v.shape}"
            )
        if self.floating:
            return q[:3], quat_to_R(q[3:7]), v[:6], q[7:], v[6:]
        return None, None, None, q, v

    # -- sweeps --
    def _kinematics_reference(self, q, v):
        """Root → leaves at velocity level, block by block (the NumPy reference of :meth:`kinematics`)."""
        p, R, nu, qj, vj = self._split(q, v)
        kin = [None] * len(self.nodes)
        root = self.nodes[0].block
        if self.floating:
            m0 = Motion(nu.copy(), R.T @ p, R)
        else:
            m0 = Motion(np.zeros(6), np.zeros(3), _I3)
        kin[0] = (None, m0, None, np.zeros(6), None)
        ports = [None] * len(self.nodes)
        ports[0] = {k: transport(m0, -pt) for k, pt in root.body.ports.items()}
        for i in range(1, len(self.nodes)):
            nd = self.nodes[i]
            b = nd.block
            m_in = ports[nd.parent][nd.port]
            sl = slice(nd.iq, nd.iq + b.ndof)
            kin[i] = b.joint(m_in, qj[sl], vj[sl])
            mA = kin[i][1]
            ports[i] = {k: transport(mA, -pt) for k, pt in b.body.ports.items()}
        return kin, ports

    def _load_node(self, bname: str, pname: str) -> int:
        """The node an external load (block, port) acts on; raises if the block or the port is unknown."""
        i = self.index.get(bname)
        if i is None:
            raise FrameNotFoundError(f"external load on unknown block '{bname}'; blocks: {list(self.index)}")
        self.nodes[i].block.body.port(pname)
        return i

    def _loads(self, kin, ports, ext):
        """External port wrenches: the user's plus the loop-closure blocks'."""
        loads = [dict() for _ in self.nodes]
        for (bname, pname), W in (ext or {}).items():
            i = self._load_node(bname, pname)
            loads[i][pname] = loads[i].get(pname, np.zeros(6)) + np.asarray(W, dtype=float)
        for L in self.loops:
            il, ir = self.index[L.left], self.index[L.right]
            W_l, W_r = L.wrenches(ports[il][L.port_l], ports[ir][L.port_r])
            loads[il][L.port_l] = loads[il].get(L.port_l, np.zeros(6)) + W_l
            loads[ir][L.port_r] = loads[ir].get(L.port_r, np.zeros(6)) + W_r
        return loads

    def _forward_reference(self, q, v, tau, ext=None, detail=False):
        """Forward dynamics block by block in NumPy (the reference of :meth:`forward`, which
        ``models/_titop_kernels.py: forward_dynamics`` evaluates compiled); with ``detail`` it returns
        (v̇, (kin, ports, acc, loads))."""
        tau = np.asarray(tau, dtype=float)
        if tau.shape != (self.nv,):
            raise StateError(f"TITOP forward: tau must have {self.nv} entries, got {tau.shape}")
        kin, ports = self._kinematics_reference(q, v)
        loads = self._loads(kin, ports, ext)
        off = 6 if self.floating else 0
        n = len(self.nodes)
        Z = [None] * n
        z = [None] * n
        IA = [None] * n
        pA = [None] * n
        dstore = [None] * n
        # leaves → root: each block's affine channel  W_{A/B} = −(Z ẋ'^B + z)  (the loop of (22) closed)
        for i in range(n - 1, -1, -1):
            nd = self.nodes[i]
            b = nd.block
            body = b.body
            mA = kin[i][1]
            if i == 0 and not self.floating:
                continue
            I_i = body.D.copy()
            g_a = mA.R.T @ self.g
            p_i = body.bias(mA.tw, g_a)
            for ch in nd.children:
                r = -body.ports[self.nodes[ch].port]  # CP
                I_i += _tauT_M_tau(r, Z[ch])
                p_i += _tauT_mv(r, z[ch])
            for pname, W in loads[i].items():
                p_i -= _tauT_mv(-body.ports[pname], W)
            IA[i], pA[i] = I_i, p_i
            if i == 0:
                break
            P_ab, _, S, c, r = kin[i]
            u = tau[off + nd.iq : off + nd.iq + b.ndof]
            if S is not None:
                IS = I_i @ S
                d = S.T @ IS
                dinv = np.linalg.inv(d)
                Ia = I_i - IS @ dinv @ IS.T
                zz = Ia @ c + p_i + IS @ (dinv @ (u - S.T @ p_i))
                dstore[i] = (IS, dinv)
            else:
                Ia, zz = I_i, p_i
            if r is not None:  # (29): move from P to P0
                T = _taumat(r)
                Ia, zz = T.T @ Ia @ T, T.T @ zz
            Q = _rot6(P_ab)
            Z[i], z[i] = Q @ Ia @ Q.T, Q @ zz
        # root → leaves: (22)/(28) with the loop closed, then (17)/(24)
        acc = [None] * n
        qdd = np.zeros(self.nj)
        if self.floating:
            acc[0] = np.linalg.solve(IA[0], tau[:6] - pA[0])
        else:
            acc[0] = np.zeros(6)
        pacc = [None] * n
        pacc[0] = {k: _tau_mv(-pt, acc[0]) for k, pt in self.nodes[0].block.body.ports.items()}
        for i in range(1, n):
            nd = self.nodes[i]
            b = nd.block
            P_ab, mA, S, c, r = kin[i]
            a_in = pacc[nd.parent][nd.port]
            base = b._accel(a_in, P_ab, r, None, c, None)
            if S is not None:
                IS, dinv = dstore[i]
                u = tau[off + nd.iq : off + nd.iq + b.ndof]
                qq = dinv @ (u - S.T @ pA[i] - IS.T @ base)
                qdd[nd.iq : nd.iq + b.ndof] = qq
                a = base + S @ qq
            else:
                a = base
            acc[i] = a
            pacc[i] = {k: _tau_mv(-pt, a) for k, pt in b.body.ports.items()}
        out = np.concatenate((acc[0], qdd)) if self.floating else qdd
        return (out, (kin, ports, acc, loads)) if detail else out

    def _inverse_reference(self, q, v, a, ext=None) -> np.ndarray:
        """Inverse dynamics block by block in NumPy (the reference of :meth:`inverse`, which
        ``models/_titop_kernels.py: inverse_dynamics`` evaluates compiled)."""
        a = np.asarray(a, dtype=float)
        if a.shape != (self.nv,):
            raise StateError(f"TITOP inverse: a must have {self.nv} entries, got {a.shape}")
        kin, ports = self._kinematics_reference(q, v)
        loads = self._loads(kin, ports, ext)
        n = len(self.nodes)
        off = 6 if self.floating else 0
        aj = a[off:]
        acc: list = [None] * n
        acc[0] = a[:6].copy() if self.floating else np.zeros(6)
        pacc: list = [None] * n
        pacc[0] = {k: _tau_mv(-pt, acc[0]) for k, pt in self.nodes[0].block.body.ports.items()}
        for i in range(1, n):
            nd = self.nodes[i]
            b = nd.block
            assert isinstance(b, _Block)  # (only the root, node 0, is a base)
            P_ab, mA, S, c, r = kin[i]
            acc[i] = b._accel(pacc[nd.parent][nd.port], P_ab, r, S, c, aj[nd.iq : nd.iq + b.ndof])
            pacc[i] = {k: _tau_mv(-pt, acc[i]) for k, pt in b.body.ports.items()}
        out = np.zeros(self.nv)
        Wp: list = [None] * n
        for i in range(n - 1, -1, -1):
            nd = self.nodes[i]
            b = nd.block
            if i == 0 and not self.floating:
                break
            mA = kin[i][1]
            body = b.body
            W_ports = dict(loads[i])
            for ch in nd.children:
                pn = self.nodes[ch].port
                W_ports[pn] = W_ports.get(pn, np.zeros(6)) + Wp[ch]
            Wsum = (
                b._port_sum(W_ports)
                if isinstance(b, _Block)
                else sum(  # (a block; else the root)
                    (_tauT_mv(-body.port(k), W) for k, W in W_ports.items()), np.zeros(6)
                )
            )
            W_ext_needed = body.inverse(acc[i], mA.tw, mA.R.T @ self.g) - Wsum  # = W_{./A,P}
            if i == 0:
                out[:6] = W_ext_needed
                break
            W_P = -W_ext_needed  # W_{A/B,P}
            assert isinstance(b, _Block)  # (i > 0: not the root)
            P_ab, _, S, c, r = kin[i]
            if S is not None:
                out[off + nd.iq : off + nd.iq + b.ndof] = -S.T @ W_P  # (19), (26)
            Wp[i] = b._to_parent(W_P, P_ab, r)
        return out

    # -- the same sweeps, compiled (models/_titop_kernels.py); the NumPy methods above are the reference --
    def _compiled(self):
        """The flattened tree (:class:`_Layout`), or None when the sweeps take the NumPy path (``fast``
        off, or a block, body or loop type the kernels do not know, e.g. a subclass that redefines its maths)."""
        if not self.fast:
            return None
        if self._layout is None:
            self._layout = _Layout.build(self)
        return self._layout or None

    def _state(self, q: ArrayLike, v: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        q = np.ascontiguousarray(q, dtype=float)
        v = np.ascontiguousarray(v, dtype=float)
        if q.shape != (self.nq,) or v.shape != (self.nv,):
            raise StateError(
                f"TITOP system: q must have {self.nq} and v {self.nv} entries, got {q.shape}, {v.shape}"
            )
        return q, v

    def _load_arrays(self, lay, ext):
        """``ext`` = {(block, port): W} as the kernels' (node, PC, W) arrays."""
        if not ext:
            return lay.no_loads
        k = len(ext)
        node, port, W = np.empty(k, dtype=np.int64), np.empty((k, 3)), np.empty((k, 6))
        for j, (key, Wj) in enumerate(ext.items()):
            hit = lay.port_of.get(key)
            if hit is None:
                self._load_node(*key)  # raises: unknown block or port
            node[j], port[j] = hit
            W[j] = Wj
        return node, port, W

    def kinematics(self, q: np.ndarray, v: np.ndarray) -> tuple[list[Any], list[dict[str, Motion]]]:
        """Root → leaves at velocity level: every block's (P_{a/b}, m_P^A, S, c, r) in ``kin[i]`` and its
        ports' motions in ``ports[i][name]`` — the transport (14) and the joints' (15), (16)–(17), (24).
        Compiled (``_titop_kernels.kinematics``); ``_kinematics_reference`` is the same sweep block by block."""
        lay = self._compiled()
        if lay is None:
            return self._kinematics_reference(q, v)
        q, v = self._state(q, v)
        n = len(self.nodes)
        R, pos, tw = np.empty((n, 3, 3)), np.empty((n, 3)), np.empty((n, 6))
        Pab, c, r = np.empty((n, 3, 3)), np.empty((n, 6)), np.empty((n, 3))
        K = _kernels()
        K.kinematics(*lay.joints, q, v, R, pos, tw, Pab, c, r)
        kin: list[Any] = [None] * n
        for i, nd in enumerate(self.nodes):
            m = Motion(tw[i], pos[i], R[i])
            if i == 0:
                kin[0] = (None, m, None, c[0], None)
            else:
                prismatic = lay.kind[i] == K.KIND_PRISMATIC
                kin[i] = (Pab[i], m, getattr(nd.block, "S", None), c[i], r[i] if prismatic else None)
        # every port's motion, v_CP (14) with CP = −PC: x'_C = [v + (−PC) × ω; ω], IC = IP + PC
        ports: list[dict[str, Motion]] = [{} for _ in range(n)]
        if lay.port_node.size:
            i_p = lay.port_node
            twp = tw[i_p]
            twp[:, :3] += cross(-lay.port_vec, twp[:, 3:])
            posp = pos[i_p] + lay.port_vec
            for k, (i, name) in enumerate(lay.port_keys):
                ports[i][name] = Motion(twp[k], posp[k], R[i])
        return kin, ports

    def forward(
        self,
        q: np.ndarray,
        v: np.ndarray,
        tau: np.ndarray,
        ext: dict[tuple[str, str], np.ndarray] | None = None,
    ) -> np.ndarray:
        """Forward dynamics (wrenches → motions): v̇ for the generalized forces ``tau`` (external loads
        ``ext``).  The causal evaluation of the module docstring — each block's (22)/(28) solved with its
        children's affine channels substituted, (18)/(25), (29) — compiled in
        ``_titop_kernels.forward_dynamics``; ``_forward_reference`` is the same evaluation block by block.
        ``_last`` gives the last call's internal signals (recomputed by the reference)."""
        lay = self._compiled()
        if lay is None:
            out = self._forward_reference(q, v, tau, ext)
        else:
            tau = np.ascontiguousarray(tau, dtype=float)
            if tau.shape != (self.nv,):
                raise StateError(f"TITOP forward: tau must have {self.nv} entries, got {tau.shape}")
            q, v = self._state(q, v)
            out = np.zeros(self.nv)
            loads = self._load_arrays(lay, ext)
            if not _kernels().forward_dynamics(lay.tree, self.g, q, v, tau, loads, lay.loops, out):
                out = self._forward_reference(q, v, tau, ext)  # a singular joint or root: the NumPy error
        self._last_call = (q, v, tau, ext)  # the arguments as passed (not copied)
        return out

    @property
    def _last(self):
        """(kin, ports, acc, loads) of the last :meth:`forward` call: every block's joint kinematics, ports'
        motions, acceleration ẋ'^A_P and port loads, recomputed by ``_forward_reference`` (for inspection)."""
        if self._last_call is None:
            raise StateError("TITOP system: no forward call yet")
        return self._forward_reference(*self._last_call, detail=True)[1]

    def inverse(
        self,
        q: np.ndarray,
        v: np.ndarray,
        a: np.ndarray,
        ext: dict[tuple[str, str], np.ndarray] | None = None,
    ) -> np.ndarray:
        """Inverse dynamics (motions → wrenches): the generalized forces that produce v̇ = ``a`` —
        accelerations root → leaves ((17)/(24)), wrenches leaves → root ((11), (18)/(25), (29)),
        u = −Sᵀ W_{A/B,P} (19)/(26).  Compiled in ``_titop_kernels.inverse_dynamics``;
        ``_inverse_reference`` is the same evaluation block by block."""
        lay = self._compiled()
        if lay is None:
            return self._inverse_reference(q, v, a, ext)
        a = np.ascontiguousarray(a, dtype=float)
        if a.shape != (self.nv,):
            raise StateError(f"TITOP inverse: a must have {self.nv} entries, got {a.shape}")
        q, v = self._state(q, v)
        out = np.zeros(self.nv)
        _kernels().inverse_dynamics(lay.tree, self.g, q, v, a, self._load_arrays(lay, ext), lay.loops, out)
        return out

    # -- energy (for conservation checks) --
    def energy(self, q: np.ndarray, v: np.ndarray, ext_potential: object = None) -> float:
        """Kinetic + gravity potential (−Σ m g·IB) + loop-closure spring energy."""
        kin, ports = self.kinematics(q, v)
        E = 0.0
        for i, nd in enumerate(self.nodes):
            body = nd.block.body
            mA = kin[i][1]
            if body.mass == 0.0:
                continue
            E += body.kinetic_energy(mA.tw)
            E -= body.mass * float(self.g @ (mA.R @ (mA.pos + body.com)))
        for L in self.loops:
            E += L.energy(ports[self.index[L.left]][L.port_l], ports[self.index[L.right]][L.port_r])
        return E

    def port_motion(self, q: np.ndarray, v: np.ndarray, block: str, port: str) -> Motion:
        """The motion (velocity level) of a port, in its block's frame."""
        _, ports = self.kinematics(q, v)
        i = self.index.get(block)
        if i is None:
            raise FrameNotFoundError(f"no block '{block}'; blocks: {list(self.index)}")
        self.nodes[i].block.body.port(port)
        return ports[i][port]


# ------------------------------------------------------------------------------ from a Pinocchio model
_AXES: dict[str, tuple[float, float, float] | np.ndarray] = {
    "X": (1.0, 0.0, 0.0),
    "Y": (0.0, 1.0, 0.0),
    "Z": (0.0, 0.0, 1.0),
}


def from_pinocchio(model: Any, gravity: ArrayLike | None = None) -> System:
    """A TITOP System with one block per joint of a Pinocchio model (free-flyer root or fixed base;
    revolute and prismatic joints, aligned or unaligned).  Each block receives only its own joint's
    data: the body inertia of that joint, its axis, the rotation of its placement (P_a0/b) and, as ports,
    the translations of its children's placements.  Coordinates then match Pinocchio's q, v."""
    shortnames = [model.joints[i].shortname() for i in range(model.njoints)]
    ports: list[dict[str, ArrayLike]] = [dict() for _ in range(model.njoints)]
    for i in range(1, model.njoints):
        ports[model.parents[i]][f"to_{model.names[i]}"] = np.array(model.jointPlacements[i].translation)
    g = np.array(model.gravity.linear) if gravity is None else np.asarray(gravity, dtype=float)

    def body(i: int) -> RigidBody:
        I = model.inertias[i]
        return RigidBody(model.names[i], float(I.mass), np.array(I.lever), np.array(I.inertia), ports[i])

    first = 1
    if model.njoints > 1 and shortnames[1] == "JointModelFreeFlyer":
        if model.parents[1] != 0 or not model.jointPlacements[1].isIdentity():
            raise ConfigError(
                f"from_pinocchio: the free-flyer '{model.names[1]}' must hang from the universe "
                "with an identity placement"
            )
        sysm = System(FloatingBase(body(1)), g)
        first = 2
    else:
        sysm = System(FixedBase(model.names[0], ports[0]), g)
    for i in range(first, model.njoints):
        sn = shortnames[i]
        kind = sn[len("JointModel") :]
        if kind in ("RX", "RY", "RZ", "PX", "PY", "PZ"):
            axis, cls = _AXES[kind[1]], (Revolute if kind[0] == "R" else Prismatic)
        elif kind in ("RevoluteUnaligned", "PrismaticUnaligned"):
            axis, cls = np.array(model.joints[i].extract().axis), (Revolute if kind[0] == "R" else Prismatic)
        else:
            raise ConfigError(
                f"from_pinocchio: joint '{model.names[i]}' is a {sn}; TITOP blocks exist for a "
                "free-flyer root and revolute/prismatic joints ([Alazard] §3)"
            )
        parent = model.names[model.parents[i]]
        blk = cls(body(i), axis, np.array(model.jointPlacements[i].rotation))
        sysm.add(blk, parent, f"to_{model.names[i]}")
    return sysm
