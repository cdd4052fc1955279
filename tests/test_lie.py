"""models/lie.py, the one module of small spatial algebra: skew/cross against np.cross, the truncated
pseudo-inverse against the Penrose conditions and NumPy, quaternions against rotation matrices."""

import numpy as np
import pytest

from cmstack.models.lie import (
    cross,
    kkt_solve,
    pinv,
    quat_conj,
    quat_exp,
    quat_from_matrix,
    quat_log,
    quat_mul,
    quat_to_matrix,
    rot_x,
    rot_y,
    rot_z,
    rotation_vector,
    skew,
    svd_rank,
)

rng = np.random.default_rng(7)


def test_skew_and_cross_match_numpy_single_and_batched():
    a, b = rng.normal(size=3), rng.normal(size=3)
    np.testing.assert_allclose(skew(a) @ b, np.cross(a, b), rtol=0, atol=1e-15)
    np.testing.assert_allclose(cross(a, b), np.cross(a, b), rtol=0, atol=1e-15)
    # lists/tuples and arrays give the same result
    np.testing.assert_array_equal(skew(tuple(a)), skew(a))
    np.testing.assert_array_equal(cross(list(a), tuple(b)), cross(a, b))
    np.testing.assert_array_equal(skew(a), -skew(a).T)
    A, B = rng.normal(size=(5, 4, 3)), rng.normal(size=(5, 4, 3))
    np.testing.assert_allclose(cross(A, B), np.cross(A, B), rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.einsum("...ij,...j->...i", skew(A), B), np.cross(A, B), rtol=0, atol=1e-15)
    # a batched skew equals the single ones stacked
    np.testing.assert_array_equal(skew(A)[2, 1], skew(A[2, 1]))
    # broadcasting one vector against a stack
    np.testing.assert_allclose(cross(a[None, :], B[0]), np.cross(a, B[0]), rtol=0, atol=1e-15)


@pytest.mark.parametrize("shape,rank", [((4, 7), 4), ((6, 5), 3), ((3, 3), 0), ((0, 4), 0), ((4, 0), 0)])
def test_pinv_penrose_conditions_and_rank(shape, rank):
    m, n = shape
    A = (rng.normal(size=(m, rank)) @ rng.normal(size=(rank, n))) if rank else np.zeros(shape)
    svd = svd_rank(A, rtol=1e-10, full_matrices=True)
    assert svd.rank == rank
    X = pinv(A, rtol=1e-10)
    assert X.shape == (n, m)
    np.testing.assert_allclose(A @ X @ A, A, atol=1e-10)
    np.testing.assert_allclose(X @ A @ X, X, atol=1e-10)
    np.testing.assert_allclose((A @ X).T, A @ X, atol=1e-10)
    np.testing.assert_allclose((X @ A).T, X @ A, atol=1e-10)
    if A.size:
        np.testing.assert_allclose(X, np.linalg.pinv(A, rcond=1e-10), atol=1e-10)
    N = svd.null_basis()
    assert N.shape == (n, n - rank)
    np.testing.assert_allclose(A @ N, 0.0, atol=1e-10)
    np.testing.assert_allclose(N.T @ N, np.eye(n - rank), atol=1e-12)


def test_pinv_absolute_and_relative_thresholds():
    A = np.diag([10.0, 1e-3, 1e-12])
    assert svd_rank(A, atol=1e-2).rank == 1  # absolute: drops 1e-3 and 1e-12
    assert svd_rank(A, rtol=1e-5).rank == 2  # relative to 10: drops only 1e-12
    assert svd_rank(A, rtol=1e-5, atol=1e-2).rank == 1  # the larger threshold wins
    np.testing.assert_allclose(pinv(A, rtol=1e-5), np.diag([0.1, 1e3, 0.0]))


def test_quaternions_against_rotation_matrices():
    phi = rng.normal(size=3)
    q = quat_exp(phi)
    R = quat_to_matrix(q)
    # exp of a rotation vector = Rodrigues' formula with skew
    th = np.linalg.norm(phi)
    K = skew(phi / th)
    np.testing.assert_allclose(R, np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K, atol=1e-14)
    np.testing.assert_allclose(quat_from_matrix(R), q if q[0] >= 0 else -q, atol=1e-14)
    np.testing.assert_allclose(quat_log(q), phi if th < np.pi else quat_log(q), atol=1e-13)
    np.testing.assert_allclose(rotation_vector(R), quat_log(q), atol=1e-12)
    p = quat_exp(rng.normal(size=3))
    np.testing.assert_allclose(quat_to_matrix(quat_mul(q, p)), R @ quat_to_matrix(p), atol=1e-14)
    np.testing.assert_allclose(quat_mul(q, quat_conj(q)), [1, 0, 0, 0], atol=1e-15)
    a = 0.3
    np.testing.assert_allclose(rot_x(a), quat_to_matrix(quat_exp(np.array([a, 0, 0]))), atol=1e-15)
    np.testing.assert_allclose(rot_y(a), quat_to_matrix(quat_exp(np.array([0, a, 0]))), atol=1e-15)
    np.testing.assert_allclose(rot_z(a), quat_to_matrix(quat_exp(np.array([0, 0, a]))), atol=1e-15)


def test_kkt_solve_satisfies_both_rows_and_refuses_singular():
    rng = np.random.default_rng(5)  # its own draw: the module's rng gave each worker another problem
    H = rng.normal(size=(5, 5))
    H = H @ H.T + np.eye(5)
    A = rng.normal(size=(2, 5))
    g, b = rng.normal(size=5), rng.normal(size=2)
    x, y = kkt_solve(H, A, g, b)
    np.testing.assert_allclose(H @ x + A.T @ y, g, atol=1e-12)
    np.testing.assert_allclose(A @ x, b, atol=1e-12)
    # the equality-constrained minimum of ½xᵀHx − gᵀx, by the null-space method
    N = svd_rank(A, full_matrices=True).null_basis()
    xp = pinv(A) @ b
    z = np.linalg.solve(N.T @ H @ N, N.T @ (g - H @ xp))
    np.testing.assert_allclose(x, xp + N @ z, atol=1e-12)
    with pytest.raises(np.linalg.LinAlgError):
        kkt_solve(H, np.vstack([A[0], A[0]]), g, b)  # dependent rows
