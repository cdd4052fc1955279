"""Limits as bounds on v̇ (models/limits.py): the effort rows are τ = M v̇ + h + D v; the position
bound brakes in time (a discrete double integrator driven at the bound never passes q_max and
stops); the velocity bound keeps v + Δt v̇ within ±v_max."""

import numpy as np
import pytest

from cmstack.models.errors import ConfigError
from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit
from cmstack.models.robot import Robot


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


def test_effort_rows_are_the_torque(robot):
    rng = np.random.default_rng(1)
    q, v, x = rng.normal(size=14), rng.normal(size=14), rng.normal(size=14)
    kin = robot.update(q, v)
    hD = kin.h + robot.damping * v
    lim = EffortLimit(robot, joints=["yumi_joint_2_l", "yumi_joint_4_r"])
    C, l, u = lim.bounds(kin, hD)
    tau = kin.M @ x + hD
    idx = [robot.joint_index("yumi_joint_2_l"), robot.joint_index("yumi_joint_4_r")]
    np.testing.assert_allclose(C @ x - l, tau[idx] + 300.0, atol=1e-9)
    np.testing.assert_allclose(u - C @ x, 300.0 - tau[idx], atol=1e-9)
    assert (lim.violation(kin, hD, x, tau) > 0) == bool(np.any(np.abs(tau[idx]) > 300.0))


@pytest.mark.parametrize("v0", [0.0, 1.0, 3.0, 6.3])  # all viable: v0² ≤ 2·20·1
@pytest.mark.parametrize("dt", [0.001, 0.005])
def test_position_bound_stops_before_the_limit(robot, v0, dt):
    """Drive one joint at its upper acceleration bound (the most aggressive admissible motion)."""
    a_max = 20.0
    lim = JointPositionLimit(robot, dt=dt, a_max=a_max, joints=["yumi_joint_1_l"])
    q_max, q_min = lim.q_max[0], lim.q_min[0]
    q, v = q_max - 1.0, v0
    qs = []
    for _ in range(int(3.0 / dt)):
        lo, hi = lim.acceleration_bounds(np.array([q]), np.array([v]))
        assert lo[0] <= hi[0]
        acc = hi[0]
        q, v = q + dt * v + 0.5 * dt * dt * acc, v + dt * acc  # exact for constant acc over dt
        qs.append(q)
    assert max(qs) <= q_max + 1e-12
    assert q_max - qs[-1] < 0.05 and abs(v) < 0.5  # it got close and (nearly) stopped
    assert q > q_min


def test_position_bound_brakes_at_most_a_max_from_a_viable_state(robot):
    lim = JointPositionLimit(robot, dt=0.001, a_max=10.0, joints=["yumi_joint_1_l"])
    q_max = lim.q_max[0]
    # on the braking curve v = √(2 a (q_max − q)): the bound asks for no more than a_max of braking
    for d in (0.5, 0.1, 0.01):
        v = np.sqrt(2 * 10.0 * d)
        lo, hi = lim.acceleration_bounds(np.array([q_max - d]), np.array([v]))
        assert -10.0 - 1e-9 <= hi[0] <= 0.0
    # beyond the curve (cannot stop in time): full braking is still admissible
    lo, hi = lim.acceleration_bounds(np.array([q_max - 0.1]), np.array([5.0]))
    assert hi[0] == -10.0 and lo[0] <= hi[0]


@pytest.mark.parametrize("integrator", ["semi_implicit", "exact", "explicit"])
@pytest.mark.parametrize("realised", [1.0, 0.875, 0.5])  # fraction of a commanded deceleration achieved
@pytest.mark.parametrize("dt", [0.001, 0.005])
def test_position_bound_holds_on_a_plant_that_differs(robot, integrator, realised, dt):
    """The bound holds whatever the plant's integrator, and when the plant achieves only a fraction
    (down to the brake_fraction κ = 0.5) of a commanded deceleration (implicit damping, model error):
    a joint driven at the bound from well inside, at speeds up to the viability limit, never passes
    q_max and stops near it.  (The former bound, planned for exact integration and exact deceleration,
    passed q_max by up to 4.6 mrad on a damped MuJoCo wrist.)"""
    a_max = 20.0
    lim = JointPositionLimit(robot, dt=dt, a_max=a_max, joints=["yumi_joint_1_l"])
    q_max = lim.q_max[0]
    worst = -np.inf
    for v0 in (0.0, 1.0, 3.0):
        q, v = q_max - 1.0, v0
        for _ in range(int(3.0 / dt)):
            lo, hi = lim.acceleration_bounds(np.array([q]), np.array([v]))
            assert lo[0] <= hi[0]
            acc = hi[0] * (realised if hi[0] < 0 else 1.0)
            v_new = v + dt * acc
            if integrator == "semi_implicit":  # MuJoCo's Euler
                q = q + dt * v_new
            elif integrator == "exact":
                q = q + dt * 0.5 * (v + v_new)
            else:
                q = q + dt * v
            v = v_new
            worst = max(worst, q - q_max)
        assert q_max - q < 0.05 and abs(v) < 0.5  # it got close and (nearly) stopped
    assert worst <= 1e-12, worst


def test_position_bound_margin_and_bad_arguments(robot):
    lim = JointPositionLimit(robot, dt=0.001, a_max=20.0, joints=["yumi_joint_1_l"], margin=0.01)
    q_max = lim.q_max[0]
    lo, hi = lim.acceleration_bounds(np.array([q_max - 0.01]), np.array([0.0]))
    assert hi[0] <= 0.0  # at the margin: no further
    with pytest.raises(ConfigError, match="brake_fraction"):
        JointPositionLimit(robot, dt=0.001, a_max=20.0, brake_fraction=0.0)
    with pytest.raises(ConfigError, match="margin"):
        JointPositionLimit(robot, dt=0.001, a_max=20.0, margin=-1.0)
    with pytest.raises(ConfigError, match="leaves no range"):
        JointPositionLimit(robot, dt=0.001, a_max=20.0, joints=["yumi_joint_1_l"], margin=10.0)


def test_velocity_bound(robot):
    lim = JointVelocityLimit(robot, dt=0.01)
    kin = robot.update(np.zeros(14), np.full(14, 1.0))
    C, l, u = lim.bounds(kin, None)
    vmax = np.asarray(robot.model.velocityLimit)
    np.testing.assert_allclose(1.0 + 0.01 * u, vmax)
    np.testing.assert_allclose(1.0 + 0.01 * l, -vmax)


def test_bad_limits_are_named(robot):
    with pytest.raises(ConfigError, match="velocity: dt must be a finite number > 0"):
        JointVelocityLimit(robot, dt=0.0)
    with pytest.raises(ConfigError, match="effort: tau_max must be finite and > 0"):
        EffortLimit(robot, tau_max=-1.0)
    with pytest.raises(ConfigError, match="position: a_max"):
        JointPositionLimit(robot, dt=0.001, a_max=float("nan"))
