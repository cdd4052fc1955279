"""Tensor-invariant Data-Assisted Control port laws of [Eslami] §3 and two RHS maps.

The LHS law returns the commanded port τ_c (a wrench per body, [F_B; M_B] in inertial coordinates, moments
about the CoMs) for the tensor model of models/tensor_chain.py.  Every law has the form (37)/(46)

    τ_c = ℳ D^Iν_r + 𝒞(ν) ν_r − ℱ_{g,J} − K_d s,     s = ν − ν_r,     V = ½ sᵀℳ s        (38), (48)

and differs in the reference velocity ν_r:
  (I)   ν_r = ν_d                                                       (37)
  (II)  ν_r = ν_d − Λ e_p, e_p = [p_i − p_{i,d}; attitude errors]        (42)–(47)
  (III) ν_r = J_t^† ν_{e,r} + ν_n, ν_{e,r} = ν_{e,d} − Λ_e e_{e,p},
        J_t^† = ℳ⁻¹J_tᵀ(J_t ℳ⁻¹ J_tᵀ)⁻¹, ν_n = −P ∇U_o, P = I − J_t^† J_t  (51)–(54)

With τ = τ_c the closed loop is ℳ D^I s + 𝒞 s = −K_d s − JᵀF_J (40), and D^I V = −sᵀK_d s because
sᵀ(D^Iℳ − 2𝒞)s = 0 (App. C) *and* J s = 0.  The last condition needs J ν_r = 0: the paper states it
for ν_d (feasible trajectories) but (42)–(47) and (51)–(54) as printed do not guarantee it (Λ e_p and
J_t^† ν_{e,r} are generally not constraint-consistent).  We therefore pose every reference as the
ℳ-closest velocity to a "wish" g that satisfies the constraints and the task exactly:

    ν_r = argmin ½ (ν − g)ᵀ ℳ (ν − g)   s.t.   A ν = w                                        (*)
        = g + ℳ⁻¹Aᵀ(Aℳ⁻¹Aᵀ)⁻¹(w − A g)

  (I)   A = J, w = 0, g = ν_d                  (identity when J ν_d = 0, as the paper assumes)
  (II)  A = J, w = 0, g = ν_d − Λ e_p
  (III) A = [J; J_t], w = [0; ν_{e,r}], g = −k ∇U_o: this is exactly (53)–(54) with J_t replaced by the
        stacked [J; J_t] — J_t^† w + P g with the mass-weighted pseudo-inverse (53) of the stack — which
        reduces to the printed formula when there are no joints.
D^Iν_r follows by differentiating the KKT conditions of (*): with u = ν_r − g, λ its multiplier,

    [ℳ Aᵀ][ u̇ ]   [ Ȧᵀλ − ℳ̇ u      ]
    [A  0 ][−λ̇ ] = [ ẇ − Ȧg − Aġ − Ȧu ],      D^Iν_r = ġ + u̇,

exact (no finite differences), with ℳ̇ (76), Ȧ = [J̇; 0] and the error rates below.

Attitude error (44): q_e = q_d⁻¹ ⊗ q (scalar part made ≥ 0), vector part ε_e.  ε_e is a body-frame
quantity (R_dᵀR is unchanged by a rotation of the scene), so to keep the law a tensor equation we use it
in inertial coordinates, e_att = R_d ε_e (= R ε_e), with rate
    D^I e_att = ω_d × e_att + ½ (η_e I − [e_att]×)(ω − ω_d).
Gains are isotropic per block (k_v I, k_ω I, λ_p I, λ_a I), i.e. tensors that a rigid motion of the scene
leaves unchanged — the frame-invariance test rotates and translates everything else.

RHS (the paper leaves it as future work):
  * ``ThrusterMap`` — identity: each body carries thrusters that produce its port wrench.
  * ``JointActuationMap`` — motors in the ball joints, moment u_j on body j+1 and −u_j on body j
    (u_j = R_{j+1} ū_j, ū_j in body j+1's axes, where motor limits live).  The port they produce is B u.
    Part of any wrench is absorbed by the constraints, so "realize τ_c best" is measured by the motion:
    the acceleration response of (32) to a port τ is G τ + const with G = ℳ⁻¹ − ℳ⁻¹JᵀS⁻¹Jℳ⁻¹ (the first
    block of (35)), and we minimize the kinetic norm of the acceleration error,
        ū = argmin (τ_c − B̄ū)ᵀ G (τ_c − B̄ū)         (G ℳ G = G),
    reporting the residual r = τ_c − B̄ū through ‖r‖_G = √(rᵀGr) and its acceleration G r.  With the base
    fixed (six constraint rows on body 1) and 3-axis motors in all N−1 joints the residual is zero; on a
    free-floating chain the motors cannot change the total momentum and the residual is the net external
    wrench of τ_c.
  * Both the allocation and law III's reference velocity (*) are also posed as ProxSuite QPs, so that
    motor-moment limits (allocation) or joint-rate limits (reference) enter as inequalities; with no
    limit active they return the closed forms (tests/test_dac.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cmstack.controllers.base import StepInfo
from cmstack.controllers.kernels import (
    _ee_task,
    _obstacle_wish,
    attitude_error_batch,
    attitude_error_rate_batch,
    dac_law3_step,
    dac_work_size,
)
from cmstack.controllers.qp import BoundedQP
from cmstack.models.errors import ConfigError, SolverError, StateError
from cmstack.models.lie import kkt_solve
from cmstack.models.tensor_chain import ChainState, TensorChain, cross, quat_to_matrix, skew
from cmstack.models.trajectory import FromWorldFunction, SE3Trajectory


# ------------------------------------------------------------------------------------------ helpers
def attitude_error(q: np.ndarray, q_d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(44) in inertial coordinates: returns (e_att (…,3), η_e (…)) with q_e = q_d⁻¹ ⊗ q, η_e ≥ 0 (quaternions
    (…, 4), scalar first, broadcast): the compiled ``kernels._attitude_error``, law (III)'s step's own."""
    q, q_d = np.broadcast_arrays(np.asarray(q, dtype=float), np.asarray(q_d, dtype=float))
    shape = q.shape[:-1]
    e, eta = np.empty(shape + (3,)), np.empty(shape)
    attitude_error_batch(
        np.ascontiguousarray(q).reshape(-1, 4),
        np.ascontiguousarray(q_d).reshape(-1, 4),
        e.reshape(-1, 3),
        eta.reshape(-1),
    )
    return e, (eta[()] if eta.ndim == 0 else eta)


def attitude_error_rate(e: np.ndarray, eta: np.ndarray, w: np.ndarray, w_d: np.ndarray) -> np.ndarray:
    """D^I e_att = ω_d × e + ½ (η I − [e]×)(ω − ω_d) (…, 3): the compiled ``kernels._attitude_error_rate``."""
    e, w, w_d = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (e, w, w_d)))
    eta = np.broadcast_to(np.asarray(eta, dtype=float), e.shape[:-1])
    out = np.empty(e.shape)
    attitude_error_rate_batch(
        np.ascontiguousarray(e).reshape(-1, 3),
        np.ascontiguousarray(eta).reshape(-1),
        np.ascontiguousarray(w).reshape(-1, 3),
        np.ascontiguousarray(w_d).reshape(-1, 3),
        out.reshape(-1, 3),
    )
    return out


def _kkt(M: np.ndarray, A: np.ndarray, r1: np.ndarray, r2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    try:
        x, y = kkt_solve(M, A, r1, r2)
    except np.linalg.LinAlgError:
        raise StateError(
            "DAC reference: [ℳ Aᵀ; A 0] is singular — the task rows are dependent on the "
            "constraints (a singular configuration of the chain)"
        ) from None
    return x, -y


def constrained_reference(
    M: np.ndarray,
    Mdot: np.ndarray,
    A: np.ndarray,
    Adot: np.ndarray,
    w: np.ndarray,
    wdot: np.ndarray,
    g: np.ndarray,
    gdot: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(*) of the module docstring: ν_r = argmin ½(ν−g)ᵀℳ(ν−g) s.t. Aν = w, and its exact time derivative."""
    y = w - A @ g
    u, lam = _kkt(M, A, np.zeros(M.shape[0]), y)
    ydot = wdot - Adot @ g - A @ gdot
    udot, _ = _kkt(M, A, Adot.T @ lam - Mdot @ u, ydot - Adot @ u)
    return g + u, gdot + udot


@dataclass
class LawInfo(StepInfo):
    V: float = 0.0  # ½ sᵀℳs
    Vdot_cl: float = 0.0  # −sᵀK_d s (the closed-loop rate if τ = τ_c exactly)
    s: np.ndarray | None = None
    nu_r: np.ndarray | None = None
    e_task: np.ndarray | None = None  # law II: e_p; law III: e_{e,p}
    qp_active: int = 0


class PortLaw:
    """Common part (37)/(46).  Subclasses implement ``reference(t, state, R, M) -> (ν_r, D^Iν_r)``."""

    def __init__(self, chain: TensorChain, kd_v: float, kd_w: float, kd_mass: float | None = None) -> None:
        """K_d = blockdiag(kd_v I, kd_w I), or K_d = kd_mass·ℳ(q) if ``kd_mass`` is given: still a symmetric
        p.d. tensor, and then D^I V = −2 kd_mass V, one decay rate for light and heavy directions alike (with
        scalar gains a thin rod's twist, I_xx ≪ I_yy, has rate kd_w/I_xx and limits the sampling period)."""
        if kd_mass is None and not (kd_v > 0 and kd_w > 0):
            raise ConfigError(f"K_d must be positive definite: got kd_v={kd_v}, kd_w={kd_w}")
        if kd_mass is not None and not kd_mass > 0:
            raise ConfigError(f"kd_mass must be > 0, got {kd_mass}")
        self.chain = chain
        n = chain.n
        self.kd = np.concatenate([np.full(3 * n, float(kd_v)), np.full(3 * n, float(kd_w))])
        self.kd_mass = kd_mass
        self.info = LawInfo()

    def reference(
        self, t: float, state: ChainState, R: np.ndarray, M: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def __call__(self, t: float, state: ChainState) -> np.ndarray:
        ch = self.chain
        R = state.R
        nu = state.nu
        M = ch.mass_matrix(R)
        nu_r, nu_r_dot = self.reference(t, state, R, M)
        s = nu - nu_r
        n = ch.n
        w = nu[3 * n :].reshape(n, 3)
        wr = nu_r[3 * n :].reshape(n, 3)
        Iw = ch.inertia_world(R)
        C_nu_r = np.zeros(6 * n)
        C_nu_r[3 * n :] = cross(w, np.einsum("iab,ib->ia", Iw, wr)).ravel()  # 𝒞(ν)ν_r = Ω_i I_i ω_{r,i}
        Kds = self.kd_mass * (M @ s) if self.kd_mass is not None else self.kd * s
        tau = M @ nu_r_dot + C_nu_r - ch.known_force(R) - Kds  # (37), (46)
        self.info.V = float(0.5 * s @ M @ s)  # (38), (48)
        self.info.Vdot_cl = float(-s @ Kds)
        self.info.s = s
        self.info.nu_r = nu_r
        return tau


class VelocityLaw(PortLaw):
    """(I) (37): track ν_d(t) (``traj(t) -> (ν_d, D^Iν_d)``, 6N each)."""

    def __init__(
        self,
        chain: TensorChain,
        traj: Callable[[float], tuple[np.ndarray, np.ndarray]],
        kd_v: float,
        kd_w: float,
        project: bool = True,
        kd_mass: float | None = None,
    ) -> None:
        super().__init__(chain, kd_v, kd_w, kd_mass)
        self.traj = traj
        self.project = project

    def reference(
        self, t: float, state: ChainState, R: np.ndarray, M: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        nu_d, nu_d_dot = self.traj(t)
        if not self.project:
            return np.asarray(nu_d, float), np.asarray(nu_d_dot, float)
        ch = self.chain
        J, Jd = ch.jacobian(R), ch.jacobian_dot(R, state.nu)
        z = np.zeros(J.shape[0])
        return constrained_reference(M, ch.mass_matrix_dot(R, state.nu), J, Jd, z, z, nu_d, nu_d_dot)


class PoseLaw(PortLaw):
    """(II) (42)–(47): track every body's position and attitude.  ``traj(t) -> (p_d (N,3), q_d (N,4),
    ν_d (6N), D^Iν_d (6N))``; Λ = blockdiag(λ_p I, λ_a I)."""

    def __init__(
        self,
        chain: TensorChain,
        traj: Any,
        kd_v: float,
        kd_w: float,
        lam_p: float,
        lam_a: float,
        kd_mass: float | None = None,
    ) -> None:
        super().__init__(chain, kd_v, kd_w, kd_mass)
        if not (lam_p > 0 and lam_a > 0):
            raise ConfigError(f"Λ must be positive definite: got lam_p={lam_p}, lam_a={lam_a}")
        self.traj = traj
        self.lam_p, self.lam_a = float(lam_p), float(lam_a)

    def reference(
        self, t: float, state: ChainState, R: np.ndarray, M: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        ch = self.chain
        n = ch.n
        p_d, q_d, nu_d, nu_d_dot = self.traj(t)
        nu_d, nu_d_dot = np.asarray(nu_d, float), np.asarray(nu_d_dot, float)
        e_pos = state.pos - p_d
        e_att, eta = attitude_error(state.quat, q_d)
        v_d, w_d = nu_d[: 3 * n].reshape(n, 3), nu_d[3 * n :].reshape(n, 3)
        de_pos = state.v - v_d
        de_att = attitude_error_rate(e_att, eta, state.w, w_d)
        e_p = np.concatenate([e_pos.ravel(), e_att.ravel()])
        de_p = np.concatenate([de_pos.ravel(), de_att.ravel()])
        lam = np.concatenate([np.full(3 * n, self.lam_p), np.full(3 * n, self.lam_a)])
        g = nu_d - lam * e_p  # ν_d − Λ e_p (45)
        gdot = nu_d_dot - lam * de_p  # (47)
        J, Jd = ch.jacobian(R), ch.jacobian_dot(R, state.nu)
        z = np.zeros(J.shape[0])
        self.info.e_task = e_p
        return constrained_reference(M, ch.mass_matrix_dot(R, state.nu), J, Jd, z, z, g, gdot)


@dataclass
class Obstacle:
    """A keep-out sphere (center, radius) for the bodies 1…N−1 (their CoMs)."""

    center: np.ndarray
    radius: float

    def transformed(self, Q: np.ndarray, t: np.ndarray) -> Obstacle:
        return Obstacle(Q @ np.asarray(self.center, float) + t, self.radius)


def _spheres(obstacles: Iterable[Obstacle]) -> tuple[np.ndarray, np.ndarray]:
    """(centres (O,3), radii (O,)) of a list of ``Obstacle``."""
    obstacles = list(obstacles)
    if not obstacles:
        return np.zeros((0, 3)), np.zeros(0)
    return (
        np.array([np.asarray(o.center, float) for o in obstacles]).reshape(-1, 3),
        np.array([float(o.radius) for o in obstacles]),
    )


def _clip(d0: float, clip: float | None) -> float:
    dc = 0.1 * d0 if clip is None else float(clip)
    if not 0.0 < dc < d0:
        raise ConfigError(f"obstacle_clip must be in (0, obstacle_range = {d0:g}) m, got {dc:g}")
    return dc


def null_space_wish(
    state: ChainState,
    obstacles: Sequence[Obstacle],
    gain: float,
    d0: float,
    points: np.ndarray,
    clip: float | None = None,
    R: np.ndarray | None = None,
    spheres: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """g = −∇U_o as a 6N twist (linear parts −∂U/∂p_i, angular parts −∂U/∂θ_i; body N zero), its exact rate
    along the motion, U_o and the smallest distance d of a point to a sphere: the compiled step's own
    ``kernels._obstacle_wish`` (its docstring derives the potential: Khatib's FIRAS form outside a core shell
    d_c, a C² quartic continuation inside, so ġ is the exact derivative of g at every distance), on body-fixed
    points r_k of the bodies 1…N−1.  With ``points = [[0, 0, 0]]`` this is the paper's U_o (54).  ``clip`` = d_c
    (m, default d₀/10); ``R`` (the state's rotations) and ``spheres`` (``_spheres(obstacles)``) may be passed to
    skip recomputing."""
    n = state.n
    dc = _clip(d0, clip)
    centers, radii = _spheres(obstacles) if spheres is None else spheres
    R = state.R if R is None else R
    g, gdot = np.zeros(6 * n), np.zeros(6 * n)
    f = np.ascontiguousarray
    U, dmin = _obstacle_wish(
        f(R, dtype=float),
        f(state.pos, dtype=float),
        f(state.nu, dtype=float),
        n,
        f(np.asarray(points, dtype=float).reshape(-1, 3)),
        f(centers, dtype=float),
        f(radii, dtype=float),
        float(gain),
        float(d0),
        dc,
        g,
        gdot,
    )
    return g, gdot, float(U), float(dmin)


class TaskSpaceLaw(PortLaw):
    """(III) (51)–(54): end-effector (body N) pose tracking with null-space obstacle avoidance.
    ``obstacle_points`` (K,3): body-fixed points of bodies 1…N−1 the potential acts on; default the CoMs
    (the paper's U_o).  On long bodies the CoM alone does not keep the body out of a sphere: points along
    the body give U_o a moment part too (``null_space_wish``).
    ``obstacle_clip`` d_c (m, default d₀/10): closer than d_c to a sphere, and inside it, U_o continues as a
    C² quartic in the distance to the centre (``kernels._obstacle_wish``), so the law stays a gradient system —
    V̇ = −sᵀK_d s — even after a disturbance has pushed a point into a sphere.
    ``traj``: an SE(3) trajectory (models/trajectory.py) whose ``world(t)`` gives (p_d (3), q_d (4),
    ν_{e,d} (6) = [v; ω], D^Iν_{e,d} (6)) in world axes (a function of t returning that is wrapped);
    Λ_e = blockdiag(λ_p I, λ_a I).
    ``qp=True`` solves (*) with ProxSuite, optionally with joint-rate limits |R_{j+1}ᵀ(ω_{j+1} − ω_j)| ≤
    ``joint_rate_limit`` (component-wise, rad/s); D^Iν_r then treats the active limits as equalities."""

    def __init__(
        self,
        chain: TensorChain,
        traj: Any,
        kd_v: float,
        kd_w: float,
        lam_p: float,
        lam_a: float,
        obstacles: Sequence[Obstacle] = (),
        obstacle_gain: float = 0.0,
        obstacle_range: float = 0.2,
        qp: bool = False,
        joint_rate_limit: float | None = None,
        kd_mass: float | None = None,
        obstacle_points: ArrayLike | None = None,
        obstacle_clip: float | None = None,
    ) -> None:
        super().__init__(chain, kd_v, kd_w, kd_mass)
        if not (lam_p > 0 and lam_a > 0):
            raise ConfigError(f"Λ_e must be positive definite: got lam_p={lam_p}, lam_a={lam_a}")
        if obstacle_gain < 0 or not obstacle_range > 0:
            raise ConfigError("obstacle_gain must be >= 0 and obstacle_range > 0")
        # None: the caller sets ``traj`` before the first step
        self.traj: SE3Trajectory | Any = (
            traj if isinstance(traj, SE3Trajectory) or traj is None else FromWorldFunction(traj)
        )
        self.lam_p, self.lam_a = float(lam_p), float(lam_a)
        self.obstacles = list(obstacles)
        self.gain, self.d0 = float(obstacle_gain), float(obstacle_range)
        self.clip = 0.1 * self.d0 if obstacle_clip is None else float(obstacle_clip)
        if not 0.0 < self.clip < self.d0:
            raise ConfigError(
                f"obstacle_clip must be in (0, obstacle_range = {self.d0:g}) m, got {self.clip:g}"
            )
        pts = (
            np.zeros((1, 3)) if obstacle_points is None else np.asarray(obstacle_points, float).reshape(-1, 3)
        )
        self.points = pts  # body-fixed points U_o acts on (default: the CoM, (54))
        self.qp = qp
        self.rate_limit = joint_rate_limit
        n = chain.n
        self.Jt = np.zeros((6, 6 * n))  # (51)
        self.Jt[:3, 3 * (n - 1) : 3 * n] = np.eye(3)
        self.Jt[3:, 3 * n + 3 * (n - 1) :] = np.eye(3)
        self.clearance = np.inf
        self.potential = 0.0
        self._spheres = _spheres(self.obstacles)  # the obstacles are fixed at construction
        # compiled step: A = [J; J_t] preallocated with its constant blocks; only the angular blocks of the joint
        # rows, −S(s_{B_jJ_j}) and S(s_{B_{j+1}J_j}), change with the state (the kernel writes them, and Ȧ's)
        nj, nc = n - 1, chain.n_constraints
        A = np.zeros((nc + 6, 6 * n))
        A[:nc] = chain.jacobian(np.broadcast_to(np.eye(3), (n, 3, 3)))
        A[nc:] = self.Jt
        A[: 3 * nj, 3 * n :] = 0.0
        self._A, self._Ad = A, np.zeros_like(A)
        self._lam6 = np.r_[np.full(3, self.lam_p), np.full(3, self.lam_a)]
        # compiled step (``kernels.dac_law3_step``): contiguous constants and one scratch buffer
        f64 = lambda x: np.ascontiguousarray(x, dtype=float)
        self._kconst: tuple[Any, ...] = (
            f64(chain.masses),
            f64(chain.inertias),
            f64(chain.inertias_inv),
            f64(chain.joint_parent),
            f64(chain.joint_child),
            f64(chain.stiffness),
            f64(chain.gravity),
            chain.spring_law == "rotvec",
        )
        self._kgains: tuple[Any, ...] = (
            f64(self._lam6),
            float(kd_mass) if kd_mass is not None else 0.0,
            f64(self.kd),
            f64(self.points),
            f64(self._spheres[0]),
            f64(self._spheres[1]),
            self.gain,
            self.d0,
            self.clip,
        )
        self._kwork = np.zeros(dac_work_size(n, nc + 6))
        self._kscal = np.zeros(4)
        self._kF = np.zeros(6 * n)

    def __call__(self, t: float, state: ChainState) -> np.ndarray:
        if self.qp:
            return super().__call__(t, state)
        return self._compiled_step(t, state)

    def _compiled_step(self, t: float, state: ChainState) -> np.ndarray:
        """Law (III) in closed form as one compiled kernel (``kernels.dac_law3_step``: ℳ block-diagonal, (*)
        through the Schur complement A ℳ⁻¹ Aᵀ, derived in its docstring); equal to the generic path
        (``PortLaw.__call__`` with :meth:`reference`, dense KKT solves) to round-off (tests/test_kernels.py)."""
        p_d, q_d, nu_ed, nu_ed_dot = self.traj.world(t)
        n6 = 6 * state.n
        quat = state.quat
        if not self._kconst[-1]:
            self._kF = self.chain.known_force(quat_to_matrix(quat))
        tau, s, nu_r, e_ep = np.empty(n6), np.empty(n6), np.empty(n6), np.empty(6)
        sc = self._kscal
        f = np.asarray
        if not dac_law3_step(
            quat,
            state.pos,
            state.nu,
            f(p_d, float),
            f(q_d, float),
            f(nu_ed, float),
            f(nu_ed_dot, float),
            *self._kconst,
            self._kF,
            *self._kgains,
            self._A,
            self._Ad,
            self._kwork,
            tau,
            s,
            nu_r,
            e_ep,
            sc,
        ):  # type: ignore[call-arg]  # mypy cannot count *tuple[Any, ...]
            raise StateError(
                "DAC reference: A ℳ⁻¹ Aᵀ is singular — the task rows are dependent on the "
                "constraints (a singular configuration of the chain)"
            )
        V, Vd, self.potential, self.clearance = sc.tolist()
        info_ = self.info
        info_.V, info_.Vdot_cl = V, Vd
        info_.s, info_.nu_r, info_.e_task = s, nu_r, e_ep
        return tau

    def _task(self, t: float, state: ChainState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ν_{e,r}, D^Iν_{e,r} (52) and e_{e,p} of the end effector: the compiled step's own
        ``kernels._ee_task`` (the equations once, in its docstring), called on this state."""
        p_d, q_d, nu_ed, nu_ed_dot = self.traj.world(t)
        n = state.n
        nu_er, nu_er_dot, e_ep = np.empty(6), np.empty(6), np.empty(6)
        _ee_task(
            np.ascontiguousarray(state.quat[-1], dtype=float),
            np.ascontiguousarray(state.pos[-1], dtype=float),
            np.ascontiguousarray(state.nu, dtype=float),
            n,
            np.asarray(p_d, dtype=float),
            np.asarray(q_d, dtype=float),
            np.asarray(nu_ed, dtype=float),
            np.asarray(nu_ed_dot, dtype=float),
            np.ascontiguousarray(self._lam6, dtype=float),
            nu_er,
            nu_er_dot,
            e_ep,
        )
        return nu_er, nu_er_dot, e_ep

    def reference(
        self, t: float, state: ChainState, R: np.ndarray, M: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        ch = self.chain
        nu_er, nu_er_dot, e_ep = self._task(t, state)  # ν_{e,r} (52), its rate, e_{e,p}
        g, gdot, self.potential, self.clearance = null_space_wish(
            state, self.obstacles, self.gain, self.d0, self.points, self.clip
        )  # −∇U_o, its rate
        J, Jd = ch.jacobian(R), ch.jacobian_dot(R, state.nu)
        A = np.vstack([J, self.Jt])
        Ad = np.vstack([Jd, np.zeros_like(self.Jt)])
        w = np.concatenate([np.zeros(J.shape[0]), nu_er])
        wdot = np.concatenate([np.zeros(J.shape[0]), nu_er_dot])
        Mdot = ch.mass_matrix_dot(R, state.nu)
        self.info.e_task = e_ep
        if not self.qp:
            return constrained_reference(M, Mdot, A, Ad, w, wdot, g, gdot)
        nu_r, act = self.reference_qp(M, A, w, g, R)
        self.info.qp_active = int(act.size)
        if act.size:  # active limits: equalities with ẇ = 0 (constant bounds)
            C, Cd = self._rate_rows(R, state.nu)
            bound = np.sign(C[act] @ nu_r) * self.rate_limit
            A = np.vstack([A, C[act]])
            Ad = np.vstack([Ad, Cd[act]])
            w = np.concatenate([w, bound])
            wdot = np.concatenate([wdot, np.zeros(act.size)])
        nu_r_cf, nu_r_dot = constrained_reference(M, Mdot, A, Ad, w, wdot, g, gdot)
        return nu_r, nu_r_dot

    def _rate_rows(self, R: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """C ν = R_{j+1}ᵀ(ω_{j+1} − ω_j) (3(N−1) rows) and Ċ = −R_{j+1}ᵀ[ω_{j+1}]× (…)."""
        n = self.chain.n
        w = nu[3 * n :].reshape(n, 3)
        C = np.zeros((3 * (n - 1), 6 * n))
        Cd = np.zeros_like(C)
        for j in range(n - 1):
            Rt = R[j + 1].T
            D = -Rt @ skew(w[j + 1])
            C[3 * j : 3 * j + 3, 3 * n + 3 * j : 3 * n + 3 * j + 3] = -Rt
            C[3 * j : 3 * j + 3, 3 * n + 3 * j + 3 : 3 * n + 3 * j + 6] = Rt
            Cd[3 * j : 3 * j + 3, 3 * n + 3 * j : 3 * n + 3 * j + 3] = -D
            Cd[3 * j : 3 * j + 3, 3 * n + 3 * j + 3 : 3 * n + 3 * j + 6] = D
        return C, Cd

    def reference_qp(
        self, M: np.ndarray, A: np.ndarray, w: np.ndarray, g: np.ndarray, R: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(*) as a ProxSuite QP: min ½νᵀℳν − (ℳg)ᵀν s.t. Aν = w [, −ω̄ ≤ Cν ≤ ω̄].  Returns (ν_r, active rows)."""
        m = M.shape[0]
        C: np.ndarray | None = None
        lo = lim = None
        if self.rate_limit is not None:
            C, _ = self._rate_rows(R, np.zeros(m))
            lim = np.full(C.shape[0], float(self.rate_limit))
            lo = -lim
        0 if C is None else C.shape[0]
        res = BoundedQP(eps_abs=1e-12).solve("ref", M, -M @ g, A, w, C, lo, lim, warm=False)
        if not res.solved:
            raise SolverError(
                f"law III reference QP: status {res.raw_status} (|w| = {np.linalg.norm(w):.3g}, "
                f"joint_rate_limit = {self.rate_limit})"
            )
        x = res.x
        if C is None or lim is None:
            return x, np.zeros(0, dtype=int)
        act = np.flatnonzero(np.abs(C @ x) >= lim * (1 - 1e-7))
        return x, act


# ------------------------------------------------------------------------------------------ RHS maps
@dataclass
class Allocation:
    tau: np.ndarray  # the port wrench actually produced (6N)
    u: np.ndarray | None  # motor moments, world axes (N−1,3), or None for thrusters
    residual: np.ndarray  # τ_c − τ (6N)
    residual_g: float  # √(rᵀ G r): kinetic norm of the acceleration the motors cannot produce
    residual_accel: np.ndarray  # G r (6N)
    saturated: bool = False


class ThrusterMap:
    """Identity RHS: the port wrenches are applied to the bodies (thrusters on every body)."""

    def __call__(self, tau_c: ArrayLike, state: ChainState) -> Allocation:
        tau_c = np.asarray(tau_c, float)
        z = np.zeros_like(tau_c)
        return Allocation(tau_c.copy(), None, z, 0.0, z)


class JointActuationMap:
    """Motors in the ball joints (module docstring).  ``limit``: |ū| component bound (N·m) in the child's
    axes, enforced by a ProxSuite QP when ``qp=True`` (else the closed form, unlimited)."""

    def __init__(self, chain: TensorChain, qp: bool = False, limit: float | None = None) -> None:
        if qp and limit is not None and not limit > 0:
            raise ConfigError(f"motor limit must be > 0, got {limit}")
        self.chain = chain
        self.qp = qp
        self.limit = limit
        n = chain.n
        B = np.zeros((6 * n, 3 * (n - 1)))
        for j in range(n - 1):
            B[3 * n + 3 * j : 3 * n + 3 * j + 3, 3 * j : 3 * j + 3] = -np.eye(3)
            B[3 * n + 3 * j + 3 : 3 * n + 3 * j + 6, 3 * j : 3 * j + 3] = np.eye(3)
        self.B = B

    def response(self, R: np.ndarray) -> np.ndarray:
        """G = ℳ⁻¹ − ℳ⁻¹Jᵀ(Jℳ⁻¹Jᵀ)⁻¹Jℳ⁻¹: ν̇ = G τ + (terms without τ), the first block of (35)."""
        ch = self.chain
        Mi = ch.mass_matrix_inv(R)
        J = ch.jacobian(R)
        MiJt = Mi @ J.T
        G = Mi - MiJt @ np.linalg.solve(J @ MiJt, MiJt.T)
        return 0.5 * (G + G.T)

    def __call__(self, tau_c: np.ndarray, state: ChainState) -> Allocation:
        ch = self.chain
        n = ch.n
        R = state.R
        tau_c = np.asarray(tau_c, float)
        G = self.response(R)
        Rb = np.zeros((3 * (n - 1), 3 * (n - 1)))
        for j in range(n - 1):
            Rb[3 * j : 3 * j + 3, 3 * j : 3 * j + 3] = R[j + 1]
        Bb = self.B @ Rb  # port of the motor moments ū (child axes)
        H = Bb.T @ G @ Bb
        f = Bb.T @ G @ tau_c
        sat = False
        if not self.qp:
            ub = np.linalg.lstsq(H, f, rcond=1e-12)[0]
        else:
            m = H.shape[0]
            if self.limit is not None:
                lim = np.full(m, float(self.limit))
                res = BoundedQP(eps_abs=1e-10).solve(
                    "alloc", H, -f, None, None, np.eye(m), -lim, lim, warm=False, feasible_start=True
                )
            else:
                res = BoundedQP(eps_abs=1e-10).solve("alloc", H, -f, warm=False)
            if not res.solved:
                raise SolverError(
                    f"joint allocation QP: status {res.raw_status} "
                    f"(|τ_c| = {np.linalg.norm(tau_c):.3g}, limit = {self.limit})"
                )
            ub = res.x
            sat = self.limit is not None and bool(np.any(np.abs(ub) >= self.limit * (1 - 1e-7)))
        tau = Bb @ ub
        r = tau_c - tau
        Gr = G @ r
        # √(rᵀGr) evaluated as the ℳ-norm of the acceleration error G r (GℳG = G), without the cancellation
        # of rᵀ(Gr) that would floor it at √ε·|τ|
        rg = float(np.sqrt(max(Gr @ ch.mass_matrix(R) @ Gr, 0.0)))
        return Allocation(tau, (Rb @ ub).reshape(n - 1, 3), r, rg, Gr, sat)
