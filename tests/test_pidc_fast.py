"""PIDC's compiled steps (the closed forms for one constraint row: models/projection.project with m = 1,
PIDC._sp_pinv, PIDC.passive_closed_form with ``pr``; the closed-chain step on ``robot.loops``) give the same
torques as the SVD route, to 1e-9 relative, on the states of real closed-loop runs (slider-crank on the
projection simulator, series-parallel on MuJoCo)."""

import numpy as np

from cmstack.controllers.pidc import PIDC
from cmstack.models.lie import pinv, svd_rank
from cmstack.models.projection import project
from cmstack.scenarios._common import default_config
from cmstack.scenarios.slider_crank import build_controller, load_robot
from cmstack.sim.projection_sim import ProjectionPlant


def svd_reference(pidc, t, q, v):
    """τ of PIDC (45), (60–62), (58) with every pseudo-inverse taken by the truncated SVD (the general route)."""
    kin = pidc.robot.update(q, v)
    M, h = kin.M, kin.h + pidc.D * v
    A = pidc.c.jacobian(q)
    n = len(q)
    svd = svd_rank(A, atol=pidc.rank_tol)
    Vr = svd.Vt[: svd.rank].T
    P = np.eye(n) - Vr @ Vr.T
    Cv = -svd.pinv() @ pidc.c.jdot_v(q, v)
    th_d, thd_d, thdd_d = (np.atleast_1d(np.asarray(x, float)) for x in pidc.ref(t))
    u = thdd_d + pidc.kv * (thd_d - pidc.S @ v) + pidc.kp * (th_d - pidc.S @ q)
    qdd = Cv + P @ (pinv(pidc.S @ P, rtol=1e-10) @ (u - pidc.S @ Cv))
    tau_par = P @ (M @ qdd + h)
    Q = np.eye(n) - P
    tau = tau_par - Q @ (pinv(pidc.IB @ Q, rtol=1e-10) @ (pidc.IB @ tau_par))
    b = M @ qdd + h
    if np.linalg.norm(pidc.IB @ tau) > pidc.solve_tol * max(1.0, np.linalg.norm(b)):
        tau = tau * pidc.actuated  # condition (58) fails: the passive torque cannot be applied
    return tau


def rel_err(a, b):
    return float(np.linalg.norm(a - b) / max(1.0, np.linalg.norm(b)))


def test_project_single_row_equals_svd():
    rng = np.random.default_rng(3)
    for _ in range(50):
        a = rng.normal(size=(1, 4)) * 10 ** rng.uniform(-3, 2)
        pr = project(a, 1e-9)
        svd = svd_rank(a, atol=1e-9)
        Vr = svd.Vt[:1].T
        assert pr.rank == 1 and abs(pr.sigma[0] - svd.s[0]) <= 1e-14 * svd.s[0]
        assert np.allclose(pr.P, np.eye(4) - Vr @ Vr.T, rtol=0, atol=1e-14)
        assert np.allclose(pr.A_pinv, svd.pinv(), rtol=1e-13, atol=0)
    pr = project(np.array([[1e-10, 0.0]]), 1e-9)
    assert pr.rank == 0 and np.array_equal(pr.P, np.eye(2)) and np.array_equal(pr.A_pinv, np.zeros((2, 1)))


def test_slider_crank_pidc_equals_svd_route_on_a_closed_loop_run():
    """The scenario's PIDC (on ``robot.loops``: the closed-chain step) drives the plant; PIDC given the loop
    itself (the one-row closed forms) is evaluated on the same states."""
    cfg = default_config("slider_crank")
    robot = load_robot(cfg)
    plant = ProjectionPlant(robot, None, sim_dt=cfg["sim_dt_projection"], rank_tol=cfg["rank_tol_sim"])
    plant.reset(np.zeros(2))
    ctl = build_controller(cfg, robot)
    r1 = load_robot(cfg)
    one = PIDC(r1, r1.loops[0], ["crank"], ctl.ref, cfg["kp"], cfg["kv"], rank_tol=cfg["rank_tol_controller"])
    assert ctl._plan is not None and one._compiled
    worst, ranks = 0.0, set()
    for _ in range(1300):  # 1.3 s: spin-up and the first singular crossings (rank 0 steps)
        t = plant.time
        q, v = plant.state()
        tau = ctl(t, q, v)
        ranks.add(ctl.info.rank)
        worst = max(
            worst,
            rel_err(tau, svd_reference(ctl, t, q, v)),
            rel_err(one(t, q, v), svd_reference(one, t, q, v)),
        )
        plant.set_torque(tau)
        plant.step(1)
    assert ranks == {0, 1}
    assert worst <= 1e-9, worst


def test_series_parallel_pidc_equals_svd_route_on_a_closed_loop_run():
    """The series-parallel PIDC (the arm's closed chain from its MJCF, 3 loop rows of rank 2, ζ and α passive) on
    the states it completes from the measured (φ, θ, δ) of a MuJoCo closed-loop run."""
    from cmstack.scenarios.series_parallel import build_pidc, build_plant, make_trajectory, reset_plant

    cfg = default_config("series_parallel")
    traj = make_trajectory(cfg)
    plant = build_plant(cfg)
    reset_plant(plant, cfg, traj(0.0)[0] + np.asarray(cfg["initial_error"]))
    ctl = build_pidc(cfg, traj)
    worst = 0.0
    for _ in range(600):
        t = plant.time
        q, v = plant.state()
        tau = ctl(t, q, v)
        x, xd = ctl.complete(q, v)
        worst = max(worst, rel_err(tau, svd_reference(ctl.pidc, t, x, xd)[ctl.act]))
        plant.set_torque(tau)
        plant.step(1)
    assert worst <= 1e-9, worst


def test_a_reference_set_after_construction_drives_the_compiled_step():
    """``pidc.ref = f`` is what the compiled step calls (it calls a user function directly): the torques
    then equal those of a controller built with f, and differ from the former reference's."""
    cfg = default_config("slider_crank")
    robot = load_robot(cfg)
    a, b = build_controller(cfg, robot), build_controller(cfg, robot)

    def slow(t):
        return 0.1 * t, 0.1, 0.0

    b.ref = slow
    q, v = np.array([0.3, -0.6]), np.array([0.5, -1.0])
    ref = build_controller(cfg, robot)
    ref.ref = slow
    assert b._plan is not None and rel_err(b(0.4, q, v), ref(0.4, q, v)) <= 1e-12
    assert rel_err(b(0.4, q, v), a(0.4, q, v)) > 1e-3
    assert rel_err(b(0.4, q, v), svd_reference(b, 0.4, q, v)) <= 1e-9
