"""Identities and numerical checks of the tensor Newton–Euler chain model ([Eslami] §2, App. A–C)."""

import numpy as np
import pytest

from cmstack.models.errors import ConfigError, StateError
from cmstack.models.tensor_chain import (
    ChainState,
    TensorChain,
    euler123_from_matrix,
    euler_zyx_from_quat,
    quat_exp,
    quat_from_euler_zyx,
    quat_from_matrix,
    quat_log,
    quat_mul,
    quat_rate_body,
    quat_to_matrix,
    rot_x,
    rot_y,
    rot_z,
    rotation_vector,
    skew,
    transformation_BI,
)


def random_chain(n=5, law="euler123", fixed=False, seed=0):
    rng = np.random.default_rng(seed)
    masses = rng.uniform(0.5, 2.0, n)
    I = []
    for _ in range(n):
        A = rng.normal(size=(3, 3))
        I.append(A @ A.T * 0.01 + 0.005 * np.eye(3))
    kw = {}
    ch = TensorChain(
        masses,
        np.array(I),
        rng.normal(scale=0.3, size=(n - 1, 3)),
        rng.normal(scale=0.3, size=(n - 1, 3)),
        rng.uniform(0.5, 3.0, (n - 1, 3)),
        gravity=rng.normal(size=3),
        spring_law=law,
        **kw,
    )
    s = random_state(ch, rng)
    if fixed:
        ch = TensorChain(
            ch.masses,
            ch.inertias,
            ch.joint_parent,
            ch.joint_child,
            ch.stiffness,
            gravity=ch.gravity,
            spring_law=law,
            fixed_base=True,
            base_pose=(s.pos[0].copy(), s.quat[0].copy()),
        )
    return ch, ch.project(s), rng


def random_state(ch, rng):
    """Random attitudes (moderate relative angles), positions closing the joints, consistent ν."""
    n = ch.n
    q = np.empty((n, 4))
    q[0] = quat_exp(rng.normal(size=3))
    for i in range(1, n):
        q[i] = quat_mul(q[i - 1], quat_exp(0.6 * rng.normal(size=3)))
    R = quat_to_matrix(q)
    pos = np.zeros((n, 3))
    pos[0] = rng.normal(size=3)
    for j in range(n - 1):
        pos[j + 1] = pos[j] + R[j] @ ch.joint_parent[j] - R[j + 1] @ ch.joint_child[j]
    s = ChainState(pos, q, rng.normal(size=6 * n))
    return s


# ---------------------------------------------------------------------------- structure of (32)
def test_force_distribution_is_minus_jacobian_transpose():
    ch, s, _ = random_chain()
    CF, CM = ch.force_distribution(s.R)
    J = ch.jacobian(s.R)
    n = ch.n
    np.testing.assert_allclose(CF, -J[:, : 3 * n].T, atol=0)  # C_F = −J_vᵀ
    np.testing.assert_allclose(CM, -J[:, 3 * n :].T, atol=1e-15)  # C_M = −J_ωᵀ


def test_mass_matrix_spd_and_jacobian_full_rank():
    for fixed in (False, True):
        ch, s, _ = random_chain(fixed=fixed, seed=3)
        M = ch.mass_matrix(s.R)
        np.testing.assert_array_equal(M, M.T)
        assert np.min(np.linalg.eigvalsh(M)) > 0
        J = ch.jacobian(s.R)
        assert np.linalg.matrix_rank(J) == J.shape[0] == ch.n_constraints
        np.testing.assert_allclose(ch.mass_matrix_inv(s.R) @ M, np.eye(6 * ch.n), atol=1e-12)


def test_skew_symmetry_of_Mdot_minus_2C():
    ch, _, rng = random_chain(seed=1)
    for _ in range(20):
        s = random_state(ch, rng)
        N = ch.mass_matrix_dot(s.R, s.nu) - 2 * ch.coriolis(s.R, s.nu)
        x = rng.normal(size=6 * ch.n)
        assert abs(x @ N @ x) <= 1e-13 * (1 + np.abs(N).max() * x @ x)
        np.testing.assert_allclose(N, -N.T, atol=1e-14)
        # 𝒞(ν)ν is the gyroscopic moment Ω I ω
        gy = (ch.coriolis(s.R, s.nu) @ s.nu)[3 * ch.n :].reshape(ch.n, 3)
        Iw = ch.inertia_world(s.R)
        np.testing.assert_allclose(gy, np.cross(s.w, np.einsum("iab,ib->ia", Iw, s.w)), atol=1e-14)


def test_mass_matrix_derivative_by_finite_differences():
    ch, s, _ = random_chain(seed=2)
    h = 1e-6

    def M_at(t):
        q = quat_mul(quat_exp(s.w * t), s.quat)  # R(t) = exp(ω t) R
        return ch.mass_matrix(quat_to_matrix(q))

    fd = (M_at(h) - M_at(-h)) / (2 * h)
    np.testing.assert_allclose(ch.mass_matrix_dot(s.R, s.nu), fd, atol=1e-8)


def test_kkt_equals_schur_complement_solve():
    for fixed in (False, True):
        ch, s, rng = random_chain(fixed=fixed, seed=4)
        port = rng.normal(size=6 * ch.n)
        a = ch.dynamics(s, port, "kkt")
        b = ch.dynamics(s, port, "schur")
        np.testing.assert_allclose(a.nu_dot, b.nu_dot, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(a.F_J, b.F_J, rtol=1e-10, atol=1e-10)
        # the solution satisfies both block rows of (32) with the sign convention of (7)
        np.testing.assert_allclose(a.M @ a.nu_dot, a.F - a.J.T @ a.F_J, atol=1e-10)
        np.testing.assert_allclose(a.J @ a.nu_dot, a.gamma, atol=1e-10)


def test_newton_euler_equations_body_by_body():
    """(6) and (15) written out per body reproduce the assembled solution."""
    ch, s, rng = random_chain(seed=5)
    port = rng.normal(size=6 * ch.n)
    d = ch.dynamics(s, port)
    n = ch.n
    R = s.R
    s_par, s_chi = ch.arms(R)
    f = d.F_J.reshape(n - 1, 3)
    mJ = ch.joint_moments(R)
    Iw = ch.inertia_world(R)
    vd = d.nu_dot[: 3 * n].reshape(n, 3)
    wd = d.nu_dot[3 * n :].reshape(n, 3)
    for k in range(n):
        F = port[3 * k : 3 * k + 3] + ch.masses[k] * ch.gravity
        Mo = port[3 * n + 3 * k : 3 * n + 3 * k + 3] - np.cross(s.w[k], Iw[k] @ s.w[k])
        if k < n - 1:  # joint k: + f_{J_k}, + m_{J_k}, − S_{B_k J_k} f_{J_k}
            F = F + f[k]
            Mo = Mo + mJ[k] - np.cross(s_par[k], f[k])
        if k > 0:  # joint k−1: − f, − m, + S_{B_k J_{k−1}} f
            F = F - f[k - 1]
            Mo = Mo - mJ[k - 1] + np.cross(s_chi[k - 1], f[k - 1])
        np.testing.assert_allclose(ch.masses[k] * vd[k], F, atol=1e-10)
        np.testing.assert_allclose(Iw[k] @ wd[k], Mo, atol=1e-10)


# ---------------------------------------------------------------------------- time derivatives
def _flow(s, t):
    """Rigid motion of each body with its own constant v, ω for time t (exact for positions/attitudes)."""
    return ChainState(s.pos + s.v * t, quat_mul(quat_exp(s.w * t), s.quat), s.nu)


def test_constraint_rate_is_J_nu_and_gamma_is_minus_Jdot_nu():
    ch, s, _ = random_chain(seed=6)
    h = 1e-6
    phid = (ch.constraint_violation(_flow(s, h)) - ch.constraint_violation(_flow(s, -h))) / (2 * h)
    np.testing.assert_allclose(phid, ch.jacobian(s.R) @ s.nu, atol=1e-8)
    Jd = (ch.jacobian(_flow(s, h).R) - ch.jacobian(_flow(s, -h).R)) / (2 * h)
    np.testing.assert_allclose(ch.jacobian_dot(s.R, s.nu), Jd, atol=1e-8)
    # J D^Iν = γ  ⇔  γ = −J̇ ν on a motion that keeps J ν = 0 (28)
    np.testing.assert_allclose(ch.gamma(s.R, s.nu), -Jd @ s.nu, atol=1e-7)
    # and γ is what the accelerations of a constraint-consistent motion must satisfy: second derivative of φ
    # along the true dynamics is zero
    d = ch.dynamics(s, None)
    np.testing.assert_allclose(ch.jacobian(s.R) @ d.nu_dot, ch.gamma(s.R, s.nu), atol=1e-10)


def test_quaternion_kinematics_and_conversions():
    rng = np.random.default_rng(7)
    for _ in range(10):
        q = quat_exp(rng.normal(size=3))
        w_I = rng.normal(size=3)
        R = quat_to_matrix(q)
        # (55) with ω^B equals ½ [0; ω^I] ⊗ q
        w4 = np.r_[0.0, w_I]
        np.testing.assert_allclose(quat_rate_body(q, R.T @ w_I), 0.5 * quat_mul(w4, q), atol=1e-15)
        # Ṙ = Ω R along q̇ (finite differences)
        h = 1e-6
        qd = quat_rate_body(q, R.T @ w_I)
        Rd = (quat_to_matrix(q + h * qd) - quat_to_matrix(q - h * qd)) / (2 * h)
        np.testing.assert_allclose(Rd, skew(w_I) @ R, atol=1e-8)
        # (58) is the transpose of body→inertial
        np.testing.assert_allclose(transformation_BI(q), R.T, atol=1e-15)
        # matrix ↔ quaternion, exp ↔ log
        qq = quat_from_matrix(R)
        np.testing.assert_allclose(qq * np.sign(qq[0]), q * np.sign(q[0]), atol=1e-12)
        v = rng.normal(size=3)
        v *= min(1.0, 3.0 / np.linalg.norm(v))
        np.testing.assert_allclose(quat_log(quat_exp(v)), v, atol=1e-12)
        for scale in (1e-9, 1e-3, 1.0, 1.5, 3.0):  # both branches of rotation_vector
            u = v / np.linalg.norm(v) * scale
            np.testing.assert_allclose(rotation_vector(quat_to_matrix(quat_exp(u))), u, atol=1e-12)
        # (56)–(57) round trip (Z-Y-X): pitch kept inside (−π/2, π/2)
        e = (rng.uniform(-3, 3), rng.uniform(-1.5, 1.5), rng.uniform(-3, 3))
        qe = quat_from_euler_zyx(*e)
        np.testing.assert_allclose(euler_zyx_from_quat(qe), e, atol=1e-12)
        # (56) is R = Rz(Ψ) Ry(Θ) Rx(Φ)
        np.testing.assert_allclose(quat_to_matrix(qe), rot_z(e[2]) @ rot_y(e[1]) @ rot_x(e[0]), atol=1e-12)
        # relative 1-2-3 sequence (20)
        a = (rng.uniform(-3, 3), rng.uniform(-1.5, 1.5), rng.uniform(-3, 3))
        np.testing.assert_allclose(
            euler123_from_matrix(rot_x(a[0]) @ rot_y(a[1]) @ rot_z(a[2])), a, atol=1e-12
        )


def test_euler_spring_law_axes():
    """(19)–(24): a relative rotation about one Euler axis gives a moment K·angle about that axis, and
    the 1-2-3 axes are the directions whose rates compose the relative angular velocity."""
    ch = TensorChain.rods(2, 0.5, 0.03, 1.0, [1.0, 2.0, 3.0], gravity=np.zeros(3))
    Q = quat_to_matrix(quat_exp(np.array([0.3, -0.2, 0.5])))
    for k, rot in enumerate((rot_x, rot_y, rot_z)):
        R = np.stack([Q, Q @ rot(0.4)])
        mJ = ch.joint_moments(R)[0]
        np.testing.assert_allclose(mJ, (k + 1) * 0.4 * Q[:, k], atol=1e-14)
    a = np.array([0.3, -0.5, 0.7])
    ad = np.array([0.2, 0.4, -0.3])
    h = 1e-6
    Rrel = lambda x: rot_x(x[0]) @ rot_y(x[1]) @ rot_z(x[2])
    R2 = lambda x: Q @ Rrel(x)
    Rd = (R2(a + h * ad) - R2(a - h * ad)) / (2 * h)
    w_rel = np.array([(Rd @ R2(a).T)[2, 1], (Rd @ R2(a).T)[0, 2], (Rd @ R2(a).T)[1, 0]])
    ax = ch.joint_axes(np.stack([Q, R2(a)]), a[None])[0]
    np.testing.assert_allclose(w_rel, ad @ ax, atol=1e-8)


# ---------------------------------------------------------------------------- conservation, invariance
def test_momentum_and_energy_conserved_free_chain():
    """Port zero, no gravity: total linear and angular momentum constant (App. §4.1 criterion 1); with the
    isotropic rotation-vector spring the total energy is conserved too."""
    ch, s, rng = random_chain(n=4, law="rotvec", seed=8)
    k = rng.uniform(1, 3, 3)
    ch = TensorChain(
        ch.masses,
        ch.inertias,
        ch.joint_parent,
        ch.joint_child,
        k[:, None] * np.ones(3),
        gravity=np.zeros(3),
        spring_law="rotvec",
    )
    s = ch.project(s)
    s.nu *= 0.3
    P0, L0 = ch.momentum(s)
    E0 = ch.kinetic_energy(s) + ch.spring_energy(s.R)
    for _ in range(400):
        s, _ = ch.step(s, 5e-4)
    P1, L1 = ch.momentum(s)
    E1 = ch.kinetic_energy(s) + ch.spring_energy(s.R)
    assert np.linalg.norm(P1 - P0) <= 1e-12 * max(1, np.linalg.norm(P0))
    assert np.linalg.norm(L1 - L0) <= 1e-7 * np.linalg.norm(L0)
    assert abs(E1 - E0) <= 1e-6 * E0
    assert np.max(np.abs(ch.constraint_violation(s))) <= 1e-12
    assert np.max(np.abs(ch.jacobian(s.R) @ s.nu)) <= 1e-12
    assert np.allclose(np.linalg.norm(s.quat, axis=1), 1.0, atol=1e-15)


def test_pure_axial_moment_gives_zero_joint_forces_and_generic_moment_does_not():
    ch = TensorChain.rods(5, 0.5, 0.03, 1.0, 2.0, gravity=np.zeros(3))
    s = ch.straight_state()
    port = np.zeros(30)
    port[15:18] = [0.02, 0, 0]  # about the chain axis through the joints
    F = []
    for _ in range(200):
        s, d = ch.step(s, 1e-3, port)
        F.append(np.abs(d.F_J).max())
    assert max(F) <= 1e-12 and np.abs(s.w[:, 0]).max() > 0.1
    port[15:18] = [0.0, 0.02, 0.0]
    assert np.abs(ch.dynamics(ch.straight_state(), port).F_J).max() > 1e-3


def test_model_is_frame_invariant():
    """Rotating and translating the whole scene rotates ν̇ and F_J as tensors (the paper's central claim)."""
    ch, s, rng = random_chain(seed=9)
    port = rng.normal(size=6 * ch.n)
    Q = quat_to_matrix(quat_exp(rng.normal(size=3)))
    t = rng.normal(size=3)
    ch2 = TensorChain(
        ch.masses, ch.inertias, ch.joint_parent, ch.joint_child, ch.stiffness, gravity=Q @ ch.gravity
    )
    d1 = ch.dynamics(s, port)
    rot = lambda x: (x.reshape(-1, 3) @ Q.T).ravel()
    d2 = ch2.dynamics(s.transformed(Q, t), rot(port))
    np.testing.assert_allclose(d2.nu_dot, rot(d1.nu_dot), atol=1e-10)
    np.testing.assert_allclose(d2.F_J, rot(d1.F_J), atol=1e-10)
    np.testing.assert_allclose(
        ch2.joint_moments(s.transformed(Q, t).R), ch.joint_moments(s.R) @ Q.T, atol=1e-12
    )


def test_fixed_base_holds_body_one():
    ch, s, rng = random_chain(fixed=True, seed=10)
    s.nu *= 0.2
    s = ch.project(s)
    p0 = s.pos[0].copy()
    for _ in range(100):
        s, d = ch.step(s, 1e-3, rng.normal(size=6 * ch.n) * 0.1)
    assert np.abs(s.pos[0] - p0).max() <= 1e-12
    assert np.abs(s.nu[:3]).max() <= 1e-12 and np.abs(s.nu[3 * ch.n : 3 * ch.n + 3]).max() <= 1e-12


def test_bad_input_is_refused():
    with pytest.raises(ConfigError):
        TensorChain.rods(1, 0.5, 0.03, 1.0, 2.0)
    with pytest.raises(ConfigError):
        TensorChain.rods(3, 0.5, 0.03, -1.0, 2.0)
    with pytest.raises(ConfigError):
        TensorChain.rods(3, 0.5, 0.03, 1.0, 2.0, spring_law="hooke")
    ch = TensorChain.rods(3, 0.5, 0.03, 1.0, 2.0)
    bad = ch.straight_state()
    bad.nu[0] = np.nan
    with pytest.raises(StateError):
        ch.check_state(bad)
    with pytest.raises(StateError):
        ch.step(bad, 1e-3)


# ---------------------------------------------------------------------------- law (19) and energy (issue 16)
def _spring_power_mismatch(ch, R, w):
    """(springs' power, −dV/dt) with V = ``spring_energy``: the power of m_J on bodies j (+) and j+1 (−) along
    the rotation of every body at ω_i (central differences of V)."""
    mJ = ch.joint_moments(R)
    P = float(np.sum(mJ * (w[:-1] - w[1:])))
    h = 1e-6
    q = np.array([quat_from_matrix(Ri) for Ri in R])
    Rp = quat_to_matrix(quat_mul(quat_exp(w * h), q))
    Rm = quat_to_matrix(quat_mul(quat_exp(-w * h), q))
    return P, -(ch.spring_energy(Rp) - ch.spring_energy(Rm)) / (2 * h)


@pytest.mark.parametrize("law", ["rotvec", "euler123_conservative"])
def test_conservative_spring_laws_are_gradients(law):
    """ "rotvec" (isotropic K) and our "euler123_conservative": the springs' power equals −dV/dt of
    ``spring_energy`` (relative 1e-7), and a free chain conserves the total energy."""
    rng = np.random.default_rng(31)
    k = rng.uniform(1, 3, 4)
    K = k[:, None] * np.ones(3) if law == "rotvec" else rng.uniform(1, 3, (4, 3))
    ch0, s, _ = random_chain(n=5, law=law, seed=9)
    ch = TensorChain(
        ch0.masses, ch0.inertias, ch0.joint_parent, ch0.joint_child, K, gravity=np.zeros(3), spring_law=law
    )
    for _ in range(20):
        st = random_state(ch, rng)
        P, mdV = _spring_power_mismatch(ch, st.R, rng.normal(size=(5, 3)))
        assert abs(P - mdV) <= 1e-7 * max(abs(P), 1e-3)
    s = ch.project(s)
    s.nu *= 0.3
    E0 = ch.kinetic_energy(s) + ch.spring_energy(s.R)
    for _ in range(400):
        s, _ = ch.step(s, 5e-4)
    E1 = ch.kinetic_energy(s) + ch.spring_energy(s.R)
    assert abs(E1 - E0) <= 1e-6 * E0


def test_paper_spring_law_19_is_not_conservative():
    """(19): the axes are not orthogonal, so the springs' power departs from −dV/dt, by about as much as the
    relative rotation in radians (module docstring: 5 % of |m_J||ω_rel| at 0.1 rad, 120 % at 1 rad); it is
    the conservative law exactly when θ = 0 (orthonormal axes)."""
    rng = np.random.default_rng(32)
    ch = TensorChain.rods(2, 0.5, 0.03, 1.0, [2.0, 2.0, 2.0], gravity=np.zeros(3))
    cons = TensorChain.rods(
        2, 0.5, 0.03, 1.0, [2.0, 2.0, 2.0], gravity=np.zeros(3), spring_law="euler123_conservative"
    )
    worst = {}
    for mag in (0.1, 1.0):
        worst[mag] = 0.0
        for _ in range(300):
            q1 = quat_exp(rng.normal(size=3))
            ax = rng.normal(size=3)
            q2 = quat_mul(q1, quat_exp(mag * ax / np.linalg.norm(ax)))
            R = quat_to_matrix(np.array([q1, q2]))
            w = rng.normal(size=(2, 3))
            P, mdV = _spring_power_mismatch(ch, R, w)
            worst[mag] = max(
                worst[mag], abs(P - mdV) / (np.linalg.norm(ch.joint_moments(R)) * np.linalg.norm(w[1] - w[0]))
            )
    assert 0.02 < worst[0.1] < 0.1 and 0.6 < worst[1.0] < 2.0
    Q = quat_to_matrix(quat_exp(np.array([0.3, -0.2, 0.5])))
    R = np.stack([Q, Q @ rot_x(0.4) @ rot_z(-0.7)])  # θ = 0: j1 ⟂ j2 ⟂ j3
    np.testing.assert_allclose(ch.joint_moments(R), cons.joint_moments(R), atol=1e-14)


@pytest.mark.parametrize("law", ["euler123", "rotvec", "euler123_conservative"])
@pytest.mark.parametrize("fixed", [False, True])
def test_compiled_step_and_projection_equal_the_numpy_formulation(law, fixed):
    """The compiled RK4 step and projection (models/_tensor_kernels.py, ``fast=True``) give the NumPy
    formulation's state and first-stage dynamics to round-off, on random chains, states and ports;
    the projection also from a state whose joints are pulled apart (Newton iterations taken)."""
    ch, s, rng = random_chain(law=law, fixed=fixed, seed=3)
    port = rng.normal(size=6 * ch.n)
    off = ChainState(s.pos + 1e-3 * rng.normal(size=s.pos.shape), s.quat, s.nu)
    out = {}
    for fast in (False, True):
        ch.fast = fast
        new, dyn = ch.step(s, 2e-3, port)
        raw, _ = ch.step(s, 2e-3, None, project=False)
        out[fast] = (new, dyn, raw, ch.project(off))
    (a, da, ra, pa), (b, db, rb, pb) = out[False], out[True]
    for x, y in ((a, b), (ra, rb), (pa, pb)):
        assert np.allclose(x.pos, y.pos, rtol=0, atol=1e-13) and np.allclose(
            x.quat, y.quat, rtol=0, atol=1e-13
        )
        assert np.allclose(x.nu, y.nu, rtol=1e-12, atol=1e-12)
    for k in ("nu_dot", "F_J", "M", "J", "gamma", "F", "M_J"):
        u, v = getattr(da, k), getattr(db, k)
        assert u.shape == v.shape and np.allclose(u, v, rtol=1e-11, atol=1e-11 * max(1.0, np.abs(u).max())), k
    assert np.max(np.abs(ch.constraint_violation(pb))) < 1e-12  # the projection did its job
