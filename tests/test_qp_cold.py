"""A cold start is cold (``controllers/qp.py``, module docstring 5.): a solver object that ``BoundedQP`` reuses for
every problem of a shape gives, on a problem, the result a fresh object gives (its iterations, its solution to
well within the solver's tolerance), whatever it solved
before (ProxSuite's ``init`` keeps the equality penalty its last solve adapted unless it is given)."""

from __future__ import annotations

import numpy as np

from cmstack.controllers.qp import BoundedQP


def _problem(rng, n=10, me=3, m=12):
    R = rng.normal(size=(n, n))
    H = R @ R.T + np.eye(n)
    A = rng.normal(size=(me, n))
    C = rng.normal(size=(m, n))
    x0 = rng.normal(size=n)
    l, u = C @ x0 - rng.uniform(0, 0.2, m), C @ x0 + rng.uniform(0, 0.2, m)
    return H, rng.normal(size=n), A, A @ x0, C, l, u


def test_a_reused_solver_object_solves_as_a_fresh_one():
    rng = np.random.default_rng(11)
    problems = [_problem(rng) for _ in range(30)]
    used = BoundedQP()
    differ = 0
    for k, p in enumerate(problems):
        r_used = used.solve("level", *p, warm=False)
        r_fresh = BoundedQP().solve("level", *p, warm=False)
        # the same iterations and the same solution to well within the solver's tolerance (two fresh objects differ
        # by up to ~4e-13 in x on these problems, more in the multipliers of rows at their bound: ProxSuite is not
        # reproducible to the bit; a reused object without the fix took other iterations)
        assert r_used.status == r_fresh.status and r_used.iters == r_fresh.iters, k
        np.testing.assert_allclose(r_used.x, r_fresh.x, rtol=0, atol=1e-10)
        differ += int(r_used.solved)
    assert differ > 20  # most of them solved: the comparison is of solutions
