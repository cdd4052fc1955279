"""PIDC's options for the hybrid motion/force law of the YuMi squeezing a bar ([Aghili] §7.3; issue 29 item 4: the
scenario's own YumiForcePIDC folded into the library's PIDC): ``stabilize`` (the constraint's own error ODE),
``null_damping``, ``ForceLaw(Squeeze(...), measure="plant")``.  Checked against the former class's formulas written
out here in NumPy (an independent formulation of the same law), and by identities: with zero closure gains the
stabilized constraint acceleration is the plain C q̇; the null-space damping leaves the constraint and task rows
exactly met."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.base import SensesPlant
from cmstack.controllers.pidc import PIDC, ForceLaw, Squeeze
from cmstack.models.coupling import FrameTask
from cmstack.models.errors import ConfigError
from cmstack.models.loops import RigidCoupling
from cmstack.models.projection import project
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle

F1, F2 = "yumi_link_7_l", "yumi_link_7_r"
T_AB = pin.SE3(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]), np.array([0.0, -0.4, 0.12]))


@pytest.fixture(scope="module")
def setup():
    robot = Robot("urdf/yumi.urdf")
    coupling = RigidCoupling(robot, F1, F2, T_AB, 1000.0, 33.0, name="coupling")
    task = FrameTask(
        robot, F1, Circle([0.436763, 0.185684, 0.512661], 0.12, 1.5, np.pi / 2), 500.0, 17.0, name="E1"
    )
    return robot, coupling, task


def _states(n, seed=1):
    rng = np.random.default_rng(seed)
    return [(0.01 * k, rng.uniform(-1.5, 1.5, 14), rng.normal(0.0, 0.5, 14)) for k in range(n)]


def _former_law(robot, coupling, task, s, kp_f, ki_f, k_null, steps):
    """The former scenarios/_yumi_force.py YumiForcePIDC, step by step in NumPy: τ and the multipliers λ."""
    integral, t_prev, out = np.zeros(14), None, []
    D = robot.damping
    for t, q, v, f_c in steps:
        kin = robot.update(q, v)
        W, bc = coupling.compute(kin, t)
        At, bt = task.compute(kin, t)
        pr = project(W, 1e-9)
        qdd_c = pr.A_pinv @ bc
        AtP = At @ pr.P
        AtP_pinv = project(AtP, 1e-9).A_pinv
        z = AtP_pinv @ (bt - At @ qdd_c) - (np.eye(14) - AtP_pinv @ AtP) @ (k_null * v)
        b = kin.M @ (qdd_c + pr.P @ z) + kin.h + D * v
        p1, p2 = kin.frame(robot.frame_id(F1)).p, kin.frame(robot.frame_id(F2)).p
        f_d = W.T @ np.r_[s * (p2 - p1) / np.linalg.norm(p2 - p1), np.zeros(3)]
        f_c = f_d.copy() if f_c is None else f_c
        e_f = f_d - f_c
        integral = pr.Q @ (integral + e_f * (0.0 if t_prev is None else t - t_prev))
        t_prev = t
        out.append((b - pr.Q @ (f_d + kp_f * e_f + ki_f * integral), pr.A_pinv.T @ f_c))
    return out


def test_hybrid_force_pidc_equals_the_former_scenario_law(setup):
    robot, coupling, task = setup
    law = ForceLaw(Squeeze(robot, F1, F2, 10.0), 0.5, 20.0, measure="plant")
    ctl = PIDC(robot, coupling, task, force=law, stabilize=True, null_damping=5.0, passive=())
    assert isinstance(ctl, SensesPlant) and ctl.sensed_data == ("qfrc_constraint",) and ctl.plant is None
    plant = SimpleNamespace(
        data=SimpleNamespace(qfrc_constraint=np.zeros(14)), map=SimpleNamespace(dadr=np.arange(14))
    )
    rng = np.random.default_rng(4)
    steps, taus = [], []
    for k, (t, q, v) in enumerate(_states(5)):
        if k == 1:
            ctl.attach_plant(plant)  # before it: f_c = f_d (no sensor yet)
        plant.data.qfrc_constraint = rng.normal(0.0, 3.0, 14)
        steps.append((t, q, v, None if k == 0 else plant.data.qfrc_constraint.copy()))
        taus.append((ctl(t, q, v), ctl.info.lam.copy()))
    for (tau, lam), (tau_ref, lam_ref) in zip(
        taus, _former_law(robot, coupling, task, 10.0, 0.5, 20.0, 5.0, steps)
    ):
        np.testing.assert_allclose(tau, tau_ref, rtol=0, atol=1e-9 * np.abs(tau_ref).max())
        np.testing.assert_allclose(lam, lam_ref, rtol=0, atol=1e-9 * (1 + np.abs(lam_ref).max()))
    d = law.lambda_d.d
    kin = ctl.kin
    p1, p2 = kin.frame(robot.frame_id(F1)).p, kin.frame(robot.frame_id(F2)).p
    np.testing.assert_allclose(d, (p2 - p1) / np.linalg.norm(p2 - p1), atol=1e-15)
    # the constraint error in the coupling's own axes (E2's), as the coupling reports it
    np.testing.assert_allclose(ctl.errors(kin, 0.04)[0]["coupling"], coupling.error(kin, 0.04), atol=1e-15)
    assert not isinstance(PIDC(robot, coupling, task, passive=()), SensesPlant)  # no plant sensor: no ability


def test_stabilize_with_zero_gains_is_the_plain_law_and_null_damping_keeps_the_rows(setup):
    robot, _, task = setup
    c0 = RigidCoupling(robot, F1, F2, T_AB, 0.0, 0.0, name="c0")
    plain = PIDC(robot, c0, task, passive=())
    stab = PIDC(robot, c0, task, passive=(), stabilize=True)
    damped = PIDC(robot, c0, task, passive=(), stabilize=True, null_damping=5.0)
    for t, q, v in _states(4, seed=7):
        tau = plain(t, q, v)
        np.testing.assert_allclose(stab(t, q, v), tau, rtol=0, atol=1e-9 * np.abs(tau).max())
        damped(t, q, v)
        qdd, qdd0 = damped.info.qdd_des, stab.info.qdd_des
        kin = damped.kin
        W, bc = c0.compute(kin, t)
        At, bt = task.compute(kin, t)
        np.testing.assert_allclose(
            W @ qdd, bc, atol=1e-8 * (1 + np.abs(bc).max())
        )  # the constraint rows held
        np.testing.assert_allclose(
            At @ qdd, At @ qdd0, atol=1e-8 * (1 + np.abs(bt).max())
        )  # the task's unchanged
        assert np.abs(qdd - qdd0).max() > 1e-6  # and the damping acts (in the 2 free DoF)
    # a coupling keeping its position rows only: the stabilized law on those rows, its error in its own rows
    pos = RigidCoupling(robot, F1, F2, T_AB, 100.0, 20.0, rows="position", name="pos")
    ctl = PIDC(robot, pos, task, passive=(), stabilize=True)
    t, q, v = _states(1, seed=9)[0]
    ctl(t, q, v)
    W, bc = pos.compute(ctl.kin, t)
    assert W.shape == (3, 14)
    np.testing.assert_allclose(W @ ctl.info.qdd_des, bc, atol=1e-8 * (1 + np.abs(bc).max()))
    np.testing.assert_array_equal(ctl.errors(ctl.kin, t)[0]["pos"], pos.error(ctl.kin, t))
    with pytest.raises(ConfigError, match="null_damping"):
        PIDC(robot, c0, task, passive=(), null_damping=-1.0)
    with pytest.raises(ConfigError, match="measure"):
        ForceLaw(np.zeros(6), measure="sensor")
