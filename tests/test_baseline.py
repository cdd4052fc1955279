"""cmstack baseline save / check (cmstack/baseline.py): what a baseline holds, its size, the exit codes
0 / 1 / 2 and their one-line messages, tolerances from baseline.toml, check.md and the plots.  Every
run and every command runs in a child process with a wall-clock limit."""

import json
import shutil
import subprocess
from pathlib import Path

import _cli
import numpy as np
import pytest
from plotcheck import assert_plots_ok

from cmstack.baseline import BaselineError, check, save

pytestmark = pytest.mark.slow


def cli(*argv, cwd, timeout=180) -> subprocess.CompletedProcess:
    return _cli.cli(*argv, cwd=cwd, timeout=timeout)


def run(out: Path, *argv, scenario="yumi_dual_arm", duration=2.0) -> Path:
    r = cli(
        "run",
        scenario,
        "--duration",
        str(duration),
        "--no-plots",
        "--no-html",
        "--no-progress",
        "--out",
        str(out),
        *argv,
        cwd=out.parent,
    )
    assert r.returncode in (0, 1), r.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 2 s flagship run (the thesis' run), its baseline, and an identical rerun."""
    d = tmp_path_factory.mktemp("runs")
    a = run(d / "a")
    b = run(d / "b")
    base = save(a, d / "base")
    return d, a, b, base


def test_baseline_files_and_contents(runs):
    d, a, _, base = runs
    assert sorted(p.name for p in base.iterdir()) == [
        "baseline.toml",
        "config.toml",
        "metrics.json",
        "signals.npz",
    ]
    assert json.loads((base / "metrics.json").read_text()) == json.loads((a / "metrics.json").read_text())
    with np.load(base / "signals.npz") as z:
        assert sorted(z.files) == ["e_c", "e_u", "joint_names", "q", "t", "tau", "weld_violation"]
        assert z["q"].dtype == np.float32 and z["q"].shape == (400, 14)
        with np.load(a / "log.npz") as log:
            np.testing.assert_allclose(z["q"], log["q"], rtol=1e-7, atol=0)  # float32 of every step


def test_identical_rerun_passes_and_writes_check_md(runs):
    d, _, b, base = runs
    r = cli("baseline", "check", str(b), "--against", str(base), cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("within tolerance: ")
    md = (b / "check.md").read_text()
    assert "# Baseline check: PASS" in md and "| `tau` | yes |" in md
    assert not (b / "check_plots").exists()


#: the flagship's committed baseline (tests/test_yumi_closed_loop.py::test_virtual_plant_thesis_settings: the
#: thesis' 2 s run, written in that test's process); the runs below are child processes (cmstack_run)
FLAGSHIP = Path(__file__).resolve().parent / "baselines" / "test_virtual_plant_thesis_settings"


def test_done_when_identical_rerun_passes(cmstack_run, tmp_path):
    r = cmstack_run("yumi_dual_arm", plots=False)
    assert r.exit_code == 0 and r.metrics["scenario"] == "yumi_dual_arm"
    c = cli("baseline", "check", str(r.dir), "--against", str(FLAGSHIP), cwd=tmp_path)
    assert c.returncode == 0, c.stdout + c.stderr
    assert c.stdout.startswith("within tolerance: 20 metrics and 5 signals on 400 samples"), c.stdout


def test_done_when_one_gain_changed_by_one_percent_fails_naming_signal_and_time(cmstack_run, tmp_path):
    r = cmstack_run("yumi_dual_arm", {"task_kp": 505})
    c = cli("baseline", "check", str(r.dir), "--against", str(FLAGSHIP), cwd=tmp_path)
    assert c.returncode == 1, c.stdout + c.stderr
    first = c.stdout.splitlines()[0]
    # the torque of the first step already differs (the gain multiplies the initial task error)
    assert first.startswith(
        "outside tolerance: signal tau[yumi_joint_1_l] left its band first, at t = 0.0000 s"
    ), first
    md = (r.dir / "check.md").read_text()
    assert "# Baseline check: FAIL" in md and "`task_kp: 500.0 → 505.0`" in md
    pngs = sorted(p.stem for p in (r.dir / "check_plots").glob("*.png"))
    assert pngs == ["e_c", "e_u", "q", "tau"], pngs
    shutil.copytree(r.dir / "check_plots", tmp_path / "pics" / "plots")  # plotcheck reads RUN/plots/
    assert_plots_ok(tmp_path / "pics", pngs)  # real pictures, not blank


def test_done_when_another_scenario_exits_2(cmstack_run, tmp_path):
    other = cmstack_run("series_parallel", duration=0.2)
    c = cli("baseline", "check", str(other.dir), "--against", str(FLAGSHIP), cwd=tmp_path)
    assert c.returncode == 2
    assert c.stderr == (
        f"error: {other.dir / 'metrics.json'}: scenario 'series_parallel' does not match the "
        f"baseline's 'yumi_dual_arm' ({FLAGSHIP / 'metrics.json'})\n"
    ), c.stderr
    assert not (other.dir / "check.md").exists()


def _copy_run(src: Path, dst: Path, drop=(), metrics=None) -> Path:
    shutil.copytree(src, dst)
    if drop:
        with np.load(src / "log.npz") as z:
            kept = {k: z[k] for k in z.files if k not in drop}
        np.savez(dst / "log.npz", **kept)
    if metrics:
        m = json.loads((src / "metrics.json").read_text())
        m.update(metrics)
        (dst / "metrics.json").write_text(json.dumps(m))
    return dst


def test_missing_signal_shorter_run_and_missing_files_exit_2(runs, tmp_path):
    d, a, _, base = runs
    no_tau = _copy_run(a, tmp_path / "no_tau", drop=("tau",))
    res = check(no_tau, base)
    assert res.code == 2 and "log.npz: no signal 'tau'" in res.message, res.message
    short = run(tmp_path / "short", duration=0.5)
    res = check(short, base)
    assert res.code == 2 and "the run covers t = 0…0.495 s, the baseline 0…1.995 s" in res.message, (
        res.message
    )
    res = check(a, tmp_path / "nowhere")
    assert res.code == 2 and res.message == f"{tmp_path / 'nowhere'}: no such baseline directory"
    res = check(tmp_path / "nothing", base)
    assert res.code == 2 and "no such run directory" in res.message
    no_metric = _copy_run(a, tmp_path / "no_metric")
    m = json.loads((no_metric / "metrics.json").read_text())
    del m["task_error_converged"]
    (no_metric / "metrics.json").write_text(json.dumps(m))
    res = check(no_metric, base)
    assert res.code == 2 and "no metric 'task_error_converged'" in res.message


def test_metric_tolerances_per_kind_and_overrides(runs, tmp_path):
    d, a, _, base0 = runs
    base = Path(shutil.copytree(base0, tmp_path / "base"))
    m0 = json.loads((a / "metrics.json").read_text())
    moved = _copy_run(
        a,
        tmp_path / "moved",
        metrics={
            "task_error_converged": m0["task_error_converged"] * 1.01,
            "realtime_factor": 1.0,
            "control_step_us_median": 1e6,
        },
    )
    res = check(moved, base)
    assert res.code == 1 and res.message.startswith("outside tolerance: metric task_error_converged (error)")
    assert {m.key for m in res.metrics}.isdisjoint({"realtime_factor", "control_step_us_median", "reason"})
    toml = (base / "baseline.toml").read_text()
    (base / "baseline.toml").write_text(
        toml.replace("[metrics.keys]\n", "[metrics.keys]\ntask_error_converged = {rtol = 0.02, atol = 0.0}\n")
    )
    assert check(moved, base).code == 0
    counted = _copy_run(a, tmp_path / "counted", metrics={"qp_failures": 1})
    res = check(counted, base)
    assert res.code == 1 and "metric qp_failures (count)" in res.message


def test_signal_tolerance_override(runs, tmp_path):
    d, _, _, base0 = runs
    base = Path(shutil.copytree(base0, tmp_path / "base"))
    c = run(tmp_path / "kp501", "--set", "task_kp=501")
    assert check(c, base).code == 1
    toml = (base / "baseline.toml").read_text()
    wide = "\n".join(f"{k} = {{rtol = 0.05, atol = 0.0}}" for k in ("e_c", "e_u", "q", "tau"))
    (base / "baseline.toml").write_text(
        toml.replace("[signals.keys]\n", f"[signals.keys]\n{wide}\n").replace(
            "[metrics]\nerror = {rtol = 0.0001", "[metrics]\nerror = {rtol = 0.05"
        )
    )
    res = check(c, base)
    assert res.code == 0, res.message


@pytest.mark.parametrize(
    "old, new, key",
    [
        ("[signals]\n", "[signals]\nbogus = 1\n", "signals.bogus"),
        ("[signals.keys]\n", "[signals.keys]\nnope = {rtol = 1.0}\n", "signals.keys.nope"),
        ("[metrics.keys]\n", "[metrics.keys]\nok = {rtol = -1.0}\n", "metrics.keys.ok.rtol"),
        ("[metrics]\nerror = ", "[metrics]\nerror = 3\nx = ", "metrics.x"),
        ("count = {rtol = 0.0, atol = 0.0}", "count = 3", "metrics.count: expected {rtol"),
        ("[metrics]\n", "[x]\n[metrics]\n", "unknown table(s) ['x']"),
        ("[metrics]\n", "[metrics]\n[[", "not valid TOML"),
    ],
    ids=[
        "unknown-key",
        "unknown-signal",
        "negative",
        "unknown-metric-key",
        "not-a-table",
        "unknown-table",
        "bad-toml",
    ],
)
def test_bad_baseline_toml_is_one_line_naming_file_and_key(runs, tmp_path, old, new, key):
    d, a, _, base0 = runs
    base = Path(shutil.copytree(base0, tmp_path / "base"))
    toml = (base / "baseline.toml").read_text()
    (base / "baseline.toml").write_text(toml.replace(old, new, 1))
    r = cli("baseline", "check", str(a), "--against", str(base), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert str(base / "baseline.toml") in r.stderr and key in r.stderr, r.stderr


def test_save_keeps_tolerance_edits_and_refuses_unfinished_runs(runs, tmp_path):
    d, a, _, base0 = runs
    base = Path(shutil.copytree(base0, tmp_path / "base"))
    toml = (base / "baseline.toml").read_text()
    (base / "baseline.toml").write_text(
        toml.replace("[signals.keys]\n", "[signals.keys]\ntau = {rtol = 0.001, atol = 0.0}\n")
    )
    save(a, base)
    assert "tau = {rtol = 0.001, atol = 0.0}" in (base / "baseline.toml").read_text()
    unfinished = _copy_run(
        a, tmp_path / "unfinished", metrics={"ok": False, "reason": "the run did not finish: x"}
    )
    with pytest.raises(BaselineError, match="metrics.json: the run did not finish"):
        save(unfinished, tmp_path / "b2")
    with pytest.raises(BaselineError, match=r"no time series matches \['nope'\]"):
        save(a, tmp_path / "b3", signals=["nope"])
    r = cli("baseline", "save", str(tmp_path / "nothing"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == f"error: {tmp_path / 'nothing'}: no such run directory\n"


def test_ten_second_flagship_baseline_is_under_1_mb(tmp_path):
    a = run(tmp_path / "a", duration=10.0)
    base = save(a, tmp_path / "base")
    size = sum(p.stat().st_size for p in base.iterdir())
    assert size <= 1_000_000, size
    with np.load(base / "signals.npz") as z:
        assert len(z["t"]) == 2000 and z["t"][-1] == pytest.approx(9.995)
    assert check(a, base).code == 0
