"""A control step on each shipped closed chain against one ``pin.constraintDynamics`` call of the same
mechanism (issue 23's target: <= 2x), interleaved on the same states.  Never asserted.

    python -m bench.closed_chain [--states 300] [--repeat 3]

The step is the closed_chain scenario's controller (PIDC, task-space coordinates on the end effector, or
joint coordinates on the four-bar, passive joints by (60-62)); the reference call is Pinocchio's forward
dynamics of the same loops (``pinocchio_constraint_models``, proximal settings as the scenario's check).
States: assembled configurations near the initial pose with velocities in the loops' null space.  Each
state is given to the step and to the reference call alternately (machine load hits both alike); the ratio
is that of the medians.  Writes bench/results/closed_chain.json.

Measured (busy 2-core machine, load 6-7, 200 states x 2): five-bar 124 us / 4.3 us = 29x, four-bar 96 / 3.0 =
32x, Delta 173 / 10.3 = 17x: the target is MISSED.  Where a five-bar step goes (cProfile): three small SVDs
(the loops' projector, (A_t P)⁺, the passive law's [(I−B)(I−P)]⁺) about a third, the end-effector task's
rows a fifth, frames and Robot.update the rest; the NumPy path of PIDC, no compiled kernel for several
constraint rows yet (the one-row kernel, ``kernels.pidc_one_row``, makes the slider-crank step 7.9x
computeAllTerms).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pinocchio as pin

from cmstack.bench import results_dir
from cmstack.models.loops import ClosureSet, pinocchio_constraint_models
from cmstack.models.projection import project
from cmstack.scenarios._common import default_config
from cmstack.scenarios.closed_chain import build_law, build_reference, load_robot

MECHANISMS = ("mjcf/five_bar.xml", "mjcf/four_bar.xml", "mjcf/delta.xml")


LAWS = ("pidc", "uk")


def measure(model: str, n_states: int, repeat: int) -> dict:
    """Per law: the median step (µs), the median constraintDynamics call interleaved with it, their ratio;
    and the median ``pin.computeAllTerms`` alone on the same states (the pass every step starts with)."""
    laws, robots = {}, {}
    for law in LAWS:
        cfg = dict(default_config("closed_chain"), model=model, law=law)
        robots[law] = robot = load_robot(cfg)
        _, coords, _ = build_reference(cfg, robot)
        laws[law] = build_law(cfg, robot, coords)
    robot = robots[LAWS[0]]
    cs = ClosureSet(robot.loops)
    rng = np.random.default_rng(0)
    states = []
    for _ in range(n_states):
        q = robot.assemble(robot.q_initial + 0.05 * rng.normal(size=robot.nq))
        states.append((q, project(cs.jacobian(q)).P @ rng.normal(size=robot.nv)))
    cms, cds = pinocchio_constraint_models(robot)
    data = robot.model.createData()
    pin.initConstraintDynamics(robot.model, data, cms, cds)
    prox = pin.ProximalSettings(1e-12, 1e-8, 20)
    cat_data = robot.model.createData()
    tau = np.zeros(robot.nv)
    step_us = {law: [] for law in LAWS}
    ref_us = {law: [] for law in LAWS}
    cat_us = []
    clock = time.perf_counter
    for _ in range(repeat):
        for k, (q, v) in enumerate(states):
            for law, ctl in laws.items():
                t0 = clock()
                ctl(1e-3 * k, q, v)
                t1 = clock()
                pin.constraintDynamics(robot.model, data, q, v, tau, cms, cds, prox)
                t2 = clock()
                step_us[law].append((t1 - t0) * 1e6)
                ref_us[law].append((t2 - t1) * 1e6)
            t0 = clock()
            pin.computeAllTerms(robot.model, cat_data, q, v)
            cat_us.append((clock() - t0) * 1e6)
    out: dict = {"compute_all_terms_us": float(np.median(cat_us))}
    for law in LAWS:
        s, r = float(np.median(step_us[law])), float(np.median(ref_us[law]))
        out[law] = {"control_step_us": s, "constraint_dynamics_us": r, "ratio": s / r, "target": "<= 2",
                    "met": s / r <= 2}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    out: dict = {m: measure(m, args.states, args.repeat) for m in MECHANISMS}
    out["load_average"] = [load0, os.getloadavg()[0]]
    for m in MECHANISMS:
        for law in LAWS:
            r = out[m][law]
            print(f"{m:22s} {law:4s} step {r['control_step_us']:8.1f} us   constraintDynamics "
                  f"{r['constraint_dynamics_us']:6.1f} us   ratio {r['ratio']:6.1f} "
                  f"(target <= 2: {'met' if r['met'] else 'MISSED'})")
        print(f"{'':27s}computeAllTerms alone {out[m]['compute_all_terms_us']:6.1f} us")
    print(f"load average (1 min) before/after: {load0:.2f} / {out['load_average'][1]:.2f}")
    (results_dir() / "closed_chain.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
