"""Limits that really bind never hang the controller (issue: "a limit that binds never hangs").

The README's two-Panda carry with a velocity limit the circle needs more than, and with an effort limit
below what joint 4 needs against gravity: each closed loop runs in a child process under a wall-clock
limit (a stall fails the test, not the CI run), finishes within its limits or stops with a named
``InfeasibleError``, and the hard coupling holds.  Before controllers/qp.py one QP of these loops took
up to 2,649 ProxSuite iterations (24 ms) and the issue's machine saw it run for more than 20 s."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import _forkserver

SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from cmstack import (Robot, RigidCoupling, FrameTask, PostureTask, Circle, UdwadiaKalabaController,
                         plant_from_urdf, simulate, example_robot_data_path)
    from cmstack.models.errors import InfeasibleError
    from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit
    kind, omega, duration = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    arm = example_robot_data_path("panda_description/urdf/panda.urdf")
    fingers = {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}
    robot = Robot.compose([(arm, "left_", [0, 0.4, 0], fingers), (arm, "right_", [0, -0.4, 0], fingers)])
    q0 = np.tile([0, -0.785, 0, -2.356, 0, 1.571, 0.785], 2)
    box = RigidCoupling.from_configuration(robot, "left_panda_hand_tcp", "right_panda_hand_tcp", q0, kp=1000, kd=60)
    p0 = robot.update(q0, 0 * q0).frame("left_panda_hand_tcp").T
    carry = FrameTask(robot, "left_panda_hand_tcp", Circle(p0.translation - [0.05, 0, 0], 0.05, omega, R=p0.rotation),
                      kp=400, kd=40)
    if kind == "velocity":
        lims = [JointVelocityLimit(robot, dt=1e-3, v_max=0.3)]
    else:   # the arm sags where the torque runs out: the position limits keep it off the plant's joint stops
        lims = [EffortLimit(robot, tau_max=np.minimum(20.0, robot.effort_limit)),
                JointPositionLimit(robot, dt=1e-3, a_max=5.0)]
    ctrl = UdwadiaKalabaController(robot, levels=[[box], [carry], [PostureTask(robot, q0, kp=50, kd=14)]],
                                   limits=lims)
    # contacts off for the effort case: the arms sag where the torque runs out and the forearms touch at
    # t = 1.22 s, a contact the controller does not model (it opens the coupling; not what is tested here)
    plant = plant_from_urdf(robot, q0=q0, sim_dt=1e-3, contacts=(kind == "velocity"))
    steps = {"qp": 0, "sequential": 0, "saturated": 0, "max_iters": 0}
    call = ctrl.__call__
    class Probe:
        def __call__(self, t, q, v, kin=None):
            tau = call(t, q, v, kin)
            i = ctrl.info
            steps[i.path] = steps.get(i.path, 0) + 1
            steps["saturated"] += int(i.saturated)
            steps["max_iters"] = max(steps["max_iters"], i.qp_iter)
            return tau
        @property
        def kin(self):
            return ctrl.kin
        def errors(self, kin, t):
            return ctrl.errors(kin, t)
    out = {"steps": steps}
    try:
        run = simulate(plant, Probe(), duration=duration, control_dt=1e-3, progress=False)
        E = run.error_arrays()
        out["coupling_max_m"] = float(np.linalg.norm(E[box.name][:, :3], axis=1).max())
        out["finished"] = True
    except InfeasibleError as e:
        out["finished"] = False
        out["error"] = str(e)
    out["tau_abs_max"] = float(np.abs(ctrl.info.tau).max()) if ctrl.info.tau is not None else None
    out["q_margin_min_rad"] = float(min(np.min(plant.state()[0] - robot.model.lowerPositionLimit),
                                        np.min(robot.model.upperPositionLimit - plant.state()[0])))
    print("RESULT " + json.dumps(out))
""")


# the documented bound of one UK step (controllers/udwadia_kalaba.py, _sequential): the one QP and level 1's
# two QPs capped at 20 x 15 iterations each, the levels below sharing max_step_iters = 150
CAP = 3 * 300 + 150


def _run(tmp_path, kind: str, omega: float, duration: float) -> dict:
    script = tmp_path / "carry.py"
    script.write_text(SCRIPT)
    r = _forkserver.run(
        [sys.executable, str(script), kind, str(omega), str(duration)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    line = [s for s in r.stdout.splitlines() if s.startswith("RESULT ")]
    assert r.returncode == 0 and line, r.stderr[-3000:]
    return json.loads(line[-1][len("RESULT ") :])


def test_velocity_limit_that_binds_finishes(tmp_path):
    """ω = 8 rad/s: the hand needs 0.4 m/s, more than joints at 0.3 rad/s can give."""
    out = _run(tmp_path, "velocity", 8.0, 1.5)
    assert out["steps"]["sequential"] + out["steps"]["qp"] > 100, out  # the limit really binds
    assert out["finished"], out.get("error")
    assert out["coupling_max_m"] <= 1e-4, out  # the hard level held
    assert out["steps"]["max_iters"] <= CAP, out  # bounded: no crawl


def test_effort_limit_below_gravity_finishes_or_names_the_joint(tmp_path):
    """20 N·m on every joint (12 on the wrists, their URDF limit, which the plant's motors also have):
    joint 4 of each arm needs ~22 N·m against gravity at "ready"."""
    out = _run(tmp_path, "effort", 1.0, 1.5)
    assert out["steps"]["sequential"] + out["steps"]["qp"] > 100, out
    if out["finished"]:
        # measured 1.3e-4 m: the plant realises the commanded acceleration to 1e-14 and the coupling rows
        # hold to 2e-9 every step; what remains is the zero-order hold of a fast, torque-saturated sag
        # (the coupling's J̇v changes within the 1 ms step) that the PD of the coupling corrects
        assert out["coupling_max_m"] <= 1e-3, out
        assert out["q_margin_min_rad"] > 0, out
        assert out["tau_abs_max"] <= 20.0 * (1 + 1e-6), out  # (the wrists' URDF limit is 12 N·m: kept)
        assert out["steps"]["max_iters"] <= CAP, out
    else:
        assert "effort" in out["error"] and "panda_joint" in out["error"] and "level 1" in out["error"], out


def test_lift_into_a_joint_bound_stays_inside_with_the_coupling_held(tmp_path):
    """Issue 21, item 2: two coupled Pandas lift the box 0.6 m in 1.5 s, which drives the elbows into their
    upper URDF bound; the plant (MuJoCo, semi-implicit Euler, joint damping) never passes the bound by more
    than 1e-4 rad and the coupling stays within 1e-4 m (bench/limits.py, case lift_two_arms)."""
    code = (
        "import json; from cmstack.bench.limits import run_case; "
        "print('RESULT ' + json.dumps(run_case('lift_two_arms', 2.0)))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    line = [s for s in r.stdout.splitlines() if s.startswith("RESULT ")]
    assert r.returncode == 0 and line, r.stderr[-3000:]
    out = json.loads(line[-1][len("RESULT ") :])
    assert out["error"] == "", out["error"]
    assert out["closest_to_bound_rad"] <= 1e-3, out  # the elbows really reach their bound ...
    assert out["overrun_rad"] <= 1e-4, out  # ... and do not pass it
    assert out["coupling_max_m"] <= 1e-4, out
    assert out["saturated_steps"] < 50, out  # the levels below gave way in a few steps at most
