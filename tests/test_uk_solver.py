"""Issue 13, solver rows: each test reproduces the former failure with the frozen former controller
(tests/_uk_reference.py) and shows that the current one passes.

row 11  a target out of reach was blamed on the effort limits;
row 12  ProxSuite's warm start returned PRIMAL_INFEASIBLE on strictly feasible problems when one
        controller was called on unrelated consecutive states;
row 13  in strict mode Q_c left out the task's share of the KKT multipliers."""

import warnings

import _uk_reference as reference
import numpy as np
import pytest
from _yumi_states import recorded_states, thesis_setup

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.errors import InfeasibleError, StackError
from cmstack.scenarios.yumi_dual_arm import initial_state
from cmstack.sim.plant import MujocoPlant

warnings.filterwarnings("ignore", message="UdwadiaKalabaController: the tasks constrain")


def _run_until_failure(make, cfg, robot, steps=200):
    plant = MujocoPlant(cfg["mjcf_virtual"], robot.joint_names, sim_dt=cfg["control_dt"])
    plant.reset(initial_state(cfg, robot))
    ctl = make()
    for _ in range(steps):
        t = plant.time
        q, v = plant.state()
        plant.set_torque(ctl(t, q, v))
        plant.step()


def test_row11_target_out_of_reach_is_named():
    cfg, robot, c, u = thesis_setup(traj_center=[2.0, 0.2, 0.5])
    with pytest.raises(InfeasibleError, match="raise the limits"):  # the former message
        _run_until_failure(lambda: reference.UdwadiaKalabaController(robot, [c], [u], omega=50.0), cfg, robot)
    with pytest.raises(InfeasibleError) as exc:
        _run_until_failure(lambda: UdwadiaKalabaController(robot, [c], [u], omega=50.0), cfg, robot)
    msg = str(exc.value)
    assert "the target of 'E1' is out of reach" in msg and "outside the workspace" in msg
    assert "raise the limits" not in msg


def test_row11_effort_limits_too_low_are_named():
    """The thesis set-up (target in reach, no singularity) with 20 N·m limits: the limits are blamed."""
    cfg, robot, c, u = thesis_setup()
    t, q, v = recorded_states()[0]
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=50.0)
    ctl.tau_max = np.full(14, 5.0)
    with pytest.raises(InfeasibleError, match="effort limits are too low for this motion") as exc:
        ctl(t, q, 3 * v + 1.0)
    assert "Cause:" not in str(exc.value)


def _unrelated_feasible_problems(robot, c, u, n=200, tau=300.0, seed=0):
    """Random states whose QP (effort limits active) a fresh solver solves."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n // 5:
        q, v, t = rng.uniform(-2, 2, 14), rng.normal(size=14), rng.uniform(0, 2)
        fresh = UdwadiaKalabaController(robot, [c], [u], omega=50.0, warn_free_dof=False)
        fresh.tau_max = np.full(14, tau)
        try:
            tf = fresh(t, q, v)
        except StackError:
            continue
        if np.max(np.abs(tf)) > tau * (1 - 1e-6):  # a limit is active: the QP was needed
            out.append((t, q, v, tf))
    return out


def test_row12_warm_start_on_unrelated_states_is_retried_cold():
    cfg, robot, c, u = thesis_setup()
    problems = _unrelated_feasible_problems(robot, c, u)
    old = reference.UdwadiaKalabaController(robot, [c], [u], omega=50.0)
    old.tau_max = np.full(14, 300.0)
    failed_before = 0
    for t, q, v, _ in problems:
        try:
            old(t, q, v)
        except StackError:
            failed_before += 1
    assert failed_before > 0  # the former failure is reproduced
    new = UdwadiaKalabaController(robot, [c], [u], omega=50.0, warn_free_dof=False)
    new.tau_max = np.full(14, 300.0)
    for t, q, v, tf in problems:
        tau = new(t, q, v)  # never raises
        np.testing.assert_allclose(tau, tf, rtol=1e-5, atol=1e-5 * 300.0)
    # conditioned and scaled (controllers/qp.py) the warm starts now succeed on these states (0 retries were
    # needed, against the failures above); a retry, when one happens, is counted by the controller
    assert new.cold_retries == new._qp.cold_retries


def test_row13_strict_Qc_equals_the_stacked_kkt_multipliers():
    """Strict mode, constraints then the task then Gauss: the stacked KKT system
    [M Eᵀ; E 0][v̇; λ] = [Q; f], E = [A_c; √ω A_u]; Q_c = −A_cᵀ λ_c."""
    cfg, robot, c, u = thesis_setup(priority="strict")
    new = UdwadiaKalabaController(robot, [c], [u], omega=cfg["omega"], priority="strict", warn_free_dof=False)
    old = reference.UdwadiaKalabaController(robot, [c], [u], omega=cfg["omega"], priority="strict")
    worst_old = worst_new = 0.0
    for t, q, v in recorded_states("strict")[::20]:
        new(t, q, v)
        old(t, q, v)
        kin = robot.update(q, v)
        Q = -kin.h - robot.damping * v
        Ac, bc = c.compute(kin, t)
        Au, bu = u.compute(kin, t)
        sw = np.sqrt(cfg["omega"])
        E, f = np.vstack([Ac, sw * Au]), np.r_[bc, sw * bu]
        K = np.block([[kin.M, E.T], [E, np.zeros((12, 12))]])
        sol = np.linalg.solve(K, np.r_[Q, f])
        Qc = -Ac.T @ sol[14:20]
        scale = np.linalg.norm(Qc)
        worst_new = max(worst_new, np.linalg.norm(new.info.Qc - Qc) / scale)
        worst_old = max(worst_old, np.linalg.norm(old.info.Qc - Qc) / scale)
        np.testing.assert_allclose(
            kin.M @ new.info.vdot, Q + new.info.Qc + new.info.Qu, atol=1e-7 * (1 + scale)
        )
    assert worst_old > 0.1  # the former Q_c was off
    assert worst_new < 1e-8
