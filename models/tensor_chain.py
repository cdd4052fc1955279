"""Unreduced, non-recursive Newton–Euler model of an N-body chain with spherical joints ([Eslami] §2).

Every quantity is assembled from the bodies' tensors *expressed in the inertial frame I* (the paper's
"coordination" of Appendix B): positions s_{B_i I} = p_i, rotations R_i = [T^{I B_i}] = ([T]^{B_i I})ᵀ,
velocities v_i and angular velocities ω_i.  The generalized velocity is ordered as in the paper,

    ν = [v_1; …; v_N; ω_1; …; ω_N] ∈ R^{6N}           (all linear parts first, then all angular parts).

Geometry: joint j (j = 1…N−1) links body j to body j+1.  ``joint_parent[j]`` is the joint point
relative to the CoM of body j in body-j coordinates, ``joint_child[j]`` relative to the CoM of body
j+1 in body-(j+1) coordinates.  With the paper's s_{XY} = X − Y (position of X from Y):

    s_{B_j J_j} = −R_j joint_parent[j],      s_{B_{j+1} J_j} = −R_{j+1} joint_child[j].

Model (equation numbers of the seed paper):
  * ℳ = blockdiag(m_i I₃, R_i I_{B_i} R_iᵀ)                                      (61)–(64)
  * velocity constraint  v_{j+1} − v_j − S_{B_jJ_j} ω_j + S_{B_{j+1}J_j} ω_{j+1} = 0   (27)
    → J = [J_v, J_ω]                                                           (30)–(31)
  * acceleration constraint J D^I ν = γ,
    γ_j = Ω_{j+1}Ω_{j+1} s_{B_{j+1}J_j} − Ω_jΩ_j s_{B_jJ_j}                    (28)
  * 𝒞(ν) = blockdiag(0, Ω_i I_i^I)                                             (16)
  * joint moments of torsional springs on the relative Euler angles of body j+1 w.r.t. body j,
    m_{J_j} = K_φ φ_j j_{j1} + K_θ θ_j j_{j2} + K_ψ ψ_j j_{j3}                  (19)
    with the 1-2-3 sequence B_j —φ about axis 1→ Y_j —θ about axis 2→ X_j —ψ about axis 3→ B_{j+1} (20),
    i.e. R_jᵀ R_{j+1} = Rx(φ) Ry(θ) Rz(ψ) (active rotations), axes j_{j1} = b_{j,1} (first axis of
    B_j), j_{j2} = x_{j,2} = R_{j+1} Rz(−ψ) e₂ (24), j_{j3} = b_{j+1,3}.  The moment acts with + on body j
    and − on body j+1 (15), (33): 𝒞_F 𝐌_J.
    Law (19) is NOT conservative: the axes j_{j1}, j_{j2}, j_{j3} are not orthogonal (j_{j1}·j_{j3} = sin θ),
    so m_{J_j} is not the gradient of V = ½ Σ_k K_k angle_k².  With ω_rel = ω_{j+1} − ω_j = A (φ̇, θ̇, ψ̇),
    A = [j_{j1} j_{j2} j_{j3}], the springs' power is −m·ω_rel = −(K∘angles)ᵀAᵀA (angle rates), while
    −dV/dt = −(K∘angles)ᵀ(angle rates).  Measured (random attitudes and rates, K isotropic): |power + dV/dt|
    reaches 0.5 %, 5 %, 35 % and 120 % of |m_J|·|ω_rel| at relative rotations of 0.01, 0.1, 0.5 and 1 rad.
    Momentum is still conserved (the moments are internal); energy is not (chain_open_loop reports
    energy_drift_rel for both laws).
    Alternative law ``spring_law="rotvec"``: m_{J_j} = R_j diag(K) Log(R_jᵀR_{j+1}) — what a MuJoCo
    ball joint's ``stiffness`` realizes (for isotropic K); used to compare against the MuJoCo plant.
    Alternative law ``spring_law="euler123_conservative"`` (ours, not the paper's): the same potential
    V = ½ Σ K_k angle_k² on the same Euler angles, with the moment m_{J_j} = A⁻ᵀ (K∘angles), its exact
    gradient (−m·ω_rel = −dV/dt); equal to (19) when the axes are orthonormal (θ = 0), and, like (19),
    undefined at θ = ±π/2.
  * applied force ℱ = [F_B + M_v g_{3N}; M_B + C_F M_J − 𝒞(ν)ν]                  (33)
  * augmented system (32), solved for D^I ν and the joint forces F_J:

        [ℳ  Jᵀ] [D^I ν]   [ℱ]
        [J  0 ] [ F_J ] = [γ]

    Sign note: the paper prints the unknown as −F_J in (32) but writes (7)/(17) as
    ℳ D^Iν = ℱ + C_F F_J + C_M F_J with C_F = −J_vᵀ, C_M = −J_ωᵀ (stated below (32)); the two agree
    only with +F_J in the unknown vector.  We keep (6)–(7): f_{J_j} acts with + on body j and − on
    body j+1, the generalized constraint force is −JᵀF_J.
  * Schur-complement alternative (35): S = J ℳ⁻¹ Jᵀ, F_J = S⁻¹(J ℳ⁻¹ ℱ − γ), D^Iν = ℳ⁻¹(ℱ − JᵀF_J).
  * attitude by quaternions q = [q0, q1, q2, q3] (scalar first), q̇ = ½ q ⊗ [0; ω^B] (55), kept unit
    by renormalization after every step; conversions (56)–(58).

Optional ``fixed_base``: body 1 welded to the inertial frame at ``base_pose`` (six more constraint
rows v_1 = 0, ω_1 = 0 appended after the 3(N−1) joint rows; their multipliers are the base wrench).

Constraint stabilization (documented choice): after each integration step, ``project`` applies
(a) a mass-weighted Newton correction of the positions and attitudes onto φ(x) = 0, δx = −ℳ⁻¹Jᵀ S⁻¹ φ,
and (b) the mass-orthogonal velocity projection ν ← ν − ℳ⁻¹Jᵀ S⁻¹ J ν.  Both corrections are of the
form ℳ⁻¹Jᵀλ — internal joint forces — so they leave the total linear momentum and the centre of mass
unchanged exactly; the total angular momentum changes only by (joint-point mismatch) × λ, i.e. at
second order in the violation (see tests/test_tensor_chain.py and the open-loop scenario).

A model function takes a state and returns arrays; nothing here keeps hidden state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, StateError, check_finite
from cmstack.models.lie import (
    cross,
    kkt_solve,
    quat_conj,
    quat_exp,
    quat_from_matrix,
    quat_log,
    quat_mul,
    quat_to_matrix,
    rot_x,  # noqa: F401 (re-exported: scenarios/chain_task_space.py, tests/test_tensor_chain.py)
    rot_y,  # noqa: F401 (re-exported)
    rot_z,  # noqa: F401 (re-exported)
    rotation_vector,
    skew,
)

SPRING_LAWS = ("euler123", "rotvec", "euler123_conservative")

# ----------------------------------------------------------------------------------- small tensors
_I3 = np.eye(3)


def transformation_BI(q: np.ndarray) -> np.ndarray:
    """[T]^{BI} exactly as printed in (58) (inertial → body coordinates)."""
    q0, q1, q2, q3 = (float(x) for x in q)
    return np.array(
        [
            [q0**2 + q1**2 - q2**2 - q3**2, 2 * (q1 * q2 + q0 * q3), 2 * (q1 * q3 - q0 * q2)],
            [2 * (q1 * q2 - q0 * q3), q0**2 - q1**2 + q2**2 - q3**2, 2 * (q2 * q3 + q0 * q1)],
            [2 * (q1 * q3 + q0 * q2), 2 * (q2 * q3 - q0 * q1), q0**2 - q1**2 - q2**2 + q3**2],
        ]
    )


def quat_from_euler_zyx(phi: float, theta: float, psi: float) -> np.ndarray:
    """(56): quaternion of Z-Y-X Euler angles (yaw Ψ, pitch Θ, roll Φ)."""
    cf, sf = np.cos(phi / 2), np.sin(phi / 2)
    ct, st = np.cos(theta / 2), np.sin(theta / 2)
    cp, sp = np.cos(psi / 2), np.sin(psi / 2)
    return np.array(
        [
            cp * ct * cf + sp * st * sf,
            cp * ct * sf - sp * st * cf,
            cp * st * cf + sp * ct * sf,
            sp * ct * cf - cp * st * sf,
        ]
    )


def euler_zyx_from_quat(q: np.ndarray) -> tuple[float, float, float]:
    """(57): (Φ, Θ, Ψ) of a unit quaternion."""
    q0, q1, q2, q3 = (float(x) for x in q)
    phi = np.arctan2(2 * (q2 * q3 + q0 * q1), q0**2 - q1**2 - q2**2 + q3**2)
    theta = np.arcsin(np.clip(-2 * (q1 * q3 - q0 * q2), -1.0, 1.0))
    psi = np.arctan2(2 * (q1 * q2 + q0 * q3), q0**2 + q1**2 - q2**2 - q3**2)
    return float(phi), float(theta), float(psi)


def quat_rate_body(q: np.ndarray, w_body: np.ndarray) -> np.ndarray:
    """(55): q̇ = ½ Ω₄(p, q, r) q with the body-frame angular velocity ω^B = (p, q, r)."""
    p, qq, r = (float(x) for x in w_body)
    W = np.array([[0.0, -p, -qq, -r], [p, 0.0, r, -qq], [qq, -r, 0.0, p], [r, qq, -p, 0.0]])
    return 0.5 * W @ np.asarray(q, dtype=float)


def euler123_from_matrix(R: np.ndarray) -> np.ndarray:
    """(φ, θ, ψ) with R = Rx(φ) Ry(θ) Rz(ψ) (the joint sequence (20)); shape (..., 3, 3) → (..., 3).
    Singular at θ = ±π/2 (gimbal lock): the spring law (19) is not defined there."""
    theta = np.arcsin(np.clip(R[..., 0, 2], -1.0, 1.0))
    phi = np.arctan2(-R[..., 1, 2], R[..., 2, 2])
    psi = np.arctan2(-R[..., 0, 1], R[..., 0, 0])
    return np.stack([phi, theta, psi], axis=-1)


# ------------------------------------------------------------------------------------------ state
@dataclass
class ChainState:
    """Positions p (N,3), unit quaternions q^{B_i I} (N,4, scalar first), velocities ν (6N) = [v…; ω…],
    all in inertial coordinates."""

    pos: np.ndarray
    quat: np.ndarray
    nu: np.ndarray

    def copy(self) -> ChainState:
        return ChainState(self.pos.copy(), self.quat.copy(), self.nu.copy())

    @property
    def n(self) -> int:
        return self.pos.shape[0]

    @property
    def v(self) -> np.ndarray:
        return self.nu[: 3 * self.n].reshape(self.n, 3)

    @property
    def w(self) -> np.ndarray:
        return self.nu[3 * self.n :].reshape(self.n, 3)

    @property
    def R(self) -> np.ndarray:
        return quat_to_matrix(self.quat)

    def transformed(self, Q: np.ndarray, t: np.ndarray) -> ChainState:
        """The same state seen after the rigid motion x ↦ Q x + t of the whole scene."""
        qQ = quat_from_matrix(Q)
        n = self.n
        nu = np.concatenate([(self.v @ Q.T).ravel(), (self.w @ Q.T).ravel()])
        return ChainState(self.pos @ Q.T + t, quat_mul(np.broadcast_to(qQ, (n, 4)), self.quat), nu)


@dataclass
class Dynamics:
    """Everything one evaluation of (32) produces."""

    nu_dot: np.ndarray  # D^I ν (6N)
    F_J: np.ndarray  # joint forces (3(N−1) [+6 base rows]), sign of (6)–(7)
    M: np.ndarray
    J: np.ndarray
    gamma: np.ndarray
    F: np.ndarray  # ℱ (33), port included
    M_J: np.ndarray  # joint moments (N−1, 3)


@dataclass
class TensorChain:
    """N rigid bodies joined by N−1 spherical joints with torsional springs ([Eslami] §2)."""

    masses: np.ndarray  # (N,)
    inertias: np.ndarray  # (N,3,3) about each CoM, body coordinates
    joint_parent: np.ndarray  # (N−1,3) joint j relative to CoM of body j, body-j coordinates
    joint_child: np.ndarray  # (N−1,3) joint j relative to CoM of body j+1, body-(j+1) coordinates
    stiffness: np.ndarray  # (N−1,3) K_φ, K_θ, K_ψ [N·m/rad]
    gravity: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
    spring_law: str = "euler123"  # "euler123" (19)–(24), not conservative | "rotvec" (MuJoCo ball-joint
    # stiffness) | "euler123_conservative" (ours: the gradient of ½ΣK·angle²)
    fixed_base: bool = False
    base_pose: tuple | None = None  # (p_1, q_1) when fixed_base
    fast: bool = True  # step/project through the compiled kernels (models/_tensor_kernels.py);
    # False: the NumPy formulation below (the reference)

    def __post_init__(self) -> None:
        self.masses = np.asarray(self.masses, dtype=float)
        n = self.masses.size
        if n < 2:
            raise ConfigError(f"TensorChain needs N >= 2 bodies, got {n}")
        self.inertias = np.asarray(self.inertias, dtype=float).reshape(n, 3, 3)
        self.joint_parent = np.asarray(self.joint_parent, dtype=float).reshape(n - 1, 3)
        self.joint_child = np.asarray(self.joint_child, dtype=float).reshape(n - 1, 3)
        self.stiffness = np.broadcast_to(np.asarray(self.stiffness, dtype=float), (n - 1, 3)).copy()
        self.gravity = np.asarray(self.gravity, dtype=float).reshape(3)
        if np.any(self.masses <= 0):
            raise ConfigError(f"TensorChain: every mass must be > 0, got {self.masses.tolist()}")
        for i, I in enumerate(self.inertias):
            if not np.allclose(I, I.T) or np.min(np.linalg.eigvalsh(I)) <= 0:
                raise ConfigError(f"TensorChain: inertia of body {i + 1} must be symmetric positive definite")
        if np.any(self.stiffness < 0):
            raise ConfigError("TensorChain: spring stiffness must be >= 0")
        if self.spring_law not in SPRING_LAWS:
            raise ConfigError(f"spring_law='{self.spring_law}' is not one of {list(SPRING_LAWS)}")
        if self.fixed_base and self.base_pose is None:
            raise ConfigError("TensorChain: fixed_base=True needs base_pose=(p_1, q_1)")
        self.inertias_inv = np.linalg.inv(self.inertias)
        self._base = (np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), np.eye(3))
        if self.fixed_base and self.base_pose is not None:  # (None refused above)
            p0, q0 = (np.asarray(x, dtype=float).copy() for x in self.base_pose)
            self._base = (p0, q0, quat_to_matrix(q0))
        if self.fast:  # load (or compile) the kernels now, not inside a timed loop's first step
            self.step(self.straight_state(), 1e-3)

    def _kernel_args(
        self,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool]:
        from cmstack.models._tensor_kernels import LAW_CODES

        return (
            self.masses,
            self.inertias,
            np.ascontiguousarray(self.joint_parent),
            np.ascontiguousarray(self.joint_child),
            self.stiffness,
            self.gravity,
            LAW_CODES[self.spring_law],
            bool(self.fixed_base),
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def rods(
        cls, n: int, length: float, radius: float, mass: float, stiffness: ArrayLike, **kw: Any
    ) -> TensorChain:
        """N equal solid cylinders along their body x axis, joints at the rod ends (±length/2)."""
        if not (length > 0 and radius > 0 and mass > 0):
            raise ConfigError(f"rods: length, radius and mass must be > 0, got {length}, {radius}, {mass}")
        ixx = 0.5 * mass * radius**2
        iyy = mass * (3 * radius**2 + length**2) / 12.0
        I = np.diag([ixx, iyy, iyy])
        a = np.array([length / 2, 0.0, 0.0])
        return cls(
            np.full(n, float(mass)),
            np.broadcast_to(I, (n, 3, 3)).copy(),
            np.broadcast_to(a, (n - 1, 3)).copy(),
            np.broadcast_to(-a, (n - 1, 3)).copy(),
            np.asarray(stiffness, dtype=float),
            **kw,
        )

    @property
    def n(self) -> int:
        return self.masses.size

    @property
    def n_constraints(self) -> int:
        return 3 * (self.n - 1) + (6 if self.fixed_base else 0)

    def straight_state(
        self, origin: ArrayLike = (0.0, 0.0, 0.0), quat: ArrayLike = (1.0, 0.0, 0.0, 0.0)
    ) -> ChainState:
        """All bodies with the same attitude, joints coincident (φ = 0), at rest."""
        q = np.asarray(quat, dtype=float)
        q = q / np.linalg.norm(q)
        R = quat_to_matrix(q)
        pos = np.zeros((self.n, 3))
        pos[0] = origin
        for j in range(self.n - 1):
            pos[j + 1] = pos[j] + R @ (self.joint_parent[j] - self.joint_child[j])
        return ChainState(pos, np.tile(q, (self.n, 1)), np.zeros(6 * self.n))

    # ------------------------------------------------------------------ tensors of (32)
    def arms(self, R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """s_{B_j J_j} = −R_j a_j and s_{B_{j+1} J_j} = −R_{j+1} b_j (inertial coordinates), each (N−1,3)."""
        s_par = -np.einsum("jab,jb->ja", R[:-1], self.joint_parent)
        s_chi = -np.einsum("jab,jb->ja", R[1:], self.joint_child)
        return s_par, s_chi

    def inertia_world(self, R: np.ndarray) -> np.ndarray:
        """I_i^I = R_i I_i^B R_iᵀ (64), symmetrized so that ℳ is exactly symmetric in floating point."""
        Iw = np.einsum("iab,ibc,idc->iad", R, self.inertias, R)
        return 0.5 * (Iw + Iw.transpose(0, 2, 1))

    def _blockdiag(
        self, linear: np.ndarray | float, angular: np.ndarray | Sequence[np.ndarray]
    ) -> np.ndarray:
        """The 6N×6N matrix blockdiag(diag(linear), angular_1 … angular_N): ``linear`` on the diagonal of
        the 3N linear rows (a 3N vector or a scalar), the 3×3 ``angular[i]`` on body i's angular rows."""
        n = self.n
        M = np.zeros((6 * n, 6 * n))
        idx = np.arange(3 * n)
        M[idx, idx] = linear
        for i in range(n):
            k = 3 * n + 3 * i
            M[k : k + 3, k : k + 3] = angular[i]
        return M

    def mass_matrix(self, R: np.ndarray) -> np.ndarray:
        """ℳ = blockdiag(M_v, M_ω) (61)–(64)."""
        return self._blockdiag(np.repeat(self.masses, 3), self.inertia_world(R))

    def mass_matrix_inv(self, R: np.ndarray) -> np.ndarray:
        """ℳ⁻¹ = blockdiag(M_v⁻¹, R_i I_i⁻¹ R_iᵀ)."""
        Iwi = np.einsum("iab,ibc,idc->iad", R, self.inertias_inv, R)
        return self._blockdiag(1.0 / np.repeat(self.masses, 3), Iwi)

    def _spin_and_inertia(self, R: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(Ω_i = [ω_i]×, I_i^I) of every body at the attitudes R and the twist ν."""
        return skew(nu[3 * self.n :].reshape(self.n, 3)), self.inertia_world(R)

    def mass_matrix_dot(self, R: np.ndarray, nu: np.ndarray) -> np.ndarray:
        """D^I ℳ = blockdiag(0, Ω_i I_i − I_i Ω_i) (70), (76)."""
        W, Iw = self._spin_and_inertia(R, nu)
        return self._blockdiag(0.0, [W[i] @ Iw[i] - Iw[i] @ W[i] for i in range(self.n)])

    def coriolis(self, R: np.ndarray, nu: np.ndarray) -> np.ndarray:
        """𝒞(ν) = blockdiag(0, Ω_i I_i^I) (16), (77)."""
        W, Iw = self._spin_and_inertia(R, nu)
        return self._blockdiag(0.0, [W[i] @ Iw[i] for i in range(self.n)])

    def jacobian(self, R: np.ndarray) -> np.ndarray:
        """J = [J_v, J_ω] (30)–(31); with a fixed base six rows [v_1; ω_1] are appended."""
        n = self.n
        s_par, s_chi = self.arms(R)
        J = np.zeros((self.n_constraints, 6 * n))
        Sp, Sc = skew(s_par), skew(s_chi)
        for j in range(n - 1):
            r = 3 * j
            J[r : r + 3, 3 * j : 3 * j + 3] = -_I3
            J[r : r + 3, 3 * j + 3 : 3 * j + 6] = _I3
            J[r : r + 3, 3 * n + 3 * j : 3 * n + 3 * j + 3] = -Sp[j]
            J[r : r + 3, 3 * n + 3 * j + 3 : 3 * n + 3 * j + 6] = Sc[j]
        if self.fixed_base:
            r = 3 * (n - 1)
            J[r : r + 3, 0:3] = np.eye(3)
            J[r + 3 : r + 6, 3 * n : 3 * n + 3] = np.eye(3)
        return J

    def jacobian_dot(self, R: np.ndarray, nu: np.ndarray) -> np.ndarray:
        """D^I J: the arms rotate with their bodies, D^I s = Ω s, so D^I S(s) = S(ω × s)."""
        n = self.n
        s_par, s_chi = self.arms(R)
        w = nu[3 * n :].reshape(n, 3)
        Jd = np.zeros((self.n_constraints, 6 * n))
        Sp = skew(cross(w[:-1], s_par))
        Sc = skew(cross(w[1:], s_chi))
        for j in range(n - 1):
            r = 3 * j
            Jd[r : r + 3, 3 * n + 3 * j : 3 * n + 3 * j + 3] = -Sp[j]
            Jd[r : r + 3, 3 * n + 3 * j + 3 : 3 * n + 3 * j + 6] = Sc[j]
        return Jd

    def gamma(self, R: np.ndarray, nu: np.ndarray) -> np.ndarray:
        """γ_j = Ω_{j+1}Ω_{j+1} s_{B_{j+1}J_j} − Ω_jΩ_j s_{B_jJ_j} (28); zeros for the base rows."""
        n = self.n
        s_par, s_chi = self.arms(R)
        w = nu[3 * n :].reshape(n, 3)
        g = cross(w[1:], cross(w[1:], s_chi)) - cross(w[:-1], cross(w[:-1], s_par))
        out = np.zeros(self.n_constraints)
        out[: 3 * (n - 1)] = g.ravel()
        return out

    def force_distribution(self, R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """C_F (8) and C_M (18) as printed, (3N × 3(N−1)) each."""
        n = self.n
        s_par, s_chi = self.arms(R)
        CF = np.zeros((3 * n, 3 * (n - 1)))
        CM = np.zeros((3 * n, 3 * (n - 1)))
        for j in range(n - 1):
            CF[3 * j : 3 * j + 3, 3 * j : 3 * j + 3] = np.eye(3)
            CF[3 * j + 3 : 3 * j + 6, 3 * j : 3 * j + 3] = -np.eye(3)
            CM[3 * j : 3 * j + 3, 3 * j : 3 * j + 3] = -skew(s_par[j])
            CM[3 * j + 3 : 3 * j + 6, 3 * j : 3 * j + 3] = skew(s_chi[j])
        return CF, CM

    def relative_euler(self, R: np.ndarray) -> np.ndarray:
        """(φ_j, θ_j, ψ_j) of body j+1 w.r.t. body j, sequence (20); shape (N−1, 3)."""
        Rrel = np.einsum("jba,jbc->jac", R[:-1], R[1:])
        return euler123_from_matrix(Rrel)

    def joint_axes(self, R: np.ndarray, angles: np.ndarray) -> np.ndarray:
        """(j_{j1}, j_{j2}, j_{j3}) in inertial coordinates, shape (N−1, 3, 3) [joint, axis, xyz]:
        j1 = first axis of B_j, j2 = second axis of X_j = R_{j+1} Rz(−ψ) e₂ (24), j3 = third axis of B_{j+1}."""
        psi = angles[:, 2]
        j1 = R[:-1, :, 0]
        j3 = R[1:, :, 2]
        j2 = np.sin(psi)[:, None] * R[1:, :, 0] + np.cos(psi)[:, None] * R[1:, :, 1]
        return np.stack([j1, j2, j3], axis=1)

    def joint_moments(self, R: np.ndarray) -> np.ndarray:
        """m_{J_j} (19) (or the rotation-vector law), inertial coordinates, shape (N−1, 3)."""
        if self.spring_law == "rotvec":
            th = rotation_vector(
                np.einsum("jba,jbc->jac", R[:-1], R[1:])
            )  # in B_j (= in B_{j+1}) coordinates
            return np.einsum("jab,jb->ja", R[:-1], self.stiffness * th)
        ang = self.relative_euler(R)
        ax = self.joint_axes(R, ang)
        if self.spring_law == "euler123_conservative":  # A⁻ᵀ(K∘angles), ax[j] = Aᵀ (rows = axes)
            return np.linalg.solve(ax, (self.stiffness * ang)[..., None])[..., 0]
        return np.einsum("jk,jkx->jx", self.stiffness * ang, ax)

    def spring_energy(self, R: np.ndarray) -> float:
        """½ Σ K_k θ_k² on the law's own angles: the rotation vector for "rotvec" (its potential when K is
        isotropic per joint), the Euler angles (20) otherwise (the potential of "euler123_conservative"; for
        the paper's "euler123" it is not a potential of the moments, see the module docstring)."""
        if self.spring_law == "rotvec":
            th = rotation_vector(np.einsum("jba,jbc->jac", R[:-1], R[1:]))
        else:
            th = self.relative_euler(R)
        return float(0.5 * np.sum(self.stiffness * th * th))

    def applied_force(
        self, R: np.ndarray, nu: np.ndarray, port: ArrayLike | None, M_J: np.ndarray | None = None
    ) -> np.ndarray:
        """ℱ (33) with the port τ = [F_B; M_B] (6N, inertial coordinates, moments about the CoMs)."""
        n = self.n
        if M_J is None:
            M_J = self.joint_moments(R)
        F = np.zeros(6 * n)
        F[: 3 * n] = np.tile(self.gravity, n) * np.repeat(self.masses, 3)
        CFMJ = np.zeros((n, 3))  # C_F M_J: + on body j, − on body j+1
        CFMJ[:-1] += M_J
        CFMJ[1:] -= M_J
        w = nu[3 * n :].reshape(n, 3)
        gyro = cross(w, np.einsum("iab,ib->ia", self.inertia_world(R), w))  # 𝒞(ν)ν = Ω_i I_i ω_i
        F[3 * n :] = CFMJ.ravel() - gyro.ravel()
        if port is not None:
            F += np.asarray(port, dtype=float)
        return F

    def known_force(self, R: np.ndarray) -> np.ndarray:
        """ℱ_{g,J} = M_v g_{3N} + C_F M_J (37): the part of ℱ the control laws cancel."""
        n = self.n
        F = np.zeros(6 * n)
        F[: 3 * n] = np.tile(self.gravity, n) * np.repeat(self.masses, 3)
        M_J = self.joint_moments(R)
        CFMJ = np.zeros((n, 3))
        CFMJ[:-1] += M_J
        CFMJ[1:] -= M_J
        F[3 * n :] = CFMJ.ravel()
        return F

    # ------------------------------------------------------------------ solving (32)
    @staticmethod
    def solve_kkt(
        M: np.ndarray, J: np.ndarray, F: np.ndarray, gamma: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """[ℳ Jᵀ; J 0][ν̇; F_J] = [ℱ; γ] (32) by one dense LU solve."""
        return kkt_solve(M, J, F, gamma)

    @staticmethod
    def solve_schur(
        Minv: np.ndarray, J: np.ndarray, F: np.ndarray, gamma: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(35): S = J ℳ⁻¹ Jᵀ, F_J = S⁻¹(J ℳ⁻¹ ℱ − γ), ν̇ = ℳ⁻¹(ℱ − Jᵀ F_J)."""
        MiJt = Minv @ J.T
        S = J @ MiJt
        FJ = np.linalg.solve(S, J @ (Minv @ F) - gamma)
        return Minv @ F - MiJt @ FJ, FJ

    def dynamics(self, state: ChainState, port: ArrayLike | None = None, method: str = "kkt") -> Dynamics:
        R = state.R
        nu = state.nu
        M_J = self.joint_moments(R)
        F = self.applied_force(R, nu, port, M_J)
        J = self.jacobian(R)
        gam = self.gamma(R, nu)
        M = self.mass_matrix(R)
        if method == "kkt":
            nd, FJ = self.solve_kkt(M, J, F, gam)
        elif method == "schur":
            nd, FJ = self.solve_schur(self.mass_matrix_inv(R), J, F, gam)
        else:
            raise ConfigError(f"method='{method}' is not one of ['kkt', 'schur']")
        return Dynamics(nd, FJ, M, J, gam, F, M_J)

    # ------------------------------------------------------------------ kinematics, diagnostics
    def constraint_violation(self, state: ChainState) -> np.ndarray:
        """φ_j = (p_{j+1} − s_{B_{j+1}J_j}) − (p_j − s_{B_jJ_j}) (joint-point mismatch, m); φ̇ = J ν.
        With a fixed base: [p_1 − p_1⁰; Log(R_1⁰ᵀ R_1) expressed in I]."""
        R = state.R
        s_par, s_chi = self.arms(R)
        phi = ((state.pos[1:] - s_chi) - (state.pos[:-1] - s_par)).ravel()
        if self.fixed_base and self.base_pose is not None:  # set whenever fixed_base (__post_init__)
            p0, q0 = self.base_pose
            dq = quat_mul(quat_conj(np.asarray(q0, dtype=float)), state.quat[0])
            rot = quat_to_matrix(np.asarray(q0, dtype=float)) @ quat_log(dq)
            phi = np.concatenate([phi, state.pos[0] - np.asarray(p0, dtype=float), rot])
        return phi

    def momentum(self, state: ChainState) -> tuple[np.ndarray, np.ndarray]:
        """Total linear momentum Σ m v and angular momentum about the inertial origin Σ p × m v + I ω."""
        m = self.masses[:, None]
        P = np.sum(m * state.v, axis=0)
        Iw = self.inertia_world(state.R)
        L = np.sum(cross(state.pos, m * state.v) + np.einsum("iab,ib->ia", Iw, state.w), axis=0)
        return P, L

    def kinetic_energy(self, state: ChainState) -> float:
        return float(0.5 * state.nu @ self.mass_matrix(state.R) @ state.nu)

    # ------------------------------------------------------------------ integration
    @staticmethod
    def state_derivative(state: ChainState, nu_dot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ṗ, q̇, ν̇): ṗ = v, q̇ = ½ [0; ω^I] ⊗ q (≡ (55) with ω^B = Rᵀ ω^I)."""
        n = state.n
        w4 = np.zeros((n, 4))
        w4[:, 1:] = state.w
        return state.v.copy(), 0.5 * quat_mul(w4, state.quat), nu_dot

    @staticmethod
    def _advance(state: ChainState, d: tuple[np.ndarray, np.ndarray, np.ndarray], h: float) -> ChainState:
        return ChainState(state.pos + h * d[0], state.quat + h * d[1], state.nu + h * d[2])

    def _after_step(self, new: ChainState, project: bool, t: float) -> ChainState:
        """The state a step from t [s] reached, projected on the constraints (``project``) and checked finite
        (a StateError naming the step's time otherwise)."""
        if project:
            new = self.project(new)
        check_finite(
            "tensor-chain state",
            np.concatenate([new.pos.ravel(), new.quat.ravel(), new.nu]),
            f"after the step from t={t:.6f} s",
        )
        return new

    def step(
        self,
        state: ChainState,
        dt: float,
        port: ArrayLike | None = None,
        *,
        method: str = "kkt",
        project: bool = True,
        port_fn: Callable[[float, ChainState], ArrayLike] | None = None,
        t: float = 0.0,
    ) -> tuple[ChainState, Dynamics]:
        """One classical RK4 step of (32) + (55).  ``port`` is held over the step (zero-order hold, a
        sampled-data controller); ``port_fn(t, state)`` instead is evaluated at every stage (continuous
        feedback).  Quaternions are renormalized, then (optionally) ``project`` is applied.  Returns the
        new state and the dynamics evaluated at the *start* of the step (F_J, ℱ, … of the sample).
        With ``fast`` (and method "kkt", no ``port_fn``) the step is one compiled call
        (models/_tensor_kernels.py: rk4), the same equations as the NumPy code below."""
        if self.fast and method == "kkt" and port_fn is None:
            from cmstack.models import _tensor_kernels as _k

            n = self.n
            tau = np.zeros(6 * n) if port is None else np.asarray(port, dtype=float)
            if tau.shape != (6 * n,):
                raise StateError(
                    f"TensorChain.step: the port must have 6N = {6 * n} entries, got {tau.shape}"
                )
            try:
                pn, qn, vn, *dyn = _k.rk4(
                    np.ascontiguousarray(state.pos, dtype=float),
                    np.ascontiguousarray(state.quat, dtype=float),
                    np.ascontiguousarray(state.nu, dtype=float),
                    float(dt),
                    tau,
                    self._kernel_args(),
                )
            except np.linalg.LinAlgError as exc:  # NaN/inf in the state or port, or a singular (32)
                raise StateError(
                    f"tensor-chain step from t={t:.6f} s failed: {exc} (state or port not finite, or "
                    f"[ℳ Jᵀ; J 0] singular)"
                ) from None
            new = ChainState(pn, qn, vn)
            new = self._after_step(new, project, t)
            return new, Dynamics(*dyn)

        def f(tt: float, s: ChainState) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], Dynamics]:
            tau = port_fn(tt, s) if port_fn is not None else port
            dyn = self.dynamics(s, tau, method)
            return self.state_derivative(s, dyn.nu_dot), dyn

        k1, dyn0 = f(t, state)
        k2, _ = f(t + dt / 2, self._advance(state, k1, dt / 2))
        k3, _ = f(t + dt / 2, self._advance(state, k2, dt / 2))
        k4, _ = f(t + dt, self._advance(state, k3, dt))
        new = ChainState(
            state.pos + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
            state.quat + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]),
            state.nu + dt / 6 * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2]),
        )
        new.quat /= np.linalg.norm(new.quat, axis=1, keepdims=True)
        new = self._after_step(new, project, t)
        return new, dyn0

    @overload
    def project(
        self,
        state: ChainState,
        tol: float = ...,
        max_iter: int = ...,
        *,
        violation_before: Literal[False] = ...,
    ) -> ChainState: ...

    @overload
    def project(
        self, state: ChainState, tol: float = ..., max_iter: int = ..., *, violation_before: Literal[True]
    ) -> tuple[ChainState, float]: ...

    def project(
        self, state: ChainState, tol: float = 1e-13, max_iter: int = 3, *, violation_before: bool = False
    ) -> ChainState | tuple[ChainState, float]:
        """Constraint stabilization (module docstring): mass-weighted Newton projection of the pose onto
        φ = 0, then ν ← ν − ℳ⁻¹Jᵀ S⁻¹ J ν.  With ``fast``: one compiled call, the same steps.  With
        ``violation_before``: returns (the projected state, max|φ| of ``state``)."""
        if violation_before:
            if self.fast:
                return self._project_fast(state, tol, max_iter)
            return self.project(state, tol, max_iter), float(np.max(np.abs(self.constraint_violation(state))))
        if self.fast:
            return self._project_fast(state, tol, max_iter)[0]
        return self._project_numpy(state, tol, max_iter)

    def _project_fast(self, state: ChainState, tol: float, max_iter: int) -> tuple[ChainState, float]:
        """The compiled projection: (the projected state, max|φ| of ``state``)."""
        from cmstack.models import _tensor_kernels as _k

        try:
            p, q, v, phi0 = _k.project(
                np.ascontiguousarray(state.pos, dtype=float),  # type: ignore[call-arg]
                np.ascontiguousarray(state.quat, dtype=float),
                np.ascontiguousarray(state.nu, dtype=float),
                self.masses,
                self.inertias_inv,
                np.ascontiguousarray(self.joint_parent),
                np.ascontiguousarray(self.joint_child),
                bool(self.fixed_base),
                *self._base,
                float(tol),
                int(max_iter),
            )
        except np.linalg.LinAlgError as exc:
            raise StateError(
                f"tensor-chain projection failed: {exc} (state not finite, or J ℳ⁻¹ Jᵀ singular)"
            ) from None
        return ChainState(p, q, v), float(phi0)

    def _project_numpy(self, state: ChainState, tol: float, max_iter: int) -> ChainState:
        s = state.copy()
        n = self.n
        for _ in range(max_iter):
            phi = self.constraint_violation(s)
            if np.max(np.abs(phi)) <= tol:
                break
            R = s.R
            Minv = self.mass_matrix_inv(R)
            J = self.jacobian(R)
            MiJt = Minv @ J.T
            dx = -MiJt @ np.linalg.solve(J @ MiJt, phi)
            s.pos = s.pos + dx[: 3 * n].reshape(n, 3)
            s.quat = quat_mul(quat_exp(dx[3 * n :].reshape(n, 3)), s.quat)
            s.quat /= np.linalg.norm(s.quat, axis=1, keepdims=True)
        R = s.R
        Minv = self.mass_matrix_inv(R)
        J = self.jacobian(R)
        MiJt = Minv @ J.T
        s.nu = s.nu - MiJt @ np.linalg.solve(J @ MiJt, J @ s.nu)
        return s

    def check_state(self, state: ChainState) -> None:
        n = self.n
        if state.pos.shape != (n, 3) or state.quat.shape != (n, 4) or state.nu.shape != (6 * n,):
            raise StateError(
                f"ChainState shapes {state.pos.shape}, {state.quat.shape}, {state.nu.shape} do not "
                f"match a chain of N={n} bodies ((N,3), (N,4), (6N,))"
            )
        check_finite("tensor-chain state", np.concatenate([state.pos.ravel(), state.quat.ravel(), state.nu]))
