"""Control-step time of the prioritized UK controller on the YuMi (issue target: median ≤ 150 µs on
the 2-core machine), measured on the states of a real closed-loop run: each call is kinematics
(FK, Jacobians and their time variation, CRBA, nle), the (A, b) of the coupling and the task, the
ProxSuite QP (warm-started) and τ = M v̇ + h + D v.  Also the MuJoCo plant step.

    python -m bench.yumi_uk [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from cmstack.bench import results_dir
from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config
from cmstack.scenarios.yumi_dual_arm import build_problem, build_uk, initial_state
from cmstack.sim.plant import MujocoPlant


def measure(priority: str, control_dt: float, repeat: int):
    cfg = default_config("yumi_dual_arm")
    cfg.update(priority=priority, control_dt=control_dt)
    robot = Robot(cfg["urdf"])
    coupling, task, _, _ = build_problem(cfg, robot)
    ctl = build_uk(cfg, robot, coupling, task)
    plant = MujocoPlant(cfg["mjcf_virtual"], robot.joint_names, sim_dt=control_dt)
    plant.reset(initial_state(cfg, robot))
    states, step_us = [], []
    for _ in range(int(round(cfg["duration"] / control_dt))):
        t = plant.time
        q, v = plant.state()
        states.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        c0 = time.perf_counter()
        plant.step()
        step_us.append((time.perf_counter() - c0) * 1e6)
    # replay the recorded states `repeat` times through a fresh controller (warm start as in the loop)
    calls = []
    for _ in range(repeat):
        ctl = build_uk(cfg, robot, coupling, task)
        for t, q, v in states:
            c0 = time.perf_counter()
            ctl(t, q, v)
            calls.append((time.perf_counter() - c0) * 1e6)
    calls = np.array(calls)
    return dict(priority=priority, control_dt=control_dt, control_step_us_median=float(np.median(calls)),
                control_step_us_p90=float(np.percentile(calls, 90)), control_step_us_min=float(calls.min()),
                mujoco_step_us_median=float(np.median(step_us)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rows = [measure("weighted", 0.005, args.repeat), measure("strict", 0.001, max(1, args.repeat // 2))]
    for r in rows:
        print(f"{r['priority']:>8} @ {1 / r['control_dt']:.0f} Hz: control step median {r['control_step_us_median']:.1f} µs "
              f"(p90 {r['control_step_us_p90']:.1f}, min {r['control_step_us_min']:.1f}); "
              f"MuJoCo step median {r['mujoco_step_us_median']:.1f} µs")
    out = results_dir()
    out.mkdir(exist_ok=True)
    (out / "yumi_uk.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
