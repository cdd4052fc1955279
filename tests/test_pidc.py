"""PIDC (controllers/pidc.py): minimum-norm torque, passive joints, QP version, force control."""

import numpy as np
import pytest

from cmstack.controllers.pidc import PIDC, ForceLaw
from cmstack.models.errors import InfeasibleError
from cmstack.models.projection import project
from cmstack.models.robot import Robot
from cmstack.sim.projection_sim import ProjectionPlant

RNG = np.random.default_rng(44)


@pytest.fixture(scope="module")
def robot():
    """The slider-crank from its URDF and sidecar: ``robot.loops`` = [the rail] (a plane closure), the rod passive."""
    return Robot.from_urdf("urdf/slider_crank.urdf", loops="urdf/slider_crank.loops.toml")


def sine_ref(t):
    return (
        np.array([0.3 * np.sin(2 * t)]),
        np.array([0.6 * np.cos(2 * t)]),
        np.array([-1.2 * np.sin(2 * t)]),
    )


def admissible(th1, w):
    return np.array([th1, -2 * th1]), w * np.array([1.0, -2.0])


def acceleration_map(robot, c, q, v):
    """q̈ = F τ + q̈0 from the KKT system (an independent formulation of the constrained dynamics)."""
    kin = robot.update(q, v)
    M, h = kin.M, kin.h + robot.damping * v
    A, jdv = c.jacobian(q), c.jdot_v(q, v)
    n, m = 2, 1
    K = np.block([[M, -A.T], [A, np.zeros((m, m))]])

    def qdd(tau):
        return np.linalg.solve(K, np.concatenate([tau - h, -jdv]))[:n]

    q0 = qdd(np.zeros(n))
    F = np.column_stack([qdd(e) - q0 for e in np.eye(n)])
    return F, q0


def brute_force_min_norm(F, target, W, passive_mask):
    """min ‖Wτ‖² s.t. F τ = target, τ_passive = 0 — by least squares on its optimality system."""
    n = F.shape[1]
    E = np.vstack([F, np.eye(n)[passive_mask]])
    e = np.concatenate([target, np.zeros(passive_mask.sum())])
    H = W.T @ W
    K = np.block([[2 * H, E.T], [E, np.zeros((E.shape[0], E.shape[0]))]])
    sol = np.linalg.lstsq(K, np.concatenate([np.zeros(n), e]), rcond=None)[0]
    return sol[:n]


@pytest.mark.parametrize(
    "passive,weights", [((), None), ((), [1.0, 3.0]), (("rod",), None), (("rod",), [2.0, 0.5])]
)
def test_torque_is_minimum_norm(robot, passive, weights):
    (c,) = robot.loops
    for th1 in (0.3, 1.0, 2.2, -2.0):
        q, v = admissible(th1, RNG.normal())
        ctl = PIDC(robot, c, ["crank"], sine_ref, 100.0, 20.0, passive=passive, weights=weights)
        tau = ctl(0.4, q, v)
        F, q0 = acceleration_map(robot, c, q, v)
        # PIDC's τ produces its desired acceleration, which satisfies the constraint
        np.testing.assert_allclose(F @ tau + q0, ctl.info.qdd_des, atol=1e-8)
        W = np.diag(weights) if weights is not None else np.eye(2)
        mask = np.array([n in passive for n in robot.joint_names])
        tau_bf = brute_force_min_norm(F, ctl.info.qdd_des - q0, W, mask)
        np.testing.assert_allclose(tau, tau_bf, atol=1e-7)
        assert np.all(tau[mask] == 0) or np.abs(tau[mask]).max() < 1e-10


def test_desired_acceleration_equals_explicit_parameterization(robot):
    """q̈_des = C q̇ + P z equals N u + Ṅθ̇ of (45) with q = f(θ) = (θ, −2θ), N = (1, −2), Ṅ = 0."""
    (c,) = robot.loops
    ctl = PIDC(robot, c, ["crank"], sine_ref, 100.0, 20.0, passive=())
    for th1 in (0.4, 1.3, -2.5):
        q, v = admissible(th1, 0.7)
        pr = project(c.jacobian(q))
        from cmstack.models.projection import c_times_v

        qdd, e = ctl.desired_acceleration(0.3, q, v, pr, c_times_v(pr, c.jdot_v(q, v)))
        thd, thdd = sine_ref(0.3)[1:]
        u = thdd + 20.0 * (thd - v[0]) + 100.0 * e
        np.testing.assert_allclose(qdd, np.array([1.0, -2.0]) * u, atol=1e-9)


def test_passive_closed_form_equals_weighted_stack(robot):
    (c,) = robot.loops
    q, v = admissible(0.8, 1.1)
    a = PIDC(robot, c, ["crank"], sine_ref, 50.0, 10.0, passive=("rod",))
    b = PIDC(robot, c, ["crank"], sine_ref, 50.0, 10.0, passive=("rod",), weights=[1.0, 1.0])
    np.testing.assert_allclose(a(0.2, q, v), b(0.2, q, v), atol=1e-10)


def test_unsolvable_case_is_reported(robot):
    """At θ₁ = π/2, θ₂ = π, A = 0 and P = I: the passive rod would need a torque (58) fails."""
    (c,) = robot.loops
    q, v = np.array([np.pi / 2, np.pi]), np.array([1.0, -2.0])
    ctl = PIDC(robot, c, ["crank"], sine_ref, 100.0, 20.0, passive=("rod",))
    tau = ctl(0.1, q, v)
    assert not ctl.info.solvable and ctl.unsolvable_steps == 1
    assert ctl.info.passive_residual > 1e-3
    assert tau[1] == 0.0
    strict = PIDC(robot, c, ["crank"], sine_ref, 100.0, 20.0, passive=("rod",), on_unsolvable="raise")
    with pytest.raises(InfeasibleError, match="passive"):
        strict(0.1, q, v)
    qp = PIDC(robot, c, ["crank"], sine_ref, 100.0, 20.0, passive=("rod",), qp=True, torque_limits=[1e3, 1e3])
    qp(0.1, q, v)
    assert not qp.info.solvable and qp.unsolvable_steps == 1
    # away from the singularity it is solvable
    q2, v2 = admissible(0.5, 1.0)
    ctl(0.1, q2, v2)
    assert ctl.info.solvable and ctl.unsolvable_steps == 1


@pytest.mark.parametrize(
    "passive,weights", [((), None), (("rod",), None), (("rod",), [1.0, 2.0]), ((), [3.0, 1.0])]
)
def test_qp_equals_closed_form_without_active_limits(robot, passive, weights):
    (c,) = robot.loops
    for th1 in (0.3, 1.4, -2.1):
        q, v = admissible(th1, RNG.normal())
        cf = PIDC(robot, c, ["crank"], sine_ref, 100.0, 20.0, passive=passive, weights=weights)
        qp = PIDC(
            robot,
            c,
            ["crank"],
            sine_ref,
            100.0,
            20.0,
            passive=passive,
            weights=weights,
            qp=True,
            torque_limits=[1e4, 1e4],
        )
        t1, t2 = cf(0.7, q, v), qp(0.7, q, v)
        assert not qp.info.limit_active
        np.testing.assert_allclose(t2, t1, atol=1e-7)


def test_qp_keeps_working_with_limits_active(robot):
    (c,) = robot.loops
    q, v = admissible(0.6, 3.0)
    big = lambda t: (np.array([2.0]), np.zeros(1), np.zeros(1))  # large step: large torque
    cf = PIDC(robot, c, ["crank"], big, 400.0, 40.0, passive=("rod",))
    tau_cf = cf(0.0, q, v)
    lim = 0.5 * abs(tau_cf[0])
    qp = PIDC(robot, c, ["crank"], big, 400.0, 40.0, passive=("rod",), qp=True, torque_limits=[lim, 1.0])
    tau = qp(0.0, q, v)
    assert abs(tau_cf[0]) > lim
    assert qp.info.limit_active and qp.saturated_steps == 1
    assert abs(tau[0]) <= lim * (1 + 1e-8) and tau[1] == 0.0
    assert np.sign(tau[0]) == np.sign(tau_cf[0])
    np.testing.assert_allclose(abs(tau[0]), lim, rtol=1e-6)  # the best it can do: push at the limit


def test_closed_loop_tracking_with_passive_rod(robot):
    """Theorem 4 on the exact plant: the crank error decays; the passive rod gets zero torque."""
    (c,) = robot.loops
    plant = ProjectionPlant(robot, c, sim_dt=1e-3, passive=("rod",))
    plant.reset(np.array([0.2, -0.4]))
    ctl = PIDC(robot, c, ["crank"], sine_ref, 400.0, 40.0, passive=("rod",))
    errs = []
    for _k in range(1500):
        t = plant.time
        q, v = plant.state()
        plant.set_torque(ctl(t, q, v))
        errs.append(abs(sine_ref(t)[0][0] - q[0]))
        plant.step(1)
    assert errs[0] > 0.1
    assert max(errs[-300:]) < 1e-3
    assert ctl.unsolvable_steps == 0


def _force_run(robot, lam_d, steps=800, bias=8.0):
    """The plant receives τ + Aᵀ·bias: an unmodelled impotent actuator bias (it loads the slider but
    cannot move the mechanism), which the force loop must reject through its integral."""
    (c,) = robot.loops
    plant = ProjectionPlant(robot, c, sim_dt=1e-3, passive=())  # every joint driven
    plant.reset(np.array([0.5, -1.0]))
    sensor = lambda t, q, v: plant.constraint_force()  # an impotent bias is invisible in the motion
    fl = ForceLaw(lam_d, kp=0.3, ki=60.0, measure=sensor) if lam_d is not None else None
    ctl = PIDC(robot, c, ["crank"], sine_ref, 200.0, 30.0, force=fl, passive=())
    motion, force_err = [], []
    for _ in range(steps):
        t = plant.time
        q, v = plant.state()
        plant.set_torque(ctl(t, q, v) + c.jacobian(q)[0] * bias)
        motion.append(sine_ref(t)[0][0] - q[0])
        if fl is not None:
            A = c.jacobian(q)
            force_err.append(
                np.linalg.norm(ctl.info.f_d - ctl.info.f_c) / np.linalg.norm(A.T @ np.atleast_1d(lam_d))
            )
        plant.step(1)
    return np.array(motion), np.array(force_err)


def test_force_control_converges_and_is_independent_of_motion(robot):
    m0, _ = _force_run(robot, None)
    m1, ef = _force_run(robot, 20.0)
    # the impotent input does not move the system: identical motion error with and without force control
    np.testing.assert_allclose(m1, m0, atol=1e-9)
    # constraint force converges to f_d = Aᵀλ_d
    assert ef[1:20].max() > 0.1  # the bias is felt at first ...
    assert ef[-200:].max() < 0.02  # ... and rejected by the PI law
