"""Free, ball and universal (two hinges in one body) joints: the MJCF loader and the Pinocchio ↔ MuJoCo
coordinate map (models/mj_coords.py), checked both ways on random states.

* q: qpos → q → qpos is the identity, and every body's pose from Pinocchio at q equals MuJoCo's at qpos;
* v: every body's spatial velocity (LOCAL) from Pinocchio at (q, v) equals MuJoCo's ``mj_objectVelocity`` at
  (qpos, qvel), v → qvel → v is the identity, and v equals the finite difference of positions integrated by
  MuJoCo (``mj_integratePos``) taken with Pinocchio's ``pin.difference``."""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ModelFileError
from cmstack.models.robot import Robot
from cmstack.sim.mjcf_plant import plant_from_mjcf

XML = """<mujoco>
<option gravity="0 0 -9.81"/>
<worldbody>
 <body name="base" pos="0.1 0.2 1" quat="0.9 0.1 0.2 0.3">
  <freejoint name="root"/>
  <geom type="box" size=".1 .1 .1" mass="2"/>
  <body name="l1" pos="0.2 0 0" euler="10 20 30">
    <joint name="ua" type="hinge" axis="1 0 0" pos="0.01 0.02 0.03"/>
    <joint name="ub" type="hinge" axis="0 1 0.3" pos="0 0 0.05"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
    <body name="l2" pos="0.3 0 0">
      <joint name="sph" type="ball" pos="0.01 -0.02 0.03"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
      <body name="l3" pos="0.3 0 0">
        <joint name="sl" type="slide" axis="1 0 0"/>
        <geom type="box" size=".03 .03 .03" mass="0.3"/>
      </body>
    </body>
  </body>
 </body>
</worldbody>
<actuator><motor joint="ua"/><motor joint="ub"/><motor joint="sl"/></actuator>
</mujoco>"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    p = tmp_path_factory.mktemp("jc") / "joints.xml"
    p.write_text(XML)
    robot = Robot.from_mjcf(p)
    plant = plant_from_mjcf(robot)
    return robot, plant


def _random_qpos(m: mujoco.MjModel, rng) -> np.ndarray:
    qpos = m.qpos0.copy()
    for j in range(m.njnt):
        a = m.jnt_qposadr[j]
        t = m.jnt_type[j]
        if t == mujoco.mjtJoint.mjJNT_FREE:
            qpos[a : a + 3] = rng.normal(size=3)
            x = rng.normal(size=4)
            qpos[a + 3 : a + 7] = x / np.linalg.norm(x)
        elif t == mujoco.mjtJoint.mjJNT_BALL:
            x = rng.normal(size=4)
            qpos[a : a + 4] = x / np.linalg.norm(x)
        else:
            qpos[a] = rng.uniform(-1.5, 1.5)
    return qpos


def _assert_bodies_where_mujoco_puts_them(robot, data, q, m, d):
    """Every body's pose by Pinocchio at q (its frame of the body's name) is MuJoCo's (xpos, xmat in d) to 1e-12."""
    pin.framesForwardKinematics(robot.model, data, q)
    for b in range(1, m.nbody):
        T = data.oMf[robot.frame_id(m.body(b).name)]
        np.testing.assert_allclose(T.translation, d.xpos[b], atol=1e-12)
        np.testing.assert_allclose(T.rotation, d.xmat[b].reshape(3, 3), atol=1e-12)


def test_loads_free_ball_universal(setup):
    robot, _ = setup
    assert robot.joint_names == ["root", "ua", "ub", "sph", "sl"]
    assert (robot.nq, robot.nv) == (7 + 2 + 4 + 1, 6 + 2 + 3 + 1)
    assert robot.floating_base == "root"
    assert sorted(robot.passive_joints) == ["root", "sph"]
    assert robot.joint_index("sl") == 11 and robot.joint_q_index("sl") == 13
    assert robot.v_indices(["sph"]).tolist() == [8, 9, 10]
    # qpos0: the free joint holds the body's pose in the file, Pinocchio's quaternion order (x, y, z, w)
    quat = np.array([0.9, 0.1, 0.2, 0.3]) / np.linalg.norm([0.9, 0.1, 0.2, 0.3])
    np.testing.assert_allclose(robot.q_initial[:3], [0.1, 0.2, 1.0], atol=1e-15)
    np.testing.assert_allclose(robot.q_initial[3:7], [*quat[1:], quat[0]], atol=1e-12)


def test_positions_both_ways(setup):
    robot, plant = setup
    m, d, cm = plant.model, mujoco.MjData(plant.model), plant.map.coords
    data = robot.model.createData()
    rng = np.random.default_rng(3)
    for _ in range(20):
        qpos = _random_qpos(m, rng)
        q = cm.q_from_qpos(qpos)
        back = np.full(m.nq, np.nan)
        cm.qpos_into(q, back)
        np.testing.assert_array_equal(back, qpos)  # qpos -> q -> qpos: the identity
        d.qpos[:] = qpos
        mujoco.mj_kinematics(m, d)
        _assert_bodies_where_mujoco_puts_them(robot, data, q, m, d)


def test_velocities_both_ways(setup):
    robot, plant = setup
    m, d, cm = plant.model, mujoco.MjData(plant.model), plant.map.coords
    model, data = robot.model, robot.model.createData()
    rng = np.random.default_rng(4)
    h = 1e-6
    for _ in range(20):
        qpos, qvel = _random_qpos(m, rng), rng.normal(size=m.nv)
        q = cm.q_from_qpos(qpos)
        v = cm.v_from_qvel(q, qvel)
        back = np.full(m.nv, np.nan)
        cm.qvel_into(q, v, back)
        np.testing.assert_allclose(back, qvel, atol=1e-14)  # qvel -> v -> qvel
        # every body's twist, LOCAL: Pinocchio's frame velocity = MuJoCo's object velocity (flg_local=1)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
        pin.forwardKinematics(model, data, q, v)
        pin.updateFramePlacements(model, data)
        for b in range(1, m.nbody):
            mv = np.zeros(6)
            mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, b, mv, 1)  # [ω; v], body frame
            tw = pin.getFrameVelocity(model, data, robot.frame_id(m.body(b).name), pin.LOCAL)
            np.testing.assert_allclose(tw.angular, mv[:3], atol=1e-12)
            np.testing.assert_allclose(tw.linear, mv[3:], atol=1e-12)
        # v against positions integrated by MuJoCo, differenced by Pinocchio (central, O(h²))
        qp, qm = qpos.copy(), qpos.copy()
        mujoco.mj_integratePos(m, qp, qvel, h)
        mujoco.mj_integratePos(m, qm, qvel, -h)
        fd = pin.difference(model, cm.q_from_qpos(qm), cm.q_from_qpos(qp)) / (2 * h)
        np.testing.assert_allclose(fd, v, atol=1e-7 * (1 + np.abs(v).max()))


def test_plant_reset_and_state(setup):
    robot, plant = setup
    rng = np.random.default_rng(5)
    q = pin.randomConfiguration(robot.model, -np.ones(robot.nq), np.ones(robot.nq))
    v = rng.normal(size=robot.nv)
    plant.reset(q, v)
    q2, v2 = plant.state(noisy=False)
    np.testing.assert_allclose(q2, q, atol=1e-15)
    np.testing.assert_allclose(v2, v, atol=1e-14)
    # torques: a (nv,) vector; the unactuated free and ball coordinates refuse a torque
    tau = np.zeros(robot.nv)
    tau[robot.joint_index("ua")] = 0.3
    plant.set_torque(tau)
    tau[robot.v_indices(["sph"])[1]] = 1.0
    with pytest.raises(Exception, match=r"sph\[1\]"):
        plant.set_torque(tau)


def test_free_joint_not_at_root(tmp_path):
    p = tmp_path / "bad.xml"
    p.write_text(
        '<mujoco><worldbody><body name="a"><joint name="h" axis="0 0 1"/><geom size=".1" mass="1"/>'
        '<body name="b" pos="0 0 1"><freejoint name="fj"/><geom size=".1" mass="1"/></body></body>'
        "</worldbody></mujoco>"
    )
    with pytest.raises(ModelFileError, match="free joint 'fj' is in body 'b'.*must be at the root") as e:
        Robot.from_mjcf(p)
    assert "\n" not in str(e.value) and "bad.xml" in str(e.value)


def test_actuated_ball_refused(tmp_path):
    p = tmp_path / "ballmotor.xml"
    p.write_text(
        '<mujoco><worldbody><body name="a"><joint name="s" type="ball"/><geom size=".1" mass="1"/></body>'
        '</worldbody><actuator><motor joint="s" gear="1 0 0"/></actuator></mujoco>'
    )
    with pytest.raises(ModelFileError, match="joint 's', a ball joint") as e:
        Robot.from_mjcf(p)
    assert "\n" not in str(e.value)


COUPLED = """<mujoco>
<worldbody>
 <body name="a" pos="0 0 0.5">
  <joint name="ha" axis="0 0 1"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
  <body name="u" pos="0.3 0 0">
   <joint name="u1" axis="1 0 0"/>
   <joint name="u2" axis="0 1 0" pos="0 0 0.01"/>
   <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.3"/>
  </body>
 </body>
 <body name="b" pos="0 0.2 0.5">
  <joint name="hb" axis="0 0 1"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
 </body>
</worldbody>
<equality>
 <joint name="gear" joint1="hb" joint2="ha" polycoef="0.1 -0.7 0.3 0.2 -0.05"/>
 <joint name="pin" joint1="u2" polycoef="0.05 3 3 3 3"/>
</equality>
<actuator><motor joint="ha"/><motor joint="u1"/></actuator>
</mujoco>"""


def test_joint_equality_matches_mujoco(tmp_path):
    """``<equality joint>``: φ equals MuJoCo's equality residual (efc_pos) at random states (MuJoCo's polycoef
    semantics, joint1 − joint1₀ = P(joint2 − joint2₀); without joint2 only c0 counts), J = ∂φ/∂q and
    J̇v = d(J v)/dt by finite differences, and the loaded robot assembles and closes both couplings."""
    from cmstack.models.loops import ClosureSet, JointCoupling

    p = tmp_path / "coupled.xml"
    p.write_text(COUPLED)
    robot = Robot.from_mjcf(p)
    assert [type(c).__name__ for c in robot.loops] == ["JointCoupling", "JointCoupling"]
    assert robot.joint_names == ["ha", "u1", "u2", "hb"]
    cs = ClosureSet(robot.loops)
    np.testing.assert_allclose(cs.phi(robot.q_initial), 0.0, atol=1e-12)  # assembled from qpos0
    m = mujoco.MjModel.from_xml_path(str(p))
    d = mujoco.MjData(m)
    rng = np.random.default_rng(6)
    eq = int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)
    for _ in range(10):
        q, v = rng.uniform(-1, 1, robot.nq), rng.normal(size=robot.nv)
        d.qpos[:] = q  # (hinges only: the same coordinates)
        mujoco.mj_fwdPosition(m, d)
        np.testing.assert_allclose(cs.phi(q), d.efc_pos[d.efc_type == eq], atol=1e-14)
        J, jdv = cs.jacobian_and_jdot_v(q, v)
        h = 1e-6
        fdJ = np.column_stack([(cs.phi(q + h * e) - cs.phi(q - h * e)) / (2 * h) for e in np.eye(robot.nv)])
        np.testing.assert_allclose(J, fdJ, atol=1e-8)
        fd = (cs.jacobian(q + h * v) @ v - cs.jacobian(q - h * v) @ v) / (2 * h)
        np.testing.assert_allclose(jdv, fd, atol=1e-7)
    with pytest.raises(Exception, match="joint 'nope' is not in"):
        JointCoupling(robot, "nope", "ha")


@pytest.mark.parametrize("law", ["pidc", "uk"])
def test_universal_and_joint_equality_run_in_closed_chain(tmp_path, law):
    """mjcf/ujoint_coupled.xml (a yaw hinge, a universal joint as two hinges, its roll geared to its pitch by an
    ``<equality joint>``) in the closed_chain scenario, the actuated joints on sinusoids: every target met; the
    dynamics reference is a KKT solve on Pinocchio's M, h (a joint coupling has no Pinocchio constraint model).
    Measured at 3 s: ee error 1.8e-5 m, coupling residual 6.3e-9 rad, passive torque <= 3e-17 N·m, MuJoCo vs rigid
    q̈ 3.2e-6."""
    from cmstack.scenarios import closed_chain
    from cmstack.scenarios._common import run_scenario

    m, _ = run_scenario(
        closed_chain.NAME,
        closed_chain.run,
        sets=["model='mjcf/ujoint_coupled.xml'", "coords='joints'", f"law='{law}'", "track_after=0.5"],
        duration=1.2,
        out=tmp_path / "r",
        html=False,
        plots=False,
    )
    assert m["ok"] is True, m.get("reason")
    assert m["dof"] == 2 and m["loops"] == ["gear:joint"]
    for key, bound in closed_chain.TARGETS.items():
        assert m[key] <= bound, (key, m[key])
    assert m["plant_vs_rigid_qacc_rel"] <= 1e-4


def test_urdf_floating_base_matches_its_plant(tmp_path):
    """``Robot.from_urdf(..., floating_base=True)`` with the loops sidecar unchanged: a free joint first (q: the root
    link's pose in the world, the base pose its initial value), passive; ``plant_from_urdf`` gives MuJoCo the same
    free joint.  Random states: every link's pose equal, and the kinetic energy ½ vᵀ M v equal (Pinocchio's M and
    v against MuJoCo's at qvel from the map: inertias and velocity conventions at once)."""
    from cmstack.models.robot import PACKAGE_ROOT
    from cmstack.sim.urdf_plant import plant_from_urdf

    base = pin.SE3(pin.rpy.rpyToMatrix(0.1, -0.2, 0.3), np.array([0.2, -0.1, 0.8]))
    urdf = tmp_path / "five_bar_floating.urdf"  # the five-bar on a body of 2 kg (its base link is massless)
    urdf.write_text(
        (PACKAGE_ROOT / "urdf" / "five_bar.urdf")
        .read_text()
        .replace(
            '<link name="base"/>',
            '<link name="base"><inertial><origin xyz="0 0 0.05"/><mass value="2.0"/>'
            '<inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.02"/></inertial></link>',
        )
    )
    with pytest.raises(ModelFileError, match="link 'base', moved by joint 'root_joint', has mass 0 kg"):
        Robot.from_urdf("urdf/five_bar.urdf", floating_base=True)
    robot = Robot.from_urdf(urdf, loops="urdf/five_bar.loops.toml", floating_base=True, base=base.homogeneous)
    assert robot.joint_names[0] == "root_joint" and robot.floating_base == "root_joint"
    assert "root_joint" in robot.passive_joints and len(robot.loops) == 1
    assert (robot.nq, robot.nv) == (12, 11)
    np.testing.assert_allclose(robot.q_initial[:7], pin.SE3ToXYZQUAT(base), atol=1e-12)
    plant = plant_from_urdf(robot, contacts=False)
    m, d, cm = plant.model, mujoco.MjData(plant.model), plant.map.coords
    data = robot.model.createData()
    rng = np.random.default_rng(7)
    for _ in range(10):
        q = pin.randomConfiguration(robot.model, -np.ones(robot.nq), np.ones(robot.nq))
        v = rng.normal(size=robot.nv)
        cm.qpos_into(q, d.qpos)
        cm.qvel_into(q, v, d.qvel)
        mujoco.mj_forward(m, d)
        _assert_bodies_where_mujoco_puts_them(robot, data, q, m, d)
        M = pin.crba(robot.model, data, q)
        M = np.triu(M) + np.triu(M, 1).T
        Mm = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, Mm)
        assert 0.5 * v @ M @ v == pytest.approx(0.5 * d.qvel @ Mm @ d.qvel, rel=1e-12)
