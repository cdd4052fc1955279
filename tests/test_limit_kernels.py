"""Inactive limits cost almost nothing (issue 30 item 1): the compiled test of the limits on the compiled UK
step's result (``models/limits.py: LimitCheck``, ``models/_limit_kernels.py``) decides as the limits' own
``violated`` (states inside, on and beyond every bound), and a controller that uses it sends the same torques
and takes the same path as one that tests the limits in Python, whether the limits bind or not."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from cmstack import (
    GAUSS,
    Circle,
    FrameTask,
    PostureTask,
    Robot,
    UdwadiaKalabaController,
    example_robot_data_path,
)
from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit, LimitCheck

Q0 = np.array([0, -0.785, 0, -2.356, 0, 1.571, 0.785])


@pytest.fixture(scope="module")
def robot():
    arm = example_robot_data_path("panda_description/urdf/panda.urdf")
    return Robot.compose([(arm, "", [0, 0, 0], {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0})])


def _limits(robot, v_max=None, a_max=20.0, tau=None):
    return [
        EffortLimit(robot, tau_max=None if tau is None else np.minimum(tau, robot.effort_limit)),
        JointPositionLimit(robot, dt=1e-3, a_max=a_max, margin=0.01),
        JointVelocityLimit(robot, dt=1e-3, v_max=v_max),
    ]


def _buffer(n, q, v, x, tau):
    return np.concatenate([q, v, x, tau])


def test_compiled_test_decides_as_the_limits_violated(robot):
    n = robot.nv
    lims = _limits(robot, v_max=0.5, tau=30.0)
    rng = np.random.default_rng(3)
    checks = [LimitCheck.build([lim], 0, n, 2 * n, 3 * n) for lim in lims]
    both = LimitCheck.build(lims, 0, n, 2 * n, 3 * n)
    assert all(c is not None for c in checks) and both is not None
    lo_q, hi_q = lims[1].q_min, lims[1].q_max
    seen = {True: 0, False: 0}
    for trial in range(600):
        q = rng.uniform(lo_q - 0.05, hi_q + 0.05)
        if trial % 3 == 0:  # near a bound, moving towards it
            q = np.where(rng.random(n) < 0.5, hi_q - rng.uniform(0, 0.02, n), lo_q + rng.uniform(0, 0.02, n))
        v = rng.uniform(-0.8, 0.8, n)
        kin = robot.update(q, v)
        hD = kin.h.copy()
        # v̇ inside, on or just beyond each limit's bounds (the rows' l, u of the Python formulation)
        x = rng.uniform(-200, 200, n)
        tau = rng.uniform(-35, 35, n)
        k = trial % 4
        if k < 3 and k > 0:
            _, lo, hi = lims[k].bounds(kin, hD)
            pick = rng.integers(0, 5, n)
            tol = 1e-9 * (np.abs(lo) + np.abs(hi) + 1.0)
            cand = np.stack([lo, hi, lo - 2 * tol, hi + 2 * tol, 0.5 * (lo + hi)])
            x = cand[pick, np.arange(n)]
        elif k == 0:
            tau = np.where(rng.random(n) < 0.3, 30.0 * (1 + 2e-9) * np.sign(tau), np.clip(tau, -30, 30))
        buf = _buffer(n, q, v, x, tau)
        for lim, c in zip(lims, checks):
            want = lim.violated(kin, hD, x, tau)
            assert c(buf) == want, (trial, lim.name)
            seen[want] += 1
        assert both(buf) == any(lim.violated(kin, hD, x, tau) for lim in lims)
    assert seen[True] > 100 and seen[False] > 100  # both outcomes were tested


def test_a_limit_of_other_maths_is_tested_in_python(robot):
    class Shifted(JointVelocityLimit):
        def bounds(self, kin, hD):
            C, lo, hi = super().bounds(kin, hD)
            return C, lo - 1.0, hi + 1.0

    assert LimitCheck.build([Shifted(robot, dt=1e-3)], 0, 7, 14, 21) is None
    ctl = UdwadiaKalabaController(robot, levels=[[PostureTask(robot, Q0)]], limits=[Shifted(robot, dt=1e-3)])
    assert ctl._limcheck is None


def _hand(robot, **kw):
    """The hand on a 5 cm circle at 6 rad/s through its pose at Q0, orientation held (kp 400, kd 40)."""
    T0 = robot.update(Q0, 0 * Q0).frame("panda_hand_tcp").T
    circle = Circle(T0.translation - [0.05, 0, 0], 0.05, 6.0, R=T0.rotation)
    return FrameTask(robot, "panda_hand_tcp", circle, kp=400, kd=40, **kw)


def _controller(robot, lims, weighted=False):
    hand = _hand(robot, name="hand")
    posture = PostureTask(robot, Q0, kp=50, kd=14)
    # weighted: no hard level, so that any state is feasible within the limits
    levels = [[(hand, 100.0), (posture, 1.0), GAUSS]] if weighted else [[hand], [posture]]
    return UdwadiaKalabaController(robot, levels=levels, limits=lims)


def test_same_torques_and_paths_as_the_python_test_binding_or_not(robot):
    """On states where the limits bind at some steps and not at others (velocity 0.6 rad/s, position bounds
    approached, the URDF effort), the compiled test gives the same torques (bitwise) and paths."""
    fast = _controller(robot, _limits(robot, v_max=0.6), weighted=True)
    slow = _controller(robot, _limits(robot, v_max=0.6), weighted=True)
    assert fast._limcheck is not None
    slow._limcheck = None  # the Python test of the limits (``_fused_rest``), as before issue 30
    rng = np.random.default_rng(7)
    paths = {}
    for i in range(300):
        t = 1e-3 * i
        q = Q0 + rng.normal(0, 0.15, 7)
        q = np.clip(q, fast.limits[1].q_min + 0.011, fast.limits[1].q_max - 0.011)
        v = rng.normal(0, 0.3, 7)
        a, b = fast(t, q, v), slow(t, q, v)
        np.testing.assert_array_equal(a, b)
        assert fast.info.path == slow.info.path and fast.info.limits_active == slow.info.limits_active
        np.testing.assert_array_equal(fast.info.vdot, slow.info.vdot)
        paths[fast.info.path] = paths.get(fast.info.path, 0) + 1
    assert (
        paths.get("kkt", 0) > 30 and paths.get("kkt", 0) < 300
    )  # limits inactive at some steps, bound at others


def test_assigned_parameters_are_seen_and_changes_in_place_refused(robot):
    lims = _limits(robot)
    ctl = _controller(robot, lims, weighted=True)
    q, v = Q0.copy(), np.full(7, 0.2)
    twin = pickle.loads(pickle.dumps(ctl))  # its check rebuilt from the pickle, its limits copies
    for c in (ctl, twin):
        c(0.0, q, v)
        assert c.info.path == "kkt"
    with pytest.raises(ValueError):
        lims[2].v_max[0] = 0.1  # read-only: a change in place would be missed
    for c in (ctl, twin):  # |v + Δt v̇| ≤ 0.2 with v = 0.2: any acceleration away from 0 binds
        c.limits[2].v_max = np.full(7, 0.2)
    for t in (0.001, 0.002):
        np.testing.assert_array_equal(ctl(t, q, v), twin(t, q, v))
        assert ctl.info.path == twin.info.path and ctl.info.path in ("qp", "sequential")


def test_level_residuals_reported_when_limits_bind(robot):
    """info.level_residuals (issue 30 item 3): on a step where the velocity limit binds, level 1 (the hand, hard)
    is met to the solver's tolerance and the posture level, which the limit stops, is not; each value equals
    ‖A_k v̇ − b_k‖ computed from the tasks' own rows.  None on an equality step."""
    hand = _hand(robot)
    post = PostureTask(robot, Q0 + 0.3, kp=400, kd=40)
    ctl = UdwadiaKalabaController(
        robot,
        levels=[[hand], [post]],
        limits=[JointVelocityLimit(robot, dt=1e-3, v_max=0.3)],
        warn_free_dof=False,
    )
    ctl(0.0, Q0, np.zeros(7))
    assert ctl.info.path == "kkt" and ctl.info.level_residuals is None
    v = np.zeros(7)
    v[[0, 2, 4, 6]] = 0.299
    ctl(0.001, Q0, v)
    info = ctl.info
    assert info.path in ("qp", "sequential") and info.limits_active
    want = [
        float(np.linalg.norm(A @ info.vdot - b)) for A, b in (t.qp_rows(ctl.kin, 0.001) for t in (hand, post))
    ]
    assert len(info.level_residuals) == 2
    assert info.level_residuals[0] <= 1e-9 and want[0] <= 1e-9
    assert want[1] > 1.0  # the limit stops the posture level
    np.testing.assert_allclose(info.level_residuals[1], want[1], rtol=1e-9)


def test_persistent_solver_objects_carry_nothing_between_steps(robot):
    """The QPs keep one shape and one ProxSuite object per level (controllers/qp.py, cold starts by default): a
    controller that reuses them gives bit for bit the torques of one whose solver objects and buffers are made
    anew at every step, on states where the limits bind (so several QPs per step, rows zeroed where they vanish)."""
    reuse = _controller(robot, _limits(robot, v_max=0.6), weighted=True)
    fresh = _controller(robot, _limits(robot, v_max=0.6), weighted=True)
    assert not reuse.warm_start
    rng = np.random.default_rng(9)
    solved = 0
    for i in range(120):
        q = np.clip(Q0 + rng.normal(0, 0.15, 7), reuse.limits[1].q_min + 0.011, reuse.limits[1].q_max - 0.011)
        v = rng.normal(0, 0.3, 7)
        for cache in (fresh._qp._cold, fresh._qp._qps, fresh._qp._bufs):
            cache.clear()
        a, b = reuse(1e-3 * i, q, v), fresh(1e-3 * i, q, v)
        np.testing.assert_array_equal(a, b)
        solved += reuse.info.path in ("qp", "sequential")
    assert solved > 50 and len(reuse._qp._cold) >= 1


def test_compiled_acceleration_bounds_equal_the_numpy_equations(robot):
    """JointPositionLimit.acceleration_bounds (compiled) equals its NumPy formulation bit for bit, inside, near,
    on and beyond the bounds, moving either way, with a margin and a brake fraction."""
    lim = JointPositionLimit(robot, dt=1e-3, a_max=np.linspace(5, 40, 7), margin=0.01, brake_fraction=0.7)
    rng = np.random.default_rng(2)
    for _ in range(400):
        q = rng.uniform(lim.q_min - 0.05, lim.q_max + 0.05)
        v = rng.normal(0, 1.0, 7)
        lo, hi = lim.acceleration_bounds(q, v)
        lo_ref, hi_ref = lim._acceleration_bounds_numpy(q, v)
        np.testing.assert_array_equal(lo, lo_ref)
        np.testing.assert_array_equal(hi, hi_ref)
