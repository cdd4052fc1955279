"""YuMi UK control step against its kernel floor (issue 12), measured as ratios, interleaved in one
process, on the states of a real closed-loop run (thesis set-up, 2 s at 200 Hz).

* floor: ``pin.computeAllTerms`` + the three frame Jacobians the step needs (E₁, E₂, the coupling
  body B) + one ProxSuite dense update+solve of the same size (14 variables, 6 equalities, 14
  inequality rows), warm-started, on that state's QP;
* UK weighted: the thesis set-up, effort limits on (target ≤ 1.25× the floor);
* UK 3 strict levels: coupling / E₁ task / posture (with Gauss), effort limits (target ≤ 2× the floor);
* TSID on the same states if the ``tsid`` package is installed (coupling as a priority-0 equality
  task, the E₁ task weighted, actuation bounds); skipped otherwise.

For every state the calls run back to back in a rotating order, so that machine load hits all of
them alike; medians over all states and repeats.  ``uk_*_python`` are the same controllers on the
generic Python path (``fused=False``), for a before/after in one process.

    python -m cmstack.bench.yumi_uk [--repeat 5] [--fused-only] [--profile]

Measured 2026-11-23 (2-core machine shared by ~6 sessions, load average 6–14; interleaved, medians;
400 closed-loop states; every step took the direct KKT path, no QP):

    | step                         | median        | ratio to the floor | target |
    | floor                        | 79–109 µs     | 1                  |        |
    | UK weighted, fused kernels   | 60–90 µs      | 0.76–0.84×         | ≤ 1.25× met |
    | UK 3 strict levels, fused    | 56–78 µs      | 0.69–0.80×         | ≤ 2×    met |
    | UK weighted, generic Python  | 224–300 µs    | 2.61–3.06×         |        |
    | UK 3 levels, generic Python  | 254–336 µs    | 2.90–3.50×         |        |

(0.76–0.80× with ``--fused-only``, 0.82–0.84×/0.70–0.74× with the generic path interleaved, whose
cache pressure slows every other call.)  No quiet machine was available for this measurement.  The step is below the floor because the floor contains a QP solve
(≈ 45–60 µs) that the step skips unless a limit is violated.

How the fused path works (``controllers/_uk_kernels.py``): ``Robot.update`` runs
``pin.computeAllTerms`` once; one ``numba`` kernel call then reads data.J, the needed joints' data.oMi
and data.a (views bound once) and computes the frames' poses, Jacobians, twists and classical
accelerations, every task's rows (the SO(3) log, the drift terms, the Circle target), H and r, the
Schur-complement KKT solve, τ and the effort check.  Python keeps the trajectory call for other
targets, the gains and targets read every step, the info, and the fallbacks (null space, ProxSuite).

Profile before (generic path; cProfile, share of the weighted step, last session): frame look-ups
25 %, the E₁ task's rows 16 %, the KKT solve 15 %, ``Robot.update`` 12 %, the coupling's rows 10 %,
the call itself 9 %, the limit check 6 % — dozens of NumPy/Pinocchio calls of 1–2 µs each.

Profile after (``--profile``: the weighted fused step in context, interleaved with the floor and the
generic path, its parts clocked inside the step; load ≈ 7.7):

    | part                                   | median  | share of the step |
    | whole step                             | 67.0 µs | 100 %  (0.85× the floor of that run) |
    | pin.computeAllTerms                    | 10.9 µs | 16 %   |
    | Robot.update beyond it (checks, copies)| 14.6 µs | 22 %   |
    | kernel call (dispatch + ≈ 6 µs compute)| 22.8 µs | 34 %   |
    | rest of the step (Python: targets,     | 18.7 µs | 28 %   |
    |   gains, buffers, info)                |         |        |

Back to back without the interleaving the same step takes 27–30 µs: what remains is the per-call
cost of Python and of the dispatcher on cold caches, no longer the algebra.  The first use in a
process imports numba and loads the cached machine code (≈ 0.7 s CPU); after a change of
``_uk_kernels.py`` (or in a clean checkout) the first step compiles it once (≈ 11–13 s CPU on this
machine), then ``__pycache__`` holds it.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import pinocchio as pin
import proxsuite

from cmstack.bench import results_dir
from cmstack.controllers.udwadia_kalaba import GAUSS, UdwadiaKalabaController
from cmstack.models.coupling import PostureTask
from cmstack.models.limits import EffortLimit
from cmstack.models.robot import Robot
from cmstack.scenarios._common import default_config
from cmstack.scenarios.yumi_dual_arm import build_problem, initial_state
from cmstack.sim.plant import MujocoPlant

LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
TARGETS = {"uk_weighted": 1.25, "uk_3_levels": 2.0}


def setup():
    cfg = default_config("yumi_dual_arm")
    robot = Robot(cfg["urdf"])
    coupling, task, _, _ = build_problem(cfg, robot)
    q0 = initial_state(cfg, robot)
    return cfg, robot, coupling, task, q0


def weighted(cfg, robot, coupling, task, fused=True):
    return UdwadiaKalabaController(robot, [coupling], [task], omega=cfg["omega"], priority="weighted",
                                   torque_limits=True, warn_free_dof=False, fused=fused)


def three_levels(robot, coupling, task, q0, fused=True):
    posture = PostureTask(robot, q0, kp=10.0, kd=2 * np.sqrt(10.0))
    return UdwadiaKalabaController(robot, levels=[[coupling], [task], [posture, GAUSS]], limits=[EffortLimit(robot)],
                                   fused=fused)


def record_states(cfg, robot, coupling, task, q0):
    """States (t, q, v) of the thesis closed loop (weighted UK on the MuJoCo plant)."""
    ctl = weighted(cfg, robot, coupling, task)
    plant = MujocoPlant(cfg["mjcf_virtual"], robot.joint_names, sim_dt=cfg["control_dt"])
    plant.reset(q0)
    out = []
    for _ in range(int(round(cfg["duration"] / cfg["control_dt"]))):
        t = plant.time
        q, v = plant.state()
        out.append((t, q, v))
        plant.set_torque(ctl(t, q, v))
        plant.step()
    return out


class Floor:
    """The kernel floor of one step, on the same states (its QP data prepared outside the timing)."""

    def __init__(self, cfg, robot, coupling, task, states):
        self.m = robot.model
        self.d = robot.model.createData()
        self.fids = (coupling.fB, coupling.f2, task.fid)
        self.problems = []
        D = robot.damping
        for t, q, v in states:
            kin = robot.update(q, v)
            A, b = coupling.compute(kin, t)
            Au, bu = task.compute(kin, t)
            hD = kin.h + D * v
            H = kin.M + cfg["omega"] * Au.T @ Au
            g = hD - cfg["omega"] * Au.T @ bu
            tm = robot.effort_limit
            self.problems.append((H, g, A, b, kin.M, -tm - hD, tm - hD))
        self.qp = proxsuite.proxqp.dense.QP(robot.nv, 6, robot.nv)
        self.qp.settings.eps_abs = 1e-9
        self.qp.settings.eps_rel = 0.0
        self.qp.init(*self.problems[0])
        self.qp.solve()
        self.qp.settings.initial_guess = proxsuite.proxqp.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT

    def __call__(self, k, t, q, v):
        m, d = self.m, self.d
        pin.computeAllTerms(m, d, q, v)
        for fid in self.fids:
            pin.getFrameJacobian(m, d, fid, LWA)
        self.qp.update(*self.problems[k], update_preconditioner=False)
        self.qp.solve()


def tsid_step_factory(cfg, robot, coupling, task):
    """TSID on the same problem, or None when the package is absent."""
    try:
        import tsid  # noqa: F401
    except ImportError:
        return None
    import tsid

    robw = tsid.RobotWrapper(robot.model, False, False)
    form = tsid.InverseDynamicsFormulationAccForce("uk", robw, False)
    form.computeProblemData(0.0, np.zeros(robot.nq), np.zeros(robot.nv))
    # E1 task (weighted) and the coupling as an equality (priority 0) on the relative motion
    task_e1 = tsid.TaskSE3Equality("E1", robw, robot.model.frames[task.fid].name)
    task_e1.setKp(cfg["task_kp"] * np.ones(6))
    task_e1.setKd(cfg["task_kd"] * np.ones(6))
    form.addMotionTask(task_e1, cfg["omega"], 1, 0.0)
    bounds = tsid.TaskActuationBounds("tau", robw)
    bounds.setBounds(-robot.effort_limit, robot.effort_limit)
    form.addActuationTask(bounds, 1.0, 0, 0.0)
    solver = tsid.SolverHQuadProgFast("qp")
    solver.resize(form.nVar, form.nEq, form.nIn)
    sample = tsid.TrajectorySample(12, 6)

    def step(k, t, q, v):
        T_D, vel, acc = task.desired(t)
        sample.value(np.r_[T_D.translation, T_D.rotation.reshape(-1, order="F")])
        sample.derivative(vel)
        sample.second_derivative(acc)
        task_e1.setReference(sample)
        hqp = form.computeProblemData(t, q, v)
        return solver.solve(hqp)

    return step


def measure(repeat: int = 5, python_path: bool = True) -> dict:
    cfg, robot, coupling, task, q0 = setup()
    states = record_states(cfg, robot, coupling, task, q0)
    floor = Floor(cfg, robot, coupling, task, states)
    ctl_w = weighted(cfg, robot, coupling, task)
    ctl_3 = three_levels(robot, coupling, task, q0)
    calls = {"floor": floor,
             "uk_weighted": lambda k, t, q, v: ctl_w(t, q, v),
             "uk_3_levels": lambda k, t, q, v: ctl_3(t, q, v)}
    if python_path:      # the same controllers on the generic Python path (fused=False): before/after
        ctl_wp = weighted(cfg, robot, coupling, task, fused=False)
        ctl_3p = three_levels(robot, coupling, task, q0, fused=False)
        calls["uk_weighted_python"] = lambda k, t, q, v: ctl_wp(t, q, v)
        calls["uk_3_levels_python"] = lambda k, t, q, v: ctl_3p(t, q, v)
    ts = tsid_step_factory(cfg, robot, coupling, task)
    if ts is not None:
        calls["tsid"] = ts
    names = list(calls)
    times = {n: [] for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (t, q, v) in enumerate(states):           # warm-up (first QP init, caches)
            for n in names:
                calls[n](k, t, q, v)
        clock = time.perf_counter_ns
        for r in range(repeat):
            for k, (t, q, v) in enumerate(states):
                shift = (k + r) % len(names)
                for n in names[shift:] + names[:shift]:
                    c0 = clock()
                    calls[n](k, t, q, v)
                    times[n].append(clock() - c0)
    med = {n: float(np.median(times[n])) / 1e3 for n in names}
    ratios = {n: med[n] / med["floor"] for n in names if n != "floor"}
    # per-state ratios, then their median (robust to load that varies along the run)
    per_state = {}
    nk = len(states)
    for n in names:
        if n == "floor":
            continue
        a = np.array(times[n]).reshape(repeat, nk)
        f = np.array(times["floor"]).reshape(repeat, nk)
        per_state[n] = float(np.median(a / f))
    return dict(states=len(states), repeat=repeat, median_us=med, ratio_of_medians=ratios,
                median_of_ratios=per_state, targets=TARGETS, tsid="measured" if ts else "absent (not installed)",
                paths=dict(uk_weighted=ctl_w.info.path, uk_3_levels=ctl_3.info.path),
                cold_retries=dict(uk_weighted=ctl_w.cold_retries, uk_3_levels=ctl_3.cold_retries))


def profile(repeat: int = 3) -> dict:
    """Where the fused weighted step's time goes, in context: the step runs interleaved with the
    floor and the generic path as in ``measure``, with ``Robot.update``, ``computeAllTerms`` and the
    kernel call ``uk_step`` wrapped by clocks (≈ 0.1 µs each), so that the parts add up to the step.
    Returns medians in µs: floor, step, generic step, and the parts of the step."""
    cfg, robot, coupling, task, q0 = setup()
    states = record_states(cfg, robot, coupling, task, q0)
    floor = Floor(cfg, robot, coupling, task, states)
    ctl = weighted(cfg, robot, coupling, task)
    slow = weighted(cfg, robot, coupling, task, fused=False)
    P = ctl._plan
    clock = time.perf_counter_ns
    parts = {"computeAllTerms": 0, "Robot.update": 0, "kernel call": 0}
    import cmstack.models.robot as robot_module

    cat, update, kernel = robot_module.pin.computeAllTerms, robot.update, P.step

    def timed(name, f):
        def g(*a):
            c0 = clock()
            out = f(*a)
            parts[name] += clock() - c0
            return out
        return g

    class _Pin:                       # the robot module's ``pin`` with a clocked computeAllTerms
        computeAllTerms = staticmethod(timed("computeAllTerms", cat))

        def __getattr__(self, k):
            return getattr(pin, k)

    calls = {"floor": floor, "step": lambda k, t, q, v: ctl(t, q, v), "generic step": lambda k, t, q, v: slow(t, q, v)}
    names = list(calls)
    times = {n: [] for n in names + list(parts)}
    robot.update, P.step, robot_module.pin = timed("Robot.update", update), timed("kernel call", kernel), _Pin()
    try:
        for r in range(repeat + 1):
            for k, (t, q, v) in enumerate(states):
                shift = (k + r) % len(names)
                for n in names[shift:] + names[:shift]:
                    for x in parts:
                        parts[x] = 0
                    c0 = clock()
                    calls[n](k, t, q, v)
                    if r:                                   # r = 0: warm-up
                        times[n].append(clock() - c0)
                        if n == "step":
                            for x in parts:
                                times[x].append(parts[x])
    finally:
        del robot.update
        P.step, robot_module.pin = kernel, pin
    return {n: float(np.median(times[n])) / 1e3 for n in times}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fused-only", action="store_true", help="skip the generic Python path (fused=False) columns")
    ap.add_argument("--profile", action="store_true", help="where the fused weighted step's time goes (medians)")
    args = ap.parse_args(argv)
    if args.profile:
        med = profile(args.repeat)
        step = med["step"]
        med["rest of the step (Python)"] = step - med["Robot.update"] - med["kernel call"]
        med["Robot.update"] -= med["computeAllTerms"]
        print("YuMi UK weighted step, fused path: medians (interleaved with the floor and the generic path)")
        for n, x in med.items():
            label = "Robot.update (beyond CAT)" if n == "Robot.update" else n
            print(f"  {label:<26} {x:7.1f} µs   {x / med['floor']:5.2f}× floor   {100 * x / step:5.1f} % of the step")
        return
    res = measure(args.repeat, not args.fused_only)
    med = res["median_us"]
    print(f"YuMi UK step vs its kernel floor ({res['states']} closed-loop states × {res['repeat']}, interleaved)")
    print(f"  floor (computeAllTerms + 3 frame Jacobians + ProxSuite 14/6/14): median {med['floor']:.1f} µs")
    for n in [k for k in med if k != "floor"]:
        tgt = TARGETS.get(n)
        r = res["ratio_of_medians"][n]
        verdict = "" if tgt is None else (" OK" if r <= tgt else " MISSED")
        print(f"  {n:<12} median {med[n]:7.1f} µs   ratio {r:5.2f}× (per-state median {res['median_of_ratios'][n]:.2f}×)"
              + (f"   target ≤ {tgt}×{verdict}" if tgt else ""))
    if res["tsid"] != "measured":
        print(f"  tsid: {res['tsid']}")
    (results_dir() / "yumi_uk.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
