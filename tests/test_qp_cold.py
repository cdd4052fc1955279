"""A cold start is cold (``controllers/qp.py``, module docstring 5.): a solver object that ``BoundedQP`` reuses for
every problem of a shape gives, on a problem, the result a fresh object gives, to the bit, whatever it solved
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
        assert r_used.status == r_fresh.status and r_used.iters == r_fresh.iters, k
        assert np.array_equal(r_used.x, r_fresh.x) and np.array_equal(r_used.z, r_fresh.z), k
        differ += int(r_used.solved)
    assert differ > 20  # most of them solved: the comparison is of solutions
