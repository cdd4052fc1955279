"""The compiled rows of a binding step (issue 30): ``models/limits.py: LimitRows`` (one compiled call,
``_limit_kernels.rows``) gives the limits' own ``bounds`` stacked, to the bit, on states inside and beyond every
bound and after a parameter is assigned; ``_qp_kernels.merged_problem`` and ``level_problem`` give the problems the
Python formulation built and ``BoundedQP.solve`` conditioned, to the bit; ``_qp_kernels.null_step`` (the equality
path's null-space step) is the SVD's pseudo-inverse step and null space."""

from __future__ import annotations

import numpy as np
import pytest
from _matrices import hard_matrices, spd

from cmstack import Robot, example_robot_data_path
from cmstack.controllers._qp_kernels import (
    condition,
    condition_qp,
    hierarchy_level,
    level_problem,
    merged_problem,
    null_basis,
    null_step,
)
from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit, LimitRows


@pytest.fixture(scope="module")
def robot():
    arm = example_robot_data_path("panda_description/urdf/panda.urdf")
    return Robot.compose([(arm, "", [0, 0, 0], {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0})])


def test_compiled_rows_are_the_limits_bounds_stacked(robot):
    n = robot.nv
    lims = [
        EffortLimit(robot, tau_max=[30.0, 25.0], joints=["panda_joint2", "panda_joint4"]),
        JointPositionLimit(robot, dt=1e-3, a_max=20.0, margin=0.01),
        JointVelocityLimit(robot, dt=1e-3, v_max=0.5),
        EffortLimit(robot),
    ]
    rows = LimitRows.build(lims, n)
    assert rows is not None
    rng = np.random.default_rng(4)
    lo_q, hi_q = lims[1].q_min, lims[1].q_max
    for trial in range(200):
        if trial == 100:  # an assigned parameter is seen (models._params.version)
            lims[2].v_max = np.full(n, 0.2)
            lims[1].q_max = hi_q - 0.1
        q = rng.uniform(lo_q - 0.05, hi_q + 0.05)
        v = rng.uniform(-0.8, 0.8, n)
        kin = robot.update(q, v)
        hD = kin.h + 0.3 * v
        C, l, u = rows(kin.q, kin.v, kin.M, hD)
        ref = [lim.bounds(kin, hD) for lim in lims]
        assert np.array_equal(C, np.vstack([r[0] for r in ref]))
        assert np.array_equal(l, np.concatenate([r[1] for r in ref]))
        assert np.array_equal(u, np.concatenate([r[2] for r in ref]))


def test_merged_and_level_problems_are_the_python_ones():
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(5, 15))
        M = spd(rng, n)
        Q = rng.normal(size=n)
        A1, b1 = rng.normal(size=(2, n)), rng.normal(size=2)
        A2, b2 = rng.normal(size=(3, n)), rng.normal(size=3)
        m = int(rng.integers(1, 2 * n))
        C = rng.normal(size=(m, n))
        l, u = -rng.uniform(0, 3, m), rng.uniform(0, 3, m)
        l[0] = -np.inf
        if trial % 4 == 0:
            C[-1] *= 1e-14  # a vanished row, zeroed
        # the merged levels: the problem of uk_solve before (NumPy) conditioned by BoundedQP.solve (condition_qp)
        N1 = null_basis(A1, 1e-10)
        AN = A2 @ N1
        mu = 1e-6 * max(float(np.vdot(AN, AN)), 1e-12) / float(np.trace(M))
        H, g = A2.T @ A2 + mu * M, -(A2.T @ b2) - mu * Q
        want = [np.empty((n, n)), np.empty(n), np.empty((2, n)), np.empty(2), np.empty(2)]
        want += [np.empty((m, n)), np.empty(m), np.empty(m), np.empty(m), np.empty(m, dtype=np.int64)]
        ws = condition_qp(H, g, A1, b1, C, l, u, 1e-10, 1e-7, *want)
        got = [np.empty_like(a) for a in want]
        out = merged_problem(
            A1, b1, A2.T @ A2, A2.T @ b2, A2, M, float(np.trace(M)), Q, C, l, u, 1e-10, 1e-10, 1e-7, *got
        )
        assert np.array_equal(out[0], N1) and np.array_equal(out[1], AN)
        assert out[2:] == ws
        for a, b in zip(got[:-1], want[:-1]):
            assert np.array_equal(a, b)
        assert np.array_equal(got[-1][: ws[2]], want[-1][: ws[2]])
        # a level below: hierarchy_level, then condition
        x = rng.normal(size=n)
        A3, b3 = rng.normal(size=(2, n)), rng.normal(size=2)
        H3, g3 = M + np.eye(n), rng.normal(size=n)
        dx = rng.normal(size=N1.shape[1])
        for last in (False, True):
            ref = hierarchy_level(N1, dx, x, AN, 1e-10, C, l, u, 1e-9, A3, b3, last, M, Q, H3, g3)
            bufs = [np.empty(m) for _ in range(5)] + [np.empty(m, dtype=np.int64)]
            got = level_problem(
                N1,
                dx,
                x,
                AN,
                1e-10,
                C,
                l,
                u,
                1e-9,
                A3,
                b3,
                last,
                M,
                Q,
                H3,
                g3,
                1e-10,
                1e-7,
                *bufs,
                np.empty(n),
            )
            for a, b in zip(got[:3], (ref[0], ref[1], ref[7])):
                assert np.array_equal(a, b)
            # the next level's freedom: the columns of the null space the next call would make
            nz_next = 0 if last or ref[1].shape[1] == 0 else null_basis(ref[7], 1e-10).shape[1]
            assert got[11] == nz_next
            assert np.array_equal(got[5], ref[4])
            assert np.array_equal(bufs[0], ref[5]) and np.array_equal(bufs[1], ref[6])
            nz = ref[1].shape[1]
            if nz == 0:  # no level left: the caller stops there (the conditioned form is not set)
                continue
            cw = [np.empty((nz, nz)), np.empty(nz), np.empty((m, nz)), np.empty(m), np.empty(m), np.empty(m)]
            bad = np.empty(m, dtype=np.int64)
            s, lam, nbad = condition(ref[2], ref[3], ref[4], ref[5], ref[6], 1e-10, 1e-7, *cw, bad)
            assert (got[7], got[8], got[9]) == (s, lam, nbad)
            for a, b in zip((got[3], got[4], got[6], bufs[2], bufs[3], bufs[4]), cw):
                assert np.array_equal(a, b)


def test_null_step_is_the_svd_pseudo_inverse_step():
    """``_qp_kernels.null_step`` (the equality path's ``uk_levels._nullspace_step``): pinv(B) y and the null space of
    the SVD it replaces, on full-rank, rank-deficient (dependent rows, a zero column), consistent and inconsistent,
    badly scaled systems, wide and tall."""
    for t, B, rng in hard_matrices(2, 600, 12):
        m, k = B.shape
        y = B @ rng.normal(size=k) if t % 2 else rng.normal(size=m)
        dz, N = null_step(B, y, 1e-9)
        if m:
            U, s, Vt = np.linalg.svd(B, full_matrices=True)
            r = int(np.count_nonzero(s > 1e-9 * max(1.0, s[0])))
            ref, Nref = Vt[:r].T @ ((U[:, :r].T @ y) / s[:r]), Vt[r:].T
        else:
            ref, Nref = np.zeros(k), np.eye(k)
        np.testing.assert_allclose(dz, ref, rtol=0, atol=1e-12 * (1 + np.abs(ref).max()))
        assert N.shape == Nref.shape
        np.testing.assert_allclose(N @ N.T, Nref @ Nref.T, atol=1e-12)
        np.testing.assert_allclose(N.T @ N, np.eye(N.shape[1]), atol=1e-12)
