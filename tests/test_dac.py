"""DAC port laws ([Eslami] §3) on the tensor chain: exact reference derivatives, Lyapunov decrease on
closed-loop runs with the tensor model as the plant, frame invariance, QP = closed form, RHS maps."""

import numpy as np
import pytest
from _dac_reference import null_space_wish_numpy, obstacle_potential

from cmstack.controllers.dac import (
    JointActuationMap,
    Obstacle,
    PortLaw,
    PoseLaw,
    TaskSpaceLaw,
    ThrusterMap,
    VelocityLaw,
    attitude_error,
    attitude_error_rate,
    constrained_reference,
    null_space_wish,
)
from cmstack.models.errors import ConfigError
from cmstack.models.tensor_chain import (
    ChainState,
    TensorChain,
    quat_exp,
    quat_from_matrix,
    quat_mul,
    quat_to_matrix,
)


def chain(n=4, fixed=False, base=None):
    kw = dict(fixed_base=True, base_pose=base) if fixed else {}
    return TensorChain.rods(n, 0.4, 0.04, 1.2, [1.5, 2.0, 2.5], gravity=np.array([0.0, 0.0, -9.81]), **kw)


def bent_state(ch, rng, speed=0.5):
    n = ch.n
    q = np.empty((n, 4))
    q[0] = quat_exp(np.array([0.1, -0.2, 0.3]))
    for i in range(1, n):
        q[i] = quat_mul(q[i - 1], quat_exp(0.4 * rng.normal(size=3)))
    R = quat_to_matrix(q)
    pos = np.zeros((n, 3))
    for j in range(n - 1):
        pos[j + 1] = pos[j] + R[j] @ ch.joint_parent[j] - R[j + 1] @ ch.joint_child[j]
    s = ChainState(pos, q, speed * rng.normal(size=6 * n))
    return ch.project(s)


def flow(s, t):
    return ChainState(s.pos + s.v * t, quat_mul(quat_exp(s.w * t), s.quat), s.nu)


def ee_traj(p0, q0, amp=0.1, om=2.0):
    """Smooth EE trajectory: a circle in the plane ⟂ z through p0 and a slow rotation about a fixed axis."""
    ax = np.array([0.3, 0.5, 0.8]) / np.linalg.norm([0.3, 0.5, 0.8])

    def traj(t):
        c, s = np.cos(om * t), np.sin(om * t)
        p = p0 + amp * np.array([c - 1, s, 0.0])
        v = amp * om * np.array([-s, c, 0.0])
        a = amp * om**2 * np.array([-c, -s, 0.0])
        ang = 0.3 * np.sin(om * t)
        q = quat_mul(quat_exp(ax * ang), q0)
        w = ax * 0.3 * om * np.cos(om * t)
        wd = -ax * 0.3 * om**2 * np.sin(om * t)
        return p, q, np.r_[v, w], np.r_[a, wd]

    return traj


def pose_traj(ch, s0):
    """Every body follows a rigid motion of the initial chain (constraint-consistent): rotation about a
    fixed axis through the origin at a varying rate, plus a translation."""
    ax = np.array([0.0, 0.6, 0.8])

    def traj(t):
        th, thd, thdd = 0.2 * np.sin(t), 0.2 * np.cos(t), -0.2 * np.sin(t)
        Q = quat_to_matrix(quat_exp(ax * th))
        wq = ax * thd
        wqd = ax * thdd
        tr = np.array([0.1 * t, 0.0, 0.05 * t * t])
        trd = np.array([0.1, 0.0, 0.1 * t])
        trdd = np.array([0.0, 0.0, 0.1])
        p = s0.pos @ Q.T + tr
        q = quat_mul(np.broadcast_to(quat_exp(ax * th), (ch.n, 4)), s0.quat)
        r = s0.pos @ Q.T
        v = np.cross(wq, r) + trd
        a = np.cross(wqd, r) + np.cross(wq, np.cross(wq, r)) + trdd
        nu = np.r_[v.ravel(), np.tile(wq, ch.n)]
        nud = np.r_[a.ravel(), np.tile(wqd, ch.n)]
        return p, q, nu, nud

    return traj


# ---------------------------------------------------------------------------- building blocks
def test_attitude_error_rate_by_finite_differences():
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = quat_exp(rng.normal(size=3))
        qd = quat_exp(rng.normal(size=3))
        w, wd = rng.normal(size=3), rng.normal(size=3)
        h = 1e-6
        e = lambda t: attitude_error(quat_mul(quat_exp(w * t), q), quat_mul(quat_exp(wd * t), qd))[0]
        fd = (e(h) - e(-h)) / (2 * h)
        e0, eta = attitude_error(q, qd)
        np.testing.assert_allclose(attitude_error_rate(e0, eta, w, wd), fd, atol=1e-8)
        # small error: e ≈ half the world-frame rotation vector from q_d to q
        phi = 1e-4 * rng.normal(size=3)
        np.testing.assert_allclose(attitude_error(quat_mul(quat_exp(phi), qd), qd)[0], phi / 2, atol=1e-11)


def test_reference_is_mass_weighted_pseudo_inverse_53_54():
    """Without joint rows, (*) is literally J_t^† ν_{e,r} + (I − J_t^† J_t) g with (53)."""
    rng = np.random.default_rng(1)
    ch = chain()
    s = bent_state(ch, rng)
    M = ch.mass_matrix(s.R)
    n = ch.n
    Jt = np.zeros((6, 6 * n))
    Jt[:3, 3 * (n - 1) : 3 * n] = np.eye(3)
    Jt[3:, 3 * n + 3 * (n - 1) :] = np.eye(3)
    Mi = np.linalg.inv(M)
    Jp = Mi @ Jt.T @ np.linalg.inv(Jt @ Mi @ Jt.T)  # (53)
    we, g = rng.normal(size=6), rng.normal(size=6 * n)
    ref = Jp @ we + (np.eye(6 * n) - Jp @ Jt) @ g  # (54)
    z = np.zeros_like
    nu_r, _ = constrained_reference(M, z(M), Jt, z(Jt), we, z(we), g, z(g))
    np.testing.assert_allclose(nu_r, ref, atol=1e-12)


def test_obstacle_potential_gradient_and_rate():
    """g = −∇U_o: dU/dt = −gᵀν along the motion, and ġ matches finite differences (CoM and body points)."""
    rng = np.random.default_rng(11)
    ch = chain()
    s = bent_state(ch, rng)
    obs = [
        Obstacle(s.pos[1] + np.array([0.05, 0.1, 0.0]), 0.04),
        Obstacle(s.pos[2] + np.array([0.0, -0.1, 0.05]), 0.03),
    ]
    for pts in ([[0.0, 0.0, 0.0]], [[-0.2, 0, 0], [-0.1, 0, 0], [0, 0, 0], [0.1, 0, 0], [0.2, 0, 0]]):
        g, gd, U, _ = null_space_wish(s, obs, 1e-3, 0.3, np.array(pts))
        assert U > 0
        h = 1e-6
        gp, _, Up, _ = null_space_wish(flow(s, h), obs, 1e-3, 0.3, np.array(pts))
        gm, _, Um, _ = null_space_wish(flow(s, -h), obs, 1e-3, 0.3, np.array(pts))
        np.testing.assert_allclose((Up - Um) / (2 * h), -g @ s.nu, rtol=1e-6)
        np.testing.assert_allclose(gd, (gp - gm) / (2 * h), atol=1e-6 * max(1, np.abs(gd).max()))
        if len(pts) == 1:
            assert np.abs(g[3 * ch.n :]).max() == 0  # the paper's U_o: positions only
        else:
            assert np.abs(g[3 * ch.n :]).max() > 0  # points off the CoM: a moment part


@pytest.mark.parametrize("law", ["II", "III", "III-points"])
def test_reference_derivative_by_finite_differences(law):
    rng = np.random.default_rng(2)
    ch = chain()
    s = bent_state(ch, rng)
    if law == "II":
        ctl = PoseLaw(ch, pose_traj(ch, bent_state(ch, np.random.default_rng(5))), 5.0, 1.0, 3.0, 4.0)
    else:
        obs = [Obstacle(s.pos[1] + np.array([0.1, 0.12, 0.0]), 0.05)]
        pts = None if law == "III" else [[-0.2, 0, 0], [0, 0, 0], [0.2, 0, 0]]
        ctl = TaskSpaceLaw(
            ch,
            ee_traj(s.pos[-1] + 0.05, quat_exp(np.array([0.2, 0.1, 0.0]))),
            5.0,
            1.0,
            3.0,
            4.0,
            obstacles=obs,
            obstacle_gain=1e-3,
            obstacle_range=0.3,
            obstacle_points=pts,
        )
    t, h = 0.3, 1e-6
    ref = lambda tt, st: ctl.reference(tt, st, st.R, ch.mass_matrix(st.R))
    nu_r, nu_r_dot = ref(t, s)
    fd = (ref(t + h, flow(s, h))[0] - ref(t - h, flow(s, -h))[0]) / (2 * h)
    assert np.abs(nu_r_dot).max() > 0.1
    np.testing.assert_allclose(nu_r_dot, fd, atol=2e-6 * max(1, np.abs(fd).max()))
    J = ch.jacobian(s.R)
    assert np.abs(J @ nu_r).max() <= 1e-12  # J ν_r = 0: s stays on the manifold


# ---------------------------------------------------------------------------- Lyapunov decrease
def closed_loop(ch, law, s, T, dt=1e-3, t0=0.0):
    Vs, Vd = [], []
    t = t0
    for _ in range(int(round(T / dt))):
        law(t, s)
        Vs.append(law.info.V)
        Vd.append(law.info.Vdot_cl)
        s, _ = ch.step(s, dt, port_fn=lambda tt, st: law(tt, st), t=t)  # continuous feedback τ = τ_c
        t += dt
    law(t, s)
    Vs.append(law.info.V)
    Vd.append(law.info.Vdot_cl)
    return s, np.array(Vs), np.array(Vd)


@pytest.mark.parametrize("which", ["I", "II", "III"])
def test_lyapunov_decreases_along_closed_loop(which):
    rng = np.random.default_rng(3)
    ch = chain()
    s0 = bent_state(ch, rng, speed=0.0)
    s = bent_state(ch, rng, speed=0.8)
    if which == "I":
        tr = pose_traj(ch, s0)
        law = VelocityLaw(ch, lambda t: tr(t)[2:], 4.0, 0.3)
    elif which == "II":
        law = PoseLaw(ch, pose_traj(ch, s0), 4.0, 0.3, 2.0, 2.0)
    else:
        obs = [Obstacle(s.pos[1] + np.array([0.0, 0.15, 0.05]), 0.05)]
        law = TaskSpaceLaw(
            ch,
            ee_traj(s.pos[-1] + np.array([0.05, -0.05, 0.02]), s.quat[-1]),
            4.0,
            0.3,
            2.0,
            2.0,
            obstacles=obs,
            obstacle_gain=1e-3,
            obstacle_range=0.3,
        )
    dt = 1e-3
    s, V, Vd = closed_loop(ch, law, s, 0.5, dt)
    assert V[0] > 0.05
    assert np.all(np.diff(V) < 0)  # strictly decreasing sample to sample
    # V(T) − V(0) = −∫ sᵀK_d s dt (38)–(41), Simpson's rule on the 500 steps
    integral = dt / 3 * (Vd[0] + Vd[-1] + 4 * Vd[1:-1:2].sum() + 2 * Vd[2:-1:2].sum())
    assert abs((V[-1] - V[0]) - integral) <= 1e-6 * V[0]
    assert V[-1] < 0.5 * V[0]


def test_task_space_law_tracks_and_avoids():
    """Law III with continuous feedback on the tensor model: the EE error decays as D^I e + Λ_e e = 0 while
    the potential keeps body 2 off the keep-out sphere it starts inside the influence range of.  (The
    sampled-data loop, with its O(Δt) lag, is measured by the chain_task_space scenario.)"""
    rng = np.random.default_rng(4)
    ch = chain()
    s = bent_state(ch, rng, speed=0.0)
    obs = [Obstacle(s.pos[1] + np.array([0.0, 0.12, 0.0]), 0.05)]
    tr = ee_traj(s.pos[-1] + np.array([0.05, 0.05, 0.0]), s.quat[-1])
    law = TaskSpaceLaw(
        ch, tr, 0.0, 0.0, 8.0, 8.0, obstacles=obs, obstacle_gain=1e-3, obstacle_range=0.15, kd_mass=20.0
    )
    law(0.0, s)
    assert law.clearance < 0.15 and np.linalg.norm(law.info.e_task[:3]) > 0.05
    clear = []
    t, dt = 0.0, 2e-3
    for _ in range(1500):
        s, _ = ch.step(s, dt, port_fn=lambda tt, st: law(tt, st), t=t)
        t += dt
        clear.append(law.clearance)
    law(t, s)
    assert np.linalg.norm(law.info.e_task[:3]) < 1e-5 and np.linalg.norm(law.info.e_task[3:]) < 1e-5
    assert min(clear) > 0


# ---------------------------------------------------------------------------- frame invariance
def test_closed_loop_is_frame_invariant():
    """Rotate and translate the whole scenario (initial state, targets, obstacles, gravity) by a random
    rigid motion: the closed loop on the tensor model is the transformed one and τ_c is a tensor."""
    rng = np.random.default_rng(6)
    Q = quat_to_matrix(quat_exp(rng.normal(size=3)))
    tq = rng.normal(size=3)
    qQ = quat_from_matrix(Q)
    ch_a = chain()
    ch_b = TensorChain(
        ch_a.masses,
        ch_a.inertias,
        ch_a.joint_parent,
        ch_a.joint_child,
        ch_a.stiffness,
        gravity=Q @ ch_a.gravity,
    )
    s_a = bent_state(ch_a, rng, speed=0.5)
    s_b = s_a.transformed(Q, tq)
    obs_a = [Obstacle(s_a.pos[1] + np.array([0.0, 0.12, 0.05]), 0.05)]
    tr_a = ee_traj(
        s_a.pos[-1] + np.array([0.05, 0.0, 0.03]), quat_mul(quat_exp(np.array([0.0, 0.3, 0.0])), s_a.quat[-1])
    )

    def tr_b(t):
        p, q, nu, nud = tr_a(t)
        return Q @ p + tq, quat_mul(qQ, q), np.r_[Q @ nu[:3], Q @ nu[3:]], np.r_[Q @ nud[:3], Q @ nud[3:]]

    mk = lambda ch, tr, obs: TaskSpaceLaw(
        ch, tr, 6.0, 0.5, 3.0, 3.0, obstacles=obs, obstacle_gain=1e-3, obstacle_range=0.3
    )
    law_a = mk(ch_a, tr_a, obs_a)
    law_b = mk(ch_b, tr_b, [o.transformed(Q, tq) for o in obs_a])
    rot = lambda x: (x.reshape(-1, 3) @ Q.T).ravel()
    t, dt = 0.0, 2e-3
    worst = 0.0
    for _ in range(100):
        ta, tb = law_a(t, s_a), law_b(t, s_b)
        worst = max(worst, np.abs(tb - rot(ta)).max())
        s_a, _ = ch_a.step(s_a, dt, ta, t=t)
        s_b, _ = ch_b.step(s_b, dt, tb, t=t)
        t += dt
    assert abs(law_a.info.V - law_b.info.V) <= 1e-12
    assert worst <= 1e-9
    st = s_a.transformed(Q, tq)
    assert np.abs(st.pos - s_b.pos).max() <= 1e-9 and np.abs(st.nu - s_b.nu).max() <= 1e-9
    dq = np.minimum(np.abs(st.quat - s_b.quat).max(axis=1), np.abs(st.quat + s_b.quat).max(axis=1))
    assert dq.max() <= 1e-9
    assert np.abs(ta).max() > 0.5  # a non-trivial command


# ---------------------------------------------------------------------------- QP = closed form, RHS
def test_reference_qp_equals_closed_form_and_respects_rate_limit():
    rng = np.random.default_rng(7)
    ch = chain()
    s = bent_state(ch, rng)
    tr = ee_traj(s.pos[-1] + 0.1, s.quat[-1])
    obs = [Obstacle(s.pos[1] + np.array([0.0, 0.12, 0.0]), 0.05)]
    kw = dict(obstacles=obs, obstacle_gain=1e-3, obstacle_range=0.3)
    cf = TaskSpaceLaw(ch, tr, 5.0, 1.0, 3.0, 3.0, **kw)
    qp = TaskSpaceLaw(ch, tr, 5.0, 1.0, 3.0, 3.0, qp=True, joint_rate_limit=100.0, **kw)
    np.testing.assert_allclose(qp(0.1, s), cf(0.1, s), atol=1e-7)
    assert qp.info.qp_active == 0
    ref_cf = cf.info.nu_r
    C, _ = qp._rate_rows(s.R, s.nu)
    lim = 0.5 * np.abs(C @ ref_cf).max()
    tight = TaskSpaceLaw(ch, tr, 5.0, 1.0, 3.0, 3.0, qp=True, joint_rate_limit=lim, **kw)
    tight(0.1, s)
    assert tight.info.qp_active > 0
    assert np.abs(C @ tight.info.nu_r).max() <= lim * (1 + 1e-6)
    J = ch.jacobian(s.R)
    assert np.abs(J @ tight.info.nu_r).max() <= 1e-8  # still on the constraint manifold


def test_joint_actuation_fixed_base_realizes_any_port():
    rng = np.random.default_rng(8)
    free = chain()
    s = bent_state(free, rng)
    ch = chain(fixed=True, base=(s.pos[0].copy(), s.quat[0].copy()))
    s = ch.project(s)
    rhs = JointActuationMap(ch)
    tau_c = rng.normal(size=6 * ch.n)
    a = rhs(tau_c, s)
    assert a.residual_g <= 1e-10 * np.linalg.norm(tau_c)
    # the motors produce the same motion as the commanded port
    d1 = ch.dynamics(s, tau_c)
    d2 = ch.dynamics(s, a.tau)
    np.testing.assert_allclose(d2.nu_dot, d1.nu_dot, atol=1e-9)
    # QP with a loose limit = closed form; with a tight limit the bound holds and a residual is reported
    b = JointActuationMap(ch, qp=True, limit=1e3)(tau_c, s)
    np.testing.assert_allclose(b.u, a.u, atol=1e-7)
    lim = 0.3 * np.abs(np.einsum("jba,jb->ja", s.R[1:], a.u)).max()
    c = JointActuationMap(ch, qp=True, limit=lim)(tau_c, s)
    assert c.saturated and c.residual_g > 1e-3
    assert np.abs(np.einsum("jba,jb->ja", s.R[1:], c.u)).max() <= lim * (1 + 1e-6)
    assert ThrusterMap()(tau_c, s).residual_g == 0.0


def test_joint_actuation_free_floating_cannot_change_momentum():
    rng = np.random.default_rng(9)
    ch = chain()
    s = bent_state(ch, rng)
    rhs = JointActuationMap(ch)
    internal = rhs.B @ rng.normal(size=3 * (ch.n - 1)) + ch.jacobian(s.R).T @ rng.normal(size=3 * (ch.n - 1))
    assert rhs(internal, s).residual_g <= 1e-9
    ext = np.zeros(6 * ch.n)
    ext[0:3] = [1.0, 0.0, 0.0]  # a net force: the motors cannot produce it
    a = rhs(ext, s)
    assert a.residual_g > 0.1
    # the part they do produce carries no net force
    assert np.abs(a.tau[: 3 * ch.n].reshape(-1, 3).sum(axis=0)).max() <= 1e-12


def test_bad_gains_are_refused():
    ch = chain()
    with pytest.raises(ConfigError):
        VelocityLaw(ch, lambda t: (np.zeros(24), np.zeros(24)), -1.0, 1.0)
    with pytest.raises(ConfigError):
        PoseLaw(ch, None, 1.0, 1.0, 0.0, 1.0)
    with pytest.raises(ConfigError):
        TaskSpaceLaw(ch, None, 1.0, 1.0, 1.0, 1.0, obstacle_gain=-1.0)


# ---------------------------------------------------------------------------- obstacle term inside a sphere
def _sphere_cases(s, pts):
    """Spheres that put a body point of body 2 outside (in range), exactly on, and inside a sphere
    (shallow, in the core, and next to the centre)."""
    R1 = s.R[1]
    x = s.pos[1] + R1 @ np.asarray(pts[-1], float)  # the last point of body 2
    u = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
    r = 0.06
    return {
        "outside": [Obstacle(x + (r + 0.08) * u, r)],
        "on": [Obstacle(x + r * u, r)],
        "inside_shallow": [Obstacle(x + (r - 0.004) * u, r)],
        "inside_deep": [Obstacle(x + 0.02 * u, r)],
        "near_centre": [Obstacle(x + 1e-3 * u, r)],
    }


@pytest.mark.parametrize("case", ["outside", "on", "inside_shallow", "inside_deep", "near_centre"])
@pytest.mark.parametrize("pts", [[[0.0, 0.0, 0.0]], [[-0.2, 0, 0], [0, 0, 0], [0.2, 0, 0]]])
def test_obstacle_term_is_a_gradient_system_at_every_distance(case, pts):
    """U_o, g = −∇U_o and ġ are derivatives of one function wherever the points are: dU/dt = −gᵀν and
    ġ = d/dt g by central differences along the motion (relative 1e-6), outside, on and inside a sphere."""
    rng = np.random.default_rng(21)
    ch = chain()
    s = bent_state(ch, rng, speed=0.7)
    obs = _sphere_cases(s, pts)[case]
    d0, eta = 0.15, 1e-3
    g, gd, U, dmin = null_space_wish(s, obs, eta, d0, np.array(pts))
    if case == "outside":
        assert 0 < dmin < d0
    elif case == "on":
        assert abs(dmin) < 1e-12
    else:
        assert dmin < 0
    assert U > 0 and np.abs(g).max() > 0 and np.isfinite(gd).all()
    h = 1e-6
    gp, _, Up, _ = null_space_wish(flow(s, h), obs, eta, d0, np.array(pts))
    gm, _, Um, _ = null_space_wish(flow(s, -h), obs, eta, d0, np.array(pts))
    dU = (Up - Um) / (2 * h)
    np.testing.assert_allclose(dU, -g @ s.nu, rtol=1e-6, atol=1e-9 * max(1.0, abs(dU)))
    fd = (gp - gm) / (2 * h)
    rel = np.abs(gd - fd).max() / max(np.abs(fd).max(), 1e-12)
    assert rel <= 1e-6, f"{case}: rate {np.abs(gd).max():.3g} vs finite difference {np.abs(fd).max():.3g}"


@pytest.mark.parametrize("case", ["outside", "on", "inside_shallow", "inside_deep", "near_centre"])
@pytest.mark.parametrize("pts", [[[0.0, 0.0, 0.0]], [[-0.2, 0, 0], [0, 0, 0], [0.2, 0, 0]]])
def test_obstacle_wish_is_its_numpy_formulation(case, pts):
    """``null_space_wish`` (the compiled ``kernels._obstacle_wish``, which law (III)'s step calls) equals the
    NumPy array formulation of tests/_dac_reference.py (FIRAS outside, the C² quartic in the core): g, ġ, U_o
    and d_min to 1e-12 relative, with points outside, on and inside a sphere, and out of range (zero wish)."""
    rng = np.random.default_rng(23)
    ch = chain()
    s = bent_state(ch, rng, speed=0.7)
    obs = _sphere_cases(s, pts)[case]
    d0s = (
        (0.15, 0.05) if case == "outside" else (0.15,)
    )  # 0.05: the point 8 cm off the sphere is out of range
    for d0 in d0s:
        got = null_space_wish(s, obs, 1e-3, d0, np.array(pts), clip=0.1 * d0)
        ref = null_space_wish_numpy(s, obs, 1e-3, d0, np.array(pts), clip=0.1 * d0)
        for a, b in zip(got[:2], ref[:2]):
            assert np.abs(a - b).max() <= 1e-12 * max(1.0, np.abs(b).max())
        assert got[2] == pytest.approx(ref[2], rel=1e-12, abs=1e-300) and got[3] == pytest.approx(
            ref[3], rel=1e-12
        )
        assert (np.abs(got[0]).max() > 0) == (d0 == 0.15)
    assert null_space_wish(s, [], 1e-3, 0.15, np.array(pts))[3] == np.inf


def test_obstacle_potential_is_c2_across_the_core_radius():
    """The inner quartic meets the FIRAS branch with the same value, gradient and Hessian (C²): evaluate a
    single point just outside and just inside d = d_c (the NumPy formulation, which the kernel equals)."""
    d0, eta, dc = 0.15, 1e-3, 0.01
    ob = [Obstacle(np.zeros(3), 0.05)]
    u = np.array([0.6, 0.0, 0.8])
    out = []
    for d in (dc + 1e-9, dc - 1e-9):
        U, gp, hp, _ = obstacle_potential((0.05 + d) * u[None, :].repeat(2, 0), ob, eta, d0, clip=dc)
        out.append((U, gp[0], hp[0]))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-6)
    np.testing.assert_allclose(out[0][2], out[1][2], rtol=1e-6, atol=1e-6 * np.abs(out[0][2]).max())
    # repulsive everywhere inside: the force −∇U points away from the centre, and vanishes at it
    for rho in (1e-3, 0.02, 0.049, 0.055):
        _, gp, _, _ = obstacle_potential(rho * u[None, :].repeat(2, 0), ob, eta, d0, clip=dc)
        assert gp[0] @ u < 0
    _, gp, _, _ = obstacle_potential(np.zeros((2, 3)), ob, eta, d0, clip=dc)
    assert np.abs(gp[0]).max() == 0


def test_lyapunov_rate_nonpositive_with_points_inside_a_sphere():
    """V̇ of the law (III) closed loop (τ = τ_c on the tensor model) on random states with body points
    inside a keep-out sphere: V̇, by central differences of V = ½ sᵀℳ s along the exact motion, equals
    −sᵀK_d s ≤ 0 (before the fix of issue 16, V̇ reached +7e19 there)."""
    rng = np.random.default_rng(22)
    ch = chain()
    pts = np.array([[-0.2, 0, 0], [-0.1, 0, 0], [0, 0, 0], [0.1, 0, 0], [0.2, 0, 0]])
    worst, n_inside = -np.inf, 0
    for k in range(12):
        s = bent_state(ch, rng, speed=0.6)
        b = 1 + k % (ch.n - 2)  # a middle body
        x = s.pos[b] + s.R[b] @ pts[rng.integers(len(pts))]
        r = 0.05
        c = x + rng.uniform(0.0, 0.9 * r) * quat_to_matrix(quat_exp(rng.normal(size=3)))[:, 0]
        law = TaskSpaceLaw(
            ch,
            ee_traj(s.pos[-1] + 0.03, s.quat[-1]),
            4.0,
            0.3,
            2.0,
            2.0,
            obstacles=[Obstacle(c, r)],
            obstacle_gain=1e-4,
            obstacle_range=0.15,
            obstacle_points=pts,
        )
        t = 0.2
        tau = law(t, s)
        assert law.clearance < 0
        n_inside += 1
        nu_dot = ch.dynamics(s, tau).nu_dot

        def V(tt, st):
            nu_r, _ = law.reference(tt, st, st.R, ch.mass_matrix(st.R))
            e = st.nu - nu_r
            return 0.5 * e @ ch.mass_matrix(st.R) @ e

        h = 1e-6
        sp, sm = flow(s, h), flow(s, -h)
        sp.nu, sm.nu = s.nu + h * nu_dot, s.nu - h * nu_dot
        Vdot = (V(t + h, sp) - V(t - h, sm)) / (2 * h)
        Vdot_cl = law.info.Vdot_cl
        assert Vdot_cl < 0
        np.testing.assert_allclose(Vdot, Vdot_cl, rtol=1e-4, atol=1e-7 * law.info.V)
        worst = max(worst, Vdot)
    assert n_inside == 12 and worst <= 0


def _attitude_error_oracle(q, q_d):
    """(44) by quaternion algebra and a rotation matrix (an independent formulation of the kernel's):
    q_e = q_d⁻¹ ⊗ q with η ≥ 0, e_att = R(q_d) ε."""
    qe = quat_mul(np.array([q_d[0], -q_d[1], -q_d[2], -q_d[3]]), q)
    qe = -qe if qe[0] < 0 else qe
    return quat_to_matrix(q_d) @ qe[1:], qe[0]


def test_attitude_error_equals_its_quaternion_definition():
    """``attitude_error`` (the compiled (44), row by row) equals q_d⁻¹ ⊗ q rotated by R(q_d) on single and
    stacked quaternions, broadcast against one target, with the sign flip past 180°; the rate equals
    ω_d × e + ½(η(ω − ω_d) − e × (ω − ω_d))."""
    rng = np.random.default_rng(8)
    qs = np.array([quat_exp(rng.normal(size=3) * 2.0) for _ in range(12)])
    qd = quat_exp(np.array([0.3, -2.9, 0.4]))
    conj = np.array([qd[0], -qd[1], -qd[2], -qd[3]])
    assert any(quat_mul(conj, q)[0] < 0 for q in qs) and any(
        quat_mul(conj, q)[0] > 0 for q in qs
    )  # both signs
    e, eta = attitude_error(qs, qd)
    assert e.shape == (12, 3) and eta.shape == (12,) and np.all(eta >= 0)
    for k in range(12):
        e_k, eta_k = _attitude_error_oracle(qs[k], qd)
        np.testing.assert_allclose(e[k], e_k, rtol=0, atol=1e-15)
        assert abs(eta[k] - eta_k) <= 1e-15
        w, wd = rng.normal(size=3), rng.normal(size=3)
        rate = np.cross(wd, e_k) + 0.5 * (eta_k * (w - wd) - np.cross(e_k, w - wd))
        np.testing.assert_allclose(attitude_error_rate(e[k], eta[k], w, wd), rate, rtol=0, atol=1e-14)
    e1, eta1 = attitude_error(qs[3], qd)
    assert e1.shape == (3,) and np.ndim(eta1) == 0 and np.array_equal(e1, e[3])


def test_end_effector_task_is_the_attitude_error_of_law_two():
    """Law (III)'s end-effector task (52), the compiled ``_ee_task`` that both of its paths call, equals
    ν_{e,d} − Λ_e e and its rate written with the quaternion definition of (44) on the last body, for random
    bent states and trajectory times, including a target rotated past 180°."""
    rng = np.random.default_rng(5)
    ch = TensorChain.rods(5, 0.4, 0.04, 1.2, [1.5, 2.0, 2.5], gravity=np.array([0.0, 0.0, -9.81]))
    for k in range(20):
        s = bent_state(ch, rng, speed=1.0)
        q0 = s.quat[-1] if k % 2 else quat_mul(quat_exp(np.array([0.0, 0.0, 3.0])), s.quat[-1])
        traj = ee_traj(s.pos[-1] + rng.normal(size=3) * 0.05, q0)
        law = TaskSpaceLaw(ch, traj, 1.0, 1.0, 4.0, 7.0)
        t = rng.uniform(0, 3)
        nu_er, nu_er_dot, e_ep = law._task(t, s)
        p_d, q_d, nu_ed, nu_ed_dot = law.traj.world(t)
        e_att, eta = _attitude_error_oracle(s.quat[-1], q_d)
        dw = s.w[-1] - nu_ed[3:]
        de_att = np.cross(nu_ed[3:], e_att) + 0.5 * (eta * dw - np.cross(e_att, dw))
        lam = np.r_[np.full(3, 4.0), np.full(3, 7.0)]
        e = np.r_[s.pos[-1] - p_d, e_att]
        np.testing.assert_allclose(e_ep, e, rtol=0, atol=1e-14)
        np.testing.assert_allclose(nu_er, nu_ed - lam * e, rtol=0, atol=1e-13)
        np.testing.assert_allclose(
            nu_er_dot, nu_ed_dot - lam * np.r_[s.v[-1] - nu_ed[:3], de_att], rtol=0, atol=1e-12
        )


def obstacle_run(law_name, fixed, *, kd_v, kd_w, kd_mass, obstacles=True):
    """(chain, state, law) of the closed-form tests' run that passes obstacles: five rods under gravity with
    springs ``law_name`` (fixed at the base's pose when ``fixed``), a bent state (seed 41) projected on it, and
    law (III) tracking a pose near the tip with two spheres (``obstacles``) and five points per rod."""
    rng = np.random.default_rng(41)
    kw = dict(gravity=np.array([0.0, 0.0, -9.81]), spring_law=law_name)
    free = TensorChain.rods(5, 0.4, 0.04, 1.2, [1.5, 2.0, 2.5], **kw)
    s = bent_state(free, rng, speed=0.3)
    if fixed:
        base = (s.pos[0].copy(), s.quat[0].copy())
        ch = TensorChain.rods(5, 0.4, 0.04, 1.2, [1.5, 2.0, 2.5], fixed_base=True, base_pose=base, **kw)
    else:
        ch = free
    s = ch.project(s)
    pts = [[-0.2, 0, 0], [-0.1, 0, 0], [0, 0, 0], [0.1, 0, 0], [0.2, 0, 0]]
    obs = [
        Obstacle(s.pos[2] + s.R[2] @ np.array([0.2, 0.0, 0.0]) + np.array([0.0, 0.0, 0.06]), 0.05),
        Obstacle(s.pos[1] + np.array([0.0, 0.15, 0.0]), 0.05),
    ]
    law = TaskSpaceLaw(
        ch,
        ee_traj(s.pos[-1] + np.array([0.03, -0.02, 0.02]), s.quat[-1]),
        kd_v,
        kd_w,
        6.0,
        6.0,
        obstacles=obs if obstacles else [],
        obstacle_gain=2e-5,
        obstacle_range=0.15,
        kd_mass=kd_mass,
        obstacle_points=pts,
    )
    return ch, s, law


# ---------------------------------------------------------------------------- closed-form step (issue 12)
@pytest.mark.parametrize("fixed,law_name", [(False, "rotvec"), (True, "rotvec"), (False, "euler123")])
def test_closed_form_step_equals_the_dense_kkt_path(fixed, law_name):
    """Law (III)'s fast step (block-diagonal ℳ, Schur complement with one Cholesky factor, quaternion spring
    moments, scalar task error) gives the torques of the generic path (dense KKT LU solves of (*),
    ``TensorChain.known_force``) to 1e-9 relative, on the states of a closed-loop run that passes obstacles,
    with points entering a sphere's core."""
    ch, s, law = obstacle_run(law_name, fixed, kd_v=0.0, kd_w=0.0, kd_mass=15.0)
    t, dt, worst, dmin = 0.0, 1e-3, 0.0, np.inf
    for _ in range(60):
        tau = law(t, s)
        info = (law.info.V, law.info.Vdot_cl, law.info.nu_r.copy())
        ref = PortLaw.__call__(law, t, s)
        worst = max(worst, np.abs(tau - ref).max() / np.abs(ref).max())
        assert abs(info[0] - law.info.V) <= 1e-9 * law.info.V
        assert np.abs(info[2] - law.info.nu_r).max() <= 1e-9 * np.abs(law.info.nu_r).max()
        dmin = min(dmin, law.clearance)
        s, _ = ch.step(s, dt, tau, t=t)
        t += dt
    assert worst <= 1e-9
    assert dmin < law.clip  # the quartic core was exercised
    assert np.isfinite(law.info.V) and np.abs(tau).max() < 1e4  # a bounded run, not a diverging one
