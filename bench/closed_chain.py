"""A control step on each shipped closed chain against one ``pin.constraintDynamics`` call of the same
mechanism (issue 23's target: <= 2x), interleaved on the same states.  Never asserted.

    python -m bench.closed_chain [--states 300] [--repeat 3]

The steps are the closed_chain scenario's controllers: PIDC (task-space coordinates on the end effector, or
joint coordinates on the four-bar, passive joints by (60-62)) and UK (law=uk: the loops as its top level, the
coordinates below, passive joints at zero torque); the reference call is Pinocchio's forward dynamics of the
same loops (``pinocchio_constraint_models``, proximal settings as the scenario's check).  States: assembled
configurations near the initial pose with velocities in the loops' null space.  Each state is given to the
PIDC step, the reference call, the UK step and the reference call again, in turn (machine load hits all
alike); each ratio is that of the medians of a law's steps and of the reference calls next to them.
``pin.computeAllTerms`` alone on the same states is reported beside them, and the 1-minute load average.
Writes bench/results/closed_chain.json.

Measured (busy 2-core machine shared with other test suites, 300 states x 3 at load 6, before at load 8),
step / reference:

    mechanism  law   before (SVD, NumPy)     after                    computeAllTerms
    five-bar   PIDC  162 / 5.3 us = 30x       16 / 3.4 us = 4.7x       2.1 us
    five-bar   UK    216 / 5.8 us = 37x       85 / 4.1 us = 21x
    four-bar   PIDC  121 / 3.6 us = 34x       11 / 2.2 us = 4.8x       1.4 us
    four-bar   UK    190 / 4.1 us = 47x       69 / 2.9 us = 24x
    Delta      PIDC  228 / 12.8 us = 18x      33 / 9.1 us = 3.7x       6.2 us
    Delta      UK    201 / 13.5 us = 15x      137 / 11.3 us = 12x

The target (<= 2x) is MISSED.  PIDC: the robot's lean pass (crba + nle) and one compiled call of seven
arguments (``controllers/pidc_plan.py``, ``_pidc_kernels.pidc_closed_step``: frames, loop and task rows, the law
with complete orthogonal decompositions instead of SVDs).  On one state repeated (caches warm, nothing
interleaved) a five-bar step is 10.2 us against constraintDynamics' 3.0 us (3.4x): the lean pass 1.7 us, the
kernel 3.7 us (0.4 us of it the call itself), Python 4.8 us (the state's checks and copies, the targets of the
circle, the info record); the four-bar 6.8 / 2.0 us (3.4x), the Delta 20.8 / 7.7 us (2.7x: lean pass 3.9 us, kernel
11.7 us).  A Python step pays at least the pass and one compiled call, 2.1 us on the five-bar (0.7x of
constraintDynamics), so 2x would leave it 4 us for the rows, the factorizations and the bookkeeping together,
where the kernel's compute alone takes 3.3 us and the interpreter's share 4.8 us.  UK: the SVD of G and the null-space path are gone (``kernels.passive_map``, the
planar mechanisms' vanishing rows left out so the KKT solve applies); what is left is its generic Python path
(the loops' and the task's rows from ``Kinematics.frame``, three frames at about 5 us each, and the level
solve), as UK has no compiled closed-chain step (its fused plan knows no loop closure).
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
