"""Interrupts and kills leave a readable run directory (rows 4, 5 of the robustness issue).

* SIGINT / SIGTERM in the middle of a run: one line on stderr (no traceback), exit 130, log.npz with
  what was logged, metrics.json with ``ok: false`` and ``reason: "interrupted at t = … s"`` (the loop
  ends at a step boundary; no plots or replay.html after an interrupt).
* SIGINT during the final save: the save completes, exit 130, every file readable.
* SIGKILL at several instants around the final save (and during the checkpoints before it): no
  corrupt file: the log (``read_log``: log.npz, or the checkpoint parts of a run killed before its
  final save) loads completely, metrics.json parses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tomllib
from _cli import spawn

#: a scenario of our own that logs a large, incompressible log quickly, so that its final
#: (compressed) save takes a noticeable time; it marks the end of its loop with a file
BIG_SAVE = """
import numpy as np
from cmstack.scenarios._common import Outcome, Row

NAME = "big_save"

def run(ctx):
    rng = np.random.default_rng(0)
    n = ctx.cfg["rows"]
    for k in range(n):
        ctx.logger.append(t=k * 1e-3, x=rng.standard_normal(ctx.cfg["width"]))
    (ctx.out / "loop_done").write_text("1")
    return Outcome({"value": 1.0}, [Row("value", 1.0, None, "<= 2", True)])
"""


def _first_checkpoint(out: Path) -> Path:
    """The file whose appearance means "the first checkpoint is written: the loop is running"."""
    from cmstack.sim.logger import parts_dir

    return parts_dir(out / "log.npz") / "000001.npz"


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.02)


def _check_readable(out: Path) -> dict:
    """Every file of the run directory parses; returns metrics.json."""
    tomllib.loads((out / "config.toml").read_text())
    m = json.loads((out / "metrics.json").read_text())
    for k in ("ok", "failed_targets", "not_evaluated", "reason"):
        assert k in m, k
    assert isinstance(m["failed_targets"], list) and isinstance(m["not_evaluated"], list)
    from cmstack.sim.logger import parts_dir, read_log

    if (out / "log.npz").exists() or parts_dir(out / "log.npz").is_dir():
        arrays = read_log(out, allow_pickle=True)  # zlib/zip errors would raise here
        assert "t" in arrays
    for p in (out / "plots").glob("*.png") if (out / "plots").is_dir() else []:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.read_bytes()[-8:-4] == b"IEND"
    return m


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_writes_what_it_has_and_exits_130(tmp_path, sig):
    out = tmp_path / "run"
    p = spawn(["run", "yumi_dual_arm", "--duration", "600", "--out", str(out), "--no-progress"], tmp_path)
    _wait_for(_first_checkpoint(out), p)  # the first checkpoint: the loop is running (t >= 1 s)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("interrupted at t = ") and f"({sig.name})" in lines[0]
    m = _check_readable(out)
    assert m["ok"] is False and m["reason"].startswith("interrupted at t = ")
    t_stop = float(m["reason"].split("t = ")[1].split(" s")[0])
    with np.load(out / "log.npz") as z:
        t = z["t"]
        assert z["q"].shape == (len(t), 14)
    assert 1.0 <= t[-1] < 600 and abs(t[-1] - t_stop) < 1e-3  # everything logged up to the stop is kept
    assert np.all(np.diff(t) > 0)
    # the loop (sim/runner.simulate) stopped at a step boundary and the scenario summarized what it had,
    # without the figures or replay.html (skipped after an interrupt so that the run returns within ~2 s)
    assert not (out / "plots").exists() and not (out / "replay.html").exists()
    assert "plots and replay.html skipped after the interrupt" in m["reason"]
    assert m["constraint_error_initial"] == pytest.approx(0.2839, abs=1e-3) and m.get("interrupted") is True
    assert not (out / ".plots.partial").exists()


@pytest.mark.slow
def test_sigint_during_the_final_save(tmp_path):
    (tmp_path / "big_save.py").write_text(BIG_SAVE)
    (tmp_path / "big_save.toml").write_text("duration = 1.0\nrows = 30000\nwidth = 64\n")
    out = tmp_path / "run"
    p = spawn(["run", str(tmp_path / "big_save.py"), "--out", str(out), "--no-progress"], tmp_path)
    _wait_for(out / "loop_done", p)
    time.sleep(0.2)  # inside the compressed save of ~15 MB
    p.send_signal(signal.SIGINT)
    _, stderr = p.communicate(timeout=240)
    assert p.returncode == 130, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    m = _check_readable(out)
    with np.load(out / "log.npz") as z:
        assert z["x"].shape == (30000, 64)  # the save completed
    assert "during the final save" in stderr or "interrupted at t = " in stderr
    if "during the final save" in stderr:  # the run had finished: its metrics are the real ones
        assert m["ok"] is True and m["value"] == 1.0
    else:  # the signal came just before the save
        assert m["ok"] is False and m["reason"].startswith("interrupted at t = ")


@pytest.mark.slow
@pytest.mark.parametrize("delay", [-0.5, 0.1, 0.5])
def test_sigkill_around_the_save_leaves_no_corrupt_file(tmp_path, delay):
    """delay < 0: killed during the loop (while checkpoints are written); >= 0: after the loop ended,
    during the final save of the log."""
    (tmp_path / "big_save.py").write_text(BIG_SAVE)
    (tmp_path / "big_save.toml").write_text("duration = 1.0\nrows = 30000\nwidth = 64\n")
    out = tmp_path / "run"
    p = spawn(["run", str(tmp_path / "big_save.py"), "--out", str(out), "--no-progress"], tmp_path)
    if delay < 0:
        _wait_for(_first_checkpoint(out), p)  # a checkpoint exists: the loop is half-way
        time.sleep(-delay)
    else:
        _wait_for(out / "loop_done", p)
        time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    m = _check_readable(out)
    if m["reason"].startswith("the run did not finish"):  # killed before the final metrics: the placeholder
        assert m["ok"] is False
    from cmstack.sim.logger import parts_dir, read_log

    if (out / "log.npz").exists() or parts_dir(out / "log.npz").is_dir():
        z = read_log(out)
        t = z["t"]
        assert z["x"].shape == (len(t), 64) and np.all(np.diff(t) > 0)


def test_logger_checkpoints_every_simulated_second(tmp_path):
    from cmstack.sim.logger import Logger, parts_dir, read_log

    log = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=1.0)
    log.meta["name"] = "mine"
    for k in range(2501):  # t = 0 … 2.5 s
        log.append(t=k * 1e-3, x=[k, 2 * k])
        if k == 999:
            assert not (tmp_path / "log.npz").exists() and not parts_dir(tmp_path / "log.npz").exists()
        if k == 1000:  # the append at t = 1 s wrote rows 0 … 999
            z = read_log(tmp_path)
            assert z["t"].shape == (1000,) and z["t"][-1] == 0.999 and str(z["name"]) == "mine"
    assert log.checkpoints == 2
    assert not (tmp_path / "log.npz").exists()  # a killed run: only the parts
    z = read_log(tmp_path / "log.npz")
    assert z["t"][-1] == pytest.approx(1.999) and np.array_equal(z["x"][:, 1], 2 * np.arange(2000))
    assert np.array_equal(z["t"], np.arange(2000) * 1e-3)
    # the second part holds only the rows of the second interval (chunked, not the whole log again)
    with np.load(parts_dir(tmp_path / "log.npz") / "000002.npz") as p2:
        assert p2["t"].shape == (1000,) and p2["t"][0] == 1.0
    log.save(tmp_path / "log.npz")  # the final save: the whole log, the parts removed
    assert not parts_dir(tmp_path / "log.npz").exists()
    z = read_log(tmp_path)
    assert z["x"].shape == (2501, 2) and z["t"][-1] == 2.5


def test_logger_columns_match_stacked_rows(tmp_path):
    """The preallocated columns give what stacking the appended rows gives (growth past the initial
    capacity, scalars, lists, ints), copies the rows, and keeps a key whose shape changes as an
    object array (in the final log and across checkpoint parts)."""
    from cmstack.sim.logger import Logger, read_log

    rng = np.random.default_rng(1)
    log = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=0.5)
    rows = {"t": [], "a": [], "M": [], "n": []}
    for k in range(3 * Logger.INITIAL_ROWS + 7):
        a, M = rng.standard_normal(3), rng.standard_normal((2, 2))
        log.append(t=k * 1e-3, a=a, M=M.tolist(), n=k)
        a[:] = 0.0  # the logged row is a copy
        (
            rows["t"].append(k * 1e-3),
            rows["a"].append(log.data["a"][-1].copy()),
            rows["M"].append(M),
            rows["n"].append(k),
        )
    L = log.arrays()
    assert np.array_equal(L["t"], np.array(rows["t"])) and np.array_equal(L["M"], np.stack(rows["M"]))
    assert np.array_equal(L["n"], np.arange(len(rows["n"]), dtype=float)) and L["n"].dtype == float
    assert not np.any(L["a"] == 0.0) and len(log) == len(rows["t"]) and log.last_t == rows["t"][-1]
    assert np.array_equal(read_log(tmp_path)["M"], L["M"][: len(read_log(tmp_path)["t"])])
    log.append(t=10.0, a=np.zeros(5))  # another shape: the key becomes ragged
    L = log.arrays()
    assert L["a"].dtype == object and len(L["a"]) == len(L["t"]) and L["a"][-1].shape == (5,)
    log.append(t=11.0, a=np.ones(3))  # a checkpoint part with the ragged rows
    z = read_log(tmp_path, allow_pickle=True)
    assert z["a"].dtype == object and len(z["a"]) == len(z["t"]) and z["a"][-1].shape == (5,)


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path, monkeypatch):
    """An exception between the temporary file and the rename leaves the previous file intact and no
    temporary file behind."""
    from cmstack.sim import logger as lg

    target = tmp_path / "metrics.json"
    lg.atomic_write(target, '{"ok": true}')

    def boom(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(lg.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        lg.atomic_write(target, '{"ok": false, "half')
    assert json.loads(target.read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_interrupt_in_process_exits_130_with_one_line(tmp_path, capsys):
    """Row 4: Ctrl-C during a run used to print a 40-line KeyboardInterrupt traceback."""
    import argparse

    from cmstack.scenarios._common import add_run_arguments, execute

    def run(ctx):
        for k in range(100000):
            ctx.logger.append(t=k * 1e-3)
            if k == 1500:
                os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1e-4)
        raise AssertionError("the loop was not stopped")

    (tmp_path / "d.toml").write_text("duration = 1.0\n")
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    args = ap.parse_args(["--out", str(tmp_path / "r"), "--config", str(tmp_path / "d.toml")])
    rc = execute("mine", run, args, defaults=tmp_path / "d.toml")
    err = capsys.readouterr().err
    assert rc == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted at t = ") and "Traceback" not in err, err
    assert lines[0].endswith(f"(SIGINT); the run so far is in {tmp_path / 'r'}")
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    t_stop = float(m["reason"].split("t = ")[1].split(" s")[0])
    assert m["ok"] is False and t_stop >= 1.5 and m.get("interrupted") is True
    with np.load(tmp_path / "r" / "log.npz") as z:
        assert z["t"][-1] == pytest.approx(t_stop, abs=1e-3)
    assert m["failed_targets"] == [] and m["not_evaluated"] == []


def test_stopped_run_publishes_only_complete_plots(tmp_path):
    """A run stopped inside a savefig leaves a truncated PNG in the staging folder: it is dropped,
    the complete ones are moved into plots/, the staging folder is removed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cmstack.scenarios._common import STAGING, _publish_plots

    stage = tmp_path / STAGING
    stage.mkdir()
    fig = plt.figure()
    fig.savefig(stage / "done.png")
    plt.close(fig)
    data = (stage / "done.png").read_bytes()
    (stage / "cut.png").write_bytes(data[: len(data) // 2])
    _publish_plots(tmp_path, [], complete_only=True)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["done.png"]
    assert not stage.exists()
