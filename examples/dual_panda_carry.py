"""Two Franka Pandas side by side carry a virtual rigid box: hands coupled first, the box's path second, posture last."""
import numpy as np
from cmstack import (Circle, FrameTask, RigidCoupling, Robot, UdwadiaKalabaController, example_robot_data_path,
                     plant_from_urdf, simulate)
from cmstack.models.coupling import PostureTask
from cmstack.scenarios._common import Outcome, Row

def run(ctx):
    panda = example_robot_data_path("panda_description/urdf/panda.urdf")
    fingers = {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}          # locked: removed from the model
    robot = Robot.compose([(panda, "l_", [0, 0.3, 0], fingers), (panda, "r_", [0, -0.3, 0], fingers)])  # URDF, prefix, base
    q0 = np.tile([0, -0.785, 0, -2.356, 0, 1.571, 0.785], 2)                      # both arms in the "ready" pose
    box = RigidCoupling.from_configuration(robot, "l_panda_hand_tcp", "r_panda_hand_tcp", q0, kp=400, kd=40, name="box")
    T0 = robot.update(q0, 0 * q0).frame("l_panda_hand_tcp").T     # the box as the left hand holds it goes up and round
    path = Circle(T0.translation + [0, 0, 0.05], 0.05, 1.0, -np.pi / 2, R=T0.rotation)
    carry = FrameTask(robot, "l_panda_hand_tcp", path, kp=400, kd=40, name="carry")
    ctrl = UdwadiaKalabaController(robot, levels=[[box], [carry], [PostureTask(robot, q0, kp=100, kd=20)]])
    plant = plant_from_urdf(robot, q0=q0, sim_dt=ctx.cfg["control_dt"], xml_path=ctx.out / "plant.xml")
    run = simulate(plant, ctrl, duration=ctx.cfg["duration"], control_dt=ctx.cfg["control_dt"], log=ctx.logger,
                   progress=ctx.progress, viewer=ctx.make_viewer(plant.model))   # logs q, v, τ, the plant's qpos
    late, E = np.asarray(ctx.logger.data["t"]) > 1.0, run.error_arrays()
    ec, ep = (float(e.max()) if (e := np.linalg.norm(E[k][late], axis=1)).size else np.nan for k in ("box", "carry"))
    return Outcome({"constraint_error_max": ec, "carry_error_max": ep, **run.timing()},
                   [Row("constraint_error_max", ec, target="<= 1e-4", ok=ec <= 1e-4), Row("carry_error_max", ep)])
