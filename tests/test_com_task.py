"""The centre-of-mass task (models/com.py): its rows against finite differences and an independent centre of
mass, its Python rows inside the compiled UK step next to compiled tasks (the same torques as the generic path),
and closed-loop tracking of a moved and of a moving target."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.com import CenterOfMassTask
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.errors import ConfigError
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle

T_AB = pin.SE3(np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]), np.array([0.0, -0.4, 0.12]))
CENTER = [0.436763, 0.185684, 0.512661]


@pytest.fixture(scope="module")
def robot():
    return Robot("urdf/yumi.urdf")


def _states(n, seed=3):
    rng = np.random.default_rng(seed)
    return [(0.05 * k, 0.4 * rng.normal(size=14), 0.4 * rng.normal(size=14)) for k in range(n)]


def _com_by_bodies(robot, q):
    """c = Σ m_k c_k / Σ m_k over the joints' bodies, from each inertia and its joint's pose: an independent
    formulation."""
    model = robot.model
    d = model.createData()
    pin.forwardKinematics(model, d, q)
    num, mass = np.zeros(3), 0.0
    for j in range(1, model.njoints):
        Y = model.inertias[j]
        num += Y.mass * d.oMi[j].act(Y.lever)
        mass += Y.mass
    return num / mass  # the universe's body (a fixed base) left out, as Pinocchio does


def test_rows_match_finite_differences_and_an_independent_centre_of_mass(robot):
    target = np.array([0.3, 0.01, 0.4])
    task = CenterOfMassTask(robot, target, kp=9.0, kd=6.0)
    eps = 1e-6
    for _, q, v in _states(4):
        W, drift, w, e = task.error_dynamics(robot.update(q, v), 0.0)
        c = _com_by_bodies(robot, q)
        np.testing.assert_allclose(e, target - c, rtol=0, atol=1e-14)
        c_plus, c_minus = _com_by_bodies(robot, q + eps * v), _com_by_bodies(robot, q - eps * v)
        np.testing.assert_allclose(-W @ v, (c_plus - c_minus) / (2 * eps), rtol=0, atol=1e-8)
        np.testing.assert_allclose(w, W @ v, rtol=0, atol=1e-14)  # ċ_d = 0: w = −J_c v
        # J̇_c v = d/dt (J_c(q) v) at constant v, central differences; drift = c̈_d − J̇_c v with c̈_d = 0
        Jp = task.error_dynamics(robot.update(q + eps * v, v), 0.0).W
        Jm = task.error_dynamics(robot.update(q - eps * v, v), 0.0).W
        np.testing.assert_allclose(-drift, -(Jp @ v - Jm @ v) / (2 * eps), rtol=0, atol=1e-7)
        A, b = task.compute(robot.update(q, v), 0.0)
        np.testing.assert_allclose(b, -drift - 6.0 * w - 9.0 * e, rtol=0, atol=0)


def test_axes_select_rows_and_a_trajectory_target(robot):
    traj = lambda t: (np.array([0.3, 0.0, 0.4 + 0.01 * t]), np.array([0, 0, 0.01]), np.zeros(3))  # noqa: E731
    task = CenterOfMassTask(robot, traj, axes="z")
    full = CenterOfMassTask(robot, traj)
    q, v = _states(1)[0][1:]
    kin = robot.update(q, v)
    assert task.dim == 1
    A, b = task.compute(kin, 2.0)
    A3, b3 = full.compute(kin, 2.0)
    np.testing.assert_array_equal(A, A3[2:3])
    np.testing.assert_array_equal(b, b3[2:3])
    assert task.error(kin, 2.0)[0] == pytest.approx(0.42 - _com_by_bodies(robot, q)[2], abs=1e-14)


def test_bad_input_names_the_task(robot):
    with pytest.raises(ConfigError, match="lean: a centre-of-mass target is 3 finite numbers"):
        CenterOfMassTask(robot, [0.0, 0.0], name="lean")
    with pytest.raises(ConfigError, match="lean: axes='xz'"):
        CenterOfMassTask(robot, [0.0, 0.0, 0.0], axes="xz", name="lean")


def _layouts(robot, com):
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", T_AB, 1000, 33)
    hand = FrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40)
    tip = FrameTask(robot, "yumi_link_7_l", Circle(CENTER, 0.1, 1.5), 400, 40, rows="position")
    post = PostureTask(robot, np.zeros(14), kp=4, kd=4)
    return {
        "weighted": [[c], [(hand, 50.0), (com, 20.0), (post, 1.0)]],
        "strict": [[c], [(com, 4.0), (tip, 50.0)], [post]],  # 12 rows above Gauss: the KKT path
    }


@pytest.mark.parametrize("layout", ["weighted", "strict"])
def test_compiled_step_takes_its_python_rows_among_compiled_ones(robot, layout):
    target = np.array([0.25, 0.0, 0.35])
    fast = UdwadiaKalabaController(
        robot, levels=_layouts(robot, CenterOfMassTask(robot, target))[layout], limits=[], warn_free_dof=False
    )
    slow = UdwadiaKalabaController(
        robot,
        levels=_layouts(robot, CenterOfMassTask(robot, target))[layout],
        limits=[],
        warn_free_dof=False,
        fused=False,
    )
    P = fast._plan
    assert P is not None and [type(x[2]).__name__ for x in P.py_tasks] == ["CenterOfMassTask"]
    assert fast.python_tasks == (P.py_tasks[0][2],) and slow.python_tasks == ()  # the public view of the same
    assert P.frame_tasks  # the hand's rows stay compiled
    for t, q, v in _states(5):
        tau_f, tau_s = fast(t, q, v), slow(t, q, v)
        np.testing.assert_allclose(tau_f, tau_s, rtol=1e-12, atol=1e-12 * np.max(np.abs(tau_s)))
        assert fast.info.path == "kkt"
        np.testing.assert_allclose(
            fast.kin.h, slow.kin.h, rtol=0, atol=1e-12
        )  # the step's h, written by the kernel
        np.testing.assert_array_equal(fast.kin.M, slow.kin.M)


def _simulate(robot, ctl, q, v, T, dt=1e-3):
    """Semi-implicit Euler on Pinocchio's forward dynamics with the URDF's joint damping."""
    model, d = robot.model, robot.model.createData()
    for k in range(int(round(T / dt))):
        tau = ctl(k * dt, q, v)
        a = pin.aba(model, d, q, v, tau - robot.damping * v)
        v = v + dt * a
        q = pin.integrate(model, q, dt * v)
    return q, v


def test_closed_loop_tracking_of_a_moved_and_a_moving_target(robot):
    q0 = np.zeros(14)
    c0 = pin.centerOfMass(robot.model, robot.model.createData(), q0)
    goal = c0 + np.array([0.004, -0.003, -0.005])
    com = CenterOfMassTask(robot, goal, kp=100.0, kd=20.0)
    post = PostureTask(robot, q0, kp=4.0, kd=4.0)
    ctl = UdwadiaKalabaController(robot, levels=[[com], [post]], limits=[], warn_free_dof=False)
    assert ctl._plan is not None and ctl._plan.py_tasks
    q, v = _simulate(robot, ctl, q0.copy(), np.zeros(14), 1.5)
    err0 = np.linalg.norm(goal - c0)
    err = np.linalg.norm(goal - com.com(q))
    assert err < 1e-4 * err0  # critically damped at 10 rad/s: (1 + 15) e^(−15) ≈ 5e-6 after 1.5 s

    amp, w = 0.003, 2.0  # a moving target: c_d(t) = c0 + amp sin(w t) x̂
    com.trajectory = lambda t: (  # noqa: E731
        c0 + amp * np.array([np.sin(w * t), 0.0, 0.0]),
        amp * w * np.array([np.cos(w * t), 0.0, 0.0]),
        -amp * w * w * np.array([np.sin(w * t), 0.0, 0.0]),
    )
    com._const = None
    q, v = q0.copy(), np.zeros(14)
    dt, worst = 1e-3, 0.0
    for k in range(2000):
        t = k * dt
        tau = ctl(t, q, v)
        if t >= 1.0:
            worst = max(worst, float(np.linalg.norm(com.desired(t)[0] - com.com(q))))
        a = pin.aba(robot.model, robot.model.createData(), q, v, tau - robot.damping * v)
        v = v + dt * a
        q = pin.integrate(robot.model, q, dt * v)
    assert worst < 1e-2 * amp  # after the transient the error is the integrator's O(dt) lag, not the law's


def test_pickled_controller_keeps_its_python_rows(robot):
    import pickle

    levels = _layouts(robot, CenterOfMassTask(robot, [0.25, 0.0, 0.35]))["weighted"]
    ctl = UdwadiaKalabaController(robot, levels=levels, limits=[], warn_free_dof=False)
    states = _states(3)
    ctl(*states[0])
    twin = pickle.loads(pickle.dumps(ctl))
    assert twin._plan.py_tasks[0][0].base is not None  # a view into the unpickled plan's table again
    for t, q, v in states:
        np.testing.assert_array_equal(twin(t, q, v), ctl(t, q, v))
    twin._plan.py_tasks[0][2].set_target([0.2, 0.0, 0.3])  # a new target reaches the twin's rows only
    t, q, v = states[0]
    assert not np.allclose(twin(t, q, v), ctl(t, q, v))


def test_pidc_compiled_step_with_the_com_task_equals_its_numpy_step_and_tracks():
    """PIDC on the five-bar with the centre of mass as its task coordinates (a circle of 5 mm in the mechanism's
    x-z plane): the compiled closed-chain step takes the task's Python rows (``plan.python``) and gives the NumPy
    step's τ, q̈_des, τ_∥, f_c and λ to 1e-10 on a closed loop (rigid projection plant), which tracks the circle."""
    from cmstack.controllers.pidc import PIDC
    from cmstack.sim.projection_sim import ProjectionPlant

    def law(robot):
        c0 = CenterOfMassTask(robot).com(robot.q_initial)
        r, w = 0.005, 2 * np.pi

        def circle(t):
            s, c = np.sin(w * t), np.cos(w * t)
            return (
                c0 + r * np.array([c - 1.0, 0.0, s]),
                r * w * np.array([-s, 0.0, c]),
                -r * w * w * np.array([c, 0.0, s]),
            )

        return PIDC(robot, None, CenterOfMassTask(robot, circle, kp=400.0, kd=40.0))

    robot, robot_ref = Robot.from_mjcf("mjcf/five_bar.xml"), Robot.from_mjcf("mjcf/five_bar.xml")
    ctl, ref = law(robot), law(robot_ref)
    assert ctl._plan is not None and [type(x).__name__ for x in ctl._plan.python.tasks] == [
        "CenterOfMassTask"
    ]
    com = ctl.tasks[0]
    assert ctl.python_tasks == (com,)
    plant = ProjectionPlant(robot, None, sim_dt=1e-3)
    plant.reset(robot.q_initial)
    worst = 0.0
    for k in range(600):
        t = k * 1e-3
        q, v = plant.state()
        tau = ctl(t, q, v)
        tau_ref = ref._numpy_step(t, q, v)
        a, b = ctl.info, ref.info
        assert (a.rank, a.status) == (b.rank, b.status)
        assert np.abs(tau - tau_ref).max() <= 1e-10 * max(1.0, np.abs(tau_ref).max())
        for x, y in ((a.qdd_des, b.qdd_des), (a.tau_par, b.tau_par), (a.f_c, b.f_c), (a.lam, b.lam)):
            assert np.abs(x - y).max() <= 1e-10 * max(1.0, np.abs(y).max())
        if t >= 0.3:
            worst = max(worst, float(np.linalg.norm(com.desired(t)[0] - com.com(q))))
        plant.set_torque(tau)
        plant.step()
    assert worst < 1e-4  # 5 mm circle: below 2 % of its radius after the first 0.3 s


def test_python_rows_follow_a_new_data_object():
    """``Robot.add_frame`` makes a new Pinocchio data object: the Python rows' snapshot takes its M (the plan
    rebinds its addresses), so the step still equals the generic path's."""
    robots = [Robot("urdf/yumi.urdf"), Robot("urdf/yumi.urdf")]
    fast, slow = (
        UdwadiaKalabaController(
            r,
            levels=_layouts(r, CenterOfMassTask(r, [0.25, 0.0, 0.35]))["weighted"],
            limits=[],
            warn_free_dof=False,
            fused=f,
        )
        for r, f in zip(robots, (True, False))
    )
    states = _states(2)
    fast(*states[0])
    for r in robots:
        r.add_frame("probe", "yumi_link_7_r", pin.SE3(np.eye(3), np.array([0.0, 0.0, 0.1])))
    t, q, v = states[1]
    tau = fast(t, q, v)
    np.testing.assert_allclose(tau, slow(t, q, v), rtol=1e-12, atol=1e-12 * np.max(np.abs(tau)))
    assert fast._plan.python._data is robots[0].data
