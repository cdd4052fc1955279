"""UK's compiled closed-chain step (controllers/uk_plan.py, ``_uk_kernels.passive_level``: the loops as level 1 from
``models/_loop_kernels.py``, the passive joints' zero-torque rows and torque map from ``kernels.passive_factor``)
against the generic Python path (``fused=False``) on closed-loop states of the shipped mechanisms: the same torque,
acceleration, loop reaction and step record, passive torque exactly zero, the effort limit bounding the torque sent.
Anything the plan cannot compile keeps the generic path."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.coupling import JointTrajectoryTask, PostureTask
from cmstack.models.limits import EffortLimit
from cmstack.models.loops import ClosureSet, LoopClosure, assemble
from cmstack.models.projection import project
from cmstack.models.robot import Robot
from cmstack.models.trajectory import FromFunction
from cmstack.scenarios._common import default_config
from cmstack.scenarios.closed_chain import build_reference, load_robot

MODELS = ("mjcf/five_bar.xml", "mjcf/four_bar.xml", "mjcf/delta.xml", "mjcf/stewart_ball.xml")


def _pair(model, make_levels=None, make_limits=None, **kw):
    """Two controllers of the closed_chain scenario's UK law (or of ``make_levels(robot, coords)``, with the limits
    ``make_limits(robot)``), each on its own robot: the compiled step and the generic path."""
    out = []
    for fused in (True, False):
        cfg = dict(default_config("closed_chain"), model=model, law="uk")
        robot = load_robot(cfg)
        _, coords, _ = build_reference(cfg, robot)
        if isinstance(coords, tuple):
            names, ref = coords
            coords = JointTrajectoryTask(
                robot, ref, names, kp=cfg["kp"], kd=cfg["kd"], name="actuated_joints"
            )
        levels = [[coords]] if make_levels is None else make_levels(robot, coords)
        limits = [] if make_limits is None else make_limits(robot)
        out.append(
            UdwadiaKalabaController(
                robot, levels=levels, limits=limits, warn_free_dof=False, fused=fused, **kw
            )
        )
    return out


def _states(robot, n, seed=1, spread=0.05, speed=1.0):
    cs = ClosureSet(robot.loops)
    rng = np.random.default_rng(seed)
    for k in range(n):  # a step on the joint manifold (q + dq for hinges and slides; a ball joint's rotation)
        q = robot.assemble(pin.integrate(robot.model, robot.q_initial, spread * rng.normal(size=robot.nv)))
        yield 0.013 * k, q, speed * (project(cs.jacobian(q)).P @ rng.normal(size=robot.nv))


def _close(a, b, rtol=1e-9):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.abs(a - b).max(initial=0.0) <= rtol * max(1.0, np.abs(b).max(initial=0.0)), (a, b)


def _same_step(fast, slow, rtol=1e-9):
    for f in ("status", "path", "qp_iter", "limits_active", "saturated", "gave_way"):
        assert getattr(fast.info, f) == getattr(slow.info, f), f
    _close(fast.info.tau, slow.info.tau, rtol)
    _close(fast.info.vdot, slow.info.vdot, rtol)
    for f in ("Qc", "Qu", "Qlim"):
        _close(getattr(fast.info, f), getattr(slow.info, f), rtol)
    _close(fast.loop_reaction(), slow.loop_reaction(), rtol)


@pytest.mark.parametrize("model", MODELS)
def test_compiled_closed_chain_step_equals_the_generic_path(model):
    fast, slow = _pair(model)
    P = fast._plan
    assert P is not None and P.closed and slow._plan is None
    for t, q, v in _states(fast.robot, 40):
        tau, tau_ref = fast(t, q, v), slow(t, q, v)
        assert fast.info.path == "kkt"
        _close(tau, tau_ref)
        assert np.all(tau[fast._passive] == 0.0)
        _same_step(fast, slow)
        # the torque map formed on demand is the generic path's
        _close(fast._T, slow._T)


@pytest.mark.parametrize("model", ["mjcf/five_bar.xml", "mjcf/delta.xml"])
def test_effort_limit_bounds_the_torque_sent_and_the_qp_sees_the_same_rows(model):
    """A limit on the actuated joints that binds: the compiled step hands the generic QP the same rows and torque map;
    the torque sent is within the limit, the passive joints get none, the binding limits are named."""
    free, _ = _pair(model)
    t, q, v = next(_states(free.robot, 1, seed=8))
    v = 20.0 * v  # a fast state: large torques
    peak = np.abs(free(t, q, v)).max()
    act = free.robot.actuated_joints

    def limited(robot):
        return [EffortLimit(robot, tau_max=0.6 * peak, joints=act)]

    fast, slow = _pair(model, make_limits=limited)
    assert fast._plan is not None and fast._plan.effort is not None
    tau, _tau_ref = fast(t, q, v), slow(t, q, v)
    assert fast.info.limits_active and slow.info.limits_active
    assert np.abs(tau).max() <= 0.6 * peak * (1 + 1e-6)
    assert np.all(tau[fast._passive] == 0.0)
    _same_step(fast, slow, rtol=1e-7)
    kin = fast.kin
    bind = fast.binding_limits(kin, kin.h + fast.D * kin.v, fast.info.vdot)
    assert bind and bind == slow.binding_limits(slow.kin, slow.kin.h + slow.D * slow.kin.v, slow.info.vdot)


def test_weighted_loops_and_a_level_with_more_rows_than_joints():
    """The loops placed by the user with a weight (their rows scaled by √ω, J_c read back unscaled), and a posture on
    every joint as a strict level: more rows than degrees of freedom, so the step goes to the null-space path with
    the rows the kernel kept."""

    def levels(robot, coords):
        return [
            [(c, 4.0) for c in robot.loops],
            [coords],
            [PostureTask(robot, robot.q_initial, kp=50, kd=14)],
        ]

    fast, slow = _pair("mjcf/five_bar.xml", levels)
    assert fast._plan is not None and fast._plan.closed
    paths = set()
    for t, q, v in _states(fast.robot, 15, seed=3):
        tau, tau_ref = fast(t, q, v), slow(t, q, v)
        _close(tau, tau_ref)
        assert np.all(tau[fast._passive] == 0.0)
        _same_step(fast, slow)
        paths.add(fast.info.path)
    assert paths == {"nullspace"}


def test_joint_trajectory_not_a_sinusoid_is_sampled_in_python():
    calls = []

    def f(t):
        calls.append(t)
        return np.array([0.2 * np.sin(t)]), np.array([0.2 * np.cos(t)]), np.array([-0.2 * np.sin(t)])

    def levels(robot, coords):
        return [
            [JointTrajectoryTask(robot, FromFunction(f), [coords.robot.actuated_joints[0]], kp=100, kd=20)]
        ]

    fast, slow = _pair("mjcf/four_bar.xml", levels)
    assert fast._plan is not None and fast._plan.closed
    for t, q, v in _states(fast.robot, 10):
        n = len(calls)
        _close(fast(t, q, v), slow(t, q, v))
        assert len(calls) == n + 2  # once by each controller
        _same_step(fast, slow)
    assert fast._plan.traj_joints and not fast._plan.tint[0, 1]


def test_plane_loop_slider_crank_compiled_equals_generic():
    """The slider-crank cut at C with its rail as a one-row ``plane`` closure (urdf/slider_crank.urdf + sidecar): the
    crank on a sinusoid, the rod passive; the compiled step equals the generic path."""
    from cmstack.models.trajectory import Sinusoid

    ctls = []
    for fused in (True, False):
        robot = Robot.from_urdf("urdf/slider_crank.urdf", loops="urdf/slider_crank.loops.toml")
        crank = JointTrajectoryTask(robot, Sinusoid(0.3, 0.5, 0.7), ["crank"], kp=100, kd=20)
        ctls.append(
            UdwadiaKalabaController(robot, levels=[[crank]], limits=[], warn_free_dof=False, fused=fused)
        )
    fast, slow = ctls
    assert fast.robot.loops[0].kind == "plane" and fast._plan is not None and fast._plan.closed
    rng = np.random.default_rng(2)
    for k in range(20):
        q0 = np.array([rng.uniform(-3, 3), 0.0])
        q = assemble(fast.robot, q0, fixed=["crank"])
        v = project(ClosureSet(fast.robot.loops).jacobian(q)).P @ rng.normal(size=2)
        tau = fast(0.05 * k, q, v)
        _close(tau, slow(0.05 * k, q, v))
        assert tau[1] == 0.0
        _same_step(fast, slow)


def test_what_the_plan_cannot_compile_keeps_the_generic_path():
    # passive joints without loops (their rows are M_p v̇ = −h_p, no torque map)
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    robot.loops.clear()
    ctl = UdwadiaKalabaController(
        robot, levels=[[PostureTask(robot, robot.q_initial)]], limits=[], warn_free_dof=False
    )
    assert ctl._passive.size and ctl._plan is None

    # a closure whose class redefines its row maths (dispatch by what it does, not by its type)
    class Shifted(LoopClosure):
        def error_dynamics(self, kin, t):
            W, drift, w, e = super().error_dynamics(kin, t)
            return type(super().error_dynamics(kin, t))(W, drift, w, e + 1e-3)

    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    c = robot.loops[0]
    robot.loops[0] = Shifted(robot, c.frame_a, c.frame_b, c.kind, c.offset, offset_b=c.offset_b, name=c.name)
    assert robot.loops[0].kernel_kind() is None and c.kernel_kind() == 3
    ctl = UdwadiaKalabaController(
        robot, levels=[[PostureTask(robot, robot.q_initial)]], limits=[], warn_free_dof=False
    )
    assert ctl._plan is None


def test_pickled_closed_chain_controller_steps_alike():
    import pickle

    fast, slow = _pair("mjcf/five_bar.xml")
    states = list(_states(fast.robot, 6, seed=5))
    fast(*states[0])
    twin = pickle.loads(pickle.dumps(fast))
    for t, q, v in states[1:]:
        np.testing.assert_array_equal(twin(t, q, v), fast(t, q, v))
        np.testing.assert_array_equal(twin.loop_reaction(), fast.loop_reaction())
        np.testing.assert_array_equal(twin._T, fast._T)  # formed from the step's own loop rows


def test_pickled_plan_keeps_reading_what_python_writes():
    """An unpickled plan's tables are views into its own I and F again: a gain set after unpickling is what the
    kernel reads (it was not: the views came back as copies, and the kernel kept the old gain)."""
    import pickle

    fast, slow = _pair("mjcf/five_bar.xml")
    states = list(_states(fast.robot, 3, seed=5))
    fast(*states[0])
    twin = pickle.loads(pickle.dumps(fast))
    assert np.shares_memory(twin._plan.tflt, twin._plan.F) and np.shares_memory(twin._plan.tint, twin._plan.I)
    for c in (twin, slow):
        c.levels[1].tasks[0].kp = 10.0
    _close(twin(*states[1]), slow(*states[1]))


def test_given_snapshot_steps_as_the_generic_path():
    """A step on a snapshot the caller made (``Robot.update``): the kernel reads the data that snapshot left."""
    fast, slow = _pair("mjcf/delta.xml")
    for t, q, v in _states(fast.robot, 5, seed=9):
        tau = fast(t, q, v, kin=fast.robot.update(q, v))
        _close(tau, slow(t, q, v))
        assert np.all(tau[fast._passive] == 0.0)
        _same_step(fast, slow)
