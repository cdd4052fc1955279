"""Issue 34: ``kill -9`` of either process of ``cmstack rt`` at a random moment (seeded) leaves a run
directory whose log covers the run up to at most 1 s before the kill (readable by ``read_log`` and the
viewer's ``load_run``), timing.json with the cycles run and a status and reason saying what ended the
run, that reason in metrics.json, and no process nor shared-memory segment behind (nor a resource
tracker's leak warning).  Each run is a child process with wall-clock limits; behaviour is asserted,
never a timing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

psutil = pytest.importorskip("psutil")

PROBE = '''"""crash probe: a two-link arm held by a PD law, for the kill tests of cmstack rt"""
from dataclasses import dataclass

import numpy as np

from cmstack.scenarios._common import Outcome
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.runner import simulate

NAME = "crash_probe"
XML = """<mujoco><option timestep="0.001"/><worldbody><body pos="0 0 1">
  <joint name="j1" type="hinge" axis="0 1 0" damping="0.1"/>
  <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="1"/>
  <body pos="0 0 -0.3"><joint name="j2" type="hinge" axis="0 1 0" damping="0.1"/>
  <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="1"/></body></body></worldbody>
  <actuator><motor joint="j1"/><motor joint="j2"/></actuator></mujoco>"""


@dataclass
class Info:
    ts: float  # the time of the state answered: names the step a logged row comes from
    err: np.ndarray


class PD:
    info = None

    def __call__(self, t, q, v):
        self.info = Info(ts=float(t), err=np.array(q) - 0.3)
        return -20.0 * (q - 0.3) - 2.0 * v


def run(ctx):
    path = ctx.out / "two.xml"
    path.write_text(XML)
    plant = MujocoPlant(str(path), ["j1", "j2"])
    plant.reset(np.zeros(2))
    res = simulate(plant, PD(), duration=ctx.cfg["duration"], control_dt=ctx.cfg["control_dt"],
                   log=ctx.logger, progress=False)
    return Outcome(metrics={"steps": float(res.steps)})
'''


class RtRun:
    """``cmstack rt`` on the probe in a child process; its output drained by threads."""

    def __init__(self, tmp_path: Path, transport: str):
        (tmp_path / "probe.py").write_text(PROBE)
        (tmp_path / "probe.toml").write_text("duration = 60.0\ncontrol_dt = 0.001\n")
        self.out = tmp_path / "run"
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "cmstack.cli", "rt", str(tmp_path / "probe.py"),
                "--config", str(tmp_path / "probe.toml"), "--out", str(self.out), "--transport", transport,
                "--no-html", "--no-compare", "--no-plots", "--max-misses", "100000",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        for pipe, lines in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
            t = threading.Thread(target=lambda p=pipe, ls=lines: ls.extend(iter(p.readline, "")), daemon=True)
            t.start()

    def text(self) -> str:
        return "".join(self.stdout[-40:]) + "".join(self.stderr[-40:])

    def running(self, cycles: int, timeout: float = 180.0) -> tuple[psutil.Process, list[str]]:
        """Wait until the controller has answered ``cycles`` states (its streamed record says so);
        returns the driver process and the shared-memory segments the controller maps."""
        me = psutil.Process(self.proc.pid)
        counter = self.out / ".rt" / "controller" / "loop.npy"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.text()
            try:
                if counter.is_file() and int(np.load(counter)[0]) >= cycles:
                    drv = [c for c in me.children() if c.cmdline() == me.cmdline()]
                    shm = sorted({m.path for m in me.memory_maps() if m.path.startswith("/dev/shm/")})
                    return drv[0], shm
            except (ValueError, OSError, IndexError, EOFError):  # (a file being made)
                pass
            time.sleep(0.05)
        raise AssertionError(f"the run did not reach {cycles} cycles:\n{self.text()}")

    def kill_after(self, victim: int, delay: float) -> float:
        time.sleep(delay)
        when = time.perf_counter()  # CLOCK_MONOTONIC: the clock of the driver's tick times
        os.kill(victim, signal.SIGKILL)
        return when


def gone(pids, timeout: float = 60.0) -> list[int]:
    """The pids still running (not zombies) after waiting up to ``timeout`` for them to end."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def check_log(out: Path, timing: dict, kill: float) -> dict:
    """The log (read_log and the viewer's loader) holds every cycle of timing.json, up to at most 1 s
    before the kill; returns it."""
    from cmstack.sim.logger import read_log
    from cmstack.sim.viewer import load_run

    L = read_log(out)
    a = np.load(out / "rt_timing.npz")
    n = timing["cycles"]
    assert n > 100 and len(L["t"]) == n and len(a["wall"]) == n, (n, len(L["t"]))
    np.testing.assert_array_equal(L["t"], a["t"])
    assert a["wall"][-1] >= kill - 1.0, f"the log ends {kill - a['wall'][-1]:.3f} s before the kill"
    assert L["plant_qpos"].shape == (n, 2) and np.all(np.isfinite(L["plant_qpos"]))
    assert np.allclose(np.diff(L["t"]), 1e-3)
    v = load_run(out)  # what cmstack view replays
    assert len(v["plant_qpos"]) == n and Path(str(v["mjcf_path"])).is_file()
    return L


@pytest.mark.parametrize("seed", [1])
def test_driver_killed_the_controller_names_it_and_keeps_the_run(tmp_path, seed):
    """kill -9 of the driver: the controller side sees it within a few periods, exits 3 naming the pid
    and the signal; log.npz holds every cycle the driver ran, timing.json the cycles and the status."""
    delay = np.random.default_rng(seed).uniform(0.0, 1.5)
    run = RtRun(tmp_path, "shm")
    try:
        drv, shm = run.running(300)
        pids = [run.proc.pid, drv.pid, *(c.pid for c in psutil.Process(run.proc.pid).children())]
        kill = run.kill_after(drv.pid, delay)
        code = run.proc.wait(timeout=180)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    time.sleep(0.5)
    said = run.text()
    assert code == 3, said
    assert not gone(pids), said
    assert shm and not any(os.path.exists(s) for s in shm), shm
    t = json.loads((run.out / "timing.json").read_text())
    assert t["status"] == "failed" and t["loop_ended_by"] == "driver died", t
    assert f"the driver process (pid {drv.pid})" in t["reason"] and "killed by SIGKILL" in t["reason"]
    assert t["driver_lost_after_last_state_ms"] > 0
    m = json.loads((run.out / "metrics.json").read_text())
    assert m["ok"] is False and "DriverDied" in m["reason"] and "SIGKILL" in m["reason"]
    assert (run.out / "error.txt").is_file() and (run.out / "log.npz").is_file()
    check_log(run.out, t, kill)
    assert not (run.out / ".rt").exists() and "leaked" not in said


@pytest.mark.parametrize("transport, seed", [("shm", 2), ("udp", 3)])
def test_controller_killed_the_driver_brakes_and_writes_the_record(tmp_path, transport, seed):
    """kill -9 of the controller process: the driver sees its parent gone at its next miss, brakes,
    writes the log (checkpoint parts, with the controller's streamed info fields aligned to the torque
    applied at each cycle), timing.json and metrics.json's reason, unlinks the shared memory and ends:
    no process, no segment, no leak warning."""
    delay = np.random.default_rng(seed).uniform(0.0, 1.5)
    run = RtRun(tmp_path, transport)
    try:
        drv, shm = run.running(300)
        pids = [run.proc.pid, drv.pid, *(c.pid for c in psutil.Process(run.proc.pid).children())]
        kill = run.kill_after(run.proc.pid, delay)
        run.proc.wait(timeout=60)
        left = gone(pids, timeout=120)  # the driver writes the record, then ends
    finally:
        run.proc.kill()
        for c in psutil.Process().children(recursive=True):  # (a driver left by a failed assertion)
            if c.pid != run.proc.pid and "cmstack.cli" in " ".join(c.cmdline()):
                c.kill()
    time.sleep(0.5)  # (the output threads read the last lines)
    said = run.text()
    assert not left, said
    if transport == "shm":
        assert shm and not any(os.path.exists(s) for s in shm), shm
    else:
        assert not shm
    assert "leaked" not in said and "Traceback" not in said, said
    assert (
        f"rt driver: the controller process (pid {run.proc.pid}) died" in said and "record is written" in said
    )
    t = json.loads((run.out / "timing.json").read_text())
    assert t["status"] == "stopped" and t["loop_ended_by"] == "controller process died", t
    assert f"the controller process (pid {run.proc.pid}) died" in t["reason"] and "brake" in t["reason"]
    assert t["controller_cycles"] > 0 and t["transport"] == transport
    m = json.loads((run.out / "metrics.json").read_text())
    assert m["ok"] is False and "the controller process" in m["reason"] and m["scenario"] == "crash_probe"
    assert not (run.out / "log.npz").exists() and (run.out / ".log.npz.parts").is_dir()
    L = check_log(run.out, t, kill)
    a = np.load(run.out / "rt_timing.npz")
    ans, stop = a["answers"].astype(int), t["stop_cycle"]
    assert (
        0 < stop < t["cycles"] - 1 and a["miss"][stop] == 1 and np.all(ans[stop + 1 :] == -1)
    )  # then braking
    assert a["wall"][stop] > kill  # seen after the kill, not before
    # the controller's info, streamed to the run directory, at the step whose torque was applied
    answered = ans >= 0
    np.testing.assert_allclose(L["ts"][answered], L["t"][ans[answered]], atol=1e-9)
    assert np.all(np.isnan(L["ts"][~answered])) and L["err"].shape == (t["cycles"], 2)
    assert not (run.out / ".rt").exists()


def test_process_ending_tells_a_live_process_from_a_killed_one():
    """process_ending (what both sides ask of the other): False for a live process (this one, a
    sleeping child), True once it is sent SIGKILL (zombie or not yet torn down) and once reaped."""
    from cmstack.sim.rt_driver import process_ending

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not process_ending(os.getpid()) and not process_ending(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        assert process_ending(child.pid)  # pending SIGKILL, exiting, or a zombie: never "alive"
    finally:
        child.kill()
        child.wait(timeout=30)
    assert process_ending(child.pid)  # reaped: no /proc entry


CONTROLLER_RAISES = """
import json, numpy as np
from pathlib import Path
from cmstack.sim.logger import Logger
from cmstack.sim.plant import MujocoPlant
from cmstack.sim.rt_loop import run_rt
from cmstack.sim.rt_driver import DriverSettings
exec(compile(Path("probe.py").read_text(), "probe.py", "exec"))   # XML and the PD law of the probe
Path("two.xml").write_text(XML)
plant = MujocoPlant("two.xml", ["j1", "j2"])
plant.reset(np.zeros(2))
class Fails(PD):
    n = 0
    def __call__(self, t, q, v):
        self.n += 1
        if self.n == 400:
            raise FloatingPointError("the law diverged")
        return super().__call__(t, q, v)
log, seen = Logger(), []
try:
    run_rt(plant, Fails(), duration=5.0, control_dt=1e-3, log=log, on_loop_end=seen.append,
           driver=DriverSettings(max_misses=100_000))
    raised = None
except FloatingPointError as exc:
    raised = str(exc)
rt = seen[0].rt
print(json.dumps(dict(raised=raised, rows=len(log), cycles=rt.driver.cycles, status=rt.driver.status,
                      reason=rt.driver.reason, ended_by=rt.loop.ended_by, answered=rt.loop.cycles,
                      t_last=float(log.arrays()["t"][-1]))))
"""


def test_a_controller_exception_keeps_the_cycles_run(tmp_path):
    """A controller that raises mid-run: the driver brakes, the cycles run are replayed into the log (was:
    an empty log), on_loop_end sees the run, and the exception is raised afterwards."""
    (tmp_path / "probe.py").write_text(PROBE)
    r = subprocess.run(
        [sys.executable, "-c", CONTROLLER_RAISES], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    o = json.loads(r.stdout.strip().splitlines()[-1])
    assert o["raised"] == "the law diverged" and o["ended_by"] == "error (FloatingPointError)"
    assert o["answered"] == 399 and o["status"] == "stopped" and "FloatingPointError" in o["reason"]
    assert o["rows"] == o["cycles"] >= 400 and o["t_last"] == pytest.approx((o["cycles"] - 1) * 1e-3)


def test_both_killed_the_streamed_records_make_the_log(tmp_path):
    """kill -9 of both processes at once (nobody left to write anything): the records both sides
    streamed to RUN_DIR/.rt/ make the log that read_log and the viewer's loader read, up to at most
    1 s before the kill, with the controller's info at each applied step; no process nor segment left."""
    from cmstack.sim.logger import read_log
    from cmstack.sim.viewer import load_run

    delay = np.random.default_rng(4).uniform(0.0, 1.5)
    run = RtRun(tmp_path, "shm")
    try:
        drv, shm = run.running(300)
        pids = [run.proc.pid, drv.pid, *(c.pid for c in psutil.Process(run.proc.pid).children())]
        time.sleep(delay)
        kill = time.perf_counter()
        os.kill(run.proc.pid, signal.SIGKILL)
        os.kill(drv.pid, signal.SIGKILL)
        run.proc.wait(timeout=60)
        left = gone(pids, timeout=60)
    finally:
        run.proc.kill()
        for c in psutil.Process().children(recursive=True):  # (a driver left by a failed assertion)
            if c.pid != run.proc.pid and "cmstack.cli" in " ".join(c.cmdline()):
                c.kill()
    assert not left
    assert shm and not any(os.path.exists(s) for s in shm), shm  # (the resource tracker removes it)
    assert not (run.out / "log.npz").exists() and not (run.out / ".log.npz.parts").exists()
    t = json.loads((run.out / "timing.json").read_text())  # as written when the driver started
    assert t["status"] == "running" and "both processes were killed" in t["reason"], t
    L = read_log(run.out)
    n = len(L["t"])
    wall = np.load(run.out / ".rt" / "driver" / "wall.npy")[:n]
    assert n > 300 and wall[-1] >= kill - 1.0, f"the log ends {kill - wall[-1]:.3f} s before the kill"
    assert np.allclose(np.diff(L["t"]), 1e-3) and L["plant_qpos"].shape == (n, 2) and L["tau"].shape == (n, 2)
    ans = np.load(run.out / ".rt" / "driver" / "answers.npy")[:n].astype(int)
    answered = ans >= 0
    assert answered.sum() > 300
    np.testing.assert_allclose(L["ts"][answered], L["t"][ans[answered]], atol=1e-9)
    v = load_run(run.out)  # what cmstack view replays
    assert len(v["plant_qpos"]) == n and Path(str(v["mjcf_path"])).is_file()


def test_a_run_refused_at_the_start_leaves_no_placeholder(tmp_path):
    """A run refused when the driver is about to start (here: 1 cycle) is one ConfigError line and exit 2;
    the timing.json written at that moment (status running) and the records' folder are removed."""
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "probe.toml").write_text("duration = 60.0\ncontrol_dt = 0.001\n")
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "cmstack.cli", "rt", str(tmp_path / "probe.py"),
         "--config", str(tmp_path / "probe.toml"),
         "--duration", "0.001", "--out", str(out), "--no-html", "--no-compare", "--no-plots"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2 and "an rt run needs at least 2 cycles" in r.stderr, r.stderr[-2000:]
    assert (
        (out / "metrics.json").is_file() and not (out / "timing.json").exists() and not (out / ".rt").exists()
    )
