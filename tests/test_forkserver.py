"""tests/_forkserver.py: a forked child gives what a fresh ``python`` child gives (exit code, stdout and stderr
apart, cwd, environment, sys.argv/sys.path, umask, uncaught exceptions, signals), a child past its time limit is
killed, and what it cannot fork goes to subprocess.run.  Each case is compared with a real child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import _forkserver
import pytest

SCRIPT = """
import os, sys
print("argv", sys.argv[1:], "path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
print("cwd", os.getcwd(), "env", os.environ.get("PYTEST_CURRENT_TEST"), "umask", oct(os.umask(0)))
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "message":
    sys.exit("a message")
if mode == "raise":
    raise ValueError("boom")
if mode == "kill":
    sys.stdout.flush()
    os.kill(os.getpid(), int(sys.argv[2]))
if mode == "interrupt":
    raise KeyboardInterrupt
if mode == "sleep":
    import time
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    d = tmp_path_factory.mktemp("fs")
    (d / "probe.py").write_text(SCRIPT, encoding="utf-8")
    (d / "work").mkdir()
    return d / "probe.py"


# the environment and interpreter options of tests/_cli.py's children: this worker's server serves both
ENV = dict(os.environ, MPLBACKEND="Agg")
W = ["-W", "ignore::UserWarning"]


def _both(script, *args, **kw):
    env = dict(ENV, PYTEST_CURRENT_TEST=os.environ["PYTEST_CURRENT_TEST"])  # this test's name: passed on
    argv = [sys.executable, *W, str(script), *args]
    opts = dict(capture_output=True, text=True, cwd=script.parent / "work", env=env, timeout=60, **kw)
    _forkserver.run(argv, **opts)  # the first call with an environment starts no server
    n = _forkserver.stats["forked"]
    forked = _forkserver.run(argv, **opts)
    assert _forkserver.stats["forked"] == n + 1, "not forked"
    return forked, subprocess.run(argv, **opts)


@pytest.mark.parametrize(
    "args",
    [["ok"], ["exit", "3"], ["message"], ["raise"], ["kill", str(int(signal.SIGTERM))], ["interrupt"]],
    ids=["ok", "exit3", "message", "raise", "sigterm", "keyboardinterrupt"],
)
def test_forked_child_behaves_as_a_fresh_one(script, args):
    forked, fresh = _both(script, *args, umask=0o027)
    assert forked.returncode == fresh.returncode, (forked, fresh)
    assert forked.stdout == fresh.stdout, (forked.stdout, fresh.stdout)
    # a traceback's last line, the message or nothing: the same (the frames above differ by runpy's)
    assert forked.stderr.splitlines()[:1] == fresh.stderr.splitlines()[:1] == ["to stderr"]
    assert forked.stderr.strip().splitlines()[-1] == fresh.stderr.strip().splitlines()[-1]
    assert {"ok": 0, "exit": 3, "message": 1, "raise": 1, "kill": -15, "interrupt": -2}[
        args[0]
    ] == forked.returncode


def test_module_run_as_main_and_killed_past_its_time_limit(script, tmp_path):
    forked, fresh = _both(script, "ok")
    assert "argv ['ok'] path0 True" in forked.stdout and "umask" in forked.stdout
    assert f"env {os.environ['PYTEST_CURRENT_TEST']}" in forked.stdout
    argv = [sys.executable, *W, "-m", "cmstack.cli", "config", "slider_crank"]
    for _ in range(2):
        r = _forkserver.run(argv, capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=60)
        assert r.returncode == 0 and "kp = 2500.0" in r.stdout and r.stderr == "", r
    t = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        _forkserver.run(
            [sys.executable, *W, str(script), "sleep", "60"],
            capture_output=True,
            text=True,
            cwd=script.parent,
            env=ENV,
            timeout=1.0,
        )
    assert time.monotonic() - t < 30  # killed, not waited for


def test_what_it_cannot_fork_goes_to_subprocess(tmp_path):
    n = _forkserver.stats["subprocess"]
    r = _forkserver.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True, timeout=60)
    assert r.stdout == "1\n" and _forkserver.stats["subprocess"] == n + 1
