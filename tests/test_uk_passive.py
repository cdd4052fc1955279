"""UK on closed chains with passive joints: the torque map from a complete orthogonal decomposition
(``kernels.passive_map``) and the levels without their vanishing rows, against the SVD formulation they replace
(written here as it was), on states of the shipped mechanisms."""

from __future__ import annotations

import numpy as np
import pytest

from cmstack.controllers.kernels import passive_map
from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController
from cmstack.models.loops import ClosureSet
from cmstack.models.projection import project
from cmstack.scenarios._common import default_config
from cmstack.scenarios.closed_chain import build_law, build_reference, load_robot


def _svd_map(Jc, p, tol):
    G = Jc[:, p].T
    U, sv, Vt = np.linalg.svd(G, full_matrices=True)
    rank = int(np.sum(sv > tol * max(1.0, sv[0] if sv.size else 0.0)))
    Gp = (Vt[:rank].T / sv[:rank]) @ U[:, :rank].T
    T = np.eye(Jc.shape[1])
    T[:, p] -= Jc.T @ Gp
    return T, Gp, U[:, rank:]


class _SVDReference(UdwadiaKalabaController):
    """The former ``_passive_rows``: the SVD of G, every row kept."""

    def _passive_rows(self, kin, hD, t, rows):
        p = self._passive
        A1, b1 = rows[0]
        Jc = A1[self._loop_rows] / self._loop_scale[:, None]
        T, Gp, Up = _svd_map(Jc, p, self.rank_tol)
        self._T = T
        self._loop_reaction = (Jc, Gp)
        A_p = Up.T @ kin.M[p]
        b_p = -(Up.T @ hD[p])
        rows = [(np.vstack([A1, A_p]), np.concatenate([b1, b_p]))] + list(rows[1:])
        return rows, np.vstack([a for a, _ in rows]), np.concatenate([b for _, b in rows])


@pytest.mark.parametrize(
    "shape,passive,rank", [((6, 5), [1, 2, 4], 3), ((3, 3), [1, 2], 2), ((4, 6), [0, 2, 3, 5], 2)]
)
def test_passive_map_equals_the_svd_formulation(shape, passive, rank):
    """T and G⁺ equal the SVD's; U_⊥ spans the same left null space (U_⊥U_⊥ᵀ equal), rank deficient G included."""
    rng = np.random.default_rng(rank)
    m, n = shape
    Jc = rng.normal(size=(m, 2)) @ rng.normal(size=(2, n)) if rank == 2 and m == 4 else rng.normal(size=shape)
    Jc[rng.integers(m)] = 1e-17 * rng.normal(size=n)  # a row that vanishes (a planar closure's)
    p = np.array(passive, dtype=np.int64)
    T, Gp, Up = passive_map(Jc, p, 1e-9)
    T0, Gp0, Up0 = _svd_map(Jc, p, 1e-9)
    assert Up.shape == Up0.shape and Up0.shape[1] == len(p) - np.linalg.matrix_rank(Jc[:, p], tol=1e-9)
    np.testing.assert_allclose(T, T0, rtol=0, atol=1e-11 * np.abs(T0).max())
    np.testing.assert_allclose(Gp, Gp0, rtol=0, atol=1e-11 * max(1.0, np.abs(Gp0).max()))
    np.testing.assert_allclose(Up @ Up.T, Up0 @ Up0.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "model,path", [("mjcf/five_bar.xml", "kkt"), ("mjcf/four_bar.xml", "kkt"), ("mjcf/delta.xml", "kkt")]
)
def test_uk_closed_chain_step_equals_the_svd_formulation(model, path):
    """The closed_chain scenario's UK law (its compiled step) on assembled states with admissible velocities: τ, v̇,
    the loop reaction and the generalized forces equal the former formulation's (the SVD, generic path); the
    planar loops' vanishing rows no
    longer send the step to the null-space path (the former took it on the five-bar and four-bar)."""
    cfg = dict(default_config("closed_chain"), model=model, law="uk")
    robot = load_robot(cfg)
    _, coords, _ = build_reference(cfg, robot)
    ctl = build_law(cfg, robot, coords)
    robot_ref = load_robot(cfg)
    _, coords_ref, _ = build_reference(cfg, robot_ref)
    ref = build_law(cfg, robot_ref, coords_ref)
    ref.__class__ = _SVDReference  # the same controller with the former _passive_rows
    ref._plan = None  # (on the generic path, where _passive_rows runs)
    assert ctl._plan is not None and ctl._plan.closed and ctl._passive.size  # the compiled closed-chain step
    cs = ClosureSet(robot.loops)
    rng = np.random.default_rng(1)
    ref_paths = set()
    for k in range(40):
        q = robot.assemble(robot.q_initial + 0.05 * rng.normal(size=robot.nq))
        v = project(cs.jacobian(q)).P @ rng.normal(size=robot.nv)
        t = 0.01 * k
        tau, tau_ref = ctl(t, q, v), ref(t, q, v)
        scale = max(1.0, np.abs(tau_ref).max())
        assert np.abs(tau - tau_ref).max() <= 1e-9 * scale
        assert np.abs(ctl.info.vdot - ref.info.vdot).max() <= 1e-9 * max(1.0, np.abs(ref.info.vdot).max())
        lam, lam_ref = ctl.loop_reaction(), ref.loop_reaction()
        assert np.abs(lam - lam_ref).max() <= 1e-9 * max(1.0, np.abs(lam_ref).max())
        for F, F_ref in ((ctl.info.Qc, ref.info.Qc), (ctl.info.Qu, ref.info.Qu)):
            assert np.abs(F - F_ref).max() <= 1e-8 * max(1.0, np.abs(F_ref).max())
        assert ctl.info.path == path
        assert np.abs(tau[ctl._passive]).max() == 0.0
        ref_paths.add(ref.info.path)
    if model != "mjcf/delta.xml":
        assert ref_paths == {"nullspace"}


def test_vanishing_rows_are_judged_within_their_level():
    """A row is dropped only when its A row and its b entry both vanish relative to its own level (a tiny row with
    a significant b stays: an inconsistent row is not hidden); the NumPy formulation of the same test agrees."""
    from cmstack.controllers.kernels import vanishing_rows

    rng = np.random.default_rng(7)
    sizes = np.array([6, 3, 0, 4], dtype=np.int64)
    E = rng.normal(size=(13, 5))
    f = rng.normal(size=13)
    E[[1, 4, 7]] = 1e-17 * rng.normal(size=(3, 5))
    f[[1, 4]] = 1e-18
    f[7] = 0.5  # vanishing row, significant b: kept
    E[9:13] *= 1e-6  # a small level: judged on its own scale (max(1, ·))
    keep = np.empty(13, dtype=np.bool_)
    assert vanishing_rows(E, f, sizes, 1e-9, keep) == 2
    ref, i = [], 0
    for s in sizes:
        A, b = E[i : i + s], f[i : i + s]
        nr = np.linalg.norm(A, axis=1)
        if s:
            ref.extend((nr > 1e-9 * max(1.0, nr.max())) | (np.abs(b) > 1e-9 * max(1.0, np.abs(b).max())))
        i += s
    np.testing.assert_array_equal(keep, ref)
    assert not keep[1] and not keep[4] and keep[7]
