"""Compiled control-step kernels (controllers/kernels.py) against the NumPy formulations they replaced,
on the states of closed-loop runs: the same torques and reported quantities to 1e-9 relative."""

import numpy as np
import pytest
from test_dac import obstacle_run

from cmstack.controllers.dac import PortLaw
from cmstack.controllers.kernels import cholesky_inplace, cholesky_solve_inplace


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
    S = np.array([[1.0, 2.0], [2.0, 1.0]])  # indefinite: refused, as dpotrf
    assert not cholesky_inplace(S.copy(), 2)


def _reported(law):
    """What law (III) reports of its last step: ν_r, s, e_task, V, V̇_cl, U_o and the clearance."""
    info = law.info
    return (info.nu_r, info.s, info.e_task, info.V, info.Vdot_cl, law.potential, law.clearance)


@pytest.mark.parametrize(
    "fixed,law_name,kd_mass,obstacles",
    [
        (False, "rotvec", 15.0, True),
        (True, "rotvec", 15.0, True),
        (False, "euler123", 15.0, True),
        (False, "rotvec", None, True),
        (True, "euler123_conservative", None, False),
    ],
)
def test_dac_law3_kernel_equals_numpy_closed_form(fixed, law_name, kd_mass, obstacles):
    """``TaskSpaceLaw._compiled_step`` (the default step) vs the generic path of the same law
    (``PortLaw.__call__`` with ``TaskSpaceLaw.reference``: dense ℳ, KKT solves of (*), ``TensorChain.known_force``)
    on a closed-loop run that passes obstacles (points entering a sphere's core, then out of range): τ, ν_r, s,
    e_task, V, V̇_cl, U_o and the clearance."""
    ch, s, law = obstacle_run(law_name, fixed, kd_v=3.0, kd_w=0.4, kd_mass=kd_mass, obstacles=obstacles)
    t, dt, dmin, worst = 0.0, 1e-3, np.inf, 0.0
    for _ in range(60):
        tau = law._compiled_step(t, s)
        got = _reported(law)
        ref_tau = PortLaw.__call__(law, t, s)
        ref = _reported(law)
        worst = max(worst, _rel(tau, ref_tau))
        for a, b in zip(got[:5], ref[:5]):
            assert _rel(a, b) <= 1e-9
        assert abs(got[5] - ref[5]) <= 1e-9 * max(abs(ref[5]), 1e-12) and got[6] == pytest.approx(
            ref[6], rel=1e-12
        )
        dmin = min(dmin, law.clearance)
        s, _ = ch.step(s, dt, tau, t=t)
        t += dt
    assert worst <= 1e-9
    if obstacles:
        assert dmin < law.clip  # the quartic core was exercised
    assert np.isfinite(law.info.V) and np.abs(tau).max() < 1e4


# ---------------------------------------------------------------------------------------- robust law (18)
def _series_parallel_states(cfg, traj, ctl, n):
    from cmstack.scenarios.series_parallel import build_plant, plant_state, reset_plant

    plant = build_plant(cfg)
    reset_plant(plant, cfg, traj(0.0)[0] + np.asarray(cfg["initial_error"]))
    n_sub = max(1, int(round(cfg["control_dt"] / plant.dt)))
    out = []
    for _ in range(n):
        t = plant.time
        q, v = plant_state(plant)
        out.append((t, q.copy(), v.copy()))
        plant.set_torque(ctl(t, q, v))
        plant.step(n_sub)
    return out


@pytest.mark.parametrize("actuator,sinus", [(False, True), (True, True), (False, False)])
def test_robust18_kernels_equal_numpy_law(actuator, sinus):
    """The compiled law (18) (``robust18_pre`` → RNEA → ``robust18_post``) vs the NumPy formulation
    (``_numpy_step``) on the states of a closed-loop run of the default series-parallel scenario (the
    sinusoid evaluated inside the kernel, or a generic trajectory sampled in Python): Q_a, e, s, the model
    and robust parts to 1e-9 relative; bad states still refused by name."""
    from cmstack.models.errors import StateError
    from cmstack.models.trajectory import FromFunction
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.series_parallel import build_robust, make_trajectory

    cfg = dict(default_config("series_parallel"), model_actuator_bodies=actuator)
    sin = make_trajectory(cfg)
    traj = sin if sinus else FromFunction(lambda t: tuple(sin(t)))
    fast, ref = build_robust(cfg, traj), build_robust(cfg, traj)
    assert fast._sinus == sinus
    states = _series_parallel_states(cfg, traj, ref, 400)
    for t, q, v in states[::4]:
        Q, Qr = fast(t, q, v), ref._numpy_step(t, q, v)
        assert _rel(Q, Qr) <= 1e-9
        for k in ("e", "s", "Q_model", "Q_robust"):
            a, b = getattr(fast.info, k), getattr(ref.info, k)
            assert np.abs(a - b).max() <= 1e-9 * max(np.abs(b).max(), 1e-12), k
    assert np.abs(fast.info.Q_robust).max() > 0  # the robust term was active
    with pytest.raises(StateError, match="stroke"):
        fast(0.0, np.array([0.0, 0.0, 0.5]), np.zeros(3))
    with pytest.raises(StateError, match="non-finite"):
        fast(0.0, np.array([np.nan, 0.0, 0.1]), np.zeros(3))


# ---------------------------------------------------------------------------------------- PIDC, one row
def _same_pidc_step(ctl, ref_pidc, t, q, v, tau, tau_ref):
    """The compiled step's torque and report equal the NumPy step's (same law object state)."""
    assert _rel(tau, tau_ref) <= 1e-9
    a, b = ctl.info, ref_pidc.info
    assert (a.rank, a.status, a.solvable) == (b.rank, b.status, b.solvable)
    assert _rel(a.qdd_des, b.qdd_des) <= 1e-9 and _rel(a.tau_par, b.tau_par) <= 1e-9
    assert abs(a.passive_residual - b.passive_residual) <= 1e-9 * max(1.0, np.abs(b.tau_par).max())


def test_pidc_kernel_equals_numpy_step_slider_crank():
    """Slider-crank closed loop on the projection simulator (spin-up and the first singular crossings, so
    rank-0 steps too): the compiled steps vs ``PIDC._numpy_step`` (the scenario's, on ``robot.loops``: the
    closed-chain step with the plane closure's compiled rows; and the one-row kernel, PIDC given the loop
    itself); the lazily built ``kin`` is the step's."""
    from cmstack.controllers.pidc import PIDC
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.slider_crank import build_controller, load_robot
    from cmstack.sim.projection_sim import ProjectionPlant

    cfg = default_config("slider_crank")
    robot = load_robot(cfg)
    plant = ProjectionPlant(robot, None, sim_dt=cfg["sim_dt_projection"], rank_tol=cfg["rank_tol_sim"])
    plant.reset(np.zeros(2))
    ctl, ref = build_controller(cfg, robot), build_controller(cfg, load_robot(cfg))
    assert ctl._plan is not None and ctl._direct

    def one_row():
        r = load_robot(cfg)
        return PIDC(
            r, r.loops[0], ["crank"], ctl.ref, cfg["kp"], cfg["kv"], rank_tol=cfg["rank_tol_controller"]
        )

    one, one_ref = one_row(), one_row()
    assert one._compiled and one.passive == ["rod"]
    ranks = set()
    for i in range(1300):
        t = plant.time
        q, v = plant.state()
        _same_pidc_step(one, one_ref, t, q, v, one(t, q, v), one_ref._numpy_step(t, q, v))
        tau = ctl(t, q, v)
        _same_pidc_step(ctl, ref, t, q, v, tau, ref._numpy_step(t, q, v))
        ranks.add(ctl.info.rank)
        if i % 200 == 0:
            kin = ctl.kin
            np.testing.assert_array_equal(kin.q, q)
            np.testing.assert_allclose(kin.M, ref.kin.M, rtol=1e-14, atol=0)
        plant.set_torque(tau)
        plant.step(1)
    assert ranks == {0, 1}


def test_pidc_kernel_generic_reference_no_passive_and_svd_fallback():
    """A reference given as a function (sampled in Python), no passive joint, and a state where the closed
    form of (S P)⁺ is ill-conditioned (the constraint row along the tracked coordinate: the SVD path)."""
    from cmstack.controllers.pidc import PIDC
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.slider_crank import load_robot

    cfg = default_config("slider_crank")
    refn = lambda t: (np.array([0.3 * t]), np.array([0.3]), np.array([0.0]))

    def mk():
        robot = load_robot(cfg)
        return PIDC(robot, robot.loops[0], ["crank"], refn, 40.0, 12.0, passive=())

    ctl, ref = mk(), mk()
    assert ctl._compiled and not ctl._sinus
    rng = np.random.default_rng(5)
    for i in range(40):
        q, v = rng.uniform(-2, 2, size=2), rng.normal(size=2)
        if i == 0:
            q = np.array([0.4, np.pi / 2 - 0.4])  # cos(θ₁ + θ₂) = 0: a ∥ e_crank, 1 − ‖w‖² = 0
        tau = ctl(0.01 * i, q, v)
        _same_pidc_step(ctl, ref, 0.01 * i, q, v, tau, ref._numpy_step(0.01 * i, q, v))


def test_householder_q_and_qt_rebuild_the_pivoted_qr():
    """``apply_q`` and ``apply_qt`` (the reflector steps, ``_reflect_all``, in both orders) on ``qr_pivot``'s
    factors: Q R = X Π to 1e-13, Qᵀ Q y = y, and Q is orthogonal, for tall, wide and rank-deficient X."""
    from cmstack.controllers.kernels import ABS, apply_q, apply_qt, qr_pivot

    rng = np.random.default_rng(11)
    for p, s, rank in ((7, 4, 4), (4, 7, 4), (6, 6, 3)):
        X0 = rng.normal(size=(p, rank)) @ rng.normal(size=(rank, s))
        X = X0.copy()
        piv, tau = np.zeros(s, dtype=np.int64), np.zeros(min(p, s))
        r = qr_pivot(X, p, s, 0.0, ABS, piv, tau)
        k = min(p, s)
        R = np.triu(X)[:, :s]
        Q = np.empty((p, p))
        for c in range(p):
            e = np.zeros(p)
            e[c] = 1.0
            apply_q(X, p, k, tau, e)
            Q[:, c] = e
        np.testing.assert_allclose(Q.T @ Q, np.eye(p), rtol=0, atol=1e-13)
        np.testing.assert_allclose(Q @ R, X0[:, piv], rtol=0, atol=1e-13 * np.abs(X0).max())
        y = rng.normal(size=p)
        z = y.copy()
        apply_qt(X, p, k, tau, z)
        np.testing.assert_allclose(z, Q.T @ y, rtol=0, atol=1e-13)
        apply_q(X, p, k, tau, z)
        np.testing.assert_allclose(z, y, rtol=0, atol=1e-13)
        assert r >= rank
