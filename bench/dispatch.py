"""A subclass of FrameTask and a user-written trajectory cost what the built-ins cost (issue 22).

    python -m cmstack.bench.dispatch [--steps N] [--repeat R]

The thesis' YuMi layout (coupling, then the left hand on a circle weighted against a posture) is run by
UK controllers on the same random states, interleaved step by step in one process (in a rotating order):

* ``builtin``   ``FrameTask`` following ``Circle`` (sampled inside the compiled step);
* ``subclass``  a ``FrameTask`` subclass that adds a method but keeps the row maths;
* ``user_traj`` ``FrameTask`` following a user's plain-Python circle (sampled in Python each step);
* ``user_task`` the built-in layout plus a user-written ``Task`` (Python rows, no kernel) in the last level: its
  rows come from its own ``qp_rows`` inside the compiled step, the other tasks stay compiled (issue 29).

Printed: the median step of each (µs) and its ratio to ``builtin`` (medians over ``--repeat`` rounds), and
for ``user_traj`` and ``user_task`` the user's own cost (the trajectory's call, the task's ``qp_rows``, timed
alone) and what the step adds around it.
Results: bench/results/dispatch.json.  Never asserted in tests (tests/test_dispatch_by_capability.py
checks that all three take the compiled step with the same torques)."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pinocchio as pin

from cmstack.bench import results_dir

CENTER = [0.436763, 0.185684, 0.512661]


class UserCircle:
    """A user's trajectory, not a cmstack class: the same circle as Circle (centre c, radius r [m], rate w
    [rad/s], in the world x-z plane), by its own code; ``traj(t)`` gives (pose, velocity, acceleration)."""

    def __init__(self, c, r, w):
        self.c, self.r, self.w = np.asarray(c, float), r, w

    def __call__(self, t):
        a = self.w * t
        p = self.c + self.r * np.array([np.cos(a), 0.0, np.sin(a)])
        v = self.r * self.w * np.array([-np.sin(a), 0.0, np.cos(a), 0, 0, 0])
        acc = -self.r * self.w**2 * np.array([np.cos(a), 0.0, np.sin(a), 0, 0, 0])
        return pin.SE3(np.eye(3), p), v, acc


def _controllers():
    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
    from cmstack.models.coupling import FrameTask, PostureTask
    from cmstack.models.loops import RigidCoupling
    from cmstack.models.robot import Robot
    from cmstack.models.trajectory import Circle

    class MyFrameTask(FrameTask):
        def describe(self) -> str:
            return self.name

    from cmstack.models.coupling import ErrorDynamics, Task

    class UserJointTask(Task):
        """A user's task in plain NumPy: joint 0 held at 0.1 rad (e = q_d − q_0, w = −v_0, W = −e_0ᵀ)."""

        def __init__(self, n):
            self.name, self.kp, self.kd, self.rows, self.n = "user", 25.0, 10.0, slice(0, 1), n

        def error_dynamics(self, kin, t):
            W = np.zeros((1, self.n))
            W[0, 0] = -1.0
            return ErrorDynamics(W, np.zeros(1), -kin.v[:1], 0.1 - kin.q[:1])

    T_AB = pin.SE3(np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]), np.array([0.0, -0.4, 0.12]))
    out = {}
    for name, make in (
        ("builtin", lambda r: FrameTask(r, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)),
        ("subclass", lambda r: MyFrameTask(r, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)),
        ("user_traj", lambda r: FrameTask(r, "yumi_link_7_l", UserCircle(CENTER, 0.1, 1.5), 400, 40)),
        ("user_task", lambda r: FrameTask(r, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)),
    ):
        robot = Robot("urdf/yumi.urdf")
        c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 1000, 33)
        extra = [(UserJointTask(robot.nv), 5.0)] if name == "user_task" else []
        ctl = UdwadiaKalabaController(
            robot,
            levels=[[c], [(make(robot), 50.0), (PostureTask(robot, np.zeros(14), kp=4, kd=4), 1.0)] + extra],
            limits=[],
            warn_free_dof=False,
        )
        assert ctl._plan is not None, name
        out[name] = ctl
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    ctls = _controllers()
    rng = np.random.default_rng(0)
    states = [(1e-3 * k, 0.3 * rng.normal(size=14), 0.3 * rng.normal(size=14)) for k in range(a.steps)]
    names = list(ctls)
    for ctl in ctls.values():  # compile / warm up
        for t, q, v in states[:20]:
            ctl(t, q, v)
    rounds = []
    perf = time.perf_counter
    traj = ctls["user_traj"].levels[1].tasks[0].trajectory  # the user's own code, timed beside the steps
    uctl = ctls["user_task"]
    utask = uctl._plan.py_tasks[0][2]
    own = {"user_traj": [], "user_task": []}
    for _ in range(a.repeat):
        times = {n: [] for n in names}
        ot = {n: [] for n in own}
        for i, (t, q, v) in enumerate(states):
            for j in range(len(names)):  # a rotating order: no variant always first after the others' code
                n = names[(i + j) % len(names)]
                t0 = perf()
                ctls[n](t, q, v)
                times[n].append(perf() - t0)
            t0 = perf()
            traj(t)
            ot["user_traj"].append(perf() - t0)
            kin = uctl.kin  # the snapshot the user's task read in that step
            t0 = perf()
            utask.qp_rows(kin, t)
            ot["user_task"].append(perf() - t0)
        rounds.append({n: float(np.median(times[n])) * 1e6 for n in names})
        for n in own:
            own[n].append(float(np.median(ot[n])) * 1e6)
    med = {n: float(np.median([r[n] for r in rounds])) for n in names}
    user_own = float(np.median(own["user_traj"]))
    task_own = float(np.median(own["user_task"]))
    overhead = med["user_traj"] - med["builtin"] - user_own
    res = {
        "step_us_median": med,
        "ratio_to_builtin": {n: med[n] / med["builtin"] for n in names},
        "user_trajectory_own_us": user_own,
        "user_trajectory_overhead_us": overhead,
        "user_task_own_us": task_own,
        "user_task_step_minus_own_over_builtin": (med["user_task"] - task_own) / med["builtin"],
        "load_avg": os.getloadavg()[0],
        "steps": a.steps,
        "repeat": a.repeat,
    }
    print(
        f"UK step on the YuMi, interleaved (load {res['load_avg']:.1f}): median µs and ratio to the built-ins"
    )
    for n in names:
        print(f"  {n:<10} {med[n]:8.1f} µs   {res['ratio_to_builtin'][n]:.2f}×")
    print(
        f"  the user's trajectory alone: {user_own:.1f} µs a call; what the step adds around it: "
        f"{overhead:.1f} µs (taking its (T, v, a) into the compiled step's buffers)"
    )
    print(
        f"  the user's task alone (qp_rows): {task_own:.1f} µs a call; the step without it: "
        f"{med['user_task'] - task_own:.1f} µs = "
        f"{res['user_task_step_minus_own_over_builtin']:.2f}× the built-in step (target ≤ 1.2×)"
    )
    (results_dir() / "dispatch.json").write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
