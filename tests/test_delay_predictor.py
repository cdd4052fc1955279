"""The delay-compensating controller side of ``cmstack rt`` (issue 32; models/estimator.DelayPredictor,
sim/rt_predict.py): the model's closed-chain forward dynamics against an independent formulation, the one-period
prediction's order against a fine integration of the same dynamics and its error against the MuJoCo plant one
period ahead, and the law called at the predicted state and time."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ConfigError
from cmstack.models.estimator import DelayPredictor
from cmstack.models.loops import ClosureSet
from cmstack.scenarios import closed_chain
from cmstack.scenarios._common import default_config
from cmstack.sim.projection_sim import ProjectionPlant
from cmstack.sim.rt_predict import HOLD_WEIGHT, PredictingController, prediction_stats, with_prediction
from cmstack.sim.sensors import ActuatedSensing, ReconstructingController

DT = 1e-3


def _robot(model):
    cfg = default_config("closed_chain")
    cfg["model"] = model
    return cfg, closed_chain.load_robot(cfg)


@pytest.fixture(scope="module", params=["mjcf/five_bar.xml", "mjcf/delta.xml"])
def moving(request):
    """(cfg, robot, q, v, τ): a state on the loops reached by the rigid model under a constant motor torque."""
    cfg, robot = _robot(request.param)
    pred = DelayPredictor(robot, DT)
    tau = np.zeros(robot.nv)
    tau[pred.act] = np.random.default_rng(1).normal(size=pred.act.size) * 0.3
    plant = ProjectionPlant(robot, None, sim_dt=DT)
    plant.reset(robot.q_initial)
    plant.set_torque(tau)
    plant.step(80)
    q, v = plant.state()
    assert np.abs(v).max() > 0.1  # (it moves)
    return cfg, robot, q, v, tau


def _fine(robot, q, v, tau, h, n=40):
    """The rigid model's state h s after (q, v) under τ: RK4 at h/n with projection (ProjectionPlant)."""
    p = ProjectionPlant(robot, None, sim_dt=h / n)
    p.reset(q, v)
    p.set_torque(tau)
    p.step(n)
    return p.state()


def test_the_reduced_dynamics_equal_the_projection_plants(moving):
    _, robot, q, v, tau = moving
    a = DelayPredictor(robot, DT).accel(q, v, tau)
    b = ProjectionPlant(robot, None).accel(q, v, tau)
    assert np.abs(a - b).max() <= 1e-9 * max(1.0, np.abs(b).max())


def test_the_prediction_is_second_order_on_the_loops_and_far_better_than_none(moving):
    _, robot, q, v, tau = moving
    pred = DelayPredictor(robot, DT)
    cs = ClosureSet(robot.loops)
    errs = []
    for h in (DT, DT / 2):
        qt, vt = _fine(robot, q, v, tau, h)
        q1, v1 = pred.predict(q, v, tau, h)
        e = np.abs(pin.difference(robot.model, q1, qt)).max() + h * np.abs(v1 - vt).max()
        e0 = np.abs(pin.difference(robot.model, q, qt)).max() + h * np.abs(v - vt).max()
        errs.append(e)
        assert e < 0.05 * e0, (h, e, e0)  # the unpredicted state is one order worse
        assert np.abs(cs.phi(q1)).max() <= 1e-11  # back on the loops
        assert np.abs(cs.jacobian(q1) @ v1).max() <= 1e-8 * np.abs(v1).max()  # and on their tangent
    assert 3.0 < errs[0] / errs[1] < 5.0, errs  # O(h²): halving h quarters it
    assert pred.failures == 0


def test_one_period_ahead_of_the_mujoco_plant(moving, tmp_path):
    """Against the plant the law runs on (MuJoCo, its soft loops and its integrator): the predicted state is
    far closer to the plant's one period later than the state it started from."""
    cfg, robot, q, v, tau = moving
    plant = closed_chain.build_plant(cfg, robot, tmp_path)
    plant.reset(q, v)
    q0, v0 = plant.state()
    plant.set_torque(tau)
    plant.step(int(round(DT / plant.dt)))
    q1, v1 = plant.state()
    qp, vp = DelayPredictor(robot, DT).predict(q0, v0, tau)
    e = np.abs(qp - q1).max() + DT * np.abs(vp - v1).max()
    e0 = np.abs(q0 - q1).max() + DT * np.abs(v0 - v1).max()
    assert e < 0.1 * e0, (e, e0)


class _Law:
    def __init__(self, robot):
        self.robot, self.info, self.seen = robot, None, []

    def __call__(self, t, q, v):
        self.seen.append((t, q.copy(), v.copy()))
        return np.full(self.robot.nv, float(len(self.seen)))


def test_the_law_answers_the_predicted_state_at_the_time_its_torque_is_applied(moving):
    _, robot, q, v, tau = moving
    law = _Law(robot)
    ctl, note = with_prediction(law, "one-step", DT, 10)
    assert isinstance(ctl, PredictingController) and note == ""
    ctl(0.0, q, v)  # the first state: applied at once by the driver, not predicted
    assert law.seen[0][0] == 0.0 and np.array_equal(law.seen[0][1], q)
    ctl(0.5, q, v)
    t1, q1, v1 = law.seen[1]
    qe, ve = DelayPredictor(robot, DT).predict(q, v, np.full(robot.nv, 1.0))  # under the torque last sent
    assert (
        t1 == pytest.approx(0.5 + DT) and np.allclose(q1, qe, atol=1e-13) and np.allclose(v1, ve, atol=1e-12)
    )
    s = prediction_stats(ctl, "one-step", note)
    assert s["mode"] == "one-step" and s["predictions"] == 1 and s["failures"] == 0 and s["dq_max"] > 0


def test_latency_mode_predicts_under_the_torque_the_driver_holds(moving):
    """A command sent after the tick it was meant for never reached the robot: the torque held is the one
    before it."""
    _, robot, q, v, _ = moving
    law = _Law(robot)
    ctl = PredictingController(law, DelayPredictor(robot, DT), "latency", 10)
    ctl(0.0, q, v)  # τ = 1, applied at once
    ctl.on_frame(1, 10.0, 0, 9.0)
    ctl(DT, q, v)  # τ = 2, answering state 1 ...
    ctl.on_frame(2, 10.002, 1, 10.0025)  # ... sent 0.5 ms after tick 2: missed, τ = 1 still held
    ctl(2 * DT, q, v)
    q_held, _ = DelayPredictor(robot, DT).predict(q, v, np.full(robot.nv, 1.0))
    assert np.allclose(law.seen[2][1], q_held, atol=1e-13)
    ctl.on_frame(3, 10.003, 2, 10.0028)  # τ = 3 sent before tick 3: in time, applied now
    # the command answering state 0 was held 2 periods (τ = 2 never arrived): the average hold moves from 1
    # towards 2 by HOLD_WEIGHT, and the horizon to the middle of the hold expected, dt (1 + (L̄ − 1)/2)
    assert ctl.hold == pytest.approx(1.0 + HOLD_WEIGHT) and ctl.horizon == pytest.approx(
        DT * (1 + HOLD_WEIGHT / 2)
    )
    ctl(3 * DT, q, v)
    q_new, _ = DelayPredictor(robot, DT).predict(q, v, np.full(robot.nv, 3.0), ctl.horizon)
    assert np.allclose(law.seen[3][1], q_new, atol=1e-13) and law.seen[3][0] == pytest.approx(
        3 * DT + ctl.horizon
    )


def test_the_reconstructed_law_is_wrapped_and_what_cannot_be_predicted_says_why(moving):
    _, robot, q, v, _ = moving
    law = _Law(robot)
    sensing = ActuatedSensing.for_robot(robot, DT)
    ctl, note = with_prediction(ReconstructingController(law, sensing), "latency", DT, 10)
    assert isinstance(ctl, ReconstructingController) and isinstance(ctl.controller, PredictingController)
    assert prediction_stats(ctl, "latency", note)["mode"] == "latency"
    same, note = with_prediction(law, "none", DT, 10)
    assert same is law and prediction_stats(same, "none", note) == {"mode": "none", "asked": "none"}

    class NoModel:
        def __call__(self, t, q, v):
            return q

    _, note = with_prediction(NoModel(), "one-step", DT, 10)
    assert "NoModel has no model" in note
    _, note = with_prediction(
        law, "one-step", DT, 10, partial_state=True
    )  # the motors only, no reconstruction
    assert "publishes the motors only" in note
    _, note = with_prediction(law, "one-step", DT, 10, (robot.nq + 1, robot.nv))
    assert "(nq, nv)" in note
    with pytest.raises(ConfigError, match="predict='two-step'"):
        with_prediction(law, "two-step", DT, 10)
    with pytest.raises(ConfigError, match="dt must be > 0"):
        DelayPredictor(robot, 0.0)
