"""A control step works on a snapshot (issue 22, item 3): a Kinematics whose robot's Pinocchio data has since
been moved to another state by robot.update or add_frame refuses to read a frame from it, instead of
silently returning the other state's frame."""

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import StateError
from cmstack.models.robot import Robot


def test_stale_snapshot_refuses_instead_of_reading_another_state():
    robot = Robot("urdf/yumi.urdf")
    rng = np.random.default_rng(0)
    q1, q2 = rng.normal(size=14), rng.normal(size=14)
    k1 = robot.update(q1, np.zeros(14))
    p_read = k1.frame("yumi_link_7_l").p.copy()  # read while current: fine, and kept
    robot.update(q2, np.zeros(14))  # another consumer moves the shared data
    np.testing.assert_allclose(k1.frame("yumi_link_7_l").p, p_read)  # what was read stays right
    with pytest.raises(StateError, match="stale"):
        k1.frame("yumi_link_7_r")  # reading a new frame would give q2's pose
    with pytest.raises(StateError, match="stale"):
        _ = k1.frame("yumi_link_7_l").dJ
    k3 = robot.update(q1, np.zeros(14))
    robot.add_frame("tool", "yumi_link_7_l", pin.SE3.Identity())
    with pytest.raises(StateError, match="stale"):
        k3.frame("tool")


def test_current_snapshot_reads_its_own_state():
    robot = Robot("urdf/yumi.urdf")
    q = np.random.default_rng(1).normal(size=14)
    kin = robot.update(q, np.zeros(14))
    d = robot.model.createData()
    pin.framesForwardKinematics(robot.model, d, q)
    fid = robot.frame_id("yumi_link_7_r")
    np.testing.assert_allclose(kin.frame("yumi_link_7_r").p, d.oMf[fid].translation, atol=1e-12)


def test_in_place_pass_equals_update_and_stales_older_snapshots():
    """``Robot.update_in_place`` (the pass a compiled step reads in place, e.g. PIDC's one-row step) gives
    ``update``'s M and h, and, as any pass, makes an earlier snapshot refuse new frames."""
    robot = Robot("urdf/yumi.urdf")
    rng = np.random.default_rng(2)
    q1, q2, v2 = rng.normal(size=14), rng.normal(size=14), rng.normal(size=14)
    k1 = robot.update(q1, np.zeros(14))
    M, h = robot.update_in_place(q2, v2)
    ref = Robot("urdf/yumi.urdf").update(q2, v2)
    np.testing.assert_array_equal(M, ref.M)
    np.testing.assert_array_equal(h, ref.h)
    with pytest.raises(StateError, match="stale"):
        k1.frame("yumi_link_7_r")
