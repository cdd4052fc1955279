"""Every scenario whose MuJoCo plant closes a loop reports loop_residual_max_m and plant_vs_rigid_qacc_rel with
closed_chain's meaning (issue 23 item 3): the rigid q̈ of scenarios/_plant_loops.py (the plant's own bodies, its
loop equalities made rigid) is the rigid model's where the plant is the model (five-bar, Delta: against
ProjectionPlant, i.e. closed_chain's check) and series_parallel's RigidLoopCheck; the YuMi with the bar, the
slider-crank and the series-parallel arm report both keys, computed as documented; the YuMi's virtual plant (no
loop in MuJoCo) does not."""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from cmstack.models.loops import ClosureSet, LoopClosure
from cmstack.scenarios import closed_chain, series_parallel, slider_crank, yumi_dual_arm
from cmstack.scenarios._common import resolve_config, run_scenario
from cmstack.scenarios._plant_loops import check_rows, plant_vs_rigid_qacc_rel, rigid_accelerations
from cmstack.sim.mjcf_plant import plant_from_mjcf
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.projection_sim import ProjectionPlant


def _run(mod, tmp_path, duration, **overrides):
    m, out = run_scenario(
        mod.NAME, mod.run, overrides=overrides, duration=duration, out=tmp_path, html=False, plots=False
    )
    return m, dict(np.load(out / "log.npz", allow_pickle=True)), out


def test_check_rows_are_spread_over_the_run_and_at_most_twenty():
    assert check_rows(1000).tolist() == np.linspace(0, 999, 20).astype(int).tolist()
    assert check_rows(5).tolist() == [0, 1, 2, 3, 4] and check_rows(0).size == 0


@pytest.mark.parametrize("model", ["mjcf/five_bar.xml", "mjcf/delta.xml"])
def test_rigid_qacc_is_the_rigid_models_where_the_plant_is_the_model(tmp_path, model):
    """On the closed_chain plant (the same file as the controller's model), the rigid q̈ from MuJoCo's M, f, J and
    J̇q̇ equals ProjectionPlant.accel (the rigid model, closed_chain's check) to 1e-9, MuJoCo's soft q̈ does not,
    and the median over the run's 20 check states is the plant_vs_rigid_qacc_rel closed_chain reports."""
    m, L, out = _run(closed_chain, tmp_path, 0.3, model=model, track_after=0.1)
    robot = closed_chain.load_robot({"model": model, "loops": ""})
    plant = plant_from_mjcf(robot, sim_dt=0.00025)
    rigid = ProjectionPlant(robot, None, sim_dt=plant.dt)
    i = plant.map.dadr
    soft = []
    for k in check_rows(len(L["t"]), 6):
        q, v, tau = L["plant_qpos"][k], L["plant_qvel"][k], L["tau"][k]
        a_mj, a_rig = rigid_accelerations(plant, q, v, tau)
        a_ref = rigid.accel(q[plant.map.qadr], v[i], tau * rigid.actuated)
        assert np.linalg.norm(a_rig[i] - a_ref) <= 1e-9 * np.linalg.norm(a_ref)
        soft.append(np.linalg.norm(a_mj[i] - a_ref) / np.linalg.norm(a_ref))
    assert max(soft) > 1e-4  # MuJoCo's loop is soft: the check sees it
    rows = check_rows(len(L["t"]))
    ours = plant_vs_rigid_qacc_rel(plant, L["plant_qpos"][rows], L["plant_qvel"][rows], L["tau"][rows])
    assert ours == pytest.approx(m["plant_vs_rigid_qacc_rel"], rel=1e-6)


def test_rigid_qacc_is_series_parallels_rigid_loop_check(tmp_path):
    """The generic check (J̇q̇ by central differences, any equality) against RigidLoopCheck (mj_jacDot at the
    connect's sites) on logged series-parallel states; and the scenario's loop_residual_max_m is its connect's
    largest residual."""
    m, L, _ = _run(series_parallel, tmp_path, 0.5)
    assert (
        m["loop_residual_max_m"] == m["loop_closure_error_max_m"] == pytest.approx(L["loop_violation"].max())
    )
    assert 0 < m["loop_residual_max_m"] < 1e-3
    plant = series_parallel.build_plant(resolve_config(series_parallel.NAME, duration=0.5))
    check = series_parallel.RigidLoopCheck(plant)
    pm, i = plant.map, plant.map.dadr
    src = mujoco.MjData(plant.model)
    for k in check_rows(len(L["t"]), 6):
        a_mj, a_rig = rigid_accelerations(plant, L["plant_qpos"][k], L["plant_qvel"][k], L["Q_a"][k])
        src.qpos[:], src.qvel[:] = L["plant_qpos"][k], L["plant_qvel"][k]
        src.ctrl[:] = 0.0
        src.ctrl[pm.act[pm.actuated]] = L["Q_a"][k][pm.actuated] / pm.gear[pm.actuated]
        b_mj, b_rig, _, _ = check.accelerations(src)
        np.testing.assert_array_equal(a_mj, b_mj)
        assert np.linalg.norm(a_rig[i] - b_rig[i]) <= 1e-8 * np.linalg.norm(b_rig[i])


def test_yumi_with_the_bar_reports_the_weld_residual_and_the_qacc_check(tmp_path):
    m, L, out = _run(yumi_dual_arm, tmp_path / "bar", 0.4, plant="bar")
    cfg = resolve_config(yumi_dual_arm.NAME, overrides={"plant": "bar"}, duration=0.4)
    robot = yumi_dual_arm.Robot(cfg["urdf"])
    T_AB = pin.SE3(
        np.array(cfg["T_AB_rotation"], dtype=float), np.array(cfg["T_AB_translation"], dtype=float)
    )
    cs = ClosureSet([LoopClosure(robot, cfg["frame1"], cfg["frame2"], "weld", offset=T_AB)])
    phi = np.array([np.abs(cs.phi(q)).max() for q in L["q"]])  # the plant's q, model order
    assert m["loop_residual_max_m"] == pytest.approx(phi.max(), rel=1e-9)
    np.testing.assert_allclose(L["loop_residual"], phi, rtol=1e-9, atol=1e-15)
    assert 0 < m["loop_residual_max_m"] < 1e-2
    bar = yumi_dual_arm.welded_bar_model(
        cfg["mjcf_bar"], T_AB.rotation, T_AB.translation, cfg["frame1"], cfg["frame2"]
    )
    plant = MujocoPlant(
        cfg["mjcf_bar"],
        robot.joint_names,
        sim_dt=cfg["sim_dt"] if cfg["sim_dt"] > 0 else cfg["control_dt"],
        mj_model=bar,
    )
    rows = check_rows(len(L["t"]))
    ref = plant_vs_rigid_qacc_rel(plant, L["plant_qpos"][rows], L["plant_qvel"][rows], L["tau"][rows])
    assert m["plant_vs_rigid_qacc_rel"] == pytest.approx(ref, rel=1e-9) and 0 < ref < 1
    v, Lv, _ = _run(yumi_dual_arm, tmp_path / "virtual", 0.2)  # no loop in the plant: no such keys
    assert "loop_residual_max_m" not in v and "plant_vs_rigid_qacc_rel" not in v and "loop_residual" not in Lv


def test_slider_crank_reports_the_rail_residual_and_the_qacc_check(tmp_path):
    m, L, _ = _run(slider_crank, tmp_path, 1.2, energy_duration=0.2, compare_duration=0.2)
    cfg = resolve_config(slider_crank.NAME, duration=1.2)
    robot = slider_crank.load_robot(cfg)
    plant = slider_crank.mujoco_plant(cfg, robot)
    (loop,) = robot.loops  # the rail, from the URDF's sidecar
    q = L["plant_qpos"][:, plant.map.qadr]
    assert m["loop_residual_max_m"] == pytest.approx(max(abs(loop.phi(x)[0]) for x in q), rel=1e-12)
    assert (
        0 < m["loop_residual_max_m"] <= m["loop_violation_max_mujoco_m"] + 1e-12
    )  # one row of MuJoCo's three
    rows = check_rows(len(L["t"]))
    ref = plant_vs_rigid_qacc_rel(plant, L["plant_qpos"][rows], L["plant_qvel"][rows], L["tau"][rows])
    assert m["plant_vs_rigid_qacc_rel"] == pytest.approx(ref, rel=1e-9) and 0 < ref < 1
