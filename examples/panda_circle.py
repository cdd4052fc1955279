"""Franka Panda (example-robot-data): the hand draws a 0.1 m circle at 2 rad/s, orientation held, posture last.

    python examples/panda_circle.py [--duration S] [--out DIR]       # a plain script: build, simulate, save
    cmstack run examples/panda_circle.py [--duration S] [--out DIR]  # a scenario: run directory, targets

The settings (duration, control period) are in panda_circle.toml beside this file.
"""

import numpy as np

from cmstack import Robot, example_robot_data_path, simulate
from cmstack.controllers import UdwadiaKalabaController
from cmstack.plants import plant_from_urdf
from cmstack.scenario import Outcome, Row, script_settings
from cmstack.tasks import Circle, FrameTask, PostureTask

TARGET_M = 1e-3  # the hand's largest position error after t = 1 s


def build(control_dt, xml_path):
    """The Panda's controller (the hand's circle first, the posture last) and its MuJoCo plant."""
    robot = Robot.from_urdf(
        example_robot_data_path("panda_description/urdf/panda.urdf"),
        locked_joints={"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0},
    )
    q0 = np.array([0, -0.785, 0, -2.356, 0, 1.571, 0.785])  # the Panda's "ready" pose
    T0 = robot.update(q0, 0 * q0).frame("panda_hand_tcp").T
    circle = Circle(T0.translation - [0.1, 0, 0], 0.1, 2.0, R=T0.rotation)  # x–z plane, through T0, R held
    hand = FrameTask(robot, "panda_hand_tcp", circle, kp=400, kd=40, name="hand")
    posture = PostureTask(robot, q0, kp=100, kd=20)
    controller = UdwadiaKalabaController(robot, levels=[[hand], [posture]])
    plant = plant_from_urdf(robot, q0=q0, sim_dt=control_dt, xml_path=xml_path)
    return controller, plant


def hand_error_max(result):
    """The hand's largest distance from the circle after t = 1 s [m] (NaN for a shorter run)."""
    late = np.asarray(result.log.data["t"]) > 1.0
    error = np.linalg.norm(result.error_arrays()["hand"][late, :3], axis=1)
    return float(error.max()) if error.size else float("nan")


def run(ctx):
    """The scenario (``cmstack run``): ctx.cfg is panda_circle.toml (with --duration, --set), ctx.out the run
    directory."""
    controller, plant = build(ctx.cfg["control_dt"], ctx.out / "plant.xml")
    viewer = ctx.make_viewer(plant.model)
    # simulate for the settings' duration and control period, into the run's log (no per-step record: None)
    result = ctx.simulate(
        plant, controller, None, log=ctx.logger, viewer=viewer, error_targets={"hand": TARGET_M}
    )
    err = hand_error_max(result)
    return Outcome(
        {"ee_error_max_m": err, **result.timing()},
        [Row("ee_error_max_m", err, target="<= 1e-3", ok=err <= TARGET_M)],
    )


if __name__ == "__main__":
    cfg, out, duration = script_settings(__file__, __doc__)
    controller, plant = build(cfg["control_dt"], out / "plant.xml")
    result = simulate(
        plant,
        controller,
        duration=duration,
        control_dt=cfg["control_dt"],
        error_targets={"hand": TARGET_M},
    )
    result.save(out)
    err = hand_error_max(result)
    print(
        f"ee_error_max_m = {err:.3g} (target <= 1e-3 after t = 1 s); "
        f"{result.steps} steps, median control step {result.step_us_median:.0f} us; log in {out}"
    )
    raise SystemExit(0 if err <= TARGET_M else 1)
