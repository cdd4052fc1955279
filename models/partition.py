"""Inertia-partitioning modular model of [Dastranj] (Dastranj & Mattila, arXiv:2510.23226, §II and §IV).

Minimal coordinates q = (φ, θ, δ) of the series-parallel manipulator; auxiliary (open-tree) coordinates
q̂ = Ξ(q) = (φ, θ, ζ(δ)); intermediate Jacobian E = ∂Ξ/∂q (26) with ζ(δ), ∂ζ/∂δ from the elbow triangle (28):

    ζ(δ) = −arccos(c),  c = (l₀ + δ)²/(2 L₀²) − 1,     ∂ζ/∂δ = (l₀ + δ) / (L₀² √(1 − c²)),
    ∂²ζ/∂δ² = 1/(L₀² s) + (l₀ + δ)² c / (L₀⁴ s³),     s = √(1 − c²)   (used for Ė q̇).

Per body i (joint frame Bᵢ of the open tree, Pinocchio's LOCAL frame):
    Ĵᵢ(q̂)    body Jacobian in q̂ (Pinocchio, LOCAL), Jᵢ = Ĵᵢ E                        (7), §II-A
    Mᵢ        spatial inertia about Bᵢ (paper's formula, written in Pinocchio's [v; ω] order):
              Mᵢ = [[m I₃, −m[c]], [m[c], I_C + m[c][c]ᵀ]],  c = p_{BᵢCᵢ}                       §II-B
    Γᵢ = Jᵢᵀ Mᵢ Jᵢ,   Γ = Σ Γᵢ                                                             (9), (10)
    hᵢ = Jᵢᵀ (Mᵢ J̇ᵢ q̇ + Vᵢ ×* Mᵢ Vᵢ),  Vᵢ = Jᵢ q̇,  J̇ᵢ q̇ = dĴᵢ/dt Eq̇ + Ĵᵢ Ė q̇,   h = Σ hᵢ
    Q_e,i = Jᵢᵀ Mᵢ [R_{SBᵢ}ᵀ g; 0]   (the weight m g applied at Cᵢ, as a wrench about Bᵢ)   (11)

Why hᵢ equals the paper's h = Γ̇ q̇ − ½ ∇_q(q̇ᵀ Γ q̇) (12)–(13): the kinetic energy of body i is
Tᵢ = ½ Vᵢᵀ Mᵢ Vᵢ with the body twist Vᵢ = Jᵢ(q) q̇; Lagrange's d/dt ∂Tᵢ/∂q̇ − ∂Tᵢ/∂q for a rigid body in
body coordinates is the Newton–Euler force Mᵢ V̇ᵢ + Vᵢ ×* Mᵢ Vᵢ projected by Jᵢᵀ (Featherstone 2008,
§2.15; V×* the dual cross product, [v; ω] ×* [f; n] = [ω×f; ω×n + v×f]), and V̇ᵢ = Jᵢ q̈ + J̇ᵢ q̇.  The
Jᵢᵀ Mᵢ Jᵢ q̈ part is Γᵢ q̈, the rest is hᵢ.  tests/test_partition.py checks h against finite differences
of (12) and against Eᵀ(Ĉ(q̂, E q̇) + M̂ Ė q̇) from Pinocchio's RNEA on the open tree.

Twists are in Pinocchio's [v; ω] order (the paper writes [ω; v]; converted here, once).

Reconfiguration (the paper's claim, §II-B): ``set_body(name, mass=, com=, inertia=, length=)`` replaces
one body's Mᵢ (and, for ``length``, the placement of what hangs at its distal end) and leaves every other
body's term untouched; Γ, h, Q_e are reassembled from the per-body terms at the next ``compute``.

``with_actuator=True`` adds the cylinder and the piston of the plant (mjcf/series_parallel.xml) as two
more bodies of the open tree: q̂ = (φ, θ, ζ, α, δ) with the cylinder angle α = ζ/2 (isosceles
triangle), so the same machinery models the full closed chain — used to check the formulation against
the MuJoCo plant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pinocchio as pin
from numpy.typing import ArrayLike

from cmstack.models.errors import ConfigError, FrameNotFoundError, StateError
from cmstack.models.lie import cross, skew
from cmstack.models.robot import Robot

LOCAL = pin.ReferenceFrame.LOCAL

# Table II (paper) and the chosen geometry of urdf/series_parallel.urdf
L0 = 0.35  # m, elbow-to-pin distance on both links
SMALL_L0 = 0.425  # m, pin-to-pin length at δ = 0 (the paper's l₀)
DELTA_RANGE = (0.0, 0.2)  # m, stroke (Fig. 2)
BODIES = ("base", "link1", "link2")
# Cylinder and piston of the plant (not in the paper: chosen, identical in mjcf/series_parallel.xml)
CYLINDER = dict(mass=1.5, com=(0.2, 0.0, 0.0), inertia=np.diag([0.002, 0.0253, 0.0253]))
PISTON = dict(mass=1.0, com=(-0.2, 0.0, 0.0), inertia=np.diag([0.0005, 0.0133, 0.0133]))


def spatial_inertia(mass: float, com: ArrayLike, inertia_c: ArrayLike) -> np.ndarray:
    """Mᵢ about the body frame, [v; ω] order: [[m I, −m[c]], [m[c], I_C + m[c][c]ᵀ]] (paper §II-B,
    reordered from its [ω; v])."""
    c = np.asarray(com, dtype=float)
    I = np.asarray(inertia_c, dtype=float)
    if not (np.isfinite(mass) and mass > 0):
        raise ConfigError(f"body mass must be > 0, got {mass}")
    if c.shape != (3,) or I.shape != (3, 3):
        raise ConfigError(f"com must have 3 entries and inertia be 3×3, got {c.shape} and {I.shape}")
    if not np.allclose(I, I.T, atol=1e-12) or np.min(np.linalg.eigvalsh(I)) <= 0:
        raise ConfigError(f"inertia about the CoM must be symmetric positive definite, got {I.tolist()}")
    C = skew(c)
    M = np.zeros((6, 6))
    M[:3, :3] = mass * np.eye(3)
    M[:3, 3:] = -mass * C
    M[3:, :3] = mass * C
    M[3:, 3:] = I + mass * C @ C.T
    return M


# ------------------------------------------------------------------------------------ the map Ξ(q)
class TriangleMap:
    """Ξ: q = (φ, θ, δ) ↦ q̂ = (φ, θ, ζ(δ)) [, α = ζ/2, δ] and its Jacobian E and Ė q̇ (26), (28)."""

    def __init__(
        self,
        L0: float = L0,
        l0: float = SMALL_L0,
        delta_range: tuple[float, float] = DELTA_RANGE,
        with_actuator: bool = False,
        slack: float = 0.0,
    ) -> None:
        lo, hi = (float(x) for x in delta_range)
        if not (L0 > 0 and l0 > 0 and hi > lo):
            raise ConfigError(
                f"triangle: need L0 > 0, l0 > 0 and a stroke lo < hi; got L0={L0}, l0={l0}, "
                f"delta_range={delta_range}"
            )
        if l0 + lo <= 0 or l0 + hi >= 2 * L0:
            raise ConfigError(
                f"triangle cannot close over the stroke: l0 + δ must lie in (0, 2·L0) = (0, {2 * L0:g}) m "
                f"but l0 + δ spans [{l0 + lo:g}, {l0 + hi:g}] m (L0={L0}, l0={l0}, δ ∈ [{lo}, {hi}])"
            )
        if not (0.0 <= slack < 0.5 * (hi - lo)) or l0 + lo - slack <= 0 or l0 + hi + slack >= 2 * L0:
            raise ConfigError(f"stroke slack must be >= 0 and keep the triangle closable, got {slack}")
        self.L0, self.l0, self.lo, self.hi = float(L0), float(l0), lo, hi
        # a measured stroke may sit a little past an end stop (a soft plant limit): accepted within slack
        self.slack = float(slack)
        self.with_actuator = with_actuator
        self.nq = 3
        self.nqhat = 5 if with_actuator else 3

    def check_delta(self, delta: float) -> None:
        if not (self.lo - self.slack <= delta <= self.hi + self.slack):
            raise StateError(
                f"piston stroke δ = {delta:.6g} m is outside [{self.lo:g}, {self.hi:g}] m"
                + (f" (± slack {self.slack:g} m)" if self.slack else "")
                + f" (l0 + δ must close the elbow triangle with L0 = {self.L0:g} m)"
            )

    def _c(self, delta: float) -> tuple[float, float]:
        u = delta + self.l0
        c = u * u / (2 * self.L0**2) - 1.0
        return u, c

    def zeta(self, delta: float) -> float:
        """ζ(δ) = −arccos((δ + l₀)²/(2L₀²) − 1)  (28)."""
        self.check_delta(delta)
        return -float(np.arccos(self._c(delta)[1]))

    def dzeta(self, delta: float) -> float:
        """∂ζ/∂δ = (δ + l₀) / (L₀² √(1 − c²))  (28)."""
        self.check_delta(delta)
        u, c = self._c(delta)
        return u / (self.L0**2 * np.sqrt(1.0 - c * c))

    def d2zeta(self, delta: float) -> float:
        """∂²ζ/∂δ² = 1/(L₀² s) + u² c / (L₀⁴ s³),  u = δ + l₀, s = √(1 − c²)."""
        self.check_delta(delta)
        u, c = self._c(delta)
        s = np.sqrt(1.0 - c * c)
        return 1.0 / (self.L0**2 * s) + u * u * c / (self.L0**4 * s**3)

    def xi(self, q: np.ndarray) -> np.ndarray:
        z = self.zeta(q[2])
        if self.with_actuator:
            return np.array([q[0], q[1], z, 0.5 * z, q[2]])
        return np.array([q[0], q[1], z])

    def E(self, q: np.ndarray) -> np.ndarray:
        """E = ∂q̂/∂q (26) (5×3 with the cylinder angle α = ζ/2 and the stroke δ appended)."""
        E = np.zeros((self.nqhat, 3))
        E[0, 0] = E[1, 1] = 1.0
        dz = self.dzeta(q[2])
        E[2, 2] = dz
        if self.with_actuator:
            E[3, 2] = 0.5 * dz
            E[4, 2] = 1.0
        return E

    def Edot_qd(self, q: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Ė q̇: only the ζ (and α) rows vary, d/dt(∂ζ/∂δ) δ̇ = ∂²ζ/∂δ² δ̇²."""
        out = np.zeros(self.nqhat)
        a = self.d2zeta(q[2]) * qd[2] ** 2
        out[2] = a
        if self.with_actuator:
            out[3] = 0.5 * a
        return out

    def plant_passive_qpos(self, delta: float) -> dict:
        """Closed-loop values of the plant's passive joints for a stroke δ."""
        z = self.zeta(delta)
        return {"zeta": z, "cylinder_hinge": 0.5 * z}


# ------------------------------------------------------------------------------------ the model
@dataclass
class PartitionTerms:
    """Everything the controller needs at one (q, q̇)."""

    q: np.ndarray
    qd: np.ndarray
    qhat: np.ndarray
    E: np.ndarray
    Gamma: np.ndarray  # Γ = Σ Γᵢ
    h: np.ndarray  # h(q, q̇) (13)
    Qe: np.ndarray  # Q_e: weights (11)
    Gamma_i: dict  # body name -> Γᵢ
    h_i: dict
    Qe_i: dict
    J: dict  # body name -> Jᵢ = Ĵᵢ E (6×3, [v; ω], LOCAL)


class PartitionModel:
    """The modular model of the series-parallel manipulator (see the module docstring for the maths).

    model = PartitionModel()                   # urdf/series_parallel.urdf, bodies base/link1/link2
    tm = model.compute(q, qd)                  # Γ, h, Q_e and the per-body terms
    model.set_body("link2", mass=80, length=2.5)   # reconfigure body 3 only
    """

    def __init__(
        self,
        urdf: str | Path = "urdf/series_parallel.urdf",
        *,
        L0: float = L0,
        l0: float = SMALL_L0,
        delta_range: tuple[float, float] = DELTA_RANGE,
        with_actuator: bool = False,
        gravity: float = 9.81,
        cylinder: dict | None = None,
        piston: dict | None = None,
        stroke_slack: float = 0.0,
    ) -> None:
        robot = Robot(urdf)  # clear errors on a bad file
        self.path = robot.path
        self.model = robot.model.copy()
        expected = ["phi", "theta", "zeta"]
        if robot.joint_names != expected:
            raise FrameNotFoundError(
                f"{self.path.name}: expected the joints {expected} (open tree in q̂ = (φ, θ, ζ)), "
                f"found {robot.joint_names}"
            )
        self.map = TriangleMap(L0, l0, delta_range, with_actuator=with_actuator, slack=stroke_slack)
        self.g = np.array([0.0, 0.0, -float(gravity)])
        self.model.gravity = pin.Motion(self.g, np.zeros(3))  # the RNEA path uses the same field
        self.bodies = list(BODIES)
        self.joint_of = {
            "base": self.model.getJointId("phi"),
            "link1": self.model.getJointId("theta"),
            "link2": self.model.getJointId("zeta"),
        }
        if with_actuator:
            self._add_actuator(L0, l0, cylinder or CYLINDER, piston or PISTON)
        # per-body spatial inertias (the body's own term); the Pinocchio model carries the same values so
        # that CRBA/RNEA stay an independent check of the assembled Γ and h
        self.M = {}
        for b in self.bodies:
            Y = self.model.inertias[self.joint_of[b]]
            self.M[b] = spatial_inertia(Y.mass, Y.lever, Y.inertia)
        self.data = self.model.createData()
        n = self.map.nqhat
        self._qh, self._vh, self._ah, self._out = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(3)
        self._tip = self.model.getFrameId("F3") if self.model.existFrame("F3") else None

    def _add_actuator(self, L0_: float, l0_: float, cyl: dict[str, Any], pis: dict[str, Any]) -> None:
        m = self.model
        j1 = self.joint_of["link1"]
        jc = m.addJoint(
            j1, pin.JointModelRZ(), pin.SE3(np.eye(3), np.array([2.0 - L0_, 0.0, 0.0])), "cylinder_hinge"
        )
        m.appendBodyToJoint(
            jc,
            pin.Inertia(cyl["mass"], np.asarray(cyl["com"], float), np.asarray(cyl["inertia"], float)),
            pin.SE3.Identity(),
        )
        jp = m.addJoint(jc, pin.JointModelPX(), pin.SE3(np.eye(3), np.array([l0_, 0.0, 0.0])), "delta")
        m.appendBodyToJoint(
            jp,
            pin.Inertia(pis["mass"], np.asarray(pis["com"], float), np.asarray(pis["inertia"], float)),
            pin.SE3.Identity(),
        )
        self.bodies += ["cylinder", "piston"]
        self.joint_of["cylinder"] = jc
        self.joint_of["piston"] = jp

    # ------------------------------------------------------------------ reconfiguration
    def set_body(
        self,
        name: str,
        *,
        mass: float | None = None,
        com: ArrayLike | None = None,
        inertia: ArrayLike | None = None,
        length: float | None = None,
    ) -> None:
        """Replace one body's mass / CoM / CoM inertia, and/or its length (the x offset, in its own frame,
        of what hangs at its distal end: the next joint or the tip frame F3).  Only that body's Mᵢ and
        that one placement change; Γ, h and Q_e are reassembled from the per-body terms."""
        if name not in self.M:
            raise FrameNotFoundError(f"body '{name}' is not in the partition model; bodies: {self.bodies}")
        j = self.joint_of[name]
        Y = self.model.inertias[j]
        mass = Y.mass if mass is None else float(mass)
        com = Y.lever.copy() if com is None else np.asarray(com, dtype=float)
        inertia = Y.inertia.copy() if inertia is None else np.asarray(inertia, dtype=float)
        M = spatial_inertia(mass, com, inertia)  # validates
        self.M[name] = M
        self.model.inertias[j] = pin.Inertia(mass, com, inertia)
        if length is not None:
            if not (np.isfinite(length) and length > 0):
                raise ConfigError(f"length of body '{name}' must be > 0 m, got {length}")
            children = [
                k
                for k in range(1, self.model.njoints)
                if self.model.parents[k] == j and self.model.names[k] not in ("cylinder_hinge",)
            ]
            for k in children:
                P = self.model.jointPlacements[k]
                self.model.jointPlacements[k] = pin.SE3(
                    P.rotation, np.array([length, P.translation[1], P.translation[2]])
                )
            tips = [
                f
                for f in range(self.model.nframes)
                if self.model.frames[f].parentJoint == j
                and self.model.frames[f].type == pin.FrameType.BODY
                and self.model.frames[f].name == "F3"
            ]
            tips += [
                f
                for f in range(self.model.nframes)
                if self.model.frames[f].parentJoint == j
                and self.model.frames[f].type == pin.FrameType.FIXED_JOINT
                and self.model.frames[f].name == "tip"
            ]
            for f in tips:
                fr = self.model.frames[f]
                P = fr.placement
                fr.placement = pin.SE3(P.rotation, np.array([length, P.translation[1], P.translation[2]]))
                self.model.frames[f] = fr
            if not children and not tips:
                raise ConfigError(
                    f"body '{name}' has nothing at its distal end whose placement a length could set"
                )
        self.data = self.model.createData()

    # ------------------------------------------------------------------ the model
    def compute(self, q: ArrayLike, qd: ArrayLike) -> PartitionTerms:
        """Γ(q), h(q, q̇), Q_e(q) and the per-body terms at the minimal state (q, q̇)."""
        q = np.asarray(q, dtype=float)
        qd = np.asarray(qd, dtype=float)
        if q.shape != (3,) or qd.shape != (3,):
            raise StateError(
                f"partition model: q and q̇ must have 3 entries (φ, θ, δ), got {q.shape} and {qd.shape}"
            )
        if not np.isfinite(q @ q + qd @ qd):
            raise StateError(f"partition model: non-finite state q={q}, q̇={qd}")
        mp = self.map
        qhat = mp.xi(q)
        E = mp.E(q)
        qhd = E @ qd
        Edqd = mp.Edot_qd(q, qd)
        m, d = self.model, self.data
        pin.computeJointJacobiansTimeVariation(m, d, qhat, qhd)
        G = np.zeros((3, 3))
        h = np.zeros(3)
        Qe = np.zeros(3)
        Gi, hi, Qi, Js = {}, {}, {}, {}
        for b in self.bodies:
            j = self.joint_of[b]
            Jh = pin.getJointJacobian(m, d, j, LOCAL)
            dJh = pin.getJointJacobianTimeVariation(m, d, j, LOCAL)
            Mb = self.M[b]
            J = Jh @ E
            V = Jh @ qhd  # body twist [v; ω]
            acc = dJh @ qhd + Jh @ Edqd  # J̇ q̇
            f = Mb @ V
            v, w = V[:3], V[3:]
            fl, fa = f[:3], f[3:]
            bias = Mb @ acc
            bias[:3] += cross(w, fl)
            bias[3:] += cross(w, fa) + cross(v, fl)
            grav = np.zeros(6)
            grav[:3] = d.oMi[j].rotation.T @ self.g
            Gb = J.T @ Mb @ J
            hb = J.T @ bias
            Qb = J.T @ (Mb @ grav)
            Gi[b], hi[b], Qi[b], Js[b] = Gb, hb, Qb, J
            G += Gb
            h += hb
            Qe += Qb
        return PartitionTerms(q.copy(), qd.copy(), qhat, E, G, h, Qe, Gi, hi, Qi, Js)

    def tip_jacobian(self, q: ArrayLike) -> np.ndarray:
        """J_F3 = Ĵ_F3 E (6×3, [v; ω] of the tip frame F3 in F3's axes); needs a prior compute(q, ·)
        or recomputes the kinematics at q."""
        if self._tip is None:
            raise FrameNotFoundError(f"{self.path.name} has no frame 'F3' (the tip)")
        q = np.asarray(q, dtype=float)
        qhat = self.map.xi(q)
        pin.computeJointJacobians(self.model, self.data, qhat)
        pin.updateFramePlacements(self.model, self.data)
        return pin.getFrameJacobian(self.model, self.data, self._tip, LOCAL) @ self.map.E(q)

    def tip_pose(self, q: ArrayLike) -> pin.SE3:
        qhat = self.map.xi(np.asarray(q, dtype=float))
        pin.framesForwardKinematics(self.model, self.data, qhat)
        return self.data.oMf[self._tip].copy()

    def model_force(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """Γ(q) q̈ + h(q, q̇) − Q_e(q) by ONE recursive Newton–Euler pass on the open tree.

        With q̂ = Ξ(q), q̂̇ = E q̇ and q̂̈ = E q̈ + Ė q̇, the open tree's inverse dynamics is
        τ̂ = M̂(q̂) q̂̈ + Ĉ(q̂, q̂̇) q̂̇ + ĝ(q̂) (Pinocchio's RNEA), and projecting it with Eᵀ gives

            Eᵀ τ̂ = (Eᵀ M̂ E) q̈ + Eᵀ(M̂ Ė q̇ + Ĉ q̂̇) + Eᵀ ĝ = Γ q̈ + h − Q_e,

        the same quantity as the body-wise sums of :meth:`compute` ((9)–(13) of [Dastranj]; the
        equality is tested to round-off), at the cost of one RNEA instead of the per-body terms.
        E is the identity except in the ζ (and α, δ) rows, so E and Eᵀ are applied in closed form."""
        mp = self.map
        q0, q1, dl = float(q[0]), float(q[1]), float(q[2])
        if not (mp.lo - mp.slack <= dl <= mp.hi + mp.slack):
            mp.check_delta(dl)  # raises with the stroke named
        u = dl + mp.l0
        L2 = mp.L0 * mp.L0
        c = u * u / (2.0 * L2) - 1.0
        s = math.sqrt(1.0 - c * c)
        z = -math.acos(c)
        dz = u / (L2 * s)
        d2z = 1.0 / (L2 * s) + u * u * c / (L2 * L2 * s * s * s)
        v2, a2 = float(qd[2]), float(qdd[2])
        if not math.isfinite(q0 + q1 + qd[0] + qd[1] + v2 + qdd[0] + qdd[1] + a2):
            raise StateError(
                f"partition model: non-finite state q={np.asarray(q)}, q̇={np.asarray(qd)} or q̈={np.asarray(qdd)}"
            )
        qh, vh, ah = self._qh, self._vh, self._ah
        qh[0], qh[1], qh[2] = q0, q1, z
        vh[0], vh[1], vh[2] = qd[0], qd[1], dz * v2
        ah[0], ah[1], ah[2] = qdd[0], qdd[1], dz * a2 + d2z * v2 * v2
        if mp.with_actuator:
            qh[3], qh[4] = 0.5 * z, dl
            vh[3], vh[4] = 0.5 * vh[2], v2
            ah[3], ah[4] = 0.5 * ah[2], a2
        tau = pin.rnea(self.model, self.data, qh, vh, ah)
        out = self._out
        out[0], out[1] = tau[0], tau[1]
        out[2] = dz * tau[2] + ((0.5 * dz * tau[3] + tau[4]) if mp.with_actuator else 0.0)
        return out.copy()

    def inverse_dynamics(self, q: ArrayLike, qd: ArrayLike, qdd: ArrayLike) -> np.ndarray:
        """Q_a = Γ q̈ + h − Q_e (13) with no external disturbance."""
        tm = self.compute(q, qd)
        return tm.Gamma @ np.asarray(qdd, dtype=float) + tm.h - tm.Qe
