"""``cmstack rt``: the flagship scenario runs across the process boundary and writes the usual run
directory plus timing.json (with the in-process comparison), rt_timing.npz and the timing plot; bad
input is one line and exit 2.  Child processes with wall-clock limits; no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

CMD = [sys.executable, "-m", "cmstack.cli", "rt"]


def rt(tmp_path, *args, timeout=240):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def test_yumi_rt_writes_the_run_directory_and_timing(tmp_path):
    out = tmp_path / "run"
    r = rt(
        tmp_path,
        "yumi_dual_arm",
        "--duration",
        "0.3",
        "--rate",
        "1000",
        "--transport",
        "shm",
        "--out",
        str(out),
        "--no-html",
        "--max-misses",
        "1000",
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 0.3 s: the converged targets are not evaluated
    t = json.loads((out / "timing.json").read_text())
    said = r.stdout[-3000:] + r.stderr[-2000:]
    assert t["status"] == "done", said
    assert t["cycles"] == 300 and t["rate_hz"] == 1000 and t["status"] == "done" and t["stops"] == 0
    for key in ("period_us", "latency_us", "compute_us", "torque_age_us"):
        assert set(t[key]) >= {"p50", "p99", "p99.9", "max"}
    assert t["gc_collections"] == 0 and t["misses"] == pytest.approx(t["misses_per_million"] * 300 / 1e6)
    assert t["load_average_1_5_15"] is not None
    # the default: the law answers the state predicted when its torque is applied (sim/rt_predict.py)
    pr = t["predict"]
    assert (
        pr["mode"] == "latency" and pr["predictions"] == t["controller_cycles"] - 1 and pr["failures"] == 0
    ), pr
    # the same closed-loop metrics as the in-process run, beside them
    assert "closed_loop" in t, said
    cl = t["closed_loop"]
    assert {"constraint_error_initial", "task_error_initial", "max_torque_nm"} <= set(cl)
    assert cl["task_error_initial"]["rt"] == pytest.approx(cl["task_error_initial"]["inprocess"], rel=1e-9)
    assert (out / "inprocess" / "metrics.json").is_file()
    m = json.loads((out / "metrics.json").read_text())
    assert json.loads((out / "config.toml").read_text().split("control_dt = ")[1].split("\n")[0]) == 0.001
    assert m["qp_failures"] == 0
    with np.load(out / "log.npz") as log:
        assert log["t"].shape == (300,) and log["plant_qpos"].shape[0] == 300
    with np.load(out / "rt_timing.npz") as a:
        assert a["miss"].shape == (300,) and int(a["miss"].sum()) == t["misses"]
    assert (out / "plots" / "rt_timing.png").stat().st_size > 10_000
    assert "closed loop, rt vs in-process" in r.stdout and "misses" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rate", "0"], "--rate must be a finite number in [1, 20000] Hz, got 0.0"),
        (["--pin", "x"], "--pin must be two CPU numbers"),
        (["--max-misses", "0"], "max_misses must be an integer >= 1"),
        (["--duration", "nan"], "--duration must be a finite number"),
        (["--transport", "tcp"], "invalid choice: 'tcp'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    r = rt(tmp_path, "yumi_dual_arm", *args, timeout=120)
    assert r.returncode == 2
    err = [line for line in r.stderr.strip().splitlines() if line.startswith(("error", "cmstack rt: error"))]
    assert len(err) == 1 and message in err[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_controller_that_reads_the_plant_runs_with_its_sensor(tmp_path):
    """The hybrid force PIDC reads the bar's weld force (qfrc_constraint) in its own process: it names it
    (sensed_data), the driver publishes it with each state, and the run goes through; the force it used
    (logged as Qc) follows the plant's as the bar moves instead of staying at the initial state's."""
    out = tmp_path / "run"
    r = rt(
        tmp_path,
        "yumi_dual_arm",
        "--set",
        "controller=pidc_force",
        "--set",
        "plant=bar",
        "--duration",
        "0.3",
        "--no-html",
        "--no-plots",
        "--no-compare",
        "--max-misses",
        "100000",
        "--out",
        str(out),
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stderr
    assert "driver process starts" in r.stdout and "SensesPlant" not in r.stderr
    timing = json.loads((out / "timing.json").read_text())
    assert timing["status"] == "done" and timing["cycles"] == 300
    qc = np.load(out / "log.npz")["Qc"]
    assert qc.shape == (300, 14) and np.all(np.isfinite(qc))
    assert np.abs(qc[50:] - qc[1]).max() > 0.1  # the sensed force changes with the plant's state


def test_unknown_scenario_is_one_line_and_exit_2(tmp_path):
    r = rt(tmp_path, "no_such_scenario", timeout=120)
    assert r.returncode == 2 and "no scenario named 'no_such_scenario'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_ctrl_c_stops_the_robot_and_keeps_the_timing(tmp_path):
    """SIGINT during the loop: the controller side asks the driver to stop (brake), the run exits 130
    with its log and metrics, and timing.json says how the loop ended."""
    import signal
    import time

    out = tmp_path / "run"
    p = subprocess.Popen(
        [
            *CMD,
            "yumi_dual_arm",
            "--duration",
            "120",
            "--out",
            str(out),
            "--no-html",
            "--no-plots",
            "--no-compare",
            "--max-misses",
            "100000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        for line in p.stdout:  # the loop is about to start
            if "the driver process starts" in line:
                break
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-2000:]
    t = json.loads((out / "timing.json").read_text())
    assert t["loop_ended_by"] == "interrupted" and t["status"] == "stopped" and t["cycles"] < 120_000
    assert "asked to stop" in t["reason"]
    assert json.loads((out / "metrics.json").read_text())["interrupted"] is True
