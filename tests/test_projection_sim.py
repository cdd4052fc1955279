"""Projection-method simulator (sim/projection_sim.py): energy, constraint, singular crossings."""

import numpy as np
import pytest

from cmstack.models.errors import JointMapError, StateError
from cmstack.models.robot import Robot
from cmstack.sim.projection_sim import ProjectionPlant


@pytest.fixture(scope="module")
def robot():
    return Robot.from_urdf(
        "urdf/slider_crank.urdf", loops="urdf/slider_crank.loops.toml"
    )  # the rail, rod passive


def test_unforced_energy_and_constraint_through_singularities(robot):
    """Unforced, undamped slider-crank spun through full turns (2 s, ~4 singular crossings):
    energy is conserved, φ = 0 to NR tolerance, and the motion stays on the normal branch θ₂ = −2θ₁."""
    p = ProjectionPlant(robot, None, sim_dt=1e-3, damping=False)
    p.reset(np.zeros(2), np.array([12.0, -24.0]))
    E0 = p.energy()
    worst_E, worst_phi, crossings = 0.0, 0.0, 0
    prev = np.cos(p.q[0])
    for _ in range(2000):
        p.step(1)
        worst_E = max(worst_E, abs(p.energy() - E0) / abs(E0))
        worst_phi = max(worst_phi, p.equality_violation())
        c = np.cos(p.q[0])
        crossings += int(np.sign(c) != np.sign(prev))
        prev = c
    assert crossings >= 4
    assert worst_E <= 1e-4
    assert worst_phi <= 1e-9
    np.testing.assert_allclose(p.q[1], -2 * p.q[0], atol=1e-6)


def test_reset_restores_constraint_and_projects_velocity(robot):
    p = ProjectionPlant(robot, None)
    p.reset(np.array([0.3, -0.5]), np.array([1.0, 1.0]))
    assert p.equality_violation() <= 1e-12
    A = p.c.jacobian(p.q)
    assert abs(A @ p.v).max() < 1e-12


def test_passive_joint_torque_refused(robot):
    p = ProjectionPlant(robot, None)
    p.reset(np.zeros(2))
    with pytest.raises(JointMapError):
        p.set_torque(np.array([1.0, 0.5]))
    with pytest.raises(StateError):
        p.set_torque(np.array([np.nan, 0.0]))
