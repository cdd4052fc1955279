"""cmstack campaign: variants, failures (raise / process death), resume, SIGKILL data safety, Dask path."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _forkserver
import numpy as np
import pytest

from cmstack import campaign as C
from cmstack.models.errors import ConfigError

DATA = Path(__file__).parent / "campaign_data"


def _spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    """A spec beside a copy of the toy scenario (its scenario path is relative to the spec)."""
    for f in ("toy.py", "toy.toml"):
        (tmp_path / f).write_text((DATA / f).read_text())
    p = tmp_path / name
    p.write_text(text)
    return p


def _argv(*args) -> list[str]:
    return [sys.executable, "-m", "cmstack.cli", "campaign", *map(str, args), "--no-progress"]


def _cli(*args, timeout: float = 300, **kw):
    """``cmstack campaign ARGS`` to its end, killed after ``timeout`` wall-clock seconds."""
    return _forkserver.run(_argv(*args), capture_output=True, text=True, timeout=timeout, **kw)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_expand_grid_axes_random_seeds(tmp_path):
    p = _spec(
        tmp_path,
        """
[campaign]
scenario = "toy.py"
seeds = [3, 4]
samples = 3
sample_seed = 7
[base]
duration = 0.1
[axes.mode]
a = { damping = 0.5 }
b = { damping = 0.9, tol = 0.1 }
[grid]
gain = [2.0, 5.0]
[random]
sleep_s = { uniform = [0.0, 0.001] }
""",
    )
    s = C.load_spec(p)
    assert len(s.variants) == 2 * 2 * 3 * 2
    assert s.swept_keys == ["mode", "gain", "sleep_s", "seed"]
    v = s.variants[-1]
    assert v.swept["mode"] == "b" and v.swept["gain"] == 5.0 and v.swept["seed"] == 4
    assert v.overrides["damping"] == 0.9 and v.overrides["tol"] == 0.1 and v.overrides["duration"] == 0.1
    draws = sorted({x.swept["sleep_s"] for x in s.variants})
    assert len(draws) == 3 and all(0.0 <= d <= 0.001 for d in draws)
    # deterministic: the same spec gives the same variants (ids hash the overrides)
    assert [x.id for x in C.load_spec(p).variants] == [x.id for x in s.variants]
    assert len({x.id for x in s.variants}) == len(s.variants)


@pytest.mark.parametrize(
    "text, match",
    [
        ('[campaign]\nscenario = "toy.py"\n[grid]\ngian = [1.0]\n', "gian"),
        ('[campaign]\nscenario = "toy.py"\n[grid]\ngain = ["x"]\n', "gain"),
        ('[campaign]\nscenario = "toy.py"\nsamples = 2\n[random]\ngain = { beta = [1, 2] }\n', "gain"),
        ('[campaign]\nscenario = "toy.py"\n[sucess]\nx = "<= 1"\n', "sucess"),
        ("[campaign]\n[grid]\ngain = [1.0]\n", "scenario"),
    ],
)
def test_spec_errors_name_the_key(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        C.load_spec(_spec(tmp_path, text))


def test_failures_recorded_and_resume(tmp_path):
    """A variant that raises and one whose process calls os._exit are recorded as failed with their
    reason; the others finish; a second call runs nothing and writes the same campaign.csv."""
    p = _spec(tmp_path, (DATA / "toy_campaign.toml").read_text())
    out = tmp_path / "out"
    r = _cli(p, "--out", out, "--workers", 2)
    assert r.returncode == 1, r.stderr
    rows = _rows(out / "campaign.csv")
    assert len(rows) == 12
    by_mode = {m: [x for x in rows if x["mode"] == m] for m in ("fine", "raises", "dies")}
    assert all(x["status"] in ("ok", "missed") for x in by_mode["fine"])
    assert all(
        x["status"] == "failed" and x["reason"].startswith("RuntimeError: toy variant asked to raise")
        for x in by_mode["raises"]
    )
    assert all(
        x["status"] == "failed" and x["reason"] == "worker process died (exit code 7)"
        for x in by_mode["dies"]
    )
    # the toy's success is its own target final_error <= tol: gain 10 settles, gain 2 does not
    assert [x["success"] for x in by_mode["fine"]] == ["false", "false", "true", "true"]
    for x in by_mode["fine"]:
        m = json.loads((out / "variants" / x["id"] / "metrics.json").read_text())
        assert float(x["final_error"]) == m["final_error"]
        assert (out / "variants" / x["id"] / "config.toml").is_file()
    s = json.loads((out / "summary.json").read_text())
    assert (s["finished"], s["ok"], s["missed"], s["failed"]) == (12, 2, 2, 8)
    assert s["success_rate"] == pytest.approx(2 / 12)
    assert s["per_key"]["gain"]["10.0"]["success_rate"] == pytest.approx(2 / 6)
    assert (out / "plots" / "gain.png").is_file() and (out / "plots" / "mode.png").is_file()
    first = (out / "campaign.csv").read_text()

    s2 = C.run_campaign(p, out=out, workers=2, progress=False)
    assert s2["ran_this_call"] == 0 and s2["skipped_finished"] == 12
    assert (out / "campaign.csv").read_text() == first
    s4 = C.run_campaign(p, out=out, workers=2, progress=False, retry_failed=True, report_only=True)
    assert s4["ran_this_call"] == 0 and (out / "campaign.csv").read_text() == first
    s3 = C.run_campaign(p, out=out, workers=2, progress=False, retry_failed=True)
    assert s3["ran_this_call"] == 8


def test_local_pool_children_inherit_what_earlier_variants_imported(tmp_path):
    """The local pool's driver imports the modules a finished variant imported lazily (learn_modules), so
    later children start with them: with one worker, the first variant imports the probe module itself,
    the next ones find it loaded.  A module that starts a thread in the driver stops the learning (forking
    from a threaded process is unsafe): after it, a second probe is not learned."""
    (tmp_path / "probe_mod.py").write_text("X = 1\n")
    (tmp_path / "probe_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    )
    (tmp_path / "probe_after.py").write_text("Y = 2\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = _spec(
        tmp_path,
        '[campaign]\nscenario = "toy.py"\nseeds = 3\n[base]\nduration = 0.05\nlazy_import = "probe_mod"\n',
    )
    r = _cli(p, "--out", tmp_path / "a", "--workers", "1", env=env)
    assert r.returncode in (0, 1), r.stderr
    rows = sorted(_rows(tmp_path / "a" / "campaign.csv"), key=lambda x: int(x["index"]))
    assert [float(x["lazy_preloaded"]) for x in rows] == [0.0, 1.0, 1.0]
    assert not list((tmp_path / "a" / "variants").glob(".*.modules"))  # the lists are cleaned up
    p = _spec(
        tmp_path,
        '[campaign]\nscenario = "toy.py"\n[base]\nduration = 0.05\n'
        '[axes.m]\nt = { lazy_import = "probe_thread" }\nb1 = { lazy_import = "probe_after" }\n'
        'b2 = { lazy_import = "probe_after" }\n',
        name="spec2.toml",
    )
    r = _cli(p, "--out", tmp_path / "b", "--workers", "1", env=env)
    assert r.returncode in (0, 1), r.stderr
    rows = sorted(_rows(tmp_path / "b" / "campaign.csv"), key=lambda x: int(x["index"]))
    assert [x["status"] for x in rows] != ["failed"] * 3
    assert [float(x["lazy_preloaded"]) for x in rows] == [0.0, 0.0, 0.0]


def test_variant_plots_are_off_unless_the_spec_asks(tmp_path):
    """Campaign variants write no plots by default (drawing is most of a short run's cost), the same
    metrics either way; ``plots = true`` gives each variant its plots/; a non-boolean is refused, named."""
    base = '[campaign]\nscenario = "toy.py"\nseeds = 2\n{extra}[base]\nduration = 0.05\n'
    out = {}
    for extra in ("", "plots = true\n"):
        p = _spec(tmp_path, base.format(extra=extra), name=f"s{len(extra)}.toml")
        o = tmp_path / f"o{len(extra)}"
        C.run_campaign(p, out=o, workers=1, progress=False)
        out[bool(extra)] = o
    for with_plots, o in out.items():
        pngs = sorted(q.name for q in (o / "variants").glob("*/plots/*.png"))
        assert pngs == (["x.png", "x.png"] if with_plots else [])
    assert _rows(out[True] / "campaign.csv") == _rows(out[False] / "campaign.csv")
    with pytest.raises(ConfigError, match=r"\[campaign\] plots must be true or false, got 'yes'"):
        C.load_spec(_spec(tmp_path, base.format(extra='plots = "yes"\n'), name="bad.toml"))


def test_sigkill_halfway_then_resume_equals_uninterrupted(tmp_path):
    """Data safety: SIGKILL the campaign driver halfway, rerun it: campaign.csv equals that of an
    uninterrupted run, variant by variant (the killed workers die with the driver; their partial run
    directories are redone)."""
    text = """
[campaign]
scenario = "toy.py"
seeds = 3
metrics = ["final_error"]
[base]
sleep_s = 0.5
[grid]
gain = [2.0, 5.0, 10.0, 20.0]
"""
    p = _spec(tmp_path, text)
    ref = tmp_path / "ref"
    assert _cli(p, "--out", ref, "--workers", 2).returncode in (0, 1)

    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _argv(p, "--out", out, "--workers", 2),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        done = list(out.glob("variants/*/result.json"))
        if len(done) >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_done = len(list(out.glob("variants/*/result.json")))
    assert 5 <= n_done < 12, n_done
    r = _cli(p, "--out", out, "--workers", 2)
    s = json.loads((out / "summary.json").read_text())
    assert s["skipped_finished"] >= 5 and s["finished"] == 12, r.stderr
    assert _rows(out / "campaign.csv") == _rows(ref / "campaign.csv")
    assert (out / "campaign.csv").read_text() == (ref / "campaign.csv").read_text()


def test_dask_scheduler_path(tmp_path):
    """`--scheduler tcp://...` on a LocalCluster of 2 workers: a real scenario (a short YuMi variant whose
    override, the non-default strict law, must reach the remote run) and the toy's fine/raise/die variants,
    each recorded; the Dask workers survive the variant that kills its process.  Every variant is a fresh
    interpreter, so the specs are kept to one variant per behaviour: the toy spec with one seed and one
    gain (3 variants instead of 12; the local pool runs the full spec in test_failures_recorded_and_resume)."""
    distributed = pytest.importorskip("distributed")
    text = (DATA / "toy_campaign.toml").read_text()
    assert "seeds = 2\n" in text and "gain = [2.0, 10.0]\n" in text
    p = _spec(
        tmp_path,
        text.replace("seeds = 2\n", "seeds = 1\n").replace("gain = [2.0, 10.0]\n", "gain = [10.0]\n"),
        "toy_spec.toml",
    )
    y = tmp_path / "yumi.toml"
    y.write_text("""
[campaign]
scenario = "yumi_dual_arm"
seeds = 1
metrics = ["constraint_error_converged"]
[base]
duration = 0.05
[axes.law]
strict = { priority = "strict" }
""")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cl:
        r = _cli(p, "--out", tmp_path / "toy", "--scheduler", cl.scheduler_address)
        assert r.returncode == 1, r.stderr
        r2 = _cli(y, "--out", tmp_path / "yumi", "--scheduler", cl.scheduler_address)
        with distributed.Client(cl.scheduler_address) as client:
            assert len(client.scheduler_info()["workers"]) == 2
    rows = _rows(tmp_path / "toy" / "campaign.csv")
    assert sorted(x["mode"] for x in rows) == ["dies", "fine", "raises"]
    assert [x["status"] for x in rows if x["mode"] == "dies"] == ["failed"]
    assert all(x["reason"] == "worker process died (exit code 7)" for x in rows if x["mode"] == "dies")
    assert all(
        x["status"] == "failed" and x["reason"].startswith("RuntimeError: toy variant asked to raise")
        for x in rows
        if x["mode"] == "raises"
    )
    assert all(x["status"] != "failed" for x in rows if x["mode"] == "fine")
    yr = _rows(tmp_path / "yumi" / "campaign.csv")
    assert [x["law"] for x in yr] == ["strict"], r2.stderr
    for x in yr:
        assert x["status"] in ("ok", "missed"), x["reason"]
        m = json.loads((tmp_path / "yumi" / "variants" / x["id"] / "metrics.json").read_text())
        assert (
            m["priority"] == x["law"]
            and float(x["constraint_error_initial"]) == m["constraint_error_initial"]
        )


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a reparented one may wait long to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _toy_jobs(tmp_path: Path, text: str) -> list[dict]:
    s = C.load_spec(_spec(tmp_path, '[campaign]\nscenario = "toy.py"\n[base]\nduration = 0.05\n' + text))
    return [C.make_job(s, v, tmp_path / "out") for v in s.variants]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server: Linux")
def test_dask_fork_server_survives_its_variants(tmp_path):
    """On one Dask worker thread, one task after the other: a variant that calls os._exit is recorded as
    failed and the next one runs in the same fork server, each variant in its own process; a variant
    that kills the fork server is recorded as failed and the next one runs in a new server."""
    distributed = pytest.importorskip("distributed")
    jobs = _toy_jobs(
        tmp_path,
        '[axes.mode]\ndies = { crash = "exit" }\nfine = {}\n'
        'kills = { crash = "kill_parent" }\nafter = { gain = 5.0 }\n',
    )
    recs = []
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cl:
        for job in jobs:
            C.run_dask([job], cl.scheduler_address, recs.append)
    dies, fine, kills, after = recs
    assert dies["status"] == "failed" and dies["reason"] == "worker process died (exit code 7)"
    assert fine["status"] != "failed" and fine["fork_server_pid"] == dies["fork_server_pid"]
    assert fine["pid"] not in (fine["fork_server_pid"], fine["worker_pid"])
    assert (
        kills["status"] == "failed"
        and kills["reason"] == "worker process died (fork server killed by SIGKILL)"
    )
    assert after["status"] != "failed" and after["fork_server_pid"] != kills["fork_server_pid"]
    assert len({r["worker_pid"] for r in recs}) == 1
    assert C.read_result(jobs[0])["reason"] == dies["reason"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server: Linux")
def test_dask_fork_server_dies_with_its_worker(tmp_path):
    """A fork server dies when its Dask worker is SIGKILLed (the nanny starts a new worker) and when
    the LocalCluster closes."""
    distributed = pytest.importorskip("distributed")
    jobs = _toy_jobs(tmp_path, "[grid]\ngain = [2.0, 5.0]\n")
    recs = []

    def gone(pid: int) -> bool:
        deadline = time.time() + 60
        while _alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        return not _alive(pid)

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cl:
        C.run_dask(jobs[:1], cl.scheduler_address, recs.append)
        first = recs[0]["fork_server_pid"]
        assert _alive(first)
        os.kill(recs[0]["worker_pid"], signal.SIGKILL)
        assert gone(first)
        C.run_dask(jobs[1:], cl.scheduler_address, recs.append)
        second = recs[1]["fork_server_pid"]
        assert recs[1]["status"] != "failed" and second != first and _alive(second)
    assert gone(second)


def test_bad_scheduler_address_is_usage_error(tmp_path):
    p = _spec(tmp_path, '[campaign]\nscenario = "toy.py"\n')
    r = _cli(p, "--out", tmp_path / "o", "--scheduler", "localhost:1")
    assert r.returncode == 2 and "tcp://HOST:PORT" in r.stderr


@pytest.mark.parametrize(
    "name, n",
    [
        ("arena_yumi_bar", 4 * 5 * 4),
        ("breakdown_yumi_bar", 4 * 13 * 2),
        ("robust_yumi_virtual", 2 * 50),
        ("arena_series_parallel", 4 * 5 * 2),
    ],
)
def test_shipped_arena_specs_resolve(name, n):
    """The arena specs ship as package data, load by name, and every variant's config resolves."""
    s = C.load_spec(name)
    assert len(s.variants) == n and s.path.parent == C.shipped_dir()
    if name == "robust_yumi_virtual":
        assert s.success == {
            "constraint_error_converged": ("<=", 2e-4),
            "task_error_converged": ("<=", 0.0062),
            "qp_failures": ("<=", 0.0),
        }
        return
    assert list(s.axes) == ["law", "perturbation"]
    if name.startswith("breakdown"):
        assert s.breakdown_by == "law" and set(s.breakdown) == {"mass", "noise", "delay"}
        return
    allp = s.axes["perturbation"]["all"]
    assert allp == {
        "perturbation.mass_rel": 0.2,
        "perturbation.noise_q": 1e-4,
        "perturbation.noise_v": 1e-3,
        "perturbation.delay_steps": 1,
    }


def test_success_criteria_replace_the_scenario_targets(tmp_path):
    """[success] decides success from the metrics (a 'missed' run can succeed, a failed one never);
    the table's median and p95 are numpy's over the group's finished variants."""
    p = _spec(
        tmp_path,
        '[campaign]\nscenario = "toy.py"\nseeds = 4\nmetrics = ["final_error"]\n'
        '[success]\nfinal_error = "<= 0.2"\n',
    )
    s = C.load_spec(p)
    errs = [0.1, 0.3, 0.15]
    recs = {}
    for v, e in zip(s.variants, errs + [None]):
        st = "failed" if e is None else "missed"
        recs[v.id] = dict(
            id=v.id,
            index=v.index,
            hash=v.hash,
            status=st,
            reason="",
            swept=v.swept,
            overrides=v.overrides,
            metrics={} if e is None else {"final_error": e},
        )
    summ = C.summary(s, recs, {})
    assert summ["success_rate"] == 0.5 and summ["failed"] == 1
    g = summ["groups"][0]
    assert g["final_error_median"] == np.median(errs) and g["final_error_p95"] == np.percentile(errs, 95)
    assert [r["success"] for r in csv.DictReader(C.csv_text(s, recs).splitlines())] == [
        "true",
        "false",
        "true",
        "false",
    ]


def test_breakdown_point_per_label_and_family(tmp_path):
    """[breakdown]: per law, the largest level up to which every level holds (all seeds succeed); variants
    that set two families' keys belong to neither; a missing run makes the point provisional."""
    p = _spec(
        tmp_path,
        '[campaign]\nscenario = "toy.py"\nseeds = 2\nmetrics = ["final_error"]\n'
        "[axes.law]\na = { tol = 0.01 }\nb = { tol = 0.1 }\n"
        "[axes.level]\nd1 = { damping = 0.2 }\nd3 = { damping = 0.9 }\nd2 = { damping = 0.5 }\n"
        "g1 = { gain = 5.0 }\nboth = { damping = 0.1, gain = 1.0 }\n"
        '[success]\nfinal_error = "<= 0.2"\n'
        '[breakdown]\nby = "law"\ndamp = "damping"\ngain = "gain"\n',
    )
    s = C.load_spec(p)
    # law a: damping 0.2 and 0.5 hold, 0.9 fails in one seed; law b: 0.2 holds, 0.5 fails, 0.9 holds
    # (the scan stops at the first failure); "both" fails everywhere and must not count for either family
    bad = {("a", "d3", 1), ("b", "d2", 0), ("a", "both", 0), ("b", "both", 1)}
    recs = {}
    for v in s.variants:
        e = 0.5 if (v.swept["law"], v.swept["level"], v.swept["seed"]) in bad else 0.1
        recs[v.id] = dict(
            id=v.id,
            index=v.index,
            hash=v.hash,
            status="missed",
            reason="",
            swept=v.swept,
            overrides=v.overrides,
            metrics={"final_error": e},
        )
    bd = C.breakdown(s, recs)
    assert bd["a"]["damp"]["breakdown"] == 0.5 and bd["a"]["damp"]["first_fail"] == 0.9
    assert bd["b"]["damp"]["breakdown"] == 0.2 and bd["b"]["damp"]["first_fail"] == 0.5
    assert [row[:2] for row in bd["a"]["damp"]["levels"]] == [[0.2, 1.0], [0.5, 1.0], [0.9, 0.5]]
    assert bd["a"]["gain"] == dict(
        key="gain", breakdown=5.0, first_fail=None, complete=True, levels=[[5.0, 1.0, 2, 2]]
    )
    assert C.summary(s, recs, {})["breakdown"] == bd
    md = C.table_md(s, recs)
    assert "| a | 0.5 (fails at 0.9) | 5 (all tested levels hold) |" in md
    assert "| b | 0.2 (fails at 0.5) |" in md
    # law b, damping 0.2 fails in a seed: no level holds
    v0 = next(v for v in s.variants if v.swept["law"] == "b" and v.swept["level"] == "d1")
    recs[v0.id] = dict(recs[v0.id], status="failed", metrics={})
    assert C.breakdown(s, recs)["b"]["damp"]["breakdown"] is None
    assert "| b | none (fails at 0.2) |" in C.table_md(s, recs)
    # law a, one seed of damping 0.5 not run yet: 0.2 holds so far, the point is provisional
    v1 = next(v for v in s.variants if v.swept["law"] == "a" and v.swept["level"] == "d2")
    del recs[v1.id]
    pa = C.breakdown(s, recs)["a"]["damp"]
    assert pa["breakdown"] == 0.2 and pa["first_fail"] is None and not pa["complete"]
    assert "| a | ≥ 0.2 (runs pending) |" in C.table_md(s, recs)


def test_breakdown_by_must_be_an_axis(tmp_path):
    with pytest.raises(ConfigError, match="breakdown.*'lwa'"):
        C.load_spec(
            _spec(
                tmp_path,
                '[campaign]\nscenario = "toy.py"\n[axes.law]\na = { tol = 0.1 }\n'
                '[breakdown]\nby = "lwa"\nd = "damping"\n',
            )
        )
