"""Seed 000 timings: the DAC law (III) control step on states of a real closed-loop run of the default
chain_task_space scenario (closed-form reference, ProxSuite reference, + joint allocation closed form / QP),
and one RK4 step of the tensor Newton–Euler model (KKT (32) vs Schur (35), with/without the projection),
beside a MuJoCo step of the same chain.

    python -m bench.chain [--repeat 3] [--duration 2]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from cmstack.controllers.dac import JointActuationMap, TaskSpaceLaw
from cmstack.scenarios._common import default_config
from cmstack.scenarios.chain_task_space import build_model, ee_trajectory, initial_state, parse_obstacles
from cmstack.sim.chain_plant import ChainMujocoPlant
from cmstack.scenarios.chain_open_loop import body_names


def _law(cfg, chain, traj, qp=False):
    k = cfg["obstacle_points_per_body"]
    pts = [[0.0, 0.0, 0.0]] if k == 1 else [[x, 0.0, 0.0] for x in np.linspace(-cfg["length"] / 2, cfg["length"] / 2, k)]
    return TaskSpaceLaw(chain, traj, 0.0, 0.0, cfg["lam_p"], cfg["lam_a"], obstacles=parse_obstacles(cfg),
                        obstacle_gain=cfg["obstacle_gain"], obstacle_range=cfg["obstacle_range"], qp=qp,
                        kd_mass=cfg["kd_mass"], obstacle_points=pts)


def _time(fn, items, repeat):
    out = []
    for _ in range(repeat):
        for it in items:
            c0 = time.perf_counter()
            fn(*it)
            out.append((time.perf_counter() - c0) * 1e6)
    return np.array(out)


def measure(duration: float, repeat: int) -> dict:
    cfg = default_config("chain_task_space")
    chain = build_model(cfg, False)
    s0 = initial_state(cfg, chain)
    traj = ee_trajectory(cfg, s0.pos[-1] + np.asarray(cfg["ee_offset"]), s0.quat[-1])
    plant = ChainMujocoPlant(cfg["mjcf"], body_names(chain.n), sim_dt=cfg["sim_dt"], gravity=chain.gravity)
    plant.reset(s0)
    law = _law(cfg, chain, traj)
    n_sub = int(round(cfg["control_dt"] / plant.dt))
    states, mj_us = [], []
    for _ in range(int(round(duration / cfg["control_dt"]))):
        t = plant.time
        s = plant.chain_state()
        states.append((t, s))
        plant.set_torque(law(t, s))
        c0 = time.perf_counter()
        plant.step(n_sub)
        mj_us.append((time.perf_counter() - c0) * 1e6 / n_sub)
    sub = states[:: max(1, len(states) // 400)]
    res = {"states": len(sub)}
    law_cf, law_qp = _law(cfg, chain, traj), _law(cfg, chain, traj, qp=True)
    res["law3_closed_form_us"] = _time(lambda t, s: law_cf(t, s), sub, repeat)
    res["law3_reference_qp_us"] = _time(lambda t, s: law_qp(t, s), sub, repeat)
    fixed = build_model(cfg, True, (s0.pos[0].copy(), s0.quat[0].copy()))
    alloc_cf, alloc_qp = JointActuationMap(fixed), JointActuationMap(fixed, qp=True, limit=5.0)
    tau = [(law_cf(t, s), s) for t, s in sub]
    res["joint_allocation_closed_form_us"] = _time(alloc_cf, tau, repeat)
    res["joint_allocation_qp_us"] = _time(alloc_qp, tau, repeat)
    port = [(s, np.zeros(6 * chain.n)) for _, s in sub]
    for method in ("kkt", "schur"):
        for proj in (True, False):
            res[f"tensor_rk4_step_{method}{'_projected' if proj else ''}_us"] = _time(
                lambda s, p: chain.step(s, 1e-3, p, method=method, project=proj), port, repeat)
    res["tensor_dynamics_kkt_us"] = _time(lambda s, p: chain.dynamics(s, p, "kkt"), port, repeat)
    res["tensor_dynamics_schur_us"] = _time(lambda s, p: chain.dynamics(s, p, "schur"), port, repeat)
    out = {"control_dt_us": cfg["control_dt"] * 1e6, "mujoco_step_us_median": float(np.median(mj_us))}
    for k, v in res.items():
        if isinstance(v, np.ndarray):
            out[f"{k}_median"] = float(np.median(v))
            out[f"{k}_p90"] = float(np.percentile(v, 90))
        else:
            out[k] = v
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0, help="closed-loop seconds whose states are replayed")
    args = ap.parse_args(argv if argv is not None else [])
    r = measure(args.duration, args.repeat)
    width = max(len(k) for k in r)
    for k, v in r.items():
        print(f"  {k:<{width}}  {v:10.1f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    print(json.dumps(r))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
