"""mjcf/stewart_ball.xml, a 6-UPS Stewart platform written as a user would: each leg a universal joint (two hinges
in one body) at the base, an actuated slide, a ball joint at the platform (the platform rides on leg 0's ball
joint, legs 1-5 are welded to it after theirs).  Cross-validated on random assembled states:

* forward dynamics with the loops (the projection plant's (22), damping included) against Pinocchio's own
  ``constraintDynamics`` on the constraint models its MJCF parser reads from the same file: <= 1e-9 relative;
* the MuJoCo plant (``plant_from_mjcf``, the welds as stiff equalities) against the rigid model."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from test_mechanisms import constraint_data, mujoco_qacc_rel, pinocchio_reading

from cmstack.models.errors import ConfigError
from cmstack.models.loops import ClosureSet, pinocchio_constraint_models
from cmstack.models.projection import project
from cmstack.models.robot import Robot
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.projection_sim import ProjectionPlant

PATH = "mjcf/stewart_ball.xml"


@pytest.fixture(scope="module")
def robot():
    return Robot.from_mjcf(PATH)


def _states(robot, n, seed, spread=0.05):
    """Random assembled states: q_initial ⊕ a random step on the actuated slides and universals (pin.integrate),
    closed by ``assemble``; v random in the loops' null space."""
    cs = ClosureSet(robot.loops)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = robot.assemble(pin.integrate(robot.model, robot.q_initial, spread * rng.normal(size=robot.nv)))
        v = project(cs.jacobian(q)).P @ rng.normal(size=robot.nv)
        yield q, v, rng


def test_loads_universal_prismatic_ball_legs(robot):
    kinds = [robot.model.joints[i].shortname() for i in range(1, robot.model.njoints)]
    assert kinds.count("JointModelSpherical") == 6 and len(kinds) == 24
    assert (robot.nq, robot.nv) == (42, 36)
    assert robot.actuated_joints == [f"act_{i}" for i in range(6)]
    assert [c.kind for c in robot.loops] == ["weld"] * 5
    J = ClosureSet(robot.loops).jacobian(robot.q_initial)
    assert robot.nv - project(J, 1e-9).rank == 6  # the platform's six degrees of freedom


def test_forward_dynamics_match_pinocchio_constraint_dynamics(robot, tmp_path):
    pm, cms = pinocchio_reading(robot.mjcf_path, tmp_path)  # Pinocchio's own reading of the welds
    assert len(cms) == len(robot.loops)
    assert [pm.names[i] for i in range(1, pm.njoints)] == robot.joint_names
    pm.gravity = robot.model.gravity
    ours, _ = pinocchio_constraint_models(robot)
    prox = pin.ProximalSettings(1e-14, 1e-8, 200)
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    worst = {"pinocchio's models": 0.0, "ours": 0.0}
    for q, v, rng in _states(robot, 12, 1):
        tau = 20.0 * rng.normal(size=robot.nv) * plant.actuated
        a = plant.accel(q, v, tau)
        for key, models in (("pinocchio's models", cms), ("ours", ours)):
            pd, cds = constraint_data(pm, models)
            a_pin = pin.constraintDynamics(pm, pd, q, v, tau - robot.damping * v, models, cds, prox)
            worst[key] = max(worst[key], float(np.linalg.norm(a - a_pin) / np.linalg.norm(a_pin)))
    assert max(worst.values()) <= 1e-9, worst


def test_mujoco_plant_matches_the_rigid_model(robot):
    mj = plant_from_mjcf(robot, sim_dt=1e-3)
    assert mj.model.neq == 5
    rigid = ProjectionPlant(robot, None, sim_dt=1e-3)
    np.testing.assert_array_equal(mj.map.actuated, rigid.actuated)
    rel = []
    for q, v, rng in _states(robot, 10, 3):
        rel.append(mujoco_qacc_rel(mj, rigid, q, v, 20.0 * rng.normal(size=robot.nv) * rigid.actuated))
    # measured: median 2.4e-2, max 5.8e-2 (MuJoCo's soft welds: the regularizer (1 − d)/d of its impedance
    # d = 0.9999 on 30 weld rows; Delta's three welds: 2.3e-2, tests/test_mechanisms.py)
    assert np.median(rel) <= 5e-2, rel


@pytest.mark.parametrize("law", ["pidc", "uk"])
def test_closed_chain_scenario_tracks_a_pose(tmp_path, law):
    """The closed_chain scenario on the Stewart platform, its platform holding a pose on the circle (ee_rows = full):
    measured at 3 s, PIDC: ee error 4.8e-6 m, loop residual 2.3e-7 m, passive torque 3.8e-14 N·m, dynamics vs
    Pinocchio 1.0e-11."""
    from cmstack.scenarios import closed_chain
    from cmstack.scenarios._common import run_scenario

    m, _ = run_scenario(
        closed_chain.NAME,
        closed_chain.run,
        sets=[f"model='{PATH}'", "ee_rows='full'", f"law='{law}'", "track_after=0.5", "check_states=5"],
        duration=1.2,
        out=tmp_path / "r",
        html=False,
        plots=False,
    )
    assert m["ok"] is True, m.get("reason")
    assert m["coords"] == "ee" and m["dof"] == 6
    for key, bound in closed_chain.TARGETS.items():
        assert m[key] <= bound, (key, m[key])


@pytest.mark.parametrize(("law", "coords"), [("pidc", "ee"), ("uk", "ee"), ("uk", "joints")])
def test_compiled_step_equals_the_numpy_step(robot, law, coords):
    """Ball joints (nq = 42, nv = 36) take the compiled step (``pidc_plan``/``uk_plan``: q copied as a point of the
    manifold, h by Newton–Euler over the ball joints' three columns, every other table by nv): the closed_chain
    scenario's law (the platform's pose; for UK also sinusoids on the six slides, five of them after a ball joint, so
    their q and v indices differ), its torque against the NumPy step's (PIDC's ``_numpy_step``, UK's
    ``fused=False``) on random assembled states; measured 5.5e-15 (PIDC) and 1.1e-14 (UK) of max |tau|.  The
    slides' error written by the kernel (q_d − q at their q indices) against the sinusoid sampled here."""
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.closed_chain import build_law, build_reference

    cfg = dict(default_config("closed_chain"), model=PATH, law=law, ee_rows="full", coords=coords)
    fast, slow = (build_law(cfg, robot, build_reference(cfg, robot)[1]) for _ in range(2))
    if law == "uk":
        assert fast._plan is not None and fast._plan.closed and fast.python_tasks == ()  # every row compiled
        slow._plan = None  # UK's generic path (what fused=False builds)
    else:
        assert fast._plan is not None  # pidc_plan.ClosedChainPlan
        slow._plan, slow._rows_compiled = None, False  # PIDC's NumPy step
    qi = robot.q_indices(robot.actuated_joints)
    assert np.any(
        np.asarray(qi) != robot.v_indices(robot.actuated_joints)
    )  # after a ball joint: q index ≠ v index
    passive = ~ProjectionPlant(robot, None, sim_dt=1e-3).actuated
    for k, (q, v, _) in enumerate(_states(robot, 12, 7)):
        t = 0.01 * k
        tau = fast(t, q, v).copy()
        np.testing.assert_array_equal(fast.kin.q, q)  # the step's copy of q: nq entries, as given
        if coords == "joints":
            ((kt, _, _, task),) = fast._plan.joint_trajs
            qd = task.trajectory(t)[0]
            np.testing.assert_allclose(fast._plan.terr[kt, :6], qd - q[qi], rtol=0, atol=1e-15)
        ref = slow(t, q, v)
        assert np.abs(tau - ref).max() <= 1e-12 * np.abs(ref).max(), np.abs(tau - ref).max()
        assert np.abs(tau[passive]).max() <= 1e-9 * np.abs(ref).max()


def test_position_limits_are_refused_where_q_and_v_indices_differ(robot):
    """A position limit reads q at the joint's v index (models/limits.py, _limit_kernels): after the first ball
    joint (sph_0: nq 4, nv 3) the two differ, so a limit on such a joint is a one-line ConfigError naming it,
    not a bound held on the wrong coordinate; a joint before it is taken, and the default selection leaves
    the ball joints' columns out."""
    from cmstack.models.limits import JointPositionLimit

    jm = robot.model.joints[robot.model.getJointId("act_1")]
    assert jm.idx_q != jm.idx_v  # (the case the guard is for)
    with pytest.raises(ConfigError, match=r"after a ball or free joint \(1: \['act_1'\]\)"):
        JointPositionLimit(robot, 1e-3, 10.0, q_min=[-0.1], q_max=[0.1], joints=["act_1"])
    held = JointPositionLimit(robot, 1e-3, 10.0, q_min=[-0.1], q_max=[0.1], joints=["act_0"])
    assert held.idx.tolist() == [robot.joint_index("act_0")]
    with pytest.raises(ConfigError, match=r"after a ball or free joint \(15: \['ua_1'"):
        JointPositionLimit(robot, 1e-3, 10.0, q_min=-1.0, q_max=1.0)  # every joint, bounds given
    assert JointPositionLimit(robot, 1e-3, 10.0).idx.size == 0  # the model's limits: none is finite here
