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
import time

import numpy as np
import pinocchio as pin

from cmstack.bench import results_dir
from cmstack.models.loops import ClosureSet, pinocchio_constraint_models
from cmstack.models.projection import project
from cmstack.scenarios._common import default_config
from cmstack.scenarios.closed_chain import build_law, build_reference, load_robot

MECHANISMS = ("mjcf/five_bar.xml", "mjcf/four_bar.xml", "mjcf/delta.xml")


def measure(model: str, n_states: int, repeat: int) -> dict:
    cfg = dict(default_config("closed_chain"), model=model)
    robot = load_robot(cfg)
    _, coords, _ = build_reference(cfg, robot)
    ctl = build_law(cfg, robot, coords)
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
    tau = np.zeros(robot.nv)
    step_us, ref_us = [], []
    clock = time.perf_counter
    for _ in range(repeat):
        for k, (q, v) in enumerate(states):
            t0 = clock()
            ctl(1e-3 * k, q, v)
            t1 = clock()
            pin.constraintDynamics(robot.model, data, q, v, tau, cms, cds, prox)
            t2 = clock()
            step_us.append((t1 - t0) * 1e6)
            ref_us.append((t2 - t1) * 1e6)
    s, r = float(np.median(step_us)), float(np.median(ref_us))
    return {"control_step_us": s, "constraint_dynamics_us": r, "ratio": s / r, "target": "<= 2", "met": s / r <= 2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    out = {m: measure(m, args.states, args.repeat) for m in MECHANISMS}
    for m, r in out.items():
        print(f"{m:22s} step {r['control_step_us']:8.1f} us   constraintDynamics {r['constraint_dynamics_us']:6.1f} us"
              f"   ratio {r['ratio']:6.1f} (target <= 2: {'met' if r['met'] else 'MISSED'})")
    (results_dir() / "closed_chain.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
