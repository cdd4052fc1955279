"""The compiled UK step's typed, read-only record (models/step_engine.StepRecord, issue 29 item 3): q, v, M, h,
the frames, each group's rows and each task's error, checked against Pinocchio's own pass and the tasks' own
rows on the same state, on the YuMi (a task with Python rows among compiled ones) and the five-bar (closed)."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.com import CenterOfMassTask
from cmstack.models.coupling import FrameTask, PostureTask
from cmstack.models.loops import RigidCoupling
from cmstack.models.robot import Robot
from cmstack.models.trajectory import Circle

T_AB = pin.SE3(np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]]), np.array([0.0, -0.4, 0.12]))


def _close(a, b, tol=1e-12):
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(1.0, float(np.max(np.abs(b)))))


def test_record_equals_pinocchio_and_the_tasks_rows():
    robot, ref = Robot("urdf/yumi.urdf"), Robot("urdf/yumi.urdf")

    def layout(r):
        c = RigidCoupling(r, "yumi_link_7_l", "yumi_link_7_r", T_AB, 1000, 33)
        hand = FrameTask(r, "yumi_link_7_l", Circle([0.44, 0.19, 0.51], 0.1, 1.5), 400, 40)
        com = CenterOfMassTask(r, [0.25, 0.0, 0.35])
        return [[c], [(hand, 50.0), (com, 20.0), (PostureTask(r, np.zeros(14), kp=4, kd=4), 1.0)]]

    ctl = UdwadiaKalabaController(robot, levels=layout(robot), limits=[], warn_free_dof=False)
    tasks = [task for L in layout(ref) for task in (x if not isinstance(x, tuple) else x[0] for x in L)]
    rng = np.random.default_rng(5)
    for k in range(3):
        t, q, v = 0.1 * k, 0.4 * rng.normal(size=14), 0.4 * rng.normal(size=14)
        ctl(t, q, v)
        rec = ctl.record()
        kin = ref.update(q, v)
        assert rec.t == t
        np.testing.assert_array_equal(rec.q, q)
        _close(rec.M, kin.M)
        _close(rec.h, kin.h)
        P = ctl._plan
        assert set(P.frame_index) and all(
            fid in P.frame_index for fid in (tasks[0].fB, tasks[0].f2, tasks[1].fid)
        )
        for fid in P.frame_index:
            F, G = rec.frame(fid), kin.frame(fid)
            for a, b in ((F.R, G.R), (F.p, G.p), (F.J, G.J), (F.twist, G.twist), (F.acc, G.acc)):
                _close(a, b)
        (A1, b1), (A2, b2) = rec.groups  # the coupling; the last group's three tasks stacked
        A, b = tasks[0].compute(kin, t)
        _close(A1, A)
        _close(b1, b)
        rows = [task.compute(kin, t) for task in tasks[1:]]
        _close(A2, np.vstack([a for a, _ in rows]))
        _close(b2, np.concatenate([b for _, b in rows]))
        np.testing.assert_array_equal(rec.weights, np.repeat([50.0, 20.0, 1.0], [6, 3, 14]))
        for task in tasks:
            _close(rec.errors[task.name], task.error(kin, t))
    with pytest.raises(ValueError, match="read-only"):
        rec.M[0, 0] = 1.0
    with pytest.raises(KeyError, match="frame id 0 was not computed"):
        rec.frame(0)


def test_record_of_a_closed_chain_step_and_none_on_the_generic_path():
    robot = Robot.from_mjcf("mjcf/five_bar.xml")
    ctl = UdwadiaKalabaController(
        robot, levels=[[PostureTask(robot, robot.q_initial)]], limits=[], warn_free_dof=False
    )
    assert ctl._plan is not None and ctl._plan.closed
    q, v = robot.q_initial, np.zeros(robot.nv)
    ctl(0.0, q, v)
    rec = ctl.record()
    kin = Robot.from_mjcf("mjcf/five_bar.xml").update(q, v)
    _close(rec.M, kin.M)
    _close(rec.h, kin.h)
    loops = robot.loops
    A1 = rec.groups[0][0]
    J = np.vstack([c.compute(kin, 0.0)[0] for c in loops])
    kept = [
        i for i in range(J.shape[0]) if np.linalg.norm(J[i]) > 1e-9
    ]  # a planar loop's empty rows left out
    _close(A1[: len(kept)], J[kept])
    slow = UdwadiaKalabaController(
        robot, levels=[[PostureTask(robot, robot.q_initial)]], limits=[], warn_free_dof=False, fused=False
    )
    slow(0.0, q, v)
    assert slow.record() is None
