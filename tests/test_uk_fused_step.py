"""The fused UK step's plumbing (issue 22 item 6): the lean Pinocchio pass and the kernel's own state
test keep Robot.update's refusals and snapshot; the tasks' gains and targets, copied into the kernel's
tables only when one is set, are never missed (a change in place is refused, an assignment is seen);
the damping and the effort bounds are read where they live; a pickled controller rebinds."""

import math
import pickle

import numpy as np
import pinocchio as pin
import pytest
from _yumi_states import recorded_states, thesis_setup

from cmstack.controllers.udwadia_kalaba import GAUSS, UdwadiaKalabaController
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.errors import StateError
from cmstack.models.limits import EffortLimit
from cmstack.models.trajectory import Circle


@pytest.fixture(scope="module")
def setup():
    cfg, robot, c, u = thesis_setup()
    return cfg, robot, c, u, recorded_states()


def _pair(robot, **kw):
    return (
        UdwadiaKalabaController(robot, fused=True, warn_free_dof=False, **kw),
        UdwadiaKalabaController(robot, fused=False, warn_free_dof=False, **kw),
    )


def _message(f):
    with pytest.raises(StateError) as info:
        f()
    return str(info.value)


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_non_finite_or_absurd_states_are_refused_as_robot_update_refuses_them(setup):
    cfg, robot, c, u, states = setup
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=cfg["omega"], warn_free_dof=False)
    assert ctl._plan is not None
    t, q, v = states[5]
    for qq, vv in (
        (np.where(np.arange(14) == 3, np.nan, q), v),
        (q, np.where(np.arange(14) == 9, np.inf, v)),
        (q * 1e160, v),
        (q[:7], v),
        (list(q), v[None]),
    ):
        expected = _message(lambda: robot.update(qq, vv))
        assert _message(lambda: ctl(t, qq, vv)) == expected
    assert "indices [3]" in _message(lambda: ctl(t, np.where(np.arange(14) == 3, np.nan, q), v))
    tau = ctl(t, list(q), tuple(v))  # lists are converted, as robot.update does
    np.testing.assert_allclose(tau, ctl(t, q, v), rtol=0, atol=0)


def test_snapshot_of_a_fused_step_equals_robot_update_and_goes_stale(setup):
    """ctl.kin after a fused step (the lean pass: no joint accelerations computed) holds the state's q, v,
    M, h and reads every frame as a computeAllTerms snapshot does; after another update it refuses."""
    cfg, robot, c, u, states = setup
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=cfg["omega"], warn_free_dof=False)
    other = type(robot)(robot.path)
    t, q, v = states[40]
    ctl(t, q, v)
    kin = ctl.kin
    ref = other.update(q, v)
    np.testing.assert_array_equal(kin.q, q)
    np.testing.assert_array_equal(kin.v, v)
    np.testing.assert_array_equal(kin.M, ref.M)
    np.testing.assert_allclose(kin.h, ref.h, rtol=1e-14, atol=1e-14)
    for name in ("yumi_link_7_l", "yumi_link_3_r", "yumi_body"):
        a, b = kin.frame(name), ref.frame(name)
        np.testing.assert_allclose(a.J, b.J, rtol=0, atol=1e-15)
        np.testing.assert_allclose(a.acc, b.acc, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(a.twist, b.twist, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(a.p, b.p, rtol=0, atol=1e-15)
    assert ctl.kin is kin
    ctl(*states[41])
    assert ctl.kin is not kin
    with pytest.raises(StateError, match="stale"):
        kin.frame("yumi_link_5_l")
    robot.update(*states[42][1:])
    with pytest.raises(StateError, match="stale"):
        ctl.kin.frame("yumi_link_5_l")


def test_changed_parameters_are_seen_and_changes_in_place_refused(setup):
    cfg, robot, c, u, states = setup
    circle = Circle([0.4, 0.2, 0.5], 0.1, 1.3, 0.4, R=pin.rpy.rpyToMatrix(0.2, 0.1, -0.3))
    hand = FrameTask(robot, "yumi_link_7_l", circle, 40.0, 9.0)
    p = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
    fast, slow = _pair(robot, levels=[[c], [hand], [p, GAUSS]], limits=[EffortLimit(robot)])
    t, q, v = states[30]

    def same():
        a, b = fast(t, q, v), slow(t, q, v)
        assert np.linalg.norm(a - b) <= 1e-9 * np.linalg.norm(b)
        return a

    tau0 = same()
    with pytest.raises(ValueError):
        p.q_ref[0] = 1.0  # read-only: set_target (or an assignment) is the way
    with pytest.raises(ValueError):
        circle.R[0, 0] = 0.5
    p.set_target(states[10][1])
    tau1 = same()
    circle.r = 0.15
    tau2 = same()
    circle.R = pin.rpy.rpyToMatrix(0.0, 0.3, 0.1)
    tau3 = same()
    hand.kd = 5.0
    tau4 = same()
    hand.trajectory = lambda t: (pin.SE3(np.eye(3), np.array([0.4, 0.1, 0.3])), np.zeros(6), np.zeros(6))
    tau5 = same()
    hand.set_target(pin.SE3(np.eye(3), np.array([0.35, 0.1, 0.3])))
    tau6 = same()
    taus = [tau0, tau1, tau2, tau3, tau4, tau5, tau6]
    assert all(not np.allclose(a, b, rtol=1e-6) for a, b in zip(taus, taus[1:]))  # each change mattered
    fast.D[:] = 2.0 * fast.D + 0.1  # in place: read where it lives
    slow.D[:] = 2.0 * slow.D + 0.1
    same()
    fast.D = slow.D = np.full(14, 0.05)  # replaced: bound again
    same()


def test_parameters_are_copied_only_when_one_was_set(setup, monkeypatch):
    cfg, robot, c, u, states = setup
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=cfg["omega"], warn_free_dof=False)
    P = ctl._plan
    calls = []
    copy = P.copy_parameters
    monkeypatch.setattr(P, "copy_parameters", lambda: (calls.append(1), copy())[1])
    for t, q, v in states[:5]:
        ctl(t, q, v)
    assert len(calls) <= 1
    n = len(calls)
    u.kp = u.kp * 1.01
    ctl(*states[5])
    assert len(calls) == n + 1
    ctl(*states[6])
    assert len(calls) == n + 1


def test_pickled_controller_rebinds_and_steps_alike(setup):
    cfg, robot, c, u, states = setup
    ctl = UdwadiaKalabaController(robot, [c], [u], omega=cfg["omega"], warn_free_dof=False)
    ctl(*states[0])
    twin = pickle.loads(pickle.dumps(ctl))
    assert twin._plan.ptr is None and twin._plan.data is None
    for t, q, v in states[1:20:3]:
        a, b = ctl(t, q, v), twin(t, q, v)
        np.testing.assert_array_equal(a, b)
        assert math.isfinite(float(np.sum(a)))
