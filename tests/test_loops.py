"""LoopClosure (models/loops.py): its rows against finite differences, the task contract against the
constraint functions, one Pinocchio pass per step, assembly, PIDC and ProjectionPlant taking it directly."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ConfigError, InfeasibleError
from cmstack.models.loops import ClosureSet, LoopClosure, assemble
from cmstack.models.robot import Robot

KINDS = ("point", "weld", "revolute")


@pytest.fixture(scope="module")
def yumi():
    return Robot("urdf/yumi.urdf")


def _closed(robot, kind, q0, name):
    """A closure between the two wrists that holds at q0 (offset = T_a(q0)⁻¹ T_b(q0))."""
    d = robot.model.createData()
    pin.framesForwardKinematics(robot.model, d, q0)
    Ta = d.oMf[robot.frame_id("yumi_link_7_l")]
    Tb = d.oMf[robot.frame_id("yumi_link_7_r")]
    return LoopClosure(robot, "yumi_link_7_l", "yumi_link_7_r", kind, offset=Ta.actInv(Tb), name=name)


def _fd_jacobian(c, q, eps=1e-6):
    """dφ/dq of the closure ``c`` at q by central differences (step eps in each coordinate)."""
    cols = []
    for i in range(q.size):
        dq = np.zeros(q.size)
        dq[i] = eps
        cols.append((c.phi(q + dq) - c.phi(q - dq)) / (2 * eps))
    return np.array(cols).T


@pytest.mark.parametrize("kind", KINDS)
def test_rows_match_finite_differences(yumi, kind):
    rng = np.random.default_rng(3)
    q0 = rng.uniform(-1.0, 1.0, yumi.nq)
    c = _closed(yumi, kind, q0, f"fd_{kind}")
    v = rng.normal(size=yumi.nv)
    assert c.residual(q0) < 1e-12
    J = c.jacobian(q0)
    assert J.shape == (c.m, yumi.nv) and c.dim == c.m == {"point": 3, "weld": 6, "revolute": 5}[kind]
    # J = ∂φ/∂q on the closed manifold (all rows), and everywhere on the point rows
    assert np.allclose(J, _fd_jacobian(c, q0), atol=1e-8)
    q1 = q0 + 0.3 * rng.normal(size=yumi.nq)
    assert c.residual(q1) > 1e-3
    assert np.allclose(c.jacobian(q1)[:3], _fd_jacobian(c, q1)[:3], atol=1e-8)
    # J̇v = d/dt (J v) along q(t) = q + t v (v̇ = 0), closed or not
    for q in (q0, q1):
        eps = 1e-6
        fd = (c.jacobian(q + eps * v) @ v - c.jacobian(q - eps * v) @ v) / (2 * eps)
        assert np.allclose(c.jdot_v(q, v), fd, atol=1e-7 * max(1.0, np.abs(fd).max()))
    # e and ė: the task's e is φ, its w is J v = dφ/dt at closure
    kin = yumi.update(q0, v)
    W, drift, w, e = c.error_dynamics(kin, 0.0)
    assert np.allclose(e, c.phi(q0), atol=1e-14)
    eps = 1e-6
    edot = (c.phi(q0 + eps * v) - c.phi(q0 - eps * v)) / (2 * eps)
    assert np.allclose(w, edot, atol=1e-8)
    # the snapshot's rows are the constraint functions' (one contract)
    assert np.allclose(W, c.jacobian(q0), atol=1e-13)
    assert np.allclose(drift, c.jdot_v(q0, v), atol=1e-12)
    Ak, jk = c.rows_from(kin)  # what PIDC reads from its own Robot.update pass
    assert np.allclose(Ak, W, atol=1e-13) and np.allclose(jk, drift, atol=1e-12)
    A, b = c.compute(kin, 0.0)
    assert np.allclose(b, -drift - c.kd * w - c.kp * e, atol=1e-12)
    assert np.allclose(c.qp_rows(kin, 0.0)[0], A) and np.allclose(c.error(kin, 0.0), e)


def test_revolute_allows_the_hinge_and_nothing_else(yumi):
    """Turning frame b about the hinge axis (A's z) keeps the revolute closure; about x it does not."""
    rng = np.random.default_rng(5)
    q0 = rng.uniform(-1.0, 1.0, yumi.nq)
    c = _closed(yumi, "revolute", q0, "hinge")
    w = _closed(yumi, "weld", q0, "weld_ref")
    J, Jw = c.jacobian(q0), w.jacobian(q0)
    # a joint velocity giving a relative twist along A's z axis only: least squares on the weld rows
    d = yumi.model.createData()
    pin.framesForwardKinematics(yumi.model, d, q0)
    z = d.oMf[c.fa].rotation[:, 2]
    x = d.oMf[c.fa].rotation[:, 0]
    for axis, allowed in ((z, True), (x, False)):
        vv = np.linalg.lstsq(Jw, np.concatenate([np.zeros(3), axis]), rcond=None)[0]
        assert np.allclose(Jw @ vv, np.concatenate([np.zeros(3), axis]), atol=1e-9)
        assert (np.abs(J @ vv).max() < 1e-9) == allowed


def test_one_pass_per_step(yumi, monkeypatch):
    rng = np.random.default_rng(1)
    q0 = rng.uniform(-1, 1, yumi.nq)
    cs = ClosureSet([_closed(yumi, "weld", q0, "a"), _closed(yumi, "point", q0, "b")])
    calls = []
    real = pin.computeJointJacobians
    monkeypatch.setattr(pin, "computeJointJacobians", lambda *a: (calls.append(1), real(*a))[1])
    v = rng.normal(size=yumi.nv)
    A, jdv = cs.jacobian_and_jdot_v(q0, v)
    cs.phi(q0)
    cs.jacobian(q0)
    cs.jdot_v(q0, v)
    assert len(calls) == 1 and A.shape == (9, yumi.nv)
    cs.jdot_v(q0, 2 * v)
    assert len(calls) == 2


def test_assemble_closes_and_names_the_loop_it_cannot(yumi):
    rng = np.random.default_rng(2)
    q0 = rng.uniform(-1, 1, yumi.nq)
    yumi.loops[:] = [_closed(yumi, "weld", q0, "wrists")]
    try:
        q = yumi.assemble(q0 + 0.05 * rng.normal(size=yumi.nq))
        assert yumi.loops[0].residual(q) <= 1e-12
        far = LoopClosure(
            yumi, "yumi_link_7_l", "yumi_link_7_r", "point", offset=[5.0, 0, 0], name="too_long"
        )
        with pytest.raises(InfeasibleError, match=r"loop 'too_long' .* residual \d"):
            assemble(yumi, q0, [far])
    finally:
        yumi.loops[:] = []


def test_bad_kind_and_frame(yumi):
    with pytest.raises(ConfigError, match="kind='ball'"):
        LoopClosure(yumi, "yumi_link_7_l", "yumi_link_7_r", "ball")
    with pytest.raises(Exception, match="frame 'nope' is not in yumi.urdf"):
        LoopClosure(yumi, "nope", "yumi_link_7_r", "point")


# ------------------------------------------------------------------------------ from the model file
def test_mjcf_reads_every_branch_the_loop_and_the_passive_joints():
    r = Robot.from_mjcf("mjcf/five_bar.xml")
    assert r.joint_names == ["base_l", "elbow_l", "tip", "base_r", "elbow_r"]  # both top-level bodies
    assert r.passive_joints == ["elbow_l", "tip", "elbow_r"] and r.actuated_joints == ["base_l", "base_r"]
    assert [(c.name, c.kind) for c in r.loops] == [("tip_loop", "weld")]
    assert r.effort_limit[r.joint_index("base_l")] == 5.0
    assert np.allclose(r.damping, 0.01) and np.allclose(r.model.lowerPositionLimit, -3.0)
    assert r.loops[0].residual(r.q_initial) < 1e-12
    # the URDF + sidecar of the same mechanism is the same model
    u = Robot.from_urdf("urdf/five_bar.urdf", loops="urdf/five_bar.loops.toml")
    assert u.passive_joints == r.passive_joints and [c.kind for c in u.loops] == ["weld"]
    q = r.assemble([0.2, -0.1, 0.1, -0.3, 0.2])
    v = np.random.default_rng(0).normal(size=5)
    ka, kb = r.update(q, v), u.update(q, v)
    assert np.allclose(ka.M, kb.M, atol=1e-14) and np.allclose(ka.h, kb.h, atol=1e-13)
    assert np.allclose(r.loops[0].jacobian(q), u.loops[0].jacobian(q), atol=1e-14)
    assert u.loops[0].residual(q) < 1e-12


def test_sidecar_in_compose_is_prefixed():
    part = ("urdf/five_bar.urdf", "a_", [0.0, 0.0, 0.0], {}, "urdf/five_bar.loops.toml")
    part2 = ("urdf/five_bar.urdf", "b_", [0.0, 1.0, 0.0], {}, "urdf/five_bar.loops.toml")
    r = Robot.compose([part, part2])
    assert [c.name for c in r.loops] == ["a_tip_loop", "b_tip_loop"]
    assert r.passive_joints == ["a_elbow_l", "a_tip", "a_elbow_r", "b_elbow_l", "b_tip", "b_elbow_r"]


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_sidecar_naming_a_missing_frame_is_one_line(tmp_path):
    side = _write(tmp_path, "bad.toml", '[[loop]]\nframe_a = "tool"\nframe_b = "dist_x"\nkind = "weld"\n')
    with pytest.raises(ConfigError) as err:
        Robot.from_urdf("urdf/five_bar.urdf", loops=side)
    msg = str(err.value)
    assert "\n" not in msg and str(side) in msg and "'dist_x'" in msg
    side = _write(tmp_path, "bad2.toml", 'passive = ["elbow_q"]\n')
    with pytest.raises(ConfigError, match=r"bad2.toml.*'elbow_q'"):
        Robot.from_urdf("urdf/five_bar.urdf", loops=side)
    side = _write(tmp_path, "bad3.toml", '[[loop]]\nframe_a = "tool"\nframe_b = "dist_r"\nknd = "weld"\n')
    with pytest.raises(ConfigError, match=r"bad3.toml: loop 0: unknown key 'knd'; did you mean 'kind'"):
        Robot.from_urdf("urdf/five_bar.urdf", loops=side)


def _mjcf_variant(tmp_path, old, new):
    from cmstack.models.robot import PACKAGE_ROOT

    text = (PACKAGE_ROOT / "mjcf" / "five_bar.xml").read_text()
    assert old in text
    return _write(tmp_path, "variant.xml", text.replace(old, new))


def test_mjcf_loop_that_cannot_close_is_one_line(tmp_path):
    from cmstack.models.errors import ModelFileError

    # a site 2 m from base_r, which the left branch (0.43 m long, 0.2 m away) cannot reach
    p = _mjcf_variant(
        tmp_path,
        '<weld name="tip_loop" body1="tool" body2="dist_r"/>',
        '<connect name="far" site1="ee" site2="far_site"/>',
    )
    text = p.read_text().replace(
        '<geom fromto="0 0 0 0.1 0 -0.12" rgba="0.8 0.3 0.2 1"/>',
        '<geom fromto="0 0 0 0.1 0 -0.12" rgba="0.8 0.3 0.2 1"/><site name="far_site" pos="2 0 0"/>',
    )
    p.write_text(text)
    with pytest.raises(ModelFileError) as err:
        Robot.from_mjcf(p)
    msg = str(err.value)
    assert "\n" not in msg and str(p) in msg and "loop 'far'" in msg and "residual" in msg
    # an equality naming a body the model does not have
    p = _mjcf_variant(tmp_path, 'body2="dist_r"', 'body2="dist_q"')
    with pytest.raises(ModelFileError, match=r"variant.xml: equality 'tip_loop': body2 'dist_q'"):
        Robot.from_mjcf(p)


def test_pidc_and_projection_plant_take_the_loop_directly():
    from cmstack.controllers.pidc import PIDC
    from cmstack.sim.projection_sim import ProjectionPlant

    r = Robot.from_mjcf("mjcf/five_bar.xml")
    plant = ProjectionPlant(r, r.loops[0], sim_dt=1e-3)  # passive joints: robot.passive_joints
    q0 = r.assemble([0.1, 0.0, 0.0, -0.1, 0.0])
    plant.reset(q0)
    assert not plant.actuated[r.joint_index("tip")]
    q_goal = plant.q[[0, 3]]
    ctl = PIDC(r, None, ["base_l", "base_r"], q_goal, 400.0, 40.0)  # the robot's loops and passive joints
    for _ in range(300):
        q, v = plant.state()
        tau = ctl(plant.time, q, v)
        assert ctl.info.solvable and np.abs(tau[~plant.actuated]).max() < 1e-9
        plant.set_torque(tau)
        plant.step()
    assert np.abs(plant.q[[0, 3]] - q_goal).max() < 1e-6 and plant.equality_violation() < 1e-10
