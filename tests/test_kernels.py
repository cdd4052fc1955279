"""Compiled control-step kernels (controllers/kernels.py) against the NumPy formulations they replaced,
on the states of closed-loop runs: the same torques and reported quantities to 1e-9 relative."""
import numpy as np
import pytest

from cmstack.controllers.dac import Obstacle, TaskSpaceLaw
from cmstack.controllers.kernels import cholesky_inplace, cholesky_solve_inplace
from cmstack.models.tensor_chain import TensorChain
from test_dac import bent_state, ee_traj


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


def test_cholesky_kernels_match_numpy():
    rng = np.random.default_rng(3)
    for m in (1, 3, 18):
        B = rng.normal(size=(m, m + 2))
        S = B @ B.T
        L = S.copy()
        assert cholesky_inplace(L, m)
        np.testing.assert_allclose(np.tril(L), np.linalg.cholesky(S), rtol=0, atol=1e-12 * np.abs(S).max())
        b = rng.normal(size=m)
        x = b.copy()
        cholesky_solve_inplace(L, m, x)
        assert _rel(S @ x, b) < 1e-10
    S = np.array([[1.0, 2.0], [2.0, 1.0]])          # indefinite: refused, as dpotrf
    assert not cholesky_inplace(S.copy(), 2)


@pytest.mark.parametrize("fixed,law_name,kd_mass,obstacles", [
    (False, "rotvec", 15.0, True), (True, "rotvec", 15.0, True), (False, "euler123", 15.0, True),
    (False, "rotvec", None, True), (True, "euler123_conservative", None, False)])
def test_dac_law3_kernel_equals_numpy_closed_form(fixed, law_name, kd_mass, obstacles):
    """``TaskSpaceLaw._compiled_step`` (the default step) vs the frozen NumPy ``_closed_form_step`` on a
    closed-loop run that passes obstacles (points entering a sphere's core, then out of range): τ, ν_r, s,
    e_task, V, V̇_cl, U_o and the clearance."""
    rng = np.random.default_rng(41)
    kw = dict(gravity=np.array([0.0, 0.0, -9.81]), spring_law=law_name)
    free = TensorChain.rods(5, 0.4, 0.04, 1.2, [1.5, 2.0, 2.5], **kw)
    s = bent_state(free, rng, speed=0.3)
    ch = free if not fixed else TensorChain.rods(5, 0.4, 0.04, 1.2, [1.5, 2.0, 2.5], fixed_base=True,
                                                 base_pose=(s.pos[0].copy(), s.quat[0].copy()), **kw)
    s = ch.project(s)
    pts = [[-0.2, 0, 0], [-0.1, 0, 0], [0, 0, 0], [0.1, 0, 0], [0.2, 0, 0]]
    obs = [Obstacle(s.pos[2] + s.R[2] @ np.array([0.2, 0.0, 0.0]) + np.array([0.0, 0.0, 0.06]), 0.05),
           Obstacle(s.pos[1] + np.array([0.0, 0.15, 0.0]), 0.05)] if obstacles else []
    law = TaskSpaceLaw(ch, ee_traj(s.pos[-1] + np.array([0.03, -0.02, 0.02]), s.quat[-1]), 3.0, 0.4, 6.0, 6.0,
                       obstacles=obs, obstacle_gain=2e-5, obstacle_range=0.15, kd_mass=kd_mass, obstacle_points=pts)
    t, dt, dmin, worst = 0.0, 1e-3, np.inf, 0.0
    for _ in range(60):
        tau = law._compiled_step(t, s)
        got = (law.info.nu_r, law.info.s, law.info.e_task, law.info.V, law.info.Vdot_cl, law.potential, law.clearance)
        ref_tau = law._closed_form_step(t, s)
        ref = (law.info.nu_r, law.info.s, law.info.e_task, law.info.V, law.info.Vdot_cl, law.potential, law.clearance)
        worst = max(worst, _rel(tau, ref_tau))
        for a, b in zip(got[:5], ref[:5]):
            assert _rel(a, b) <= 1e-9
        assert abs(got[5] - ref[5]) <= 1e-9 * max(abs(ref[5]), 1e-12) and got[6] == pytest.approx(ref[6], rel=1e-12)
        dmin = min(dmin, law.clearance)
        s, _ = ch.step(s, dt, tau, t=t)
        t += dt
    assert worst <= 1e-9
    if obstacles:
        assert dmin < law.clip                  # the quartic core was exercised
    assert np.isfinite(law.info.V) and np.abs(tau).max() < 1e4
