"""Dual-arm YuMi closed chain under the prioritized Udwadia–Kalaba law (thesis seed 002, §4.4).

The left hand E1 follows a circle while the right hand E2 keeps the rigid-body coupling
E1·T_A^B = E2 — imposed by the controller alone (plant=virtual, as in the thesis) or by a real bar
welded to both hands (plant=bar).  Prints its metrics beside the thesis' figures.
"""
from __future__ import annotations

import numpy as np
import pinocchio as pin

from cmstack.models.coupling import FrameTask, RigidCoupling, circle_trajectory
from cmstack.models.errors import ConfigError, InfeasibleError
from cmstack.models.lie import jr_inv
from cmstack.models.robot import Robot
from cmstack.scenarios._common import Outcome, Row, scenario_main
from cmstack.sim.perturb import apply_perturbation
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.runner import Disturbance, run_closed_loop

NAME = "yumi_dual_arm"
APPLIES_PERTURBATION = True      # the [perturbation] table (sim/perturb.py) acts on this scenario's plant

# Thesis §4.4 reported figures (shared/reference/yumi.md)
PAPER = dict(constraint_error_initial=0.284, task_error_initial=0.345, constraint_error_converged=0.0017,
             task_error_converged=0.0062, settling_time_s=0.75)


# ------------------------------------------------------------------------------------- building
def build_problem(cfg: dict, robot: Robot):
    """The coupling constraint and the E1 task of §4.4 from the config."""
    T_AB = pin.SE3(np.array(cfg["T_AB_rotation"], dtype=float), np.array(cfg["T_AB_translation"], dtype=float))
    if not np.allclose(T_AB.rotation.T @ T_AB.rotation, np.eye(3), atol=1e-9):
        raise ConfigError("T_AB_rotation is not a rotation matrix (RᵀR ≠ I)")
    coupling = RigidCoupling(robot, cfg["frame1"], cfg["frame2"], T_AB, cfg["constraint_kp"], cfg["constraint_kd"],
                             rows=cfg["coupling_rows"], name="coupling")
    traj = circle_trajectory(cfg["traj_center"], cfg["traj_radius"], cfg["traj_omega"], cfg["traj_phase"])
    task = FrameTask(robot, cfg["frame1"], traj, cfg["task_kp"], cfg["task_kd"], name="E1")
    return coupling, task, traj, T_AB


def build_uk(cfg, robot, coupling, task):
    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController

    return UdwadiaKalabaController(robot, [coupling], [task], omega=cfg["omega"], priority=cfg["priority"],
                                   torque_limits=cfg["torque_limits"], model_damping=cfg["model_damping"])


def build_pidc_force(cfg, robot, coupling, task):
    from cmstack.controllers.pidc_adapters import build_yumi_force   # hybrid PIDC of seed 004 (issue 4)

    return build_yumi_force(cfg, robot, coupling, task)


# name → builder(cfg, robot, coupling, task) -> controller(t, q, v) -> τ.  Other laws register here.
def build_uk_robust(cfg, robot, coupling, task):
    from cmstack.controllers.uk_robust import build_yumi   # the thesis law + integral action on the coupling

    return build_yumi(cfg, robot, coupling, task)


CONTROLLERS = {"uk": build_uk, "pidc_force": build_pidc_force, "uk_robust": build_uk_robust}


def initial_state(cfg: dict, robot: Robot) -> np.ndarray:
    names, vals = cfg["q0_joints"], cfg["q0"]
    if len(names) != len(vals):
        raise ConfigError(f"q0 has {len(vals)} values but q0_joints names {len(names)} joints")
    return robot.q_from_names(dict(zip(names, vals)))


def close_loop(robot: Robot, coupling: RigidCoupling, q: np.ndarray, tol: float = 1e-12, iters: int = 50):
    """Project q onto the coupling manifold e(q) = 0 by minimum-norm Newton steps
    Δq = −J_e⁺ e,  J_e = [W_lin; J_r⁻¹(e_ang) W_ang]  (ė = J_e v, thesis (3.22))."""
    q = q.copy()
    for _ in range(iters):
        kin = robot.update(q, np.zeros(robot.nv))
        W, _, _, e = coupling.terms(kin, 0.0)
        if np.linalg.norm(e) < tol:
            return q
        Je = np.vstack([W[:3], jr_inv(e[3:]) @ W[3:]])
        q = q - np.linalg.lstsq(Je, e, rcond=None)[0]
    raise InfeasibleError(f"could not close the bar's loop from q0 (‖e_c‖ = {np.linalg.norm(e):.3g} after "
                          f"{iters} Newton steps); the arms cannot reach E1·T_A^B = E2 near q0")


# ------------------------------------------------------------------------------------- running
def run(ctx) -> Outcome:
    cfg = ctx.cfg
    if cfg["plant"] not in ("virtual", "bar"):
        raise ConfigError(f"plant='{cfg['plant']}' is not one of ['virtual', 'bar']")
    if cfg["controller"] not in CONTROLLERS:
        raise ConfigError(f"controller='{cfg['controller']}' is not one of {sorted(CONTROLLERS)}")
    robot = Robot(cfg["urdf"])
    coupling, task, traj, T_AB = build_problem(cfg, robot)
    controller = CONTROLLERS[cfg["controller"]](cfg, robot, coupling, task)

    sim_dt = cfg["sim_dt"] if cfg["sim_dt"] > 0 else cfg["control_dt"]
    mjcf = cfg["mjcf_bar"] if cfg["plant"] == "bar" else cfg["mjcf_virtual"]
    plant = MujocoPlant(mjcf, robot.joint_names, sim_dt=sim_dt, integrator=cfg["integrator"],
                        noise_q=cfg["noise_q"], noise_v=cfg["noise_v"], seed=cfg["seed"])
    plant = apply_perturbation(plant, cfg)     # identity when [perturbation] is all off
    q0 = initial_state(cfg, robot)
    if cfg["plant"] == "bar":
        q0 = close_loop(robot, coupling, q0)   # a physical bar: the initial state must be closed
    plant.reset(q0)
    if hasattr(controller, "attach_plant"):   # a controller with a force sensor reads it from the plant
        controller.attach_plant(plant)
    disturbances = []
    if cfg["disturbance_body"]:
        plant.body_id(cfg["disturbance_body"])
        disturbances.append(Disturbance(cfg["disturbance_body"], cfg["disturbance_t0"], cfg["disturbance_t1"],
                                        tuple(cfg["disturbance_force"]), tuple(cfg["disturbance_moment"])))

    log = ctx.logger
    log.meta.update(mjcf_path=str(plant.path), urdf_path=str(robot.path), joint_names=np.array(robot.joint_names))
    fid1 = robot.frame_id(cfg["frame1"])
    fid2 = robot.frame_id(cfg["frame2"])
    viewer = ctx.make_viewer(plant.model)

    def record(t, q, v, tau):
        q, v = plant.state(noisy=False)    # log the real state: errors are the plant's, not the noisy measurement's
        kin = getattr(controller, "kin", None)
        if kin is None or kin.q is None or not np.array_equal(kin.q, q):
            kin = robot.update(q, v)
        ec, eu = coupling.error(kin, t), task.error(kin, t)
        E1, E2 = kin.frame(fid1).T, kin.frame(fid2).T
        TD = traj(t)[0]
        EB = (E1 * T_AB).translation          # the coupling body as E1 holds it: from E1 to E1·T_A^B (where E2 should be)
        info = getattr(controller, "info", None)
        Qc = info.Qc if info is not None and info.Qc is not None else np.zeros(robot.nv)
        log.append(t=t, q=q, v=v, tau=tau, e_c=ec, e_u=eu, Qc=Qc, qp_iter=getattr(info, "qp_iter", 0), p_E1=E1.translation, p_D=TD.translation,
                   plant_qpos=plant.data.qpos, frame__E1=E1.homogeneous, frame__E2=E2.homogeneous,
                   frame__desired=TD.homogeneous, trail__E1=E1.translation, segment__coupling=np.array([E1.translation, EB]),
                   weld_violation=plant.equality_violation() if cfg["plant"] == "bar" else 0.0)
        if viewer is not None:
            viewer.maybe_update(t, plant.data.qpos, frames={"E1": E1, "E2": E2, "desired": TD},
                                trails={"E1": E1.translation}, segments={"coupling": (E1.translation, EB)})

    res = run_closed_loop(plant, controller, duration=cfg["duration"], control_dt=cfg["control_dt"],
                          record=record, disturbances=disturbances, progress=ctx.progress,
                          desc=f"{NAME} ({cfg['plant']}, {cfg['priority']})")
    L = log.arrays()
    return summarize(ctx, cfg, L, res, controller, plant)


def summarize(ctx, cfg, L, res, controller, plant) -> Outcome:
    t = L["t"]
    nec = np.linalg.norm(L["e_c"], axis=1)
    neu = np.linalg.norm(L["e_u"], axis=1)
    late = t > cfg["converge_after"]
    above = np.flatnonzero(neu >= cfg["settle_threshold"])
    settling = float(t[above[-1] + 1]) if above.size and above[-1] + 1 < t.size else (0.0 if not above.size else float("nan"))
    offset = (L["p_D"] - L["p_E1"])[late].mean(axis=0) if late.any() else np.full(3, np.nan)
    m = dict(plant=cfg["plant"], controller=cfg["controller"], priority=cfg["priority"],
             duration_s=float(cfg["duration"]), control_dt_s=cfg["control_dt"],
             constraint_error_initial=float(nec[0]), task_error_initial=float(neu[0]),
             constraint_error_converged=float(nec[late].mean()) if late.any() else float("nan"),
             task_error_converged=float(neu[late].mean()) if late.any() else float("nan"),
             settling_time_s=settling, max_torque_nm=float(np.abs(L["tau"]).max()),
             qp_failures=int(getattr(controller, "failures", 0)),
             control_step_us_median=res.step_us_median,
             position_offset_x_m=offset[0], position_offset_y_m=offset[1], position_offset_z_m=offset[2],
             torque_saturations=plant.saturated)
    m.update(getattr(plant, "metrics", dict)())                # what a [perturbation] did, if any
    m.update(getattr(controller, "extra_metrics", dict)())   # e.g. the squeeze force of pidc_force
    if cfg["plant"] == "bar":
        m["loop_closure_error_max_m"] = float(L["weld_violation"].max())
    rows = [Row("constraint_error_initial", m["constraint_error_initial"], PAPER["constraint_error_initial"],
                "within 1 %" if cfg["plant"] == "virtual" else "closed by the bar",
                abs(m["constraint_error_initial"] / PAPER["constraint_error_initial"] - 1) <= 0.01
                if cfg["plant"] == "virtual" else None),
            Row("task_error_initial", m["task_error_initial"], PAPER["task_error_initial"], "within 1 %",
                abs(m["task_error_initial"] / PAPER["task_error_initial"] - 1) <= 0.01
                if cfg["plant"] == "virtual" else None)]
    strict = cfg["priority"] == "strict"
    lim_c = 1e-5 if strict else (1e-4 if cfg["plant"] == "virtual" else 1e-3)
    lim_u = 1e-5 if strict else 0.0062
    full = cfg["duration"] >= cfg["converge_after"] + 0.25
    rows += [Row("constraint_error_converged", m["constraint_error_converged"], PAPER["constraint_error_converged"],
                 f"<= {lim_c:g}", m["constraint_error_converged"] <= lim_c if full else None),
             Row("task_error_converged", m["task_error_converged"], PAPER["task_error_converged"],
                 f"<= {lim_u:g}", m["task_error_converged"] <= lim_u if full else None),
             Row("settling_time_s", m["settling_time_s"], PAPER["settling_time_s"]),
             Row("position_offset_m", np.array2string(offset, precision=5), "(0.0008, -0.0002, 0.0051)"),
             Row("qp_failures", m["qp_failures"], None, "0", m["qp_failures"] == 0),
             Row("max_torque_nm", m["max_torque_nm"]),
             Row("control_step_us_median", m["control_step_us_median"], None, "<= 150 (bench/)")]
    if "squeeze_force_error_rel" in m:
        rows.append(Row("squeeze_force_error_rel", m["squeeze_force_error_rel"], None, "<= 0.02",
                        m["squeeze_force_error_rel"] <= 0.02 if full else None))
    if "loop_closure_error_max_m" in m:
        rows.append(Row("loop_closure_error_max_m", m["loop_closure_error_max_m"]))
    plots = make_plots(ctx, t, L, cfg, controller.robot.joint_names if hasattr(controller, "robot") else None)
    return Outcome(m, rows, plots)


def make_plots(ctx, t, L, cfg, joint_names=None):
    plt = ctx.pyplot()

    paths = []
    fig, ax = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for i, c in enumerate("xyz"):
        ax[i].plot(t, L["p_D"][:, i], "k--", label="desired")
        ax[i].plot(t, L["p_E1"][:, i], label="E1")
        ax[i].set_ylabel(f"{c} [m]")
    ax[0].legend()
    ax[-1].set_xlabel("t [s]")
    fig.suptitle(f"E1 tracking ({cfg['plant']} plant, {cfg['priority']} priority) — cf. thesis Fig. 4.3")
    paths.append(ctx.save_figure(fig, "tracking"))

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.semilogy(t, np.linalg.norm(L["e_c"], axis=1) + 1e-16, label="‖e_c‖ coupling")
    ax.semilogy(t, np.linalg.norm(L["e_u"], axis=1) + 1e-16, label="‖e_u‖ task (E1)")
    ax.axvline(cfg["converge_after"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("error norm")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("Constraint and task errors — cf. thesis Figs. 4.4–4.5")
    paths.append(ctx.save_figure(fig, "errors"))

    fig, ax = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax[0].plot(t, L["v"])
    ax[0].set_ylabel("v [rad/s]")
    ax[1].plot(t, L["tau"])
    ax[1].set_ylabel("τ [N·m]")
    ax[1].set_xlabel("t [s]")
    if joint_names is not None:
        short = [n.replace("yumi_joint_", "j") for n in joint_names]
        fig.legend(ax[1].get_lines(), short, loc="center right", fontsize=7, ncol=1)
        fig.subplots_adjust(right=0.86)
    fig.suptitle("Joint velocities and torques — cf. thesis Fig. 4.6")
    paths.append(ctx.save_figure(fig, "velocities_torques"))

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.semilogy(t, np.linalg.norm(L["Qc"], axis=1) + 1e-16, label="‖Q_c‖ (3.10), coupling force")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("‖Q_c‖ [N·m]")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("Generalized force of the hard coupling constraint")
    paths.append(ctx.save_figure(fig, "constraint_force"))

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot(L["p_D"][:, 0], L["p_D"][:, 2], "k--", label="desired")
    ax.plot(L["p_E1"][:, 0], L["p_E1"][:, 2], label="E1")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("z [m]")
    ax.set_aspect("equal")
    ax.legend()
    ax.set_title("E1 path in the x–z plane")
    paths.append(ctx.save_figure(fig, "path_xz"))
    return paths


def main(argv=None) -> int:
    return scenario_main(NAME, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
