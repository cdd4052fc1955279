"""Point contacts with the ground: a foot that stays put while it is in stance, its force in a friction pyramid.

A ``PointContact`` names a frame of the robot (a foot's centre or its sole point), the ground's unit normal n (world
axes) and a friction coefficient μ.  While it is **active** (``set_active(True)``), the frame's origin p(q) keeps
its position: its classical acceleration vanishes,

    a_c = J_c v̇ + J̇_c v = 0        (3 rows; J_c = the LOCAL_WORLD_ALIGNED Jacobian's linear rows of the frame,
                                    J̇_c v its classical acceleration at v̇ = 0, Pinocchio's
                                    ``getFrameClassicalAcceleration``: the same as the loops' and tasks' rows)

optionally with a velocity and position feedback b = −J̇_c v − K_d J_c v − K_p (p − p₀), p₀ the position at which the
contact was made active (defaults K_p = K_d = 0: exactly a_c = 0).  The ground pushes on the robot with a force f
(world axes, N) at p, which enters the dynamics as

    M v̇ + h + D v = Sᵀ τ + J_cᵀ f (+ the loops' reactions),

so f is the multiplier of the contact's rows with that sign.  The force must be **unilateral and inside the
friction cone** ‖f − (n·f) n‖ ≤ μ n·f.  This module uses the **inner pyramid with k facets** (``facets``, k ≥ 3):
with an orthonormal tangent basis (t₁, t₂) of the ground and the facets' outward normals in the tangent plane
d_i = cos θ_i t₁ + sin θ_i t₂, θ_i = 2π i / k, the regular k-gon inscribed in the circle of radius μ f_n has its
edges at distance μ f_n cos(π/k) from the centre, so the pyramid is

    f_n = n·f ≥ 0,      d_iᵀ f − μ cos(π/k) f_n ≤ 0,   i = 0 … k−1

(k = 4: |f·t₁| ≤ μ/√2 f_n and |f·t₂| ≤ μ/√2 f_n, TSID's linearisation).  Every force inside the pyramid is inside
the exact cone.  ``cone_rows()`` gives it as C f ≤ 0 ((k + 1) × 3; row 0 is −nᵀ) and ``cone_margin(f)`` =
min_i −(C f)_i (N): ≥ 0 inside, the distance in newtons (for unit-norm rows: the normal row's and, scaled by
1/√(1 + μ² cos²(π/k)), the facets') to the nearest face.

``contact_dynamics`` is the rigid forward dynamics of the robot with its loops and the active contacts: Gauss'
principle min ½ (v̇ − a₀)ᵀ M (v̇ − a₀) subject to every row J v̇ = −γ, with a₀ = M⁻¹ (τ − h − D v), solved with a
rank-revealing pseudo-inverse (the four level feet of ``mjcf/quadruped_five_bar.xml`` make the stacked rows nearly
rank deficient, σ_min/σ_max ~ 1e-7): with M = L Lᵀ, u = Lᵀ v̇ and B = J L⁻ᵀ,

    u = Lᵀ a₀ + B⁺ (−γ − B Lᵀ a₀),   v̇ = L⁻ᵀ u,   λ = the least-squares solution of Jᵀ λ = M v̇ + h + D v − τ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError
from cmstack.models.loops import pinocchio_constraint_models
from cmstack.models.robot import Kinematics, Robot

__all__ = ["PointContact", "contact_dynamics"]


def _finite_gain(x: float, what: str, name: str) -> float:
    try:
        val = float(x)
    except (TypeError, ValueError):
        raise ConfigError(f"contact '{name}': {what} must be a number >= 0, got {x!r}") from None
    if not (math.isfinite(val) and val >= 0.0):
        raise ConfigError(f"contact '{name}': {what} must be a finite number >= 0, got {x!r}")
    return val


#: a count of changes to any contact's state that a compiled step copies (``active``, ``anchor``, ``kp``, ``kd``):
#: ``controllers/contact_uk.py`` copies its contacts' gains and anchors again only when it moved
version = 0


class PointContact:
    """A point of the robot held fixed on the ground while active, its force in an inner friction pyramid.

    Args:
        robot: the model (``Robot``).
        frame: the contact point's frame (a foot's site or body frame); a name not in the model is a
            ``FrameNotFoundError`` naming it.
        normal: the ground's normal in world axes (any non-zero length; normalised), pointing into the robot.
        mu: the friction coefficient (> 0, finite).
        facets: the number k ≥ 3 of the inner pyramid's facets (module docstring).
        kp (1/s²), kd (1/s): optional feedback on the contact's drift (default 0: a_c = 0 exactly).
        name: shown in errors and logs (default the frame's name).
    """

    dim = 3

    def __setattr__(self, name: str, value: object) -> None:
        """Announce a change of ``active``, ``anchor``, ``kp`` or ``kd`` (``version``); an anchor is kept as a
        read-only copy, so that a change in place, which no assignment would announce, is refused."""
        if name == "anchor" and value is not None:
            value = np.array(value, dtype=float)
            value.flags.writeable = False
        object.__setattr__(self, name, value)
        if name in ("active", "anchor", "kp", "kd"):
            global version
            version += 1

    def __init__(
        self,
        robot: Robot,
        frame: str,
        normal: ArrayLike = (0.0, 0.0, 1.0),
        mu: float = 1.0,
        facets: int = 4,
        *,
        kp: float = 0.0,
        kd: float = 0.0,
        name: str | None = None,
    ):
        self.name = name or str(frame)
        self.robot = robot
        self.frame = frame
        self.fid = robot.frame_id(frame)  # FrameNotFoundError naming the frame and close matches
        try:
            mu_f = float(mu)
        except (TypeError, ValueError):
            raise ConfigError(f"contact '{self.name}': mu must be a number > 0, got {mu!r}") from None
        if not (math.isfinite(mu_f) and mu_f > 0.0):
            raise ConfigError(f"contact '{self.name}': mu must be a finite number > 0, got {mu!r}")
        n = np.asarray(normal, dtype=float).ravel()
        if n.shape != (3,) or not np.all(np.isfinite(n)):
            raise ConfigError(f"contact '{self.name}': normal must be 3 finite numbers, got {normal!r}")
        nn = float(np.linalg.norm(n))
        if nn <= 1e-12:
            raise ConfigError(f"contact '{self.name}': normal {n.tolist()} has zero length")
        if isinstance(facets, bool) or not isinstance(facets, (int, np.integer)) or facets < 3:
            raise ConfigError(f"contact '{self.name}': facets must be an integer >= 3, got {facets!r}")
        self.mu = mu_f
        self.normal = n / nn
        self.facets = int(facets)
        self.kp = _finite_gain(kp, "kp", self.name)
        self.kd = _finite_gain(kd, "kd", self.name)
        # a tangent basis: t1 along the world axis least aligned with n, made orthogonal to n
        e = np.zeros(3)
        e[int(np.argmin(np.abs(self.normal)))] = 1.0
        t1 = e - self.normal * (self.normal @ e)
        t1 /= np.linalg.norm(t1)
        t2 = np.cross(self.normal, t1)
        self.tangents = np.vstack((t1, t2))
        th = 2.0 * math.pi * np.arange(self.facets) / self.facets
        D = np.cos(th)[:, None] * t1 + np.sin(th)[:, None] * t2  # the facets' normals in the tangent plane
        C = np.empty((self.facets + 1, 3))
        C[0] = -self.normal
        C[1:] = D - self.mu * math.cos(math.pi / self.facets) * self.normal
        C.flags.writeable = False
        self._C = C
        self.active = False
        self.anchor: np.ndarray | None = None  # p₀, world (m): set when made active

    # ------------------------------------------------------------------ state
    def set_active(self, active: bool, position: ArrayLike | None = None) -> None:
        """Make the contact active (the point is held at ``position``, world m; None: where it is at the next
        ``rows`` call) or inactive (no rows, no force)."""
        self.active = bool(active)
        if not self.active:
            self.anchor = None
        elif position is not None:
            p = np.asarray(position, dtype=float).ravel()
            if p.shape != (3,) or not np.all(np.isfinite(p)):
                raise ConfigError(
                    f"contact '{self.name}': position must be 3 finite numbers, got {position!r}"
                )
            self.anchor = p.copy()
        else:
            self.anchor = None

    # ------------------------------------------------------------------ rows
    def position(self, kin: Kinematics) -> np.ndarray:
        """p(q), the contact point in world axes (m)."""
        return kin.frame(self.fid).p

    def rows(self, kin: Kinematics) -> tuple[np.ndarray, np.ndarray]:
        """(J_c, b) with J_c v̇ = b: J_c (3×nv) the point's LOCAL_WORLD_ALIGNED linear Jacobian and
        b = −J̇_c v − K_d J_c v − K_p (p − p₀) (module docstring)."""
        F = kin.frame(self.fid)
        if self.anchor is None:
            self.anchor = F.p.copy()
        b = -F.acc[:3]
        if self.kd:
            b = b - self.kd * F.twist[:3]
        if self.kp:
            b = b - self.kp * (F.p - self.anchor)
        return F.J[:3], b

    def slip(self, kin: Kinematics) -> np.ndarray:
        """p − p₀ (m, world): how far the point moved since it was made active (zero while inactive)."""
        if self.anchor is None:
            return np.zeros(3)
        return kin.frame(self.fid).p - self.anchor

    # ------------------------------------------------------------------ friction
    def cone_rows(self) -> np.ndarray:
        """C ((facets + 1) × 3, read-only) with C f ≤ 0 ⇔ f in the inner pyramid; row 0 is −nᵀ (f_n ≥ 0)."""
        return self._C

    def cone_margin(self, f: ArrayLike) -> float:
        """min_i −(C f)_i (N): ≥ 0 when f (world axes, N) is inside the pyramid, < 0 outside."""
        return float(-(self._C @ np.asarray(f, dtype=float)).max())

    def normal_force(self, f: ArrayLike) -> float:
        """n·f (N)."""
        return float(self.normal @ np.asarray(f, dtype=float))

    def pinocchio_model(self, kin_or_q: Kinematics | np.ndarray | None = None) -> pin.RigidConstraintModel:
        """Pinocchio's CONTACT_3D model of the active contact (the frame's joint at the frame's placement against
        the universe at p₀; LOCAL_WORLD_ALIGNED): the reference for ``pin.constraintDynamics``."""
        model = self.robot.model
        if self.anchor is None:
            if kin_or_q is None:
                raise ConfigError(
                    f"contact '{self.name}': no anchor yet; give the state or set_active(True, p)"
                )
            if isinstance(kin_or_q, Kinematics):
                self.anchor = kin_or_q.frame(self.fid).p.copy()
            else:
                d = model.createData()
                pin.framesForwardKinematics(model, d, np.asarray(kin_or_q, dtype=float))
                self.anchor = d.oMf[self.fid].translation.copy()
        f = model.frames[self.fid]
        return pin.RigidConstraintModel(
            pin.ContactType.CONTACT_3D,
            model,
            f.parentJoint,
            f.placement,
            0,
            pin.SE3(np.eye(3), self.anchor),
            pin.ReferenceFrame.LOCAL_WORLD_ALIGNED,
        )

    def __repr__(self) -> str:
        return f"PointContact({self.name!r}, mu={self.mu:g}, facets={self.facets}, active={self.active})"


def gauss_solve(
    M: np.ndarray, r: np.ndarray, J: np.ndarray, bJ: np.ndarray, rcond: float = 1e-10
) -> np.ndarray:
    """argmin ½ (x − M⁻¹ r)ᵀ M (x − M⁻¹ r) over the least-squares solutions of J x = bJ, rank-revealing (module
    docstring: u = Lᵀ x, B = J L⁻ᵀ, B⁺ by an SVD truncated at ``rcond`` σ_max)."""
    L = np.linalg.cholesky(M)
    a0 = np.linalg.solve(M, r)
    u0 = L.T @ a0
    if J.shape[0] == 0:
        return a0
    B = np.linalg.solve(L, J.T).T  # J L⁻ᵀ
    U, s, Vt = np.linalg.svd(B, full_matrices=False)
    keep = s > rcond * (s[0] if s.size else 0.0)
    res = bJ - B @ u0
    u = u0 + Vt[keep].T @ ((U[:, keep].T @ res) / s[keep])
    return np.linalg.solve(L.T, u)


def contact_dynamics(
    robot: Robot,
    q: np.ndarray,
    v: np.ndarray,
    tau: np.ndarray,
    contacts: Sequence[PointContact] = (),
    loops: Sequence | None = None,
    damping: bool = True,
    rcond: float = 1e-10,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rigid forward dynamics with the loops (``robot.loops`` by default) and the active ``contacts`` held:
    (v̇, [f of each active contact (3,), world N]) by Gauss' principle (module docstring).  τ is the full
    generalized force (nv,); D v is included when ``damping``."""
    kin = robot.update(q, v)
    loops = list(robot.loops) if loops is None else list(loops)
    As, bs = [], []
    for c in loops:  # the loops' rows without their Baumgarte terms: a = 0 on the closed manifold
        W, drift, _, _ = c.error_dynamics(kin, 0.0)
        As.append(W[c.rows])
        bs.append(-drift[c.rows])
    act = [c for c in contacts if c.active]
    for c in act:
        Jc = kin.frame(c.fid).J[:3]
        As.append(Jc)
        bs.append(-kin.frame(c.fid).acc[:3])
    J = np.vstack(As) if As else np.zeros((0, robot.nv))
    bJ = np.concatenate(bs) if bs else np.zeros(0)
    hD = kin.h + (robot.damping * kin.v if damping else 0.0)
    vdot = gauss_solve(kin.M, np.asarray(tau, dtype=float) - hD, J, bJ, rcond)
    lam = np.linalg.lstsq(J.T, kin.M @ vdot + hD - tau, rcond=None)[0] if J.shape[0] else np.zeros(0)
    nl = J.shape[0] - 3 * len(act)
    forces = [lam[nl + 3 * i : nl + 3 * i + 3] for i in range(len(act))]
    return vdot, forces


def pinocchio_stance_models(robot: Robot, contacts: Sequence[PointContact]) -> tuple:
    """Pinocchio's rigid constraint models of the robot's loops (``pinocchio_constraint_models``) followed by
    each contact's CONTACT_3D model (``PointContact.pinocchio_model``: the contacts must be anchored), the
    reference of ``pin.constraintDynamics`` for a stance.  Returns (models, datas); ``initConstraintDynamics``
    is not yet called."""
    cms, cds = pinocchio_constraint_models(robot)
    for c in contacts:
        cm = c.pinocchio_model()
        cms.append(cm)
        cds.append(cm.createData())
    return cms, cds
