"""controllers/uk_robust.py: integral action on the coupling (a new law beside the thesis law)."""
from __future__ import annotations

import numpy as np
import pytest

from cmstack.controllers.uk_robust import IntegralTask
from cmstack.models.coupling import ErrorDynamics, Task
from cmstack.models.errors import ConfigError
from cmstack.scenarios._common import run_scenario
from cmstack.scenarios import yumi_dual_arm


class Ramp(Task):
    """A 2-row task with e(t) = (t, −2t) and fixed A, b: the integral of e is (t²/2, −t²)."""

    def __init__(self):
        self.name, self.kp, self.kd, self.rows = "ramp", 100.0, 20.0, slice(0, 2)

    def error_dynamics(self, kin, t):
        e = np.array([t, -2 * t])
        return ErrorDynamics(np.eye(2), np.zeros(2), np.zeros(2), e)


def test_integral_is_the_rectangle_sum_of_the_error_once_per_step():
    it = IntegralTask(Ramp(), ki=50.0, z_max=10.0)
    dt, n = 0.01, 200
    for k in range(n + 1):
        for _ in range(3):                 # several calls per step (levels, retries) must not wind up
            A, b = it.compute(None, k * dt)
    T = n * dt
    z_rect = np.array([1.0, -2.0]) * dt * dt * n * (n - 1) / 2      # Σ e(t_{k-1}) Δt
    assert np.allclose(it.z, z_rect, rtol=1e-12)
    assert np.allclose(it.z, [T * T / 2, -T * T], rtol=0.01)        # → ∫ e dt
    b0 = Ramp().compute(None, T)[1]
    assert np.allclose(b, b0 - 50.0 * it.z)


def test_anti_windup_and_stability_bound():
    it = IntegralTask(Ramp(), ki=50.0, z_max=0.1)
    for k in range(1000):
        it.compute(None, k * 0.01)
    assert np.allclose(np.abs(it.z), 0.1)
    with pytest.raises(ConfigError, match="ramp.*kd·kp = 2000"):
        IntegralTask(Ramp(), ki=2000.0)


def test_robust_law_removes_most_of_the_mass_error(tmp_path):
    """Plant masses ±20 % (seed 0), virtual plant, thesis gains: the integral on the coupling cuts the
    converged coupling error well below the thesis law's, and keeps the task error within its target."""
    ov = {"perturbation.mass_rel": 0.2, "seed": 0}
    thesis = run_scenario(yumi_dual_arm.NAME, yumi_dual_arm.run, overrides=ov, out=tmp_path / "t")[0]
    robust = run_scenario(yumi_dual_arm.NAME, yumi_dual_arm.run, overrides={**ov, "controller": "uk_robust"},
                          out=tmp_path / "r")[0]
    assert robust["qp_failures"] == 0
    assert robust["constraint_error_converged"] < thesis["constraint_error_converged"] / 2
    assert robust["task_error_converged"] <= 0.0062
