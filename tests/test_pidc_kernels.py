"""PIDC's compiled step with several constraint rows (controllers/_pidc_kernels.py) against the NumPy law it
replaces (``PIDC._numpy_step``, SVD pseudo-inverses) on closed-loop states of the shipped mechanisms, and the
complete orthogonal decomposition it uses (controllers/kernels.py) against NumPy's pseudo-inverse."""

from __future__ import annotations

import numpy as np
import pytest
from test_robust_rnea import LateSinusoid, NamedSinusoid

from cmstack.controllers import kernels as K
from cmstack.controllers.pidc import PIDC
from cmstack.models.coupling import FrameTask
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle, Sinusoid
from cmstack.sim.projection_sim import ProjectionPlant


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300)


def _cod_pinv(X, tol, mode):
    p, s = X.shape
    L = max(p, s) + 1
    F = np.zeros((L, L))
    F[:p, :s] = X
    Z = np.zeros((L, L))
    piv = np.zeros(2 * L, np.int64)
    tau, ztau, w, out = np.zeros(L), np.zeros(L), np.zeros(L), np.zeros(L)
    r = K.cod_factor(F, p, s, tol, mode, piv, tau, Z, ztau)
    Xp = np.empty((s, p))
    for j in range(p):
        e = np.zeros(L)
        e[j] = 1.0
        K.cod_pinv_apply(F, p, s, r, piv, tau, Z, ztau, e, w, out)
        Xp[:, j] = out[:s]
    return r, Xp


@pytest.mark.parametrize(
    "shape,rank",
    [((6, 5), 3), ((3, 3), 2), ((13, 15), 12), ((2, 7), 0), ((5, 2), 2), ((5, 4), 4), ((2, 3), 1)],
)
def test_cod_is_the_truncated_pseudo_inverse(shape, rank):
    """Random matrices of a given rank, with rows that vanish to round-off (as a planar closure's): the COD's
    rank and X⁺ equal the truncated SVD's (absolute and relative thresholds)."""
    rng = np.random.default_rng(sum(shape) + rank)
    p, s = shape
    X = rng.normal(size=(p - 1, rank)) @ rng.normal(size=(rank, s)) if rank else np.zeros((p - 1, s))
    X = np.insert(X, rng.integers(p), 1e-17 * rng.normal(size=s) if rank else 0.0, axis=0)
    for tol, mode in ((1e-9, K.ABS), (1e-10, K.REL)):
        r, Xp = _cod_pinv(X, tol, mode)
        assert r == rank
        ref = np.linalg.pinv(X, rcond=1e-10) if rank else np.zeros((s, p))
        np.testing.assert_allclose(Xp, ref, rtol=0, atol=1e-11 * max(1.0, np.abs(ref).max()))
        for M in (X @ Xp, Xp @ X):  # Penrose: symmetric projectors
            np.testing.assert_allclose(M, M.T, atol=1e-12)
            np.testing.assert_allclose(M @ M, M, atol=1e-12)


def _same_step(ctl, ref, t, q, v, tau):
    tau_ref = ref._numpy_step(t, q, v)
    a, b = ctl.info, ref.info
    assert (a.rank, a.status, a.solvable) == (b.rank, b.status, b.solvable)
    scale = max(1.0, np.abs(tau_ref).max())
    assert np.abs(tau - tau_ref).max() <= 1e-10 * scale
    for x, y in ((a.qdd_des, b.qdd_des), (a.tau_par, b.tau_par), (a.f_c, b.f_c)):
        assert np.abs(x - y).max() <= 1e-10 * max(1.0, np.abs(y).max())
    assert np.abs(a.lam - b.lam).max() <= 1e-10 * max(1.0, np.abs(b.lam).max())
    assert abs(a.passive_residual - b.passive_residual) <= 1e-10 * scale


def _ee_law(robot):
    p0 = robot.update(robot.q_initial, np.zeros(robot.nv)).frame("ee").p.copy()
    circle = Circle(p0 - [0.03, 0.0, 0.0], 0.03, 2 * np.pi * 0.5)
    return PIDC(robot, None, FrameTask(robot, "ee", circle, kp=400.0, kd=40.0, rows="position"))


def _ee_law_horizontal(robot):
    """The Delta's tool on a horizontal circle (normal +z), which the compiled step samples itself."""
    p0 = robot.update(robot.q_initial, np.zeros(robot.nv)).frame("ee").p.copy()
    circle = Circle(p0 - [0.03, 0.0, 0.0], 0.03, 2 * np.pi * 0.5, normal=[0.0, 0.0, 1.0])
    return PIDC(robot, None, FrameTask(robot, "ee", circle, kp=400.0, kd=40.0, rows="position"))


def _joint_law(robot, amplitude=0.2):
    act = robot.actuated_joints
    q0 = robot.q_initial[[robot.joint_index(j) for j in act]]
    return PIDC(robot, None, act, Sinusoid(q0, amplitude, 0.5), 400.0, 40.0)


@pytest.mark.parametrize(
    "model,law,ranks",
    [
        ("mjcf/five_bar.xml", _ee_law, {3}),
        ("mjcf/four_bar.xml", _joint_law, {2}),
        ("mjcf/delta.xml", _ee_law, {12}),
        ("mjcf/delta.xml", _ee_law_horizontal, {12}),
    ],
)
def test_rows_kernel_equals_numpy_step_on_a_closed_loop(model, law, ranks):
    """The closed loop on the rigid projection plant: the compiled step (planar closures of rank 3 of 6 and
    2 of 3, the Delta's 12 of 12) gives the NumPy step's τ, q̈_des, τ_∥, f_c, λ, rank and passive residual."""
    robot, robot_ref = Robot.from_mjcf(model), Robot.from_mjcf(model)
    ctl, ref = law(robot), law(robot_ref)
    assert ctl._rows_compiled and not ctl._compiled and ctl._plan is not None  # frames and rows compiled
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    plant.reset(robot.q_initial)
    seen = set()
    for k in range(300):
        t = k * 1e-3
        q, v = plant.state()
        tau = ctl(t, q, v)
        _same_step(ctl, ref, t, q, v, tau)
        seen.add(ctl.info.rank)
        if k % 100 == 0:  # the lazily built snapshot is the step's state
            np.testing.assert_array_equal(ctl.kin.q, q)
            np.testing.assert_allclose(ctl.kin.M, ref.kin.M, rtol=1e-14, atol=0)
        plant.set_torque(tau)
        plant.step()
    assert seen == ranks
    assert np.abs(tau[~plant.actuated]).max() <= 1e-9


def test_rows_kernel_without_passive_joints_and_a_function_reference():
    """Every joint actuated (no passive law), the reference a Python function, random states; and the
    unsolvable case: one actuated joint cannot hold the five-bar's loop (58), reported as the NumPy path."""
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    names = ["base_l", "base_r"]
    fn = lambda t: (np.array([0.3 * t, -0.2]), np.array([0.3, 0.0]), np.zeros(2))
    mk = lambda passive: PIDC(
        Robot.from_mjcf("mjcf/five_bar.xml"), None, names, fn, 100.0, 20.0, passive=passive
    )
    rng = np.random.default_rng(2)
    for passive in ((), ("elbow_l", "tip", "elbow_r", "base_r")):
        ctl, ref = mk(passive), mk(passive)
        assert ctl._rows_compiled and not ctl._sinus
        unsolvable = 0
        for i in range(30):
            q = robot.assemble(robot.q_initial + 0.1 * rng.normal(size=robot.nv))
            v = rng.normal(size=robot.nv)
            tau = ctl(0.01 * i, q, v)
            _same_step(ctl, ref, 0.01 * i, q, v, tau)
            unsolvable += ctl.info.status == "unsolvable"
        assert ctl.unsolvable_steps == unsolvable == ref.unsolvable_steps
        assert (unsolvable > 0) == bool(passive)


def test_rows_kernel_non_finite_rows_take_the_numpy_path():
    robot = Robot.from_mjcf("mjcf/four_bar.xml")
    ctl = _joint_law(robot)
    q = robot.q_initial.copy()
    from cmstack.models.errors import StateError

    q[0] = np.nan
    with pytest.raises(StateError):
        ctl(0.0, q, np.zeros(robot.nv))


def test_a_loop_subclass_is_dispatched_by_what_it_does():
    """Dispatch by capability (issue 22): a LoopClosure subclass that adds no maths takes the compiled
    closed-chain step with the built-in's torques; one that redefines its row maths is refused by name (PIDC
    reads a loop's rows from its kind, so its own maths would be silently ignored)."""
    from cmstack.models.errors import ConfigError
    from cmstack.models.loops import LoopClosure

    class MyLoop(LoopClosure):
        def describe(self):  # a convenience, not maths
            return f"my {self.kind} loop"

    class OwnRows(LoopClosure):
        def error_dynamics(self, kin, t):  # its own rows: not what the loop's kind gives
            return LoopClosure.error_dynamics(self, kin, t)

    def law(robot, cls):
        c = robot.loops[0]
        robot.loops[0] = cls(
            robot,
            c.frame_a,
            c.frame_b,
            kind=c.kind,
            offset=c.offset,
            offset_b=c.offset_b,
            kp=c.kp,
            kd=c.kd,
            name=c.name,
        )
        return _ee_law(robot)

    robot, robot_ref = Robot.from_mjcf("mjcf/five_bar.xml"), Robot.from_mjcf("mjcf/five_bar.xml")
    ctl, ref = law(robot, MyLoop), _ee_law(robot_ref)
    assert ctl._plan is not None and ref._plan is not None
    plant = ProjectionPlant(robot_ref, None, sim_dt=1e-3)
    plant.reset(robot.q_initial)
    for k in range(50):
        q, v = plant.state()
        tau = ctl(k * 1e-3, q, v)
        assert np.array_equal(tau, ref(k * 1e-3, q, v))
        plant.set_torque(tau)
        plant.step()
    with pytest.raises(
        ConfigError, match=r"loop 'tip_loop' \(OwnRows\) redefines its row maths \(error_dynamics\)"
    ):
        law(Robot.from_mjcf("mjcf/five_bar.xml"), OwnRows)


class _LateSinusoid(LateSinusoid):
    """Redefines its sampling (a tenth of a second late): must be called, not sampled as a Sinusoid."""

    late = 0.1  # s


def test_joint_reference_chosen_by_what_it_does():
    """The closed-chain step samples a joint reference as a sinusoid by ``kernel_sinusoid()``, not by its
    type (issue 22): a subclass that adds no maths is sampled in the kernel with the built-in's torques, one
    that redefines its sampling is called (the torques of the same function as a plain callable), and a
    reference set after construction replaces the kernel's copy of the former one (it kept the old one)."""
    model = "mjcf/four_bar.xml"
    robot = Robot.from_mjcf(model)
    act = robot.actuated_joints
    q0 = robot.q_initial[[robot.joint_index(j) for j in act]]
    args = (q0, 0.2, 0.5)

    def law(ref):
        return PIDC(Robot.from_mjcf(model), None, act, ref, 400.0, 40.0)

    builtin, named, late = law(Sinusoid(*args)), law(NamedSinusoid(*args)), law(_LateSinusoid(*args))
    late_fn = law(lambda t: tuple(Sinusoid(*args).sample(t - 0.1)))
    switched = law(Sinusoid(q0, 0.05, 1.5))
    switched.ref = Sinusoid(*args)
    assert builtin._sinus and named._sinus and switched._sinus and not late._sinus
    assert all(c._plan is not None for c in (builtin, named, late, switched))
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    plant.reset(robot.q_initial)
    for k in range(50):
        t = k * 1e-3
        q, v = plant.state()
        tau = builtin(t, q, v)
        assert np.array_equal(named(t, q, v), tau) and np.array_equal(switched(t, q, v), tau)
        assert np.array_equal(late(t, q, v), late_fn(t, q, v))
        assert np.abs(late(t, q, v) - tau).max() > 1e-6
        plant.set_torque(tau)
        plant.step(1)
    switched.ref = lambda t: tuple(Sinusoid(*args).sample(t - 0.1))  # and back to a called reference
    assert not switched._sinus
    q, v = plant.state()
    assert np.array_equal(switched(0.05, q, v), late_fn(0.05, q, v))


@pytest.mark.parametrize(
    "model,law",
    [("mjcf/five_bar.xml", _ee_law), ("mjcf/four_bar.xml", _joint_law), ("mjcf/delta.xml", _ee_law)],
)
def test_closed_step_equals_the_rows_step_on_pinocchios_dynamics(model, law):
    """The compiled closed-chain step (h by the kernel's Newton–Euler pass, the record read from the step's buffer)
    against the same law's rows step on ``Robot.update``'s M, h (``pin.computeAllTerms``) and the loops' rows read
    in Python (``_rows_step`` without the plan): τ to 1e-12, every info field, the kernel's h equal to Pinocchio's
    nonLinearEffects, the snapshot at the step's state; a record kept from one step and read after the next holds
    the later step's values (one record, refilled)."""
    import pinocchio as pin

    robot, robot_ref = Robot.from_mjcf(model), Robot.from_mjcf(model)
    ctl, ref = law(robot), law(robot_ref)
    ref._plan = None
    assert ctl._plan is not None
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    plant.reset(robot.q_initial)
    d = robot.model.createData()
    for k in range(150):
        t = k * 1e-3
        q, v = plant.state()
        tau = ctl(t, q, v)
        tau_ref = ref._rows_step(t, q, v)
        assert np.abs(tau - tau_ref).max() <= 1e-12 * max(1.0, np.abs(tau_ref).max())
        a, b = ctl.info, ref.info
        assert (a.rank, a.status, a.solvable, a.f_d, a.tau_perp) == (
            b.rank,
            b.status,
            b.solvable,
            b.f_d,
            b.tau_perp,
        )
        for x, y in ((a.qdd_des, b.qdd_des), (a.tau_par, b.tau_par), (a.f_c, b.f_c), (a.lam, b.lam)):
            assert x.shape == y.shape and np.abs(x - y).max() <= 1e-12 * max(1.0, np.abs(y).max())
        assert abs(a.passive_residual - b.passive_residual) <= 1e-12 * max(1.0, np.abs(tau_ref).max())
        h = pin.nonLinearEffects(robot.model, d, q, v)
        assert np.abs(ctl._plan.h - h).max() <= 1e-13 * max(1.0, np.abs(h).max())
        if k % 50 == 0:
            np.testing.assert_array_equal(ctl.kin.q, q)
            np.testing.assert_array_equal(ctl.kin.v, v)
            kept = a
        plant.set_torque(tau)
        plant.step()
    assert kept is ctl.info and np.array_equal(kept.qdd_des, ctl.info.qdd_des)


def test_gains_and_targets_set_after_construction_reach_the_compiled_step():
    """The frame task's gains, its circle's parameters and a constant target are copied into the kernel's tables only
    when one was set (``models/_params.py``): each change is seen, with the torques of a controller built with it."""
    import pinocchio as pin

    def fresh():
        return _ee_law(Robot.from_mjcf("mjcf/five_bar.xml"))

    ctl = fresh()
    robot = ctl.robot
    q = robot.assemble(robot.q_initial + 0.02)
    v = np.zeros(robot.nv)
    tau0 = ctl(0.1, q, v).copy()
    task = ctl.tasks[0]
    task.kp = 100.0
    other = fresh()
    other.tasks[0].kp = 100.0
    tau1 = ctl(0.1, q, v)
    assert np.abs(tau1 - tau0).max() > 1e-6 and np.array_equal(tau1, other(0.1, q, v))
    task.trajectory.r = 0.05  # a Circle's parameter, set in place
    other = fresh()
    other.tasks[0].kp = 100.0
    other.tasks[0].trajectory.r = 0.05
    tau2 = ctl(0.1, q, v)
    assert np.abs(tau2 - tau1).max() > 1e-6 and np.array_equal(tau2, other(0.1, q, v))
    T = pin.SE3(np.eye(3), robot.update(q, v).frame("ee").p + [0.01, 0.0, 0.0])
    task.set_target(T)
    other.tasks[0].set_target(T)
    tau3 = ctl(0.2, q, v)
    assert np.abs(tau3 - tau2).max() > 1e-6 and np.array_equal(tau3, other(0.2, q, v))
