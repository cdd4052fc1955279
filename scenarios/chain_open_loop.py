"""Open-loop validation of the tensor Newton–Euler 5-body chain ([Eslami] §4.1, Figs. 2–3), against MuJoCo.

A free-floating chain, gravity compensated, a pure moment pulse on body 1 and later a force pulse on
body 2 (scenarios/configs/chain_open_loop.toml).  Reported, as in §4.1:
1. total linear and angular momentum constant whenever the port is zero (momentum_drift_rel: largest
   change within a zero-port interval, relative to the largest momentum of the run);
2. joint constraint violation (after the documented projection, and the per-step drift the projection
   removes);
3. ‖F_J‖ during the pure moment pulse (≈ 0) and during the force pulse (non-zero, bounded).
The same pulses drive the MuJoCo chain mjcf/chain5.xml (ball joints with springs); the pose difference
over the first ``compare_duration`` seconds is measured against a tensor run with the spring law MuJoCo
realizes (rotation vector), and against the paper-law run for information.
4. energy_drift_rel_<law> for the configured spring law and for "rotvec": the largest change of the total
   energy E = T + V_springs (− Σ m_i g·p_i without gravity compensation) within a zero-port interval,
   relative to the largest |E| of the run.  The paper's law (19) is not conservative (its moments are not
   the gradient of ½ΣK·angle², models/tensor_chain.py), so its E drifts; "rotvec" conserves E up to RK4.
"""

from __future__ import annotations

import numpy as np

from cmstack.controllers.base import StepInfo
from cmstack.models.errors import ConfigError
from cmstack.models.tensor_chain import ChainState, TensorChain, quat_conj, quat_log, quat_mul
from cmstack.scenarios._common import Outcome, Row, equal_aspect_3d, scenario_main
from cmstack.sim.chain_plant import ChainMujocoPlant
from cmstack.sim.logger import Logger

NAME = "chain_open_loop"
TARGETS = dict(
    momentum_drift_rel=1e-8,
    constraint_violation_max_m=1e-6,
    internal_force_during_moment_max_n=1e-9,
    mujoco_pose_diff_max=1e-3,
)


def build_chain(cfg, spring_law=None, **kw) -> TensorChain:
    n = cfg["n_bodies"]
    if n < 2:
        raise ConfigError(f"n_bodies must be >= 2, got {n}")
    k = np.asarray(cfg["stiffness"], dtype=float)
    if k.shape != (3,):
        raise ConfigError(f"stiffness must be [K_phi, K_theta, K_psi], got {cfg['stiffness']}")
    g = np.asarray(cfg["gravity"], dtype=float)
    if g.shape != (3,):
        raise ConfigError(f"gravity must be a 3-vector, got {cfg['gravity']}")
    return TensorChain.rods(
        n,
        cfg["length"],
        cfg["radius"],
        cfg["mass"],
        k,
        gravity=g,
        spring_law=spring_law or cfg["spring_law"],
        **kw,
    )


def body_names(n: int) -> list[str]:
    return [f"body{i}" for i in range(1, n + 1)]


def pulse_port(cfg, chain: TensorChain):
    """τ(t): the pulses (+ gravity compensation −m_i g on every body) as a 6N port, constant over a step."""
    n = chain.n
    mp, fp = cfg["moment_pulse"], cfg["force_pulse"]
    for p, key in ((mp, "moment"), (fp, "force")):
        if not 1 <= p["body"] <= n:
            raise ConfigError(f"{key}_pulse.body={p['body']} is not a body of the chain (1..{n})")
        if not 0 <= p["t0"] < p["t1"]:
            raise ConfigError(f"{key}_pulse: need 0 <= t0 < t1, got t0={p['t0']}, t1={p['t1']}")
        if len(p[key]) != 3:
            raise ConfigError(f"{key}_pulse.{key} must be a 3-vector")
    comp = np.zeros(6 * n)
    if cfg["gravity_compensated"]:
        comp[: 3 * n] = -np.repeat(chain.masses, 3) * np.tile(chain.gravity, n)

    def port(t):
        tau = comp.copy()
        on = False
        if mp["t0"] <= t < mp["t1"]:
            b = mp["body"] - 1
            tau[3 * n + 3 * b : 3 * n + 3 * b + 3] += mp["moment"]
            on = True
        if fp["t0"] <= t < fp["t1"]:
            b = fp["body"] - 1
            tau[3 * b : 3 * b + 3] += fp["force"]
            on = True
        return tau, on

    return port


class PortSchedule:
    """The open-loop "controller": the pulse port τ(t) whatever the state (controllers.base.Controller).
    The plant's clock t is snapped to the schedule's k·dt, so that a pulse edge falls on the same step
    as in the tensor model's k·dt time."""

    def __init__(self, port, dt: float):
        self.port, self.dt = port, float(dt)
        self.info = StepInfo(status="open loop")
        self.on = False  # is a pulse on at the last call

    def __call__(self, t, q, v):
        tau, self.on = self.port(round(t / self.dt) * self.dt)
        return tau


def pose_diff_parts(a, b) -> np.ndarray:
    """[max over bodies of |Δp| (m), max over bodies of the rotation angle between the attitudes (rad)]."""
    dp = np.max(np.abs(a.pos - b.pos))
    ang = np.max(np.linalg.norm(quat_log(quat_mul(quat_conj(a.quat), b.quat)), axis=1))
    return np.array([dp, ang])


def pose_diff(a, b) -> float:
    """The target metric: max(|Δp| [m], rotation angle [rad]) over bodies (pose_diff_parts' larger entry)."""
    return float(pose_diff_parts(a, b).max())


def _rows(m: dict, law: str) -> list[Row]:
    """The report's rows from the metrics ``m``: each beside the paper's behaviour and the target (the energy
    drifts of the spring law ``law`` and of rotvec)."""
    e_note = {
        "euler123": "(19): not conservative",
        "rotvec": "conservative (RK4 error)",
        "euler123_conservative": "ours: conservative (RK4 error)",
    }
    rows = [
        Row(
            "momentum_drift_rel",
            m["momentum_drift_rel"],
            "const. (Fig. 2)",
            "<= 1e-8",
            bool(m["momentum_drift_rel"] <= TARGETS["momentum_drift_rel"]),
        ),
        Row(
            "constraint_violation_max_m",
            m["constraint_violation_max_m"],
            "negligible",
            "<= 1e-6",
            m["constraint_violation_max_m"] <= TARGETS["constraint_violation_max_m"],
        ),
        Row(
            "constraint_drift_per_step_max_m",
            m["constraint_drift_per_step_max_m"],
            None,
            "(before projection)",
        ),
        Row(
            "internal_force_during_moment_max_n",
            m["internal_force_during_moment_max_n"],
            "≈ 0",
            "<= 1e-9",
            m["internal_force_during_moment_max_n"] <= TARGETS["internal_force_during_moment_max_n"],
        ),
        Row(
            "internal_force_during_force_max_n",
            m["internal_force_during_force_max_n"],
            "non-zero, bounded",
            "> 0",
            m["internal_force_during_force_max_n"] > 0,
        ),
        Row("internal_force_step_jump_max_n", m["internal_force_step_jump_max_n"], "continuous", None),
        Row(
            "mujoco_pose_diff_max",
            m["mujoco_pose_diff_max"],
            None,
            "<= 1e-3",
            m["mujoco_pose_diff_max"] <= TARGETS["mujoco_pose_diff_max"],
        ),
        Row(
            "mujoco_pose_diff_paper_law",
            m["mujoco_pose_diff_paper_law"],
            None,
            "(Euler-angle springs vs MuJoCo's)",
        ),
    ]
    rows += [
        Row(f"energy_drift_rel_{x}", m[f"energy_drift_rel_{x}"], None, f"report, {e_note[x]}")
        for x in dict.fromkeys((law, "rotvec"))
    ]
    rows.append(
        Row("realtime_factor", m["realtime_factor"], None, "report (MuJoCo chain + both tensor models)")
    )
    return rows


def _check_config(cfg: dict) -> None:
    """The config's step, method and logging stride, or a ConfigError naming the key."""
    if not cfg["dt"] > 0:
        raise ConfigError(f"dt must be > 0, got {cfg['dt']}")
    if cfg["method"] not in ("kkt", "schur"):
        raise ConfigError(f"method='{cfg['method']}' is not one of ['kkt', 'schur']")
    if cfg["log_every"] < 1:
        raise ConfigError("log_every must be >= 1")


def run(ctx) -> Outcome:
    cfg = ctx.cfg
    dt = cfg["dt"]
    _check_config(cfg)
    chain = build_chain(cfg)
    chain_rv = build_chain(cfg, spring_law="rotvec")
    port = pulse_port(cfg, chain)
    n = chain.n
    steps = int(round(cfg["duration"] / dt))
    n_cmp = min(steps, int(round(cfg["compare_duration"] / dt)))

    plant = ChainMujocoPlant(cfg["mjcf"], body_names(n), sim_dt=dt, gravity=chain.gravity)
    if np.ptp(chain.stiffness) > 0:
        raise ConfigError("the MuJoCo comparison needs isotropic stiffness (a ball joint has one stiffness)")
    plant.check_matches(chain_rv)
    log = ctx.logger
    log.meta["mjcf_path"] = str(plant.path)
    log.meta["body_names"] = np.array(body_names(n))

    s0 = chain.straight_state()
    plant.reset(s0)
    P0, L0 = chain.momentum(s0)
    g_pot = None if cfg["gravity_compensated"] else -chain.masses[:, None] * chain.gravity[None, :]

    def energy(ch, st):
        E = ch.kinetic_energy(st) + ch.spring_energy(st.R)
        return E if g_pot is None else E + float(np.sum(g_pot * st.pos))

    mp, fp = cfg["moment_pulse"], cfg["force_pulse"]
    ctl = PortSchedule(port, dt)
    # the tensor models run beside the plant, one step per control step, inside record(); what the loop
    # keeps per step (raw: the three states, the pulse flag, the joint forces, the pre-projection
    # violation) is turned into the metrics and the logged diagnostics after it (summarize_raw)
    st = dict(k=0, s=s0, s_rv=s0.copy())
    raw = Logger()
    rows = plant.body_rows
    log_every = cfg["log_every"]

    def record(_t, q, v, tau):
        k, s, s_rv = st["k"], st["s"], st["s_rv"]
        t = k * dt  # the schedule's time (PortSchedule snaps to it)
        d = plant.data
        quat_g = d.xquat[rows].copy()  # the plant's chain state (pose part of chain_state())
        quat_g[quat_g[:, 0] < 0] *= -1.0
        raw.append(
            on=float(ctl.on),
            pos=s.pos,
            quat=s.quat,
            nu=s.nu,
            pos_rv=s_rv.pos,
            quat_rv=s_rv.quat,
            nu_rv=s_rv.nu,
            pos_g=d.xpos[rows],
            quat_g=quat_g,
        )
        if k % log_every == 0:
            log.append(t=t, pos=s.pos, quat=s.quat, port=tau, plant_qpos=d.qpos)
        if k == steps:
            raw.append(F_J=chain.dynamics(s, tau, cfg["method"]).F_J)
            return
        s_new, dyn = chain.step(s, dt, tau, method=cfg["method"], project=False)
        if cfg["project"]:
            s_new, pre = chain.project(s_new, violation_before=True)
        else:
            pre = float(np.max(np.abs(chain.constraint_violation(s_new))))
        raw.append(F_J=dyn.F_J, pre_viol=pre)
        st["s"] = s_new
        st["s_rv"], _ = chain_rv.step(s_rv, dt, tau, method=cfg["method"], project=cfg["project"])
        st["k"] = k + 1

    viewer = ctx.make_viewer(plant.model)  # --viewer meshcat: the MuJoCo chain, live
    res = ctx.simulate(
        plant, ctl, record, duration=steps * dt, control_dt=dt, viewer=viewer, desc=NAME, log=log
    )
    q, v = plant.state()  # the final state closes the last interval
    record(plant.time, q, v, ctl(plant.time, q, v))
    R = raw.arrays()
    T = len(R["on"])
    P_, L_, E_ = np.zeros((T, 3)), np.zeros((T, 3)), np.zeros((T, 2))
    viol_, diff_rv, diff_paper = np.zeros(T), np.full((T, 2), np.nan), np.zeros((T, 2))
    model_qpos = np.zeros((T, plant.model.nq))
    ref = e_ref = None
    drift_P = drift_L = scale_P = scale_L = viol_max = fj_moment = fj_force = fj_jump = cmp_rv = cmp_paper = (
        0.0
    )
    drift_E, scale_E, fj_prev = np.zeros(2), np.zeros(2), None
    for k in range(T):  # the per-step bookkeeping, in the order of the steps
        t = k * dt
        s = ChainState(R["pos"][k], R["quat"][k], R["nu"][k])
        s_rv = ChainState(R["pos_rv"][k], R["quat_rv"][k], R["nu_rv"][k])
        g = ChainState(R["pos_g"][k], R["quat_g"][k], None)
        P, L = chain.momentum(s)
        scale_P, scale_L = max(scale_P, np.linalg.norm(P)), max(scale_L, np.linalg.norm(L))
        if ref is not None:  # the state at t closes the previous zero-port step
            drift_P = max(drift_P, float(np.linalg.norm(P - ref[0])))
            drift_L = max(drift_L, float(np.linalg.norm(L - ref[1])))
        E = np.array([energy(chain, s), energy(chain_rv, s_rv)])
        scale_E = np.maximum(scale_E, np.abs(E))
        if e_ref is not None:
            drift_E = np.maximum(drift_E, np.abs(E - e_ref))
        if R["on"][k] or k == T - 1:
            ref = e_ref = None
        elif ref is None:
            ref = (P.copy(), L.copy())
            e_ref = E
        viol = float(np.max(np.abs(chain.constraint_violation(s))))
        viol_max = max(viol_max, viol)
        diff_paper[k] = pose_diff_parts(s, g)
        if k <= n_cmp:
            diff_rv[k] = pose_diff_parts(s_rv, g)
            cmp_paper = max(cmp_paper, float(diff_paper[k].max()))
            cmp_rv = max(cmp_rv, float(diff_rv[k].max()))
        fj = float(np.linalg.norm(R["F_J"][k]))
        if mp["t0"] <= t < mp["t1"] and not (fp["t0"] <= t < fp["t1"]):
            fj_moment = max(fj_moment, fj)
        if fp["t0"] <= t < fp["t1"]:
            fj_force = max(fj_force, fj)
            if fj_prev is not None:
                fj_jump = max(fj_jump, abs(fj - fj_prev))
            fj_prev = fj
        P_[k], L_[k], E_[k], viol_[k] = P, L, E, viol
        model_qpos[k] = plant.qpos_of(s)
    pre_viol_max = float(np.max(R["pre_viol"], initial=0.0))
    FJ = np.linalg.norm(R["F_J"].reshape(T, -1, 3), axis=2)
    for key, x in (
        ("P", P_),
        ("L", L_),
        ("viol", viol_),
        ("FJ", FJ),
        ("model_qpos", model_qpos),
        ("plant_pos", R["pos_g"]),
        ("pose_diff_rotvec", diff_rv),
        ("pose_diff_paper", diff_paper),
        ("energy", E_),
    ):
        log.put(key, x[::log_every])

    mom_rel = max(drift_P / max(scale_P, 1e-300), drift_L / max(scale_L, 1e-300))
    metrics = dict(
        momentum_drift_rel=mom_rel,
        linear_momentum_drift_rel=drift_P / max(scale_P, 1e-300),
        angular_momentum_drift_rel=drift_L / max(scale_L, 1e-300),
        constraint_violation_max_m=viol_max,
        constraint_drift_per_step_max_m=pre_viol_max,
        internal_force_during_moment_max_n=fj_moment,
        internal_force_during_force_max_n=fj_force,
        internal_force_step_jump_max_n=fj_jump,
        mujoco_pose_diff_max=cmp_rv,
        mujoco_pose_diff_paper_law=cmp_paper,
        linear_momentum_final=scale_P,
        angular_momentum_max=scale_L,
        realtime_factor=res.realtime_factor,
        control_step_us_median=res.step_us_median,
    )
    law = cfg["spring_law"]
    e_rel = drift_E / np.maximum(scale_E, 1e-300)
    metrics[f"energy_drift_rel_{law}"] = float(e_rel[0])
    metrics["energy_drift_rel_rotvec"] = float(e_rel[1])
    rows = _rows(metrics, law)
    plots = make_plots(ctx, cfg) if ctx.drawing else []
    return Outcome(metrics, rows, plots)


def _shade(ax, cfg):
    for key, c in (("moment_pulse", "tab:orange"), ("force_pulse", "tab:blue")):
        ax.axvspan(cfg[key]["t0"], cfg[key]["t1"], color=c, alpha=0.15, lw=0)


def make_plots(ctx, cfg):
    plt = ctx.pyplot()

    a = ctx.logger.arrays()
    t = a["t"]
    paths = []
    fig, ax = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    for i, c in enumerate("xyz"):
        ax[0].plot(t, a["P"][:, i], label=f"$P_{c}$")
        ax[1].plot(t, a["L"][:, i], label=f"$L_{c}$")
    ax[0].set_ylabel("linear momentum [kg m/s]")
    ax[1].set_ylabel("angular momentum [kg m²/s]")
    ax[2].semilogy(t, np.maximum(a["viol"], 1e-18))
    ax[2].set_ylabel("max |joint mismatch| [m]")
    for j in range(a["FJ"].shape[1]):
        ax[3].plot(t, a["FJ"][:, j], label=f"joint {j + 1}")
    ax[3].set_ylabel("‖f_J‖ [N]")
    ax[3].set_xlabel("t [s]")
    for x in ax:
        _shade(x, cfg)
        x.grid(alpha=0.3)
    ax[0].legend(ncol=3, fontsize=8)
    ax[1].legend(ncol=3, fontsize=8)
    ax[3].legend(ncol=4, fontsize=8)
    ax[0].set_title("Open-loop validation (cf. Fig. 2): moment pulse (orange), force pulse (blue)")
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "open_loop_validation"))

    # trace of the chain (cf. Fig. 3): joint polyline at snapshots
    fig = plt.figure(figsize=(8, 6))
    ax3 = fig.add_subplot(projection="3d")
    pos, quat = a["pos"], a["quat"]
    from cmstack.models.tensor_chain import quat_to_matrix

    half = cfg["length"] / 2
    idx = np.linspace(0, len(t) - 1, 25).astype(int)
    cmap = plt.get_cmap("viridis")
    for m, i in enumerate(idx):
        R = quat_to_matrix(quat[i])
        pts = np.concatenate([(pos[i][:1] - R[:1, :, 0] * half), pos[i] + R[:, :, 0] * half])
        ax3.plot(pts[:, 0], pts[:, 1], pts[:, 2], "-o", ms=2, color=cmap(m / len(idx)), lw=1)
    ax3.set_xlabel("x [m]")
    ax3.set_ylabel("y [m]")
    ax3.set_zlabel("z [m]")
    equal_aspect_3d(ax3, np.concatenate([pos.reshape(-1, 3) - half, pos.reshape(-1, 3) + half]))
    ax3.set_title("Trace of the chain (cf. [Eslami] Fig. 3), dark → light = time (equal axes)")
    paths.append(ctx.save_figure(fig, "trace"))

    # positions (m) and attitudes (rad) on separate axes
    fig, axs = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for col, (ax, what) in enumerate(
        zip(axs, ("max |Δp| over bodies [m]", "max attitude angle difference [rad]"))
    ):
        ax.semilogy(
            t,
            np.maximum(a["pose_diff_rotvec"][:, col], 1e-16),
            label="tensor (rotation-vector springs) vs MuJoCo",
        )
        ax.semilogy(
            t,
            np.maximum(a["pose_diff_paper"][:, col], 1e-16),
            label="tensor (Euler-angle springs (19)) vs MuJoCo",
        )
        ax.axvline(
            cfg["compare_duration"],
            color="k",
            ls="--",
            lw=0.8,
            label=f"end of the compared window ({cfg['compare_duration']:g} s)",
        )
        ax.axhline(
            TARGETS["mujoco_pose_diff_max"],
            color="grey",
            ls=":",
            lw=0.8,
            label=f"target ≤ {TARGETS['mujoco_pose_diff_max']:g} (rotation-vector law, in the window)",
        )
        _shade(ax, cfg)
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
    axs[0].legend(fontsize=7)
    axs[-1].set_xlabel("t [s]")
    fig.tight_layout()
    paths.append(ctx.save_figure(fig, "mujoco_comparison"))
    return paths


if __name__ == "__main__":
    raise SystemExit(scenario_main(NAME, run))
