"""The paper's own gains reproduce the paper: `cmstack run series_parallel` (Table II, 20 s) exits 0, its δ
rows that only κ meeting bound (25) can meet are reported beside the paper's figure with the reason, and the
same numbers under other gains are still judged against the targets."""

from __future__ import annotations

import json

from _cli import cli

from cmstack.scenarios._common import _is_target, default_config
from cmstack.scenarios.series_parallel import TABLE_II_KAPPA, table_rows

#: a default run's metrics (the 20 s Table II run: δ RMSE 0.01818 m against the paper's 0.018 m)
M = dict(
    rmse_phi_rad=0.02003,
    rmse_theta_rad=0.0113,
    rmse_delta_m=0.01818,
    rmse_steady_phi_rad=0.00315,
    rmse_steady_theta_rad=0.007802,
    rmse_steady_delta_m=0.01904,
    rmse_predisturbance_delta_m=0.000479,
    peak_error_disturbance_phi_rad=7.5e-6,
    peak_error_disturbance_theta_rad=0.0137,
    peak_error_disturbance_delta_m=0.0581,
    recovery_time_s=5.09,
    loop_closure_error_max_m=1.1e-7,
    stroke_end_stop_time_s=0.0,
    plant_vs_rigid_qacc_rel=8.9e-5,
    control_step_us_median=3.6,
    realtime_factor=17.0,
)


def _by_key(rows):
    return {r.key: r for r in rows}


def test_table_ii_gains_report_the_delta_rows_with_the_paper_figure_and_reason():
    cfg = default_config("series_parallel")
    assert tuple(cfg["kappa"]) == TABLE_II_KAPPA and cfg["controller"] == "robust"
    rows = _by_key(table_rows(cfg, M))
    for k in ("rmse_delta_m", "rmse_steady_delta_m", "recovery_time_s"):
        assert not _is_target(rows[k].target) and rows[k].ok is None, rows[k]
        assert rows[k].target.startswith("report: ") and "κ_δ = 50 N" in rows[k].target
    assert "paper 0.018 m, ours 0.0182 m" in rows["rmse_delta_m"].target
    # what the law guarantees with the paper's gains stays a target, and every target is met
    assert (
        _is_target(rows["rmse_predisturbance_delta_m"].target)
        and rows["rmse_predisturbance_delta_m"].ok is True
    )
    assert [r.key for r in rows.values() if _is_target(r.target) and r.ok is not True] == []
    worse = dict(M, rmse_predisturbance_delta_m=0.003)  # δ not tracked before the force: a failure
    assert _by_key(table_rows(cfg, worse))["rmse_predisturbance_delta_m"].ok is False


def test_other_gains_are_judged_on_the_stricter_targets():
    cfg = dict(default_config("series_parallel"), kappa=[50.0, 100.0, 300.0])
    rows = _by_key(table_rows(cfg, M))
    for k in ("rmse_delta_m", "rmse_steady_delta_m", "recovery_time_s"):
        assert _is_target(rows[k].target) and rows[k].ok is False, rows[k]


def test_default_run_reproduces_the_paper_and_exits_0(tmp_path):
    out = tmp_path / "run"
    r = cli(
        "run",
        "series_parallel",
        "--out",
        str(out),
        "--no-progress",
        "--no-plots",
        "--no-html",
        cwd=tmp_path,
        timeout=600,
    )
    m = json.loads((out / "metrics.json").read_text())
    assert r.returncode == 0, (m["reason"], r.stdout[-2000:])
    assert m["ok"] is True and m["failed_targets"] == [] and m["not_evaluated"] == []
    assert abs(m["rmse_delta_m"] - 0.018) < 0.002  # the paper's Table III figure, reproduced
    assert "report: paper 0.018 m" in r.stdout
