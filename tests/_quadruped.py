"""The five-bar quadruped's stance and levels (mjcf/quadruped_five_bar.xml), as the contact controller's tests
build them (tests/test_contact_uk.py, tests/test_contact_kernels.py)."""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from cmstack.models.com import CenterOfMassTask
from cmstack.models.contact import PointContact
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.robot import Robot

PATH = "mjcf/quadruped_five_bar.xml"
LEGS = ("fl", "fr", "hl", "hr")


def stance_levels(robot: Robot, mu: float, base_shift, swing: str | None = None) -> tuple[list, list]:
    """(contacts, levels) at q_initial: a point contact per foot with friction ``mu``, active but ``swing``'s;
    levels [[base (+ swing foot)], [centre of mass], [posture of the motors]]: the base's target its pose moved by
    ``base_shift`` (3, m, world), the swing foot's (position rows) 5 cm above where it is."""
    contacts = [PointContact(robot, f"{leg}_foot", mu=mu) for leg in LEGS]
    kin = robot.update(robot.q_initial, np.zeros(robot.nv))
    for c in contacts:
        c.set_active(c.name != swing, c.position(kin))
    base = FrameTask(robot, "base_site", kp=400, kd=40, name="base")
    base.set_target(pin.SE3(np.eye(3), kin.frame("base_site").p + base_shift))
    com = CenterOfMassTask(robot, kp=100, kd=20)
    post = PostureTask(robot, robot.q_initial, joints=robot.actuated_joints, kp=25, kd=10)
    levels = [[base], [com], [post]]
    if swing is not None:
        foot = FrameTask(robot, swing, kp=400, kd=40, rows="position", name="swing")
        foot.set_target(pin.SE3(np.eye(3), kin.frame(swing).p + [0.0, 0.0, 0.05]))
        levels = [[base, foot], [com], [post]]
    return contacts, levels
