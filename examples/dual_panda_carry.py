"""Two Franka Pandas side by side carry a virtual rigid box: hands coupled first, the box's path second, posture last.

    python examples/dual_panda_carry.py [--duration S] [--out DIR]       # a plain script: build, simulate, save
    cmstack run examples/dual_panda_carry.py [--duration S] [--out DIR]  # a scenario: run directory, targets

The settings (duration, control period) are in dual_panda_carry.toml beside this file.
"""

import numpy as np

from cmstack import Robot, example_robot_data_path, simulate
from cmstack.controllers import UdwadiaKalabaController
from cmstack.plants import plant_from_urdf
from cmstack.scenario import Outcome, Row, script_settings
from cmstack.tasks import Circle, FrameTask, PostureTask, RigidCoupling

TARGET = 1e-4  # the coupling's largest error after t = 1 s (the box stays rigid)


def build(control_dt, xml_path):
    """The two arms' controller (the box's coupling, then its path, then the posture) and their MuJoCo plant."""
    panda = example_robot_data_path("panda_description/urdf/panda.urdf")
    fingers = {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}  # locked: removed from the model
    robot = Robot.compose(
        [
            (panda, "l_", [0, 0.3, 0], fingers),  # URDF, prefix, base, locked joints
            (panda, "r_", [0, -0.3, 0], fingers),
        ]
    )
    q0 = np.tile([0, -0.785, 0, -2.356, 0, 1.571, 0.785], 2)  # both arms in the "ready" pose
    box = RigidCoupling.from_configuration(
        robot, "l_panda_hand_tcp", "r_panda_hand_tcp", q0, kp=400, kd=40, name="box"
    )  # the hands keep their offset
    T0 = robot.update(q0, 0 * q0).frame("l_panda_hand_tcp").T  # the box as the left hand holds it
    path = Circle(T0.translation + [0, 0, 0.05], 0.05, 1.0, -np.pi / 2, R=T0.rotation)  # goes up and round
    carry = FrameTask(robot, "l_panda_hand_tcp", path, kp=400, kd=40, name="carry")
    posture = PostureTask(robot, q0, kp=100, kd=20)
    controller = UdwadiaKalabaController(robot, levels=[[box], [carry], [posture]])
    plant = plant_from_urdf(robot, q0=q0, sim_dt=control_dt, xml_path=xml_path)
    return controller, plant


def errors_max(result):
    """The largest coupling ("box") and path ("carry") errors after t = 1 s (NaN for a shorter run)."""
    late = np.asarray(result.log.data["t"]) > 1.0
    errors = result.error_arrays()
    out = []
    for name in ("box", "carry"):
        e = np.linalg.norm(errors[name][late], axis=1)
        out.append(float(e.max()) if e.size else float("nan"))
    return out


def run(ctx):
    """The scenario (``cmstack run``): ctx.cfg is dual_panda_carry.toml (with --duration, --set), ctx.out the
    run directory."""
    controller, plant = build(ctx.cfg["control_dt"], ctx.out / "plant.xml")
    # simulate for the settings' duration and control period, into the run's log (no per-step record: None)
    result = ctx.simulate(plant, controller, None, log=ctx.logger, viewer=ctx.make_viewer(plant.model))
    ec, ep = errors_max(result)
    return Outcome(
        {"constraint_error_max": ec, "carry_error_max": ep, **result.timing()},
        [Row("constraint_error_max", ec, target="<= 1e-4", ok=ec <= TARGET), Row("carry_error_max", ep)],
    )


if __name__ == "__main__":
    cfg, out, duration = script_settings(__file__, __doc__)
    controller, plant = build(cfg["control_dt"], out / "plant.xml")
    result = simulate(plant, controller, duration=duration, control_dt=cfg["control_dt"])
    result.save(out)
    ec, ep = errors_max(result)
    print(
        f"constraint_error_max = {ec:.3g} (target <= 1e-4 after t = 1 s), carry_error_max = {ep:.3g}; "
        f"{result.steps} steps, median control step {result.step_us_median:.0f} us; log in {out}"
    )
    raise SystemExit(0 if ec <= TARGET else 1)
