"""What MuJoCo's compiler resolves beyond an element's own attributes is read as MuJoCo reads it (issue 33 item 6):
motor limits and gears from ``<default>`` classes, gravity from a second ``<option>``, a joint ``ref`` set by a
default class (refused, as an element's own ``ref`` is).  Before, the shipped mjcf/yumi.xml (its motors limited
by ``<default><motor ctrllimited="true" ctrlrange="-300 300"/>``) was read with no torque limit at all."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from cmstack.models.errors import ModelFileError
from cmstack.models.robot import PACKAGE_ROOT, Robot

FIVE_BAR = (PACKAGE_ROOT / "mjcf" / "five_bar.xml").read_text()


def test_yumi_motor_limits_come_from_its_default_class():
    r = Robot.from_mjcf("mjcf/yumi.xml")
    m = mujoco.MjModel.from_xml_path(str(PACKAGE_ROOT / "mjcf" / "yumi.xml"))
    assert np.all(m.actuator_ctrllimited) and np.all(m.actuator_ctrlrange[:, 1] == 300.0)
    np.testing.assert_array_equal(r.effort_limit, 300.0)
    np.testing.assert_array_equal(r.effort_limit, Robot("urdf/yumi.urdf").effort_limit)


def test_motor_class_gear_and_second_option(tmp_path):
    text = (
        FIVE_BAR.replace(
            "<default>", '<default><default class="strong"><motor ctrlrange="-7 7" gear="2"/></default>'
        )
        .replace('joint="base_r" ctrlrange="-5 5"', 'joint="base_r" class="strong"')
        .replace("</option>", '</option><option gravity="0 0 -3"/>')
    )
    p = tmp_path / "classes.xml"
    p.write_text(text)
    m = mujoco.MjModel.from_xml_path(str(p))
    assert m.opt.gravity[2] == -3.0 and m.actuator_gear[1, 0] == 2.0
    r = Robot.from_mjcf(p)
    assert r.effort_limit[r.joint_index("base_r")] == 14.0  # max|ctrlrange| * gear, MuJoCo's values
    assert r.effort_limit[r.joint_index("base_l")] == 5.0
    assert r.model.gravity.linear[2] == -3.0
    assert r.passive_joints == ["elbow_l", "tip", "elbow_r"]


def test_a_ref_from_a_default_class_is_refused(tmp_path):
    p = tmp_path / "ref.xml"
    p.write_text(
        FIVE_BAR.replace("<default>", '<default><default class="off"><joint ref="0.2"/></default>').replace(
            '<joint name="tip"/>', '<joint name="tip" class="off"/>'
        )
    )
    with pytest.raises(ModelFileError) as err:
        Robot.from_mjcf(p)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"MJCF {p}") and "joint 'tip' has ref=0.2" in msg
