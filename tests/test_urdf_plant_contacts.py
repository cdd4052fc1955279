"""A plant that starts sane (issue 21, item 3): the two arms of the Talos humanoid (example-robot-data) on a
MuJoCo plant built from the URDF, contacts on.

Talos' wrist links 5 and 7 turn about two hinges through one point (joints 6 and 7); their collision meshes
overlap by ~45 mm in every configuration.  Before the always-touching exclusion the first step of the plant
held at its posture by gravity compensation kicked the wrists at ~1500 rad/s²; now it does not move.  The
SRDF's <disable_collisions> pairs are excluded when given, and an initial state that penetrates warns with
the geom pairs and their depths."""

from __future__ import annotations

import json
import sys
import textwrap
import warnings
import xml.etree.ElementTree as ET

import _forkserver
import mujoco
import numpy as np
import pytest

from cmstack.models.errors import ConfigError, ModelFileError
from cmstack.models.robot import Robot, _load_urdf, example_robot_data_path
from cmstack.sim import urdf_plant
from cmstack.sim.urdf_plant import plant_from_urdf

try:
    TALOS = example_robot_data_path("talos_data/robots/talos_reduced.urdf")
    TALOS_SRDF = example_robot_data_path("talos_data/srdf/talos.srdf")
except ModelFileError:
    TALOS = TALOS_SRDF = None
pytestmark = pytest.mark.skipif(TALOS is None, reason="example-robot-data (dev extra) is not installed")


def _half_sitting() -> dict[str, float]:
    """The SRDF's 'half_sitting' posture, one value per 1-DoF joint (rad)."""
    root = ET.parse(TALOS_SRDF).getroot()
    state = next(s for s in root.iter("group_state") if s.get("name") == "half_sitting")
    return {j.get("name"): float(j.get("value")) for j in state.iter("joint") if " " not in j.get("value")}


def talos_arms() -> tuple[Robot, np.ndarray]:
    """Talos with every joint but the two 7-DoF arms locked at half-sitting; q0 = the arms' half-sitting."""
    hs = _half_sitting()
    model = _load_urdf(TALOS)
    names = [model.names[i] for i in range(1, model.njoints)]
    robot = Robot.from_urdf(
        TALOS, locked_joints={n: hs.get(n, 0.0) for n in names if not n.startswith("arm_")}
    )
    assert len(robot.joint_names) == 14
    return robot, np.array([hs[n] for n in robot.joint_names])


def first_step_acceleration(plant, robot, q0) -> np.ndarray:
    """Achieved joint accelerations (rad/s², model order) of one plant step from rest at q0 with the
    model's gravity compensation τ = g(q0): (v₁ − 0) / h."""
    plant.reset(q0)
    plant.set_torque(robot.update(q0, np.zeros(robot.nv)).h)
    plant.step(1)
    return plant.state(noisy=False)[1] / plant.model.opt.timestep


def _pairs(m: mujoco.MjModel) -> set[frozenset]:
    return {frozenset((m.body(s >> 16).name, m.body(s & 0xFFFF).name)) for s in m.exclude_signature}


def test_before_the_exclusion_the_wrist_kicks_and_warns(monkeypatch):
    """What the issue saw: without the always-touching exclusion the first step kicks the wrists, and the
    plant now says so at construction (names and depth)."""
    robot, q0 = talos_arms()
    monkeypatch.setattr(urdf_plant, "_exclude_always_touching", lambda spec, done: set())
    with pytest.warns(
        UserWarning,
        match=r"talos_reduced\.urdf\): the initial state penetrates: "
        r"'arm_(left|right)_5_link\[0\]' and 'arm_(left|right)_7_link\[0\]' by 4\d\.\d mm",
    ):
        plant = plant_from_urdf(robot, q0=q0, sim_dt=1e-3, friction=False)
    a = first_step_acceleration(plant, robot, q0)
    assert np.abs(a).max() > 500.0  # measured: ~1500 rad/s² on arm_*_6/7


def test_held_at_its_posture_the_plant_does_not_accelerate():
    robot, q0 = talos_arms()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no penetration warning at half-sitting
        plant = plant_from_urdf(robot, q0=q0, sim_dt=1e-3, friction=False)
    pairs = _pairs(plant.model)
    for side in ("left", "right"):
        assert frozenset((f"arm_{side}_5_link", f"arm_{side}_7_link")) in pairs
    assert frozenset(("arm_left_7_link", "arm_right_7_link")) not in pairs  # the hands still meet
    assert plant.data.ncon == 0
    a = first_step_acceleration(plant, robot, q0)
    # the plant and the model come from the same URDF: gravity compensation holds it (round-off only)
    assert np.abs(a).max() < 1e-3, dict(zip(robot.joint_names, a.round(3)))
    plant.reset(q0)  # and zero torque: it falls under gravity only
    plant.set_torque(np.zeros(robot.nv))
    plant.step(1)
    M = robot.update(q0, np.zeros(robot.nv)).M
    g_acc = np.linalg.solve(M + 1e-3 * np.diag(robot.damping), -robot.update(q0, np.zeros(robot.nv)).h)
    np.testing.assert_allclose(plant.state(noisy=False)[1] / 1e-3, g_acc, rtol=1e-3, atol=1e-3)


def test_srdf_disable_collisions_are_excluded():
    robot, q0 = talos_arms()
    plain = plant_from_urdf(robot, q0=q0)
    with_srdf = plant_from_urdf(robot, q0=q0, srdf=TALOS_SRDF)
    root = ET.parse(TALOS_SRDF).getroot()
    srdf = {frozenset((e.get("link1"), e.get("link2"))) for e in root.iter("disable_collisions")}
    bodies = {with_srdf.model.body(b).name for b in range(with_srdf.model.nbody)}
    present = {p for p in srdf if p <= bodies and len(p) == 2}
    assert len(present) > 300  # talos.srdf: 459 pairs, most on these links
    got = _pairs(with_srdf.model)
    assert present <= got and not present <= _pairs(plain.model)
    # e.g. a pair no rule of ours excludes: the left forearm and the head ("Never" in the SRDF)
    never = frozenset(("arm_left_4_link", "head_1_link"))
    assert never in srdf and never in got and never not in _pairs(plain.model)
    # the XML the plant saves keeps them (a replay has the same contacts)
    assert with_srdf.spec.to_xml().count("<exclude") == with_srdf.model.nexclude


def test_srdf_per_part_with_prefixes_and_bad_srdfs(tmp_path):
    """A composed robot: one SRDF for every part gets each part's prefix; a wrong SRDF is refused."""
    arm = example_robot_data_path("talos_data/robots/talos_left_arm.urdf")
    srdf = tmp_path / "arm.srdf"
    srdf.write_text(
        '<robot name="a"><disable_collisions link1="arm_left_1_link" link2="arm_left_4_link" '
        'reason="Never"/><disable_collisions link1="no_such" link2="arm_left_4_link"/></robot>'
    )
    two = Robot.compose([(arm, "l_", [0, 0.5, 0]), (arm, "r_", [0, -0.5, 0])])
    pairs = _pairs(plant_from_urdf(two, srdf=srdf, meshes=False).model)
    assert {
        frozenset(("l_arm_left_1_link", "l_arm_left_4_link")),
        frozenset(("r_arm_left_1_link", "r_arm_left_4_link")),
    } <= pairs
    pairs = _pairs(plant_from_urdf(two, srdf=[srdf, None], meshes=False).model)
    assert frozenset(("r_arm_left_1_link", "r_arm_left_4_link")) not in pairs
    with pytest.raises(ConfigError, match="one per URDF part"):
        plant_from_urdf(two, srdf=[srdf])
    other = tmp_path / "other.srdf"
    other.write_text('<robot name="b"><disable_collisions link1="x" link2="y" reason="Never"/></robot>')
    with pytest.raises(
        ModelFileError,
        match=r"other\.srdf: none of its 1 <disable_collisions> pairs names two "
        r"links of URDF talos_left_arm\.urdf",
    ):
        plant_from_urdf(two, srdf=other, meshes=False)
    with pytest.raises(ModelFileError, match=r"SRDF file not found: .*missing\.srdf"):
        plant_from_urdf(two, srdf=tmp_path / "missing.srdf", meshes=False)


def test_a_penetrating_initial_state_warns_with_names_and_depth():
    """Arms hanging straight (q = 0 for the arms): the grippers are inside the thighs."""
    robot, q0 = talos_arms()
    with pytest.warns(UserWarning) as rec:
        plant = plant_from_urdf(robot, q0=np.zeros_like(q0), friction=False)
    msg = str(rec[0].message)
    deep = urdf_plant.penetrations(plant)
    a, b, depth = deep[0]
    assert {a.split("[")[0], b.split("[")[0]} in (
        {"gripper_right_motor_single_link", "leg_right_3_link"},
        {"gripper_left_motor_single_link", "leg_left_3_link"},
    )
    assert 0.05 < depth < 0.1  # metres: the gripper's motor is 70 mm inside the thigh
    assert f"'{a}' and '{b}' by {depth * 1e3:.3g} mm" in msg and "initial state penetrates" in msg
    assert "\n" not in msg and "q0" in msg and "srdf=" in msg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plant_from_urdf(robot, q0=np.zeros_like(q0), contacts=False)  # no contacts: nothing to warn about


def test_the_humanoid_arms_hold_their_posture_in_a_child_process(tmp_path):
    """The issue's 'done when': the humanoid's arms, contacts on, under the UK law holding the posture, in
    a child process with a wall-clock limit: the run ends, and the arms stay at their posture."""
    script = tmp_path / "hold.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, sys, warnings
        import numpy as np
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        warnings.simplefilter("error")
        from test_urdf_plant_contacts import talos_arms
        from cmstack import PostureTask, UdwadiaKalabaController, plant_from_urdf, simulate
        robot, q0 = talos_arms()
        plant = plant_from_urdf(robot, q0=q0, sim_dt=1e-3)
        ctrl = UdwadiaKalabaController(robot, levels=[[PostureTask(robot, q0, kp=100, kd=20)]])
        run = simulate(plant, ctrl, duration=1.0, control_dt=1e-3, progress=False)
        q, v = plant.state(noisy=False)
        print(json.dumps(dict(steps=run.steps, dq=float(np.abs(q - q0).max()), v=float(np.abs(v).max()))))
    """)
    )
    r = _forkserver.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["steps"] == 1000
    assert out["dq"] < 1e-3 and out["v"] < 1e-2, out


def test_euler_damping_is_implicit_as_documented():
    """The module docstring of sim/urdf_plant.py: with MuJoCo's Euler integrator a commanded acceleration a*
    (τ = M a* + h + D v) is achieved as (M + Δt D)⁻¹ M a*, short of a* on the light wrist joints."""
    robot, q0 = talos_arms()
    dt = 5e-3
    plant = plant_from_urdf(robot, q0=q0, sim_dt=dt, friction=False, contacts=False)
    v0 = np.linspace(-0.5, 0.5, robot.nv)
    a_star = np.full(robot.nv, 2.0)
    plant.reset(q0, v0)
    kin = robot.update(q0, v0)
    D = np.diag(robot.damping)
    plant.set_torque(kin.M @ a_star + kin.h + D @ v0)
    plant.step(1)
    achieved = (plant.state(noisy=False)[1] - v0) / dt
    np.testing.assert_allclose(
        achieved, np.linalg.solve(kin.M + dt * D, kin.M @ a_star), rtol=1e-6, atol=1e-6
    )
    assert np.all(robot.damping > 0) and achieved.min() < 0.9 * a_star.min()  # the wrists lag by > 10 %
