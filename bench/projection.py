"""Speed of the projection-method pieces ([Aghili]): PIDC control step (closed form, QP, series-parallel
adapter) and the projection simulator's step, on the states of real closed-loop runs.  Never asserted.

The PIDC step's floor is the one Pinocchio call it needs, ``pin.computeAllTerms`` (M and h; what
``Robot.update`` runs), on the same state; the closed form has no QP.  Step and floor are called
alternately on every recorded state (interleaved, so machine load hits both alike); the ratio is that
of the medians.  Writes bench/results/projection.json.

    python -m bench.projection [--repeat 3]

Measured (busy 2-core machine, load 16-19, interleaved medians): slider-crank PIDC step 322 µs → 146 µs
after the one-row closed forms (project: σ = ‖a‖; (SP)⁺ by Sherman–Morrison; the passive law (60–62)
rank 1) replaced three LAPACK SVDs; ratio to computeAllTerms 29× → 24×, series-parallel 24–27×.  The
1.5× target is missed: the floor is one C++ call of ~6 µs, while the step is ~30 small NumPy operations
on 2- to 4-vectors, each 1–3 µs of interpreter and dispatch overhead.  Where a 161 µs step went
(component medians on the same states): Robot.update 19 (computeAllTerms 7 of it, copies and checks),
constraint Jacobian + projector 30, Ȧq̇ and C q̇ 11, reference 8, desired q̈ 58 (with the reference),
M q̈ + h and P b 9, passive law 13, the info record 4.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pinocchio as pin

from cmstack.bench import results_dir

from cmstack.models.projection import SliderCrankLoop
from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config
from cmstack.scenarios.slider_crank import build_controller
from cmstack.sim.projection_sim import ProjectionPlant


def _median_us(fn, items, repeat):
    ts = []
    for _ in range(repeat):
        for it in items:
            c0 = time.perf_counter()
            fn(*it)
            ts.append((time.perf_counter() - c0) * 1e6)
    return float(np.median(ts)), float(np.percentile(ts, 95))


#: issue 12: PIDC step ≤ 1.5× its floor
PIDC_TARGET = 1.5


def _ratio_to_floor(fn, model, data, items, repeat, arg=lambda t, q, v: (q, v)):
    """Interleaved medians [µs] of fn(t, q, v) and of its floor pin.computeAllTerms(model, data, q, v)
    at ``arg(t, q, v)``, and their ratio."""
    step, floor = [], []
    perf = time.perf_counter
    for _ in range(repeat):
        for t, q, v in items:
            qf, vf = arg(t, q, v)
            c0 = perf()
            fn(t, q, v)
            c1 = perf()
            pin.computeAllTerms(model, data, qf, vf)
            c2 = perf()
            step.append(c1 - c0)
            floor.append(c2 - c1)
    ms, mf = float(np.median(step)) * 1e6, float(np.median(floor)) * 1e6
    return {"step_us_median": ms, "floor_us_median": mf, "ratio": ms / mf, "target": PIDC_TARGET,
            "met": ms / mf <= PIDC_TARGET, "states": len(items), "repeat": repeat}


def slider_crank(repeat: int):
    cfg = default_config("slider_crank")
    robot = Robot(cfg["urdf"])
    loop = SliderCrankLoop(cfg["link_length"])
    plant = ProjectionPlant(robot, loop, sim_dt=cfg["sim_dt_projection"], rank_tol=cfg["rank_tol_sim"], passive=("rod",))
    plant.reset(np.zeros(2))
    ctl = build_controller(cfg, robot, loop)
    states, sim_us = [], []
    for _ in range(2000):
        t = plant.time
        q, v = plant.state()
        states.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        c0 = time.perf_counter()
        plant.step(1)
        sim_us.append((time.perf_counter() - c0) * 1e6)
    out = {"projection_sim_step_us_median (RK4 + NR + velocity projection, n=2)": float(np.median(sim_us))}
    for name in ("pidc", "pidc_qp"):
        cfg2 = dict(cfg, controller=name)
        c = build_controller(cfg2, robot, loop)
        out[f"slider_crank {name} control_step_us (median, p95)"] = _median_us(c, states, repeat)
    c = build_controller(cfg, robot, loop)
    d = pin.Data(robot.model)
    out["ratio"] = {"slider_crank_pidc": _ratio_to_floor(c, robot.model, d, states, repeat)}
    return out


def series_parallel(repeat: int):
    from cmstack.controllers.pidc_adapters import SeriesParallelPIDC
    from cmstack.scenarios.series_parallel import build_plant, make_trajectory, reset_plant

    cfg = default_config("series_parallel")
    traj = make_trajectory(cfg)
    plant = build_plant(cfg)
    q0 = traj(0.0)[0] + np.asarray(cfg["initial_error"])
    reset_plant(plant, cfg, q0)
    ctl = SeriesParallelPIDC(cfg, traj)
    states = []
    for _ in range(2000):
        t = plant.time
        q, v = plant.state()
        states.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        plant.step(1)
    from cmstack.models.series_parallel_aux import lift

    c = SeriesParallelPIDC(cfg, traj)
    tree = c.robot.tree
    d = pin.Data(tree.model)

    def arg(t, q, v):
        x, xd = lift(c.tm, q, v)
        return x[:3], xd[:3]

    return {"series_parallel pidc control_step_us (median, p95)": _median_us(SeriesParallelPIDC(cfg, traj), states, repeat),
            "ratio": {"series_parallel_pidc": _ratio_to_floor(c, tree.model, d, states, repeat, arg)}}


def yumi_force(repeat: int):
    from cmstack.scenarios.yumi_dual_arm import build_pidc_force, build_problem, close_loop, initial_state
    from cmstack.sim.plant import MujocoPlant

    cfg = default_config("yumi_dual_arm")
    cfg.update(plant="bar", controller="pidc_force")
    robot = Robot(cfg["urdf"])
    coupling, task, _, _ = build_problem(cfg, robot)
    plant = MujocoPlant(cfg["mjcf_bar"], robot.joint_names, sim_dt=cfg["control_dt"], integrator=cfg["integrator"])
    plant.reset(close_loop(robot, coupling, initial_state(cfg, robot)))
    ctl = build_pidc_force(cfg, robot, coupling, task)
    ctl.attach_plant(plant)
    states = []
    for _ in range(400):
        t = plant.time
        q, v = plant.state()
        states.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        plant.step(1)
    return {"yumi bar pidc_force control_step_us (median, p95)": _median_us(ctl, states, repeat)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="skip the YuMi force controller")
    args = ap.parse_args(argv)
    sc, sp = slider_crank(args.repeat), series_parallel(args.repeat)
    ratios = {**sc.pop("ratio"), **sp.pop("ratio")}
    res = {**sc, **sp, **({} if args.quick else yumi_force(args.repeat))}
    for name, r in ratios.items():
        print(f"{name} step {r['step_us_median']:.1f} µs / floor computeAllTerms {r['floor_us_median']:.1f} µs "
              f"= {r['ratio']:.1f}× (target ≤ {PIDC_TARGET}×: {'met' if r['met'] else 'MISSED'}; interleaved, "
              f"{r['states']} states × {r['repeat']})")
    (results_dir() / "projection.json").write_text(json.dumps({"pidc_ratio": ratios, "other": res}, indent=2))
    for k, v in res.items():
        print(f"{k:<72} {v if isinstance(v, float) else '  '.join(f'{x:.1f}' for x in v)}"
              if not isinstance(v, float) else f"{k:<72} {v:.1f}")


if __name__ == "__main__":
    main()
