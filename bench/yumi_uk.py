"""YuMi UK control step against its kernel floor (issue 22 item 6, "the step at the kernels' cost"),
measured as ratios, interleaved in one process, on the states of real closed-loop runs.

* floor (YuMi): what any controller of this problem has to pay through Pinocchio's Python API and NumPy:
  ``pin.computeAllTerms`` + ``getFrameJacobian`` (LOCAL_WORLD_ALIGNED) of the three frames the step
  needs (E₁, E₂, the coupling body B) + ``getFrameClassicalAcceleration`` of the same three + one
  ``numpy.linalg.solve`` (LAPACK) of that state's KKT matrix of the step's size, [H Eᵀ; E 0] with
  H = M + ω AᵀA (14 + 6 rows), built outside the timing;
* UK weighted: the thesis set-up (coupling hard, E₁ task weighted against Gauss), effort limits on
  (target ≤ 0.6× the floor);
* UK 3 strict levels: coupling / E₁ task / posture (with Gauss), effort limits (target ≤ 0.6× the floor);
* Panda circle: ``examples/panda_circle.py``'s controller (the hand follows a circle, a posture on every
  joint as the last strict level) on the states of its closed loop (MuJoCo, 1 kHz), against its own
  floor ``computeAllTerms`` + the hand's ``getFrameJacobian`` on the Panda (target ≤ 1.5×, the issue's
  target when TSID cannot be built) and against TSID on the same states (target ≤ 0.6× TSID's step);
* TSID (``tsid`` 1.10, built from its sdist for this Pinocchio: docs/speed.md, "TSID"), when the package
  is installed, interleaved with the rest: ``tsid_panda`` is the same problem as the Panda circle's
  (``tsid_panda_factory``: the hand an SE(3) equality, the posture weighted below it, the effort bounds;
  the same v̇ and τ − D v to 1e-14 relative on these states, printed by the run), ``tsid_panda_sampled``
  the same with the circle sampled in Python inside the step as a user's loop must, ``tsid_yumi`` the
  YuMi states with the coupling an equality, E₁ weighted by ω and a posture in place of Gauss' principle,
  which TSID's Python API cannot express (``tsid_step_factory``: a different problem of the same size,
  torques 17 % apart).  Without ``tsid`` (CI, ``make bench``) these rows are skipped with one line.

For every state the calls run back to back in a rotating order, so that machine load hits all of
them alike; medians over all states and repeats (the Panda's states cycled to the YuMi's count).
``uk_*_python`` are the same controllers on the generic Python path (``fused=False``), for a before/after
in one process (``--fused-only`` leaves them out).

    python -m cmstack.bench.yumi_uk [--repeat 5] [--fused-only] [--profile]

Measured 2026-11-25 09:12 UTC, before the work of item 6 (the fused step of issue 12: computeAllTerms,
one numba call with a 24-item argument tuple, Python around it); 2-core machine shared by several
sessions, load average 5.1; ``--repeat 3``, 400 closed-loop states, every step on the direct KKT path:

    | step                         | median   | ratio to its floor | target        |
    | floor (YuMi)                 | 23.8 µs  | 1                  |               |
    | UK weighted, fused           | 27.8 µs  | 1.17×              | ≤ 0.6× missed |
    | UK 3 strict levels, fused    | 25.8 µs  | 1.09×              | ≤ 0.6× missed |
    | UK weighted, generic Python  | 81.6 µs  | 3.43×              |               |
    | UK 3 levels, generic Python  | 92.2 µs  | 3.88×              |               |
    | Panda floor                  | 4.6 µs   | 1                  |               |
    | Panda circle, fused          | 19.2 µs  | 4.20×              | ≤ 1.5× missed |

Where the weighted step's time went then (``--profile``: the step interleaved with the floor and the
generic path, its parts clocked inside it; load ≈ 5): computeAllTerms 5.4 µs, ``Robot.update`` beyond
it (checks, four copies, the Kinematics) 5.0 µs, the kernel call 9.3 µs (≈ 3 µs of it the dispatch of the
24-item tuple, ≈ 4 µs the compiled work), the rest of the step in Python (targets and gains rewritten,
two allocations, the info record) 8.0 µs: 27.7 µs in all.

After (2026-11-25 10:21–10:23 UTC, load average 7.0–7.6, the same machine and states; ``--repeat 5``):

    | step                         | --fused-only       | with the generic path interleaved | target     |
    | floor (YuMi)                 | 15.6 µs            | 23.4 µs                           |            |
    | UK weighted, fused           | 7.9 µs   = 0.51×   | 11.3 µs  = 0.48×                  | ≤ 0.6× met |
    | UK 3 strict levels, fused    | 8.4 µs   = 0.54×   | 10.0 µs  = 0.43×                  | ≤ 0.6× met |
    | UK weighted, generic Python  |                    | 77.9 µs  = 3.33×                  |            |
    | UK 3 levels, generic Python  |                    | 93.6 µs  = 4.01×                  |            |
    | Panda floor                  | 3.6 µs             | 4.6 µs                            |            |
    | Panda circle, fused          | 5.1 µs   = 1.43×   | 6.1 µs   = 1.32×                  | ≤ 1.5× met |

(runs at load 7–10 gave 0.51–0.62× / 0.54–0.72× / 1.35–1.74× while the step was being cut, the last
three runs of the final code 0.48–0.52×, 0.43–0.55×, 1.32–1.43×: the Panda's margin is small.)

Where the time goes now (``--profile``, the clocks add ≈ 0.1 µs each; load 7.2; µs):

    |                                   | YuMi weighted | Panda circle |
    | step (clocked)                    | 8.6           | 5.4          |
    | pin.crba (WORLD convention)       | 1.7           | 0.9          |
    | state checks (lean pass beyond it)| 0.8           | 0.7          |
    | kernel compute, of which          | 3.2           | 1.5          |
    |   h, Newton–Euler in world axes   | 0.5           | 0.2          |
    |   frames (pose, J, twist, J̇v)     | 0.2           | 0.1          |
    |   task rows                       | 0.7           | 0.5          |
    |   KKT solve                       | 1.9           | 0.7          |
    | kernel dispatch (7 arguments)     | 1.0           | 0.7          |
    | rest of the step in Python        | 1.9           | 1.7          |

Against TSID (2026-11-27 16:58–17:01 UTC, main at a61eeb5, ``--repeat 5``, 400 states, load average
5.0–5.1 on a machine shared with other sessions; three ``--fused-only`` runs and one with the generic path):

    | step                                   | median        | UK / TSID              | target          |
    | Panda circle, UK fused                 | 4.2–4.9 µs    |                        |                 |
    | Panda circle, TSID (reference ready)   | 7.8–9.2 µs    | 0.530–0.546×           | ≤ 0.6× met      |
    | Panda circle, TSID sampling the circle | 17.1–19.8 µs  | 0.25×                  |                 |
    | YuMi UK weighted, fused                | 6.8–8.9 µs    |                        |                 |
    | YuMi, TSID (coupling, E₁ ω, posture)   | 15.5–19.2 µs  | 0.430–0.464×           |                 |

TSID's Panda step (7.7 µs alone, load 5): ``computeProblemData`` 5.1 µs (of which its
``computeAllTerms`` 2.4 µs), eiquadprog 2.2 µs, ``setReference`` 0.4 µs, ``getActuatorForces`` 0.5 µs;
ours 4.1 µs.  (Earlier the same day, on main at 4c16f5f, before the last UK-step changes, load 3.3–3.5:
0.576–0.589×; and 0.60–0.61× before the effort bounds were added to TSID's Panda problem, as UK has them.)

What changed (``controllers/udwadia_kalaba.py``, ``uk_plan.py``, ``_uk_kernels.py``, ``models/robot.py``):
one Pinocchio call instead of computeAllTerms (``Robot.update_for_kernel``: ``pin.crba`` in the WORLD
convention leaves the joints' poses, data.J and M; the kernel computes h by its own Newton–Euler pass and
the frames' J̇v from data.J and v); the kernel reads Pinocchio's data, the damping and τ_max through
addresses bound once and takes the plan's tables as two arrays (7 arguments instead of a 24-item tuple
of ≈ 40 arrays), its views made from addresses (no reshape checks, no reference counts); the state's
finiteness is tested in the kernel (the same ``StateError``); gains and targets are copied only when one
was set (``models/_params.py``); the step's ``Kinematics`` is made on first read from the kernel's copies;
the info's constant fields are written once.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pinocchio as pin

from cmstack.bench import closed_loop_states, results_dir
from cmstack.controllers.udwadia_kalaba import GAUSS, UdwadiaKalabaController
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.errors import MissingExtraError
from cmstack.models.limits import EffortLimit
from cmstack.models.robot import Robot, example_robot_data_path
from cmstack.models.trajectory import Circle
from cmstack.scenarios._common import default_config
from cmstack.scenarios.yumi_dual_arm import build_problem, initial_state
from cmstack.sim.plant import MujocoPlant

LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
TARGETS = {"uk_weighted": 0.6, "uk_3_levels": 0.6, "panda_circle": 1.5}
FLOOR_OF = {
    "panda_circle": "panda_floor",
    "tsid_panda": "panda_floor",
    "tsid_panda_sampled": "panda_floor",
}  # every other step is measured against "floor"
TSID_TARGETS = {"panda_circle": ("tsid_panda", 0.6)}  # the target when TSID is built
AGAINST_TSID = {"panda_circle": "tsid_panda", "uk_weighted": "tsid_yumi"}
PANDA_POSTURE_GAINS = (100.0, 20.0)  # examples/panda_circle.py's PostureTask(kp=100, kd=20)


def setup():
    cfg = default_config("yumi_dual_arm")
    robot = Robot(cfg["urdf"])
    coupling, task, _, _ = build_problem(cfg, robot)
    q0 = initial_state(cfg, robot)
    return cfg, robot, coupling, task, q0


def weighted(cfg, robot, coupling, task, fused=True):
    return UdwadiaKalabaController(
        robot,
        [coupling],
        [task],
        omega=cfg["omega"],
        priority="weighted",
        torque_limits=True,
        warn_free_dof=False,
        fused=fused,
    )


def three_levels(robot, coupling, task, q0, fused=True):
    posture = PostureTask(robot, q0, kp=10.0, kd=2 * np.sqrt(10.0))
    return UdwadiaKalabaController(
        robot, levels=[[coupling], [task], [posture, GAUSS]], limits=[EffortLimit(robot)], fused=fused
    )


def record_states(cfg, robot, coupling, task, q0):
    """States (t, q, v) of the thesis closed loop (weighted UK on the MuJoCo plant)."""
    ctl = weighted(cfg, robot, coupling, task)
    plant = MujocoPlant(cfg["mjcf_virtual"], robot.joint_names, sim_dt=cfg["control_dt"])
    plant.reset(q0)
    return closed_loop_states(plant, ctl, int(round(cfg["duration"] / cfg["control_dt"])))


def panda_circle(fused=True):
    """``examples/panda_circle.py``'s robot and controller (the hand's circle, then the posture)."""
    robot = Robot.from_urdf(
        example_robot_data_path("panda_description/urdf/panda.urdf"),
        locked_joints={"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0},
    )
    q0 = np.array([0, -0.785, 0, -2.356, 0, 1.571, 0.785])
    T0 = robot.update(q0, 0 * q0).frame("panda_hand_tcp").T
    circle = Circle(T0.translation - [0.1, 0, 0], 0.1, 2.0, R=T0.rotation)
    hand = FrameTask(robot, "panda_hand_tcp", circle, kp=400, kd=40, name="hand")
    posture = PostureTask(robot, q0, kp=PANDA_POSTURE_GAINS[0], kd=PANDA_POSTURE_GAINS[1])
    return robot, hand, UdwadiaKalabaController(robot, levels=[[hand], [posture]], fused=fused), q0


def record_panda_states(n: int, control_dt: float = 1e-3):
    """n states (t, q, v) of the Panda circle's closed loop on its MuJoCo plant (1 kHz, as the example)."""
    from cmstack.sim.urdf_plant import plant_from_urdf

    robot, _, ctl, q0 = panda_circle()
    with tempfile.TemporaryDirectory() as tmp:
        plant = plant_from_urdf(robot, q0=q0, sim_dt=control_dt, xml_path=Path(tmp) / "plant.xml")
    return closed_loop_states(plant, ctl, n)


class Floor:
    """The kernel floor of one YuMi step, on the same states (module docstring): computeAllTerms, the
    three frames' Jacobians and classical accelerations, one LAPACK solve of that state's KKT system
    [H Eᵀ; E 0] [v̇; λ] = [r; f] (prepared outside the timing)."""

    def __init__(self, cfg, robot, coupling, task, states):
        self.m = robot.model
        self.d = robot.model.createData()
        self.fids = (coupling.fB, coupling.f2, task.fid)
        self.problems = []
        D = robot.damping
        n = robot.nv
        for t, q, v in states:
            kin = robot.update(q, v)
            E, f = coupling.compute(kin, t)
            Au, bu = task.compute(kin, t)
            H = kin.M + cfg["omega"] * Au.T @ Au
            r = -(kin.h + D * v) + cfg["omega"] * Au.T @ bu
            m = E.shape[0]
            K = np.zeros((n + m, n + m))
            K[:n, :n], K[:n, n:], K[n:, :n] = H, E.T, E
            self.problems.append((K, np.concatenate([r, f])))
        self.size = self.problems[0][0].shape[0]

    def __call__(self, k, t, q, v):
        m, d = self.m, self.d
        pin.computeAllTerms(m, d, q, v)
        for fid in self.fids:
            pin.getFrameJacobian(m, d, fid, LWA)
        for fid in self.fids:
            pin.getFrameClassicalAcceleration(m, d, fid, LWA)
        return np.linalg.solve(*self.problems[k])


class PandaFloor:
    """The Panda circle's floor: computeAllTerms and the hand's frame Jacobian (LOCAL_WORLD_ALIGNED)."""

    def __init__(self, robot, hand):
        self.m, self.d, self.fid = robot.model, robot.model.createData(), hand.fid

    def __call__(self, t, q, v):
        pin.computeAllTerms(self.m, self.d, q, v)
        return pin.getFrameJacobian(self.m, self.d, self.fid, LWA)


def _tsid():
    """The ``tsid`` module, or None when it is not installed (as on CI: ``make bench`` does not install it)."""
    try:
        with warnings.catch_warnings():  # its bindings re-register a Boost.Python converter on import
            warnings.simplefilter("ignore", RuntimeWarning)
            import tsid
    except ImportError:
        return None
    return tsid


def _tsid_sample(tsid, T_D: pin.SE3, vel, acc, s=None):
    """A TSID SE(3) reference from one of our samples (written into ``s`` when given).  TSID's
    ``TaskSE3Equality`` reads the pose as [p; vec(R)] (R column by column), and the velocity and
    acceleration as LOCAL_WORLD_ALIGNED motions (linear part of the frame's origin, angular part, both in
    world axes); our trajectories give the angular parts in D's axes, so they are turned by R_D."""
    R = T_D.rotation
    s = tsid.TrajectorySample(12, 6) if s is None else s
    s.value(np.concatenate([T_D.translation, R.reshape(-1, order="F")]))
    s.derivative(np.concatenate([vel[:3], R @ vel[3:]]))
    s.second_derivative(np.concatenate([acc[:3], R @ acc[3:]]))
    return s


def tsid_panda_factory(robot, hand, q0, states):
    """TSID on the Panda circle problem, or None when ``tsid`` is absent.

    The same problem as ``panda_circle()``'s UK controller, ``levels=[[hand], [posture]]`` (Gauss after the
    posture has nothing left: 6 + 7 rows on 7 joints, no limits):

    * the hand: ``TaskSE3Equality`` at priority 0 (an equality, as UK's first level), K_p = 400, K_d = 40
      on all six rows, ``useLocalFrame(False)``: TSID's error is [p_D − p; R log₃(Rᵀ R_D)] and its velocity
      error [v_D − v; ω_D − ω] in world axes, its drift the frame's classical acceleration; ours (FrameTask)
      is the same in D's axes, which is the same law because R_D log₃(Rᵀ R_D) = R log₃(Rᵀ R_D), up to the
      term ω_D × ω that our D-axes angular law has and TSID's has not: zero here (the orientation is held,
      ω_D = 0);
    * the posture: ``TaskJointPosture`` at priority 1, weight 1, K_p = 100, K_d = 20, q_ref = q0: TSID's
      cost ‖v̇ − a_post‖² with a_post = K_p(q_ref − q) − K_d v over the hand's equality is exactly the
      posture level that UK solves on the KKT path (H = AᵀA = I, the same a_post);
    * the URDF effort limits, which the UK controller applies by default (``EffortLimit``): TSID's
      ``TaskActuationBounds`` at priority 0.  TSID's torque is M v̇ + h, ours adds the model's joint
      damping D v (0.003 N·m·s/rad on the Panda): so τ_UK − D v is what compares to τ_TSID, and the
      bounds act on torques that differ by D v (≤ 0.003·|v| N·m) when one binds (none does on these
      states).

    Returns ``(step, step_sampled, solve)``: ``step(k)`` is TSID's own cost on state k (its reference
    prepared outside the timing: ``setReference``, ``computeProblemData``, ``solve``,
    ``getActuatorForces``); ``step_sampled(k)`` builds the reference from the circle in Python inside the
    step, as a user's loop would; ``solve(k)`` returns (v̇, τ, status) for the comparison."""
    tsid = _tsid()
    if tsid is None:
        return None
    robw = tsid.RobotWrapper(robot.model, tsid.RootJointType.FIXED_BASE_SYSTEM, False)
    form = tsid.InverseDynamicsFormulationAccForce("panda_circle", robw, False)
    t0, qs, vs = states[0]
    form.computeProblemData(t0, qs, vs)
    task = tsid.TaskSE3Equality("hand", robw, robot.model.frames[hand.fid].name)
    task.setKp(hand.kp * np.ones(6))
    task.setKd(hand.kd * np.ones(6))
    task.useLocalFrame(False)
    form.addMotionTask(task, 1.0, 0, 0.0)
    posture, ref, bounds, solver = _tsid_posture_bounds_solver(
        tsid, robw, form, robot, q0, *PANDA_POSTURE_GAINS
    )
    samples = [_tsid_sample(tsid, *hand.desired(t)) for t, _, _ in states]
    live = tsid.TrajectorySample(12, 6)  # the sampled step's reference, rewritten in place
    keep = (robw, posture, ref, bounds, live)  # TSID holds its robot and tasks by reference: keep them alive

    def step(k, _keep=keep):
        t, q, v = states[k]
        task.setReference(samples[k])
        sol = solver.solve(form.computeProblemData(t, q, v))
        return form.getActuatorForces(sol)

    def step_sampled(k, _keep=keep):
        t, q, v = states[k]
        task.setReference(_tsid_sample(tsid, *hand.desired(t), live))
        sol = solver.solve(form.computeProblemData(t, q, v))
        return form.getActuatorForces(sol)

    def solve(k, _keep=keep):
        t, q, v = states[k]
        task.setReference(samples[k])
        sol = solver.solve(form.computeProblemData(t, q, v))
        return form.getAccelerations(sol).copy(), form.getActuatorForces(sol).copy(), sol.status

    return step, step_sampled, solve


def _tsid_posture_bounds_solver(tsid, robw, form, robot, q0, kp: float, kd: float):
    """The part of both TSID set-ups that is the same: a posture task on q0 (gains kp, kd) at priority 1, the
    URDF effort bounds as an actuation task, and the eiquadprog solver sized for the formulation.  Returns
    (posture, its reference, bounds, solver): TSID holds them by reference, so the caller keeps them alive."""
    posture = tsid.TaskJointPosture("posture", robw)
    posture.setKp(kp * np.ones(robot.nv))
    posture.setKd(kd * np.ones(robot.nv))
    ref = tsid.TrajectorySample(robot.nq, robot.nv)
    ref.value(np.asarray(q0, dtype=float))
    ref.derivative(np.zeros(robot.nv))
    ref.second_derivative(np.zeros(robot.nv))
    posture.setReference(ref)
    form.addMotionTask(posture, 1.0, 1, 0.0)
    bounds = tsid.TaskActuationBounds("tau", robw)
    bounds.setBounds(-robot.effort_limit, robot.effort_limit)
    form.addActuationTask(bounds, 1.0, 0, 0.0)
    solver = tsid.SolverHQuadProgFast("qp")
    solver.resize(form.nVar, form.nEq, form.nIn)
    return posture, ref, bounds, solver


def tsid_step_factory(cfg, robot, coupling, task, q0):
    """TSID on the YuMi states, as close to the weighted UK step as TSID's formulation allows, or None when
    ``tsid`` is absent.

    * the coupling: ``TaskTwoFramesEquality(B, E₂)`` at priority 0 (an equality, as ours), K_p = 1000,
      K_d = 33: B = E₁·T_A^B is the operational frame our ``RigidCoupling`` registered in the model.  Its
      law, in world axes, is ours (in E₂'s axes) up to the term ω_E₂ × (ω_E₂ − ω_B), second order in the
      coupling's velocity error;
    * E₁: ``TaskSE3Equality`` at priority 1, weight ω = 50, K_p = 500, K_d = 17, on the same circle;
    * Gauss' principle, ½(v̇ − a)ᵀM(v̇ − a) (which weights the torque by M⁻¹), cannot be written in TSID's
      Python API (no weighted task on the torque is exposed to its formulation): a posture on every joint
      at weight 1 (K_p = 10, K_d = 2√10, q₀, the 3-level set-up's posture) takes the 2 degrees of freedom
      that the coupling and E₁ leave, as pink and mink do.  So the two steps solve different problems
      (same size: 14 variables, 6 equalities, the effort bounds) and their torques differ by formulation;
    * the effort limits: ``TaskActuationBounds`` at priority 0 on TSID's τ = M v̇ + h (ours bound
      M v̇ + h + D v).

    ``step(k, t, q, v)`` sets E₁'s reference (prepared outside the timing), computes the problem data,
    solves, returns the torque."""
    tsid = _tsid()
    if tsid is None:
        return None
    robw = tsid.RobotWrapper(robot.model, tsid.RootJointType.FIXED_BASE_SYSTEM, False)
    form = tsid.InverseDynamicsFormulationAccForce("yumi", robw, False)
    form.computeProblemData(0.0, np.asarray(q0, dtype=float), np.zeros(robot.nv))
    names = robot.model.frames
    pair = tsid.TaskTwoFramesEquality("coupling", robw, names[coupling.fB].name, names[coupling.f2].name)
    pair.setKp(coupling.kp * np.ones(6))
    pair.setKd(coupling.kd * np.ones(6))
    form.addMotionTask(pair, 1.0, 0, 0.0)
    e1 = tsid.TaskSE3Equality("E1", robw, names[task.fid].name)
    e1.setKp(task.kp * np.ones(6))
    e1.setKd(task.kd * np.ones(6))
    e1.useLocalFrame(False)
    form.addMotionTask(e1, cfg["omega"], 1, 0.0)
    posture, ref, bounds, solver = _tsid_posture_bounds_solver(
        tsid, robw, form, robot, q0, 10.0, 2 * np.sqrt(10.0)
    )
    samples = {}
    keep = (robw, pair, posture, ref, bounds)  # TSID holds its robot and tasks by reference

    def step(k, t, q, v, _keep=keep):
        s = samples.get(k)
        if s is None:  # the first (warm-up) pass prepares the reference of each state
            s = samples[k] = _tsid_sample(tsid, *task.desired(t))
        e1.setReference(s)
        sol = solver.solve(form.computeProblemData(t, q, v))
        return form.getActuatorForces(sol)

    return step


def compare_panda(ctl, robot, states, solve) -> dict:
    """UK's and TSID's answers on the Panda states (outside the timing): the largest differences of v̇
    and of the torque (τ_UK − D v against TSID's M v̇ + h), absolute and relative to the largest |v̇|,
    |τ|; TSID's solver status (0 = solved) on every state; on how many states an effort limit bound UK."""
    dv, dtau, vmax, tmax, bad, bound = 0.0, 0.0, 0.0, 0.0, 0, 0
    for k, (t, q, v) in enumerate(states):
        tau_uk = np.array(ctl(t, q, v)) - robot.damping * v
        vdot_uk = np.array(ctl.info.vdot)
        bound += int(ctl.info.limits_active)
        vdot_ts, tau_ts, status = solve(k)
        bad += int(status != 0)
        dv = max(dv, float(np.max(np.abs(vdot_uk - vdot_ts))))
        dtau = max(dtau, float(np.max(np.abs(tau_uk - tau_ts))))
        vmax = max(vmax, float(np.max(np.abs(vdot_uk))))
        tmax = max(tmax, float(np.max(np.abs(tau_uk))))
    return dict(
        states=len(states),
        vdot_max_abs_diff=dv,
        vdot_max_abs=vmax,
        vdot_rel=dv / vmax,
        tau_max_abs_diff=dtau,
        tau_max_abs=tmax,
        tau_rel=dtau / tmax,
        tsid_unsolved=bad,
        uk_limits_bound=bound,
    )


def compare_yumi(ctl, robot, states, step) -> dict:
    """UK weighted against TSID's step on the YuMi states: the largest torque difference (different
    problems: ``tsid_step_factory``), for the record."""
    d, tmax = 0.0, 0.0
    for k, (t, q, v) in enumerate(states):
        tau_uk = np.array(ctl(t, q, v)) - robot.damping * v
        d = max(d, float(np.max(np.abs(tau_uk - step(k, t, q, v)))))
        tmax = max(tmax, float(np.max(np.abs(tau_uk))))
    return dict(tau_max_abs_diff=d, tau_max_abs=tmax, tau_rel=d / tmax)


def _tsid_version() -> str:
    if _tsid() is None:
        return "absent (not installed)"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"tsid {version('tsid')}"
    except PackageNotFoundError:
        return "tsid (version unknown)"


def measure(repeat: int = 5, python_path: bool = True) -> dict:
    cfg, robot, coupling, task, q0 = setup()
    states = record_states(cfg, robot, coupling, task, q0)
    floor = Floor(cfg, robot, coupling, task, states)
    ctl_w = weighted(cfg, robot, coupling, task)
    ctl_3 = three_levels(robot, coupling, task, q0)
    calls = {
        "floor": floor,
        "uk_weighted": lambda k, t, q, v: ctl_w(t, q, v),
        "uk_3_levels": lambda k, t, q, v: ctl_3(t, q, v),
    }
    try:  # the Panda of example-robot-data (the dev extra): its rows are skipped without it
        p_robot, hand, ctl_p, p_q0 = panda_circle()
    except MissingExtraError as exc:
        print(f"  Panda rows skipped: {exc}", flush=True)
        ctl_p = None
    if ctl_p is not None:
        p_states = record_panda_states(len(states))
        p_floor = PandaFloor(p_robot, hand)
        calls["panda_floor"] = lambda k, t, q, v: p_floor(*p_states[k])
        calls["panda_circle"] = lambda k, t, q, v: ctl_p(*p_states[k])
    if python_path:  # the same controllers on the generic Python path (fused=False): before/after
        ctl_wp = weighted(cfg, robot, coupling, task, fused=False)
        ctl_3p = three_levels(robot, coupling, task, q0, fused=False)
        calls["uk_weighted_python"] = lambda k, t, q, v: ctl_wp(t, q, v)
        calls["uk_3_levels_python"] = lambda k, t, q, v: ctl_3p(t, q, v)
    ts = tsid_step_factory(cfg, robot, coupling, task, q0)
    tp = tsid_panda_factory(p_robot, hand, p_q0, p_states) if ctl_p is not None else None
    checks = {}
    if ts is not None:
        calls["tsid_yumi"] = ts
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            checks["yumi_weighted_vs_tsid"] = compare_yumi(
                weighted(cfg, robot, coupling, task), robot, states, ts
            )
    if tp is not None:
        step_p, step_ps, solve_p = tp
        calls["tsid_panda"] = lambda k, t, q, v: step_p(k)
        calls["tsid_panda_sampled"] = lambda k, t, q, v: step_ps(k)
        checks["panda_vs_tsid"] = compare_panda(panda_circle()[2], p_robot, p_states, solve_p)
    names = list(calls)
    times = {n: [] for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (t, q, v) in enumerate(states):  # warm-up (caches, first calls)
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
    floors = {n: FLOOR_OF.get(n, "floor") for n in names if n not in ("floor", "panda_floor")}
    ratios = {n: med[n] / med[f] for n, f in floors.items()}
    # per-state ratios, then their median (robust to load that varies along the run)
    per_state = {n: float(np.median(np.array(times[n]) / np.array(times[f]))) for n, f in floors.items()}
    vs_tsid = {
        n: dict(
            tsid=m,
            ratio_of_medians=med[n] / med[m],
            median_of_ratios=float(np.median(np.array(times[n]) / np.array(times[m]))),
        )
        for n, m in AGAINST_TSID.items()
        if m in med
    }
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return dict(
        states=len(states),
        repeat=repeat,
        median_us=med,
        ratio_of_medians=ratios,
        floor_of=floors,
        median_of_ratios=per_state,
        targets=TARGETS,
        load_average=load,
        kkt_size=floor.size,
        tsid=_tsid_version() if ts else "absent (not installed)",
        against_tsid=vs_tsid,
        tsid_checks=checks,
        tsid_targets={n: t for n, (_, t) in TSID_TARGETS.items()},
        paths=dict(
            uk_weighted=ctl_w.info.path,
            uk_3_levels=ctl_3.info.path,
            **({"panda_circle": ctl_p.info.path} if ctl_p is not None else {}),
        ),
        cold_retries=dict(uk_weighted=ctl_w.cold_retries, uk_3_levels=ctl_3.cold_retries),
    )


def profile(repeat: int = 3, panda: bool = False) -> dict:
    """Where the fused step's time goes (the YuMi weighted step, or the Panda circle's), in context: the
    step runs interleaved with its floor as in ``measure``, with the robot's lean pass
    (``Robot.update_for_kernel``), its Pinocchio call (``pin.crba``) and the kernel call ``uk_step``
    wrapped by clocks (≈ 0.1 µs each).  The kernel's compute alone is measured by calling ``uk_step``, and
    its parts, from compiled code, back to back on the states (no dispatch, warm caches); the dispatch is
    the kernel call less that.  Returns medians in µs (the compiled parts: the best of the repeats)."""
    from numba import njit

    import cmstack.models.robot as robot_module
    from cmstack.controllers import _uk_kernels as K

    if panda:
        robot, hand, ctl, _ = panda_circle()
        states = record_panda_states(400)
        pf = PandaFloor(robot, hand)
        floor = lambda k, t, q, v: pf(t, q, v)  # noqa: E731
    else:
        cfg, robot, coupling, task, q0 = setup()
        states = record_states(cfg, robot, coupling, task, q0)
        floor = Floor(cfg, robot, coupling, task, states)
        ctl = weighted(cfg, robot, coupling, task)
    P = ctl._plan
    clock = time.perf_counter_ns
    parts = {"lean pass": 0, "pin.crba": 0, "kernel call": 0}
    crba, update, kernel = robot_module._crba, robot.update_for_kernel, P.step

    def timed(name, f):
        def g(*a):
            c0 = clock()
            out = f(*a)
            parts[name] += clock() - c0
            return out

        return g

    calls = {"floor": floor, "step": lambda k, t, q, v: ctl(t, q, v)}
    names = list(calls)
    times: dict = {n: [] for n in names + list(parts)}
    robot.update_for_kernel, P.step, robot_module._crba = (
        timed("lean pass", update),
        timed("kernel call", kernel),
        timed("pin.crba", crba),
    )
    try:
        for r in range(repeat + 1):
            for k, (t, q, v) in enumerate(states):
                shift = (k + r) % len(names)
                for n in names[shift:] + names[:shift]:
                    for x in parts:
                        parts[x] = 0
                    c0 = clock()
                    calls[n](k, t, q, v)
                    if r:  # r = 0: warm-up
                        times[n].append(clock() - c0)
                        if n == "step":
                            for x in parts:
                                times[x].append(parts[x])
    finally:
        del robot.update_for_kernel
        P.step, robot_module._crba = kernel, crba
    out = {n: float(np.median(times[n])) / 1e3 for n in times}

    @njit
    def whole(ts, Q, V, ptr, I, F, buf):
        for i in range(ts.shape[0]):
            K.uk_step(ts[i], Q[i], V[i], ptr, I, F, buf)

    @njit
    def h_only(N, J, v, jpose, parent, inert, g, work, h):
        for _i in range(N):
            K.bias_forces(J, v, jpose, parent, inert, g, work, h)

    @njit
    def frames_only(N, J, v, jpose, fint, fplace, fJ, fvec):
        for _i in range(N):
            K.frame_states(J, v, jpose, fint, fplace, fJ, fvec)

    @njit
    def rows_only(N, t, q, v, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, Ab, ed, R):
        for _i in range(N):
            K.task_rows_into(
                t, q, v, fJ, fvec, tint, tflt, tgtH, tgtVA, tcirc, pidx, qref, tbias, terr, Ab, ed, R
            )

    @njit
    def kkt_only(N, M, h, D, v, Ab, tint, tflt, m, gauss, tol, wk, out):
        for _i in range(N):
            K.kkt_solve(M, h, D, v, Ab, tint, tflt, m, gauss, tol, wk, out)

    ts = np.array([s[0] for s in states], dtype=float)
    Q, V = np.array([s[1] for s in states]), np.array([s[2] for s in states])
    N = len(states)
    t, q, v = states[-1]
    ctl(t, q, v)  # binds, copies the parameters; the data holds this state
    buf = ctl._kin_buf[0]
    n = robot.nv
    x, tau, hD, lam, Ab = P.results(buf)
    Ab, M, h = Ab.copy(), ctl.kin.M.copy(), ctl.kin.h.copy()
    d = robot.data
    jpose = P.jpose.copy()
    grav = np.array(robot.model.gravity.linear)
    res = np.empty(3 * n + P.m_up)
    jobs = {
        "kernel compute": lambda: whole(ts, Q, V, P.ptr, P.I, P.F, np.empty(P.buf_len)),
        "  h (Newton-Euler)": lambda: h_only(
            N, d.J, v, jpose, P.parent, P.inert, grav, np.empty((len(P.parent), 18)), np.empty(n)
        ),
        "  frames": lambda: frames_only(N, d.J, v, jpose, P.fint, P.fplace, P.fJ.copy(), P.fvec.copy()),
        "  task rows": lambda: rows_only(
            N,
            t,
            q,
            v,
            *P.task_tables(),
            P.terr.copy(),
            Ab.copy(),
            np.empty((4, P.terr.shape[1])),
            np.empty((3, 3)),
        ),
        "  KKT solve": lambda: kkt_only(
            N, M, h, ctl.D, v, Ab, P.tint, P.tflt, P.m_up, P.gauss, ctl._sqrt_rank_tol, P.wk.copy(), res
        ),
    }
    for name, job in jobs.items():
        job()  # compiles
        best = np.inf
        for _ in range(repeat + 2):
            c0 = clock()
            job()
            best = min(best, (clock() - c0) / N)
        out[name] = best / 1e3
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--fused-only", action="store_true", help="skip the generic Python path (fused=False) columns"
    )
    ap.add_argument("--profile", action="store_true", help="where the fused steps' time goes (medians)")
    args = ap.parse_args(argv)
    if args.profile:
        for panda in (False, True):
            med = profile(args.repeat, panda)
            step = med["step"]
            rows = [
                ("floor", med["floor"]),
                ("step", step),
                ("pin.crba", med["pin.crba"]),
                ("lean pass beyond it (checks)", med["lean pass"] - med["pin.crba"]),
                ("kernel compute", med["kernel compute"]),
            ]
            rows += [(k, med[k]) for k in med if k.startswith("  ")]
            rows += [
                ("kernel dispatch (call − compute)", med["kernel call"] - med["kernel compute"]),
                ("rest of the step (Python)", step - med["lean pass"] - med["kernel call"]),
            ]
            print(
                f"{'Panda circle' if panda else 'YuMi UK weighted'} step, fused path: medians (interleaved with its floor; "  # noqa: E501
                f"load average {os.getloadavg()[0]:.1f})"
            )
            for n, x in rows:
                print(
                    f"  {n:<34} {x:7.2f} µs   {x / med['floor']:5.2f}× floor   {100 * x / step:5.1f} % of the step"
                )
        return
    res = measure(args.repeat, not args.fused_only)
    med = res["median_us"]
    print(
        f"YuMi UK step vs its kernel floor ({res['states']} closed-loop states × {res['repeat']}, interleaved; "
        f"load average {res['load_average']})"
    )
    print(
        f"  floor (computeAllTerms + 3 frame Jacobians + 3 classical accelerations + LAPACK solve "
        f"{res['kkt_size']}×{res['kkt_size']}): median {med['floor']:.1f} µs"
    )
    if "panda_floor" in med:
        print(
            f"  panda_floor (computeAllTerms + the hand's frame Jacobian, Panda): median {med['panda_floor']:.1f} µs"
        )
    for n, f in res["floor_of"].items():
        tgt = TARGETS.get(n)
        r = res["ratio_of_medians"][n]
        verdict = "" if tgt is None else (" OK" if r <= tgt else " MISSED")
        print(
            f"  {n:<18} median {med[n]:7.1f} µs   ratio {r:5.2f}× {f} (per-state median {res['median_of_ratios'][n]:.2f}×)"  # noqa: E501
            + (f"   target ≤ {tgt}×{verdict}" if tgt else "")
        )
    if not res["against_tsid"]:
        print(f"  tsid: {res['tsid']}: the TSID rows are skipped (docs/speed.md says how to build it)")
    else:
        print(f"  against TSID {res['tsid']} (same states, interleaved):")
        for n, r in res["against_tsid"].items():
            tgt = TSID_TARGETS.get(n, (None, None))[1]
            verdict = (
                ""
                if tgt is None
                else (f"   target ≤ {tgt}× " + ("OK" if r["ratio_of_medians"] <= tgt else "MISSED"))
            )
            print(
                f"    {n:<18} / {r['tsid']:<12} {r['ratio_of_medians']:5.3f}× (per-state median "
                f"{r['median_of_ratios']:.3f}×){verdict}"
            )
        for name, c in res["tsid_checks"].items():
            print(
                f"    {name}: "
                + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in c.items())
            )
    (results_dir() / "yumi_uk.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
