"""A 1-DoF robot (a pendulum): frame Jacobians keep their (6, nv) shape (Pinocchio returns (6,) when
nv = 1), and the frame twist and Jacobian time variation match finite differences."""

import numpy as np

from cmstack.models.robot import Robot

URDF = """<robot name="pendulum">
  <link name="base"/>
  <link name="arm"><inertial><origin xyz="0 0 -0.25"/><mass value="1"/>
    <inertia ixx="0.01" iyy="0.01" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="hinge" type="revolute"><parent link="base"/><child link="arm"/>
    <axis xyz="0 1 0"/><limit effort="10" velocity="5" lower="-3" upper="3"/></joint>
</robot>"""


def test_one_dof_frame_kinematics(tmp_path):
    path = tmp_path / "pendulum.urdf"
    path.write_text(URDF)
    robot = Robot(path)
    q, v = np.array([0.3]), np.array([0.7])
    fs = robot.update(q, v).frame("arm")
    assert fs.J.shape == (6, 1) and fs.dJ.shape == (6, 1)
    assert np.allclose(fs.twist, fs.J @ v)
    h = 1e-6
    Jp = robot.update(q + h * v, v).frame("arm").J
    Jm = robot.update(q - h * v, v).frame("arm").J
    assert np.allclose(fs.dJ, (Jp - Jm) / (2 * h), atol=1e-6)
    assert np.allclose(fs.T.translation, 0.0)  # the joint frame stays at the pivot
