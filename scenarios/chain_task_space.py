"""DAC law (III) on the MuJoCo 5-body chain: tracking, null-space obstacle avoidance ([Eslami] §4.2).

End-effector tracking with disturbances.

The controller sees body poses and twists (q = [p_i; quat_i], v = ν), computes the port τ_c of law (III)
(51)–(54) with the tensor model, and a RHS map turns it into actuation: thrusters on every body of the
free-floating chain (identity), or motors in the ball joints of the chain welded at body 1 (least-squares
allocation, residual reported).  Keep-out spheres sit near the middle bodies; force/moment pulses disturb
bodies 3 and 5.  Metrics: EE position/attitude error averaged over the last half, the largest rise of
V = ½ sᵀℳs between control samples outside the disturbance windows, and the smallest distance of any
rod axis (all bodies) to a keep-out sphere's surface (the CoM distance, what the paper's U_o sees, as info).
"""

from __future__ import annotations

import math

import numpy as np

from cmstack.controllers.dac import JointActuationMap, Obstacle, TaskSpaceLaw, ThrusterMap, attitude_error
from cmstack.models.errors import ConfigError
from cmstack.models.tensor_chain import ChainState, TensorChain, quat_to_matrix, rot_z
from cmstack.models.trajectory import FromWorldFunction
from cmstack.scenarios._common import Outcome, Row, equal_aspect_3d, load_kernels, scenario_main
from cmstack.scenarios.chain_open_loop import body_names
from cmstack.sim.chain_plant import ChainMujocoPlant
from cmstack.sim.runner import Disturbance

NAME = "chain_task_space"
TARGETS = dict(ee_error_mean_m=1e-3, ee_error_mean_rad=1e-3, min_obstacle_clearance_m=0.0)


def build_model(cfg, fixed_base: bool, base_pose=None) -> TensorChain:
    k = np.asarray(cfg["stiffness"], dtype=float)
    g = np.asarray(cfg["gravity"], dtype=float)
    if k.shape != (3,) or g.shape != (3,):
        raise ConfigError("stiffness and gravity must be 3-vectors")
    kw = dict(fixed_base=True, base_pose=base_pose) if fixed_base else {}
    return TensorChain.rods(
        cfg["n_bodies"],
        cfg["length"],
        cfg["radius"],
        cfg["mass"],
        k,
        gravity=g,
        spring_law=cfg["model_spring_law"],
        **kw,
    )


def initial_state(cfg, chain: TensorChain) -> ChainState:
    bends = np.asarray(cfg["initial_bend_rad"], dtype=float)
    if bends.shape != (chain.n - 1,):
        raise ConfigError(
            f"initial_bend_rad needs one angle per joint ({chain.n - 1}), got {cfg['initial_bend_rad']}"
        )
    n = chain.n
    R = np.empty((n, 3, 3))
    R[0] = np.eye(3)
    for j in range(n - 1):
        R[j + 1] = R[j] @ rot_z(bends[j])
    pos = np.zeros((n, 3))
    for j in range(n - 1):
        pos[j + 1] = pos[j] + R[j] @ chain.joint_parent[j] - R[j + 1] @ chain.joint_child[j]
    from cmstack.models.tensor_chain import quat_from_matrix

    return ChainState(pos, np.array([quat_from_matrix(r) for r in R]), np.zeros(6 * n))


def ee_trajectory(cfg, p0, q0):
    """p_d = p_0 + [0, a_y sin ωt, a_z(1 − cos ωt)], q_d = exp(α sin(ωt) a) ⊗ q_0, with exact derivatives."""
    ay, az, om, al = cfg["amp_y"], cfg["amp_z"], cfg["omega"], cfg["att_amp"]
    ax = np.asarray(cfg["att_axis"], dtype=float)
    if ax.shape != (3,) or np.linalg.norm(ax) == 0:
        raise ConfigError(f"att_axis must be a non-zero 3-vector, got {cfg['att_axis']}")
    ax = ax / np.linalg.norm(ax)

    p0 = np.asarray(p0, dtype=float)
    ux, uy, uz = ax.tolist()
    b0, b1, b2, b3 = np.asarray(q0, dtype=float).tolist()

    def traj(t):  # on Python floats: called once per control step
        s, c = math.sin(om * t), math.cos(om * t)
        p = p0 + np.array([0.0, ay * s, az * (1 - c)])
        h = 0.5 * al * s  # exp(α sin(ωt) a) = (cos h, sin h · a)
        ch, sh = math.cos(h), math.sin(h)
        a1, a2, a3 = sh * ux, sh * uy, sh * uz
        q = np.array(
            [
                ch * b0 - a1 * b1 - a2 * b2 - a3 * b3,
                ch * b1 + a1 * b0 + a2 * b3 - a3 * b2,
                ch * b2 - a1 * b3 + a2 * b0 + a3 * b1,
                ch * b3 + a1 * b2 - a2 * b1 + a3 * b0,
            ]
        )
        kw, kd = al * om * c, -al * om * om * s
        return (
            p,
            q,
            np.array([0.0, ay * om * c, az * om * s, kw * ux, kw * uy, kw * uz]),
            np.array([0.0, -ay * om * om * s, az * om * om * c, kd * ux, kd * uy, kd * uz]),
        )

    return FromWorldFunction(traj)


class ChainController:
    """(t, q, v) → actuation: the law sees a ChainState, the RHS map turns τ_c into thrusts or motor moments."""

    def __init__(self, law: TaskSpaceLaw, rhs, n: int, joint: bool):
        self.law, self.rhs, self.n, self.joint = law, rhs, n, joint
        self.last = None

    @property
    def info(self):
        """The law's report of the last step (controllers/dac.py LawInfo)."""
        return self.law.info

    def state(self, q, v) -> ChainState:
        n = self.n
        return ChainState(q[: 3 * n].reshape(n, 3), q[3 * n :].reshape(n, 4), np.asarray(v, float))

    def __call__(self, t, q, v):
        s = self.state(q, v)
        tau_c = self.law(t, s)
        alloc = self.rhs(tau_c, s)
        self.last = (tau_c, alloc)
        return alloc.u.ravel() if self.joint else alloc.tau


def parse_obstacles(cfg):
    c, r = cfg["obstacle_centers"], cfg["obstacle_radii"]
    if len(c) != len(r) or any(len(x) != 3 for x in c) or any(not x > 0 for x in r):
        raise ConfigError("obstacle_centers must be 3-vectors, one positive radius each in obstacle_radii")
    return [Obstacle(np.asarray(ci, float), float(ri)) for ci, ri in zip(c, r)]


def parse_disturbances(cfg, n):
    out = []
    for d in cfg["disturbances"]:
        if len(d) != 9 or not (1 <= int(d[0]) <= n) or not 0 <= d[1] < d[2]:
            raise ConfigError(f"disturbance {d}: expected [body 1..{n}, t0, t1 > t0, fx, fy, fz, mx, my, mz]")
        out.append(Disturbance(f"body{int(d[0])}", float(d[1]), float(d[2]), tuple(d[3:6]), tuple(d[6:9])))
    return out


def segment_clearance(pos, quat, half, obstacles):
    """Smallest distance from any rod axis segment (all N bodies) to a keep-out sphere surface
    (half = 0: from the CoMs): the closest point a + u(b − a), u = clip((c − a)·(b − a)/|b − a|², 0, 1),
    for every body and sphere at once.  ``pos`` (N,3), ``quat`` (N,4) give a float; with leading axes
    ((…,N,3), (…,N,4): e.g. a whole run) one clearance per leading index."""
    pos, quat = np.asarray(pos, dtype=float), np.asarray(quat, dtype=float)
    if not obstacles:
        return float("inf") if pos.ndim == 2 else np.full(pos.shape[:-2], np.inf)
    c = np.array([np.asarray(ob.center, dtype=float) for ob in obstacles])
    r = np.array([float(ob.radius) for ob in obstacles])
    x = quat_to_matrix(quat)[..., :, 0]
    a = pos - half * x
    d = (2.0 * half) * x  # b − a
    L2 = np.einsum("...na,...na->...n", d, d)
    ca = c - a[..., :, None, :]  # (…, N, O, 3)
    u = np.clip(np.einsum("...noa,...na->...no", ca, d) / np.where(L2 > 0, L2, 1.0)[..., None], 0.0, 1.0)
    u[L2 <= 0] = 0.0
    gap = (
        np.sqrt(
            np.einsum(
                "...noa,...noa->...no",
                ca - u[..., None] * d[..., None, :],
                ca - u[..., None] * d[..., None, :],
            )
        )
        - r
    )
    return float(gap.min()) if pos.ndim == 2 else gap.min(axis=(-2, -1))


def diagnostics(log, traj, n: int, half: float, obstacles) -> None:
    """The per-step series computed from the logged states after the loop (vectorised over the run):
    pos, quat (the measured chain state), the end-effector pose and its desired pose, e_pos, e_att (44),
    the CoM and rod-segment clearances, the largest motor moment in body axes, the EE trails."""
    L = log.arrays()
    t, Q = L["t"], L["q"]
    T = len(t)
    pos, quat = Q[:, : 3 * n].reshape(T, n, 3), Q[:, 3 * n :].reshape(T, n, 4)
    p_d, q_d = np.empty((T, 3)), np.empty((T, 4))
    for i in range(T):
        p_d[i], q_d[i] = traj.world(t[i])[:2]
    e_att = attitude_error(quat[:, -1], q_d)[0]
    if "u" in L:  # motor moments (N−1, 3), world axes
        R = quat_to_matrix(quat[:, 1:])
        motor = np.abs(np.einsum("tjba,tjb->tja", R, L["u"])).max(axis=(1, 2))
    else:
        motor = np.zeros(T)
    for k, x in (
        ("pos", pos),
        ("quat", quat),
        ("ee_pos", pos[:, -1]),
        ("ee_pos_d", p_d),
        ("ee_quat", quat[:, -1]),
        ("ee_quat_d", q_d),
        ("e_pos", pos[:, -1] - p_d),
        ("e_att", e_att),
        ("clearance", segment_clearance(pos, quat, 0.0, obstacles)),
        ("seg_clearance", segment_clearance(pos, quat, half, obstacles)),
        ("motor_max_nm", motor),
        ("trail__EE", pos[:, -1]),
        ("trail__EE_desired", p_d),
    ):
        log.put(k, x)


def _rows(metrics: dict, cfg: dict) -> list[Row]:
    """The report's rows: each metric beside the paper's figure and the target."""
    return [
        Row(
            "ee_error_mean_m",
            metrics["ee_error_mean_m"],
            "Fig. 4 (→ 0)",
            "<= 1e-3",
            bool(metrics["ee_error_mean_m"] <= TARGETS["ee_error_mean_m"]),
        ),
        Row(
            "ee_error_mean_rad",
            metrics["ee_error_mean_rad"],
            "Fig. 4 (→ 0)",
            "<= 1e-3",
            bool(metrics["ee_error_mean_rad"] <= TARGETS["ee_error_mean_rad"]),
        ),
        Row("lyapunov_increase_max", metrics["lyapunov_increase_max"], "V̇ ≤ 0 (continuous)", "report"),
        Row("lyapunov_increase_max_rel", metrics["lyapunov_increase_max_rel"], None, "report (÷ max V)"),
        Row(
            "min_obstacle_clearance_m",
            metrics["min_obstacle_clearance_m"],
            None,
            "> 0 (rod axes)",
            bool(metrics["min_obstacle_clearance_m"] > 0),
        ),
        Row("min_com_clearance_m", metrics["min_com_clearance_m"], None, "(CoMs, info)"),
        Row(
            "allocation_residual_max",
            metrics["allocation_residual_max"],
            None,
            f"(rhs={cfg['rhs']}, √(rᵀGr))",
        ),
        Row(
            "allocation_saturated_steps", metrics["allocation_saturated_steps"], None, "(motor limit active)"
        ),
        Row("control_step_us_median", metrics["control_step_us_median"], None, None),
        Row("realtime_factor", metrics["realtime_factor"], None, "report"),
    ]


def run(ctx) -> Outcome:
    cfg = ctx.cfg
    if cfg["rhs"] not in ("thrusters", "joint"):
        raise ConfigError(f"rhs='{cfg['rhs']}' is not one of ['thrusters', 'joint']")
    if cfg["model_spring_law"] not in ("rotvec", "euler123"):
        raise ConfigError(
            f"model_spring_law='{cfg['model_spring_law']}' is not one of ['rotvec', 'euler123']"
        )
    if not 0 <= cfg["metrics_from"] < 1:
        raise ConfigError("metrics_from must be in [0, 1)")
    joint = cfg["rhs"] == "joint"
    n = cfg["n_bodies"]
    names = body_names(n)
    free_chain = build_model(cfg, False)
    s0 = initial_state(cfg, free_chain)
    chain = build_model(cfg, True, (s0.pos[0].copy(), s0.quat[0].copy())) if joint else free_chain

    plant = ChainMujocoPlant(
        cfg["mjcf_fixed"] if joint else cfg["mjcf"], names, sim_dt=cfg["sim_dt"], gravity=chain.gravity
    )
    plant.check_matches(build_model({**cfg, "model_spring_law": "rotvec"}, False))
    plant.reset(s0)

    p0 = s0.pos[-1] + np.asarray(cfg["ee_offset"], float)
    traj = ee_trajectory(cfg, p0, s0.quat[-1])
    obstacles = parse_obstacles(cfg)
    k = cfg["obstacle_points_per_body"]
    if k < 1:
        raise ConfigError("obstacle_points_per_body must be >= 1")
    pts = (
        [[0.0, 0.0, 0.0]]
        if k == 1
        else [[x, 0.0, 0.0] for x in np.linspace(-cfg["length"] / 2, cfg["length"] / 2, k)]
    )
    if cfg["kd_mass"] < 0 or (cfg["kd_mass"] == 0 and not (cfg["kd_v"] > 0 and cfg["kd_w"] > 0)):
        raise ConfigError("set kd_mass > 0, or kd_mass = 0 with kd_v > 0 and kd_w > 0")

    def make_controller():
        law = TaskSpaceLaw(
            chain,
            traj,
            cfg["kd_v"],
            cfg["kd_w"],
            cfg["lam_p"],
            cfg["lam_a"],
            obstacles=obstacles,
            obstacle_gain=cfg["obstacle_gain"],
            obstacle_range=cfg["obstacle_range"],
            qp=cfg["reference_qp"],
            joint_rate_limit=cfg["joint_rate_limit"] or None,
            kd_mass=cfg["kd_mass"] or None,
            obstacle_points=pts,
            obstacle_clip=cfg["obstacle_clip"],
        )
        if joint:
            rhs = JointActuationMap(chain, qp=cfg["motor_limit"] > 0, limit=cfg["motor_limit"] or None)
        else:
            rhs = ThrusterMap()
        return ChainController(law, rhs, n, joint)

    ctl = make_controller()
    law = ctl.law
    dist = parse_disturbances(cfg, n)
    log = ctx.logger
    log.meta["mjcf_path"] = str(plant.path)
    log.meta["body_names"] = np.array(names)
    half = cfg["length"] / 2

    def record(t, q, v, tau):
        # in the loop: the measured state and what the controller computed; the task-space errors,
        # clearances and motor maxima are functions of them, computed after the loop (diagnostics)
        tau_c, alloc = ctl.last
        info = law.info
        log.append(
            t=t,
            V=info.V,
            Vdot_cl=info.Vdot_cl,
            q=q,
            tau_c=tau_c,
            tau=alloc.tau,
            residual_g=alloc.residual_g,
            saturated=float(alloc.saturated),
            plant_qpos=plant.data.qpos,
            qp_active=info.qp_active,
        )
        if alloc.u is not None:
            log.append(u=alloc.u)
        if viewer is not None:  # drawn at the viewer's next frame
            p_d = traj.world(t)[0]
            viewer.append_trail("EE", q[3 * (n - 1) : 3 * n], t)
            viewer.append_trail("EE_desired", p_d, t)

    viewer = ctx.make_viewer(plant.model)
    for i, (c, r) in enumerate(
        zip(cfg["obstacle_centers"], cfg["obstacle_radii"])
    ):  # keep-out zones: log + view
        log.meta[f"sphere__obstacle{i}"] = np.r_[np.asarray(c, dtype=float), float(r)]
        if viewer is not None:
            viewer.set_sphere(f"obstacle{i}", c, r)
    # the compiled kernels are loaded before the timed loop, by a throwaway controller of the same config
    load_kernels(make_controller, 0.0, *plant.state())
    res = ctx.simulate(plant, ctl, record, disturbances=dist, viewer=viewer, desc=NAME, log=log)
    diagnostics(log, traj, n, half, obstacles)
    a = log.arrays()
    t = a["t"]
    late = t >= cfg["metrics_from"] * cfg["duration"]
    e_m = np.linalg.norm(a["e_pos"], axis=1)
    e_r = 2 * np.arcsin(np.clip(np.linalg.norm(a["e_att"], axis=1), 0, 1))  # rotation angle of q_e
    V = a["V"]
    free = np.ones(len(t) - 1, dtype=bool)  # control intervals without a disturbance
    dtc = cfg["control_dt"]
    for d in dist:
        free &= ~((t[:-1] < d.t1) & (t[:-1] + dtc > d.t0))
    dV = np.diff(V)
    metrics = dict(
        ee_error_mean_m=float(np.mean(e_m[late])),
        ee_error_mean_rad=float(np.mean(e_r[late])),
        ee_error_max_late_m=float(np.max(e_m[late])),
        ee_error_max_late_rad=float(np.max(e_r[late])),
        lyapunov_increase_max=float(np.max(dV[free])) if np.any(free) else 0.0,
        lyapunov_increase_max_rel=float(np.max(dV[free]) / max(np.max(V), 1e-300)) if np.any(free) else 0.0,
        lyapunov_max=float(np.max(V)),
        min_obstacle_clearance_m=float(np.min(a["seg_clearance"])),
        min_com_clearance_m=float(np.min(a["clearance"])),
        allocation_residual_max=float(np.max(a["residual_g"])),
        allocation_saturated_steps=int(np.sum(a["saturated"])),
        motor_moment_max_nm=float(np.max(a["motor_max_nm"])),
        control_step_us_median=res.step_us_median,
        realtime_factor=res.realtime_factor,
        rhs=cfg["rhs"],
    )
    rows = _rows(metrics, cfg)
    plots = make_plots(ctx, cfg, a, dist, obstacles, e_m, e_r) if ctx.drawing else []
    return Outcome(metrics, rows, plots)


def make_plots(ctx, cfg, a, dist, obstacles, e_m, e_r):
    plt = ctx.pyplot()

    t = a["t"]
    paths = []
    fig, ax = plt.subplots(6, 1, figsize=(8, 14), sharex=True)
    for i, c in enumerate("xyz"):
        (l,) = ax[0].plot(t, a["ee_pos"][:, i], label=c)
        ax[0].plot(t, a["ee_pos_d"][:, i], "--", color=l.get_color())
    ax[0].set_ylabel("EE position [m]")
    ax[0].legend(ncol=3, fontsize=8)
    for i in range(4):
        (l,) = ax[1].plot(t, a["ee_quat"][:, i], label=f"q{i}")
        ax[1].plot(t, a["ee_quat_d"][:, i], "--", color=l.get_color())
    ax[1].set_ylabel("EE quaternion [–]")
    ax[1].legend(ncol=4, fontsize=8)
    ax[2].semilogy(t, np.maximum(e_m, 1e-12), label="‖e_pos‖")
    ax[2].axhline(1e-3, color="k", ls=":", lw=0.8, label="target: mean over the last half ≤ 1e-3 m")
    ax[2].set_ylabel("EE position error [m]")
    ax[2].legend(fontsize=8)
    ax[3].semilogy(t, np.maximum(e_r, 1e-12), label="attitude error angle")
    ax[3].axhline(1e-3, color="k", ls=":", lw=0.8, label="target: mean over the last half ≤ 1e-3 rad")
    ax[3].set_ylabel("EE attitude error [rad]")
    ax[3].legend(fontsize=8)
    ax[4].semilogy(t, np.maximum(a["V"], 1e-16))
    ax[4].set_ylabel("V = ½ sᵀℳs [J]")
    ax[5].plot(t, a["clearance"], label="CoM to sphere surface")
    ax[5].plot(t, a["seg_clearance"], label="rod axis to sphere surface")
    ax[5].axhline(0, color="k", lw=0.8, label="sphere surface")
    ax[5].set_ylabel("clearance [m]")
    ax[5].legend(fontsize=8)
    ax[5].set_xlabel("t [s]")
    for x in ax:
        for d in dist:
            x.axvspan(d.t0, d.t1, color="tab:red", alpha=0.2, lw=0)
        x.grid(alpha=0.3)
    ax[0].set_title("Law (III) on the MuJoCo chain (cf. [Eslami] Fig. 4): desired dashed, disturbances red")
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "ee_tracking"))

    fig = plt.figure(figsize=(8, 6))
    ax3 = fig.add_subplot(projection="3d")
    half = cfg["length"] / 2
    idx = np.linspace(0, len(t) - 1, 30).astype(int)
    cmap = plt.get_cmap("viridis")
    for m, i in enumerate(idx):
        R = quat_to_matrix(a["quat"][i])
        pts = np.concatenate([a["pos"][i][:1] - R[:1, :, 0] * half, a["pos"][i] + R[:, :, 0] * half])
        ax3.plot(pts[:, 0], pts[:, 1], pts[:, 2], "-o", ms=2, lw=1, color=cmap(m / len(idx)))
    ax3.plot(a["ee_pos_d"][:, 0], a["ee_pos_d"][:, 1], a["ee_pos_d"][:, 2], "k--", lw=1, label="EE desired")
    u, v = np.mgrid[0 : 2 * np.pi : 20j, 0 : np.pi : 10j]
    for ob in obstacles:
        ax3.plot_surface(
            ob.center[0] + ob.radius * np.cos(u) * np.sin(v),
            ob.center[1] + ob.radius * np.sin(u) * np.sin(v),
            ob.center[2] + ob.radius * np.cos(v),
            color="tab:red",
            alpha=0.3,
        )
    drawn = [a["pos"].reshape(-1, 3) - half, a["pos"].reshape(-1, 3) + half, a["ee_pos_d"]]
    drawn += [np.asarray(ob.center, dtype=float) + ob.radius * s for ob in obstacles for s in (-1.0, 1.0)]
    equal_aspect_3d(ax3, np.concatenate([np.reshape(x, (-1, 3)) for x in drawn]))
    ax3.set_xlabel("x [m]")
    ax3.set_ylabel("y [m]")
    ax3.set_zlabel("z [m]")
    ax3.set_title("Trace of the closed loop (cf. [Eslami] Fig. 5); spheres = keep-out (equal axes)")
    paths.append(ctx.save_figure(fig, "trace"))
    return paths


if __name__ == "__main__":
    raise SystemExit(scenario_main(NAME, run))
