"""The floating base in the state from the actuators (issue 32 item 1): a legged robot whose legs are closed chains
measures its motors and gets its base's pose and twist from motion capture or an on-board estimator; the passive
knees come from the loops (models/estimator.py).  On the five-bar quadruped (mjcf/quadruped_five_bar.xml: a free
joint, 8 motors, 8 passive knees, 4 loops)."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ConfigError, SensorFault, StateError
from cmstack.models.estimator import LoopStateEstimator
from cmstack.models.loops import ClosureSet, assemble
from cmstack.models.robot import Robot


@pytest.fixture(scope="module")
def quad():
    robot = Robot.from_mjcf("mjcf/quadruped_five_bar.xml")
    return robot, ClosureSet(robot.loops)


def _assembled(robot, est, q):
    """q with its knees closed on the loops for its motors, its base pose kept (the legs' loops close inside the
    torso's subtree: their zero set does not depend on the base pose; ``assemble`` holds 1-DoF joints only)."""
    b = q[est.base_q].copy()
    q = assemble(robot, q, fixed=list(robot.actuated_joints))
    q[est.base_q] = b
    return q


def _random_state(robot, est, cs, rng):
    q = robot.q_initial.copy()
    q[est.act_q] += rng.uniform(-0.2, 0.2, est.act.size)
    q[est.base_q[:3]] = rng.normal(size=3)
    quat = rng.normal(size=4)
    q[est.base_q[3:]] = quat / np.linalg.norm(quat)
    q = _assembled(robot, est, q)
    va, vb = rng.normal(size=est.act.size), rng.normal(size=6)
    v = np.zeros(robot.nv)
    v[est.act], v[est.base_v] = va, vb
    J = cs.jacobian(
        q
    )  # an independent solve of J v = 0 for the knees' rates (least squares, not the kernel's QR)
    v[est.pas] = -np.linalg.lstsq(J[:, est.pas], J[:, est._ext] @ np.r_[va, vb], rcond=None)[0]
    return q, v


def test_the_estimator_takes_the_floating_base_from_the_driver(quad):
    robot, _ = quad
    est = LoopStateEstimator(robot)
    assert est.base == "base" and "base" not in est.passive and len(est.passive) == 8 and est.act.size == 8
    assert est.base_q.tolist() == list(range(7)) and est.base_v.tolist() == list(range(6))
    assert not np.array_equal(est.act, est.act_q)  # after the base, q and v indices differ by one


def test_random_assembled_states_are_reconstructed_to_round_off(quad):
    """Random base poses (any orientation) and motor angles, knees assembled on the loops, random motor rates and
    base twists: the estimator gives back q and v to 1e-10, and the knees' rates agree with central differences
    of assembled configurations along (v_a, v_b) (an independent formulation: no Jacobian)."""
    robot, cs = quad
    est = LoopStateEstimator(robot)
    rng = np.random.default_rng(7)
    h = 1e-6
    for _ in range(6):
        q, v = _random_state(robot, est, cs, rng)
        assert np.abs(cs.phi(q)).max() < 1e-12
        est.reset()
        qh, vh = est.reconstruct(q[est.act_q], v[est.act], q[est.base_q], v[est.base_v])
        assert np.abs(qh - q).max() < 1e-10 and np.abs(vh - v).max() < 1e-10
        assert np.abs(cs.phi(qh)).max() <= 1e-12

        def moved(s):
            d = np.zeros(robot.nv)
            d[est.act], d[est.base_v] = s * v[est.act], s * v[est.base_v]
            return _assembled(robot, est, pin.integrate(robot.model, q, d))

        fd = (moved(h)[est.pas_q] - moved(-h)[est.pas_q]) / (2 * h)
        assert np.abs(fd - vh[est.pas]).max() < 1e-6


def test_a_moving_base_and_legs_are_followed_from_the_tangent_prediction(quad):
    """A smooth motion (the base translating and turning about all three axes, the motors on sinusoids) at 1 kHz:
    every cycle warm-started from the last (the tangent prediction includes the base's motion, pin.difference), the
    reconstruction equals the assembled truth to 1e-10 in at most 3 Newton passes, no fault."""
    robot, cs = quad
    est = LoopStateEstimator(robot, dt=1e-3)
    rng = np.random.default_rng(1)
    amp, w = rng.uniform(0.05, 0.15, est.act.size), rng.uniform(1.0, 3.0, est.act.size)
    q0 = robot.q_initial.copy()
    twist = np.array([0.3, -0.2, 0.1, 0.8, -0.5, 0.6])  # m/s, rad/s in the base frame
    q = q0.copy()
    for k in range(40):
        t = k * 1e-3
        q[est.act_q] = q0[est.act_q] + amp * np.sin(w * t)
        db = np.zeros(robot.nv)
        db[est.base_v] = twist * t
        q[est.base_q] = pin.integrate(robot.model, q0, db)[est.base_q]
        q = _assembled(robot, est, q)
        va = amp * w * np.cos(w * t)
        v = np.zeros(robot.nv)
        v[est.act], v[est.base_v] = va, twist
        J = cs.jacobian(q)
        v[est.pas] = -np.linalg.lstsq(J[:, est.pas], J[:, est._ext] @ np.r_[va, twist], rcond=None)[0]
        qh, vh = est.reconstruct(q[est.act_q], va, q[est.base_q], twist)
        assert np.abs(qh - q).max() < 1e-10 and np.abs(vh - v).max() < 1e-10, k
        assert est.iterations <= 3 and est.prediction_gap < 1e-4, (k, est.iterations, est.prediction_gap)
    assert est.calls == 40


def test_a_floating_base_needs_its_pose_and_a_bad_one_is_named(quad):
    robot, _ = quad
    est = LoopStateEstimator(robot)
    q = robot.q_initial
    qa, va = q[est.act_q], np.zeros(8)
    with pytest.raises(StateError, match="floating base 'base'"):
        est.reconstruct(qa, va)
    bad = q[est.base_q].copy()
    bad[3:] *= 1.01  # not a unit quaternion
    with pytest.raises(SensorFault, match="bad_base") as exc:
        est.reconstruct(qa, va, bad, np.zeros(6))
    assert exc.value.kind == "bad_base" and exc.value.joint == "base"
    nan_twist = np.zeros(6)
    nan_twist[4] = np.nan
    with pytest.raises(SensorFault, match="bad_base"):
        est.reconstruct(qa, va, q[est.base_q], nan_twist)
    qh, _ = est.reconstruct(qa, va, q[est.base_q], np.zeros(6))  # after the faults: a good frame goes through
    assert np.abs(qh - q).max() < 1e-9
    five = Robot.from_mjcf("mjcf/five_bar.xml")
    e5 = LoopStateEstimator(five)
    with pytest.raises(StateError, match="no floating base"):
        e5.reconstruct(np.zeros(2), np.zeros(2), q[est.base_q], np.zeros(6))


def test_a_passive_ball_joint_is_refused_by_name():
    robot = Robot.from_mjcf("mjcf/stewart_ball.xml")
    multi = [n for n in robot.passive_joints if robot.model.joints[robot.model.getJointId(n)].nv != 1]
    if not multi:
        pytest.skip("stewart_ball.xml has no passive multi-DoF joint")
    with pytest.raises(ConfigError, match=f"passive joint '{multi[0]}'"):
        LoopStateEstimator(robot)


def test_simulate_the_quadruped_on_its_motors_and_base_pose():
    """The legged scenario's law (ContactUKController: stance on four feet) on its MuJoCo plant, 30 cycles at 1 kHz,
    given the plant's whole state, then ``sensors="actuated"``: the motors and the base's pose and twist, the knees
    reconstructed.  The knees come out within MuJoCo's loop softness of the plant's (the plant's loops are closed to
    ~1e-8 m, not to round-off), the law's torques within 1e-4 of its torques on the whole state, no fault."""
    import pathlib
    import tempfile

    from cmstack.scenarios import legged
    from cmstack.scenarios._common import default_config
    from cmstack.sim.runner import simulate
    from cmstack.sim.sensors import ActuatedSensing

    cfg = default_config("legged")
    robot = Robot.from_mjcf(cfg["model"])
    taus = {}
    with tempfile.TemporaryDirectory() as d:
        for sensors in ("full", "actuated"):
            plant = legged.build_plant(cfg, robot, pathlib.Path(d))
            law = legged.LeggedLaw(robot, cfg, legged.Phases(cfg))
            sens = ActuatedSensing.for_robot(robot, cfg["control_dt"]) if sensors == "actuated" else "full"
            out = []
            run = simulate(
                plant,
                law,
                duration=0.03,
                control_dt=cfg["control_dt"],
                progress=False,
                sensors=sens,
                record=lambda t, q, v, tau, out=out: out.append(tau.copy()),
            )
            taus[sensors] = np.array(out)
    m = run.sensing.metrics()
    assert m["estimator_calls"] == 30 and m["estimator_iterations_max"] <= 3, m
    assert m["reconstruction_error_q_max"] < 1e-6 and m["estimator_prediction_gap_max"] < 1e-6, m
    scale = np.abs(taus["full"]).max()
    assert scale > 0.1 and np.abs(taus["actuated"] - taus["full"]).max() < 1e-4 * scale


def test_the_driver_frame_of_a_floating_base_robot_carries_the_motors_and_the_base_only(quad):
    """Under cmstack rt with sensors="actuated" the driver publishes ``ActuatedFrame``: the motors' encoders and the
    base's pose and twist, NaN in every knee entry; the controller side (``ReconstructingController``) rebuilds the
    whole state from that frame alone, equal to the assembled truth."""
    from cmstack.sim.sensors import ActuatedFrame, ActuatedSensing, ReconstructingController

    robot, cs = quad
    sensing = ActuatedSensing.for_robot(robot, 1e-3)
    est = sensing.estimator
    q, v = _random_state(robot, est, cs, np.random.default_rng(11))
    frame = ActuatedFrame.of(sensing)
    qo, vo = np.empty(robot.nq), np.empty(robot.nv)
    frame.publish(0.0, q, v, qo, vo)
    assert np.array_equal(qo[est.act_q], q[est.act_q]) and np.array_equal(vo[est.act], v[est.act])
    assert np.array_equal(qo[est.base_q], q[est.base_q]) and np.array_equal(vo[est.base_v], v[est.base_v])
    assert np.isnan(qo[est.pas_q]).all() and np.isnan(vo[est.pas]).all()
    seen = []
    est.reset(robot.q_initial)
    ctl = ReconstructingController(lambda t, qh, vh: seen.append((qh, vh)) or np.zeros(robot.nv), sensing)
    ctl(0.0, qo, vo)
    ((qh, vh),) = seen
    assert np.abs(qh - q).max() < 1e-10 and np.abs(vh - v).max() < 1e-10
    assert np.isnan(sensing.metrics()["reconstruction_error_q_max"])  # (the knees are not known on this side)
