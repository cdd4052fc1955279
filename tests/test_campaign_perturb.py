"""sim/perturb.py (model error, noise, delay, saturation, wrench), checked against independent computations
on the YuMi plant, and the [perturbation] config table that scenarios/_common.py reads into its typed
Perturbation."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import tomllib

from cmstack.models.errors import ConfigError
from cmstack.models.robot import Robot
from cmstack.scenarios._common import (
    PERTURBATION_DEFAULTS as DEFAULTS,
)
from cmstack.scenarios._common import (
    apply_perturbation,
    resolve_config,
    run_scenario,
)
from cmstack.sim.perturb import Perturbation, PerturbedPlant, perturb_plant
from cmstack.sim.plant import MujocoPlant

URDF, MJCF = "urdf/yumi.urdf", "mjcf/yumi.xml"


@pytest.fixture(scope="module")
def names():
    return Robot(URDF).joint_names


def plant_of(names, seed=0, **kw):
    return apply_perturbation(
        MujocoPlant(MJCF, names, sim_dt=0.005), {"seed": seed, "perturbation": {**DEFAULTS, **kw}}
    )


def q0(names):
    return np.linspace(-0.6, 0.7, len(names))


def test_defaults_off_return_the_plant_itself(names):
    p = MujocoPlant(MJCF, names, sim_dt=0.005)
    cfg = resolve_config("yumi_dual_arm")
    assert cfg["perturbation"] == DEFAULTS
    assert apply_perturbation(p, cfg) is p


def test_the_library_takes_a_typed_perturbation_and_the_config_table_maps_onto_it(names):
    """perturb_plant(plant, Perturbation(...), seed) is what apply_perturbation(plant, cfg) does with the
    config's table: the same draws from the same seed; an unknown key of the table is refused by name."""
    p = MujocoPlant(MJCF, names, sim_dt=0.005)
    assert perturb_plant(p, Perturbation(), seed=3) is p
    typed = perturb_plant(
        MujocoPlant(MJCF, names, sim_dt=0.005), Perturbation(mass_rel=0.2, noise_q=1e-3), seed=3
    )
    from_cfg = plant_of(names, seed=3, mass_rel=0.2, noise_q=1e-3)
    assert isinstance(typed, PerturbedPlant) and typed.drawn == from_cfg.drawn
    for plant in (typed, from_cfg):
        plant.reset(q0(names))
    assert np.array_equal(typed.state()[0], from_cfg.state()[0])
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['mass_rell'\] in \[perturbation\]"):
        apply_perturbation(p, {"seed": 0, "perturbation": {**DEFAULTS, "mass_rell": 0.2}})


def test_measurement_noise_is_one_implementation_with_two_streams(names):
    """The plant's own noise (MujocoPlant noise_q/noise_v, stream default_rng(seed)) and a perturbation's
    (stream default_rng([seed, 2])) are the same MeasurementNoise: each equals the true state plus the
    normal draws of its stream, q's before v's, drawn here independently."""
    sq, sv, seed = 1e-3, 2e-2, 7
    plant = MujocoPlant(MJCF, names, sim_dt=0.005, noise_q=sq, noise_v=sv, seed=seed)
    plant.reset(q0(names), np.linspace(0.1, 0.3, len(names)))
    qt, vt = plant.state(noisy=False)
    rng = np.random.default_rng(seed)
    eq, ev = rng.normal(scale=sq, size=len(names)), rng.normal(scale=sv, size=len(names))
    q, v = plant.state()
    assert np.array_equal(q, qt + eq) and np.array_equal(v, vt + ev)

    per = plant_of(names, seed=seed, noise_q=sq)  # noise_v off: no draw for v
    per.reset(q0(names))
    qt, vt = per.state(noisy=False)
    q, v = per.state()
    assert np.array_equal(q, qt + np.random.default_rng([seed, 2]).normal(scale=sq, size=len(names)))
    assert np.array_equal(v, vt)
    with pytest.raises(ConfigError, match="noise_v must be a finite standard deviation >= 0, got -1"):
        MujocoPlant(MJCF, names, sim_dt=0.005, noise_v=-1.0)
    # one route at a time: noise on a plant that has its own would add up silently; refused, naming both
    with pytest.raises(
        ConfigError,
        match=r"measurement noise given twice: the plant's own \(noise_q=0.001, "
        r"noise_v=0.02\) and perturbation.noise_q/noise_v \(0.0001, 0\)",
    ):
        perturb_plant(plant, Perturbation(noise_q=1e-4), seed=1)
    assert perturb_plant(plant, Perturbation(mass_rel=0.1), seed=1).state()[0].shape == (len(names),)


def per_body_gravity(model, data):
    """τ_b = −J_com,bᵀ m_b g for each body (MuJoCo's Jacobian of the body's CoM): the gravity part of the
    bias force is their sum, linear in the masses."""
    out = {}
    jacp = np.zeros((3, model.nv))
    for b in range(1, model.nbody):
        mujoco.mj_jacBodyCom(model, data, jacp, None, b)
        out[b] = -model.body_mass[b] * jacp.T @ model.opt.gravity
    return out


def test_mass_scaling_changes_gravity_torques_body_by_body(names):
    """Perturbed qfrc_bias(q, v = 0) = Σ_b f_b τ_b with the drawn factors f_b ∈ [0.8, 1.2] and the nominal
    per-body terms τ_b (an independent sum over bodies vs MuJoCo's recursive bias force)."""
    nom = MujocoPlant(MJCF, names, sim_dt=0.005)
    nom.reset(q0(names))
    tau_b = per_body_gravity(nom.model, nom.data)
    assert np.allclose(sum(tau_b.values()), nom.data.qfrc_bias, atol=1e-9)  # the decomposition holds

    per = plant_of(names, seed=3, mass_rel=0.2)
    assert isinstance(per, PerturbedPlant)
    per.reset(q0(names))
    byname = {mujoco.mj_id2name(per.model, mujoco.mjtObj.mjOBJ_BODY, b): b for b in range(per.model.nbody)}
    f = {byname[n]: d["mass"] for n, d in per.drawn.items()}
    assert len(f) >= 14 and all(0.8 <= x <= 1.2 for x in f.values())
    assert np.std(list(f.values())) > 0.05  # independent draws, not one factor
    expect = sum(f.get(b, 1.0) * t for b, t in tau_b.items())
    assert np.allclose(per.data.qfrc_bias, expect, atol=1e-9)
    assert not np.allclose(per.data.qfrc_bias, nom.data.qfrc_bias, atol=1e-3)
    # inertia scaled by the same factor; seeded: the same seed draws the same plant, another seed another
    for b, x in f.items():
        assert np.allclose(per.model.body_inertia[b], x * nom.model.body_inertia[b])
    assert plant_of(names, seed=3, mass_rel=0.2).drawn == per.drawn
    assert plant_of(names, seed=4, mass_rel=0.2).drawn != per.drawn


def test_com_shift_moves_the_body_com_in_its_frame(names):
    nom = MujocoPlant(MJCF, names, sim_dt=0.005)
    nom.reset(q0(names))
    per = plant_of(names, seed=1, com_shift_m=0.01, bodies=["yumi_link_7_l"])
    per.reset(q0(names))
    b = per.body_id("yumi_link_7_l")
    c = np.array(per.drawn["yumi_link_7_l"]["com_shift"])
    assert list(per.drawn) == ["yumi_link_7_l"] and np.all(np.abs(c) <= 0.01) and np.linalg.norm(c) > 1e-4
    R = nom.data.xmat[b].reshape(3, 3)
    assert np.allclose(per.data.xipos[b] - nom.data.xipos[b], R @ c, atol=1e-12)


def test_noise_statistics_and_seed(names):
    per = plant_of(names, seed=5, noise_q=1e-3, noise_v=1e-2)
    per.reset(q0(names))
    q_true, v_true = per.inner.state()
    dq, dv = [], []
    for _ in range(400):
        q, v = per.state()
        dq.append(q - q_true)
        dv.append(v - v_true)
    dq, dv = np.array(dq), np.array(dv)
    assert abs(dq.std() / 1e-3 - 1) < 0.05 and abs(dv.std() / 1e-2 - 1) < 0.05  # 5600 samples: ~1 % sd
    assert abs(dq.mean()) < 1e-4
    assert np.array_equal(per.state(noisy=False)[0], q_true)
    again = plant_of(names, seed=5, noise_q=1e-3, noise_v=1e-2)
    again.reset(q0(names))
    assert np.allclose(again.state()[0] - q_true, dq[0])


def test_delay_applies_the_command_of_d_steps_before(names):
    per = plant_of(names, delay_steps=2)
    per.reset(q0(names))
    taus = [np.full(14, float(k + 1)) for k in range(6)]
    applied = []
    for tau in taus:
        per.set_torque(tau)
        applied.append(per.data.ctrl[0])
    assert applied == [1.0, 1.0, 1.0, 2.0, 3.0, 4.0]  # τ_{k−2} from k = 2 on, τ_0 held before


def test_saturation_at_a_fraction_of_the_motor_limits(names):
    per = plant_of(names, torque_limit_fraction=0.5)  # yumi.xml: ctrlrange ±300 N·m, gear 1
    per.reset(q0(names))
    tau = np.linspace(-400, 400, 14)
    per.set_torque(tau)
    assert np.allclose(per.data.ctrl[per.map.act], np.clip(tau, -150, 150))
    assert per.clipped == 1
    per.set_torque(np.full(14, 10.0))
    assert per.clipped == 1


def test_wrench_enters_as_jacobian_transpose_in_its_window(names):
    f, m = np.array([3.0, -2.0, 5.0]), np.array([0.1, 0.2, -0.3])
    per = plant_of(
        names,
        wrench_body="yumi_link_5_l",
        wrench_force=f.tolist(),
        wrench_moment=m.tolist(),
        wrench_t0=0.01,
        wrench_t1=0.02,
    )
    per.reset(q0(names))
    b = per.body_id("yumi_link_5_l")
    per.step(2)  # t = 0, 0.005: before the window
    assert np.allclose(per.data.qfrc_applied, 0.0)
    per.step(1)  # t = 0.010: inside
    jp, jr = np.zeros((3, per.model.nv)), np.zeros((3, per.model.nv))
    # the wrench was applied at the state of t = 0.010; rebuild that Jacobian from the logged state
    d2 = mujoco.MjData(per.model)
    nom = MujocoPlant(MJCF, names, sim_dt=0.005)
    nom.reset(q0(names))
    nom.step(2)
    d2.qpos[:], d2.qvel[:] = nom.data.qpos, nom.data.qvel
    mujoco.mj_forward(per.model, d2)
    mujoco.mj_jacBodyCom(per.model, d2, jp, jr, b)
    assert np.allclose(per.data.qfrc_applied, jp.T @ f + jr.T @ m, atol=1e-10)
    per.step(2)  # t = 0.015 inside, 0.020 outside
    assert np.allclose(per.data.qfrc_applied, 0.0)


@pytest.mark.parametrize(
    "key, value", [("mass_rel", 1.5), ("delay_steps", -1), ("noise_q", -1e-3), ("wrench_force", [1.0, 2.0])]
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=f"perturbation.{key}"):
        Perturbation(**{**DEFAULTS, key: value})


def test_unknown_body_and_scenario_without_support(names, tmp_path):
    with pytest.raises(Exception, match="yumi_link_99"):
        plant_of(names, wrench_body="yumi_link_99", wrench_t1=1.0)
    from cmstack.scenarios import slider_crank

    with pytest.raises(ConfigError, match="slider_crank.*does not apply"):
        run_scenario(
            "slider_crank", slider_crank.run, overrides={"perturbation.noise_q": 1e-4}, out=tmp_path / "s"
        )
    assert (tmp_path / "s" / "error.txt").is_file() and not (
        tmp_path / "s" / "log.npz"
    ).exists()  # refused before it ran


def test_yumi_run_records_the_perturbation(tmp_path):
    over = {
        "duration": 0.1,
        "perturbation.mass_rel": 0.2,
        "perturbation.noise_q": 1e-4,
        "perturbation.delay_steps": 1,
        "perturbation.torque_limit_fraction": 0.9,
    }
    from cmstack.scenarios import yumi_dual_arm

    m, out = run_scenario("yumi_dual_arm", yumi_dual_arm.run, overrides=over, out=tmp_path)
    cfg = tomllib.loads((out / "config.toml").read_text())
    assert cfg["perturbation"]["mass_rel"] == 0.2 and cfg["perturbation"]["delay_steps"] == 1
    assert 0.8 <= m["perturbation_mass_factor_min"] <= m["perturbation_mass_factor_max"] <= 1.2
    assert m["qp_failures"] == 0
