"""UK on a closed chain from its model file (issue 23, item 4): the planar five-bar of mjcf/five_bar.xml, two
actuated base joints, three passive.  The loop is UK's top level without the user writing it, the passive
joints get exactly zero torque, and the torque realises the planned acceleration on the rigid closed chain:
checked against a KKT of the constrained dynamics of our own, M v̇ + h + D v = τ + J_cᵀλ, J_c v̇ = −J̇_c v."""

from __future__ import annotations

import numpy as np
import pytest

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.coupling import FrameTask
from cmstack.models.errors import ConfigError
from cmstack.models.limits import EffortLimit
from cmstack.models.loops import ClosureSet
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle


@pytest.fixture(scope="module")
def robot():
    return Robot.from_mjcf("mjcf/five_bar.xml")


def _ctl(robot, **kw):
    q0 = robot.assemble()
    p0 = robot.update(q0, 0 * q0).frame("ee").T.translation
    ee = FrameTask(
        robot, "ee", Circle(p0, 0.04, np.pi, R=np.eye(3)), kp=400, kd=40, rows="position", name="ee"
    )
    return UdwadiaKalabaController(robot, levels=[[ee]], warn_free_dof=False, **kw)


def _states(robot, n=5, seed=3):
    """Assembled configurations near the initial one, with velocities that keep the loop closed."""
    rng = np.random.default_rng(seed)
    cs = ClosureSet(robot.loops)
    out = []
    for _ in range(n):
        q = robot.assemble(robot.q_initial + 0.15 * rng.normal(size=robot.nq))
        J = cs.jacobian(q)
        _, s, Vt = np.linalg.svd(J)
        N = Vt[int(np.sum(s > 1e-9 * s[0])) :].T
        out.append((q, N @ rng.normal(size=N.shape[1])))
    return out


def _constrained_vdot(robot, q, v, tau):
    """The rigid closed chain's acceleration under τ: [M J_cᵀ; J_c 0] [v̇; −λ] = [τ − h − D v; −J̇_c v]
    (least squares on the rank-deficient planar rows)."""
    kin = robot.update(q, v)
    cs = ClosureSet(robot.loops)
    J, jdv = cs.jacobian_and_jdot_v(q, v)
    n, m = robot.nv, J.shape[0]
    K = np.block([[kin.M, J.T], [J, np.zeros((m, m))]])
    rhs = np.concatenate([tau - kin.h - robot.damping * v, -jdv])
    return np.linalg.lstsq(K, rhs, rcond=1e-12)[0][:n]


def test_loop_is_the_top_level_and_passive_joints_get_no_torque(robot):
    ctl = _ctl(robot, limits=[])
    assert [t.name for t in ctl.levels[0].tasks] == ["tip_loop"]
    assert sorted(ctl.passive_joints) == ["elbow_l", "elbow_r", "tip"]
    for q, v in _states(robot):
        tau = ctl(0.3, q, v)
        assert np.all(tau[ctl._passive] == 0.0)
        assert np.abs(tau).max() > 1e-3  # the actuated joints do the work


def test_torque_realises_the_planned_acceleration_on_the_closed_chain(robot):
    """The independent check: the constrained forward dynamics under UK's τ give UK's v̇ (to round-off)."""
    ctl = _ctl(robot, limits=[])
    for q, v in _states(robot):
        tau = ctl(0.3, q, v)
        vdot = _constrained_vdot(robot, q, v, tau)
        np.testing.assert_allclose(vdot, ctl.info.vdot, rtol=1e-8, atol=1e-8 * (1 + np.abs(vdot).max()))
        lam = ctl.loop_reaction()
        assert lam is not None and np.all(np.isfinite(lam))


def test_effort_limit_bounds_the_torque_actually_sent(robot):
    free = _ctl(robot, limits=[])
    q, v = _states(robot, 1, seed=8)[0]
    v = 20 * v  # a fast state: large torques
    peak = np.abs(free(0.3, q, v)).max()
    lim = 0.6 * peak
    ctl = _ctl(robot, limits=[EffortLimit(robot, tau_max=lim, joints=["base_l", "base_r"])])
    tau = ctl(0.3, q, v)
    assert ctl.info.limits_active
    assert np.abs(tau).max() <= lim * (1 + 1e-6)
    assert np.all(tau[ctl._passive] == 0.0)
    kin = robot.update(q, v)  # the binding limit is named on the sent torque
    bind = ctl.binding_limits(kin, kin.h + robot.damping * v, ctl.info.vdot)
    assert bind and all("base_" in b for b in bind), bind
    # the loop still holds: the constrained dynamics under the limited τ give the planned v̇
    np.testing.assert_allclose(
        _constrained_vdot(robot, q, v, tau),
        ctl.info.vdot,
        rtol=1e-6,
        atol=1e-6 * (1 + np.abs(ctl.info.vdot).max()),
    )


def test_default_effort_limits_concern_the_actuated_joints_only(robot):
    """The README's one-liner, ``UdwadiaKalabaController(robot, levels=[[tip]])`` (torque_limits on by
    default): five_bar.xml gives effort limits (ctrlrange ±5 N·m) to its two motors only, and the three
    passive joints, with none, are no error.  The default limit bounds the actuated joints at the file's
    values; an actuated joint without a limit is still named."""
    ctl = _ctl(robot)  # no limits= argument
    (lim,) = ctl.limits
    assert isinstance(lim, EffortLimit)
    assert sorted(robot.joint_names[i] for i in lim.idx) == ["base_l", "base_r"]
    np.testing.assert_array_equal(lim.tau_max, [5.0, 5.0])
    # inactive on ordinary states: the same torque as without limits
    free = _ctl(robot, limits=[])
    for q, v in _states(robot, 3):
        np.testing.assert_array_equal(ctl(0.3, q, v), free(0.3, q, v))
    # active on a fast state: |τ| ≤ 5 N·m on the motors, zero on the passive joints
    q, v = _states(robot, 1, seed=8)[0]
    v = 40 * v
    assert np.abs(free(0.3, q, v)).max() > 5.0
    tau = ctl(0.3, q, v)
    assert ctl.info.limits_active
    assert np.abs(tau).max() <= 5.0 * (1 + 1e-6)
    assert np.all(tau[ctl._passive] == 0.0)
    saved = robot.effort_limit.copy()
    try:
        robot.effort_limit[robot.joint_index("base_r")] = np.inf
        with pytest.raises(
            ConfigError, match=r"joints \['base_r'\] have no positive finite effort limit in "
        ):
            _ctl(robot)
    finally:
        robot.effort_limit[:] = saved


def test_closed_loop_on_the_mujoco_plant_tracks_the_circle(robot):
    from cmstack.sim.mjcf_plant import plant_from_mjcf
    from cmstack.sim.runner import simulate

    ctl = _ctl(robot, limits=[])
    plant = plant_from_mjcf(robot, q0=robot.assemble(), sim_dt=1e-3)
    sent = []
    set_torque = plant.set_torque
    plant.set_torque = lambda tau: (sent.append(np.abs(tau[ctl._passive]).max()), set_torque(tau))
    run = simulate(plant, ctl, duration=2.0, control_dt=1e-3, progress=False)
    E = run.error_arrays()["ee"]
    t = np.arange(len(E)) * 1e-3
    assert np.linalg.norm(E[t > 1.0], axis=1).max() <= 1e-4  # measured 1.9e-5 m
    assert max(sent) == 0.0
