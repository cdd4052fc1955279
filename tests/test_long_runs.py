"""Long runs (issue 21, item 5): memory independent of the duration, Ctrl-C that returns, no figure
with --no-plots, the end-to-end real-time factor.  Behaviour only: the numbers (peak RSS, latency) are
measured by ``python -m bench.long_runs``, never asserted here.

* the logger streams its rows to checkpoint parts and keeps at most one interval in memory, reads them
  back chunk by chunk and assembles ``log.npz`` from them with the same arrays as the in-memory log;
* the YuMi's error metrics computed chunk by chunk (``ErrorStats``) equal the whole-array computation;
* a SIGINT to a long run (child process, wall-clock limit) writes the log and metrics with the reason;
* ``--no-plots`` builds no matplotlib figure in any scenario;
* a run killed before its final save (only ``.log.npz.parts/``) is read, replayed and written as HTML.
"""

from __future__ import annotations

import json
import re
import signal
import time

import numpy as np
import pytest
from _cli import spawn

from cmstack.sim.logger import Logger, parts_dir, read_log, read_log_rows


def _rows(k: int, rng) -> dict:
    return dict(t=k * 1e-3, a=rng.standard_normal(3), M=rng.standard_normal((2, 2)), n=k)


# ------------------------------------------------------------------------------------------- logger
def test_logger_keeps_one_interval_in_memory_and_saves_the_same_log(tmp_path):
    rng = np.random.default_rng(0)
    streamed = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=0.25)
    whole = Logger()  # no checkpoint: everything in memory (the reference)
    for log in (streamed, whole):
        log.meta.update(name="mine", joint_names=np.array(["a", "b"]))
    most = 0
    for k in range(4 * Logger.INITIAL_ROWS + 11):
        row = _rows(k, rng)
        streamed.append(**row)
        whole.append(**row)
        most = max(most, streamed.rows_in_memory)
    assert (
        most <= 251 and streamed.checkpoints == 16
    )  # one interval of 0.25 s at 1 ms (+ the row that closes it)
    assert whole.rows_in_memory == len(whole) == 4 * Logger.INITIAL_ROWS + 11
    S, W = streamed.arrays(), whole.arrays()
    assert set(S) == set(W) and all(np.array_equal(S[k], W[k]) for k in W)
    chunks = list(streamed.chunks(["t", "a"]))
    assert len(chunks) == 17 and all(set(c) == {"t", "a"} for c in chunks)
    assert np.array_equal(np.concatenate([c["a"] for c in chunks]), W["a"])
    assert np.array_equal(streamed.select(["M"])["M"], W["M"])
    streamed.put("p", np.arange(len(W["t"])) * 2.0)  # a whole series set after the loop
    whole.put("p", np.arange(len(W["t"])) * 2.0)
    streamed.save(tmp_path / "log.npz")
    whole.save(tmp_path / "ref.npz")
    assert not parts_dir(tmp_path / "log.npz").exists()
    a, b = read_log(tmp_path / "log.npz"), read_log(tmp_path / "ref.npz")
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in b)
    assert a["M"].shape == (len(a["t"]), 2, 2) and str(a["name"]) == "mine"


def test_logger_streamed_save_keeps_ragged_keys_and_leaves_out_dropped_ones(tmp_path):
    log = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=0.5)
    for k in range(1500):
        log.append(t=k * 1e-3, a=np.ones(3) * k if k < 1200 else np.ones(5) * k, x=float(k))
    log.drop("x")
    log.save(tmp_path / "log.npz", compress=False)
    z = read_log(tmp_path, allow_pickle=True)
    assert "x" not in z and len(z["a"]) == 1500 and z["a"].dtype == object
    assert z["a"][1199].shape == (3,) and z["a"][1200].shape == (5,) and z["a"][1499][0] == 1499


def test_extend_chunks_adds_series_per_chunk_and_stops_at_its_deadline(tmp_path):
    log = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=1.0)
    for k in range(3500):
        log.append(t=k * 1e-3, x=float(k))
    seen = []
    done, total = log.extend_chunks(lambda c: seen.append(len(c["t"])) or {"y": 2 * c["x"]})
    assert (done, total) == (4, 4) and seen == [1000, 1000, 1000, 500] and log.rows_in_memory == 0
    assert np.array_equal(read_log(tmp_path)["y"], 2 * np.arange(3500.0))  # in the parts already
    # a pass that stops part-way (its deadline passed): the series it added to some chunks only is not
    # read back from the parts (a later part lacks it), so nothing misaligned is ever replayed
    done, total = log.extend_chunks(lambda c: {"z": c["x"]}, deadline=time.monotonic() - 1.0)
    assert (done, total) == (0, 4)
    assert "z" not in read_log(tmp_path)
    assert log.extend_chunks(lambda c: {"w": c["x"]})[0] == 4
    first_only = parts_dir(tmp_path / "log.npz") / "000001.npz"
    with np.load(first_only) as z:
        part1 = {k: z[k] for k in z.files}
    part1["__series__"] = np.array([*part1["__series__"].tolist(), "v"])
    part1["v"] = np.zeros(1000)
    np.savez(first_only, **part1)  # "v" in the first part only: an unfinished pass
    got = read_log(tmp_path)
    assert "v" not in got and "w" in got and len(got["w"]) == 3500


def test_read_log_rows_reads_only_the_rows_asked_for(tmp_path):
    rng = np.random.default_rng(2)
    log = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=0.3)
    log.meta["mjcf_path"] = "m.xml"
    for k in range(2000):
        log.append(t=k * 1e-3, q=rng.standard_normal(4), F=rng.standard_normal((4, 4)))
    idx = np.array([0, 1, 299, 300, 301, 1234, 1999])
    ref = log.arrays()
    parts = read_log_rows(tmp_path, ["t", "F", "mjcf_path", "absent"], idx)  # from the parts
    assert set(parts) == {"t", "F", "mjcf_path"} and str(parts["mjcf_path"]) == "m.xml"
    on_disk = idx[idx < len(read_log(tmp_path)["t"])]  # the parts end at the last checkpoint (t = 1.8 s)
    assert len(on_disk) == 6 and np.array_equal(parts["F"], ref["F"][on_disk])
    assert np.array_equal(parts["t"], ref["t"][on_disk])
    for path, compress in (
        (tmp_path / "stored.npz", False),
        (tmp_path / "log.npz", True),
    ):  # the last removes the parts
        log.save(path, compress=compress)
        got = read_log_rows(path, ["q", "F"], idx)
        assert np.array_equal(got["q"], ref["q"][idx]) and np.array_equal(got["F"], ref["F"][idx])
        assert np.array_equal(read_log_rows(path, ["q"])["q"], ref["q"])


# ------------------------------------------------------------------------------------------- YuMi metrics
def test_error_stats_chunk_by_chunk_equal_the_whole_arrays():
    from cmstack.scenarios.yumi_dual_arm import ErrorStats, error_metrics

    rng = np.random.default_rng(3)
    n = 900
    t = np.arange(n) * 0.005
    decay = np.exp(-3 * t)[:, None]
    d = dict(
        e_c=rng.standard_normal((n, 6)) * decay,
        e_u=rng.standard_normal((n, 6)) * decay,
        p_D=rng.standard_normal((n, 3)),
        p_E1=rng.standard_normal((n, 3)),
        weld_violation=rng.random(n),
        loop_residual=rng.random(n),
    )
    tau = rng.standard_normal((n, 14)) * 30
    for thr, cuts in ((0.05, [137, 400, 401, 777]), (1e-9, [300, 600]), (10.0, [450])):
        above = np.flatnonzero(np.linalg.norm(d["e_u"], axis=1) >= thr)
        if thr == 0.05:  # the last row above the threshold closes a chunk
            cuts = sorted({*cuts, int(above[-1]) + 1})
        ref = error_metrics(
            t,
            d["e_c"],
            d["e_u"],
            d["p_D"],
            d["p_E1"],
            tau,
            d["weld_violation"],
            1.5,
            thr,
            loop_residual=d["loop_residual"],
        )
        st = ErrorStats(1.5, thr)
        for a, b in zip([0, *cuts], [*cuts, n]):
            st.add(t[a:b], {k: v[a:b] for k, v in d.items()}, tau[a:b])
        got = st.metrics()
        for k, v in ref.items():
            np.testing.assert_allclose(
                got[k], v, rtol=1e-9, atol=0, equal_nan=True, err_msg=f"{k} (thr {thr})"
            )
    assert ref["settling_time_s"] == 0.0  # thr 10: never above: settled from the start


@pytest.fixture(scope="module")
def yumi_run(tmp_path_factory):
    """One YuMi run of 3.3 s (four checkpoint chunks), with the logger's rows in memory recorded at
    every append and matplotlib's figures counted."""
    from cmstack.scenarios import yumi_dual_arm as yumi
    from cmstack.scenarios._common import run_scenario

    most, figures = [0], [0]
    mp = pytest.MonkeyPatch()
    append = Logger.append

    def counting_append(self, **kw):
        append(self, **kw)
        most[0] = max(most[0], self.rows_in_memory)

    mp.setattr(Logger, "append", counting_append)
    import matplotlib.figure

    init = matplotlib.figure.Figure.__init__

    def counting_init(self, *a, **k):
        figures[0] += 1
        init(self, *a, **k)

    mp.setattr(matplotlib.figure.Figure, "__init__", counting_init)
    try:
        out = tmp_path_factory.mktemp("yumi") / "run"
        m, _ = run_scenario(yumi.NAME, yumi.run, duration=3.3, out=out, html=True, plots=False)
    finally:
        mp.undo()
    return m, out, most[0], figures[0]


def test_a_run_holds_one_checkpoint_interval_of_rows(yumi_run):
    m, out, most, _ = yumi_run
    with np.load(out / "log.npz") as z:
        n = len(z["t"])
        assert n == 660 and z["frame__E1"].shape == (n, 4, 4) and z["q"].shape == (n, 14)
    assert 0 < most <= 201  # 1 s of 5 ms steps (+ the row that closes it), not the 660 rows


def test_streamed_metrics_equal_the_in_memory_path(yumi_run):
    """metrics.json (chunk by chunk) against the old whole-array computation on the saved log."""
    from cmstack.scenarios._common import resolve_config
    from cmstack.scenarios.yumi_dual_arm import error_metrics

    m, out, _, _ = yumi_run
    cfg = resolve_config("yumi_dual_arm", duration=3.3)
    L = read_log(out)
    ref = error_metrics(
        L["t"],
        L["e_c"],
        L["e_u"],
        L["p_D"],
        L["p_E1"],
        L["tau"],
        L["weld_violation"],
        cfg["converge_after"],
        cfg["settle_threshold"],
    )
    for k in (
        "constraint_error_initial",
        "task_error_initial",
        "constraint_error_converged",
        "task_error_converged",
        "settling_time_s",
        "max_torque_nm",
    ):
        assert m[k] == pytest.approx(ref[k], rel=1e-9, abs=0), k
    for i, c in enumerate("xyz"):
        assert m[f"position_offset_{c}_m"] == pytest.approx(ref["position_offset"][i], rel=1e-9, abs=0)


def test_end_to_end_realtime_factor_beside_the_loop_one(yumi_run):
    m, out, _, _ = yumi_run
    written = json.loads((out / "metrics.json").read_text())
    assert written["realtime_factor_end_to_end"] == pytest.approx(m["realtime_factor_end_to_end"])
    assert 0 < written["realtime_factor_end_to_end"] <= written["realtime_factor"]
    assert written["wall_s_end_to_end"] > 0


def test_no_plots_builds_no_figure_in_the_yumi_run(yumi_run):
    _, out, _, figures = yumi_run
    assert figures == 0 and not (out / "plots").exists() and (out / "replay.html").is_file()


SHORT = {
    "yumi_dual_arm": 0.05,
    "series_parallel": 0.1,
    "slider_crank": 1.1,
    "chain_open_loop": 0.05,
    "chain_task_space": 0.05,
    "balloon": 0.1,
    "closed_chain": 1.05,
}
#: the post-loop diagnostics that do not scale with ``duration`` (balloon: a 20 s undamped energy run and
#: 200 random states, 18 s of CI time; slider-crank: 10 s energy and 2 s comparison runs) shortened: the
#: same code paths (every plot the scenario draws when plots are on), a fraction of the time
SHORT_OVERRIDES = {
    "balloon": {"energy_duration": 0.2, "random_states": 4},
    "slider_crank": {"energy_duration": 0.2, "compare_duration": 0.2},
}


class FigureBuilt(RuntimeError):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHORT))
def test_no_plots_creates_no_matplotlib_figure(tmp_path, monkeypatch, name):
    import importlib

    import matplotlib.figure
    import matplotlib.pyplot as plt

    from cmstack.scenarios._common import run_scenario

    def refuse(*a, **k):
        raise FigureBuilt("a figure was built")

    monkeypatch.setattr(plt, "figure", refuse)
    monkeypatch.setattr(plt, "subplots", refuse)
    monkeypatch.setattr(matplotlib.figure.Figure, "__init__", refuse)
    mod = importlib.import_module(f"cmstack.scenarios.{name}")
    ov = SHORT_OVERRIDES.get(name)
    m, out = run_scenario(
        name, mod.run, duration=SHORT[name], overrides=ov, out=tmp_path / "off", html=False, plots=False
    )
    assert "error" not in m and not (out / "plots").exists()
    if name == "yumi_dual_arm":  # the patch does catch a figure when plots are on
        with pytest.raises(FigureBuilt):
            run_scenario(name, mod.run, duration=SHORT[name], out=tmp_path / "on", html=False, plots=True)


def test_diagnostics_stopped_by_the_deadline_say_what_they_cover(tmp_path, monkeypatch):
    """After an interrupt the YuMi's post-loop diagnostics stop at the deadline: the metrics say which
    span they cover, the diagnostic series (on some chunks only) stay out of log.npz, the states stay."""
    from cmstack.scenarios import yumi_dual_arm as yumi
    from cmstack.scenarios._common import run_scenario
    from cmstack.sim import interrupt

    monkeypatch.setattr(interrupt, "post_loop_deadline", lambda: time.monotonic() - 10.0)
    m, out = run_scenario(yumi.NAME, yumi.run, duration=2.2, out=tmp_path / "r", html=False, plots=False)
    assert "post-loop diagnostics stopped after 0 of 3 chunks" in m["reason"] and m["ok"] is False
    # and what was skipped (issue 33): the errors of the whole run, and the series left out of log.npz
    assert re.search(r"skipped: the coupling and task errors of the whole run \(2\.1\d\d s", m["reason"]), m[
        "reason"
    ]
    assert "the plant-vs-rigid" not in m["reason"]  # the rigid plant has no q̈ check to skip
    assert "(e_c, e_u, p_E1, p_D, frame__E1" in m["reason"] and "left out of log.npz" in m["reason"]
    assert np.isnan(m["constraint_error_initial"]) and np.isnan(m["task_error_converged"])
    z = read_log(out)
    assert len(z["plant_qpos"]) == len(z["t"]) == 440 and "e_c" not in z and "frame__E1" not in z


# ------------------------------------------------------------------------------------------- Ctrl-C


@pytest.mark.slow
def test_sigint_to_a_long_run_writes_log_and_metrics_with_the_reason(tmp_path):
    out = tmp_path / "run"
    p = spawn(
        ["run", "yumi_dual_arm", "--duration", "100000", "--no-plots", "--no-progress", "--out", str(out)],
        tmp_path,
    )
    try:
        first = parts_dir(out / "log.npz") / "000003.npz"
        t0 = time.monotonic()
        while not first.exists():  # 3 s simulated: the loop is well under way
            assert p.poll() is None, p.communicate()
            assert time.monotonic() - t0 < 240, "the loop never started"
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        _, stderr = p.communicate(timeout=120)  # the wall-clock limit of this test
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, stderr
    assert stderr.strip().startswith("interrupted at t = ") and "Traceback" not in stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["ok"] is False and m["interrupted"] is True and m["reason"].startswith("interrupted at t = ")
    assert "plots and replay.html skipped after the interrupt" in m["reason"]
    t_stop = float(m["reason"].split("t = ")[1].split(" s")[0])
    z = read_log(out)
    assert abs(z["t"][-1] - t_stop) < 1e-3 and len(z["plant_qpos"]) == len(z["t"])
    assert not parts_dir(out / "log.npz").exists() and not (out / "replay.html").exists()
    assert 0 < m["realtime_factor_end_to_end"] <= m["realtime_factor"]


# ------------------------------------------------------------------------------------------- kill -9
def test_a_killed_run_is_read_replayed_and_written_as_html_from_its_parts(tmp_path, yumi_run):
    """What a ``kill -9`` leaves (no log.npz, only .log.npz.parts/) is what `cmstack view` reads."""
    from cmstack.cli import main as cli_main
    from cmstack.sim.viewer import load_run

    _, out, _, _ = yumi_run
    L = read_log(out)
    killed = tmp_path / "killed"
    killed.mkdir()
    log = Logger(checkpoint=killed / "log.npz", checkpoint_every_s=1.0)
    log.meta["mjcf_path"] = str(L["mjcf_path"])
    for i in range(len(L["t"])):
        log.append(t=L["t"][i], plant_qpos=L["plant_qpos"][i], frame__E1=L["frame__E1"][i])
    del log  # never saved: the parts are all there is
    assert not (killed / "log.npz").exists() and parts_dir(killed / "log.npz").is_dir()
    got = load_run(killed)
    n = len(got["t"])  # everything up to the last checkpoint (t ≈ 3 s)
    assert 590 <= n < 660 and np.array_equal(got["plant_qpos"], L["plant_qpos"][:n])
    assert cli_main(["view", str(killed), "--html", str(tmp_path / "k.html")]) == 0
    html = (tmp_path / "k.html").read_text()
    assert "cmstack replay" in html and "frames" in html


def test_an_interrupted_run_too_long_to_assemble_keeps_its_parts(tmp_path, monkeypatch):
    """Past INTERRUPT_ASSEMBLE_MAX_PARTS an interrupted run leaves its log as the parts (what the
    loaders read) and says so; ``assemble`` writes the same log.npz later."""
    from cmstack.scenarios import _common
    from cmstack.sim.logger import assemble

    log = Logger(checkpoint=tmp_path / "log.npz", checkpoint_every_s=1.0)
    log.meta["mjcf_path"] = "m.xml"
    for k in range(3500):
        log.append(t=k * 1e-3, x=float(k))
    monkeypatch.setattr(_common, "INTERRUPT_ASSEMBLE_MAX_PARTS", 3)
    note = _common._save_interrupted(log, tmp_path)
    assert "not assembled (4 checkpoint parts)" in note and not (tmp_path / "log.npz").exists()
    assert np.array_equal(read_log(tmp_path)["x"], np.arange(3500.0))  # the tail was flushed too
    assemble(tmp_path)
    assert not parts_dir(tmp_path / "log.npz").exists()
    z = read_log(tmp_path)
    assert np.array_equal(z["x"], np.arange(3500.0)) and str(z["mjcf_path"]) == "m.xml"
    log2 = Logger(checkpoint=tmp_path / "b" / "log.npz", checkpoint_every_s=1.0)
    (tmp_path / "b").mkdir()
    for k in range(1500):
        log2.append(t=k * 1e-3, x=float(k))
    assert _common._save_interrupted(log2, tmp_path / "b") == "log.npz stored uncompressed"
    assert len(read_log(tmp_path / "b")["x"]) == 1500
