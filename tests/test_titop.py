"""TITOP blocks of [Alazard]: each block alone, then random trees against Pinocchio's ABA and RNEA."""

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ConfigError, FrameNotFoundError, StateError
from cmstack.models.titop import (
    FixedBase,
    FloatingBase,
    Motion,
    Prismatic,
    Revolute,
    RigidBody,
    System,
    Weld,
    change_frame,
    coriolis_operator,
    rodrigues,
    tau,
    transport,
)


def rand_rot(rng):
    return pin.exp3(rng.normal(size=3) * 1.5)


def rand_inertia(rng):
    A = rng.normal(size=(3, 3))
    return A @ A.T + 0.1 * np.eye(3)


def rand_motion(rng, acc=True):
    return Motion(rng.normal(size=6), rng.normal(size=3), rand_rot(rng), rng.normal(size=6) if acc else None)


def rand_body(rng, name, ports=None):
    return RigidBody(name, rng.uniform(0.5, 3.0), rng.normal(size=3) * 0.3, rand_inertia(rng), ports)


# ------------------------------------------------------------------------------------- blocks alone
def test_dynamic_model_matches_pinocchio_inertia():
    rng = np.random.default_rng(0)
    b = rand_body(rng, "b")
    I6 = pin.Inertia(b.mass, b.com, b.inertia).matrix()  # Pinocchio's [linear; angular] at the origin
    assert np.allclose(b.D, I6, atol=1e-12)
    assert np.allclose(b.D, b.D.T) and np.linalg.eigvalsh(b.D).min() > 0
    # C(x') is the dual cross product (Pinocchio's ν ×*)
    tw = rng.normal(size=6)
    assert np.allclose(coriolis_operator(tw) @ (b.D @ tw), pin.Motion(tw).cross(pin.Force(b.D @ tw)).vector)


def test_rigid_body_forward_and_inverse_channels_are_inverse():
    rng = np.random.default_rng(1)
    for _ in range(20):
        b = rand_body(rng, "b")
        tw, g = rng.normal(size=6), rng.normal(size=3) * 9.81
        W = rng.normal(size=6) * 10
        acc = b.forward(W, tw, g)
        assert np.allclose(b.inverse(acc, tw, g), W, atol=1e-10)
        acc2 = rng.normal(size=6)
        assert np.allclose(b.forward(b.inverse(acc2, tw, g), tw, g), acc2, atol=1e-10)


def test_rigid_body_is_newton_euler_at_the_centre_of_mass():
    """(11) at P against the textbook equations at B: m a_B = F + m g, I ω̇ + ω × Iω = T_B."""
    rng = np.random.default_rng(2)
    b = rand_body(rng, "b")
    tw, acc, g = rng.normal(size=6), rng.normal(size=6), rng.normal(size=3)
    W = b.inverse(acc, tw, g)
    v, w = tw[:3], tw[3:]
    vd, wd = acc[:3], acc[3:]
    c = b.com
    a_P = vd + np.cross(w, v)  # inertial acceleration of P
    a_B = a_P + np.cross(wd, c) + np.cross(w, np.cross(w, c))
    F = b.mass * (a_B - g)
    T_B = b.inertia @ wd + np.cross(w, b.inertia @ w)
    assert np.allclose(W[:3], F, atol=1e-10)
    assert np.allclose(W[3:], T_B + np.cross(c, F), atol=1e-10)  # T_P = T_B + PB × F


def test_point_mass_forward_channel_refuses():
    b = RigidBody("pm", 2.0, (0, -1, 0))
    with pytest.raises(StateError):
        b.forward(np.ones(6), np.zeros(6), np.zeros(3))


def test_motion_transport_composes_and_matches_rigid_kinematics():
    rng = np.random.default_rng(3)
    m = rand_motion(rng)
    CP, QC = rng.normal(size=3), rng.normal(size=3)
    # v_QC(v_CP(m_P)) = v_QP(m_P) with QP = QC + CP
    a = transport(transport(m, CP), QC)
    b = transport(m, QC + CP)
    for x, y in ((a.acc, b.acc), (a.tw, b.tw), (a.pos, b.pos), (a.R, b.R)):
        assert np.allclose(x, y, atol=1e-12)

    # twist transport is the rigid velocity field, and the acceleration transport is its time
    # derivative in the body frame: check by finite differences of a rigidly moving point
    def point_state(t):
        w, wd = m.tw[3:], m.acc[3:]
        return m.tw[:3] + t * m.acc[:3], w + t * wd

    h = 1e-6
    PC = -CP
    vC = lambda t: point_state(t)[0] + np.cross(point_state(t)[1], PC)
    assert np.allclose((vC(h) - vC(-h)) / (2 * h), transport(m, CP).acc[:3], atol=1e-7)
    assert np.allclose(tau(CP) @ m.tw, transport(m, CP).tw)


def test_frame_change_round_trips_and_keeps_world_quantities():
    rng = np.random.default_rng(4)
    m = rand_motion(rng)
    P = rand_rot(rng)
    mb = change_frame(m, P)
    back = change_frame(mb, P.T)
    for x, y in ((m.acc, back.acc), (m.tw, back.tw), (m.pos, back.pos), (m.R, back.R)):
        assert np.allclose(x, y, atol=1e-12)
    # a physical vector and the point IP are the same in the inertial frame whatever the projection
    assert np.allclose(mb.R @ mb.tw[:3], m.R @ m.tw[:3])
    assert np.allclose(mb.world_point(), m.world_point())
    assert np.allclose(mb.R, m.R @ P.T)


def _check_block_channels(block, rng, n=10):
    g = np.array([0.3, -9.81, 0.5])
    for _ in range(n):
        m_in = rand_motion(rng)
        q, qd = rng.normal(size=block.ndof), rng.normal(size=block.ndof)
        W_ports = {k: rng.normal(size=6) for k in block.body.ports}
        u = rng.normal(size=block.ndof) * 5
        qdd, ports_f, Wp_f, mA = block.titop_forward(m_in, W_ports, u, q, qd, g)
        u2, ports_i, Wp_i, mA2 = block.titop_inverse(m_in, W_ports, qdd, q, qd, g)
        assert np.allclose(u2, u, atol=1e-10)  # the two channels are inverse
        assert np.allclose(Wp_f, Wp_i, atol=1e-10)
        for k in ports_f:
            assert np.allclose(ports_f[k].acc, ports_i[k].acc, atol=1e-10)
        # Newton–Euler of the body with every load applied (independent check of (18)/(25)):
        body = block.body
        W_on_A = -_rot6(mA.R.T @ m_in.R) @ Wp_f  # wrench of the parent on A, in R_a, at P0
        # for the prismatic the parent's wrench acts at P0, move it to P
        if block.kind == "prismatic":
            r = -q[0] * block.axis
            W_on_A = np.linalg.solve(tau(r).T, W_on_A)
        total = W_on_A + sum((tau(-body.ports[k]).T @ W for k, W in W_ports.items()), np.zeros(6))
        assert np.allclose(total, body.inverse(mA.acc, mA.tw, mA.R.T @ g), atol=1e-9)
        # the driving torque/force is the projection on S of the parent's wrench (19), (26)
        assert np.allclose(block.S.T @ W_on_A if block.ndof else 0.0, u, atol=1e-9)


def _rot6(P):
    Q = np.zeros((6, 6))
    Q[:3, :3] = Q[3:, 3:] = P
    return Q


def test_revolute_block_channels():
    rng = np.random.default_rng(5)
    blk = Revolute(
        rand_body(rng, "a", {"c1": rng.normal(size=3), "c2": rng.normal(size=3)}),
        rng.normal(size=3),
        rand_rot(rng),
    )
    _check_block_channels(blk, rng)


def test_prismatic_block_channels():
    rng = np.random.default_rng(6)
    blk = Prismatic(rand_body(rng, "a", {"c1": rng.normal(size=3)}), rng.normal(size=3), rand_rot(rng))
    _check_block_channels(blk, rng)


def test_weld_block_is_the_rigid_body_moved():
    rng = np.random.default_rng(7)
    P0 = rand_rot(rng)
    blk = Weld(rand_body(rng, "a", {"c": rng.normal(size=3)}), P0)
    g = np.array([0, -9.81, 0])
    m_in = rand_motion(rng)
    W_c = {"c": rng.normal(size=6)}
    _, ports, W_parent, mA = blk.titop_forward(m_in, W_c, np.zeros(0), np.zeros(0), np.zeros(0), g)
    assert np.allclose(mA.acc, np.concatenate((P0.T @ m_in.acc[:3], P0.T @ m_in.acc[3:])))
    assert np.allclose(mA.R, m_in.R @ P0)
    # (15): W_./A,P + τ_CPᵀ W_./A,C = D(ẋ' − g) + C D x'
    W_on_A = -np.concatenate((P0.T @ W_parent[:3], P0.T @ W_parent[3:]))
    lhs = W_on_A + tau(-blk.body.ports["c"]).T @ W_c["c"]
    assert np.allclose(lhs, blk.body.inverse(mA.acc, mA.tw, mA.R.T @ g))
    assert np.allclose(ports["c"].tw, transport(mA, -blk.body.ports["c"]).tw)


def test_revolute_kinematics_by_finite_differences():
    """(17): the twist and the body-frame acceleration of A at P are the derivatives of its pose."""
    rng = np.random.default_rng(8)
    blk = Revolute(rand_body(rng, "a"), rng.normal(size=3), rand_rot(rng))
    # the parent B moves with constant body twist ν_B and body acceleration α_B; the joint with θ(t)
    nuB, alB = rng.normal(size=6), rng.normal(size=6)
    th0, thd, thdd = 0.3, 0.7, -1.1

    def pose_A(t):
        # B's pose from integrating ν_B + t α_B  (exact for the first two derivatives at t=0)
        nu = nuB * t + 0.5 * alB * t * t
        MB = pin.exp6(pin.Motion(nu))
        th = th0 + thd * t + 0.5 * thdd * t * t
        return MB.rotation @ blk.P0 @ rodrigues(blk.axis, th), MB.translation

    def body_twist_A(t, h=1e-5):
        R1, p1 = pose_A(t - h)
        R2, p2 = pose_A(t + h)
        R, p = pose_A(t)
        w = pin.log3(R1.T @ R2) / (2 * h)
        v = R.T @ (p2 - p1) / (2 * h)
        return np.concatenate((v, w))

    m_in = Motion(nuB.copy(), np.zeros(3), np.eye(3), alB.copy())
    np.zeros(1)
    _, _, _, mA = blk.titop_inverse(m_in, {}, np.array([thdd]), np.array([th0]), np.array([thd]), np.zeros(3))
    assert np.allclose(body_twist_A(0.0), mA.tw, atol=1e-6)
    h = 1e-4
    acc_fd = (body_twist_A(h) - body_twist_A(-h)) / (2 * h)
    assert np.allclose(acc_fd, mA.acc, atol=1e-5)


def test_bad_inputs_are_refused():
    with pytest.raises(ConfigError):
        RigidBody("b", -1.0)
    with pytest.raises(ConfigError):
        RigidBody("b", 1.0, inertia=[[1, 2, 0], [0, 1, 0], [0, 0, 1]])
    with pytest.raises(ConfigError):
        Revolute(RigidBody("b", 1.0), [0, 0, 0])
    sys_ = System(FixedBase(ports={"o": [0, 0, 0]}))
    with pytest.raises(FrameNotFoundError):
        sys_.add(Revolute(RigidBody("b", 1.0), [0, 0, 1]), "ground", "nope")
    with pytest.raises(FrameNotFoundError):
        sys_.add(Revolute(RigidBody("b", 1.0), [0, 0, 1]), "nobody", "o")
    sys_.add(Revolute(RigidBody("b", 1.0, (1, 0, 0)), [0, 0, 1]), "ground", "o")
    with pytest.raises(StateError):
        sys_.forward(np.zeros(2), np.zeros(1), np.zeros(1))


# ------------------------------------------------------------------------------ random trees vs Pinocchio
def random_tree_spec(rng, n, floating):
    """A random tree: for each joint its parent (0 = root), type, axis, placement and body inertia."""
    joints = []
    for k in range(1, n + 1):
        kind = rng.choice(["R", "P"])
        aligned = rng.random() < 0.4
        axis = np.eye(3)[rng.integers(3)] if aligned else rng.normal(size=3)
        joints.append(
            dict(
                parent=int(rng.integers(0, k)),
                kind=kind,
                axis=axis / np.linalg.norm(axis),
                aligned=aligned,
                R=rand_rot(rng),
                p=rng.normal(size=3) * 0.5,
                mass=rng.uniform(0.2, 3.0),
                com=rng.normal(size=3) * 0.3,
                I=rand_inertia(rng) * 0.2,
            )
        )
    root = (
        dict(mass=rng.uniform(1, 5), com=rng.normal(size=3) * 0.2, I=rand_inertia(rng)) if floating else None
    )
    return root, joints


def pinocchio_model(root, joints, gravity):
    model = pin.Model()
    model.gravity.linear = gravity
    ids = [0]
    if root is not None:
        j = model.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "root")
        model.appendBodyToJoint(j, pin.Inertia(root["mass"], root["com"], root["I"]), pin.SE3.Identity())
        ids = [j]
    for k, s in enumerate(joints, start=1):
        if s["aligned"]:
            ax = "XYZ"[int(np.argmax(np.abs(s["axis"])))]
            jm = getattr(pin, f"JointModel{'R' if s['kind'] == 'R' else 'P'}{ax}")()
        else:
            jm = (pin.JointModelRevoluteUnaligned if s["kind"] == "R" else pin.JointModelPrismaticUnaligned)(
                s["axis"]
            )
        j = model.addJoint(ids[s["parent"]], jm, pin.SE3(s["R"], s["p"]), f"j{k}")
        model.appendBodyToJoint(j, pin.Inertia(s["mass"], s["com"], s["I"]), pin.SE3.Identity())
        ids.append(j)
    return model


def titop_system(root, joints, gravity):
    """The same tree from TITOP blocks: each block gets only its own body, axis, P_a0/b and ports."""
    ports = [dict() for _ in range(len(joints) + 1)]
    for k, s in enumerate(joints, start=1):
        ports[s["parent"]][f"j{k}"] = s["p"]
    if root is None:
        sysm = System(FixedBase("root", ports[0]), gravity)
    else:
        sysm = System(
            FloatingBase(RigidBody("root", root["mass"], root["com"], root["I"], ports[0])), gravity
        )
    for k, s in enumerate(joints, start=1):
        body = RigidBody(f"j{k}", s["mass"], s["com"], s["I"], ports[k])
        blk = (Revolute if s["kind"] == "R" else Prismatic)(body, s["axis"], s["R"])
        sysm.add(blk, "root" if s["parent"] == 0 else f"j{s['parent']}", f"j{k}")
    return sysm


@pytest.mark.parametrize("floating", [False, True])
def test_random_trees_against_pinocchio_aba_and_rnea(floating):
    rng = np.random.default_rng(10 + floating)
    worst_fd = worst_id = 0.0
    for _trial in range(12):
        n = int(rng.integers(1, 8))
        g = rng.normal(size=3) * 5
        root, joints = random_tree_spec(rng, n, floating)
        model = pinocchio_model(root, joints, g)
        data = model.createData()
        sysm = titop_system(root, joints, g)
        assert (sysm.nq, sysm.nv) == (model.nq, model.nv)
        for _ in range(4):
            q = (
                pin.randomConfiguration(model, -np.pi * np.ones(model.nq), np.pi * np.ones(model.nq))
                if not floating
                else np.concatenate(
                    (rng.normal(size=3), pin.Quaternion(rand_rot(rng)).coeffs(), rng.normal(size=n))
                )
            )
            v = rng.normal(size=model.nv) * 2
            tq = rng.normal(size=model.nv) * 5
            a_pin = pin.aba(model, data, q, v, tq)
            a_ti = sysm.forward(q, v, tq)
            worst_fd = max(worst_fd, np.abs(a_ti - a_pin).max() / max(1.0, np.abs(a_pin).max()))
            t_pin = pin.rnea(model, data, q, v, a_pin)
            t_ti = sysm.inverse(q, v, a_pin)
            worst_id = max(worst_id, np.abs(t_ti - t_pin).max() / max(1.0, np.abs(t_pin).max()))
    assert worst_fd <= 1e-9, worst_fd
    assert worst_id <= 1e-9, worst_id


def test_solved_algebraic_loop_satisfies_every_block():
    """The forward sweep's accelerations, fed with the wrenches the children then return, satisfy each
    block's own TITOP equation (22)/(28): the algebraic loop is really solved."""
    rng = np.random.default_rng(20)
    g = np.array([0.0, -9.81, 0.0])
    root, joints = random_tree_spec(rng, 6, True)
    sysm = titop_system(root, joints, g)
    q = np.concatenate((rng.normal(size=3), pin.Quaternion(rand_rot(rng)).coeffs(), rng.normal(size=6)))
    v = rng.normal(size=12)
    tq = rng.normal(size=12)
    a = sysm.forward(q, v, tq)
    kin, ports, acc, loads = sysm._last
    # the child wrenches at the solution, from the inverse sweep of each subtree: run the whole inverse
    # and check the generalized forces reproduce tau, then check block by block
    assert np.allclose(sysm.inverse(q, v, a), tq, atol=1e-9)
    for i in range(1, len(sysm.nodes)):
        nd = sysm.nodes[i]
        blk = nd.block
        pk, pp = sysm.nodes[nd.parent], nd.port
        m_in = ports[nd.parent][pp]
        m_in = Motion(m_in.tw, m_in.pos, m_in.R, tau(-pk.block.body.ports[pp]) @ acc[nd.parent])
        # children's wrenches on this block: W_./A,C = the child's W_{child/A}, from its inverse block
        W_c = {}
        for ch in nd.children:
            cn = sysm.nodes[ch]
            W_c[cn.port] = _subtree_wrench(sysm, ch, q, v, a, acc, ports)
        qdd, _, _, _ = blk.titop_forward(
            m_in, W_c, tq[6 + nd.iq : 6 + nd.iq + 1], q[7 + nd.iq : 8 + nd.iq], v[6 + nd.iq : 7 + nd.iq], g
        )
        assert np.allclose(qdd, a[6 + nd.iq], atol=1e-9)


def _subtree_wrench(sysm, i, q, v, a, acc, ports):
    """W_{A/B,P0} (in the parent's frame) of block i, with the given accelerations, by the inverse blocks."""
    nd = sysm.nodes[i]
    pk = sysm.nodes[nd.parent]
    m_in = ports[nd.parent][nd.port]
    m_in = Motion(m_in.tw, m_in.pos, m_in.R, tau(-pk.block.body.ports[nd.port]) @ acc[nd.parent])
    W_c = {sysm.nodes[ch].port: _subtree_wrench(sysm, ch, q, v, a, acc, ports) for ch in nd.children}
    _, _, W_parent, _ = nd.block.titop_inverse(
        m_in, W_c, a[6 + nd.iq : 7 + nd.iq], q[7 + nd.iq : 8 + nd.iq], v[6 + nd.iq : 7 + nd.iq], sysm.g
    )
    return W_parent


def test_energy_is_conserved_by_the_unforced_tree():
    """dE/dt = vᵀ τ = 0 without forces: the TITOP forward dynamics conserves E to first order (FD in time)."""
    rng = np.random.default_rng(21)
    g = np.array([0.0, 0.0, -9.81])
    root, joints = random_tree_spec(rng, 4, True)
    sysm = titop_system(root, joints, g)
    model = pinocchio_model(root, joints, g)
    q = np.concatenate((rng.normal(size=3), pin.Quaternion(rand_rot(rng)).coeffs(), rng.normal(size=4)))
    v = rng.normal(size=10)
    h = 1e-6
    a = sysm.forward(q, v, np.zeros(10))
    E = lambda qq, vv: sysm.energy(qq, vv)
    dE = (E(pin.integrate(model, q, v * h), v + a * h) - E(pin.integrate(model, q, -v * h), v - a * h)) / (
        2 * h
    )
    assert abs(dE) < 1e-6 * max(1.0, abs(E(q, v)))
    data = model.createData()
    Epin = pin.computeKineticEnergy(model, data, q, v) + pin.computePotentialEnergy(model, data, q)
    assert np.isclose(E(q, v), Epin, atol=1e-10)


@pytest.mark.parametrize("builder", ["humanoid", "manipulator"])
def test_from_pinocchio_sample_models(builder):
    """A whole Pinocchio model turned into TITOP blocks (free-flyer humanoid, 32 DoF; fixed manipulator)."""
    from cmstack.models.titop import from_pinocchio

    model = (
        pin.buildSampleModelHumanoidRandom() if builder == "humanoid" else pin.buildSampleModelManipulator()
    )
    data = model.createData()
    sysm = from_pinocchio(model)
    rng = np.random.default_rng(30)
    for _ in range(5):
        q = (
            pin.randomConfiguration(model, -np.ones(model.nq), np.ones(model.nq))
            if builder != "humanoid"
            else np.concatenate(
                (rng.normal(size=3), pin.Quaternion(rand_rot(rng)).coeffs(), rng.uniform(-2, 2, model.nq - 7))
            )
        )
        v, tq = rng.normal(size=model.nv), rng.normal(size=model.nv)
        a = pin.aba(model, data, q, v, tq)
        assert np.abs(sysm.forward(q, v, tq) - a).max() <= 1e-9 * max(1.0, np.abs(a).max())
        t = pin.rnea(model, data, q, v, a)
        assert np.abs(sysm.inverse(q, v, a) - t).max() <= 1e-9 * max(1.0, np.abs(t).max())


def test_from_pinocchio_refuses_other_joints():
    from cmstack.models.titop import from_pinocchio

    model = pin.Model()
    model.addJoint(0, pin.JointModelSpherical(), pin.SE3.Identity(), "ball")
    with pytest.raises(ConfigError, match="ball"):
        from_pinocchio(model)
