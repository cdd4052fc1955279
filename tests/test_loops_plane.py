"""The ``plane`` loop closure (models/loops.py, 1 row: frame b's origin on the plane through A normal to A's z):
its rows against finite differences on moving frames (A turning, so every term of J and J̇v counts), against the
slider-crank's closed form (67)-(69) of [Aghili] (tests/_slider_crank_reference.py), the sidecar path, and the
clear refusals where a plant or Pinocchio has no such constraint."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from _slider_crank_reference import SliderCrankLoop  # the paper's closed form (67)-(69), a test oracle
from test_loops import _fd_jacobian

from cmstack.models.errors import ConfigError, ModelFileError
from cmstack.models.loops import ClosureSet, LoopClosure, pinocchio_constraint_models
from cmstack.models.robot import Robot


@pytest.fixture(scope="module")
def yumi():
    return Robot("urdf/yumi.urdf")


def test_plane_rows_match_finite_differences_on_moving_frames(yumi):
    """A on one wrist (turning with 7 joints), b on the other, an offset plane: φ = n·d, J = ∂φ/∂q everywhere
    (on and off the plane), J̇v = d/dt (J v) at v̇ = 0, and the task's e, w, drift are the same rows."""
    rng = np.random.default_rng(11)
    off = {"xyz": [0.05, -0.02, 0.1], "rpy": [0.3, -0.4, 0.7]}
    c = LoopClosure(
        yumi,
        "yumi_link_7_l",
        "yumi_link_7_r",
        "plane",
        offset=off,
        offset_b=[0.01, 0.02, 0.03],
        name="fd_plane",
    )
    assert c.m == c.dim == 1
    for _ in range(3):
        q = rng.uniform(-1.0, 1.0, yumi.nq)
        v = rng.normal(size=yumi.nv)
        phi = c.phi(q)
        d = yumi.model.createData()
        pin.framesForwardKinematics(yumi.model, d, q)
        A = d.oMf[yumi.frame_id("yumi_link_7_l")] * pin.SE3(
            pin.rpy.rpyToMatrix(*off["rpy"]), np.array(off["xyz"])
        )
        pb = d.oMf[yumi.frame_id("yumi_link_7_r")].act(np.array([0.01, 0.02, 0.03]))
        assert abs(phi[0] - A.rotation[:, 2] @ (pb - A.translation)) < 1e-14  # φ = n·(p_b − p_A)
        assert abs(phi[0]) > 1e-3  # off the plane: all terms count
        J = c.jacobian(q)
        assert J.shape == (1, yumi.nv)
        assert np.allclose(J, _fd_jacobian(c, q), atol=1e-8)
        eps = 1e-6
        fd = (c.jacobian(q + eps * v) @ v - c.jacobian(q - eps * v) @ v) / (2 * eps)
        assert np.allclose(c.jdot_v(q, v), fd, atol=1e-7 * max(1.0, np.abs(fd).max()))
        # φ̈ along q(t) = q + t v (v̇ = 0) is J̇v: the second difference of φ
        fd2 = (c.phi(q + eps * v) - 2 * phi + c.phi(q - eps * v)) / eps**2
        assert np.allclose(c.jdot_v(q, v), fd2, atol=2e-3 * max(1.0, abs(fd2[0])))
        kin = yumi.update(q, v)
        W, drift, w, e = c.error_dynamics(kin, 0.0)
        assert np.allclose(W, J, atol=1e-13) and np.allclose(drift, c.jdot_v(q, v), atol=1e-12)
        assert np.allclose(e, phi, atol=1e-14) and np.allclose(w, J @ v, atol=1e-12)


def test_slider_crank_sidecar_gives_the_papers_loop():
    """urdf/slider_crank.urdf + its sidecar: one plane closure (the rail), the rod passive, and its rows (the
    Python ones and the compiled ones of PIDC's closed-chain step) equal the closed form (67)-(69) of [Aghili]
    (tests/_slider_crank_reference.py, an independent formulation) to round-off on and off the rail."""
    from cmstack.models._loop_kernels import KIND_CODES, closure_rows

    robot = Robot.from_urdf("urdf/slider_crank.urdf", loops="urdf/slider_crank.loops.toml")
    (c,) = robot.loops
    assert (c.kind, c.m, c.frame_a, c.frame_b) == ("plane", 1, "base", "slider_point")
    assert robot.passive_joints == ["rod"] and robot.actuated_joints == ["crank"]
    assert c.residual(robot.q_initial) < 1e-15
    cs = ClosureSet(robot.loops)
    oracle = SliderCrankLoop(0.5)
    rng = np.random.default_rng(2)
    J2, jdv2 = np.empty((1, 2)), np.empty(1)
    for _ in range(20):
        q, v = rng.uniform(-4, 4, 2), rng.normal(size=2) * 5
        phi, A, jdv = oracle.phi(q)[0], oracle.jacobian(q)[0], oracle.jdot_v(q, v)[0]
        J, jd = cs.jacobian_and_jdot_v(q, v)
        assert abs(cs.phi(q)[0] - phi) <= 1e-15 * 4 and np.allclose(J[0], A, rtol=0, atol=1e-15 * 4)
        assert abs(jd[0] - jdv) <= 1e-14 * max(1.0, abs(jdv))
        kin = robot.update(q, v)
        Fa, Fb = kin.frame(c.fa), kin.frame(c.fb)
        row = [np.concatenate((F.R.ravel(), F.p, F.twist, F.acc)) for F in (Fa, Fb)]
        assert closure_rows(KIND_CODES["plane"], row[0], Fa.J, row[1], Fb.J, J2, jdv2, 0) == 1
        assert np.allclose(J2[0], A, rtol=0, atol=1e-15 * 4) and abs(jdv2[0] - jdv) <= 1e-14 * max(
            1.0, abs(jdv)
        )
    # assembled near a guess off the rail: C back on z = 0
    q = robot.assemble(np.array([0.7, 0.3]))
    assert abs(oracle.phi(q)[0]) < 1e-12


def test_plane_closure_is_refused_where_it_has_no_counterpart(tmp_path):
    """No MuJoCo equality and no Pinocchio constraint model is a point on a plane: both say so (one line)."""
    from cmstack.sim.urdf_plant import plant_from_urdf

    robot = Robot.from_urdf("urdf/slider_crank.urdf", loops="urdf/slider_crank.loops.toml")
    with pytest.raises(ConfigError, match="rail.*plane closure"):
        pinocchio_constraint_models(robot)
    with pytest.raises(ModelFileError, match="rail.*plane closure.*slide joint"):
        plant_from_urdf(robot, sim_dt=1e-3, q0=robot.q_initial)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[loop]]\nframe_a = "base"\nframe_b = "slider_point"\nkind = "planar"\n')
    with pytest.raises(ConfigError, match="planar.*plane"):
        Robot.from_urdf("urdf/slider_crank.urdf", loops=bad)
