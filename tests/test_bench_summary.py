"""bench/__main__.py summary: every issue-12 number beside its target, read from bench/results/*.json
(fabricated results here: no timing is measured or asserted)."""

import json

import numpy as np
import pinocchio as pin

from cmstack.bench.__main__ import main, print_summary, summary


def test_summary_reads_every_result_and_judges_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    (res / "yumi_uk.json").write_text(
        json.dumps({"ratio_of_medians": {"uk_weighted": 0.55, "uk_3_levels": 0.7, "panda_circle": 1.6}})
    )
    (res / "projection.json").write_text(json.dumps({"pidc_ratio": {"slider_crank_pidc": {"ratio": 1.4}}}))
    (res / "series_parallel.json").write_text(
        json.dumps([{"ratio_to_floor": 3.0, "python_floor_ratio": 1.9, "step_over_python_floor": 1.6}])
    )
    (res / "chain.json").write_text(
        json.dumps({"law3_closed_form_us_median": 200.0, "law3_step_over_floor": 4.0})
    )
    (res / "realtime.json").write_text(
        json.dumps(
            {
                "yumi_dual_arm": {"realtime_factor": 12.0, "duration_s": 0.5},
                "slider_crank": {"error": "ConfigError: bad"},
                "balloon": {"whole_run_wall_s": 61.0},
            }
        )
    )
    rows = {r["what"]: r for r in summary(quick=True)}
    assert rows["YuMi UK step (weighted, limits) / floor"]["met"] is True
    assert rows["YuMi UK step (3 strict levels) / floor"]["met"] is False
    assert rows["Panda circle UK step / (computeAllTerms + frame Jacobian)"]["met"] is False
    assert rows["PIDC step (slider-crank) / floor"]["met"] is True
    assert rows["PIDC step (series-parallel) / floor"]["value"] is None
    assert rows["PIDC step (series-parallel) / floor"]["met"] is None
    assert rows["robust law (18) step / floor (one RNEA)"]["met"] is False
    assert "1.90×" in rows["robust law (18) step / floor (one RNEA)"]["note"]  # the Python bound, beside it
    assert rows["PIDC step (slider-crank) / floor"]["note"] == ""  # not measured: not claimed
    assert rows["DAC law III step, median"]["met"] is True
    assert rows["yumi_dual_arm realtime_factor"]["met"] is True
    assert (
        rows["slider_crank realtime_factor"]["value"] is None
        and "ConfigError" in rows["slider_crank realtime_factor"]["note"]
    )
    assert rows["balloon whole run (default config), wall"]["met"] is False
    print_summary(list(rows.values()), True, (1.0, 1.0, 1.0))
    out = capsys.readouterr().out
    assert "not measured" in out and "target ≥ 10" in out


def test_summary_has_the_fixed_rate_loop_rows_per_setup(tmp_path, monkeypatch, capsys):
    """bench.rt's entries (bench/results/rt.json, one per set-up) become summary rows judged by bench.rt's
    own rows() against its targets, with the run's length and load beside them; without rt.json, one row
    says it was not measured."""
    monkeypatch.chdir(tmp_path)
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    assert {r["what"]: r for r in summary(quick=False)}["rt: misses per million cycles"]["met"] is None
    timing = {
        "stops": 0,
        "misses_per_million": 767.0,
        "latency_us": {"p99.9": 150.0},
        "gc_collections": 0,
        "closed_loop_within_2x": True,
    }
    entry = {
        "duration_s": 600.0,
        "rate_hz": 1000.0,
        "load_1min_during": {"mean": 6.96, "max": 8.85},
        "cpus": 2,
        "timing": timing,
    }
    (res / "rt.json").write_text(
        json.dumps(
            {
                "shm-fifo": entry,
                "udp-fifo": {**entry, "timing": {**timing, "stops": 1, "closed_loop_within_2x": False}},
            }
        )
    )
    rows = {r["what"]: r for r in summary(quick=False)}
    assert "rt: misses per million cycles" not in rows
    fifo = {k.split(": ", 1)[1]: r for k, r in rows.items() if k.startswith("rt shm-fifo: ")}
    assert fifo["stops"]["met"] is True and fifo["misses per million cycles"]["met"] is False
    assert (
        fifo["controller latency p99.9 [µs]"]["value"] == 150.0
        and fifo["controller latency p99.9 [µs]"]["met"]
    )
    assert fifo["GC collections in the loop"]["met"] is True
    assert fifo["closed-loop errors within 2× of in-process"]["met"] is True
    assert "600 s at 1000 Hz; load 7.0 (max 8.8)" in fifo["stops"]["note"]
    assert rows["rt udp-fifo: stops"]["met"] is False
    assert rows["rt udp-fifo: closed-loop errors within 2× of in-process"]["value"] is False
    print_summary(list(rows.values()), False, (1.0, 1.0, 1.0))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "rt udp-fifo: closed-loop errors" in x)
    assert " no " in line and "target true" in line


def test_unknown_benchmark_is_a_usage_error(capsys):
    assert main(["no_such_bench"]) == 2
    assert "no_such_bench" in capsys.readouterr().err


def test_python_floor_makes_the_call_and_returns_its_result():
    """bench.python_floor really calls Pinocchio (a probe that skipped it would measure nothing)."""
    from cmstack.bench import python_floor

    model = pin.buildSampleModelManipulator()
    rng = np.random.default_rng(0)
    q, v = pin.randomConfiguration(model), rng.normal(size=model.nv)
    step = python_floor(pin.computeAllTerms, model, model.createData(), model.nv)
    ref = pin.nonLinearEffects(model, model.createData(), q, v)
    assert np.allclose(step(0.0, q, v), ref, rtol=0, atol=1e-12)
    step_a = python_floor(pin.rnea, model, model.createData(), model.nv, accel_from_v=True)
    assert np.allclose(step_a(0.0, q, v), pin.rnea(model, model.createData(), q, v, v), rtol=0, atol=1e-12)


def test_summary_has_the_peer_and_closed_chain_rows(tmp_path, monkeypatch):
    """The UK step against TSID's (issue 22, when bench.yumi_uk found TSID) and each mechanism's control step
    against pin.constraintDynamics (issue 23, bench.closed_chain) are judged against their targets."""
    monkeypatch.chdir(tmp_path)
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    (res / "yumi_uk.json").write_text(
        json.dumps(
            {
                "ratio_of_medians": {"panda_circle": 1.2},
                "against_tsid": {
                    "panda_circle": {
                        "tsid": "tsid_panda",
                        "ratio_of_medians": 0.55,
                        "median_of_ratios": 0.56,
                    },
                    "uk_weighted": {"tsid": "tsid_yumi", "ratio_of_medians": 0.45, "median_of_ratios": 0.46},
                },
                "tsid_targets": {"panda_circle": 0.6},
            }
        )
    )
    step = {"control_step_us": 4.0, "constraint_dynamics_us": 2.5, "ratio": 1.6}
    (res / "closed_chain.json").write_text(
        json.dumps(
            {"mjcf/five_bar.xml": {"compute_all_terms_us": 1.9, "uk": step, "pidc": {**step, "ratio": 3.7}}}
        )
    )
    rows = {r["what"]: r for r in summary(quick=False)}
    assert rows["panda_circle UK step / TSID's (tsid_panda, same states)"]["met"] is True
    assert rows["uk_weighted UK step / TSID's (tsid_yumi, same states)"]["met"] is None  # no target: reported
    assert rows["five_bar UK step / constraintDynamics"]["met"] is True
    assert rows["five_bar PIDC step / constraintDynamics"]["met"] is False
    assert rows["five_bar PIDC step / constraintDynamics"]["value"] == 3.7


def test_legged_ratio_becomes_a_row_judged_against_3x(tmp_path, monkeypatch):
    """bench.legged's result (issue 31: the contact UK step over constraintDynamics) is one row, met at <= 3."""
    monkeypatch.chdir(tmp_path)
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    what = "legged (five-bar quadruped) contact UK step / constraintDynamics"
    for ratio, met in ((25.0, False), (2.5, True)):
        (res / "legged.json").write_text(
            json.dumps({"ratio": ratio, "control_step_us": 100.0 * ratio, "constraint_dynamics_us": 100.0})
        )
        row = {r["what"]: r for r in summary(quick=False)}[what]
        assert row["value"] == ratio and row["met"] is met and row["target"] == "≤ 3"
    biped = "legged (biped, parallel ankles) contact UK step / constraintDynamics"
    assert biped not in {r["what"] for r in summary(quick=False)}  # no result file, no row
    (res / "legged_biped.json").write_text(
        json.dumps({"ratio": 3.12, "control_step_us": 346.0, "constraint_dynamics_us": 111.0})
    )
    row = {r["what"]: r for r in summary(quick=False)}[biped]
    assert row["value"] == 3.12 and row["met"] is False
