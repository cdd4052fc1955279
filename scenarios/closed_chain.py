"""A closed chain from its model file: the end effector follows a trajectory on the MuJoCo plant (issue 23).

    cmstack run closed_chain --set model=mjcf/five_bar.xml --set law=pidc
    cmstack run closed_chain --set model=urdf/five_bar.urdf --set loops=urdf/five_bar.loops.toml

The model file gives everything: the tree, the loops (MJCF ``<equality connect|weld>`` or the URDF's loops
sidecar), the passive joints (no ``<actuator>``, or the sidecar's ``passive``) and the initial pose
(assembled).  The plant is the same file in MuJoCo with the loops as equalities (``plant_from_mjcf`` /
``plant_from_urdf``), saved as ``plant.xml`` in the run directory (a replay shows the closed mechanism).

Trajectory (``coords``): "ee" — the frame ``ee_frame`` follows a circle of ``radius`` at ``frequency`` in
the world x-z plane, starting where it is (a ``FrameTask`` on its position: PIDC's task-space coordinates;
``ee_rows = "full"`` also holds its initial orientation, a pose, e.g. a Stewart platform's);
"joints" — the actuated joints follow sinusoids of ``joint_amplitude`` about the initial pose and the end
effector the path they imply (its reference: the assembled pose with the actuated joints at their
reference); "auto" — "ee" when the mechanism has at least 2 degrees of freedom, else "joints" (a four-bar's
coupler point can only follow its coupler curve).

Metrics: ``ee_error_max_m`` (t > ``track_after``), ``loop_residual_max_m`` (max |φ| of the loops on the
plant's states over the run: m, and rad on a weld's rotation rows), ``passive_torque_max_nm`` (the law's
torque on passive joints), ``dynamics_vs_pinocchio_rel`` (the rigid forward dynamics of the controller's
model, ProjectionPlant.accel, against ``pin.constraintDynamics`` on ``check_states`` logged states closed by
``assemble`` and projected; when a loop is a joint coupling, which has no Pinocchio constraint model, against a
KKT solve on Pinocchio's M, h and the loops' rows from Pinocchio's frame Jacobians: ``_kkt_accel``),
``plant_vs_rigid_qacc_rel`` (median of |q̈_MuJoCo − q̈_rigid|/|q̈_rigid| on those states),
``constraint_force_max_n`` (the law's loop multipliers, N on position rows, N·m on rotation rows).
Laws: ``pidc`` (task-space or joint coordinates, passive joints by (60–62)); ``uk`` (the loops as UK's top
level, the coordinates below them, Gauss last; the passive joints get zero torque and the loop reaction is
reported: controllers/udwadia_kalaba.py, "Closed chains").

Interfaces (sim/sensors.py): ``sensors = "actuated"`` gives the law the motors' encoders only (``encoder_counts``
a turn, ``encoder_noise_q``/``_v``) and the passive joints reconstructed from the loops (models/estimator.py;
metrics ``reconstruction_us_median``, ``reconstruction_error_q_max``/``_v_max`` against the plant, the estimator's
iterations and conditioning); a sensor fault ends the run with its name as the reason (metrics.json ``fault``,
``fault_joint``, ``fault_t``; the log holds every cycle before it).  ``fault_encoder`` injects one: from
``fault_t`` on, that encoder reads ``fault_size`` more ("jump") or 0 ("dead").  ``command = "position"``
sends (q_des, v_des, τ_ff) to a robot with its own joint PD of bandwidth ``pd_hz`` (``pd_torque_max``: what the
PD added).

Viewer (``--viewer meshcat``, ``cmstack view RUN_DIR``, replay.html): for each loop closure ``<loop>`` the two
closure frames of the plant's state, frame_a·offset and frame_b·offset_b (small triads ``<loop>_a`` and
``<loop>_b``), and the red segment ``<loop>`` between their origins — the loop's position residual, a point
while the loop is closed, a rod when it opens; the end effector's trail ``ee`` and its reference's trail
``ee_ref`` (the circle, or the path the joint reference implies).  The log holds them per step
(``frame__<loop>_a``, ``frame__<loop>_b``, ``segment__<loop>``, ``trail__ee``, ``trail__ee_ref``: computed after
the loop from the logged plant states) and their look (``style__…``) for the replay.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import mujoco
import numpy as np
import pinocchio as pin

from cmstack.controllers.pidc import PIDC
from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.coupling import FrameTask, JointTrajectoryTask
from cmstack.models.errors import ConfigError
from cmstack.models.loops import ClosureSet, assemble, pinocchio_constraint_models
from cmstack.models.projection import project
from cmstack.models.robot import Robot, resolve_asset
from cmstack.models.trajectory import Circle, Sinusoid
from cmstack.scenarios._common import Outcome, Row, scenario_main
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.projection_sim import ProjectionPlant
from cmstack.sim.sensors import ActuatedSensing, Encoders, JointServo
from cmstack.sim.urdf_plant import plant_from_urdf

NAME = "closed_chain"
TARGETS = dict(
    ee_error_max_m=1e-4, loop_residual_max_m=1e-6, passive_torque_max_nm=1e-9, dynamics_vs_pinocchio_rel=1e-9
)


def load_robot(cfg) -> Robot:
    path = resolve_asset(cfg["model"])
    if path.suffix.lower() == ".urdf":
        return Robot.from_urdf(path, loops=cfg["loops"] or None)
    if cfg["loops"]:
        raise ConfigError(
            f"loops='{cfg['loops']}' is for a URDF; the MJCF {path.name} declares its loops itself"
        )
    return Robot.from_mjcf(path)


def build_plant(cfg, robot: Robot, out) -> MujocoPlant:
    """The MuJoCo plant of the model file (or of ``plant_mjcf``), its loops closed, saved as plant.xml."""
    if cfg["plant_mjcf"]:
        plant = MujocoPlant(cfg["plant_mjcf"], robot.joint_names, sim_dt=cfg["sim_dt"])
    elif robot.mjcf_path is not None:
        plant = plant_from_mjcf(robot, sim_dt=cfg["sim_dt"], xml_path=out / "plant.xml")
    else:
        plant = plant_from_urdf(robot, sim_dt=cfg["sim_dt"], contacts=False, xml_path=out / "plant.xml")
    plant.reset(robot.q_initial)
    return plant


def mobility(robot: Robot, q) -> int:
    """Degrees of freedom of the closed chain at q: n − rank of the loops' Jacobian."""
    if not robot.loops:
        return robot.nv
    return robot.nv - project(ClosureSet(robot.loops).jacobian(q), 1e-9).rank


def build_reference(cfg, robot: Robot):
    """(mode, coordinates for the law, ee reference t ↦ position or None)."""
    q0 = robot.q_initial
    mode = cfg["coords"]
    if mode == "auto":
        mode = "ee" if mobility(robot, q0) >= 2 else "joints"
    ee = robot.frame_id(cfg["ee_frame"])
    if mode == "ee":
        F0 = robot.update(q0, np.zeros(robot.nv)).frame(ee)
        p0 = F0.p.copy()
        r, om = cfg["radius"], 2 * math.pi * cfg["frequency"]
        # starts at the end effector, x-z plane; ee_rows = "full" also holds its initial orientation (a pose)
        circle = Circle(p0 - np.array([r, 0.0, 0.0]), r, om, R=F0.R.copy())
        task = FrameTask(
            robot, cfg["ee_frame"], circle, kp=cfg["kp"], kd=cfg["kd"], rows=cfg["ee_rows"], name="ee_circle"
        )
        return mode, task, lambda t: circle(t)[0].translation
    act = robot.actuated_joints
    idx = [robot.joint_q_index(n) for n in act]  # (q indices: after a ball joint they differ from v's)
    sin = Sinusoid(q0[idx], cfg["joint_amplitude"], cfg["frequency"])
    return mode, (act, sin), None


def build_law(cfg, robot: Robot, coords):
    if cfg["law"] == "uk":
        # the loops become UK's top level and the passive joints get zero torque by themselves
        # (controllers/udwadia_kalaba.py, "Closed chains"); the coordinates are the level below, Gauss last
        if isinstance(coords, tuple):
            names, ref = coords
            coords = JointTrajectoryTask(
                robot, ref, names, kp=cfg["kp"], kd=cfg["kd"], name="actuated_joints"
            )
        return UdwadiaKalabaController(robot, levels=[[coords]], limits=[], warn_free_dof=False)
    if isinstance(coords, tuple):
        names, ref = coords
        return PIDC(robot, None, names, ref, cfg["kp"], cfg["kd"])
    return PIDC(robot, None, coords)


def build_interfaces(cfg, robot: Robot):
    """(ActuatedSensing or None, JointServo or None) of ``sensors`` and ``command`` (sim/sensors.py)."""
    sensing = servo = None
    if cfg["fault_encoder"] and cfg["sensors"] != "actuated":
        raise ConfigError(
            f"fault_encoder={cfg['fault_encoder']!r} needs sensors='actuated' (the encoders' path)"
        )
    if cfg["sensors"] == "actuated":
        fault = None
        if cfg["fault_encoder"]:
            act = robot.actuated_joints
            if cfg["fault_encoder"] not in act:
                raise ConfigError(f"fault_encoder={cfg['fault_encoder']!r} is not an actuated joint: {act}")
            fault = (act.index(cfg["fault_encoder"]), cfg["fault_t"], cfg["fault_kind"], cfg["fault_size"])
        enc = Encoders(cfg["encoder_counts"], cfg["encoder_noise_q"], cfg["encoder_noise_v"], fault=fault)
        sensing = ActuatedSensing.for_robot(robot, cfg["control_dt"], enc)
    if cfg["command"] == "position":
        servo = JointServo(robot, cfg["control_dt"], pd_hz=cfg["pd_hz"])
    return sensing, servo


def ee_reference_joints(robot: Robot, ref, q_log, t_log, ee: int):
    """The end effector's reference in "joints" mode: its position at the pose assembled with the actuated
    joints at their reference (Newton from the logged pose)."""
    act = robot.actuated_joints
    idx = [robot.joint_q_index(n) for n in act]
    d = robot.model.createData()
    out = np.empty((len(t_log), 3))
    for k, (t, q) in enumerate(zip(t_log, q_log)):
        qr = q.copy()
        qr[idx] = ref(t)[0]
        qr = assemble(robot, qr, fixed=act)
        pin.framesForwardKinematics(robot.model, d, qr)
        out[k] = d.oMf[ee].translation
    return out


#: how the loop overlays are drawn: [size (m), r, g, b, a] (sim/viewer.py: MeshcatViewer.apply_styles)
LOOP_FRAME_STYLE = (0.03, 1.0, 1.0, 1.0, 1.0)
LOOP_SEGMENT_STYLE = (0.004, 0.9, 0.1, 0.1, 1.0)


def loop_keys(robot: Robot) -> list[str]:
    """One viewer/log name per loop closure: its name with every run of characters other than letters,
    digits and "_" made "_" (an index is added when two would be the same); None for a joint coupling (no
    frames to draw)."""
    keys = []
    for i, c in enumerate(robot.loops):
        k = re.sub(r"\W+", "_", c.name).strip("_") or f"loop{i}"
        keys.append(k if k not in keys else f"{k}_{i}")
    return [None if c.kind == "joint" else k for k, c in zip(keys, robot.loops)]


def view_styles(keys) -> dict:
    """The ``style__…`` entries of the loop overlays (logged for the replay, applied to a live viewer)."""
    out = {}
    for k in filter(None, keys):
        out[f"style__segment__{k}"] = np.array(LOOP_SEGMENT_STYLE)
        out[f"style__frame__{k}_a"] = out[f"style__frame__{k}_b"] = np.array(LOOP_FRAME_STYLE)
    return out


def loop_overlays(robot: Robot, keys, d, q) -> tuple[dict, dict]:
    """(frames, segments) of the loop closures at configuration q (model order): frame_a·offset and
    frame_b·offset_b as 4×4 poses, and the segment between their origins (Pinocchio data ``d`` is used)."""
    pin.framesForwardKinematics(robot.model, d, q)
    frames, segments = {}, {}
    for k, c in zip(keys, robot.loops):
        if k is None:  # a joint coupling has no frames to draw
            continue
        A, B = d.oMf[c.fa], d.oMf[c.fb]
        frames[f"{k}_a"], frames[f"{k}_b"] = A.homogeneous, B.homogeneous
        segments[k] = np.array([A.translation, B.translation])
    return frames, segments


def view_series(robot: Robot, keys, Q, ee: int, p_ref) -> dict:
    """The viewer's per-step log series of the plant's configurations Q (N×nq, model order)."""
    d = robot.model.createData()
    n = len(Q)
    out = {}
    for k in filter(None, keys):
        out[f"frame__{k}_a"], out[f"frame__{k}_b"] = np.empty((n, 4, 4)), np.empty((n, 4, 4))
        out[f"segment__{k}"] = np.empty((n, 2, 3))
    p = np.empty((n, 3))
    for i, q in enumerate(Q):
        frames, segments = loop_overlays(robot, keys, d, q)
        for name, T in frames.items():
            out[f"frame__{name}"][i] = T
        for name, s in segments.items():
            out[f"segment__{name}"][i] = s
        p[i] = d.oMf[ee].translation
    out["trail__ee"], out["trail__ee_ref"] = p, np.asarray(p_ref, dtype=float)
    return out


def _kkt_accel(robot: Robot, cs: ClosureSet, q, v, tau) -> np.ndarray:
    """q̈ of [M Jᵀ; J 0] [q̈; −λ] = [τ − h − D v; −J̇v] (least squares: a rank-deficient J leaves q̈ unique)."""
    kin = robot.update(q, v)
    J, jdv = cs.rows_from(kin)
    n, m = robot.nv, J.shape[0]
    K = np.block([[kin.M, J.T], [J, np.zeros((m, m))]])
    rhs = np.concatenate([tau - kin.h - robot.damping * v, -jdv])
    return np.linalg.lstsq(K, rhs, rcond=None)[0][:n]


def dynamics_checks(robot: Robot, plant: MujocoPlant, L, n_states: int):
    """(dynamics_vs_pinocchio_rel, plant_vs_rigid_qacc_rel) on ``n_states`` logged states (module docstring)."""
    if not robot.loops or n_states == 0:
        return 0.0, 0.0
    rigid = ProjectionPlant(robot, None, sim_dt=plant.dt)
    cs = ClosureSet(robot.loops)
    d = robot.model.createData()
    # a joint coupling has no Pinocchio constraint model: then the reference is a KKT solve of our own on
    # Pinocchio's M, h and the loops' rows read from Pinocchio's frame Jacobians (``rows_from``), an independent
    # formulation of the projection plant's (22)
    kkt = any(c.kind == "joint" for c in robot.loops)
    if not kkt:
        cms, cds = pinocchio_constraint_models(robot)
        pin.initConstraintDynamics(robot.model, d, cms, cds)
    prox = pin.ProximalSettings(1e-14, 1e-8, 200)
    mj = mujoco.MjData(plant.model)
    rows = np.unique(np.linspace(0, len(L["t"]) - 1, n_states).astype(int))
    pin_rel, mj_rel = [], []
    for k in rows:
        q, v, tau = L["q"][k], L["v"][k], L["tau"][k] * rigid.actuated
        qa = assemble(robot, q)
        va = project(cs.jacobian(qa)).P @ v
        a = rigid.accel(qa, va, tau)
        if kkt:
            a_pin = _kkt_accel(robot, cs, qa, va, tau)
        else:
            a_pin = pin.constraintDynamics(robot.model, d, qa, va, tau - robot.damping * va, cms, cds, prox)
        pin_rel.append(float(np.linalg.norm(a - a_pin) / max(np.linalg.norm(a_pin), 1e-12)))
        mj.qpos[:], mj.qvel[:] = L["plant_qpos"][k], L["plant_qvel"][k]
        mj.ctrl[:] = 0.0
        m = plant.map
        mj.ctrl[m.act[m.actuated]] = tau[m.actuated] / m.gear[m.actuated]
        mujoco.mj_forward(plant.model, mj)
        a_r = rigid.accel(q, v, tau)
        mj_rel.append(float(np.linalg.norm(mj.qacc[m.dadr] - a_r) / max(np.linalg.norm(a_r), 1e-12)))
    return max(pin_rel), float(np.median(mj_rel))


def _ee_track(
    robot: Robot, cs: ClosureSet, ee: int, ee_ref: Callable | None, coords: tuple, L: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """After the loop, from the logged states: the end effector p, its reference p_ref, the error ‖p − p_ref‖
    (m) and the loops' residual max|φ| at every logged step."""
    d = robot.model.createData()
    p = np.empty((len(L["t"]), 3))
    res = np.empty(len(L["t"]))
    for k, q in enumerate(L["q"]):
        pin.framesForwardKinematics(robot.model, d, q)
        p[k] = d.oMf[ee].translation
        res[k] = float(np.max(np.abs(cs.phi(q))))
    if ee_ref is not None:
        p_ref = np.array([ee_ref(t) for t in L["t"]])
    else:
        p_ref = ee_reference_joints(robot, coords[1], L["q"], L["t"], ee)
    return p, p_ref, np.linalg.norm(p - p_ref, axis=1), res


def _rows(m: dict, cfg: dict, mode: str, dyn_rel: float, mj_rel: float) -> list[Row]:
    """The report's rows: each metric beside its target."""
    return [
        Row.at_most("ee_error_max_m", m["ee_error_max_m"], "1e-4", f" (t > {cfg['track_after']:g} s)"),
        Row.at_most("loop_residual_max_m", m["loop_residual_max_m"], "1e-6"),
        Row.at_most("passive_torque_max_nm", m["passive_torque_max_nm"], "1e-9"),
        Row.at_most("dynamics_vs_pinocchio_rel", dyn_rel, "1e-9"),
        Row("plant_vs_rigid_qacc_rel", mj_rel),
        Row("constraint_force_max_n", m["constraint_force_max_n"]),
        Row("coords / dof / loops", f"{mode} / {m['dof']} / {', '.join(m['loops'])}"),
        Row("control_step_us_median", m["control_step_us_median"]),
    ]


def run(ctx) -> Outcome:
    cfg = ctx.cfg
    if not cfg["duration"] > cfg["track_after"]:
        raise ConfigError(f"duration={cfg['duration']} s must exceed track_after={cfg['track_after']} s")
    robot = load_robot(cfg)
    if not robot.loops:
        raise ConfigError(
            f"model {cfg['model']}: no loop closure (an MJCF <equality connect|weld>, or a URDF's "
            "loops sidecar: loops=PATH); closed_chain needs a closed chain"
        )
    plant = build_plant(cfg, robot, ctx.out)
    mode, coords, ee_ref = build_reference(cfg, robot)
    ctl = build_law(cfg, robot, coords)
    ee = robot.frame_id(cfg["ee_frame"])
    cs = ClosureSet(robot.loops)
    passive = ~plant.map.actuated
    log = ctx.logger
    log.meta.update(
        mjcf_path=str(plant.path),
        model_path=str(resolve_asset(cfg["model"])),
        joint_names=np.array(robot.joint_names),
        coords=mode,
        law=cfg["law"],
    )
    viewer = ctx.make_viewer(plant.model)
    keys = loop_keys(robot)
    log.meta.update(view_styles(keys))
    if viewer is not None:
        viewer.apply_styles(view_styles(keys))
        view_data = robot.model.createData()
        qadr = plant.map.qadr

        def ref_point(t, q):
            if ee_ref is not None:
                return ee_ref(t)
            return ee_reference_joints(robot, coords[1], [q], [t], ee)[0]

    nlam = cs.m

    def record(t, q, v, tau):
        info = ctl.info
        react = getattr(ctl, "loop_reaction", None)  # UK: the loops' reaction its torque leaves
        lam = react() if react is not None else getattr(info, "lam", None)
        lam = lam if lam is not None and len(lam) == nlam else np.full(nlam, np.nan)
        log.append_step(t, q, v, tau, plant.data, lam=lam, solvable=float(getattr(info, "solvable", True)))
        if viewer is not None:
            qp = plant.data.qpos[qadr]  # the plant's own state, model order
            frames, segments = loop_overlays(robot, keys, view_data, qp)
            viewer.maybe_update(
                t,
                plant.data.qpos,
                frames=frames,
                segments=segments,
                trails={"ee": view_data.oMf[ee].translation.copy(), "ee_ref": ref_point(t, qp)},
            )

    sensing, servo = build_interfaces(cfg, robot)
    run_ = ctx.simulate(
        plant,
        ctl,
        record,
        desc=NAME,
        log=log,
        sensors=sensing or "full",
        command=servo or "torque",
        # the end effector's target: a run 100x off it for 0.5 s says so (a circle out of reach)
        error_targets={"ee_circle": TARGETS["ee_error_max_m"]} if mode == "ee" else None,
    )
    L = log.arrays()
    p, p_ref, err, res = _ee_track(robot, cs, ee, ee_ref, coords, L)
    log.put("ee", p)
    log.put("ee_ref", p_ref)
    log.put("ee_error", err)
    log.put("loop_residual", res)
    for k, series in view_series(robot, keys, L["plant_qpos"][:, plant.map.qadr], ee, p_ref).items():
        log.put(k, series)
    L = log.arrays()
    late = L["t"] > cfg["track_after"]
    dyn_rel, mj_rel = dynamics_checks(robot, plant, L, cfg["check_states"])
    lam = L["lam"]
    m = dict(
        model=str(cfg["model"]),
        law=cfg["law"],
        coords=mode,
        dof=mobility(robot, robot.q_initial),
        loops=[f"{c.name}:{c.kind}" for c in robot.loops],
        passive_joints=list(robot.passive_joints),
        ee_error_max_m=float(err[late].max()),
        ee_error_rms_m=float(np.sqrt(np.mean(err[late] ** 2))),
        loop_residual_max_m=float(res.max()),
        plant_equality_violation_max=float(np.max(plant.equality_violations(L["plant_qpos"]))),
        passive_torque_max_nm=float(np.abs(L["tau"][:, passive]).max()) if passive.any() else 0.0,
        dynamics_vs_pinocchio_rel=dyn_rel,
        plant_vs_rigid_qacc_rel=mj_rel,
        constraint_force_max_n=float(np.nanmax(np.abs(lam))) if np.isfinite(lam).any() else float("nan"),
        unsolvable_steps=int(getattr(ctl, "unsolvable_steps", 0)),
        motor_saturations=plant.saturated,
        max_torque_nm=float(np.abs(L["tau"]).max()),
        control_step_us_median=run_.step_us_median,
        realtime_factor=run_.realtime_factor,
        sensors=cfg["sensors"],
        command=cfg["command"],
    )
    if sensing is not None:
        m.update(sensing.metrics())
    if servo is not None:
        m.update(pd_torque_max=servo.pd_torque_max, pd_kp=servo.kp.tolist(), pd_kd=servo.kd.tolist())
    rows = _rows(m, cfg, mode, dyn_rel, mj_rel)
    if sensing is not None:
        rows.append(Row("reconstruction_us_median", m["reconstruction_us_median"]))
        rows.append(Row("reconstruction_error_q_max", m["reconstruction_error_q_max"]))
    plots = make_plots(ctx, L, robot, passive, cfg) if ctx.drawing else []
    return Outcome(m, rows, plots)


#: the components of a closure's rows, in the order of its rows (``models/_loop_kernels.py``: the position
#: rows, then the rotation rows); a multiplier of a position row is a force [N], of a rotation row a
#: moment [N·m]
COMPONENTS = {
    "point": ("f_x", "f_y", "f_z"),
    "weld": ("f_x", "f_y", "f_z", "m_x", "m_y", "m_z"),
    "revolute": ("f_x", "f_y", "f_z", "m_1", "m_2"),
    "plane": ("f_n",),
}


def multiplier_labels(loops, n: int) -> list[tuple[int, int, str]]:
    """(loop index, component index, legend label) of each of the n multiplier columns, in the loops'
    row order; generic labels λ_k if the loops' rows do not add up to n."""
    out = []
    for k, c in enumerate(loops):
        comps = COMPONENTS.get(c.kind, ())
        if len(comps) != getattr(c, "m", len(comps)):
            comps = tuple(f"row {r}" for r in range(c.m))
        out += [(k, r, f"{c.name} {x}") for r, x in enumerate(comps)]
    if len(out) != n:
        return [(0, j, f"λ_{j}") for j in range(n)]
    return out


def make_plots(ctx, L, robot, passive, cfg):
    plt = ctx.pyplot()
    paths = []
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
    ax[0].plot(L["ee_ref"][:, 0], L["ee_ref"][:, 2], "k--", lw=1, label="reference")
    ax[0].plot(L["ee"][:, 0], L["ee"][:, 2], lw=1.2, label="end effector (plant)")
    ax[0].set_xlabel("x [m]")
    ax[0].set_ylabel("z [m]")
    ax[0].set_aspect("equal", adjustable="datalim")
    ax[0].legend(fontsize=8)
    ax[0].set_title(f"{cfg['ee_frame']} in the x-z plane")
    ax[1].semilogy(L["t"], L["ee_error"] + 1e-12, label="|ee − reference| [m]")
    ax[1].semilogy(L["t"], L["loop_residual"] + 1e-15, label="loop residual max |φ| [m, rad]")
    ax[1].axvline(cfg["track_after"], color="grey", ls=":", lw=0.8)
    ax[1].set_xlabel("t [s]")
    ax[1].legend(fontsize=8)
    fig.suptitle(f"closed_chain: {cfg['model']} ({cfg['law']})")
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "tracking"))

    fig, ax = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for i, n in enumerate(robot.joint_names):
        if not passive[i]:
            ax[0].plot(L["t"], L["tau"][:, i], label=n)
    ax[0].set_ylabel("actuated τ [N·m]")
    ax[0].legend(fontsize=7, ncol=3)
    lam = np.asarray(L["lam"], dtype=float).reshape(len(L["t"]), -1)
    labels = multiplier_labels(robot.loops, lam.shape[1])
    styles = ["-", "--", ":", "-.", (0, (5, 1)), (0, (1, 1))]
    for j, (loop_k, comp_k, text) in enumerate(labels):  # one colour per loop, one dash per component
        ax[1].plot(
            L["t"], lam[:, j], lw=0.8, color=f"C{loop_k % 10}", ls=styles[comp_k % len(styles)], label=text
        )
    ax[1].set_ylabel("loop multipliers λ [N, N·m]")
    ax[1].set_xlabel("t [s]")
    if labels:
        ax[1].legend(fontsize=6, ncol=min(6, max(1, len(labels) // 2)), loc="upper right")
    fig.suptitle(
        f"closed_chain: {cfg['model']} ({cfg['law']}): actuated torques and the loops' constraint "
        "forces (f [N], m [N·m])"
    )
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "torques_forces"))
    return paths


if __name__ == "__main__":
    raise SystemExit(scenario_main(NAME, run))
