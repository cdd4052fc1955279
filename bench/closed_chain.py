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

Measured (busy 2-core machine shared with other sessions, 300 states x 3; step / reference, µs):

    mechanism  law   before (SVD, NumPy)   compiled PIDC,        both compiled (2026-11-27)    computeAllTerms
                                           generic UK            (UK 92426e5; PIDC pidcfast)
                     load 8                load 6                load 2.1 (three runs)
    five-bar   PIDC  162 / 5.3 = 30x       16 / 3.4 = 4.7x       4.05-4.15 / 2.5-2.6 = 1.57-1.6x  1.7-1.8
    five-bar   UK    216 / 5.8 = 37x       85 / 4.1 = 21x        4.1 / 2.6 = 1.56-1.59x
    four-bar   PIDC  121 / 3.6 = 34x       11 / 2.2 = 4.8x       2.9-3.0 / 1.6-1.7 = 1.75-1.79x   1.1
    four-bar   UK    190 / 4.1 = 47x       69 / 2.9 = 24x        3.1 / 1.7 = 1.86-1.88x
    Delta      PIDC  228 / 12.8 = 18x      33 / 9.1 = 3.7x       12.4-12.6 / 7.0-7.1 = 1.77-1.78x 5.0-5.2
    Delta      UK    201 / 13.5 = 15x      137 / 11.3 = 12x      10.8-11.0 / 7.0-7.1 = 1.53x

Ball joints (nq != nv, 2026-11-28, 200 states x 2, load 8.0-8.8): the Stewart platform (``mjcf/stewart_ball.xml``:
36 v, 42 q, 5 welds, 30 passive v) now takes both compiled steps. Against the NumPy steps it took before
(``manifold_ab``, interleaved): PIDC 538 vs 2724 us (0.20x), UK 379 vs 32111 us (0.012x; the generic path's SVDs and
null-space projections), torques within 2.5e-14 / 1.4e-14 of max |tau| (the compiled medians there above the ones
below: the NumPy steps between them evict the caches). Against constraintDynamics it misses the target: PIDC 338 /
86 us = 3.9x, UK 241 / 77 us = 3.1x; on one state repeated (load 9) the kernel call is 378 us (UK) and 495 us (PIDC)
of a 423 / 591 us step, the lean pass (crba) 9-12 us, dense factorizations over n = 36 columns (UK: 63 rows in its
upper level, the loops' and the passive joints'), where Pinocchio's solver exploits the tree's sparsity. Not fixed
here.

The three mechanisms without ball joints meet the target (<= 2x) with both laws; the four-bar with the smallest
margin (UK 1.93-2.03x over six runs at loads 2-6 before; PIDC 1.80-1.95x at loads 1.6-2.7 before its call went
straight to the closed-chain step, 1.75-1.79x after).  UK: the robot's lean
pass (``pin.crba``) and one compiled call (``controllers/uk_plan.py``, ``_uk_kernels.uk_step``: h, the frames, the
loops' rows of ``models/_loop_kernels.py`` as level 1, the task rows, the passive joints' zero-torque rows and
the vanishing-row test (``passive_level``), the KKT solve, τ = T y (``kernels.passive_torque``)).  On one state
repeated (load 6): five-bar step 4.0 µs = lean pass 0.9 + kernel call 2.1 (1.6 of it compute, the rest numba's
dispatch of seven arguments) + Python 0.9 (the plan's checks, the step's buffer and record); four-bar 3.0 = 0.8 +
1.4 (0.9) + 0.8; Delta 10.5 = 2.0 + 7.8 (7.3) + 0.7, where the compute is mostly the KKT solve (15 joints, 15 rows)
and the COD of the 12×12 G = S_p J_cᵀ.  What took the compiled UK step from 2.5x to 1.7x on the five-bar: arrays
inside the kernel made from addresses (``carray``) instead of slices of the tables (a slice carries numba's
reference count, and each call of a sub-kernel with a dozen such arrays paid the atomic increments: 0.6 µs), the
sub-kernels inlined into the step (``inline="always"``: 0.4 µs of argument passing), and G⁺ and T never formed
(one pseudo-inverse solve instead of one per passive joint: 4.5 µs on the Delta; T is formed when a fallback or
the limits need it).  PIDC: the same recipe since pidcfast: the robot's lean pass (crba only) and one compiled call
of seven arguments (``controllers/pidc_plan.py``, ``_pidc_kernels.pidc_closed_step``: h by ``bias_forces``,
frames, loop and task rows, the law with complete orthogonal decompositions instead of SVDs, every table and
scratch a ``carray`` view, the law inlined).  On one state repeated (load 1.5): five-bar step 3.6 µs against
constraintDynamics' 2.4 µs = crba 0.9 + kernel call 2.0 (1.6 compute) + Python 0.7; four-bar 2.6 / 1.5 µs = 0.75 +
1.2 (0.8) + 0.7; Delta 12.1 / 6.8 µs = 1.9 + 9.3 (8.9) + 0.9.  Before (same conditions) the five-bar was 10.2 µs:
lean pass 1.7 (crba and ``pin.nonLinearEffects``), kernel 3.7 (1.8 of it the views made by slicing and reshaping
the tables and scratch, each with its reference count, and two pivot arrays allocated), Python 4.8 (the state's
copies, the circle's targets and gains copied every step, a new PIDCInfo with four slices): now h comes from the
kernel, the targets and gains are copied only when one was set (``models/_params.py``), and the step's record is
one, refilled, its arrays sliced from the step's buffer when read (``pidc._BufferedInfo``).
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

MECHANISMS = ("mjcf/five_bar.xml", "mjcf/four_bar.xml", "mjcf/delta.xml", "mjcf/stewart_ball.xml")
#: mechanisms with ball joints (nq != nv): their compiled steps are also timed against the NumPy steps they took
#: before the compiled ones took nq != nv (``manifold_ab``)
BALL = ("mjcf/stewart_ball.xml",)


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
    for _ in range(n_states):  # a step on the joint manifold (q + dq on hinges and slides)
        q = robot.assemble(pin.integrate(robot.model, robot.q_initial, 0.05 * rng.normal(size=robot.nv)))
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
        out[law] = {
            "control_step_us": s,
            "constraint_dynamics_us": r,
            "ratio": s / r,
            "target": "<= 2",
            "met": s / r <= 2,
        }
    return out


def manifold_ab(model: str, n_states: int, repeat: int) -> dict:
    """The compiled steps of a mechanism with ball joints against the NumPy steps it took before (UK ``fused=False``:
    its generic path; PIDC's ``_numpy_step``), interleaved state by state: median µs of each and their ratio."""
    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController

    cfg = dict(default_config("closed_chain"), model=model)
    robot = load_robot(cfg)
    steps = {}
    for law in LAWS:
        c = dict(cfg, law=law)
        steps[law] = build_law(c, robot, build_reference(c, robot)[1])
        if law == "uk":
            task = build_reference(c, robot)[1]
            steps["uk_numpy"] = UdwadiaKalabaController(
                robot, levels=[[task]], limits=[], warn_free_dof=False, fused=False
            )
        else:
            slow = build_law(c, robot, build_reference(c, robot)[1])
            slow._plan, slow._rows_compiled = None, False
            steps["pidc_numpy"] = slow
    cs = ClosureSet(robot.loops)
    rng = np.random.default_rng(0)
    states = []
    for _ in range(n_states):
        q = robot.assemble(pin.integrate(robot.model, robot.q_initial, 0.05 * rng.normal(size=robot.nv)))
        states.append((q, project(cs.jacobian(q)).P @ rng.normal(size=robot.nv)))
    us: dict = {k: [] for k in steps}
    worst = {law: 0.0 for law in LAWS}
    clock = time.perf_counter
    for _ in range(repeat):
        for k, (q, v) in enumerate(states):
            taus = {}
            for name, ctl in steps.items():
                t0 = clock()
                tau = ctl(1e-3 * k, q, v)
                us[name].append((clock() - t0) * 1e6)
                taus[name] = np.array(tau)
            for law in LAWS:
                ref = taus[law + "_numpy"]
                worst[law] = max(worst[law], float(np.abs(taus[law] - ref).max() / np.abs(ref).max()))
    out: dict = {}
    for law in LAWS:
        a, b = float(np.median(us[law])), float(np.median(us[law + "_numpy"]))
        out[law] = {"compiled_us": a, "numpy_us": b, "ratio": a / b, "torque_rel_diff_max": worst[law]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    out: dict = {m: measure(m, args.states, args.repeat) for m in MECHANISMS}
    out["ball_joints_compiled_vs_numpy"] = {m: manifold_ab(m, args.states, args.repeat) for m in BALL}
    out["load_average"] = [load0, os.getloadavg()[0]]
    for m in MECHANISMS:
        for law in LAWS:
            r = out[m][law]
            print(
                f"{m:22s} {law:4s} step {r['control_step_us']:8.1f} us   constraintDynamics "
                f"{r['constraint_dynamics_us']:6.1f} us   ratio {r['ratio']:6.1f} "
                f"(target <= 2: {'met' if r['met'] else 'MISSED'})"
            )
        print(f"{'':27s}computeAllTerms alone {out[m]['compute_all_terms_us']:6.1f} us")
    for m, ab in out["ball_joints_compiled_vs_numpy"].items():
        for law in LAWS:
            r = ab[law]
            print(
                f"{m:22s} {law:4s} compiled {r['compiled_us']:8.1f} us   NumPy {r['numpy_us']:8.1f} us   "
                f"ratio {r['ratio']:5.3f}   torques within {r['torque_rel_diff_max']:.1e} of max |tau|"
            )
    print(f"load average (1 min) before/after: {load0:.2f} / {out['load_average'][1]:.2f}")
    (results_dir() / "closed_chain.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
