"""Franka Panda (example-robot-data): the hand draws a 0.1 m circle at 2 rad/s, orientation held, posture last."""
import numpy as np
from cmstack import (Circle, FrameTask, Robot, UdwadiaKalabaController, example_robot_data_path, plant_from_urdf,
                     simulate)
from cmstack.models.coupling import PostureTask
from cmstack.scenarios._common import Outcome, Row

def run(ctx):
    robot = Robot.from_urdf(example_robot_data_path("panda_description/urdf/panda.urdf"),
                            locked_joints={"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0})
    q0 = np.array([0, -0.785, 0, -2.356, 0, 1.571, 0.785])                    # the Panda's "ready" pose
    T0 = robot.update(q0, 0 * q0).frame("panda_hand_tcp").T
    circle = Circle(T0.translation - [0.1, 0, 0], 0.1, 2.0, R=T0.rotation)     # x–z plane, through T0, R held
    hand = FrameTask(robot, "panda_hand_tcp", circle, kp=400, kd=40, name="hand")
    ctrl = UdwadiaKalabaController(robot, levels=[[hand], [PostureTask(robot, q0, kp=100, kd=20)]])
    plant = plant_from_urdf(robot, q0=q0, sim_dt=ctx.cfg["control_dt"], xml_path=ctx.out / "plant.xml")
    run = simulate(plant, ctrl, duration=ctx.cfg["duration"], control_dt=ctx.cfg["control_dt"], log=ctx.logger,
                   progress=ctx.progress, viewer=ctx.make_viewer(plant.model))   # logs q, v, τ, the plant's qpos
    late = np.asarray(ctx.logger.data["t"]) > 1.0
    err = float(e.max()) if (e := np.linalg.norm(run.error_arrays()["hand"][late, :3], axis=1)).size else np.nan
    return Outcome({"ee_error_max_m": err, **run.timing()},
                   [Row("ee_error_max_m", err, target="<= 1e-3", ok=err <= 1e-3)])
