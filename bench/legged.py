"""The legged scenario's control step (``ContactUKController``: four stance feet, four loops, the base and the
knees at zero torque; base pose, centre of mass, posture) against one ``pin.constraintDynamics`` of the same
robot with its loops and its four stance contacts (issue 31's target: <= 3x), interleaved on the same states.
Never asserted.

    python -m bench.legged [--states 200] [--repeat 3] [--profile 300]

States: those of a 0.8 s run of the scenario's default config on its MuJoCo plant (standing, then the base's
circle starting), the stance controller the scenario's own (``scenarios/legged.py: LeggedLaw``).  Each state is
given to the step and to the reference call in turn (machine load hits both alike); the ratio is that of their
medians.  The reference is Pinocchio's forward dynamics with the loops (``pinocchio_constraint_models``) and the feet's
CONTACT_3D models (``PointContact.pinocchio_model``), proximal settings as bench.closed_chain's (1e-12, 1e-8,
20 iterations; the iterations it used are reported); ``pin.computeAllTerms`` alone is reported beside them, with
the 1-minute load average.  ``--profile N`` runs N steps under cProfile and prints where the time goes.
Writes bench/results/legged.json.

Measured (2-core machine shared with other sessions; ratio of medians, interleaved):

    controller                                          step / constraintDynamics   ratio   load
    as landed (generic NumPy, 5 SVDs)                   2407 / 148 us               16.2x   5.4-5.9
    G's SVD once, ... (ff265b8), the loops' rows in     1682 / 119 us               14.1x   5.4-6.0
      one compiled pass
    before the compiled step (c4b2de5)                  1361 / 94 us                14.5x   3.3
    compiled rows and algebra, LAPACK SVD (4638a2e)     792 / 148 us                5.35x   5.6-5.8
    + one algebra call (fused)                          629 / 131 us                4.80x   8.0
    + J_h's SVD by warm-started Jacobi (b9760f6)        247 / 71 us                 3.49x   6.7
    + the rows' Python cut, the scenario's base offset  301 / 104 us, 337 / 115 us, 2.90x, 2.92x,  7.2-9.6
      in one product (eb09a85)                          414 / 143 us                2.89x
    + fastmath (reassoc, contract) in the step's        300 / 109 us, 398 / 140 us  2.75x, 2.84x  6.4-6.9
      kernels, J_h's Jacobi pairs in sorted order;        (before, alternated with it: 3.00x, 2.89x)
    the biped (--config legged_biped), before           714 / 226 us, 708 / 218 us  3.16x, 3.25x  5.7-6.7
      and after                                         651 / 240 us, 608 / 214 us  2.72x, 2.84x  6.1-6.9
    + null(G) by a Householder LQ on G's rows           biped 466 / 184, 521 / 204  2.53x, 2.56x  6.8-7.5
      (null_rows; was _qp_kernels.null_basis: 76 of       (before all of these: 3.22x, 3.09x)
      the biped's 145 us of algebra)                    quadruped 273 / 102, 315 / 114  2.68x, 2.77x
                                                          (before all of these: 2.93x, 2.68x)

The target (<= 3x) is met, with little margin (2.89-2.92x over three runs at load 7-9.6).  constraintDynamics runs
its 20 proximal iterations (the cap: the level stance is near rank deficient).

Where one step goes.  Before (the NumPy law, its own clocks, 300 stance states x 3, load 5.0: 2318 us against 133 us,
17.4x): the task rows in Python (base, CoM, posture) 396 us, the cascade's SVDs and Gauss 312, J_h's truncating SVD
203, the force choice 199, G's SVD and the passive rows 143, the loops' rows 121, the contacts' rows 115,
``robot.update`` 65, info 32.  Now (the step's clocks, ``ContactUKController._clock``, printed by this bench; 200
states x 3, load 7.8-9.6): computeAllTerms (+ the state checks) 35-46 us, the rows 128-171 (of which the scenario's
targets in Python about half: its ``base_ref``'s SE3 and the CoM task's ``desired``; the one rows kernel ~25), J_h's
SVD 68-71 (compiled one-sided Jacobi warm-started from the last step: LAPACK's took 144-208 us interleaved with
constraintDynamics, 75 alone), the algebra 69-81 (one compiled call: reactions, G's rank certificate by Cholesky,
level 0 from J_h's SVD, the base level by Jacobi, λ_p, null(G), the force choice, margins, τ), info 14-17.  The torque
is the NumPy law's to 1.4e-13 of max |τ| on all 6000 states of the default run (1.6e-11 on the 55 cone-QP steps:
the QP in another basis of null(G)); ``ContactUKController(..., compiled=False)`` is that law, the reference of
tests/test_contact_kernels.py.  What is left is mostly Python: the users' target functions, the argument passing
of two kernel calls (~35 arguments each) and the info dictionaries.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

from cmstack.bench import results_dir
from cmstack.models.contact import pinocchio_stance_models
from cmstack.models.robot import Robot, resolve_asset
from cmstack.scenarios._common import resolve_config
from cmstack.scenarios.legged import LeggedLaw, Phases
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.runner import simulate

TARGET = 3.0
#: the compiled step's parts, between its clocks (``ContactUKController._clock``), in order
PHASES = (
    "computeAllTerms (+ state checks)",
    "rows (frames, loops, contacts, tasks; targets sampled)",
    "SVD of J_h (compiled one-sided Jacobi, warm-started)",
    "algebra: reactions, cascade, forces, margins (one compiled call)",
    "cone QP when needed, info",
)


class _Recorder:
    """The law, recording the states it is called with."""

    def __init__(self, law):
        self.law, self.states = law, []

    @property
    def info(self):
        return self.law.info

    def __call__(self, t, q, v):
        self.states.append((t, q.copy(), v.copy()))
        return self.law(t, q, v)


def setup(n_states: int, run_s: float = 0.8, config: str | None = None):
    """(robot, the scenario's stance controller, its contacts, states [(t, q, v)]): the states are n_states of a
    run_s run of the scenario's default config (or ``config``, a path or a shipped config's name such as
    ``legged_biped``) on its MuJoCo plant (stand 0.3 s, then the circle's ramp), taken evenly after the first 0.1 s;
    the contacts stay anchored where that run put them."""
    # the defaults with the file over them, as `cmstack run` has it
    cfg = dict(resolve_config("legged", config))
    robot = Robot.from_mjcf(resolve_asset(cfg["model"]))
    law = LeggedLaw(robot, cfg, Phases(cfg))
    plant = plant_from_mjcf(robot, sim_dt=cfg["sim_dt"])
    plant.reset(robot.q_initial)
    rec = _Recorder(law)
    simulate(plant, rec, duration=run_s, control_dt=cfg["control_dt"], progress=False)
    pick = np.linspace(100, len(rec.states) - 1, n_states).astype(int)
    return robot, law.stance, law.contacts, [rec.states[k] for k in pick]


def measure(robot, ctl, contacts, states, repeat: int, model: str = "mjcf/quadruped_five_bar.xml") -> dict:
    cms, cds = pinocchio_stance_models(robot, contacts)
    data = robot.model.createData()
    pin.initConstraintDynamics(robot.model, data, cms, cds)
    prox = pin.ProximalSettings(1e-12, 1e-8, 20)
    cat = robot.model.createData()
    step_us, ref_us, cat_us, iters, phases = [], [], [], [], []
    clock = time.perf_counter
    ck = ctl._clock = []  # the step's own clocks (ContactUKController: PHASES)
    for _ in range(repeat):
        for t, q, v in states:
            ck.clear()
            t0 = clock()
            tau = ctl(t, q, v)
            t1 = clock()
            if len(ck) == len(PHASES) + 1:
                phases.append(np.diff(ck))
            pin.constraintDynamics(robot.model, data, q, v, tau, cms, cds, prox)
            t2 = clock()
            step_us.append((t1 - t0) * 1e6)
            ref_us.append((t2 - t1) * 1e6)
            iters.append(prox.iter)
            t0 = clock()
            pin.computeAllTerms(robot.model, cat, q, v)
            cat_us.append((clock() - t0) * 1e6)
    ctl._clock = None
    s, r = float(np.median(step_us)), float(np.median(ref_us))
    ph = np.median(np.array(phases), axis=0) * 1e6 if phases else np.full(len(PHASES), np.nan)
    return {
        "robot": model,
        "nv": robot.nv,
        "rows": int(len(data.lambda_c)),
        "control_step_us": s,
        "constraint_dynamics_us": r,
        "ratio": s / r,
        "target": f"<= {TARGET:g}",
        "met": s / r <= TARGET,
        "prox_iterations_median": float(np.median(iters)),
        "compute_all_terms_us": float(np.median(cat_us)),
        "cone_qp_steps": ctl.cone_qp_steps,
        "phases_us": {name: float(x) for name, x in zip(PHASES, ph)},
    }


def profile(ctl, states, n: int) -> str:
    """cProfile of n steps on the bench's states (own time, the top entries)."""
    pr = cProfile.Profile()
    pr.enable()
    for k in range(n):
        t, q, v = states[k % len(states)]
        ctl(t, q, v)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    return s.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, help="also profile this many steps (cProfile)")
    ap.add_argument(
        "--config",
        default=None,
        help="the legged scenario's config: a path or a shipped name (e.g. legged_biped)",
    )
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    robot, ctl, contacts, states = setup(args.states, config=args.config)
    model = str(resolve_config("legged", args.config)["model"])
    out = measure(robot, ctl, contacts, states, args.repeat, model)
    out["load_average"] = [load0, os.getloadavg()[0]]
    print(
        f"legged ({out['robot']}, nv {out['nv']}, {out['rows']} rows): step {out['control_step_us']:8.1f} us   "
        f"constraintDynamics {out['constraint_dynamics_us']:6.1f} us ({out['prox_iterations_median']:.0f} "
        f"proximal iterations)   ratio {out['ratio']:6.2f} (target <= {TARGET:g}: "
        f"{'met' if out['met'] else 'MISSED'})"
    )
    print(f"computeAllTerms alone {out['compute_all_terms_us']:6.1f} us")
    print("the step's parts (medians of its own clocks, us):")
    for name, x in out["phases_us"].items():
        print(f"  {x:7.1f}  {name}")
    print(f"load average (1 min) before/after: {load0:.2f} / {out['load_average'][1]:.2f}")
    stem = "legged" if not args.config else Path(str(args.config)).stem.removesuffix(".toml")
    (results_dir() / f"{stem}.json").write_text(json.dumps(out, indent=1))
    if args.profile:
        print(profile(ctl, states, args.profile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
