"""[Dastranj] inertia-partitioning model: ζ(δ), E, Γ, h, Q_e against finite differences, Pinocchio's
CRBA/RNEA on the open tree, the MuJoCo plant's closed loop, reconfiguration and bad input."""

from pathlib import Path

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.errors import ConfigError, FrameNotFoundError, StateError
from cmstack.models.partition import PartitionModel, TriangleMap, spatial_inertia

ROOT = Path(__file__).resolve().parents[1]
MJCF = ROOT / "mjcf" / "series_parallel.xml"
URDF = ROOT / "urdf" / "series_parallel.urdf"
RNG = np.random.default_rng(1)


def random_states(n):
    for _ in range(n):
        q = np.array([RNG.uniform(-3, 3), RNG.uniform(-1.2, 1.2), RNG.uniform(0.005, 0.195)])
        qd = RNG.normal(size=3) * np.array([1.0, 1.0, 0.2])
        yield q, qd


@pytest.fixture(scope="module")
def models():
    return PartitionModel(), PartitionModel(with_actuator=True)


# ------------------------------------------------------------------------------------------ ζ(δ)
def test_zeta_derivatives_match_finite_differences():
    tm = TriangleMap()
    for dl in np.linspace(0.01, 0.19, 9):
        e = 1e-6
        fd1 = (tm.zeta(dl + e) - tm.zeta(dl - e)) / (2 * e)
        fd2 = (tm.dzeta(dl + e) - tm.dzeta(dl - e)) / (2 * e)
        assert abs(tm.dzeta(dl) - fd1) < 1e-7 * max(1, abs(fd1))
        assert abs(tm.d2zeta(dl) - fd2) < 1e-6 * max(1, abs(fd2))
        # the triangle's law of cosines: |P2 − P1| = l0 + δ with P1 = (L−L0, 0), P2 = (L, 0) + L0 (cos ζ, sin ζ)
        z = tm.zeta(dl)
        gap = np.hypot(tm.L0 + tm.L0 * np.cos(z), tm.L0 * np.sin(z))
        assert abs(gap - (tm.l0 + dl)) < 1e-12
        assert -np.pi < z < 0


def test_Edot_matches_finite_difference_of_E():
    tm = TriangleMap(with_actuator=True)
    q, qd = np.array([0.1, 0.2, 0.08]), np.array([0.3, -0.2, 0.07])
    e = 1e-6
    fd = (tm.E(q + e * qd) - tm.E(q - e * qd)) / (2 * e) @ qd
    assert np.allclose(tm.Edot_qd(q, qd), fd, atol=1e-8)


def test_plant_loop_closes_at_the_formula_angle():
    """The plant's connect constraint is satisfied exactly at ζ(δ), cylinder angle ζ/2 — and visibly
    violated when ζ is off by a milliradian (so the check can fail)."""
    m = mujoco.MjModel.from_xml_path(str(MJCF))
    d = mujoco.MjData(m)
    tm = TriangleMap()
    for dl in np.linspace(0.0, 0.2, 7):
        for dz in (0.0, 1e-3):
            mujoco.mj_resetData(m, d)
            d.qpos[m.joint("phi").qposadr[0]] = 0.4
            d.qpos[m.joint("theta").qposadr[0]] = 0.3
            d.qpos[m.joint("delta").qposadr[0]] = dl
            for name, val in tm.plant_passive_qpos(dl).items():
                d.qpos[m.joint(name).qposadr[0]] = val + (dz if name == "zeta" else 0.0)
            mujoco.mj_forward(m, d)
            rows = d.efc_type == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)
            viol = np.abs(d.efc_pos[rows]).max()
            if dz == 0.0:
                assert viol < 1e-12
            else:
                assert viol > 1e-4


# ------------------------------------------------------------------------------------------ Γ, h, Q_e
def test_spatial_inertia_matches_pinocchio():
    I = np.array([[0.311, -0.065, 0.098], [-0.065, 22.7, -0.003], [0.098, -0.003, 22.8]])
    c = np.array([0.959, 0.001, -0.077])
    assert np.allclose(spatial_inertia(60.0, c, I), pin.Inertia(60.0, c, I).matrix(), atol=1e-12)


@pytest.mark.parametrize("with_actuator", [False, True])
def test_gamma_h_qe_match_crba_rnea_on_open_tree(models, with_actuator):
    pm = models[with_actuator]
    m = pm.model
    d = m.createData()
    m0 = m.copy()
    m0.gravity = pin.Motion.Zero()
    d0 = m0.createData()
    for q, qd in random_states(10):
        tm = pm.compute(q, qd)
        qh, E = pm.map.xi(q), pm.map.E(q)
        Mh = pin.crba(m, d, qh)
        Mh = np.triu(Mh) + np.triu(Mh, 1).T
        assert np.allclose(tm.Gamma, E.T @ Mh @ E, atol=1e-9, rtol=0)
        C = pin.rnea(m0, d0, qh, E @ qd, np.zeros(m.nv))  # Ĉ(q̂, E q̇) E q̇, no gravity
        h_ref = E.T @ (C + Mh @ pm.map.Edot_qd(q, qd))
        assert np.allclose(tm.h, h_ref, atol=1e-9, rtol=0)
        g = pin.computeGeneralizedGravity(m, d, qh)
        assert np.allclose(tm.Qe, -E.T @ g, atol=1e-9, rtol=0)
        assert np.allclose(sum(tm.Gamma_i.values()), tm.Gamma, atol=1e-12)


def test_h_matches_lagrange_form_by_finite_differences(models):
    """h = Γ̇ q̇ − ½ ∇_q(q̇ᵀ Γ q̇)  (12)–(13), every derivative by central differences of Γ(q)."""
    pm = models[False]
    e = 1e-6
    for q, qd in random_states(5):
        dG = [
            (pm.compute(q + e * np.eye(3)[j], qd).Gamma - pm.compute(q - e * np.eye(3)[j], qd).Gamma)
            / (2 * e)
            for j in range(3)
        ]
        Gdot = sum(dG[j] * qd[j] for j in range(3))
        grad = np.array([qd @ dG[j] @ qd for j in range(3)])
        h_fd = Gdot @ qd - 0.5 * grad
        h = pm.compute(q, qd).h
        assert np.allclose(h, h_fd, atol=1e-5 * max(1.0, np.abs(h_fd).max()))


def test_gamma_spd_over_workspace(models):
    pm = models[False]
    worst = np.inf
    for th in np.linspace(-1.2, 1.2, 9):
        for dl in np.linspace(0.0, 0.2, 9):
            G = pm.compute(np.array([0.7, th, dl]), np.zeros(3)).Gamma
            assert np.allclose(G, G.T, atol=1e-10)
            worst = min(worst, np.linalg.eigvalsh(G).min())
    assert worst > 1.0  # kg·m² / kg: strictly positive with margin


# ------------------------------------------------------------------------------------------ reconfiguration
def test_reconfigure_body3_equals_rebuild(models, tmp_path):
    """Changing link 2's (body 3) mass, CoM and length through the API equals building the model anew
    from a URDF with those values; the other bodies' Γᵢ are untouched."""
    pm = PartitionModel()
    q, qd = np.array([0.2, 0.4, 0.12]), np.array([0.3, -0.5, 0.04])
    before = pm.compute(q, qd)
    pm.set_body("link2", mass=80.0, com=[1.3, 0.001, -0.077], length=2.5)
    after = pm.compute(q, qd)

    text = URDF.read_text()
    old_inertial = '<origin xyz="1.041 0.001 -0.077" rpy="0 0 0"/>\n      <mass value="60"/>'
    assert old_inertial in text
    text = text.replace(
        old_inertial, '<origin xyz="1.3 0.001 -0.077" rpy="0 0 0"/>\n      <mass value="80"/>'
    )
    old_tip = '<child link="F3"/>\n    <origin xyz="2 0 0" rpy="0 0 0"/>'
    assert old_tip in text
    text = text.replace(old_tip, '<child link="F3"/>\n    <origin xyz="2.5 0 0" rpy="0 0 0"/>')
    p = tmp_path / "sp_mod.urdf"
    p.write_text(text)
    ref = PartitionModel(p).compute(q, qd)

    for k in ("Gamma", "h", "Qe"):
        assert np.allclose(getattr(after, k), getattr(ref, k), atol=1e-9), k
    assert not np.allclose(after.Gamma, before.Gamma, atol=1e-3)  # the change took effect
    for b in ("base", "link1"):
        assert np.allclose(after.Gamma_i[b], before.Gamma_i[b], atol=1e-12)  # local update
    assert np.allclose(pm.tip_jacobian(q), PartitionModel(p).tip_jacobian(q), atol=1e-12)
    assert np.allclose(pm.tip_pose(q).translation, PartitionModel(p).tip_pose(q).translation, atol=1e-12)
    assert not np.allclose(pm.tip_jacobian(q), PartitionModel().tip_jacobian(q), atol=1e-3)


# ------------------------------------------------------------------------------------------ plant vs model
def test_model_with_cylinder_and_piston_reproduces_plant_feedforward():
    """Feed-forward only: Q_a = Γ q̈_d + h − Q_e from the model WITH cylinder and piston drives the plant
    along q_d; the model without them does not (the unmodelled 2.5 kg matter)."""
    m = mujoco.MjModel.from_xml_path(str(MJCF))
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(m)
    names = ["phi", "theta", "delta"]
    w, A, c = np.array([1.2, 0.9, 1.5]), np.array([0.3, 0.25, 0.05]), np.array([0.0, 0.4, 0.1])

    def traj(t):
        return c + A * np.sin(w * t), A * w * np.cos(w * t), -A * w * w * np.sin(w * t)

    errs = {}
    for wa in (True, False):
        pm = PartitionModel(with_actuator=wa)
        mujoco.mj_resetData(m, d)
        q, qd, _ = traj(0.0)
        for i, n in enumerate(names):
            d.qpos[m.joint(n).qposadr[0]] = q[i]
            d.qvel[m.joint(n).dofadr[0]] = qd[i]
        dz = pm.map.dzeta(q[2])
        for n, val in pm.map.plant_passive_qpos(q[2]).items():
            d.qpos[m.joint(n).qposadr[0]] = val
        d.qvel[m.joint("zeta").dofadr[0]] = dz * qd[2]
        d.qvel[m.joint("cylinder_hinge").dofadr[0]] = 0.5 * dz * qd[2]
        mujoco.mj_forward(m, d)
        err = 0.0
        for _ in range(int(1.0 / m.opt.timestep)):
            q, qd, qdd = traj(d.time + 0.5 * m.opt.timestep)
            d.ctrl[:] = pm.inverse_dynamics(q, qd, qdd)
            mujoco.mj_step(m, d)
            qp = np.array([d.qpos[m.joint(n).qposadr[0]] for n in names])
            err = max(err, np.abs(qp - traj(d.time)[0]).max())
        errs[wa] = err
    assert errs[True] < 1e-4
    assert errs[False] > 100 * errs[True]


# ------------------------------------------------------------------------------------------ bad input
def test_bad_input_is_a_clear_error(models):
    pm = models[False]
    for dl in (-0.01, 0.25):
        with pytest.raises(StateError, match="outside"):
            pm.compute(np.array([0.0, 0.0, dl]), np.zeros(3))
    with pytest.raises(ConfigError, match="cannot close"):
        TriangleMap(L0=0.35, l0=0.6)  # l0 + δ_max = 0.8 > 2 L0 = 0.7
    with pytest.raises(ConfigError, match="cannot close"):
        PartitionModel(l0=0.55)
    with pytest.raises(StateError):
        pm.compute(np.array([np.nan, 0.0, 0.1]), np.zeros(3))
    with pytest.raises(StateError):
        pm.compute(np.zeros(2), np.zeros(3))
    with pytest.raises(FrameNotFoundError, match="link3"):
        PartitionModel().set_body("link3", mass=1.0)
    with pytest.raises(ConfigError, match="mass"):
        PartitionModel().set_body("link2", mass=-1.0)
    with pytest.raises(ConfigError, match="length"):
        PartitionModel().set_body("link2", length=0.0)


def test_stroke_slack_accepts_end_stop_penetration_only():
    tm = TriangleMap(slack=1e-3)
    assert np.isfinite(tm.zeta(-5e-4)) and np.isfinite(tm.dzeta(0.2005))
    with pytest.raises(StateError, match="slack"):
        tm.zeta(-2e-3)
    with pytest.raises(ConfigError, match="slack"):
        TriangleMap(slack=0.09)  # l0 + δ_max + slack would exceed 2 L0
