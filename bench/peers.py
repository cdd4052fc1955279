"""cmstack against its peers, pink and mink, on one problem: the dual-arm YuMi closed chain of the thesis
([Milioshin] §4.4, ``scenarios/yumi_dual_arm.py``), run kinematically by three solvers in one process.

The problem: the left flange E₁ (``yumi_link_7_l``) follows the thesis circle (identity orientation); the
right flange E₂ keeps the pose T_AB relative to E₁ (two hands on one bar: the closed chain); a posture
term regularizes the 2 remaining degrees of freedom.  Every solver starts from the thesis q₀ projected
onto the coupling manifold (``models/loops.py: assemble``), at rest, and runs 2 s at 200 Hz (and 1 kHz).

The solvers, and what each is given:

* pink (``pin-pink``, differential IK on Pinocchio, its own model from ``urdf/yumi.urdf``): FrameTask(E₁)
  (position and orientation cost 1), RelativeFrameTask(E₂ in E₁ = T_AB) for the coupling with cost
  ``COUPLING_COST`` (= 100, i.e. weight 10⁴ against E₁'s 1) in the cost, PostureTask (cost
  ``POSTURE_COST``) to the closed q₀; QP by qpsolvers' ``proxqp`` backend.
* pink, constraint: the same, but the coupling passed as ``constraints=[...]`` (pink 4.4 has it too).
* mink (differential IK on MuJoCo, ``mjcf/yumi.xml``): FrameTask(E₁), RelativeFrameTask passed as an
  equality constraint (``solve_ik(..., constraints=[coupling])``: J Δq = −α e exactly), PostureTask;
  QP by ``proxqp`` as well.
* cmstack: ``UdwadiaKalabaController`` with three strict levels, coupling / E₁ / posture + Gauss, effort
  limits (``bench.yumi_uk.three_levels``), the thesis config's gains (coupling K_p 1000, K_d 33; E₁ K_p 500,
  K_d 17; posture K_p 10, K_d 2√10), run as a kinematic controller on its own (perfect) model: its q̈
  (``info.vdot``, the law's acceleration, which the Pinocchio ABA of its torque reproduces) is integrated
  v ← v + Δt q̈, q ← ``pin.integrate``(q, Δt v).

pink and mink are velocity-level IK: each step returns a velocity v = Δq/Δt, integrated with the same
``pin.integrate``(q, Δt v).  cmstack is an acceleration-level law (it also returns the torque a real arm
would need).  Both IKs get the URDF velocity limits (π and 7 rad/s) and no position limits: the thesis
start has yumi_joint_7_r = 3.46 rad, outside the URDF range ±2.94 (the plant's MJCF has no ranges), so
pink's default ConfigurationLimit would refuse the start.  The IKs' E₁ target at step t is the pose of
the circle at t + Δt (where the step should bring E₁: the IK's share of feed-forward; the UK law gets the
circle's velocity and acceleration).

Gains (comparable, two settings for the IKs):

* ``matched``: the IK gain α (the fraction of the error removed per step, J Δq = −α e) that gives each
  task the decay rate λ of the UK's error ODE, α = 1 − exp(−λ Δt) with λ = K_d/2 (the envelope of
  ë + K_d ė + K_p e = 0): E₁ λ = 8.5/s, coupling λ = 16.5/s, posture λ = √10/s.  At 200 Hz α = 0.042,
  0.079, 0.016; at 1 kHz 0.0085, 0.016, 0.0032.
* ``α = 1``: the libraries' default gain (dead-beat: every task asks the whole error back in one step).

Measured per solver: the coupling error (the SE(3) error of E₂ against E₁·T_AB, [p_E2 − p_B; Log(R_Bᵀ R_E2)],
its metre and radian parts, max and mean over the run), the E₁ tracking error against the circle (max and
mean over t > 0.5 s, m and rad), the peak joint speed, and the control step's wall time (median, p90):
the step is what a user's loop calls each tick (IK: the target update, ``Configuration.update``, ``solve_ik``;
cmstack: the controller call), without the integration.  Every tick runs every solver's step back to
back in a rotating order, so machine load hits them alike; ``--repeat`` whole runs.

    python -m cmstack.bench.peers [--repeat 3] [--rates 200 1000] [--solver proxqp]

Measured 2026-11-24 (load 3.7; the table and its reading: docs/speed.md, "Against the peers"): cmstack's step
43 µs median against 164–194 µs for the IKs; with matched gains the IKs hold the coupling tighter and lag
the circle by ≈ 20 mm; at α = 1 they track it better than cmstack, at the 7 rad/s velocity limit in the
first steps.  pink with the coupling as a cost on proxqp: an ill-conditioned QP (cond ≈ 6·10¹⁰), reported
primal infeasible once at 1 kHz (counted in "no QP solution"; the step then commands v = 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import pinocchio as pin

from cmstack.bench import results_dir

COUPLING_COST = 100.0  # pink's coupling as a cost: weight COUPLING_COST² against E₁'s 1
POSTURE_COST = 1e-3  # posture cost of both IKs (pink's examples use 1e-3)
TRACK_AFTER = 0.5  # s; E₁ tracking error statistics over t > this
POSTURE_KP = 10.0  # cmstack posture level (bench.yumi_uk.three_levels): K_p, K_d = 2√K_p


def peers_missing() -> list[str]:
    """The peers' distributions that are not importable here ([] when both are)."""
    return [
        dist
        for dist, mod in (("pin-pink", "pink"), ("mink", "mink"))
        if importlib.util.find_spec(mod) is None
    ]


def ik_gain(rate: float, dt: float) -> float:
    """The per-step fraction α with (1 − α) = exp(−rate Δt): a first-order IK task decays at ``rate``."""
    return 1.0 - math.exp(-rate * dt)


@dataclass
class Problem:
    """The thesis dual-arm set-up at one control rate."""

    cfg: dict
    robot: object
    coupling: object
    task: object
    traj: object
    T_AB: pin.SE3
    q0: np.ndarray
    dt: float
    steps: int
    fid1: int = 0
    fid2: int = 0
    rates: dict = field(default_factory=dict)

    def gains(self, setting: str) -> dict:
        """IK gains α (fraction per step) of E₁, coupling, posture for ``matched`` or ``alpha1``."""
        if setting == "alpha1":
            return dict(e1=1.0, coupling=1.0, posture=1.0)
        return {k: ik_gain(r, self.dt) for k, r in self.rates.items()}


def setup(control_dt: float = 0.005, duration: float | None = None) -> Problem:
    from cmstack.models.loops import assemble
    from cmstack.models.robot import Robot
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.yumi_dual_arm import build_problem, initial_state

    cfg = default_config("yumi_dual_arm")
    robot = Robot(cfg["urdf"])
    coupling, task, traj, T_AB = build_problem(cfg, robot)
    q0 = assemble(robot, initial_state(cfg, robot), [coupling], within_ranges=False)
    dur = cfg["duration"] if duration is None else duration
    rates = dict(e1=cfg["task_kd"] / 2, coupling=cfg["constraint_kd"] / 2, posture=math.sqrt(POSTURE_KP))
    return Problem(
        cfg,
        robot,
        coupling,
        task,
        traj,
        T_AB,
        q0,
        control_dt,
        int(round(dur / control_dt)),
        robot.frame_id(cfg["frame1"]),
        robot.frame_id(cfg["frame2"]),
        rates,
    )


# ------------------------------------------------------------------------------------- the solvers
class CmstackKinematic:
    """The UK law (3 strict levels) as a kinematic controller: ``step(t, q, v)`` returns q̈."""

    order = 2

    def __init__(self, P: Problem):
        from cmstack.bench.yumi_uk import three_levels

        self.ctl = three_levels(P.robot, P.coupling, P.task, P.q0)

    def step(self, t, q, v):
        self.ctl(t, q, v)
        return self.ctl.info.vdot


class PinkIK:
    """pink: ``step(t, q)`` returns the velocity of one differential-IK step."""

    order = 1

    def __init__(self, P: Problem, gains: dict, constraint: bool, solver: str):
        import pink
        from pink.limits import VelocityLimit
        from pink.tasks import FrameTask, PostureTask, RelativeFrameTask

        cfg = P.cfg
        self.model = pin.buildModelFromUrdf(str(P.robot.path))
        if list(self.model.names[1:]) != list(P.robot.joint_names):
            raise RuntimeError("pink's model orders the joints unlike cmstack's")
        # no position limits (the thesis start is outside 4 URDF ranges; pink would log 4 warnings a step)
        self.model.lowerPositionLimit = np.full(self.model.nq, -np.inf)
        self.model.upperPositionLimit = np.full(self.model.nq, np.inf)
        self.conf = pink.Configuration(self.model, self.model.createData(), P.q0)
        self.e1 = FrameTask(cfg["frame1"], position_cost=1.0, orientation_cost=1.0, gain=gains["e1"])
        cost = 1.0 if constraint else COUPLING_COST  # a constraint's cost is not used
        self.coupling = RelativeFrameTask(
            cfg["frame2"], cfg["frame1"], position_cost=cost, orientation_cost=cost, gain=gains["coupling"]
        )
        self.coupling.set_target(P.T_AB)
        self.posture = PostureTask(cost=POSTURE_COST, gain=gains["posture"])
        self.posture.set_target(P.q0)
        self.tasks = [self.e1, self.posture] + ([] if constraint else [self.coupling])
        self.constraints = [self.coupling] if constraint else None
        self.limits = [VelocityLimit(self.model)]
        self.solve_ik, self.traj, self.dt, self.solver = pink.solve_ik, P.traj, P.dt, solver
        self.NoSolutionFound, self.failures, self.last_failure = pink.exceptions.NoSolutionFound, 0, None
        self.zero = np.zeros(self.model.nv)

    def step(self, t, q, v=None):
        self.e1.set_target(self.traj(t + self.dt)[0])
        self.conf.update(q)
        try:
            return self.solve_ik(
                self.conf,
                self.tasks,
                self.dt,
                solver=self.solver,
                limits=self.limits,
                constraints=self.constraints,
                safety_break=False,
            )
        except self.NoSolutionFound as e:  # what a user's loop must do: count it, hold still
            self.failures += 1
            self.last_failure = (t, e)
            return self.zero


class MinkIK:
    """mink: ``step(t, q)`` returns the velocity of one differential-IK step (q, v in MuJoCo's order)."""

    order = 1

    def __init__(self, P: Problem, gains: dict, constraint: bool, solver: str):
        import mink
        import mujoco

        cfg = P.cfg
        from cmstack.models.robot import resolve_asset

        self.model = mujoco.MjModel.from_xml_path(str(resolve_asset(cfg["mjcf_virtual"])))
        names = P.robot.joint_names
        # pinocchio index of each MuJoCo dof, and back (both arms are hinges: nq = nv)
        self.to_mj = np.array(
            [names.index(self.model.joint(self.model.dof_jntid[i]).name) for i in range(self.model.nv)]
        )
        self.to_pin = np.argsort(self.to_mj)
        self.conf = mink.Configuration(self.model, P.q0[self.to_mj])
        self.e1 = mink.FrameTask(
            cfg["frame1"], "body", position_cost=1.0, orientation_cost=1.0, gain=gains["e1"]
        )
        cost = 1.0 if constraint else COUPLING_COST
        self.coupling = mink.RelativeFrameTask(
            cfg["frame2"],
            "body",
            cfg["frame1"],
            "body",
            position_cost=cost,
            orientation_cost=cost,
            gain=gains["coupling"],
        )
        self.coupling.set_target(mink.SE3.from_matrix(P.T_AB.homogeneous))
        self.posture = mink.PostureTask(self.model, cost=POSTURE_COST, gain=gains["posture"])
        self.posture.set_target(P.q0[self.to_mj])
        self.tasks = [self.e1, self.posture] + ([] if constraint else [self.coupling])
        self.constraints = [self.coupling] if constraint else None
        vmax = P.robot.model.velocityLimit
        self.limits = [mink.VelocityLimit(self.model, {n: vmax[i] for i, n in enumerate(names)})]
        self.SE3, self.solve_ik, self.traj, self.dt, self.solver = (
            mink.SE3,
            mink.solve_ik,
            P.traj,
            P.dt,
            solver,
        )
        self.NoSolutionFound, self.failures, self.last_failure = mink.NoSolutionFound, 0, None
        self.zero = np.zeros(self.model.nv)

    def step(self, t, qpos, v=None):
        self.e1.set_target(self.SE3.from_matrix(self.traj(t + self.dt)[0].homogeneous))
        self.conf.update(qpos)
        try:
            return self.solve_ik(
                self.conf, self.tasks, self.dt, self.solver, limits=self.limits, constraints=self.constraints
            )
        except self.NoSolutionFound as e:
            self.failures += 1
            self.last_failure = (t, e)
            return self.zero


def solver_table(P: Problem, qp_solver: str = "proxqp") -> dict:
    """name → (factory, description) of every solver run on P (the peers only when importable)."""
    out = {
        "cmstack": (
            lambda: CmstackKinematic(P),
            "UK law, strict levels coupling / E1 / posture+Gauss, effort limits; acceleration level",
        )
    }
    if peers_missing():
        return out
    for setting in ("matched", "alpha1"):
        g = P.gains(setting)
        tag = "" if setting == "matched" else ", α=1"
        out[f"pink{tag}"] = (
            lambda g=g: PinkIK(P, g, False, qp_solver),
            f"pink, coupling as a cost ({COUPLING_COST:g}), gains {setting}; velocity level",
        )
        out[f"pink constraint{tag}"] = (
            lambda g=g: PinkIK(P, g, True, qp_solver),
            f"pink, coupling as an equality constraint, gains {setting}; velocity level",
        )
        out[f"mink constraint{tag}"] = (
            lambda g=g: MinkIK(P, g, True, qp_solver),
            f"mink, coupling as an equality constraint, gains {setting}; velocity level",
        )
    return out


# ------------------------------------------------------------------------------------- running
class _Runner:
    """One solver's state (q, v in Pinocchio order) and its integration by ``pin.integrate``."""

    def __init__(self, P: Problem, solver):
        self.P, self.s = P, solver
        self.q, self.v = P.q0.copy(), np.zeros(P.robot.nv)
        self.Q = np.empty((P.steps + 1, P.robot.nq))
        self.V = np.empty((P.steps + 1, P.robot.nv))
        self.Q[0], self.V[0] = self.q, self.v
        self.mj = getattr(solver, "to_mj", None)

    def timed_step(self, k: int, clock) -> int:
        t = k * self.P.dt
        if self.mj is None:
            c0 = clock()
            out = self.s.step(t, self.q, self.v)
            c1 = clock()
        else:  # MuJoCo's joint order in and out, outside the timing
            qm = self.q[self.mj]
            c0 = clock()
            out = self.s.step(t, qm)
            c1 = clock()
            out = out[self.s.to_pin]
        if self.s.order == 2:
            self.v = self.v + self.P.dt * out
        else:
            self.v = np.asarray(out, dtype=float)
        self.q = pin.integrate(self.P.robot.model, self.q, self.P.dt * self.v)
        self.Q[k + 1], self.V[k + 1] = self.q, self.v
        return c1 - c0


def errors(P: Problem, Q: np.ndarray) -> dict:
    """Coupling and E₁ errors along a run Q[k] = q(k Δt), split in metres and radians."""
    from cmstack.models.lie import se3_error

    m, d = P.robot.model, P.robot.model.createData()
    n = len(Q)
    ec, eu = np.empty((n, 6)), np.empty((n, 6))
    for k in range(n):
        pin.framesForwardKinematics(m, d, Q[k])
        E1, E2 = d.oMf[P.fid1], d.oMf[P.fid2]
        ec[k] = se3_error(E1 * P.T_AB, E2)
        eu[k] = se3_error(E1, P.traj(k * P.dt)[0])
    t = np.arange(n) * P.dt
    late, conv = t > TRACK_AFTER, t > P.cfg["converge_after"]
    cm, cr = np.linalg.norm(ec[:, :3], axis=1), np.linalg.norm(ec[:, 3:], axis=1)
    um, ur = np.linalg.norm(eu[:, :3], axis=1), np.linalg.norm(eu[:, 3:], axis=1)

    def stat(f, x, window):  # None when the run is shorter than the window's start
        return float(f(x[window])) if window.any() else None

    return dict(
        coupling_m_max=float(cm.max()),
        coupling_m_mean=float(cm.mean()),
        coupling_rad_max=float(cr.max()),
        coupling_rad_mean=float(cr.mean()),
        e1_m_max_after=stat(np.max, um, late),
        e1_m_mean_after=stat(np.mean, um, late),
        e1_rad_max_after=stat(np.max, ur, late),
        e1_rad_mean_after=stat(np.mean, ur, late),
        e1_m_initial=float(um[0]),
        e1_rad_initial=float(ur[0]),
        e1_m_mean_converged=stat(np.mean, um, conv),
        e1_rad_mean_converged=stat(np.mean, ur, conv),
    )


def run(P: Problem, names=None, repeat: int = 3, qp_solver: str = "proxqp") -> dict:
    """Every solver on P, ticks interleaved in a rotating order, ``repeat`` whole runs.
    Returns {name: {description, errors (of the last run), step_us (per repeat: median, p90), ...}}."""
    table = solver_table(P, qp_solver)
    names = [n for n in (names or list(table)) if n in table]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in names:  # warm-up: kernels, imports, first QP (thrown away)
            w = _Runner(P, table[n][0]())
            w.timed_step(0, time.perf_counter_ns)
        clock = time.perf_counter_ns
        times = {n: [] for n in names}
        runs = []
        for r in range(repeat):
            runners = {n: _Runner(P, table[n][0]()) for n in names}
            tr = {n: np.empty(P.steps, dtype=np.int64) for n in names}
            for k in range(P.steps):
                shift = (k + r) % len(names)
                for n in names[shift:] + names[:shift]:
                    try:
                        tr[n][k] = runners[n].timed_step(k, clock)
                    except Exception as e:
                        raise RuntimeError(
                            f"{n} failed at step {k} of repeat {r}: {type(e).__name__}: {e}"
                        ) from e
            for n in names:
                times[n].append(tr[n] / 1e3)
            runs.append(runners)
    out = {}
    for n in names:
        ts = times[n]
        allt = np.concatenate(ts)
        ru = runs[-1][n]
        out[n] = dict(
            description=table[n][1],
            step_us_median=float(np.median(allt)),
            step_us_p90=float(np.percentile(allt, 90)),
            step_us_median_per_repeat=[float(np.median(x)) for x in ts],
            step_us_p90_per_repeat=[float(np.percentile(x, 90)) for x in ts],
            peak_joint_speed=float(np.abs(ru.V).max()),
            finite=bool(np.all(np.isfinite(ru.Q))),
            ik_failures_per_repeat=[int(getattr(x[n].s, "failures", 0)) for x in runs],
            **(errors(P, ru.Q) if np.all(np.isfinite(ru.Q)) else {}),
        )
        if n == "cmstack":
            out[n]["path"] = ru.s.ctl.info.path
    return out


def _fmt(r: dict) -> str:
    if not r.get("finite", True) or "coupling_m_max" not in r:
        return "diverged"
    return (
        f"{r['coupling_m_max'] * 1e3:8.3g} {r['coupling_m_mean'] * 1e3:8.3g} {r['coupling_rad_max'] * 1e3:8.3g} "
        f"{r['coupling_rad_mean'] * 1e3:8.3g} | {r['e1_m_max_after'] * 1e3:7.3g} {r['e1_m_mean_after'] * 1e3:7.3g} "
        f"{r['e1_rad_max_after'] * 1e3:7.3g} {r['e1_rad_mean_after'] * 1e3:7.3g} | {r['peak_joint_speed']:5.2f} | "
        f"{r['step_us_median']:7.0f} {r['step_us_p90']:7.0f} | {sum(r['ik_failures_per_repeat'])}"
    )


def print_table(rate_hz: float, res: dict, load0, load1, repeat: int) -> None:
    print(
        f"\nYuMi dual arm, closed chain, 2 s at {rate_hz:g} Hz, {repeat} interleaved runs; load average "
        f"{load0:.1f} → {load1:.1f} (2 shared cores)"
    )
    w = max(len(n) for n in res)
    print(
        f"  {'solver':<{w}} | coupling: max mean [mm]  max mean [mrad] | E1 after {TRACK_AFTER:g} s: max mean [mm]"
        f"  max mean [mrad] | peak |v| rad/s | step median p90 [µs] | no QP solution"
    )
    for n, r in res.items():
        print(f"  {n:<{w}} | {_fmt(r)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m cmstack.bench.peers", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rates", type=float, nargs="+", default=[200.0, 1000.0], help="control rates [Hz]")
    ap.add_argument("--duration", type=float, default=None, help="s (default: the config's 2 s)")
    ap.add_argument("--solver", default="proxqp", help="the IKs' QP backend (qpsolvers name)")
    args = ap.parse_args(argv)
    missing = peers_missing()
    if missing:
        print(f"bench.peers: skipped ({' and '.join(missing)} not installed; pip install -e '.[peers]')")
        return
    versions = {}
    for dist in ("pin-pink", "mink", "pin", "mujoco", "qpsolvers", "proxsuite"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    result = dict(
        versions=versions,
        qp_solver=args.solver,
        repeat=args.repeat,
        coupling_cost=COUPLING_COST,
        posture_cost=POSTURE_COST,
        track_after_s=TRACK_AFTER,
        rates={},
    )
    for hz in args.rates:
        P = setup(1.0 / hz, args.duration)
        load0 = os.getloadavg()
        res = run(P, repeat=args.repeat, qp_solver=args.solver)
        load1 = os.getloadavg()
        print_table(hz, res, load0[0], load1[0], args.repeat)
        result["rates"][f"{hz:g}"] = dict(
            control_dt=P.dt,
            steps=P.steps,
            loadavg_start=load0,
            loadavg_end=load1,
            ik_gains_matched=P.gains("matched"),
            uk_rates_per_s=P.rates,
            solvers=res,
        )
    (results_dir() / "peers.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
