"""The YuMi URDF (Pinocchio) against the MuJoCo plants, the name-based joint map, bad files."""

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import FrameNotFoundError, JointMapError, ModelFileError
from cmstack.models.robot import Robot
from cmstack.sim.plant import MujocoPlant

MJCF = open("mjcf/yumi.xml").read()


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


def test_structure(robot):
    assert robot.nv == 14 and len(robot.joint_names) == 14
    np.testing.assert_allclose(robot.damping, 0.5)
    np.testing.assert_allclose(robot.effort_limit, 300.0)


@pytest.mark.parametrize("path", ["mjcf/yumi.xml", "mjcf/yumi_bar.xml"])
def test_plant_matches_model(robot, path):
    """Same frame poses and the same mass matrix (model order, mapped by name) at random q.
    The bar plant carries the bar's extra mass, so M is compared only on the arms-alone plant."""
    plant = MujocoPlant(path, robot.joint_names)
    m, d = plant.model, plant.data
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(-2, 2, 14)
        plant.reset(q)
        pin.framesForwardKinematics(robot.model, robot.data, q)
        for side in "lr":
            name = f"yumi_link_7_{side}"
            b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
            T = robot.data.oMf[robot.frame_id(name)]
            np.testing.assert_allclose(d.xpos[b], T.translation, atol=1e-9)
            np.testing.assert_allclose(d.xmat[b].reshape(3, 3), T.rotation, atol=1e-9)
        if path.endswith("yumi.xml"):
            Mfull = np.zeros((m.nv, m.nv))
            mujoco.mj_fullM(m, d, Mfull)
            Mmj = Mfull[np.ix_(plant.map.dadr, plant.map.dadr)]
            np.testing.assert_allclose(Mmj, pin.crba(robot.model, robot.data, q), atol=1e-9)


def test_free_motion_agrees(robot):
    """Zero torque, 0.2 s: MuJoCo (RK4, damping explicit) vs Pinocchio ABA with the same damping."""
    plant = MujocoPlant("mjcf/yumi.xml", robot.joint_names, sim_dt=1e-3, integrator="rk4")
    q = np.random.default_rng(1).uniform(-1, 1, 14)
    v = np.zeros(14)
    plant.reset(q, v)
    data = robot.model.createData()

    def f(x):
        qq, vv = x[:14], x[14:]
        return np.r_[vv, pin.aba(robot.model, data, qq, vv, -robot.damping * vv)]

    x = np.r_[q, v]
    for _ in range(200):
        plant.set_torque(np.zeros(14))
        plant.step()
        k1 = f(x)
        k2 = f(x + 5e-4 * k1)
        k3 = f(x + 5e-4 * k2)
        k4 = f(x + 1e-3 * k3)
        x = x + 1e-3 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    qm, vm = plant.state()
    np.testing.assert_allclose(qm, x[:14], atol=1e-6)


def _write(tmp_path, text, name="plant.xml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_joint_map_missing_joint(robot, tmp_path):
    bad = MJCF.replace('<joint name="yumi_joint_4_l"/>', "").replace(
        '<motor name="yumi_joint_4_l" joint="yumi_joint_4_l"/>', ""
    )
    with pytest.raises(JointMapError, match=r"missing in the plant: \['yumi_joint_4_l'\]"):
        MujocoPlant(_write(tmp_path, bad), robot.joint_names)


def test_joint_map_extra_joint(robot, tmp_path):
    bad = MJCF.replace(
        '<joint name="yumi_joint_4_l"/>',
        '<joint name="yumi_joint_4_l"/><joint name="extra_hinge" axis="1 0 0"/>',
    )
    with pytest.raises(JointMapError, match=r"in the plant but not in the model: \['extra_hinge'\]"):
        MujocoPlant(_write(tmp_path, bad), robot.joint_names)
    MujocoPlant(_write(tmp_path, bad), robot.joint_names, plant_only=("extra_hinge",))  # declared: accepted


def test_joint_map_is_by_name_not_order(robot):
    """The URDF lists the right arm first, Pinocchio the left: the map must follow names."""
    plant = MujocoPlant("mjcf/yumi.xml", robot.joint_names)
    q = np.arange(14) * 0.1
    plant.reset(q)
    for i, n in enumerate(robot.joint_names):
        j = mujoco.mj_name2id(plant.model, mujoco.mjtObj.mjOBJ_JOINT, n)
        assert plant.data.qpos[plant.model.jnt_qposadr[j]] == pytest.approx(q[i])
    np.testing.assert_allclose(plant.state()[0], q)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ModelFileError, match="URDF file not found: .*nope.urdf"):
        Robot(tmp_path / "nope.urdf")
    with pytest.raises(ModelFileError, match="not well-formed XML"):
        Robot(_write(tmp_path, "<robot name='x'><link name='a'>", "bad.urdf"))
    with pytest.raises(ModelFileError, match="MJCF file not found"):
        MujocoPlant(tmp_path / "nope.xml", ["a"])
    with pytest.raises(ModelFileError, match="could not be compiled by MuJoCo"):
        MujocoPlant(
            _write(tmp_path, "<mujoco><worldbody><body><geom type='nosuch'/></body></worldbody></mujoco>"),
            ["a"],
        )


def test_unknown_frame(robot):
    with pytest.raises(FrameNotFoundError, match="frame 'yumi_link_7_x' .*did you mean"):
        robot.frame_id("yumi_link_7_x")


def test_bar_plant_file_loads_assembled_without_a_warning():
    """mjcf/yumi_bar.xml's keyframe (urdf/make_yumi.py: the thesis' q0 with the bar's weld closed) is its initial
    pose: ``Robot.from_mjcf`` loads it with no ModelFileWarning (its qpos0 was 2.3 rad from closing) and the weld
    closed there; the key is the thesis' pose moved only as far as closing needs (< 0.3 rad per joint)."""
    import warnings

    import tomllib

    from cmstack.models.errors import ModelFileWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFileWarning)
        bar = Robot.from_mjcf("mjcf/yumi_bar.xml")
    assert [c.name for c in bar.loops] == ["bar_weld"]
    assert bar.loops[0].residual(bar.q_initial) < 1e-9
    key = mujoco.MjModel.from_xml_path("mjcf/yumi_bar.xml").key_qpos[0]
    np.testing.assert_allclose(bar.q_initial, key, atol=1e-9)  # (model order = the file's joint order)
    with open("scenarios/configs/yumi_dual_arm.toml", "rb") as fh:
        cfg = tomllib.load(fh)
    thesis = dict(zip(cfg["q0_joints"], cfg["q0"]))
    assert np.max(np.abs(bar.q_initial - bar.q_from_names(thesis))) < 0.3
