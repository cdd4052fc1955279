"""The compiled kernels of the UK step (controllers/_uk_kernels.py), each against the Python
formulation it replaces: Pinocchio's log3 and frame quantities, the tasks' qp_rows, the Schur
complement KKT solve against a dense KKT solve, the effort check; then the fused controller against
the generic path (fused=False) on every solver path (KKT, null space, QP with active limits)."""

import numpy as np
import pinocchio as pin
import pytest
from _yumi_states import recorded_states, thesis_setup

from cmstack.controllers import _uk_kernels as K
from cmstack.controllers.udwadia_kalaba import GAUSS, UdwadiaKalabaController
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit
from cmstack.models.loops import RigidCoupling
from cmstack.models.trajectory import Circle

LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED


def _rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


def test_log3_equals_pinocchio():
    rng = np.random.default_rng(0)
    out = np.empty(3)
    angles = list(rng.uniform(0, np.pi - 1e-3, 200)) + [
        0.0,
        1e-12,
        1e-9,
        1e-7,
        1e-5,
        1e-3,
        np.pi - 1e-2,
        np.pi - 1e-4,
        np.pi - 1e-6,
    ]
    for th in angles:
        axis = rng.normal(size=3)
        w = th * axis / np.linalg.norm(axis)
        R = pin.exp3(w)
        K.log3(R, out)
        np.testing.assert_allclose(out, pin.log3(R), rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(out, w, rtol=1e-7, atol=1e-12)  # Log(Exp(w)) = w for |w| < π


def _plan_and_kin(ctl, t, q, v):
    kin = ctl.robot.update(q, v)
    P = ctl._plan
    P.bind(ctl.robot.data, ctl.D, ctl._sqrt_rank_tol)
    return P, kin


def _task_rows(P, t, kin, terr, Ab):
    """The kernel's task rows of the plan ``P`` at (t, kin.q, kin.v) into Ab, the pose errors into terr."""
    ed, R = np.empty((4, terr.shape[1])), np.empty((3, 3))  # the kernel's scratch
    K.task_rows_into(t, kin.q, kin.v, *P.task_tables(), terr, Ab, ed, R)


@pytest.fixture(scope="module")
def setup():
    cfg, robot, c, u = thesis_setup()
    return cfg, robot, c, u, recorded_states()


def test_frame_states_equal_pinocchio(setup):
    """R, p, J (LOCAL_WORLD_ALIGNED), J v and the classical acceleration of every frame of the plan,
    against Pinocchio's getFrameJacobian / getFrameClassicalAcceleration (via Kinematics.frame)."""
    cfg, robot, c, u, states = setup
    off = FrameTask(
        robot,
        "yumi_link_7_r",
        kp=1.0,
        kd=1.0,
        offset=pin.SE3(pin.rpy.rpyToMatrix(0.3, -0.2, 1.0), np.array([0.05, -0.1, 0.2])),
    )
    base = FrameTask(robot, "yumi_body", kp=1.0, kd=1.0) if robot.model.existFrame("yumi_body") else None
    tasks = [c, off] + ([base] if base else [])
    ctl = UdwadiaKalabaController(robot, levels=[tasks, [u, GAUSS]], limits=[], warn_free_dof=False)
    P = ctl._plan
    fids = {c.fB: None, c.f2: None, off.fid: None, u.fid: None}
    for t, q, v in states[::40]:
        P, kin = _plan_and_kin(ctl, t, q, v)
        K.frame_states(robot.data.J, kin.v, P.pose_table(robot.data), P.fint, P.fplace, P.fJ, P.fvec)
        for k, fid in enumerate(_plan_frames(ctl)):
            fs = kin.frame(fid)
            np.testing.assert_allclose(P.fvec[k, :9].reshape(3, 3), fs.R, atol=1e-14)
            np.testing.assert_allclose(P.fvec[k, 9:12], fs.p, atol=1e-14)
            np.testing.assert_allclose(P.fJ[k], fs.J, atol=1e-13)
            np.testing.assert_allclose(P.fvec[k, 12:18], fs.twist, atol=1e-12)
            np.testing.assert_allclose(P.fvec[k, 18:24], fs.acc, rtol=1e-12, atol=1e-11)
            fids[fid] = True
    assert all(fids.values())


def test_bias_forces_equal_pinocchio_nle():
    """The kernel's Newton–Euler pass in world axes (from data.J and the joints' poses after crba) equals
    Pinocchio's nonLinearEffects on random states of the YuMi and of a Panda (a tree and a chain), and of the
    Stewart platform with six ball joints (nq = 42, nv = 36: a joint of three columns, q on the manifold)."""
    from cmstack.models.robot import Robot, example_robot_data_path

    for robot in (
        Robot("urdf/yumi.urdf"),
        Robot.from_urdf(
            example_robot_data_path("panda_description/urdf/panda.urdf"),
            locked_joints={"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0},
        ),
        Robot.from_mjcf("mjcf/stewart_ball.xml"),
    ):
        m = robot.model
        d, ref = m.createData(), m.createData()
        nj = m.njoints - 1
        # [parent row, first v column, columns] (an independent build of ``step_engine.body_tables``' table)
        parent = np.array(
            [(m.parents[j] - 1, m.idx_vs[j], m.nvs[j]) for j in range(1, nj + 1)], dtype=np.int64
        ).reshape(nj, 3)
        inert = np.array(
            [
                np.r_[m.inertias[j].mass, m.inertias[j].lever, np.asarray(m.inertias[j].inertia).ravel()]
                for j in range(1, nj + 1)
            ]
        )
        rng = np.random.default_rng(3)
        for _ in range(30):
            # (pin.normalize: the ball joints' quaternions onto the unit sphere; the hinges' angles unchanged)
            q, v = pin.normalize(m, rng.uniform(-3, 3, m.nq)), rng.normal(scale=3.0, size=m.nv)
            pin.crba(m, d, q, pin.Convention.WORLD)
            jpose = np.array(
                [np.r_[d.oMi[j].rotation.ravel(), d.oMi[j].translation] for j in range(1, nj + 1)]
            )
            h = np.full(m.nv, np.nan)
            K.bias_forces(d.J, v, jpose, parent, inert, m.gravity.linear.copy(), np.empty((nj, 18)), h)
            expected = pin.nonLinearEffects(m, ref, q, v)
            np.testing.assert_allclose(h, expected, rtol=0, atol=1e-13 * np.abs(expected).max())


def _plan_frames(ctl):
    """Frame ids of the plan's slots, in slot order (from the task table)."""
    P = ctl._plan
    out = {}
    for k, task in P.task_items:
        kind, a, b = P.tint[k, :3]
        if kind == 3:  # a loop closure (the coupling: frames B = E1·T_AB and E2)
            out[a], out[b] = task.fa, task.fb
        elif kind == 1:
            out[a] = task.fid
    return [out[s] for s in range(len(out))]


@pytest.mark.parametrize("rows", ["full", "position", "orientation"])
def test_task_rows_equal_qp_rows(setup, rows):
    """[A | b] of every built-in task (coupling, frame task with a trajectory and with a constant
    target, posture on all or some joints), scaled by √ω above the last level, equal qp_rows."""
    cfg, robot, c0, u0, states = setup
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", c0.T_AB, 7.0, 3.0, rows=rows)
    traj = Circle([0.4, 0.2, 0.5], 0.1, 1.3, 0.4, R=pin.rpy.rpyToMatrix(0.2, 0.1, -0.3))
    u = FrameTask(robot, "yumi_link_7_l", traj, 40.0, 9.0, rows=rows)
    s = FrameTask(robot, "yumi_link_7_r", kp=5.0, kd=2.0, rows=rows, offset=np.eye(4))
    s.set_target(pin.SE3(pin.rpy.rpyToMatrix(0.5, -0.4, 2.0), np.array([0.3, -0.2, 0.4])))
    p_all = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
    p_some = PostureTask(robot, None, joints=["yumi_joint_3_r", "yumi_joint_1_l"], kp=3.0, kd=1.0)
    p_some.set_target([0.2, -0.3])
    levels = [[(c, 4.0), (u, 2.0)], [s, p_some], [(p_all, 3.0), GAUSS]]
    ctl = UdwadiaKalabaController(robot, levels=levels, limits=[], warn_free_dof=False)
    scale = [2.0, np.sqrt(2.0), 1.0, 1.0, 1.0]
    for t, q, v in states[::50]:
        ctl(t, q, v)  # fills the targets, gains and posture references
        P, kin = _plan_and_kin(ctl, t, q, v)
        K.frame_states(robot.data.J, kin.v, P.pose_table(robot.data), P.fint, P.fplace, P.fJ, P.fvec)
        Ab = np.full(P.ab_shape, np.nan)
        terr = np.full_like(P.terr, np.nan)
        _task_rows(P, t, kin, terr, Ab)
        n = robot.nv
        for (k, task), sc in zip(P.task_items, scale):
            A, b = task.qp_rows(kin, t)
            r0 = P.tint[k, 3]
            np.testing.assert_allclose(Ab[r0 : r0 + task.dim, :n], sc * A, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(Ab[r0 : r0 + task.dim, n], sc * b, rtol=1e-10, atol=1e-10)
            # the pose error the kernel reports (for integral action) is Task.error's
            np.testing.assert_allclose(terr[k, task.rows], task.error(kin, t), rtol=1e-10, atol=1e-12)
        assert np.all(np.isfinite(Ab))


def test_python_rows_and_fused_rows_are_one_function(setup):
    """The fused step's rows of each task, fed the Python path's own frames (Kinematics.frame packed as the
    kernel's frame table), are the Python rows bit for bit: both are the same compiled function of
    models/_task_kernels.py and the same law (tasks with a trajectory, a constant target, integral
    bias, postures, every row selection)."""
    from cmstack.controllers.uk_robust import IntegralTask
    from cmstack.models.coupling import _frame_vec

    cfg, robot, c0, u0, states = setup
    traj = Circle([0.4, 0.2, 0.5], 0.1, 1.3, 0.4, R=pin.rpy.rpyToMatrix(0.2, 0.1, -0.3))
    for rows in ("full", "position", "orientation"):
        c = IntegralTask(
            RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", c0.T_AB, 7.0, 3.0, rows=rows), 5.0, 1.0
        )
        u = IntegralTask(FrameTask(robot, "yumi_link_7_l", traj, 40.0, 9.0, rows=rows), 30.0, 1.0)
        s = FrameTask(robot, "yumi_link_7_r", kp=5.0, kd=2.0, rows=rows, offset=np.eye(4))
        s.set_target(pin.SE3(pin.rpy.rpyToMatrix(0.5, -0.4, 2.0), np.array([0.3, -0.2, 0.4])))
        p_some = PostureTask(robot, None, joints=["yumi_joint_3_r", "yumi_joint_1_l"], kp=3.0, kd=1.0)
        p_some.set_target([0.2, -0.3])
        p_all = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
        ctl = UdwadiaKalabaController(
            robot,
            levels=[[(c, 4.0), (u, 2.0)], [s, p_some], [(p_all, 3.0), GAUSS]],
            limits=[],
            warn_free_dof=False,
        )
        assert ctl._plan is not None and ctl._plan.integrals
        scale = [2.0, np.sqrt(2.0), 1.0, 1.0, 1.0]
        for t, q, v in states[::60]:
            ctl(t, q, v)  # targets, gains, references, integral states z
            P, kin = _plan_and_kin(ctl, t, q, v)
            for k, fid in enumerate(_plan_frames(ctl)):
                fs = kin.frame(fid)
                P.fvec[k] = _frame_vec(fs)
                P.fJ[k] = fs.J
            Ab = np.full(P.ab_shape, np.nan)
            _task_rows(P, t, kin, P.terr, Ab)
            n = robot.nv
            for (k, task), sc in zip(P.task_items, scale):
                outer = next((o for kk, o in P.integrals if kk == k), task)
                A, b = outer.qp_rows(kin, t)
                r0 = P.tint[k, 3]
                np.testing.assert_array_equal(Ab[r0 : r0 + task.dim, :n], sc * A)
                np.testing.assert_allclose(Ab[r0 : r0 + task.dim, n], sc * b, rtol=1e-15, atol=1e-15)
                if outer is task:
                    np.testing.assert_array_equal(Ab[r0 : r0 + task.dim, n], sc * b)
                np.testing.assert_allclose(P.terr[k, task.rows], task.error(kin, t), rtol=1e-14, atol=1e-15)


def test_kkt_solve_equals_the_dense_kkt_system(setup):
    """v̇ and λ of the Schur-complement kernel solve [H Eᵀ; E 0][v̇; λ] = [r; f] (a dense solve) and
    τ = M v̇ + h + D v; H and r are M + Σ ω AᵀA and −(h + D v) + Σ ω Aᵀ b."""
    cfg, robot, c, u, states = setup
    p = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
    for levels in ([[c], [(u, 50.0), GAUSS]], [[c], [u], [p, GAUSS]], [[(u, 7.0), (p, 0.5), GAUSS]]):
        ctl = UdwadiaKalabaController(robot, levels=levels, limits=[], warn_free_dof=False)
        for t, q, v in states[::80]:
            ctl(t, q, v)
            P, kin = _plan_and_kin(ctl, t, q, v)
            K.frame_states(robot.data.J, kin.v, P.pose_table(robot.data), P.fint, P.fplace, P.fJ, P.fvec)
            Ab = np.empty(P.ab_shape)
            _task_rows(P, t, kin, P.terr, Ab)
            out = np.empty(3 * robot.nv + P.m_up)
            st = K.kkt_solve(
                kin.M, kin.h, ctl.D, kin.v, Ab, P.tint, P.tflt, P.m_up, P.gauss, ctl._sqrt_rank_tol, P.wk, out
            )
            assert st == K.OK
            n, m = robot.nv, P.m_up
            hD = kin.h + ctl.D * kin.v
            H, r = kin.M.copy(), -hD
            for i, j, w in P._final:
                A, b = Ab[i:j, :n], Ab[i:j, n]
                H += w * A.T @ A
                r += w * A.T @ b
            np.testing.assert_allclose(P.H, H, rtol=1e-13, atol=1e-9)
            np.testing.assert_allclose(P.r, r, rtol=1e-13, atol=1e-9)
            E, f = Ab[:m, :n], Ab[:m, n]
            KKT = np.block([[H, E.T], [E, np.zeros((m, m))]])
            sol = np.linalg.solve(KKT, np.r_[r, f])
            assert _rel(out[:n], sol[:n]) < 1e-10
            if m:
                assert _rel(out[3 * n :], sol[n:]) < 1e-8  # S λ = E H⁻¹ r − f
            np.testing.assert_allclose(out[2 * n : 3 * n], hD, rtol=1e-15)
            assert _rel(out[n : 2 * n], kin.M @ out[:n] + hD) < 1e-13


def test_kkt_solve_reports_rank_deficiency():
    """Two copies of one row: the Schur complement is singular, the kernel sends to the null space;
    an H that is not positive definite without rows above is SINGULAR."""
    n = 3
    M = np.diag([1.0, 2.0, 3.0])
    tint = np.array([[0, 0, 0, 0, 0, 2, 0, 0]], dtype=np.int64)
    tflt = np.array([[0.0, 0.0, 1.0, 0.0]])
    Ab = np.array([[1.0, 2.0, 0.0, 1.0], [1.0, 2.0, 0.0, 1.0]])
    wk = np.zeros(K.kkt_work_size(n, 2))
    out = np.empty(3 * n + 2)
    z = np.zeros(n)
    assert K.kkt_solve(M, z, z, z, Ab, tint, tflt, 2, 1.0, 1e-4, wk, out) == K.NULLSPACE
    Ab[1, :3] = [0.0, 1.0, 1.0]
    assert K.kkt_solve(M, z, z, z, Ab, tint, tflt, 2, 1.0, 1e-4, wk, out) == K.OK
    np.testing.assert_allclose(Ab[:, :3] @ out[:3], Ab[:, 3], atol=1e-14)
    wk0 = np.zeros(K.kkt_work_size(n, 0))
    assert K.kkt_solve(-M, z, z, z, Ab[:0], tint[:0], tflt[:0], 0, 1.0, 1e-4, wk0, out[: 3 * n]) == K.SINGULAR


def test_effort_violated_equals_the_limit(setup):
    cfg, robot, c, u, states = setup
    lim = EffortLimit(robot, tau_max=np.linspace(1.0, 20.0, 14))
    sub = EffortLimit(robot, tau_max=[5.0, 2.0], joints=["yumi_joint_2_r", "yumi_joint_4_l"])
    rng = np.random.default_rng(1)
    for _ in range(200):
        tau = rng.normal(scale=8.0, size=14)
        for L in (lim, sub):
            assert K.effort_violated(
                tau, np.ascontiguousarray(L.idx, dtype=np.int64), L.tau_max
            ) == L.violated(None, None, None, tau)


def _pair(robot, **kw):
    return (
        UdwadiaKalabaController(robot, fused=True, **kw),
        UdwadiaKalabaController(robot, fused=False, **kw),
    )


@pytest.mark.parametrize(
    "case",
    [
        "weighted",
        "strict",
        "3 levels",
        "no levels above",
        "effort low",
        "position+velocity",
        "rank deficient",
        "posture strict last",
        "posture strict last, effort low",
        "partial posture strict last",
    ],
)
def test_fused_step_equals_the_generic_path(setup, case):
    """Same torques (1e-9 relative), the same solver path, the same forces, step by step on a real
    closed-loop run; the cases reach the KKT, null-space and QP paths."""
    cfg, robot, c, u, states = setup
    p = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
    kw = dict(warn_free_dof=False)
    if case == "weighted":
        kw.update(levels=[[c], [(u, 50.0), GAUSS]], limits=[EffortLimit(robot)])
    elif case == "strict":
        kw.update(levels=[[c], [(u, 50.0)], [GAUSS]], limits=[EffortLimit(robot)])
    elif case == "3 levels":
        kw.update(levels=[[c], [u], [p, GAUSS]], limits=[EffortLimit(robot)])
    elif case == "no levels above":
        kw.update(levels=[[(u, 20.0), (p, 1.0), GAUSS]], limits=[])
    elif case == "effort low":  # 0.9 × the peak torques of the run without limits: a few QPs
        free = UdwadiaKalabaController(
            robot, levels=[[c], [(u, 50.0), GAUSS]], limits=[], warn_free_dof=False
        )
        peak = np.max([np.abs(free(t, q, v)) for t, q, v in states[::4]], axis=0)
        kw.update(levels=[[c], [(u, 50.0), GAUSS]], limits=[EffortLimit(robot, tau_max=0.9 * peak + 1.0)])
    elif case == "position+velocity":  # checked in Python after the kernel; a few sequential QPs
        V = np.array([v for _, _, v in states])
        Q = np.array([q for _, q, _ in states])
        kw.update(
            levels=[[c], [u], [p, GAUSS]],
            limits=[
                JointVelocityLimit(robot, dt=0.005, v_max=1.02 * np.abs(V).max(0)),
                JointPositionLimit(robot, dt=0.005, a_max=50.0, q_min=Q.min(0) - 0.02, q_max=Q.max(0) + 0.02),
            ],
        )
    elif case == "posture strict last":  # Gauss alone last: the posture level is the KKT's ("absorbed")
        kw.update(levels=[[c], [u], [p]], limits=[EffortLimit(robot)])
    elif case == "posture strict last, effort low":  # a limit hit: the generic path's QPs, same torques
        free = UdwadiaKalabaController(robot, levels=[[c], [u], [p]], limits=[], warn_free_dof=False)
        peak = np.max([np.abs(free(t, q, v)) for t, q, v in states[::4]], axis=0)
        kw.update(levels=[[c], [u], [p]], limits=[EffortLimit(robot, tau_max=0.9 * peak + 1.0)])
    elif case == "partial posture strict last":  # 14 rows on 14 DoF: one KKT, not absorbed
        p2 = PostureTask(robot, None, joints=["yumi_joint_3_r", "yumi_joint_1_l"], kp=3.0, kd=1.0)
        p2.set_target([0.2, -0.3])
        kw.update(levels=[[c], [(u, 50.0)], [p2]], limits=[EffortLimit(robot)])
    else:
        c2 = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", c.T_AB, c.kp, c.kd, rows="position")
        kw.update(levels=[[c, c2], [(u, 50.0), p, GAUSS]], limits=[EffortLimit(robot)])
    fast, slow = _pair(robot, **kw)
    assert fast._plan is not None and slow._plan is None
    paths = set()
    worst = 0.0
    for t, q, v in states[::4]:
        a = fast(t, q, v)
        b = slow(t, q, v)
        paths.add(fast.info.path)
        if fast._plan.absorbed and fast.info.path == "kkt":  # the strict solution, without null spaces
            assert slow.info.path == "nullspace"
        else:
            assert fast.info.path == slow.info.path
        if case == "posture strict last, effort low" and slow.info.path == "sequential":
            # the absorbed plan hands a limited step to the generic path whole, so both run the same
            # sequential QPs; ProxSuite's cold start there is not bitwise repeatable (two identical
            # generic controllers differ by 6.1e-7 at t = 0 in some runs), so these steps are judged on
            # the limits being met, not on equality
            lim = fast.limits[0]
            assert np.all(np.abs(a[lim.idx]) <= lim.tau_max * (1 + 1e-6)), t
            continue
        worst = max(worst, _rel(a, b))
        assert fast.info.limits_active == slow.info.limits_active
        scale = np.linalg.norm(b) + 1.0
        for name in ("Qc", "Qu", "Qlim"):
            np.testing.assert_allclose(
                getattr(fast.info, name), getattr(slow.info, name), rtol=0, atol=1e-6 * scale
            )
    assert worst <= 1e-9, worst
    expected = {
        "effort low": "qp",
        "position+velocity": "sequential",
        "rank deficient": "nullspace",
        "posture strict last, effort low": "sequential",
    }.get(case, "kkt")
    assert expected in paths, paths
    if case == "posture strict last, effort low":
        assert "kkt" in paths, paths  # the unlimited steps absorbed, the limited ones through the QPs
    assert fast._plan.absorbed == case.startswith("posture strict last")


def test_gains_targets_and_new_frames_are_read_every_step(setup):
    """Gains, a new constant target, a new posture reference and a frame added after construction
    (a new Pinocchio data object) are taken into account by the fused step."""
    cfg, robot, c0, u, states = setup
    c = RigidCoupling(robot, "yumi_link_7_l", "yumi_link_7_r", c0.T_AB, c0.kp, c0.kd)
    s = FrameTask(robot, "yumi_link_7_r", kp=5.0, kd=2.0)
    s.set_target(pin.SE3(np.eye(3), np.array([0.3, -0.2, 0.4])))
    p = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
    fast, slow = _pair(robot, levels=[[c], [s], [p, GAUSS]], limits=[])
    t, q, v = states[30]
    np.testing.assert_allclose(fast(t, q, v), slow(t, q, v), rtol=1e-9)
    s.set_target(pin.SE3(pin.rpy.rpyToMatrix(0.1, 0.2, 0.3), np.array([0.35, -0.25, 0.45])))
    p.set_target(states[10][1])
    s.kp, c.kd, p.kd = 9.0, 4.0, 1.0
    FrameTask(robot, "yumi_link_7_r", kp=1.0, kd=1.0, offset=pin.SE3(np.eye(3), np.array([0.0, 0.0, 0.3])))
    np.testing.assert_allclose(fast(t, q, v), slow(t, q, v), rtol=1e-9)
    assert (
        _rel(fast(t, q, v), UdwadiaKalabaController(robot, levels=[[c], [s], [p, GAUSS]], limits=[])(t, q, v))
        < 1e-9
    )


def test_plans_of_any_joint_count_share_one_compiled_step(setup):
    """Plans with 0 to 3 joints (Gauss alone, a posture, one frame, the thesis set-up plus a frame
    on the fixed base) and an integer time all run one compiled signature of the kernel (no
    recompilation per controller), with the generic path's torques (Gauss alone gives τ ≈ 0, so
    the tolerance is relative to h)."""
    cfg, robot, c, u, states = setup
    p = PostureTask(robot, states[0][1], kp=10.0, kd=6.0)
    base = FrameTask(robot, "yumi_body", kp=1.0, kd=1.0)
    base.set_target(pin.SE3.Identity())
    t, q, v = states[60]
    scale = np.linalg.norm(robot.update(q, v).h)
    for levels in ([[GAUSS]], [[p, GAUSS]], [[(u, 5.0), p, GAUSS]], [[c], [u], [p, base, GAUSS]]):
        fast, slow = _pair(robot, levels=levels, limits=[], warn_free_dof=False)
        np.testing.assert_allclose(fast(1, q, v), slow(1, q, v), rtol=1e-9, atol=1e-9 * scale)
    assert len(K.uk_step.signatures) == 1, K.uk_step.signatures


@pytest.mark.parametrize("rows", ["full", "orientation"])
def test_integral_tasks_take_the_fused_path_with_the_generic_torques(setup, rows):
    """The robust law (controllers/uk_robust.py: IntegralTask on the coupling and the task, position
    filter) through the compiled step equals its generic path along a closed loop (same torques to 1e-9
    relative, same integrals z): the bias K_i z enters the kernel in the task's axes and is rotated with
    the rows; z advances once per step from the error the kernel reports.  Both controllers see the same
    noisy states; the loop is closed by the fused one."""
    from cmstack.controllers.uk_robust import IntegralTask, RobustUKController
    from cmstack.scenarios._common import default_config
    from cmstack.scenarios.yumi_dual_arm import build_problem, initial_state
    from cmstack.sim.plant import MujocoPlant

    cfg = default_config("yumi_dual_arm")
    robot = type(setup[1])(cfg["urdf"])
    c, u, traj, _ = build_problem({**cfg, "coupling_rows": rows}, robot)
    u = FrameTask(robot, cfg["frame1"], traj, u.kp, u.kd, rows=rows, name="E1")
    kw = dict(
        ki=1e4,
        z_max=1e-3,
        task_ki=1500.0,
        task_z_max=1e-2,
        q_filter_hz=1.6,
        control_dt=cfg["control_dt"],
        omega=cfg["omega"],
        priority=cfg["priority"],
        torque_limits=True,
        model_damping=True,
        warn_free_dof=False,
    )
    fast = RobustUKController(robot, c, u, **kw)
    slow = RobustUKController(robot, c, u, fused=False, **kw)  # one model: the tasks' frames are its
    assert fast.uk._plan is not None and slow.uk._plan is None
    assert [type(t) for _, t in fast.uk._plan.integrals] == [IntegralTask, IntegralTask]
    plant = MujocoPlant(cfg["mjcf_virtual"], robot.joint_names, sim_dt=cfg["control_dt"])
    plant.reset(initial_state(cfg, robot))
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(120):
        t = plant.time
        q, v = plant.state()
        q = q + 1e-4 * rng.normal(size=q.size)
        tau = fast(t, q, v)
        worst = max(worst, _rel(tau, slow(t, q, v)))
        plant.set_torque(tau)
        plant.step()
    assert worst <= 1e-9, worst
    assert fast.uk.info.path == "kkt"
    for a, b in ((fast.coupling, slow.coupling), (fast.task, slow.task)):
        assert np.any(a.z != 0)
        np.testing.assert_allclose(a.z, b.z, rtol=1e-9, atol=1e-15)
