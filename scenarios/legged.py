"""A legged robot whose legs are closed chains stands, moves its base on a circle, takes a push and lifts a foot.

    cmstack run legged --set model=mjcf/quadruped_five_bar.xml
    cmstack run legged --config legged_biped     # the biped: scenarios/configs/legged_biped.toml

The model file gives the tree (a free joint at the root: the floating base), the loops (``<equality connect>``),
the passive joints (the knees, and the free joint's 6 coordinates), the feet and the floor.  The plant is the same
file in MuJoCo: floor, feet as contact geoms (friction and solref from the file), loops as stiff equalities; the
controller reads the base's state from the free joint (as motion capture would give it).

Law: ``controllers/contact_uk.py: ContactUKController``: the stance feet (``models/contact.py: PointContact``,
friction pyramid with ``facets`` facets and ``mu``) and the loops at the top level, the base and the passive knees
with exactly zero torque, then the base pose (a ``FrameTask`` on ``base_frame``) with the swing foot while one is
lifted, the centre of mass (following the base's offsets), the motors' posture, Gauss last; the internal forces
chosen inside the pyramids.  ``law = "pidc"``: ``controllers/contact_pidc.py: ContactPIDC``, projected inverse
dynamics with the stance feet as closures to the ground, the base pose (and the swing foot) its task coordinates, the
same zero passive torques and force choice (docs/legged.md, "PIDC with the contacts").

Phases (config): stand ``stand_s``; the base on a circle of ``circle_radius`` at ``circle_frequency`` in the
``circle_plane`` for ``circle_cycles`` turns, its angular rate ramped up and down over ``circle_ramp_s`` (so the
base ends where it started; "xz": the sagittal plane, which the planar five-bar legs span; "xy" asks for the
sideways sway the level stance constrains only at second order); a horizontal push ``push_force`` on the torso
from ``push_t`` for ``push_duration``; from ``lift_t`` the base shifts by ``lift_shift`` (the centre of mass over the
three other feet), ``lift_foot`` rises ``lift_height`` and comes back down (minimum jerk, ``lift_s`` each way), its
contact off in between and on again where it lands, and the base shifts back (``lift_foot = ""``: no lift, the biped).
The biped (scenarios/configs/legged_biped.toml): four point contacts a flat foot, one at each corner; the same law.

Metrics: ``base_pos_error_max_m`` (during the circle), ``base_pos_error_max_all_m``, ``base_rot_error_max_rad``,
``com_error_max_m`` (the centre of mass against its target, the whole run), ``foot_slip_max_m`` (the largest
tangential travel of a stance foot's centre since its contact was made active, on the plant), ``cone_margin_min``
(the commanded forces: ≥ 0 inside the pyramid, N), ``plant_cone_margin_min`` (MuJoCo's contact forces on the same
pyramid, N), ``loop_residual_max_m`` (max |φ| of the loops on the plant's states), ``passive_torque_max_nm`` (the
torque the passive coordinates would need, the law's residual; the torque sent there is 0),
``dynamics_vs_pinocchio_rel`` (the target, as the issue states it: ``models/contact.contact_dynamics`` with the loops
and each stance the run uses held rigid against ``pin.constraintDynamics`` refined on Pinocchio's own KKT system
(``_refined``) on ``check_random_states`` seeded random assembled states of the model: ``dynamics_random_check``;
beside it ``dynamics_vs_pinocchio_prox_rel`` against the proximal answer as it is, ``dynamics_vs_kkt_rel`` against
a least-squares KKT solve on Pinocchio's M, h and frame Jacobians, ``dynamics_residual_rel``, the equations' residuals
of our v̇, and ``dynamics_stance_sigma_min_rel``, the worst conditioning of the stacked rows met), the same on
``check_states`` of the run's own logged states, reported and not targeted (``run_dynamics_vs_pinocchio_rel``,
``run_dynamics_vs_pinocchio_prox_rel``, ``run_dynamics_vs_kkt_rel``, ``run_dynamics_residual_rel``,
``run_stance_sigma_min_rel``: ``dynamics_check``; on the nearly singular level stance after a landing Pinocchio's
proximal answer and the least-squares KKT solve disagree with ours and with each other at ~1e-7, the refined answer
agrees with ours to ~5e-10 and our v̇ meets the equations to ~1e-11), ``plant_vs_rigid_qacc_rel`` (the MuJoCo
plant's q̈ against the rigid model's on ``check_states`` logged states, median: ``plant_vs_rigid``), ``fell``,
``control_step_us_median``, ``cone_qp_steps`` (steps whose least-torque forces left a pyramid), ``cone_violations``,
``swing_error_max_m`` (the lifted foot against its reference while off the ground), ``lift_height_reached_m``.

Viewer (``--viewer meshcat``, ``cmstack view RUN_DIR``, replay.html): the commanded contact forces as green rods from
the feet (``segment__force_<foot>``, 4 mm per N) and the base's trail.
"""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pinocchio as pin

from cmstack.controllers.contact_pidc import ContactPIDC
from cmstack.controllers.contact_uk import ContactUKController
from cmstack.models.com import CenterOfMassTask
from cmstack.models.contact import PointContact, contact_dynamics, pinocchio_stance_models
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.errors import ConfigError, InfeasibleError
from cmstack.models.lie import log3
from cmstack.models.loops import ClosureSet
from cmstack.models.robot import Robot, resolve_asset
from cmstack.scenarios._common import CONFIG_DIR, Outcome, Row, scenario_main
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.runner import Disturbance, simulate
from cmstack.sim.sensors import ActuatedSensing, Encoders, JointServo

NAME = "legged"
TARGETS = dict(
    base_pos_error_max_m=2e-3,
    foot_slip_max_m=1e-3,
    cone_margin_min=0.0,
    loop_residual_max_m=1e-6,
    passive_torque_max_nm=1e-9,
    dynamics_vs_pinocchio_rel=1e-9,
)


def _mj(x: float) -> tuple[float, float, float]:
    """The minimum-jerk profile s(x) on [0, 1] and its derivatives in x (0 before, 1 after)."""
    if x <= 0.0:
        return 0.0, 0.0, 0.0
    if x >= 1.0:
        return 1.0, 0.0, 0.0
    return (
        10 * x**3 - 15 * x**4 + 6 * x**5,
        30 * x**2 - 60 * x**3 + 30 * x**4,
        60 * x - 180 * x**2 + 120 * x**3,
    )


class Phases:
    """The config's phases as functions of t: the base's offset from its initial pose (m, with its rate and
    acceleration), the lifted foot's height, and whether the foot is off the ground."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.t_c0 = cfg["stand_s"]
        om = 2 * math.pi * cfg["circle_frequency"]
        self.om, self.tr = om, cfg["circle_ramp_s"]
        self.tc = cfg["circle_cycles"] / cfg["circle_frequency"] - self.tr  # at full rate
        if self.tc < 0:
            raise ConfigError(
                f"circle_ramp_s={self.tr} s exceeds circle_cycles/circle_frequency="
                f"{cfg['circle_cycles'] / cfg['circle_frequency']:g} s"
            )
        self.t_c1 = self.t_c0 + self.tc + 2 * self.tr
        plane = cfg["circle_plane"]
        self.u = np.array([1.0, 0.0, 0.0])
        self.w = np.array([0.0, 0.0, 1.0]) if plane == "xz" else np.array([0.0, 1.0, 0.0])
        self.shift = np.asarray(cfg["lift_shift"], dtype=float)
        self.foot = cfg["lift_foot"]
        self._memo: tuple | None = None  # (t, base_offset(t))
        self._basis = np.vstack((self.u, self.w, self.shift))  # rows u, w, shift (_base_offset)
        t = cfg["lift_t"]
        self.t_s0, self.t_up = t, t + cfg["shift_s"]
        self.t_down = self.t_up + cfg["lift_s"]
        self.t_land = self.t_down + cfg["lift_s"]
        self.t_s1 = self.t_land + cfg["shift_s"]

    def angle(self, t: float) -> tuple[float, float, float]:
        """The circle's angle a(t) (rad) and its derivatives: the rate ramps up over tr (minimum jerk), holds ω for
        tc, ramps down over tr; total ω (tr + tc) = 2π cycles."""
        om, tr, tc = self.om, self.tr, self.tc
        s = t - self.t_c0
        if s <= 0:
            return 0.0, 0.0, 0.0
        if s < tr:  # ∫ of the minimum-jerk rate: tr (2.5 x⁴ − 3 x⁵ + x⁶)
            x = s / tr
            S, dS, _ = _mj(x)
            return om * tr * (2.5 * x**4 - 3 * x**5 + x**6), om * S, om * dS / tr
        if s < tr + tc:
            return om * (tr / 2 + s - tr), om, 0.0
        if s < 2 * tr + tc:
            x = (s - tr - tc) / tr
            S, dS, _ = _mj(x)
            a_up = om * tr * (x - (2.5 * x**4 - 3 * x**5 + x**6))  # ∫ of ω (1 − S)
            return om * (tr / 2 + tc) + a_up, om * (1 - S), -om * dS / tr
        return om * (tr + tc), 0.0, 0.0

    def base_offset(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The base's offset from its initial position at t (m, m/s, m/s²); the last t's arrays are kept, as the base
        and the centre of mass ask for the same t in a step (read-only: not to be changed by the caller)."""
        memo = self._memo
        if memo is not None and memo[0] == t:
            return memo[1]
        out = self._base_offset(t)
        self._memo = (t, out)
        return out

    def _base_offset(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[p; v; a] = C [u; w; shift] with the scalar coefficients C (3 × 3) of the circle in the plane (u, w) and of
        the shift: p = r ((cos a − 1) u + sin a w) + S shift, its first and second derivatives (one small product
        instead of some twenty 3-vector operations: this runs in every control step)."""
        r = self.cfg["circle_radius"]
        a, ad, add = self.angle(t)
        c, s = math.cos(a), math.sin(a)
        S = dS = ddS = 0.0
        if self.foot:
            d = self.cfg["shift_s"]
            if t < self.t_land:
                S, dS, ddS = _mj((t - self.t_s0) / d)
            else:
                S, dS, ddS = _mj((t - self.t_land) / d)
                S, dS, ddS = 1 - S, -dS, -ddS
            dS, ddS = dS / d, ddS / d**2
        C = np.array(
            (
                (r * (c - 1), r * s, S),
                (-r * ad * s, r * ad * c, dS),
                (-r * add * s - r * ad * ad * c, r * add * c - r * ad * ad * s, ddS),
            )
        )
        out = C @ self._basis
        return out[0], out[1], out[2]

    def lift(self, t: float) -> tuple[float, float, float]:
        """The lifted foot's height above where it stood (m) and its rate and acceleration."""
        h, d = self.cfg["lift_height"], self.cfg["lift_s"]
        if t < self.t_down:
            S, dS, ddS = _mj((t - self.t_up) / d)
        else:
            S, dS, ddS = _mj((t - self.t_down) / d)
            S, dS, ddS = 1 - S, -dS, -ddS
        return h * S, h * dS / d, h * ddS / d**2

    def swinging(self, t: float) -> bool:
        return bool(self.foot) and self.t_up <= t < self.t_land


def contact_sites(robot: Robot) -> list[str]:
    """The model's candidate feet: each MJCF site with a contact geom of the same name (the shipped robots' feet)."""
    if robot.mjcf_path is None:
        return []
    m = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))
    out = []
    for s in range(m.nsite):
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SITE, s)
        g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, name) if name else -1
        if g >= 0 and (m.geom_contype[g] or m.geom_conaffinity[g]):
            out.append(name)
    return out


def _shipped_config(name: str) -> str:
    """The path of the shipped config ``name``: relative when run from the repository's root, else absolute (an
    installed package's)."""
    path = CONFIG_DIR / f"{name}.toml"
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_feet(robot: Robot, cfg) -> None:
    """Each of ``feet`` must be a frame of the model: else one ``ConfigError`` line naming the key, the frame, the
    model and the model's contact sites (e.g. the quadruped's feet given with the biped's model: its config is
    scenarios/configs/legged_biped.toml)."""
    names = {f.name for f in robot.model.frames}
    for f in cfg["feet"]:
        if f not in names:
            raise ConfigError(
                f"feet: {f!r} is not a frame of {cfg['model']}; its contact sites are {contact_sites(robot)}"
                f" (the biped's config: --config {_shipped_config('legged_biped')})"
            )


class LeggedLaw:
    """The phases' contact switches around two ``ContactUKController``s sharing the contacts: one for the stance
    (base, centre of mass, posture) and one with the swing foot's task beside the base's (``law = "pidc"``: two
    ``ContactPIDC``s, the base's task and the swing foot's beside it)."""

    def __init__(self, robot: Robot, cfg, phases: Phases):
        self.robot, self.phases = robot, phases
        kin = robot.update(robot.q_initial, np.zeros(robot.nv))
        check_feet(robot, cfg)
        self.contacts = [PointContact(robot, f, mu=cfg["mu"], facets=cfg["facets"]) for f in cfg["feet"]]
        for c in self.contacts:
            c.set_active(True)
        F = kin.frame(cfg["base_frame"])
        p0, R0 = F.p.copy(), F.R.copy()
        z6 = np.zeros(3)

        def base_ref(t):
            p, v, a = phases.base_offset(t)
            return pin.SE3(R0, p0 + p), np.concatenate((v, z6)), np.concatenate((a, z6))

        self.base_ref = base_ref
        c0 = pin.centerOfMass(robot.model, robot.model.createData(), robot.q_initial).copy()

        def com_ref(t):
            p, v, a = phases.base_offset(t)
            return c0 + p, v, a

        self.com_ref = com_ref
        self.base = FrameTask(robot, cfg["base_frame"], base_ref, cfg["base_kp"], cfg["base_kd"], name="base")
        self.com = CenterOfMassTask(robot, com_ref, kp=cfg["com_kp"], kd=cfg["com_kd"], name="com")
        post = PostureTask(
            robot,
            robot.q_initial,
            joints=robot.actuated_joints,
            kp=cfg["posture_kp"],
            kd=cfg["posture_kd"],
            name="posture",
        )
        self.law = cfg["law"]
        # law = "pidc": PIDC with the contacts as closures (controllers/contact_pidc.py), the base pose its task
        if self.law == "pidc":
            self.stance = ContactPIDC(robot, self.contacts, [self.base], on_infeasible="report")
        else:
            self.stance = ContactUKController(robot, self.contacts, [[self.base], [self.com], [post]])
        self.swing_contact = None
        self.swing = self.stance
        if phases.foot:
            names = [c.name for c in self.contacts]
            if phases.foot not in names:
                raise ConfigError(f"lift_foot={phases.foot!r} is not one of feet={names}")
            self.swing_contact = self.contacts[names.index(phases.foot)]
            pf = kin.frame(phases.foot).p.copy()
            ez = np.array([0.0, 0.0, 1.0])

            def foot_ref(t):
                h, hd, hdd = phases.lift(t)
                return (
                    pin.SE3(np.eye(3), pf + h * ez),
                    np.concatenate((hd * ez, z6)),
                    np.concatenate((hdd * ez, z6)),
                )

            self.foot_ref = foot_ref
            foot = FrameTask(
                robot, phases.foot, foot_ref, cfg["swing_kp"], cfg["swing_kd"], rows="position", name="swing"
            )
            if self.law == "pidc":
                self.swing = ContactPIDC(robot, self.contacts, [self.base, foot], on_infeasible="report")
            else:
                self.swing = ContactUKController(
                    robot, self.contacts, [[self.base, foot], [self.com], [post]]
                )
        self.last = self.stance

    @property
    def info(self):
        return self.last.info

    @property
    def kin(self):
        return self.last.kin

    def __call__(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        sc = self.swing_contact
        if sc is not None:
            off = self.phases.swinging(t)
            if off and sc.active:
                sc.set_active(False)
            elif not off and not sc.active:
                sc.set_active(True)  # anchored where it lands (the next rows call)
            self.last = self.swing if off else self.stance
        return self.last(t, q, v)


#: the commanded contact forces drawn as rods from each foot: m per N, and [width (m), r, g, b, a]
FORCE_SCALE = 0.004
FORCE_STYLE = (0.004, 0.1, 0.7, 0.2, 1.0)


def force_segments(names, feet: np.ndarray, forces: np.ndarray) -> dict:
    """{force_<foot>: [foot, foot + FORCE_SCALE f]} of the commanded forces (an inactive foot: a point)."""
    return {
        f"force_{n}": np.array([p, p + FORCE_SCALE * np.nan_to_num(f)])
        for n, p, f in zip(names, feet, forces)
    }


def build_plant(cfg, robot: Robot, out) -> MujocoPlant:
    if cfg["plant_mjcf"]:
        plant = MujocoPlant(cfg["plant_mjcf"], robot.joint_names, sim_dt=cfg["sim_dt"])
    else:
        plant = plant_from_mjcf(robot, sim_dt=cfg["sim_dt"], xml_path=out / "plant.xml")
    plant.reset(robot.q_initial)
    return plant


class PlantContacts:
    """MuJoCo's contact forces on the feet (world axes, on the foot, N), read after a step."""

    def __init__(self, plant: MujocoPlant, contacts):
        m = plant.model
        self.plant = plant
        self.geoms = {}
        for (
            c
        ) in contacts:  # the foot's geom: the one of the frame's name, else any geom with contype on its body
            gid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, c.frame)
            if gid < 0:
                sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, c.frame)
                body = m.site_bodyid[sid] if sid >= 0 else -1
                cand = [g for g in range(m.ngeom) if m.geom_bodyid[g] == body and m.geom_contype[g]]
                gid = cand[0] if cand else -1
            self.geoms[gid] = c
        self._f6 = np.zeros(6)

    def forces(self) -> dict:
        m, d = self.plant.model, self.plant.data
        out: dict = {}
        for i in range(d.ncon):
            con = d.contact[i]
            for sign, g in ((1.0, con.geom2), (-1.0, con.geom1)):
                c = self.geoms.get(int(g))
                if c is not None:
                    mujoco.mj_contactForce(m, d, i, self._f6)
                    f = sign * (con.frame.reshape(3, 3).T @ self._f6[:3])
                    out[c.name] = out.get(c.name, 0.0) + f
        return out


def _kkt_accel(robot: Robot, q, v, tau, stance) -> np.ndarray:
    """v̇ of [M Jᵀ; J 0] [v̇; −λ] = [τ − h − D v; −J̇v] by least squares (an SVD of the whole KKT matrix), J the loops'
    and the stance's rows from Pinocchio's frame Jacobians: the reference where Pinocchio's proximal solver does
    not converge (below)."""
    kin = robot.update(q, v)
    Js, bs = [], []
    for c in stance:
        F = kin.frame(c.fid)
        Js.append(F.J[:3])
        bs.append(-F.acc[:3])
    for lp in robot.loops:
        W, drift, _, _ = lp.error_dynamics(kin, 0.0)
        Js.append(W[lp.rows])
        bs.append(-drift[lp.rows])
    J, b = np.vstack(Js), np.concatenate(bs)
    n, m = robot.nv, J.shape[0]
    K = np.block([[kin.M, J.T], [J, np.zeros((m, m))]])
    rhs = np.concatenate([tau - kin.h - robot.damping * v, b])
    return np.linalg.lstsq(K, rhs, rcond=None)[0][:n]


def _stance_rows(robot: Robot, kin, stance) -> tuple[np.ndarray, np.ndarray]:
    """(J, b) of the stance's contacts then the loops, J v̇ = b (no Baumgarte terms), from Pinocchio's frames."""
    rows_ = [(kin.frame(c.fid).J[:3], -kin.frame(c.fid).acc[:3]) for c in stance]
    for lp in robot.loops:
        W, drift, _, _ = lp.error_dynamics(kin, 0.0)
        rows_.append((W[lp.rows], -drift[lp.rows]))
    return np.vstack([x for x, _ in rows_]), np.concatenate([y for _, y in rows_])


def _refined(
    robot: Robot, d, cms, cds, q: np.ndarray, v: np.ndarray, tau: np.ndarray, a: np.ndarray
) -> np.ndarray:
    """Pinocchio's answer ``a`` (``pin.constraintDynamics`` just run with d, cms, cds at q, v, τ) refined by one step of
    iterative refinement on Pinocchio's own KKT system, all of whose terms are Pinocchio's:

        K x = r,  K = [[M, −Jᵀ], [J, 0]],  x = [v̇; λ],  r = [τ − h; γ]

    M = ``crba``, h = ``nonLinearEffects``, J = ``getConstraintsJacobian`` (the loops' then the contacts' rows), γ =
    ``data.primal_rhs_contact`` (the rows' right side, J v̇ = γ), λ = ``data.lambda_c`` (M v̇ + h = τ + Jᵀ λ).  The step
    is x ← x + K⁺ (r − K x) (least squares: K is singular when rows are redundant, as the planar loops' out-of-plane
    rows are).  Why: on an ill-conditioned stance the proximal iterations stop (at their cap, 500) with a constraint
    residual ~1e-12, which moves v̇ by up to residual / σ_min(J); the step takes v̇ to the solution of the same system
    (the quadruped's worst random state, σ_min/σ_max = 5.8e-6: Pinocchio's answer is 1.3e-9 from the solution computed
    with extended-precision residuals, the refined one 5.9e-14; ours 1.6e-12).  The reference stays Pinocchio's model
    (its Jacobians and drifts), not ours; its proximal answer as it is is reported too (``_compare``)."""
    model = robot.model
    J = pin.getConstraintsJacobian(model, d, cms, cds)
    gamma = np.asarray(d.primal_rhs_contact)
    lam = np.asarray(d.lambda_c)
    d2 = model.createData()
    M = pin.crba(model, d2, q)
    M = np.triu(M) + np.triu(M, 1).T
    h = pin.nonLinearEffects(model, d2, q, v)
    n, m = robot.nv, J.shape[0]
    K = np.block([[M, -J.T], [J, np.zeros((m, m))]])
    r = np.concatenate((tau - h - M @ a + J.T @ lam, gamma - J @ a))
    return a + np.linalg.lstsq(K, r, rcond=None)[0][:n]


def _compare(robot: Robot, qa: np.ndarray, v: np.ndarray, tau: np.ndarray, stance) -> dict:
    """One state: ``contact_dynamics`` (ours) against ``pin.constraintDynamics`` (proximal, 1e-14, μ 1e-10, 500
    iterations) refined on Pinocchio's KKT system (``_refined``: the targeted figure), against that proximal answer as
    it is (``pin_prox``) and against ``_kkt_accel``, relative to ‖v̇_pin‖; the equations' residuals of our v̇
    (‖J v̇ − b‖ / (‖J‖ ‖v̇‖ + ‖b‖) and the force not in range(Jᵀ), ‖Nᵀ(M v̇ + h + D v − τ)‖ / ‖τ‖); and σ_min/σ_max of
    the rows (σ_min the smallest above 1e-9 σ_max: the stance's conditioning)."""
    a, _ = contact_dynamics(robot, qa, v, tau, stance)
    a_kkt = _kkt_accel(robot, qa, v, tau, stance)
    cms, cds = pinocchio_stance_models(robot, stance)
    d = robot.model.createData()
    pin.initConstraintDynamics(robot.model, d, cms, cds)
    prox = pin.ProximalSettings(1e-14, 1e-10, 500)
    tau_d = tau - robot.damping * v
    a_prox = pin.constraintDynamics(robot.model, d, qa, v, tau_d, cms, cds, prox).copy()
    a_pin = _refined(robot, d, cms, cds, qa, v, tau_d, a_prox)
    na = max(float(np.linalg.norm(a_pin)), 1e-12)
    kin = robot.update(qa, v)
    Jm, bm = _stance_rows(robot, kin, stance)
    _, sm, Vm = np.linalg.svd(Jm)
    Nm = Vm[int((sm > 1e-12 * sm[0]).sum()) :].T
    res = max(
        float(np.linalg.norm(Jm @ a - bm) / (np.linalg.norm(Jm) * np.linalg.norm(a) + np.linalg.norm(bm))),
        float(np.linalg.norm(Nm.T @ (kin.M @ a + kin.h + robot.damping * v - tau)) / np.linalg.norm(tau)),
    )
    rank = int((sm > 1e-9 * sm[0]).sum())
    return dict(
        pin=float(np.linalg.norm(a - a_pin) / na),
        pin_prox=float(np.linalg.norm(a - a_prox) / na),
        kkt=float(np.linalg.norm(a - a_kkt) / na),
        residual=res,
        sigma=float(sm[rank - 1] / sm[0]),
    )


def _anchored_stance(robot: Robot, q: np.ndarray, feet, mu: float):
    """Fresh ``PointContact``s of ``feet``, active and anchored where they are at q; their rows' null space N (v = N z
    keeps them and the loops)."""
    stance = [PointContact(robot, f, mu=mu) for f in feet]
    kin = robot.update(q, np.zeros(robot.nv))
    for c in stance:
        c.set_active(True, c.position(kin))
    J, _ = _stance_rows(robot, kin, stance)
    _, s, Vt = np.linalg.svd(J)
    return stance, Vt[int((s > 1e-9 * s[0]).sum()) :].T


def _fold(out: dict, prefix: str, r: dict) -> None:
    out[f"{prefix}dynamics_vs_pinocchio_rel"] = max(out[f"{prefix}dynamics_vs_pinocchio_rel"], r["pin"])
    out[f"{prefix}dynamics_vs_pinocchio_prox_rel"] = max(
        out[f"{prefix}dynamics_vs_pinocchio_prox_rel"], r["pin_prox"]
    )
    out[f"{prefix}dynamics_vs_kkt_rel"] = max(out[f"{prefix}dynamics_vs_kkt_rel"], r["kkt"])
    out[f"{prefix}dynamics_residual_rel"] = max(out[f"{prefix}dynamics_residual_rel"], r["residual"])
    out[f"{prefix}stance_sigma_min_rel"] = min(out[f"{prefix}stance_sigma_min_rel"], r["sigma"])


def _empty(prefix: str) -> dict:
    return {
        f"{prefix}dynamics_vs_pinocchio_rel": 0.0,
        f"{prefix}dynamics_vs_pinocchio_prox_rel": 0.0,
        f"{prefix}dynamics_vs_kkt_rel": 0.0,
        f"{prefix}dynamics_residual_rel": 0.0,
        f"{prefix}stance_sigma_min_rel": 1.0,
    }


def scenario_stances(cfg) -> list[list[str]]:
    """The stances the scenario uses: all feet, and (with a foot lift) all but ``lift_foot``."""
    stances = [list(cfg["feet"])]
    if cfg["lift_foot"]:
        stances.append([f for f in cfg["feet"] if f != cfg["lift_foot"]])
    return stances


def dynamics_random_check(robot: Robot, stances, n_states: int, mu: float = 1.0, seed: int = 0) -> dict:
    """The issue's check (targeted): ``contact_dynamics`` with the loops and each stance of ``stances`` (lists of foot
    frames) held as rigid constraints against ``pin.constraintDynamics`` on ``n_states`` random assembled states of
    the model: q = ``assemble``(q_initial ⊕ 0.2 N(0, I)) (the loops closed, every coordinate moved, the base too), the
    stance's feet anchored where they stand (uneven ground), v = N z in the null space of the stance's and loops'
    rows (z ~ N(0, I)), τ ~ 3 N(0, I) on the motors; seeded (``seed``).  Every stance is checked on every state.
    Returns ``dynamics_vs_pinocchio_rel`` (the worst relative ‖v̇ − v̇_pin‖ / ‖v̇_pin‖, v̇_pin refined: ``_compare``),
    ``dynamics_vs_pinocchio_prox_rel`` (against the proximal answer as it is), ``dynamics_vs_kkt_rel``,
    ``dynamics_residual_rel`` and ``dynamics_stance_sigma_min_rel`` (the worst conditioning met).  A draw can be
    ill-conditioned as well: on the quadruped, 25 states of seed 1 meet σ_min/σ_max = 5.8e-6, where Pinocchio's proximal
    answer is 1.3e-9 from ours and from the solution of its own KKT system, the refined one 1.7e-12 from ours
    (``_refined``; docs/legged.md, "Checked against Pinocchio")."""
    out = _empty("")
    if n_states == 0:  # not checked: NaN, so that the target reads "not evaluated", never met by default
        nan = float("nan")
        return dict(
            dynamics_vs_pinocchio_rel=nan,
            dynamics_vs_pinocchio_prox_rel=nan,
            dynamics_vs_kkt_rel=nan,
            dynamics_residual_rel=nan,
            dynamics_stance_sigma_min_rel=nan,
        )
    rng = np.random.default_rng(seed)
    actuated = np.zeros(robot.nv)
    actuated[robot.v_indices(robot.actuated_joints)] = 1.0
    for _ in range(n_states):
        for tries in range(20):  # a draw whose loops cannot close (a leg out of reach) is drawn again
            try:
                q = robot.assemble(
                    pin.integrate(robot.model, robot.q_initial, 0.2 * rng.normal(size=robot.nv))
                )
                break
            except InfeasibleError:
                if tries == 19:
                    raise
        tau = 3.0 * rng.normal(size=robot.nv) * actuated
        for feet in stances:
            stance, N = _anchored_stance(robot, q, feet, mu)
            v = N @ rng.normal(size=N.shape[1])
            _fold(out, "", _compare(robot, q, v, tau, stance))
    out["dynamics_stance_sigma_min_rel"] = out.pop("stance_sigma_min_rel")
    return out


def dynamics_check(robot: Robot, L, contacts, n_states: int) -> dict:
    """The same comparison on the run's own states (reported, not targeted): ``check_states`` logged states closed by
    ``assemble``, the step's stance feet where they are, v in the null space of the rows, the logged torque plus a
    random one on the motors (3 N·m std, seeded: standing still, the logged torque alone gives v̇ ≈ 0 and a relative
    error of round-off over round-off).  A nearly level stance (its rows' smallest non-zero singular value ~1e-7 of the
    largest, e.g. after a foot lands a little away from where it was) is ill-conditioned: ``pin.constraintDynamics``
    and the KKT solve then drift from ours and from each other (3e-7–9e-7 on the quadruped's default run) while our v̇
    meets the equations to ~1e-11; the keys are ``run_dynamics_vs_pinocchio_rel``, ``run_dynamics_vs_kkt_rel``,
    ``run_dynamics_residual_rel`` and ``run_stance_sigma_min_rel``, so that conditioning is reported beside them."""
    out = _empty("run_")
    if n_states == 0:
        return {k: float("nan") for k in out}
    rows = np.unique(np.linspace(0, len(L["t"]) - 1, n_states).astype(int))
    rng = np.random.default_rng(0)
    actuated = np.zeros(robot.nv)
    actuated[robot.v_indices(robot.actuated_joints)] = 1.0
    for k in rows:
        qa = robot.assemble(L["q"][k])
        feet = [c.frame for c, on in zip(contacts, L["active"][k]) if on > 0.5]
        stance, N = _anchored_stance(robot, qa, feet, contacts[0].mu)
        va = N @ (N.T @ L["v"][k])
        tau = L["tau"][k] + 3.0 * rng.normal(size=robot.nv) * actuated
        _fold(out, "run_", _compare(robot, qa, va, tau, stance))
    return out


def plant_vs_rigid(robot: Robot, plant: MujocoPlant, L, contacts, n_states: int) -> float:
    """The MuJoCo plant against the rigid model the law uses: on ``n_states`` logged states, the plant's q̈ from
    ``mj_forward`` at its logged qpos, qvel and the logged torque (its soft contacts and loops as the file and the
    plant set them) against ``contact_dynamics`` at the same state with the loops and the step's stance held rigid
    (each stance foot anchored where it is); MuJoCo's q̈ in Pinocchio's coordinates: the hinges as they are, the free
    joint's angular part as it is (body axes in both), its linear part v̇_l = Rᵀ ü − ω × v_l (MuJoCo's ü: the body
    origin's acceleration in world axes; v_l = Rᵀ u, Pinocchio's).  Returns the median of ‖q̈_MuJoCo − q̈_rigid‖ /
    ‖q̈_rigid‖ (NaN without states)."""
    if n_states == 0:
        return float("nan")
    mj = mujoco.MjData(plant.model)
    m = plant.map
    cm = m.coords
    rows = np.unique(np.linspace(0, len(L["t"]) - 1, n_states).astype(int))
    rel = []
    for k in rows:
        q, v, tau = L["q"][k], L["v"][k], L["tau"][k]
        mj.qpos[:], mj.qvel[:] = L["plant_qpos"][k], L["plant_qvel"][k]
        mj.ctrl[:] = 0.0
        mj.ctrl[m.act[m.actuated]] = tau[m.actuated] / m.gear[m.actuated]
        mj.xfrc_applied[:] = 0.0
        mujoco.mj_forward(plant.model, mj)
        a_mj = mj.qacc[cm.vsel].copy()
        for iq, iv in zip(cm.free_q.tolist(), cm.free_v.tolist()):
            R = pin.Quaternion(q[iq + 6], *q[iq + 3 : iq + 6]).toRotationMatrix()
            a_mj[iv : iv + 3] = R.T @ a_mj[iv : iv + 3] - np.cross(v[iv + 3 : iv + 6], v[iv : iv + 3])
        kin = robot.update(q, v)
        stance = [PointContact(robot, c.frame) for c, on in zip(contacts, L["active"][k]) if on > 0.5]
        for c in stance:
            c.set_active(True, c.position(kin))
        a, _ = contact_dynamics(robot, q, v, tau, stance)
        rel.append(float(np.linalg.norm(a_mj - a) / max(float(np.linalg.norm(a)), 1e-12)))
    return float(np.median(rel))


def make_recorder(robot: Robot, cfg, phases: Phases, law: LeggedLaw, plant: MujocoPlant, log, viewer):
    """The per-step ``record(t, q, v, tau)`` of ``run``: the base and its reference, the centre of mass, the feet,
    each stance foot's slip, the commanded forces and margins, MuJoCo's contact forces' margins, the passive
    torque, the loops' residual and the swing foot, into ``log``; the viewer's trail and force rods."""
    contacts = law.contacts
    pc = PlantContacts(plant, contacts)
    cs = ClosureSet(robot.loops)
    names = [c.name for c in contacts]
    d = robot.model.createData()
    bid = robot.frame_id(cfg["base_frame"])
    fids = [c.fid for c in contacts]
    nf = len(contacts)
    P = robot.v_indices(robot.passive_joints)
    swing_fid = robot.frame_id(phases.foot) if phases.foot else None

    def record(t, q, v, tau):
        info = law.info
        pin.framesForwardKinematics(robot.model, d, q)
        Tb = d.oMf[bid]
        Tr = law.base_ref(t)[0]
        com = pin.centerOfMass(robot.model, d, q)
        feet = np.array([d.oMf[f].translation for f in fids])
        slip = np.zeros(nf)
        fc = np.full((nf, 3), np.nan)
        mc = np.full(nf, np.nan)
        mp = np.full(nf, np.nan)
        pf = pc.forces()
        for i, c in enumerate(contacts):
            if c.active and c.anchor is not None:
                dp = feet[i] - c.anchor
                slip[i] = float(np.linalg.norm(dp - (dp @ c.normal) * c.normal))
            if c.name in info.forces:
                fc[i] = info.forces[c.name]
                mc[i] = info.cone_margin[c.name]
            if c.active and c.name in pf:
                mp[i] = c.cone_margin(pf[c.name])
        log.append(
            t=t,
            q=q,
            v=v,
            tau=tau,
            plant_qpos=plant.data.qpos,
            plant_qvel=plant.data.qvel,
            base=Tb.translation,
            base_ref=Tr.translation,
            base_pos_error=float(np.linalg.norm(Tr.translation - Tb.translation)),
            base_rot_error=float(np.linalg.norm(log3(Tb.rotation.T @ Tr.rotation))),
            com_error=float(np.linalg.norm(law.com_ref(t)[0] - com)),
            feet=feet,
            slip=slip,
            force=fc,
            margin=mc,
            plant_margin=mp,
            active=np.array([float(c.active) for c in contacts]),
            passive_residual=info.passive_residual,
            tau_passive=float(np.abs(tau[P]).max()) if P.size else 0.0,
            loop_residual=float(np.abs(cs.phi(q)).max()) if robot.loops else 0.0,
            tilt=float(np.linalg.norm(log3(Tb.rotation))),
            cone_ok=float(info.status == "solved"),
            swing_error=float(np.linalg.norm(d.oMf[swing_fid].translation - law.foot_ref(t)[0].translation))
            if swing_fid is not None and phases.swinging(t)
            else 0.0,
            swing_height=float(d.oMf[swing_fid].translation[2]) if swing_fid is not None else 0.0,
        )
        if viewer is not None:
            viewer.maybe_update(
                t,
                plant.data.qpos,
                trails={"base": Tb.translation.copy()},
                segments=force_segments(names, feet, fc),
            )

    return record


def make_push(cfg, plant: MujocoPlant) -> list[Disturbance]:
    """The config's push: ``push_force`` (N, world) on the body of ``base_frame`` (a body, or a site: its body)
    from ``push_t`` for ``push_duration``; none when either is zero."""
    push = []
    if cfg["push_duration"] > 0 and np.any(np.asarray(cfg["push_force"]) != 0):
        body = cfg["base_frame"]  # a body, or a site: its body
        sid = mujoco.mj_name2id(plant.model, mujoco.mjtObj.mjOBJ_SITE, body)
        if sid >= 0:
            body = mujoco.mj_id2name(plant.model, mujoco.mjtObj.mjOBJ_BODY, int(plant.model.site_bodyid[sid]))
        push = [
            Disturbance(body, cfg["push_t"], cfg["push_t"] + cfg["push_duration"], tuple(cfg["push_force"]))
        ]
    return push


def result_rows(m: dict, sensing) -> list[Row]:
    """The table of ``run``: the targeted metrics with their bounds, the others reported."""
    dyn, fell = m["dynamics_vs_pinocchio_rel"], m["fell"]
    rows = [
        Row(
            "base_pos_error_max_m",
            m["base_pos_error_max_m"],
            None,
            "<= 2e-3 (circle)",
            None if math.isnan(m["base_pos_error_max_m"]) else m["base_pos_error_max_m"] <= 2e-3,
        ),
        Row("base_pos_error_max_all_m", m["base_pos_error_max_all_m"]),
        Row("base_rot_error_max_rad", m["base_rot_error_max_rad"]),
        Row("com_error_max_m", m["com_error_max_m"]),
        Row("foot_slip_max_m", m["foot_slip_max_m"], None, "<= 1e-3", m["foot_slip_max_m"] <= 1e-3),
        Row("cone_margin_min", m["cone_margin_min"], None, ">= 0 (commanded, N)", m["cone_margin_min"] >= 0),
        Row("plant_cone_margin_min", m["plant_cone_margin_min"]),
        Row(
            "loop_residual_max_m", m["loop_residual_max_m"], None, "<= 1e-6", m["loop_residual_max_m"] <= 1e-6
        ),
        Row(
            "passive_torque_max_nm",
            m["passive_torque_max_nm"],
            None,
            "<= 1e-9",
            m["passive_torque_max_nm"] <= 1e-9,
        ),
        Row(
            "dynamics_vs_pinocchio_rel",
            dyn,
            None,
            "<= 1e-9 (random assembled states)",
            None if math.isnan(dyn) else dyn <= 1e-9,
        ),
        Row("dynamics_vs_pinocchio_prox_rel", m["dynamics_vs_pinocchio_prox_rel"]),
        Row("dynamics_vs_kkt_rel", m["dynamics_vs_kkt_rel"]),
        Row("dynamics_residual_rel", m["dynamics_residual_rel"]),
        Row("dynamics_stance_sigma_min_rel", m["dynamics_stance_sigma_min_rel"]),
        Row("run_dynamics_vs_pinocchio_rel", m["run_dynamics_vs_pinocchio_rel"]),
        Row("run_dynamics_vs_pinocchio_prox_rel", m["run_dynamics_vs_pinocchio_prox_rel"]),
        Row("run_dynamics_vs_kkt_rel", m["run_dynamics_vs_kkt_rel"]),
        Row("run_dynamics_residual_rel", m["run_dynamics_residual_rel"]),
        Row("run_stance_sigma_min_rel", m["run_stance_sigma_min_rel"]),
        Row("plant_vs_rigid_qacc_rel", m["plant_vs_rigid_qacc_rel"]),
        Row("fell", fell, None, "== false", not fell),
        Row("control_step_us_median", m["control_step_us_median"]),
        Row("swing_error_max_m", m["swing_error_max_m"]),
        Row("lift_height_reached_m", m["lift_height_reached_m"]),
        Row("cone_qp_steps / cone_violations", f"{m['cone_qp_steps']} / {m['cone_violations']}"),
    ]
    if sensing is not None:
        rows.append(Row("reconstruction_us_median", m["reconstruction_us_median"]))
        rows.append(Row("reconstruction_error_q_max", m["reconstruction_error_q_max"]))
    return rows


def run(ctx) -> Outcome:
    cfg = ctx.cfg
    robot = Robot.from_mjcf(resolve_asset(cfg["model"]))
    if robot.floating_base is None:
        raise ConfigError(f"model {cfg['model']}: no free joint at the root; legged needs a floating base")
    if cfg["circle_plane"] not in ("xz", "xy"):
        raise ConfigError(f"circle_plane={cfg['circle_plane']!r} is not one of ['xz', 'xy']")
    check_feet(robot, cfg)  # before the plant is built: a wrong foot is named at once
    phases = Phases(cfg)
    plant = build_plant(cfg, robot, ctx.out)
    law = LeggedLaw(robot, cfg, phases)
    contacts = law.contacts
    log = ctx.logger
    log.meta.update(mjcf_path=str(plant.path), model_path=str(resolve_asset(cfg["model"])))
    viewer = ctx.make_viewer(plant.model)
    names = [c.name for c in contacts]
    styles = {f"style__segment__force_{n}": np.array(FORCE_STYLE) for n in names}
    log.meta.update(styles)
    if viewer is not None:
        viewer.apply_styles(styles)
    record = make_recorder(robot, cfg, phases, law, plant, log, viewer)
    push = make_push(cfg, plant)
    # sensors = "actuated": the law sees the motors' encoders and the base's pose and twist, the knees reconstructed
    sensing = None
    if cfg["sensors"] == "actuated":
        enc = Encoders(cfg["encoder_counts"]) if cfg["encoder_counts"] else None
        sensing = ActuatedSensing.for_robot(robot, cfg["control_dt"], enc)
    # command = "position": the motors' own PD around (q_des, v_des, a_des, τ_ff) from the law's v̇ (sim/sensors.py)
    servo = JointServo(robot, cfg["control_dt"], pd_hz=cfg["pd_hz"]) if cfg["command"] == "position" else None
    run_ = simulate(
        plant,
        law,
        duration=cfg["duration"],
        control_dt=cfg["control_dt"],
        record=record,
        disturbances=push,
        progress=ctx.progress,
        desc=NAME,
        log=log,
        sensors=sensing or "full",
        command=servo or "torque",
    )
    L = log.arrays()
    for k, c in enumerate(contacts):  # the commanded forces as arrows (rods) for the replay, as drawn live
        f = np.nan_to_num(L["force"][:, k])
        log.put(
            f"segment__force_{c.name}", np.stack((L["feet"][:, k], L["feet"][:, k] + FORCE_SCALE * f), axis=1)
        )
    L = log.arrays()
    t = L["t"]
    circle = (t >= phases.t_c0) & (t <= phases.t_c1)
    fell = bool(np.any(L["base"][:, 2] < cfg["fell_height"]) or np.any(L["tilt"] > cfg["fell_tilt"]))
    margins = L["margin"]
    pm = L["plant_margin"]
    dyn_m = dynamics_random_check(
        robot, scenario_stances(cfg), cfg["check_random_states"], mu=cfg["mu"], seed=cfg["check_seed"]
    )
    dyn_m.update(dynamics_check(robot, L, contacts, cfg["check_states"]))
    dyn_m["plant_vs_rigid_qacc_rel"] = plant_vs_rigid(robot, plant, L, contacts, cfg["check_states"])
    m = dict(
        model=str(cfg["model"]),
        base_pos_error_max_m=float(L["base_pos_error"][circle].max()) if circle.any() else float("nan"),
        base_pos_error_max_all_m=float(L["base_pos_error"].max()),
        base_rot_error_max_rad=float(L["base_rot_error"].max()),
        com_error_max_m=float(L["com_error"].max()),
        foot_slip_max_m=float(L["slip"].max()),
        cone_margin_min=float(np.nanmin(margins)) if np.isfinite(margins).any() else float("nan"),
        plant_cone_margin_min=float(np.nanmin(pm)) if np.isfinite(pm).any() else float("nan"),
        loop_residual_max_m=float(L["loop_residual"].max()),
        passive_torque_max_nm=float(max(L["passive_residual"].max(), L["tau_passive"].max())),
        **dyn_m,
        fell=fell,
        control_step_us_median=run_.step_us_median,
        cone_qp_steps=int(
            law.stance.cone_qp_steps + (law.swing.cone_qp_steps if law.swing is not law.stance else 0)
        ),
        cone_violations=int(
            law.stance.cone_violations + (law.swing.cone_violations if law.swing is not law.stance else 0)
        ),
        motor_saturations=plant.saturated,
        max_torque_nm=float(np.abs(L["tau"]).max()),
        push_force_n=float(np.linalg.norm(cfg["push_force"])) if push else 0.0,
        swing_error_max_m=float(L["swing_error"].max()),
        lift_height_reached_m=float(L["swing_height"].max() - L["swing_height"][0]) if phases.foot else 0.0,
        realtime_factor=run_.realtime_factor,
        sensors=cfg["sensors"],
        command=cfg["command"],
        law=cfg["law"],
        **(sensing.metrics() if sensing is not None else {}),
        **({} if servo is None else {"pd_torque_max": servo.pd_torque_max}),
    )
    rows = result_rows(m, sensing)
    plots = make_plots(ctx, L, contacts, cfg) if ctx.drawing else []
    return Outcome(m, rows, plots)


def make_plots(ctx, L, contacts, cfg):
    plt = ctx.pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    i, j = (0, 2) if cfg["circle_plane"] == "xz" else (0, 1)
    ax[0, 0].plot(L["base_ref"][:, i], L["base_ref"][:, j], "k--", lw=1, label="reference")
    ax[0, 0].plot(L["base"][:, i], L["base"][:, j], lw=1.2, label="base (plant)")
    ax[0, 0].set_xlabel("xyz"[i] + " [m]")
    ax[0, 0].set_ylabel("xyz"[j] + " [m]")
    ax[0, 0].set_aspect("equal", adjustable="datalim")
    ax[0, 0].legend(fontsize=8)
    t = L["t"]
    ax[0, 1].semilogy(t, L["base_pos_error"] + 1e-12, label="base position error [m]")
    ax[0, 1].semilogy(t, L["com_error"] + 1e-12, label="centre of mass error [m]")
    ax[0, 1].semilogy(t, L["slip"].max(axis=1) + 1e-12, label="largest stance foot slip [m]")
    ax[0, 1].semilogy(t, L["loop_residual"] + 1e-15, label="loop residual [m]")
    ax[0, 1].legend(fontsize=8)
    for k, c in enumerate(contacts):
        ax[1, 0].plot(t, L["force"][:, k, 2], lw=1, label=f"{c.name} f_z commanded")
    ax[1, 0].set_ylabel("normal force [N]")
    ax[1, 0].legend(fontsize=7)
    for k, c in enumerate(contacts):
        ax[1, 1].plot(t, L["margin"][:, k], lw=1, label=f"{c.name} commanded")
        ax[1, 1].plot(t, L["plant_margin"][:, k], lw=0.6, ls=":", label=f"{c.name} MuJoCo")
    ax[1, 1].axhline(0.0, color="k", lw=0.8)
    ax[1, 1].set_ylabel("friction pyramid margin [N]")
    ax[1, 1].legend(fontsize=6, ncol=2)
    for a in (ax[0, 1], ax[1, 0], ax[1, 1]):
        a.set_xlabel("t [s]")
    fig.suptitle(f"legged: {cfg['model']}")
    fig.tight_layout()
    return [ctx.save_figure(fig, "legged")]


def main(argv=None) -> int:
    return scenario_main(NAME, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
