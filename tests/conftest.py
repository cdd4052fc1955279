import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

# Longest tests first, so that with `pytest -n 2 --dist loadgroup` (make test) no worker is left alone
# with a long closed-loop run at the end while the other idles.  The order comes from the durations of
# the previous run in this checkout (pytest's cache, written at the end of every run); on a clean clone
# from these seconds, measured on the 2-core machine (`--durations`, load ≈ 8: only the order matters).
# A test missing from both keeps its place after the ones known to be long.  Nothing here asserts a time.
DURATION_HINT_S = {
    "tests/test_balloon.py::test_balloon_targets_shortened": 197,
    "tests/test_campaign.py::test_dask_scheduler_path": 148,
    "tests/test_chain_open_loop.py::test_chain_open_loop_targets": 122,
    "tests/test_browser.py::test_live_replay_and_html_show_the_plant[chain_task_space]": 93,
    "tests/test_chain_closed_loop.py::test_chain_task_space_joint_motors": 78,
    "tests/test_browser.py::test_live_replay_and_html_show_the_plant[yumi_dual_arm]": 75,
    "tests/test_pidc_yumi.py::test_yumi_bar_squeeze_force_and_motion": 66,
    "tests/test_titop_loop.py::test_stiff_loop_closure_tends_to_the_rigid_constraint": 64,
    "tests/test_browser.py::test_live_replay_and_html_show_the_plant[series_parallel]": 60,
    "tests/test_pidc_series_parallel.py::test_series_parallel_pidc_closed_loop_shortened": 60,
    "tests/test_chain_closed_loop.py::test_chain_task_space_thrusters": 54,
    "tests/test_dac.py::test_task_space_law_tracks_and_avoids": 51,
    "tests/test_chain_closed_loop.py::test_chain_task_space_motor_limits_enter_the_allocation_qp": 46,
    "tests/test_series_parallel_closed_loop.py::test_gains_satisfying_condition_25_reject_the_disturbance": 45,
    "tests/test_series_parallel_closed_loop.py::test_robust_term_matters": 41,
    "tests/test_slider_crank.py::test_slider_crank_targets": 40,
    "tests/test_campaign.py::test_sigkill_halfway_then_resume_equals_uninterrupted": 40,
    "tests/test_chain_closed_loop.py::test_chain_task_space_without_potential_hits_the_spheres": 36,
    "tests/test_campaign_uk_robust.py::test_robust_law_removes_most_of_the_mass_error": 29,
    "tests/test_yumi_closed_loop.py::test_weighted_leaves_a_task_offset_that_strict_removes": 25,
    "tests/test_interrupt.py::test_signal_mid_run_writes_what_it_has_and_exits_130": 23,
    "tests/test_series_parallel_plant.py::test_plant_qacc_is_near_rigid_along_a_run": 23,
    "tests/test_yumi_closed_loop.py::test_virtual_plant_thesis_settings": 19,
    "tests/test_dac.py::test_lyapunov_decreases_along_closed_loop": 17,
    "tests/test_campaign_perturb.py::test_yumi_run_records_the_perturbation": 17,
    "tests/test_pidc_fast.py::test_slider_crank_pidc_equals_svd_route_on_a_closed_loop_run": 16,
    "tests/test_interrupt.py::test_sigint_during_the_final_save": 14,
    "tests/test_yumi_closed_loop.py::test_bar_plant": 14,
    "tests/test_run_contract.py::test_series_parallel_short_run_has_a_reason_and_lists": 13,
    "tests/test_viewer.py::test_live_scenario_streams_frames_and_trails": 12,
    "tests/test_pidc.py::test_closed_loop_tracking_with_passive_rod": 11,
    "tests/test_pidc.py::test_force_control_converges_and_is_independent_of_motion": 9,
    "tests/test_viewer.py::test_no_server_is_left_behind_whatever_ends_the_run": 9,
    "tests/test_yumi_closed_loop.py::test_run_too_short_for_its_targets_is_not_ok": 9,
    "tests/test_partition.py::test_model_with_cylinder_and_piston_reproduces_plant_feedforward": 9,
    "tests/test_run_contract.py::test_bar_run_with_another_offset_holds_the_weld": 9,
    "tests/test_pidc_fast.py::test_series_parallel_pidc_equals_svd_route_on_a_closed_loop_run": 8,
    "tests/test_examples.py::test_example_runs_meets_its_target_and_replays": 8,
    "tests/test_viewer.py::test_live_run_keeps_the_scene_up_until_ctrl_c": 8,
    "tests/test_interrupt.py::test_sigkill_around_the_save_leaves_no_corrupt_file": 7,
}
_CACHE_KEY = "cmstack/durations"


def _cost(nodeid: str, cached: dict) -> float:
    if nodeid in cached:
        return cached[nodeid]
    return DURATION_HINT_S.get(nodeid, DURATION_HINT_S.get(nodeid.split("[")[0], 0.0))


def pytest_collection_modifyitems(config, items):
    cached = config.cache.get(_CACHE_KEY, {}) if config.cache is not None else {}
    items.sort(key=lambda it: -_cost(it.nodeid, cached))         # stable: the rest keeps its order


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # the controller (or a run without xdist) sees every report; workers do not write the cache
    if hasattr(session.config, "workerinput") or session.config.cache is None or not _durations:
        return
    cached = session.config.cache.get(_CACHE_KEY, {})
    cached.update({k: round(v, 2) for k, v in _durations.items()})
    session.config.cache.set(_CACHE_KEY, cached)
