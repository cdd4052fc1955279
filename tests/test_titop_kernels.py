"""The compiled TITOP sweeps (models/_titop_kernels.py) against the NumPy block-by-block reference
(``System._kinematics_reference``, ``_forward_reference``, ``_inverse_reference``): the same outputs to
1e-12 relative on the balloon, on random trees with every block type, loop closures and external loads,
and on trees built by ``from_pinocchio``; the reference's errors and fallbacks are kept."""

import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import FrameNotFoundError, StateError
from cmstack.models.titop import (
    CompliantLoop,
    FixedBase,
    FloatingBase,
    Prismatic,
    Revolute,
    RigidBody,
    System,
    Weld,
    from_pinocchio,
)
from cmstack.scenarios._common import default_config
from cmstack.scenarios.balloon import Params, buoyancy_body, titop_system

TOL = 1e-12


def rel(a, b):
    if np.size(b) == 0:
        return 0.0 if np.size(a) == 0 else np.inf
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(1.0, np.abs(b).max())


def rand_rot(rng):
    return pin.exp3(rng.normal(size=3) * 1.5)


def random_system(rng, n, floating, loops=0):
    """A random tree of n Weld/Revolute/Prismatic blocks (random axes, P_a0/b, ports) closed by ``loops``
    random loop-closure blocks; each body has a "load" port for external wrenches."""

    def body(name, nports):
        A = rng.normal(size=(3, 3))
        I = A @ A.T + 0.1 * np.eye(3)
        ports = {f"p{k}": rng.normal(size=3) * 0.5 for k in range(nports)}
        ports["load"] = rng.normal(size=3) * 0.3
        return RigidBody(name, rng.uniform(0.3, 3.0), rng.normal(size=3) * 0.3, I, ports)

    nports = 3
    root = body("b0", nports)
    if floating:
        sysm = System(
            FloatingBase(
                RigidBody("b0", 3.0, rng.normal(size=3) * 0.2, np.diag([1.0, 2.0, 1.5]), root.ports)
            ),
            rng.normal(size=3) * 5,
        )
    else:
        sysm = System(FixedBase("b0", root.ports), rng.normal(size=3) * 5)
    free = [("b0", f"p{k}") for k in range(nports)]
    for k in range(1, n + 1):
        parent, port = free.pop(int(rng.integers(len(free))))
        kind = rng.choice(["W", "R", "P"], p=[0.2, 0.45, 0.35])
        b = body(f"b{k}", nports)
        P0 = rand_rot(rng)
        blk = (
            Weld(b, P0)
            if kind == "W"
            else (Revolute if kind == "R" else Prismatic)(b, rng.normal(size=3), P0)
        )
        sysm.add(blk, parent, port)
        free += [(f"b{k}", f"p{j}") for j in range(nports)]
    for j in range(loops):
        (bl, pl), (br, pr) = [free.pop(int(rng.integers(len(free)))) for _ in range(2)]
        A = rng.normal(size=(6, 6))
        sysm.add_loop(
            CompliantLoop(bl, pl, br, pr, A @ A.T * 10, np.diag(rng.uniform(0, 2, 6)), name=f"L{j}")
        )
    return sysm


def random_state(rng, sysm):
    nj = sysm.nj
    if sysm.floating:
        quat = rng.normal(size=4)
        q = np.concatenate((rng.normal(size=3), quat / np.linalg.norm(quat), rng.uniform(-2, 2, nj)))
    else:
        q = rng.uniform(-2, 2, nj)
    return q, rng.normal(size=sysm.nv) * 2, rng.normal(size=sysm.nv) * 5


def random_ext(rng, sysm, k=2):
    names = list(sysm.index)
    return {(names[int(rng.integers(len(names)))], "load"): rng.normal(size=6) * 3 for _ in range(k)}


def assert_same_kinematics(sysm, q, v):
    kin, ports = sysm.kinematics(q, v)
    kin0, ports0 = sysm._kinematics_reference(q, v)
    for (P, m, S, c, r), (P0, m0, S0, c0, r0) in zip(kin, kin0):
        assert (P is None) == (P0 is None) and (S is None) == (S0 is None) and (r is None) == (r0 is None)
        for x, y in ((P, P0), (S, S0), (r, r0), (c, c0), (m.tw, m0.tw), (m.pos, m0.pos), (m.R, m0.R)):
            if y is not None:
                assert rel(x, y) <= TOL
    for d, d0 in zip(ports, ports0):
        assert d.keys() == d0.keys()
        for k in d:
            for x, y in ((d[k].tw, d0[k].tw), (d[k].pos, d0[k].pos), (d[k].R, d0[k].R)):
                assert rel(x, y) <= TOL


def loop_angle(sysm, q, v):
    """The largest relative rotation angle |log(R_lᵀ R_r)| over the loop closures (0 without loops)."""
    _, ports = sysm._kinematics_reference(q, v)
    ang = 0.0
    for L in sysm.loops:
        Rrel = ports[sysm.index[L.left]][L.port_l].R.T @ ports[sysm.index[L.right]][L.port_r].R
        ang = max(ang, np.arccos(np.clip((np.trace(Rrel) - 1) / 2, -1, 1)))
    return ang


@pytest.mark.parametrize("floating", [False, True])
def test_compiled_sweeps_equal_the_reference_on_random_trees(floating):
    """States whose loop closures are twisted by more than 2 rad are redrawn: near π the log map of L^A_C
    (arccos of the trace, then θ/sin θ) loses digits in both paths alike (≈ ε/sin²θ: at 179.8° the two
    round-offs differ by 1e-9 relative), so there they would compare two round-offs, not two formulas."""
    rng = np.random.default_rng(40 + floating)
    for trial in range(12):
        sysm = random_system(rng, int(rng.integers(1, 9)), floating, loops=int(rng.integers(0, 3)))
        for _ in range(3):
            for _ in range(50):
                q, v, u = random_state(rng, sysm)
                if loop_angle(sysm, q, v) < 2.0:
                    break
            else:
                continue
            ext = random_ext(rng, sysm) if trial % 2 else None
            a = sysm.forward(q, v, u, ext)
            assert rel(a, sysm._forward_reference(q, v, u, ext)) <= TOL
            assert rel(sysm.inverse(q, v, a, ext), sysm._inverse_reference(q, v, a, ext)) <= TOL
            assert rel(sysm.inverse(q, v, a, ext), u) <= 1e-9  # the two sweeps are inverse
            assert_same_kinematics(sysm, q, v)
        assert sysm._compiled() is not None  # the compiled path is taken


def test_compiled_sweeps_equal_the_reference_on_the_balloon():
    P = Params(default_config("balloon"))
    sysm = titop_system(P)
    rng = np.random.default_rng(41)
    for _ in range(20):
        q, v, u = random_state(rng, sysm)
        ext = {("balloon", "B"): buoyancy_body(P, q)}
        assert rel(sysm.forward(q, v, u, ext), sysm._forward_reference(q, v, u, ext)) <= TOL
        assert rel(sysm.inverse(q, v, u, ext), sysm._inverse_reference(q, v, u, ext)) <= TOL
    assert_same_kinematics(sysm, q, v)
    assert np.isclose(sysm.energy(q, v), _energy_reference(sysm, q, v), rtol=1e-12)


def _energy_reference(sysm, q, v):
    sysm.fast = False
    try:
        return sysm.energy(q, v)
    finally:
        sysm.fast = True


@pytest.mark.parametrize("builder", ["humanoid", "manipulator"])
def test_compiled_sweeps_equal_the_reference_from_pinocchio(builder):
    model = (
        pin.buildSampleModelHumanoidRandom() if builder == "humanoid" else pin.buildSampleModelManipulator()
    )
    sysm = from_pinocchio(model)
    rng = np.random.default_rng(42)
    for _ in range(3):
        q, v, u = random_state(rng, sysm)
        assert rel(sysm.forward(q, v, u), sysm._forward_reference(q, v, u)) <= TOL
        assert rel(sysm.inverse(q, v, u), sysm._inverse_reference(q, v, u)) <= TOL
    assert_same_kinematics(sysm, q, v)


def test_last_call_signals_and_layout_rebuilt_after_add():
    rng = np.random.default_rng(43)
    sysm = random_system(rng, 3, True, loops=1)
    q, v, u = random_state(rng, sysm)
    a = sysm.forward(q, v, u)
    kin, ports, acc, loads = sysm._last
    assert np.allclose(acc[0], a[:6], atol=1e-12) and len(acc) == len(sysm.nodes)
    nodes_before = len(sysm._layout.kind)
    sysm.add(Revolute(RigidBody("extra", 1.0, (0.1, 0, 0), np.eye(3) * 0.1), (0, 0, 1)), "b1", "p0")
    q2 = np.concatenate((q, [0.3]))
    v2, u2 = np.concatenate((v, [0.1])), np.concatenate((u, [0.2]))
    assert rel(sysm.forward(q2, v2, u2), sysm._forward_reference(q2, v2, u2)) <= TOL
    assert len(sysm._layout.kind) == nodes_before + 1


def test_errors_and_fallbacks_are_the_reference_s():
    rng = np.random.default_rng(44)
    sysm = random_system(rng, 3, True)
    q, v, u = random_state(rng, sysm)
    with pytest.raises(StateError):
        sysm.forward(q, v, u[:-1])
    with pytest.raises(StateError):
        sysm.forward(q[:-1], v, u)
    with pytest.raises(StateError):
        sysm.inverse(q, v[:-1], u)
    with pytest.raises(FrameNotFoundError):
        sysm.forward(q, v, u, ext={("nobody", "load"): np.zeros(6)})
    with pytest.raises(FrameNotFoundError):
        sysm.forward(q, v, u, ext={("b1", "noport"): np.zeros(6)})
    # a revolute point mass on its own axis: Sᵀ I S = 0, the reference's LinAlgError
    s = System(FixedBase("g", {"o": [0, 0, 0]}), (0, 0, -9.81))
    s.add(Revolute(RigidBody("pm", 1.0, (0, 0, 0.5), None), (0, 0, 1)), "g", "o")
    with pytest.raises(np.linalg.LinAlgError):
        s.forward([0.1], [0.0], [0.0])

    # a block type the kernels do not know (its own joint maths) takes the NumPy path
    class OffsetRevolute(Revolute):
        def joint(self, m_in, q, qd):
            return Revolute.joint(self, m_in, np.asarray(q) + 0.5, qd)

    t = System(FixedBase("g", {"o": [0, 0, 0]}), (0, 0, -9.81))
    t.add(OffsetRevolute(RigidBody("l", 1.0, (0.5, 0, 0), np.eye(3) * 0.01), (0, 0, 1)), "g", "o")
    assert np.allclose(t.forward([0.2], [0.3], [0.1]), t._forward_reference([0.2], [0.3], [0.1]), atol=1e-14)
    assert t._layout is False


class NamedRevolute(Revolute):
    """Adds a convenience, not maths: the kernels still compute it."""

    def label(self):
        return f"revolute {self.name}"


class NamedPrismatic(Prismatic):
    def label(self):
        return f"prismatic {self.name}"


class NamedWeld(Weld):
    def label(self):
        return f"weld {self.name}"


class NamedBody(RigidBody):
    def label(self):
        return f"body {self.name}"


class NamedLoop(CompliantLoop):
    def label(self):
        return f"loop {self.name}"


class StiffLoop(CompliantLoop):
    """Redefines the loop's wrenches (twice the impedance's): must not be computed as a CompliantLoop."""

    def wrenches(self, m_l, m_r):
        W_l, W_r = CompliantLoop.wrenches(self, m_l, m_r)
        return 2.0 * W_l, 2.0 * W_r


class WeightlessBody(RigidBody):
    """Redefines the body's model (no gravity on it): must not be computed as a RigidBody."""

    def bias(self, tw, g_b):
        return RigidBody.bias(self, tw, np.zeros(3))


_SUBCLASS = {
    Revolute: NamedRevolute,
    Prismatic: NamedPrismatic,
    Weld: NamedWeld,
    RigidBody: NamedBody,
    CompliantLoop: NamedLoop,
}


@pytest.mark.parametrize("floating", [False, True])
def test_subclasses_without_own_maths_take_the_compiled_sweeps(floating):
    """Dispatch by what a block, body or loop does (``kernel_kind()``), not by its exact type (issue 22): the
    same tree with every object a subclass that adds no maths is compiled and gives the built-ins' outputs
    bit for bit; a subclass that redefines its maths (a loop's wrenches, a body's model) runs its own maths,
    and the answer shows it (twice the impedance equals a loop built with 2K, 2D)."""

    def build(seed, swap=None):
        sysm = random_system(np.random.default_rng(seed), 6, floating, loops=2)
        if swap:
            for nd in sysm.nodes:
                for x in (nd.block, nd.block.body):
                    if type(x) in _SUBCLASS:
                        x.__class__ = _SUBCLASS[type(x)]
            for L in sysm.loops:
                L.__class__ = swap
        return sysm

    base, named = build(7), build(7, swap=NamedLoop)
    assert all(type(nd.block) is not Revolute for nd in named.nodes[1:])  # the swap took
    q, v, u = random_state(np.random.default_rng(8), base)
    ext = random_ext(np.random.default_rng(9), base)
    assert named._compiled() is not None
    assert np.array_equal(named.forward(q, v, u, ext=ext), base.forward(q, v, u, ext=ext))
    assert np.array_equal(named.inverse(q, v, u, ext=ext), base.inverse(q, v, u, ext=ext))
    stiff, doubled = build(7, swap=StiffLoop), build(7)
    for L in doubled.loops:
        L.K, L.D = 2.0 * L.K, 2.0 * L.D
    assert stiff._compiled() is None and doubled._compiled() is not None
    a_stiff, a_doubled = stiff.forward(q, v, u, ext=ext), doubled.forward(q, v, u, ext=ext)
    assert rel(a_stiff, a_doubled) <= 1e-10 and rel(a_stiff, base.forward(q, v, u, ext=ext)) > 1e-3
    light = build(7)
    light.nodes[1].block.body.__class__ = WeightlessBody
    assert light._compiled() is None
    a_light = light.forward(q, v, u, ext=ext)
    assert rel(a_light, light._forward_reference(q, v, u, ext=ext)) <= TOL
    assert rel(a_light, base.forward(q, v, u, ext=ext)) > 1e-6


def test_balloon_rk4_helpers_equal_their_numpy_forms():
    """The balloon's per-evaluation helpers (Python floats) against the NumPy forms they replaced, with
    the rotation from Pinocchio's quaternion (an independent formula)."""
    from cmstack.scenarios.balloon import _unit, joint_forces, qdot

    P = Params(default_config("balloon"))
    rng = np.random.default_rng(45)
    for _ in range(20):
        q = np.concatenate(
            (rng.normal(size=3), rng.normal(size=4) * rng.uniform(0.5, 2.0), rng.normal(size=3))
        )
        v = rng.normal(size=9)
        x, y, z, w = q[3:7]
        R = pin.Quaternion(w, x, y, z).normalized().toRotationMatrix()
        wx, wy, wz = v[3:6]
        dq = np.concatenate(
            (
                R @ v[:3],
                0.5
                * np.array(
                    [
                        w * wx + y * wz - z * wy,
                        w * wy + z * wx - x * wz,
                        w * wz + x * wy - y * wx,
                        -(x * wx + y * wy + z * wz),
                    ]
                ),
                v[6:],
            )
        )
        assert rel(qdot(q, v), dq) <= TOL
        assert rel(_unit(q)[3:7], q[3:7] / np.linalg.norm(q[3:7])) <= TOL and np.array_equal(
            _unit(q)[:3], q[:3]
        )
        assert rel(buoyancy_body(P, q), np.concatenate((R.T @ (-P.mG * P.g), np.zeros(3)))) <= TOL
        assert rel(joint_forces(P, q, v), [-P.k * q[7] - P.ds * v[6], -P.dp1 * v[7], -P.dp2 * v[8]]) <= TOL
