"""State from the actuators (issue 32 item 1, models/estimator.py): a closed chain's passive joints reconstructed
from its actuated encoders, against the true state of a rigid plant (the projection-method integrator, which keeps
φ(q) = 0 to 1e-12 and v on the loops' tangent space) on closed-loop trajectories of the five-bar, the Delta and the
series-parallel arm; and every named fault on a frame made to produce it."""

from __future__ import annotations

import numpy as np
import pytest

from cmstack.models.errors import SensorFault
from cmstack.models.estimator import LoopStateEstimator
from cmstack.models.lie import svd_rank
from cmstack.models.loops import ClosureSet, assemble
from cmstack.models.robot import Robot
from cmstack.scenarios import closed_chain
from cmstack.scenarios._common import default_config
from cmstack.sim.projection_sim import ProjectionPlant

DT = 1e-3

CASES = {  # model: closed_chain settings (the default trajectory of each mechanism)
    "five_bar": {"model": "mjcf/five_bar.xml"},
    "delta": {"model": "mjcf/delta.xml"},
    "series_parallel": {
        "model": "mjcf/series_parallel.xml",
        "coords": "joints",
        "ee_frame": "F3",
        "joint_amplitude": 0.05,
    },
}


def _rigid_run(name: str, steps: int):
    """The closed_chain law (PIDC) on the rigid plant for ``steps`` control steps at 1 kHz: the true (q, v)."""
    cfg = default_config("closed_chain")
    cfg.update(CASES[name])
    robot = closed_chain.load_robot(cfg)
    _, coords, _ = closed_chain.build_reference(cfg, robot)
    ctl = closed_chain.build_law(cfg, robot, coords)
    plant = ProjectionPlant(robot, None, sim_dt=DT)
    plant.reset(robot.q_initial)
    Q, V = [], []
    for _ in range(steps):
        q, v = plant.state()
        Q.append(q)
        V.append(v)
        plant.set_torque(ctl(plant.time, q, v))
        plant.step(1)
    return robot, np.array(Q), np.array(V)


@pytest.mark.parametrize("name", list(CASES))
def test_passive_state_from_the_encoders_equals_the_plant(name):
    robot, Q, V = _rigid_run(name, 400)
    est = LoopStateEstimator(robot, dt=DT)
    act, pas = est.act, est.pas
    assert np.ptp(Q[:, pas], axis=0).max() > 1e-3  # the passive joints move
    eq, ev = [], []
    for q, v in zip(Q, V):
        qe, ve = est.reconstruct(q[act], v[act])
        assert np.array_equal(qe[act], q[act]) and np.array_equal(ve[act], v[act])
        eq.append(np.abs(qe[pas] - q[pas]).max())
        ev.append(np.abs(ve[pas] - v[pas]).max() / max(1.0, np.abs(v).max()))
    assert max(eq) <= 1e-10, max(eq)
    assert max(ev) <= 1e-10, max(ev)
    assert est.calls == len(Q) and est.max_iterations <= 4  # warm-started: a few passes per cycle
    assert est.min_conditioning > 10 * est.singular_tol and est.max_prediction_gap < 1e-3


def test_rates_are_the_loop_jacobians_null_space_independently():
    """v_p = −J_p⁺ J_a v_a against an SVD of the whole Jacobian: v = N z with N a basis of ker J, z fit to v_a."""
    robot, Q, V = _rigid_run("delta", 50)
    est = LoopStateEstimator(robot, dt=DT)
    cs = ClosureSet(robot.loops)
    for q, v in zip(Q[::10], V[::10]):
        est.reset(q)
        qe, ve = est.reconstruct(q[est.act], v[est.act])
        svd = svd_rank(cs.jacobian(qe), rtol=1e-10, full_matrices=True)
        N = svd.Vt[svd.rank :].T  # ker J (n × dof)
        z = np.linalg.lstsq(N[est.act], v[est.act], rcond=None)[0]
        assert np.abs(N @ z - ve).max() <= 1e-10 * max(1.0, np.abs(v).max())


def _five_bar():
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    est = LoopStateEstimator(robot, dt=DT)
    return robot, est


def test_a_start_on_the_other_branch_is_a_named_branch_flip_not_followed():
    robot, est = _five_bar()
    act, pas = est.act, est.pas
    qa, va = robot.q_initial[act].copy(), np.array([0.1, -0.1])
    for k in range(5):
        q, _ = est.reconstruct(qa + va * DT * k, va)
    other = robot.q_initial.copy()
    other[pas] = [-1.4656, 2.9313, 1.4656]  # the tip above the elbows: the five-bar's other assembly
    other = assemble(robot, other, fixed=robot.actuated_joints)
    assert np.abs(other[pas] - q[pas]).max() > 1.0
    est.warm_start(other)  # Newton started there closes the loops on that branch
    with pytest.raises(SensorFault, match="branch_flip") as exc:
        est.reconstruct(qa + va * DT * 5, va)
    assert exc.value.kind == "branch_flip" and exc.value.joint in robot.passive_joints
    q5, _ = est.reconstruct(qa + va * DT * 5, va)  # the start is back on the last good solution
    assert np.abs(q5[pas] - q[pas]).max() < 1e-3


def test_a_jump_of_one_encoder_is_named_in_the_cycle_it_happens():
    robot, est = _five_bar()
    act = est.act
    qa, va = robot.q_initial[act].copy(), np.array([0.2, 0.1])
    for k in range(10):
        est.reconstruct(qa + va * DT * k, va)
    bad = qa + va * DT * 10
    bad[1] += 0.2
    with pytest.raises(SensorFault, match="encoder 'base_r'") as exc:
        est.reconstruct(bad, va)
    assert exc.value.kind == "encoder_jump" and exc.value.joint == "base_r"
    with pytest.raises(SensorFault) as exc:  # a dead encoder
        est.reconstruct(np.array([np.nan, bad[1]]), va)
    assert exc.value.kind == "bad_encoder" and exc.value.joint == "base_l"


def test_an_encoder_frame_without_closure_and_a_spent_budget_are_named():
    robot = Robot.from_mjcf("mjcf/series_parallel.xml")
    est = LoopStateEstimator(robot)
    qa = robot.q_initial[est.act].copy()
    est.reconstruct(qa, np.zeros(3))
    far = qa.copy()
    far[2] = 3.0  # the piston 3 m out: the triangle cannot close
    with pytest.raises(SensorFault) as exc:
        est.reconstruct(far, np.zeros(3))
    assert exc.value.kind == "no_closure" and "triangle" in str(exc.value)
    est = LoopStateEstimator(robot, max_iter=1)
    est.reconstruct(qa, np.zeros(3))
    step = qa + np.array([0.3, -0.2, 0.02])
    with pytest.raises(SensorFault) as exc:
        est.reconstruct(step, np.zeros(3))
    assert exc.value.kind == "not_converged"
    est.max_iter = 8
    q, _ = est.reconstruct(step, np.zeros(3))
    assert float(np.abs(ClosureSet(robot.loops).phi(q)).max()) <= 1e-12


def test_a_near_singular_loop_is_named_where_the_svd_says_so():
    """The five-bar's encoders opened apart: J_p's conditioning falls to ~2e-3; with singular_tol = 0.01 the fault
    fires exactly where the QR estimate c does, and c brackets the SVD's σ_min/σ_max (module docstring)."""
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    est = LoopStateEstimator(robot, singular_tol=0.01)
    cs = ClosureSet(robot.loops)
    qa0, d = robot.q_initial[est.act].copy(), np.array([-1.0, 1.0])
    p = est.pas.size
    lo = 3.0 / np.sqrt(p * (4.0**p + 6 * p - 1))
    for k in range(1500):
        qa = qa0 + d * k * 1e-3
        try:
            q, _ = est.reconstruct(qa, d)
        except SensorFault as exc:
            assert exc.kind == "singular"
            q = est.q
            q[est.act] = qa
            q = assemble(robot, q, fixed=robot.actuated_joints)
            s = np.linalg.svd(cs.jacobian(q)[:, est.pas], compute_uv=False)
            assert s[-1] / s[0] < 0.01
            break
        s = np.linalg.svd(cs.jacobian(q)[:, est.pas], compute_uv=False)
        assert s[-1] / s[0] <= est.conditioning + 1e-12 and s[-1] / s[0] >= lo * est.conditioning
    else:
        pytest.fail("the singular fault did not fire")
    assert 1000 < k < 1500
