"""PIDC with the passive-joint law on the series-parallel manipulator ([Dastranj] plant, [Aghili] law)."""
import numpy as np
import pytest

from cmstack.models.partition import PartitionModel
from cmstack.models.series_parallel_aux import TriangleConstraint, lift
from cmstack.models.partition import TriangleMap
from cmstack.models.projection import project
from cmstack.scenarios._common import default_config, run_scenario
from cmstack.scenarios.series_parallel import NAME, build_pidc, run

RNG = np.random.default_rng(1)


def test_pidc_torque_equals_minimal_coordinate_inverse_dynamics():
    """Three actuators for three DoF: the passive-joint PIDC torque (60–62) in x = (φ, θ, ζ, δ) is unique
    and must equal the partition model's Q_a = Γ q̈ + h − Q_e (13) for the same acceleration — an
    independent formulation (per-body Jacobians, E(q), Ė q̇)."""
    cfg = default_config(NAME)
    pm = PartitionModel(cfg["urdf"], L0=cfg["L0"], l0=cfg["l0"], delta_range=cfg["delta_range"])
    for _ in range(5):
        q = np.array([RNG.uniform(-1, 1), RNG.uniform(-0.5, 0.8), RNG.uniform(0.03, 0.17)])
        v = RNG.normal(size=3) * np.array([0.5, 0.5, 0.05])
        qdd = RNG.normal(size=3)
        ref = lambda t, q=q, v=v, a=qdd: (q, v, a)         # zero error: u = q̈_d
        ctl = build_pidc(cfg, ref)
        tau = ctl(0.0, q, v)
        assert ctl.pidc.info.solvable and abs(ctl.pidc.info.passive_residual) < 1e-9
        np.testing.assert_allclose(tau, pm.inverse_dynamics(q, v, qdd), rtol=1e-7, atol=1e-7)


def test_triangle_constraint_jacobian_and_drift_by_finite_differences():
    tm = TriangleMap(0.35, 0.425, (0.0, 0.2))
    c = TriangleConstraint(tm)
    x, xd = lift(tm, np.array([0.2, 0.3, 0.1]), np.array([0.1, -0.2, 0.05]))
    assert abs(c.phi(x)[0]) < 1e-15 and abs(c.jacobian(x) @ xd)[0] < 1e-14
    eps = 1e-7
    J_fd = np.array([(c.phi(x + eps * e) - c.phi(x - eps * e)) / (2 * eps) for e in np.eye(4)]).T
    np.testing.assert_allclose(c.jacobian(x), J_fd, atol=1e-7)
    Adot = (c.jacobian(x + eps * xd) - c.jacobian(x - eps * xd)) / (2 * eps)
    np.testing.assert_allclose(c.jdot_v(x, xd), Adot @ xd, atol=1e-7)
    assert project(c.jacobian(x)).rank == 1


@pytest.mark.slow
def test_series_parallel_pidc_closed_loop_shortened(tmp_path):
    m, _ = run_scenario(NAME, run, out=tmp_path, overrides={"controller": "pidc", "duration": 3.0})
    assert m["rmse_steady_phi_rad"] <= 0.01
    assert m["rmse_steady_theta_rad"] <= 0.01
    assert m["rmse_steady_delta_m"] <= 0.002
    assert m["loop_closure_error_max_m"] <= 1e-3
