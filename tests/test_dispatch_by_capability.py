"""The compiled UK step is chosen by what a task or trajectory does, not by its exact type (issue 22):
a subclass of a built-in task that keeps its row maths, and a user-written trajectory, take the compiled
step; a subclass that redefines the row maths (its rows from its own Python inside the compiled step) or a circle
that redefines its sampling runs its own maths (and the torques show it)."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.bench.dispatch import CENTER, UserCircle  # the bench's user trajectory, measured there
from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle, Sample

T_AB = pin.SE3(np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]), np.array([0.0, -0.4, 0.12]))


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


class MyFrameTask(FrameTask):
    """A subclass that adds a convenience, not maths: keeps the compiled rows."""

    def describe(self) -> str:
        return f"{self.name} on {self.frame}"


class ShiftedFrameTask(FrameTask):
    """A subclass that redefines the maths: the target 1 cm higher."""

    def error_dynamics(self, kin, t):
        W, drift, w, e = super().error_dynamics(kin, t)
        e = e.copy()
        e[2] += 0.01
        return type(super().error_dynamics(kin, t))(W, drift, w, e)


class RaisedCircle(Circle):
    """A Circle subclass that redefines its sampling (1 cm higher): must not be sampled as a Circle."""

    def sample(self, t):
        T, vel, acc = Circle.sample(self, t)
        return Sample(pin.SE3(T.rotation, T.translation + np.array([0.0, 0.0, 0.01])), vel, acc)


def _ctl(robot, task, **kw):
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 1000, 33)
    return UdwadiaKalabaController(
        robot,
        levels=[[c], [(task, 50.0)], [PostureTask(robot, np.zeros(14), kp=4, kd=4)]],
        limits=[],
        warn_free_dof=False,
        **kw,
    )


def _states(n=4):
    rng = np.random.default_rng(7)
    return [(0.05 * k, 0.3 * rng.normal(size=14), 0.3 * rng.normal(size=14)) for k in range(n)]


def test_subclass_keeping_the_maths_takes_the_compiled_step(robot):
    task = MyFrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)
    assert task.kernel_kind() == 1
    fast, slow = (
        _ctl(robot, task),
        _ctl(robot, MyFrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40), fused=False),
    )
    assert fast._plan is not None
    for t, q, v in _states():
        np.testing.assert_allclose(fast(t, q, v), slow(t, q, v), rtol=1e-9, atol=1e-9)


def test_subclass_redefining_the_maths_runs_its_own(robot):
    task = ShiftedFrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)
    assert task.kernel_kind() is None
    ctl = _ctl(robot, task)
    # the compiled step, with this task's rows from its own Python (the fallback is per task: the coupling and the
    # posture stay compiled); the same torques as the generic path
    assert ctl._plan is not None and [x[2] for x in ctl._plan.py_tasks] == [task]
    slow = _ctl(
        robot, ShiftedFrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40), fused=False
    )
    base = _ctl(robot, FrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40))
    for t, q, v in _states():
        tau = ctl(t, q, v)
        np.testing.assert_allclose(tau, slow(t, q, v), rtol=1e-12, atol=1e-12 * np.max(np.abs(tau)))
        assert not np.allclose(tau, base(t, q, v))  # the shift is really applied


def test_user_trajectory_takes_the_compiled_step_with_the_same_torques(robot):
    user = FrameTask(robot, "yumi_link_7_l", UserCircle(CENTER, 0.1, 1.5), 400, 40)
    built = FrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)
    a, b = _ctl(robot, user), _ctl(robot, built)
    assert a._plan is not None and b._plan is not None
    for t, q, v in _states():
        np.testing.assert_allclose(a(t, q, v), b(t, q, v), rtol=1e-9, atol=1e-9)


def test_circle_subclass_redefining_sample_is_not_sampled_as_a_circle(robot):
    fc = RaisedCircle(CENTER, 0.1, 1.5)
    assert fc.kernel_params() is None and Circle(CENTER, 0.1, 1.5).kernel_params() is not None
    a = _ctl(robot, FrameTask(robot, "yumi_link_7_l", fc, 400, 40))
    raised = np.array(CENTER) + [0.0, 0.0, 0.01]
    b = _ctl(robot, FrameTask(robot, "yumi_link_7_l", Circle(raised, 0.1, 1.5), 400, 40))  # the same motion
    for t, q, v in _states():
        np.testing.assert_allclose(a(t, q, v), b(t, q, v), rtol=1e-9, atol=1e-9)


class PlaneCircle:
    """A user's circle in any plane, by its own NumPy code (sampled in Python every step)."""

    def __init__(self, c, r, w, u, e):
        self.c, self.r, self.w, self.u, self.e = np.asarray(c, float), r, w, np.asarray(u), np.asarray(e)

    def __call__(self, t):
        a = self.w * t
        p = self.c + self.r * (np.cos(a) * self.u + np.sin(a) * self.e)
        v = self.r * self.w * (-np.sin(a) * self.u + np.cos(a) * self.e)
        acc = -self.r * self.w**2 * (np.cos(a) * self.u + np.sin(a) * self.e)
        return pin.SE3(np.eye(3), p), np.r_[v, 0, 0, 0], np.r_[acc, 0, 0, 0]


@pytest.mark.parametrize(
    "kw", [dict(normal=[0.0, 0.0, 1.0]), dict(normal=[0.3, -0.4, 0.8]), dict(axes=([0, 1, 1], [1, 0, 0]))]
)
def test_circle_in_any_plane_compiled_equals_python(robot, kw):
    """A circle off the x–z plane is sampled inside the fused UK step (its row of ``tcirc`` on, with its axes)
    and gives the torques of the generic step (Circle.sample in Python) and of the same circle written in
    NumPy by the user (a Python-sampled trajectory)."""
    circ = Circle(CENTER, 0.1, 1.5, **kw)
    fused = _ctl(robot, FrameTask(robot, "yumi_link_7_l", circ, 400, 40))
    generic = _ctl(
        robot, FrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5, **kw), 400, 40), fused=False
    )
    user = _ctl(robot, FrameTask(robot, "yumi_link_7_l", PlaneCircle(CENTER, 0.1, 1.5, *circ.axes), 400, 40))
    assert fused._plan is not None and generic._plan is None and user._plan is not None
    for t, q, v in _states():
        tau = fused(t, q, v)
        np.testing.assert_allclose(tau, generic(t, q, v), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(tau, user(t, q, v), rtol=1e-9, atol=1e-9)
    P = fused._plan
    (k,) = [k for k, task in P.frame_tasks]
    assert P.tcirc[k, 6] == 1.0 and not P.traj_tasks  # sampled in the kernel, not in Python
    np.testing.assert_array_equal(P.tcirc[k, 7:], circ.axes.ravel())
    # the kernel's target at the last step is the circle's sample there
    T, vel, acc = circ(_states()[-1][0])
    np.testing.assert_allclose(P.tgtH[k, :3, 3], T.translation, rtol=0, atol=1e-15)
