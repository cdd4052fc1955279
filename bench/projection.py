"""Speed of the projection-method pieces ([Aghili]): PIDC control step (closed form, QP, series-parallel
adapter) and the projection simulator's step, on the states of real closed-loop runs.  Never asserted.

The PIDC step's floor is the one Pinocchio call it needs, ``pin.computeAllTerms`` (M and h; what
``Robot.update`` runs), on the same state; the closed form has no QP.  Step and floor are called
alternately on every recorded state (interleaved, so machine load hits both alike); the ratio is that
of the medians.  Writes bench/results/projection.json.

    python -m bench.projection [--repeat 3]

Before issue 12's compiled step (busy 2-core machine, load 16-19, interleaved medians): slider-crank PIDC
step 322 µs → 146 µs after the one-row closed forms (project: σ = ‖a‖; (SP)⁺ by Sherman–Morrison; the
passive law (60–62) rank 1) replaced three LAPACK SVDs; ratio 29× → 24×, series-parallel 24–27× (quiet
machine: 110 µs / 102 µs, 24–28× a 3.9–4.2 µs computeAllTerms).

After (``PIDC._compiled_step``: one ``pin.computeAllTerms`` read in place, the constraint row on Python floats
(``SliderCrankLoop.row_and_jdot_v``; the series-parallel adapter lifted and formed its row in a kernel, since
removed), and the whole law in one numba kernel ``controllers/kernels.py: pidc_one_row``, a
sinusoid reference evaluated inside it), busy machine (load 8-11), interleaved with the floor, medians over
2000 states × 3; the NumPy step in a second pass the same way:

    slider-crank      23.4 µs / computeAllTerms 3.0 µs = 7.9×    (NumPy step 80.5 µs = 25.3×; another run
    11.6 / 1.6 = 7.2×)
    series-parallel   16.9 µs / computeAllTerms 2.8 µs = 6.1×    (NumPy step 201 µs = 24.7×; another run 16.5
    / 2.7 = 6.2×)

Since issue 23 the series-parallel PIDC is the generic one on the arm's closed chain read from its MJCF
(``ActuatedJointsPIDC``: the passive ζ, α closed by Newton on the loop at every step, then PIDC on the 3 loop
rows): 344 µs a step in the scenario's run at first (was 11.6 µs).  Then (interleaved on 4000 closed-loop
states × 3, load 5-6, medians): the SVD Newton from the last solution 128 µs (3 ClosureSet passes of ~30 µs of
Python and 3 SVDs; the inner PIDC step, already the multi-row kernel, 31 µs, now the fused closed-chain step,
9.6 µs) → 42 µs with the tangent prediction (one Newton step), lean passes and the compiled QR solve
(``controllers/_passive_kernels.py``) → 29 µs with the start, the checks and the scratch in kernels of few
arguments: the completion 17.7 µs (two lean passes of ~6 µs, computeJointJacobians and the loops' two frames in
Python, and two kernel calls of ~2 µs), the PIDC step 9.6 µs.  The same with the actuator bodies.  With the
completion's lean pass its ``ClosureSet``'s (one computeJointJacobians and one compiled call for the frames and the
rows): the completion 16.8 → 11.0 µs, the whole ``ActuatedJointsPIDC`` step 25.3 → 19.5 µs (interleaved, 3000
actuated states on a smooth path, two passes each, load 1.6).

Since 2026-11-27 the slider-crank is read from its model file (``scenarios.slider_crank.load_robot``: the URDF and its
loops sidecar, the rail a one-row ``plane`` closure) and its PIDC is the compiled closed-chain step on ``robot.loops``
(``controllers/pidc_plan.py``; the plane rows added to ``models/_loop_kernels.py``), no longer the one-row kernel
on the hand-written ``SliderCrankLoop`` (now a test oracle).  Interleaved with computeAllTerms on 2000 closed-loop
states × 3, medians, load 5.5: the hand-written loop's one-row step 9.9 µs = 10.4×, the generic loop with the plane
rows in Python (PIDC's ``_rows_step``) 24.5 µs = 25.8×, the generic loop's compiled closed-chain step 7.3 µs = 7.7×.
The projection simulator's step on the generic loop (a ``ClosureSet`` Pinocchio pass per evaluation, 5-6 a step)
is slower: 152 µs against 89 µs with the closed form (interleaved, unforced, load 5.7); 137 µs against 92 µs (load
7.1) with the plane rows in one compiled call (2.5 µs; 11 µs as NumPy): what is left was the pass's Pinocchio calls
and their accessors (~9 µs a pass).  With the pass lean (one ``computeJointJacobians``, then the frames from data.J
and every closure's φ, J, J̇v in one kernel, ``_loop_kernels.closure_pass``): 133-136 → 95-97 µs (0.72×), the
closed form 87-89 µs, interleaved old/new/closed form, 2000 steps from (0, 0) at q̇ = (6, −3) rad/s, load 3.3; the
five-bar's projection step 207-211 → 160-163 µs (0.77×); one five-bar ``ClosureSet`` pass 10.5 → 3.3 µs.

The compiled step costs 3-4× fewer floors than the NumPy one; the 1.5× target is still MISSED: 1.5× a 1.6-4 µs
computeAllTerms leaves < 1-2 µs for everything that is not Pinocchio, about the cost of the Python calls
themselves.  Where a slider-crank step goes (component medians on the same states, busy: 14.9 µs in all,
floor 2.0): computeAllTerms and the state copies for the lazily built ``kin`` 3.8, the constraint row 2.0,
the scenario's reference function (three one-element arrays) 4.3, the kernel call (11 arguments, ~0.12
µs each to dispatch) 2.4, the info record 1.0, method calls the rest.

How much room 1.5× leaves (``bench.python_floor``, measured interleaved beside step and floor): the least
a Python controller can cost around the same computeAllTerms (its call, the Pinocchio call, one
six-argument numba kernel reading M and h through views kept from one step to the next, the return) is
1.3× (slider-crank: 1.6 µs against 1.2 µs; series-parallel: 2.0 / 1.6 µs; quiet, load 1.5).  So 1.5×
leaves 0.2-0.4 µs for the whole law beyond that bound: less than one more compiled-kernel call or one
Python method call.  (A first version of this bound read data.M / data.nle anew in every call and gave
1.6-1.8×; a controller that keeps the views does better, so that was not the least.)  The PIDC steps
were 8.4 and 7.3 µs (3.9× / 2.9× that first bound); now 6.4 and 6.7 µs, 3.9× / 3.3× the bound: the
slider-crank reference, a user function, is called directly by the compiled step and returns floats (no
Sample, no 1-element arrays), and the Pinocchio views are kept (``Robot.dynamics_views``).  What is left:
the constraint row (1.0 µs), the kernel dispatch of 11 arguments and the step's bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pinocchio as pin

from cmstack.bench import call_times_us, closed_loop_states, python_floor, results_dir
from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config
from cmstack.scenarios.slider_crank import build_controller, load_robot
from cmstack.sim.projection_sim import ProjectionPlant


def _median_us(fn, items, repeat):
    """(median, 95th percentile) µs per call of ``fn`` on each of ``items``, ``repeat`` passes."""
    ts = call_times_us({"": fn}, items, repeat)[""]
    return float(np.median(ts)), float(np.percentile(ts, 95))


#: issue 12: PIDC step ≤ 1.5× its floor
PIDC_TARGET = 1.5


def _ratio_to_floor(fn, model, data, items, repeat, arg=lambda t, q, v: (q, v), before=None):
    """Interleaved medians [µs] of fn(t, q, v) and of its floor pin.computeAllTerms(model, data, q, v)
    at ``arg(t, q, v)``, and their ratio; ``before(t, q, v)``: the NumPy step the compiled one replaced,
    measured the same way in a second pass (interleaved with the floor, not with the step: its larger
    working set would slow the step it alternated with)."""
    pyf = python_floor(pin.computeAllTerms, model, pin.Data(model), model.nv)

    def one(f, with_python_floor=False):
        step, floor, pfl = [], [], []
        perf = time.perf_counter
        for _ in range(repeat):
            for t, q, v in items:
                qf, vf = arg(t, q, v)
                c0 = perf()
                f(t, q, v)
                c1 = perf()
                pin.computeAllTerms(model, data, qf, vf)
                c2 = perf()
                step.append(c1 - c0)
                floor.append(c2 - c1)
                if with_python_floor:
                    c3 = perf()
                    pyf(t, qf, vf)
                    pfl.append(perf() - c3)
        med = [float(np.median(x)) * 1e6 if x else float("nan") for x in (step, floor, pfl)]
        return med

    ms, mf, mp = one(fn, True)
    out = {
        "step_us_median": ms,
        "floor_us_median": mf,
        "ratio": ms / mf,
        "target": PIDC_TARGET,
        "met": ms / mf <= PIDC_TARGET,
        "states": len(items),
        "repeat": repeat,
        # the least a Python controller costs around the same computeAllTerms (bench.python_floor)
        "python_floor_us_median": mp,
        "python_floor_ratio": mp / mf,
        "step_over_python_floor": ms / mp,
    }
    if before is not None:
        bs, bf, _ = one(before)
        out.update(numpy_step_us_median=bs, numpy_ratio=bs / bf)
    return out


def slider_crank(repeat: int):
    cfg = default_config("slider_crank")
    robot = load_robot(cfg)  # the URDF and its sidecar: robot.loops = [the rail]
    plant = ProjectionPlant(robot, None, sim_dt=cfg["sim_dt_projection"], rank_tol=cfg["rank_tol_sim"])
    plant.reset(np.zeros(2))
    ctl = build_controller(cfg, robot)
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
        c = build_controller(cfg2, robot)
        out[f"slider_crank {name} control_step_us (median, p95)"] = _median_us(c, states, repeat)
    c = build_controller(cfg, robot)
    d = pin.Data(robot.model)
    cn = build_controller(cfg, load_robot(cfg))
    out["ratio"] = {
        "slider_crank_pidc": _ratio_to_floor(c, robot.model, d, states, repeat, before=cn._numpy_step)
    }
    return out


def series_parallel(repeat: int):
    from cmstack.scenarios.series_parallel import build_pidc, build_plant, make_trajectory, reset_plant

    cfg = default_config("series_parallel")
    traj = make_trajectory(cfg)
    plant = build_plant(cfg)
    q0 = traj(0.0)[0] + np.asarray(cfg["initial_error"])
    reset_plant(plant, cfg, q0)
    ctl = build_pidc(cfg, traj)
    states = closed_loop_states(plant, ctl, 2000)
    c = build_pidc(cfg, traj)
    model = c.robot.model
    d = pin.Data(model)
    lifter = build_pidc(cfg, traj)

    def arg(t, q, v):
        return lifter.complete(q, v)  # the floor: computeAllTerms at the chain's completed state

    return {
        "series_parallel pidc control_step_us (median, p95)": _median_us(
            build_pidc(cfg, traj), states, repeat
        ),
        "ratio": {"series_parallel_pidc": _ratio_to_floor(c, model, d, states, repeat, arg)},
    }


def yumi_force(repeat: int):
    from cmstack.models.loops import assemble
    from cmstack.scenarios.yumi_dual_arm import build_pidc_force, build_problem, initial_state
    from cmstack.sim.plant import MujocoPlant

    cfg = default_config("yumi_dual_arm")
    cfg.update(plant="bar", controller="pidc_force")
    robot = Robot(cfg["urdf"])
    coupling, task, _, _ = build_problem(cfg, robot)
    plant = MujocoPlant(
        cfg["mjcf_bar"], robot.joint_names, sim_dt=cfg["control_dt"], integrator=cfg["integrator"]
    )
    plant.reset(assemble(robot, initial_state(cfg, robot), [coupling], within_ranges=False))
    ctl = build_pidc_force(cfg, robot, coupling, task)
    ctl.attach_plant(plant)
    states = closed_loop_states(plant, ctl, 400)
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
        print(
            f"{name} step {r['step_us_median']:.1f} µs / floor computeAllTerms {r['floor_us_median']:.1f} µs "
            f"= {r['ratio']:.1f}× (target ≤ {PIDC_TARGET}×: {'met' if r['met'] else 'MISSED'}; interleaved, "
            f"{r['states']} states × {r['repeat']}; the least Python controller around the same call "
            f"{r['python_floor_us_median']:.1f} µs = {r['python_floor_ratio']:.1f}× the floor, the step "
            f"{r['step_over_python_floor']:.1f}× it; the NumPy step before: {r.get('numpy_step_us_median', float('nan')):.1f} µs = {r.get('numpy_ratio', float('nan')):.1f}×)"  # noqa: E501
        )
    (results_dir() / "projection.json").write_text(json.dumps({"pidc_ratio": ratios, "other": res}, indent=2))
    for k, v in res.items():
        print(
            f"{k:<72} {v if isinstance(v, float) else '  '.join(f'{x:.1f}' for x in v)}"
            if not isinstance(v, float)
            else f"{k:<72} {v:.1f}"
        )


if __name__ == "__main__":
    main()
