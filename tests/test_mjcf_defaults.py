"""What MuJoCo's compiler resolves beyond an element's own attributes is read as MuJoCo reads it (issue 33 item 6):
motor limits and gears from ``<default>`` classes, gravity from a second ``<option>``, a joint ``ref`` set by a
default class (refused, as an element's own ``ref`` is).  Before, the shipped mjcf/yumi.xml (its motors limited
by ``<default><motor ctrllimited="true" ctrlrange="-300 300"/>``) was read with no torque limit at all."""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
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


ORIENTED = """<mujoco><compiler angle="{angle}" {seq}/>
  <worldbody>
    <body name="a" pos="0.1 0.2 0.3" {rot_a}><joint name="j1" axis="0 1 0"/>
      <inertial pos="0.02 0 -0.05" {irot} mass="1.3" diaginertia="0.02 0.03 0.025"/>
      <site name="sa" pos="0.05 0 0" {rot_s}/>
      <frame pos="0.04 0 0.01" {rot_f}>
        <body name="b" pos="0.3 0 0" {rot_b}><joint name="j2" axis="1 0 0"/>
          <geom type="box" size="0.05 0.02 0.1" pos="0 0 -0.1" {rot_g} mass="0.7"/>
          <body name="c" pos="0 0.1 -0.2" {rot_a}><joint name="j3" type="slide" axis="0 0 1"/>
            <geom type="capsule" fromto="0 0 0 0.1 0.05 -0.2" size="0.02" mass="0.4"/>
            <inertial pos="0.01 0 -0.1" mass="0.4" fullinertia="0.02 0.03 0.025 0.001 -0.002 0.0015"/>
          </body>
        </body>
      </frame>
    </body>
  </worldbody>
</mujoco>"""
FORMS_R = {  # orientation forms in radians
    "euler_ZYX": ('eulerseq="ZYX"', 'euler="0.3 0.2 0.1"'),
    "euler_xyz": ("", 'euler="0.3 -0.2 0.6"'),
    "axisangle": ("", 'axisangle="1 1 0 0.5"'),
    "xyaxes": ("", 'xyaxes="1 0.2 0 -0.1 1 0.3"'),
    "zaxis": ("", 'zaxis="0.2 0.3 1"'),
    "quat": ("", 'quat="0.9 0.1 0.3 -0.2"'),
}


@pytest.mark.parametrize("angle", ["radian", "degree"])
@pytest.mark.parametrize("form", list(FORMS_R))
def test_bodies_sites_and_inertias_are_where_mujoco_puts_them(form, angle, tmp_path):
    """Every orientation form MJCF has (bodies, a <frame>, a site, an inertial, a rotated geom; inertias from
    fullinertia and from geoms): body and site poses and the mass matrix of Pinocchio's model equal MuJoCo's at
    random configurations.  Pinocchio 4.1's parser alone put an axisangle body 0.85 rad off and ignored
    eulerseq (0.29 rad off), silently."""
    seq, rot = FORMS_R[form]
    if angle == "degree":  # the same rotations written in degrees where the form carries angles
        rot = rot.replace(
            'euler="0.3 0.2 0.1"', 'euler="17.188733853924695 11.459155902616466 5.729577951308232"'
        )
        rot = rot.replace(
            'euler="0.3 -0.2 0.6"', 'euler="17.188733853924695 -11.459155902616466 34.37746770784939"'
        )
        rot = rot.replace('axisangle="1 1 0 0.5"', 'axisangle="1 1 0 28.64788975654116"')
    p = tmp_path / f"{form}_{angle}.xml"
    p.write_text(
        ORIENTED.format(angle=angle, seq=seq, rot_a=rot, irot=rot, rot_s=rot, rot_f=rot, rot_b=rot, rot_g=rot)
    )
    robot = Robot.from_mjcf(p)
    m = mujoco.MjModel.from_xml_path(str(p))
    d = mujoco.MjData(m)
    data = robot.model.createData()
    rng = np.random.default_rng(3)
    dofs = [m.jnt_dofadr[m.joint(n).id] for n in robot.joint_names]
    for _ in range(5):
        q = rng.uniform(-1.5, 1.5, robot.nq)
        for n in robot.joint_names:
            d.qpos[m.jnt_qposadr[m.joint(n).id]] = q[robot.joint_index(n)]
        mujoco.mj_forward(m, d)
        pin.framesForwardKinematics(robot.model, data, q)
        for name in ("a", "b", "c"):
            T = data.oMf[robot.frame_id(name)]
            np.testing.assert_allclose(T.translation, d.body(name).xpos, rtol=0, atol=1e-12)
            np.testing.assert_allclose(T.rotation, d.body(name).xmat.reshape(3, 3), rtol=0, atol=1e-12)
        T = data.oMf[robot.frame_id("sa")]
        np.testing.assert_allclose(T.translation, d.site("sa").xpos, rtol=0, atol=1e-12)
        np.testing.assert_allclose(T.rotation, d.site("sa").xmat.reshape(3, 3), rtol=0, atol=1e-12)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        np.testing.assert_allclose(pin.crba(robot.model, data, q), M[np.ix_(dofs, dofs)], rtol=0, atol=1e-12)


def test_a_body_placed_elsewhere_than_mujoco_is_refused(tmp_path):
    """The loader's last guard (``_same_kinematics``): a robot whose body is not where MuJoCo's model of the file
    puts it is refused naming the file and the body (here MuJoCo's model of a five-bar with dist_r moved 1 cm)."""
    from cmstack.models.mjcf import _same_kinematics

    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    p = tmp_path / "moved.xml"
    p.write_text(
        FIVE_BAR.replace('<body name="dist_r" pos="0.1 0 -0.12">', '<body name="dist_r" pos="0.11 0 -0.12">')
    )
    _same_kinematics(robot, mujoco.MjModel.from_xml_path(str(PACKAGE_ROOT / "mjcf" / "five_bar.xml")), p)
    with pytest.raises(ModelFileError, match=r"moved\.xml: Pinocchio's model puts body 'dist_r' "):
        _same_kinematics(robot, mujoco.MjModel.from_xml_path(str(p)), p)
