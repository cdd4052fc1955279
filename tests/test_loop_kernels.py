"""The loop closures' compiled rows (models/_loop_kernels.py) against ``models/loops.py: closure_rows``, every kind,
on random states (closed or not: the rows are defined everywhere)."""
from __future__ import annotations

import numpy as np
import pytest

from cmstack.models._loop_kernels import KIND_CODES, PHI_KINDS, closure_phi, closure_rows
from cmstack.models.loops import LoopClosure, closure_rows as closure_rows_py
from cmstack.models.robot import Robot


def _row(F):
    return np.concatenate((F.R.ravel(), F.p, F.twist, F.acc))


@pytest.mark.parametrize("kind", ["point", "weld", "revolute"])     # plane: the Python rows call the kernel
@pytest.mark.parametrize("model,fa,fb", [("mjcf/five_bar.xml", "tool", "dist_r"), ("mjcf/delta.xml", "wp_1", "platform")])
def test_compiled_closure_rows_equal_the_python_rows(kind, model, fa, fb):
    robot = Robot.from_mjcf(model)
    c = LoopClosure(robot, fa, fb, kind=kind, offset=[0.01, 0.02, -0.03], offset_b={"xyz": [0.0, 0.01, 0.0], "rpy": [0.1, 0.2, 0.3]})
    rng = np.random.default_rng(4)
    m = KIND_CODES[kind]
    for _ in range(10):
        q, v = rng.normal(size=robot.nq), rng.normal(size=robot.nv)
        kin = robot.update(q, v)
        A, B = kin.frame(c.fa), kin.frame(c.fb)
        _, J0, jdv0 = closure_rows_py(kind, A.R, A.p, A.J, A.acc, B.R, B.p, B.J, B.acc, v)
        J = np.full((c.m + 2, robot.nv), np.nan)
        jdv = np.full(c.m + 2, np.nan)
        assert closure_rows(m, _row(A), A.J, _row(B), B.J, J, jdv, 1) == c.m
        np.testing.assert_allclose(J[1:1 + c.m], J0, rtol=0, atol=1e-13 * max(1.0, np.abs(J0).max()))
        np.testing.assert_allclose(jdv[1:1 + c.m], jdv0, rtol=0, atol=1e-12 * max(1.0, np.abs(jdv0).max()))
        assert np.isnan(J[0]).all() and np.isnan(J[-1]).all()          # only its own rows written


@pytest.mark.parametrize("kind", PHI_KINDS)
@pytest.mark.parametrize("model,fa,fb", [("mjcf/five_bar.xml", "tool", "dist_r"), ("mjcf/delta.xml", "wp_1", "platform")])
def test_compiled_residual_equals_the_python_residual(kind, model, fa, fb):
    """``closure_phi`` against ``closure_rows``' φ (pin.log3 for the weld), on open (φ of order 1) and closed
    (φ = 0) configurations."""
    robot = Robot.from_mjcf(model)
    c = LoopClosure(robot, fa, fb, kind=kind, offset=[0.01, 0.02, -0.03], offset_b={"xyz": [0.0, 0.01, 0.0], "rpy": [0.1, 0.2, 0.3]})
    rng = np.random.default_rng(5)
    for k in range(10):
        q, v = rng.normal(size=robot.nq), rng.normal(size=robot.nv)
        kin = robot.update(q, v)
        A, B = kin.frame(c.fa), kin.frame(c.fb)
        phi0 = closure_rows_py(kind, A.R, A.p, A.J, A.acc, B.R, B.p, B.J, B.acc, v)[0]
        phi = np.full(c.m + 2, np.nan)
        assert closure_phi(KIND_CODES[kind], _row(A), _row(B), phi, 1) == c.m
        np.testing.assert_allclose(phi[1:1 + c.m], phi0, rtol=0, atol=1e-13)
        assert np.isnan(phi[0]) and np.isnan(phi[-1])
    # on a closed weld the residual is zero to round-off
    w = LoopClosure(robot, fa, fb, kind="weld")
    q = rng.normal(size=robot.nq)
    kin = robot.update(q, 0 * q)
    A, B = kin.frame(w.fa), kin.frame(w.fb)
    xb = _row(A)                                    # frame b put where A is
    phi = np.empty(6)
    closure_phi(KIND_CODES["weld"], _row(A), xb, phi, 0)
    assert np.abs(phi).max() < 1e-14
