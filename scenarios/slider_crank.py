"""Slider-crank ([Aghili] §8) driven by PIDC through its singularity, on the MuJoCo and the projection plants.

Four runs, one table:
1. PIDC (passive rod, closed form (60–62) or the QP) on the projection simulator (22)+(39):
   singular crossings, max |φ| after Newton–Raphson, tracking.
2. The same controller on the MuJoCo plant (slider on a rail, loop closed by a connect equality):
   crank tracking RMSE after ``track_after``.
3. The torques of run 1, replayed open loop on MuJoCo for ``compare_duration``: max |q_mj − q_proj|.
4. Unforced, undamped projection run of ``energy_duration``: relative energy drift.

The mechanism is read from its model file like every closed chain (issue 23): ``Robot.from_urdf(cfg["urdf"],
loops=cfg["loops"])``, the URDF (crank and rod, the chain cut open at the slider C) and its sidecar
(urdf/slider_crank.loops.toml: the rail as one ``plane`` closure, C on z = 0, whose row is [Aghili] (67)-(69);
the rod passive).  PIDC and both projection plants take ``robot.loops``; PIDC's step is the compiled
closed-chain step (``controllers/pidc_plan.py``).

The MuJoCo run (2.) also reports, as every scenario with a MuJoCo loop does (issue 23): ``loop_residual_max_m``,
max |φ(q)| of the controller's loop (the rod's end on the rail, m) on the plant's states over the run, and
``plant_vs_rigid_qacc_rel``, the median of ‖q̈_MuJoCo − q̈_rigid‖/‖q̈_rigid‖ over (crank, rod) on 20 logged
states, the rigid q̈ that of the same plant with its connect made rigid (scenarios/_plant_loops.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pinocchio as pin

from cmstack.controllers.pidc import PIDC
from cmstack.models.errors import ConfigError
from cmstack.models.loops import ClosureSet
from cmstack.models.projection import KINDS, project
from cmstack.models.robot import Robot
from cmstack.models.trajectory import FromFunction
from cmstack.scenarios._common import Outcome, Row, load_kernels, scenario_main
from cmstack.scenarios._plant_loops import check_rows, plant_vs_rigid_qacc_rel
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.projection_sim import ProjectionPlant

NAME = "slider_crank"
TARGETS = dict(
    singular_crossings=10,
    constraint_error_max=1e-9,
    energy_drift_rel=1e-4,
    mujoco_vs_projection_max_rad=1e-3,
    tracking_rmse_rad=1e-3,
)


def crank_reference(omega: float, T: float):
    """θ_d = ω (t − T(1 − e^{−t/T})): starts at rest, reaches ω smoothly in velocity."""
    if not T > 0:
        raise ConfigError(f"spinup_time must be > 0, got {T}")

    def ref(t):
        e = math.exp(-t / T)  # floats (one coordinate): a control step calls it once
        return omega * (t - T * (1 - e)), omega * (1 - e), omega / T * e

    return FromFunction(ref)


def load_robot(cfg) -> Robot:
    """The slider-crank from its URDF and loops sidecar: joints (crank, rod), the rail a ``plane`` closure, the rod
    passive; anything else is refused in one line naming the files."""
    robot = Robot.from_urdf(cfg["urdf"], loops=cfg["loops"])
    kinds = [c.kind for c in robot.loops]
    if robot.joint_names != ["crank", "rod"] or robot.passive_joints != ["rod"] or kinds != ["plane"]:
        raise ConfigError(
            f"{cfg['urdf']} with {cfg['loops']}: expected the joints ['crank', 'rod'] (rod passive) and "
            f"one plane closure (the rail), got {robot.joint_names} (passive {robot.passive_joints}) "
            f"and {kinds}"
        )
    return robot


def build_controller(cfg, robot):
    """PIDC on the crank angle with the robot's loop (the rail) and passive rod."""
    if cfg["controller"] not in ("pidc", "pidc_qp"):
        raise ConfigError(f"controller='{cfg['controller']}' is not one of ['pidc', 'pidc_qp']")
    return PIDC(
        robot,
        None,
        ["crank"],
        crank_reference(cfg["crank_speed"], cfg["spinup_time"]),
        cfg["kp"],
        cfg["kv"],
        qp=cfg["controller"] == "pidc_qp",
        rank_tol=cfg["rank_tol_controller"],
        torque_limits=[cfg["crank_torque_limit"], 0.0] if cfg["controller"] == "pidc_qp" else None,
    )


def count_crossings(theta1: np.ndarray) -> int:
    """Passages of θ₁ through ±π/2 (mod 2π) — on the normal branch θ₂ = −2θ₁ these are the singular
    configurations θ₁ = ±π/2, θ₂ = π of (65)."""
    c = np.cos(theta1)
    return int(np.count_nonzero(np.sign(c[1:]) != np.sign(c[:-1])))


def mujoco_plant(cfg, robot):
    return MujocoPlant(cfg["mjcf"], robot.joint_names, sim_dt=cfg["sim_dt_mujoco"], plant_only=("slider",))


def slider_x(robot, q) -> float:
    """x of the rod's tip C (the frame ``slider_point``) at q (m)."""
    d = robot.model.createData()  # not the robot's data (the controllers' snapshot)
    pin.framesForwardKinematics(robot.model, d, np.asarray(q, dtype=float))
    return float(d.oMf[robot.frame_id("slider_point")].translation[0])


def mujoco_reset(plant, q, robot):
    """Put the slider at C (its body sits at C's x at q = 0 when its qpos = 0)."""
    plant.reset(q, qpos_extra={"slider": slider_x(robot, q) - slider_x(robot, np.zeros(robot.nq))})


def projection_plant(cfg: dict, robot: Robot, **kw: Any) -> ProjectionPlant:
    """The projection simulator of the config (``sim_dt_projection`` [s], ``formulation``, ``rank_tol_sim``,
    ``nr_tol``) on ``robot``; ``kw``: ProjectionPlant's other options (damping)."""
    return ProjectionPlant(
        robot,
        None,
        sim_dt=cfg["sim_dt_projection"],
        kind=cfg["formulation"],
        rank_tol=cfg["rank_tol_sim"],
        nr_tol=cfg["nr_tol"],
        **kw,
    )


def run(ctx) -> Outcome:
    cfg = ctx.cfg
    if cfg["formulation"] not in KINDS:
        raise ConfigError(f"formulation='{cfg['formulation']}' is not one of {list(KINDS)}")
    if not cfg["duration"] > cfg["track_after"]:
        raise ConfigError(
            f"duration={cfg['duration']} s must exceed track_after={cfg['track_after']} s "
            "(the tracking metrics are taken after it); lengthen the run or lower track_after"
        )
    robot = load_robot(cfg)
    loop = ClosureSet(robot.loops)  # φ and A of the logged states (its own Pinocchio data)
    mj = mujoco_plant(cfg, robot)  # built first: a bad MJCF is refused before any simulation
    q0 = np.zeros(2)
    log = ctx.logger

    # 1. projection simulator, closed loop --------------------------------------------------------
    proj = projection_plant(cfg, robot)
    proj.reset(q0)
    ctl_p = build_controller(cfg, robot)
    ref = ctl_p.ref
    P_rows = {"t": [], "q": [], "tau": []}

    def rec_p(t, q, v, tau):
        P_rows["t"].append(t)
        P_rows["q"].append(q)
        P_rows["tau"].append(tau)

    # the compiled kernels are loaded before the timed loops, by a throwaway controller of the same config
    load_kernels(lambda: build_controller(cfg, robot), 0.0, *proj.state())
    res_p = ctx.simulate(proj, ctl_p, rec_p, desc=f"{NAME} (projection plant)")
    Pt, Pq, Ptau = np.array(P_rows["t"]), np.array(P_rows["q"]), np.array(P_rows["tau"])
    # after the loop, from the logged states: max |φ(q)| and the smallest singular value of the loop
    # Jacobian at every step (proj.equality_violation() is max |φ| at the plant's q)
    phi = [float(np.max(np.abs(loop.phi(q)))) for q in Pq]
    P_rows["sigma"] = [project(loop.jacobian(q)).sigma[0] for q in Pq]
    phi_max = max(float(np.max(phi)), proj.equality_violation())

    # 2. MuJoCo plant, closed loop -----------------------------------------------------------------
    mujoco_reset(mj, q0, robot)
    ctl_m = build_controller(cfg, robot)
    log.meta.update(
        mjcf_path=str(mj.path), urdf_path=str(robot.path), joint_names=np.array(robot.joint_names)
    )
    viewer = ctx.make_viewer(mj.model)

    def rec_m(t, q, v, tau):
        log.append_step(t, q, v, tau, mj.data, solvable=float(ctl_m.info.solvable))
        if viewer is not None:
            viewer.maybe_update(t, mj.data.qpos)

    res_m = ctx.simulate(mj, ctl_m, rec_m, desc=f"{NAME} (MuJoCo plant)", log=log)
    # after the loop, from the logged states: the reference, the tracking error, the loop's violation
    L = log.arrays()
    th_d = np.array([ref(t)[0] for t in L["t"]], dtype=float)
    trail = np.zeros((len(th_d), 3))
    trail[:, 0] = L["plant_qpos"][:, 2] + slider_x(robot, np.zeros(robot.nq))
    for k, x in (
        ("theta_d", th_d),
        ("e_theta", th_d - L["q"][:, 0]),
        ("loop_violation", mj.equality_violations(L["plant_qpos"])),
        ("trail__C", trail),
    ):
        log.put(k, x)
    L = log.arrays()
    plant_q = L["plant_qpos"][:, mj.map.qadr]  # the plant's (crank, rod), model order
    loop_residual = float(max(np.max(np.abs(loop.phi(q))) for q in plant_q))
    picks = check_rows(len(L["t"]))
    qacc_rel = plant_vs_rigid_qacc_rel(mj, L["plant_qpos"][picks], L["plant_qvel"][picks], L["tau"][picks])

    # 3. same torques on both plants ---------------------------------------------------------------
    n_cmp = int(round(min(cfg["compare_duration"], cfg["duration"]) / cfg["control_dt"]))
    mj2 = mujoco_plant(cfg, robot)
    mujoco_reset(mj2, q0, robot)
    n_sub = int(round(cfg["control_dt"] / mj2.dt))
    dev = np.zeros(n_cmp)
    for k in range(n_cmp):
        dev[k] = np.abs(mj2.state()[0] - Pq[k]).max()
        mj2.set_torque(Ptau[k])
        mj2.step(n_sub)
    log.meta.update(compare_t=Pt[:n_cmp], compare_dev_rad=dev)

    # 4. energy ------------------------------------------------------------------------------------
    en = projection_plant(cfg, robot, damping=False)
    en.reset(q0, np.array([1.0, -2.0]) * cfg["energy_crank_speed"])
    E0 = en.energy()
    n_en = int(round(cfg["energy_duration"] / en.dt))
    E, th_en = np.empty(n_en), np.empty(n_en)
    for k in range(n_en):
        en.step(1)
        E[k], th_en[k] = en.energy(), en.q[0]
    drift = float(np.abs(E - E0).max() / abs(E0))
    log.meta.update(energy_t=np.arange(1, n_en + 1) * en.dt, energy=E)

    late_p, late_m = Pt > cfg["track_after"], L["t"] > cfg["track_after"]
    e_p = np.array([ref(t)[0] for t in Pt], dtype=float) - Pq[:, 0]
    m = dict(
        controller=cfg["controller"],
        duration_s=float(cfg["duration"]),
        singular_crossings=count_crossings(Pq[:, 0]),
        singular_crossings_mujoco=count_crossings(L["q"][:, 0]),
        constraint_error_max=phi_max,
        min_singular_value=float(np.min(P_rows["sigma"])),
        rank_drop_steps=proj.rank_drops,
        energy_drift_rel=drift,
        energy_run_crossings=count_crossings(th_en),
        mujoco_vs_projection_max_rad=float(dev.max()),
        tracking_rmse_rad=float(np.sqrt(np.mean(L["e_theta"][late_m] ** 2))),
        tracking_max_rad=float(np.abs(L["e_theta"][late_m]).max()),
        tracking_rmse_projection_rad=float(np.sqrt(np.mean(e_p[late_p] ** 2))),
        unsolvable_steps_projection=ctl_p.unsolvable_steps,
        unsolvable_steps_mujoco=ctl_m.unsolvable_steps,
        saturated_steps_qp=ctl_m.saturated_steps,
        motor_saturations_mujoco=mj.saturated,
        loop_violation_max_mujoco_m=float(L["loop_violation"].max()),
        loop_residual_max_m=loop_residual,
        plant_vs_rigid_qacc_rel=qacc_rel,
        max_torque_nm=float(np.abs(L["tau"]).max()),
        control_step_us_median=res_m.step_us_median,
        control_step_us_median_projection=res_p.step_us_median,
        # both closed loops (projection plant, MuJoCo plant): simulated time / their wall time
        realtime_factor=(res_p.simulated_s + res_m.simulated_s) / (res_p.wall_s + res_m.wall_s),
        realtime_factor_projection=res_p.realtime_factor,
        realtime_factor_mujoco=res_m.realtime_factor,
    )
    full = cfg["duration"] >= 5.5
    rows = [
        Row(
            "singular_crossings",
            m["singular_crossings"],
            None,
            ">= 10",
            m["singular_crossings"] >= 10 if full else None,
        ),
        Row(
            "constraint_error_max",
            m["constraint_error_max"],
            None,
            "<= 1e-9",
            m["constraint_error_max"] <= 1e-9,
        ),
        Row(
            "energy_drift_rel",
            drift,
            None,
            "<= 1e-4",
            drift <= 1e-4 if cfg["energy_duration"] >= 10 else None,
        ),
        Row(
            "mujoco_vs_projection_max_rad",
            m["mujoco_vs_projection_max_rad"],
            None,
            "<= 1e-3 (first 2 s)",
            m["mujoco_vs_projection_max_rad"] <= 1e-3,
        ),
        Row(
            "tracking_rmse_rad",
            m["tracking_rmse_rad"],
            None,
            "<= 1e-3 (MuJoCo, t > 1 s)",
            m["tracking_rmse_rad"] <= 1e-3,
        ),
        Row("tracking_rmse_projection_rad", m["tracking_rmse_projection_rad"]),
        Row("singular_crossings_mujoco", m["singular_crossings_mujoco"]),
        Row("unsolvable_steps (proj / MuJoCo)", f"{ctl_p.unsolvable_steps} / {ctl_m.unsolvable_steps}"),
        Row("loop_violation_max_mujoco_m", m["loop_violation_max_mujoco_m"]),
        Row("loop_residual_max_m", loop_residual, None, "report (MuJoCo plant)"),
        Row("plant_vs_rigid_qacc_rel", qacc_rel, None, "report (MuJoCo plant, median of 20 states)"),
        Row("control_step_us_median", m["control_step_us_median"], None, "(bench/projection.py)"),
        Row("realtime_factor (projection + MuJoCo loops)", m["realtime_factor"], None, "report"),
    ]
    plots = make_plots(ctx, Pt, Pq, e_p, L, dev, log.meta, cfg) if ctx.drawing else []
    return Outcome(m, rows, plots)


def make_plots(ctx, Pt, Pq, e_p, L, dev, meta, cfg):
    plt = ctx.pyplot()

    paths = []
    fig, ax = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    ax[0].plot(L["t"], np.mod(L["q"][:, 0], 2 * np.pi), label="θ₁ mod 2π (MuJoCo)")
    ax[0].plot(L["t"], np.mod(L["q"][:, 1], 2 * np.pi), label="θ₂ mod 2π (MuJoCo)")
    ax[0].axhline(np.pi / 2, color="grey", ls=":", lw=0.8)
    ax[0].axhline(np.pi, color="grey", ls=":", lw=0.8)
    ax[0].set_ylabel("angle [rad]")
    ax[0].legend(loc="upper right", fontsize=8)
    ax[1].semilogy(L["t"], np.abs(L["e_theta"]) + 1e-12, label="MuJoCo")
    ax[1].semilogy(Pt, np.abs(e_p) + 1e-12, label="projection sim", alpha=0.7)
    ax[1].set_ylabel("|θ₁ error| [rad]")
    ax[1].legend(fontsize=8)
    ax[2].plot(L["t"], L["tau"][:, 0])
    ax[2].set_ylabel("crank τ [N·m]")
    ax[2].set_xlabel("t [s]")
    fig.suptitle("PIDC slider-crank through θ₁ = π/2, θ₂ = π ([Aghili] §8)")
    paths.append(ctx.save_figure(fig, "tracking"))

    fig, ax = plt.subplots(2, 1, figsize=(8, 6))
    ax[0].semilogy(meta["compare_t"], meta["compare_dev_rad"] + 1e-16)
    ax[0].set_xlabel("t [s]")
    ax[0].set_ylabel("max |q_MuJoCo − q_proj| [rad]")
    ax[0].set_title("same torques on both plants")
    E = meta["energy"]
    ax[1].plot(meta["energy_t"], (E - E[0]) / abs(E[0]))
    ax[1].set_xlabel("t [s]")
    ax[1].set_ylabel("(E − E₀)/E₀")
    ax[1].set_title("unforced, undamped projection simulator")
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "plants_energy"))
    return paths


if __name__ == "__main__":
    raise SystemExit(scenario_main(NAME, run))
