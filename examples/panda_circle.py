"""Franka Panda (example-robot-data): the hand draws a 0.1 m circle at 2 rad/s, orientation held, posture last."""
import numpy as np
from cmstack import (FrameTask, Robot, UdwadiaKalabaController, circle_trajectory, example_robot_data_path,
                     plant_from_urdf, run_closed_loop)
from cmstack.models.coupling import PostureTask
from cmstack.scenarios._common import Outcome, Row

def run(ctx):
    robot = Robot.from_urdf(example_robot_data_path("panda_description/urdf/panda.urdf"),
                            locked_joints={"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0})
    q0 = np.array([0, -0.785, 0, -2.356, 0, 1.571, 0.785])                    # the Panda's "ready" pose
    T0 = robot.update(q0, 0 * q0).frame("panda_hand_tcp").T
    circle = circle_trajectory(T0.translation - [0.1, 0, 0], 0.1, 2.0, 0.0, R=T0.rotation)   # x–z plane, R held
    hand = FrameTask(robot, "panda_hand_tcp", circle, kp=400, kd=40, name="hand")
    ctrl = UdwadiaKalabaController(robot, levels=[[hand], [PostureTask(robot, q0, kp=100, kd=20)]])
    plant = plant_from_urdf(robot, q0=q0, sim_dt=ctx.cfg["control_dt"], xml_path=ctx.out / "plant.xml")
    ctx.logger.meta["mjcf_path"] = str(plant.path)                             # `cmstack view` replays the run
    run_closed_loop(plant, ctrl, duration=ctx.cfg["duration"], control_dt=ctx.cfg["control_dt"], progress=ctx.progress,
                    record=lambda t, q, v, tau: ctx.logger.append(t=t, q=q, tau=tau, plant_qpos=plant.data.qpos,
                                                                  e_hand=hand.error(ctrl.kin, t)))
    L = ctx.logger.arrays()
    err = float(e.max()) if (e := np.linalg.norm(L["e_hand"][L["t"] > 1.0, :3], axis=1)).size else np.nan
    return Outcome({"ee_error_max_m": err}, [Row("ee_error_max_m", err, target="<= 1e-3", ok=err <= 1e-3)])
