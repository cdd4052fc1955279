"""Control-step time of the robust inertia-partitioning controller (seed 001, law (18)) on the
series-parallel manipulator, measured on the states of a real closed-loop run of the default scenario:
each call is Ξ(q), E, Ė q̇, Pinocchio's joint Jacobians and their time variation on the open tree, the
per-body Γᵢ, hᵢ, Q_e,i, and the law.  Also the MuJoCo plant step (closed chain, RK4).

    python -m bench.series_parallel [--repeat 3] [--duration 5]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from cmstack.bench import results_dir
from cmstack.scenarios._common import default_config
from cmstack.scenarios.series_parallel import build_plant, build_robust, make_trajectory, plant_state, reset_plant


def measure(duration: float, repeat: int, model_actuator_bodies: bool = False) -> dict:
    cfg = default_config("series_parallel")
    cfg["model_actuator_bodies"] = model_actuator_bodies
    traj = make_trajectory(cfg)
    ctl = build_robust(cfg, traj)
    plant = build_plant(cfg)
    reset_plant(plant, cfg, traj(0.0)[0] + np.asarray(cfg["initial_error"]))
    n_sub = max(1, int(round(cfg["control_dt"] / plant.dt)))
    states, step_us = [], []
    for _ in range(int(round(duration / cfg["control_dt"]))):
        t = plant.time
        q, v = plant_state(plant)
        states.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        c0 = time.perf_counter()
        plant.step(n_sub)
        step_us.append((time.perf_counter() - c0) * 1e6)
    calls = []
    for _ in range(repeat):
        ctl = build_robust(cfg, traj)
        for t, q, v in states:
            c0 = time.perf_counter()
            ctl(t, q, v)
            calls.append((time.perf_counter() - c0) * 1e6)
    calls = np.array(calls)
    return dict(model_actuator_bodies=model_actuator_bodies, control_dt=cfg["control_dt"], calls=int(calls.size),
                control_step_us_median=float(np.median(calls)), control_step_us_p90=float(np.percentile(calls, 90)),
                control_step_us_min=float(calls.min()), mujoco_step_us_median=float(np.median(step_us)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    args = ap.parse_args(argv)
    rows = [measure(args.duration, args.repeat, False), measure(args.duration, args.repeat, True)]
    for r in rows:
        bodies = "3 bodies (paper's model)" if not r["model_actuator_bodies"] else "5 bodies (+cylinder, piston)"
        print(f"{bodies}: control step median {r['control_step_us_median']:.1f} µs (p90 {r['control_step_us_p90']:.1f}, "
              f"min {r['control_step_us_min']:.1f}, {r['calls']} calls); MuJoCo plant step (per control period) "
              f"median {r['mujoco_step_us_median']:.1f} µs")
    out = results_dir()
    out.mkdir(exist_ok=True)
    (out / "series_parallel.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
