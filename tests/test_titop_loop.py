"""Closed chain through the TITOP loop-closure block L^A_C ([Alazard] §3.4, Fig. 13-14): a planar four-bar
cut at the coupler–rocker pin.  As the stiffness K grows the spring-closed tree tends to the rigid
constraint, computed independently with Pinocchio (KKT on M, h, the tip Jacobians and their drift)."""

import numpy as np
import pinocchio as pin

from cmstack.models.titop import CompliantLoop, FixedBase, Revolute, RigidBody, System

G = np.array([0.0, -9.81, 0.0])
D_GROUND, A, B, C = 1.0, 0.5, 1.2, 0.8  # ground link, crank, coupler, rocker lengths (m)
MASS = {"crank": 1.0, "coupler": 2.0, "rocker": 1.5}
LEN = {"crank": A, "coupler": B, "rocker": C}


def rod_inertia(m, l):
    return np.diag([1e-4, m * l * l / 12, m * l * l / 12])


def titop_fourbar(k, d):
    """Blocks: ground (ports O1, O2), crank at O1, coupler at the crank's tip, rocker at O2; the loop is
    cut at the pin between the coupler's tip and the rocker's tip (translational K, D only)."""
    s = System(FixedBase("ground", {"O1": [0, 0, 0], "O2": [D_GROUND, 0, 0]}), G)
    for name, parent, port in (
        ("crank", "ground", "O1"),
        ("coupler", "crank", "tip"),
        ("rocker", "ground", "O2"),
    ):
        l, m = LEN[name], MASS[name]
        s.add(
            Revolute(RigidBody(name, m, [l / 2, 0, 0], rod_inertia(m, l), {"tip": [l, 0, 0]}), [0, 0, 1]),
            parent,
            port,
        )
    K = np.diag([k, k, k, 0, 0, 0])
    Dm = np.diag([d, d, d, 0, 0, 0])
    s.add_loop(CompliantLoop("coupler", "tip", "rocker", "tip", K, Dm))
    return s


def pinocchio_fourbar():
    model = pin.Model()
    model.gravity.linear = G
    ids = {}
    for name, parent, p in (
        ("crank", 0, [0, 0, 0]),
        ("coupler", "crank", [A, 0, 0]),
        ("rocker", 0, [D_GROUND, 0, 0]),
    ):
        pid = parent if parent == 0 else ids[parent]
        j = model.addJoint(pid, pin.JointModelRZ(), pin.SE3(np.eye(3), np.array(p, float)), name)
        l, m = LEN[name], MASS[name]
        model.appendBodyToJoint(
            j, pin.Inertia(m, np.array([l / 2, 0, 0]), rod_inertia(m, l)), pin.SE3.Identity()
        )
        ids[name] = j
    for name in ("coupler", "rocker"):
        model.addFrame(
            pin.Frame(
                f"{name}_tip",
                ids[name],
                pin.SE3(np.eye(3), np.array([LEN[name], 0, 0])),
                pin.FrameType.OP_FRAME,
            )
        )
    return model


def rigid_fd(model, data, alpha=20.0):
    """KKT of the rigid pin (x, y rows): M a + h = Jᵀλ, J a = −J̇v − 2α Jv − α² φ (Baumgarte)."""
    f1, f2 = model.getFrameId("coupler_tip"), model.getFrameId("rocker_tip")
    LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED

    def fd(q, v):
        pin.computeAllTerms(model, data, q, v)
        pin.computeJointJacobiansTimeVariation(model, data, q, v)
        pin.updateFramePlacements(model, data)
        J = (pin.getFrameJacobian(model, data, f1, LWA) - pin.getFrameJacobian(model, data, f2, LWA))[:2]
        gam = (
            pin.getFrameClassicalAcceleration(model, data, f1, LWA).linear
            - pin.getFrameClassicalAcceleration(model, data, f2, LWA).linear
        )[:2]
        phi = (data.oMf[f1].translation - data.oMf[f2].translation)[:2]
        M, h = data.M, data.nle
        n = model.nv
        K = np.zeros((n + 2, n + 2))
        K[:n, :n], K[:n, n:], K[n:, :n] = M, -J.T, J
        rhs = np.concatenate((-h, -gam - 2 * alpha * J @ v - alpha**2 * phi))
        return np.linalg.solve(K, rhs)[:n]

    return fd


def rk4(fd, q, v, h, n):
    out = [q.copy()]
    for _ in range(n):
        k1q, k1v = v, fd(q, v)
        k2q, k2v = v + 0.5 * h * k1v, fd(q + 0.5 * h * k1q, v + 0.5 * h * k1v)
        k3q, k3v = v + 0.5 * h * k2v, fd(q + 0.5 * h * k2q, v + 0.5 * h * k2v)
        k4q, k4v = v + h * k3v, fd(q + h * k3q, v + h * k3v)
        q = q + h / 6 * (k1q + 2 * k2q + 2 * k3q + k4q)
        v = v + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        out.append(q.copy())
    return np.array(out)


def closed_configuration(theta1):
    """(θ1, θ2, θ3) with the coupler's tip on the rocker's tip (Newton on the two loop equations)."""

    def tips(x):
        t1, t2, t3 = theta1, x[0], x[1]
        p = np.array([A * np.cos(t1) + B * np.cos(t1 + t2), A * np.sin(t1) + B * np.sin(t1 + t2)])
        r = np.array([D_GROUND + C * np.cos(t3), C * np.sin(t3)])
        return p - r

    x = np.array([-0.9, 1.6])
    for _ in range(50):
        f = tips(x)
        Jn = np.column_stack([(tips(x + e) - f) / 1e-7 for e in np.eye(2) * 1e-7])
        x = x - np.linalg.solve(Jn, f)
    assert np.abs(tips(x)).max() < 1e-12
    return np.array([theta1, x[0], x[1]])


def test_loop_closure_block_is_conservative_without_damping():
    """With D = 0, E = kinetic + gravity + ½ δᵀKδ is a first integral of the TITOP forward dynamics."""
    s = titop_fourbar(500.0, 0.0)
    rng = np.random.default_rng(0)
    q, v = closed_configuration(1.0) + rng.normal(size=3) * 0.05, rng.normal(size=3)
    a = s.forward(q, v, np.zeros(3))
    h = 1e-6
    dE = (s.energy(q + h * v, v + h * a) - s.energy(q - h * v, v - h * a)) / (2 * h)
    assert abs(dE) < 1e-6 * abs(s.energy(q, v))
    # and the spring acts: the loop energy is a part of E
    assert s.energy(q, v) != titop_fourbar(0.0, 0.0).energy(q, v)


def test_stiff_loop_closure_tends_to_the_rigid_constraint():
    model = pinocchio_fourbar()
    data = model.createData()
    q0, v0 = closed_configuration(np.deg2rad(60.0)), np.zeros(3)
    # 0.25 s: the linkage falls freely and, at t ≈ 0.3 s, nears a toggle position where a compliant loop
    # and the rigid one can part ways (the error then grows for every K); the window stops before it
    h, T = 2.5e-4, 0.25
    n = int(round(T / h))
    Q_rigid = rk4(rigid_fd(model, data), q0, v0, h, n)
    assert np.abs(Q_rigid[-1] - q0).max() > 0.05  # the reference moves
    errs, gaps = [], []
    for k in (1e3, 1e4, 1e5, 1e6):
        s = titop_fourbar(k, 2 * 0.5 * np.sqrt(k * MASS["coupler"]))
        Q = rk4(lambda q, v: s.forward(q, v, np.zeros(3)), q0, v0, h, n)
        errs.append(np.abs(Q - Q_rigid).max())
        m_l = s.port_motion(Q[-1], np.zeros(3), "coupler", "tip")
        m_r = s.port_motion(Q[-1], np.zeros(3), "rocker", "tip")
        gaps.append(np.linalg.norm(m_l.world_point() - m_r.world_point()))
    errs, gaps = np.array(errs), np.array(gaps)
    # monotone convergence, roughly like 1/K (a spring of stiffness K deflects by load/K)
    assert np.all(np.diff(errs) < 0), errs
    assert np.all(errs[:-1] / errs[1:] > 5.0), errs
    assert errs[-1] < 1e-4, errs
    assert np.all(np.diff(gaps) < 0) and gaps[-1] < 1e-5, gaps
