"""mjcf/biped_parallel_ankles.xml (issue 31 item 5): a biped lower body whose ankles are parallel mechanisms (two
cranks on the shank, two rods with a universal joint at the crank and a ball at the foot).  The model loads (a free
joint: nq != nv; the ankle's and rods' universal joints written as two hinges in one body), its loops assemble, its
rigid dynamics with the loops and its stances held match ``pin.constraintDynamics`` on random assembled states, the
passive joints get exactly zero torque, and the MuJoCo plant agrees with the rigid model (in the air: the loops'
softness only).  The scenario's short runs and bad input: tests/test_legged_biped.py."""

from __future__ import annotations

import warnings

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.contact_uk import ContactUKController
from cmstack.models.contact import PointContact
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.loops import ClosureSet
from cmstack.models.robot import Robot
from cmstack.scenarios import legged
from cmstack.sim.mjcf_plant import plant_from_mjcf

PATH = "mjcf/biped_parallel_ankles.xml"
CORNERS = ("toe_out", "toe_in", "heel_out", "heel_in")
FEET = [f"{s}_{c}" for s in "lr" for c in CORNERS]


@pytest.fixture(scope="module")
def robot():
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error"
        )  # the keyframe is assembled: no warning that closing the loops moved it
        return Robot.from_mjcf(PATH)


def test_loads_with_a_free_joint_universal_ankles_and_four_loops(robot):
    assert (robot.nq, robot.nv) == (31, 30)
    assert robot.floating_base is not None
    assert [lp.name for lp in robot.loops] == ["l_ankle_o", "l_ankle_i", "r_ankle_o", "r_ankle_i"]
    motors = ["hip_yaw", "hip_roll", "hip_pitch", "knee", "crank_o", "crank_i"]
    assert robot.actuated_joints == [f"{s}_{j}" for s in "lr" for j in motors]
    passive = ["rod_o_x", "rod_o_y", "rod_i_x", "rod_i_y", "ankle_pitch", "ankle_roll"]
    assert robot.passive_joints == ["base"] + [f"{s}_{j}" for s in "lr" for j in passive]
    assert robot.v_indices(robot.passive_joints).size == 18
    assert pin.computeTotalMass(robot.model) == pytest.approx(29.2)
    # the standing keyframe: loops closed, feet level with their corner spheres' centres 2 mm above the floor
    assert np.abs(ClosureSet(robot.loops).phi(robot.q_initial)).max() < 1e-12
    kin = robot.update(robot.q_initial, np.zeros(robot.nv))
    z = np.array([kin.frame(f).p[2] for f in FEET])
    assert np.allclose(z, 0.002, atol=1e-9), z
    for s in "lr":
        R = kin.frame(f"{s}_toe_out").R
        assert np.allclose(R, np.eye(3), atol=1e-9)


def test_loops_assemble_from_random_poses(robot):
    rng = np.random.default_rng(2)
    cs = ClosureSet(robot.loops)
    for _ in range(5):
        q0 = pin.integrate(robot.model, robot.q_initial, 0.3 * rng.normal(size=robot.nv))
        assert np.abs(cs.phi(q0)).max() > 1e-3  # the perturbed pose is open
        q = robot.assemble(q0)
        assert np.abs(cs.phi(q)).max() < 1e-12


def test_dynamics_with_loops_and_stances_match_pinocchio(robot):
    """Both feet (8 corners) and one foot (4 corners) held rigid with the 4 loops, on random assembled states:
    ``contact_dynamics`` against ``pin.constraintDynamics`` (the scenario's targeted check)."""
    stances = [FEET, FEET[:4]]
    r = legged.dynamics_random_check(robot, stances, 4, seed=3)
    assert r["dynamics_vs_pinocchio_rel"] <= 1e-9, r  # measured 8e-13 on the scenario's 10
    assert r["dynamics_vs_kkt_rel"] <= 1e-9, r
    assert r["dynamics_residual_rel"] <= 1e-11, r


def test_passive_joints_get_zero_torque(robot):
    """The contact law on both flat feet: the free joint's 6, the ankles' and the rods' coordinates get exactly 0,
    and the torque they would need (the law's residual) is round-off; the commanded forces are in the pyramids."""
    feet = [PointContact(robot, f, mu=0.8) for f in FEET]
    for c in feet:
        c.set_active(True)
    kin = robot.update(robot.q_initial, np.zeros(robot.nv))
    T = kin.frame("base_site").T.copy()
    base = FrameTask(robot, "base_site", lambda t: (pin.SE3(T), np.zeros(6), np.zeros(6)), 400.0, 40.0)
    post = PostureTask(robot, robot.q_initial, joints=robot.actuated_joints, kp=25.0, kd=10.0)
    ctl = ContactUKController(robot, feet, [[base], [post]])
    rng = np.random.default_rng(4)
    P = robot.v_indices(robot.passive_joints)
    _, N = legged._anchored_stance(robot, robot.q_initial, FEET, 0.8)
    for _ in range(3):
        v = N @ (0.05 * rng.normal(size=N.shape[1]))  # a motion the stance and the loops allow
        tau = ctl(0.0, robot.q_initial, v)
        assert np.all(tau[P] == 0.0)
        assert ctl.info.passive_residual <= 1e-9, ctl.info.passive_residual
        assert ctl.info.status == "solved" and ctl.info.cone_margin_min >= 0.0
    # the stance carries the robot's weight
    fz = sum(f[2] for f in ctl.info.forces.values())
    assert fz == pytest.approx(29.2 * 9.81, rel=0.05)


def test_mujoco_plant_matches_the_rigid_model_in_the_air(robot):
    """The plant's q̈ (MuJoCo, the loops as stiff equalities, the free joint's velocity in world axes) against
    ``contact_dynamics`` with the loops rigid, the robot 0.5 m up (no contact), random velocities in the loops' null
    space and random motor torques: they differ by the equalities' softness only (measured 1.3e-3)."""
    plant = plant_from_mjcf(robot, sim_dt=0.00025)
    rng = np.random.default_rng(0)
    q = robot.assemble(pin.integrate(robot.model, robot.q_initial, 0.2 * rng.normal(size=robot.nv)))
    q[2] += 0.5
    _, N = legged._anchored_stance(robot, q, [], 1.0)
    v = N @ rng.normal(size=N.shape[1])
    tau = np.zeros(robot.nv)
    tau[robot.v_indices(robot.actuated_joints)] = rng.normal(size=12)
    plant.reset(q, v)
    L = dict(
        t=np.zeros(1),
        q=q[None],
        v=v[None],
        tau=tau[None],
        plant_qpos=plant.data.qpos.copy()[None],
        plant_qvel=plant.data.qvel.copy()[None],
        active=np.zeros((1, 0)),
    )
    assert np.abs(v[:6]).max() > 0.1  # the base moves: the free joint's velocity conversion is exercised
    rel = legged.plant_vs_rigid(robot, plant, L, [], 1)
    assert rel <= 5e-3, rel


def test_the_shipped_file_is_what_its_generator_writes():
    """mjcf/make_biped_parallel_ankles.py writes the shipped file byte for byte (its keyframe closed by the
    generator's Newton solve on MuJoCo's equality residual)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "make_biped", root / "mjcf" / "make_biped_parallel_ankles.py"
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.xml(gen.stand_qpos()) == (root / PATH).read_text()
