"""How a campaign's variants run, each in its own process: one variant (``run_job``, its ``result.json``
and the record of a process that died), the local pool of forked processes (``run_local``), and a Dask
cluster (``run_dask``), whose tasks fork their variant from a fork server of the worker thread
(``run_job_forked``) or start a fresh interpreter (``run_job_subprocess``)."""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from cmstack.campaign.spec import Spec, Variant, _dumps, _jsonable
from cmstack.models.errors import ConfigError
from cmstack.scenarios.loader import load_scenario
from cmstack.sim.logger import atomic_write  # the one atomic write (temporary file, fsync, rename)

RESULT = "result.json"


# ------------------------------------------------------------------------------------- one variant
def make_job(spec: Spec, v: Variant, out: Path) -> dict:
    """Everything a worker needs to run one variant (JSON-serialisable)."""
    return dict(
        campaign=spec.name,
        scenario=spec.scenario,
        id=v.id,
        index=v.index,
        hash=v.hash,
        swept=_jsonable(v.swept),
        overrides=_jsonable(v.overrides),
        run_dir=str((out / "variants" / v.id).resolve()),
        plots=spec.plots,
    )


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that started it dies (prctl PR_SET_PDEATHSIG), so that
    a killed campaign leaves no orphan still writing into a run directory."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(
            1, int(signal.SIGKILL), 0, 0, 0
        )  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def _record(
    job: dict, status: str, reason: str = "", metrics: dict | None = None, wall_s: float = float("nan")
):
    return dict(
        id=job["id"],
        index=job["index"],
        hash=job["hash"],
        status=status,
        reason=reason,
        swept=job["swept"],
        overrides=job["overrides"],
        metrics=metrics or {},
        wall_s=wall_s,
        host=socket.gethostname(),
        pid=os.getpid(),
    )


def run_job(job: dict) -> dict:
    """Run one variant in THIS process (a fresh one: the caller forks or spawns it); write its run
    directory and ``result.json`` atomically; return the record.  Never raises."""
    t0 = time.perf_counter()
    run_dir = Path(job["run_dir"])
    try:
        if run_dir.exists():  # a partial directory of a run that was killed
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        from cmstack.scenarios._common import run_scenario

        name, mod, defaults = load_scenario(job["scenario"])
        import inspect

        params = inspect.signature(run_scenario).parameters
        extra = {"html": False} if "html" in params else {}
        if "plots" in params:
            extra["plots"] = bool(job.get("plots", False))
        metrics, _ = run_scenario(
            name, mod.run, overrides=job["overrides"], out=run_dir, progress=False, defaults=defaults, **extra
        )  # no replay.html per variant: log.npz replays
        rec = _record(
            job,
            "ok" if metrics.get("ok") else "missed",
            "" if metrics.get("ok") else str(metrics.get("reason", "a target was missed")),
            metrics,
            time.perf_counter() - t0,
        )
    except BaseException as exc:  # noqa: BLE001 — a variant's failure is data, not the campaign's end
        rec = _record(
            job,
            "failed",
            f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500],
            wall_s=time.perf_counter() - t0,
        )
        try:
            (run_dir / "campaign_error.txt").write_text(traceback.format_exc())
        except OSError:
            pass
    atomic_write(run_dir / RESULT, _dumps(rec))
    return rec


def _child_main(job: dict) -> None:
    """Entry point of a forked local worker: die with the driver, send output to the run directory."""
    _die_with_parent()
    run_dir = Path(job["run_dir"])
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(run_dir.parent / f".{job['id']}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    run_job(job)


def _modules_file(job: dict) -> Path:
    return Path(job["run_dir"]).parent / f".{job['id']}.modules"


def _local_child(job: dict) -> None:
    """A local pool's variant (``_child_main``), then the names of the modules it imported lazily into
    ``_modules_file(job)``, for the driver to import before it forks the next ones (``learn_modules``)."""
    base = set(sys.modules)
    _child_main(job)
    try:
        _modules_file(job).write_text("\n".join(m for m in list(sys.modules) if m not in base))
    except OSError:
        pass


def learn_modules(names: str) -> bool:
    """Import, in a process that forks variants (the local pool's driver, a Dask fork server), the
    modules a finished variant imported lazily (numba and its cached kernels, scipy, matplotlib, the
    controllers: ~1.5 s of every YuMi variant otherwise), so that the next children start with them.
    A module that does not import here is skipped.  Returns False if an import started a Python thread:
    forking is then unsafe, and the caller must stop forking from this process or stop learning (the
    driver of a local pool only learns while it is single-threaded)."""
    import importlib

    for name in names.split():
        if name not in sys.modules and not name.startswith(("__", "_cy", "cmstack_user_scenario")):
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 — a module that will not import here is skipped
                pass
    return threading.active_count() == 1


def read_result(job: dict) -> dict | None:
    p = Path(job["run_dir"]) / RESULT
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return rec if rec.get("hash") == job["hash"] else None


def died(job: dict, how: str, output: str | None = None) -> dict:
    """The record of a variant whose process ended without writing its result; ``output``: what the
    process printed (default: its log file beside the run directory), whose last line is quoted."""
    if output is None:
        log = Path(job["run_dir"]).parent / f".{job['id']}.log"
        output = log.read_text(errors="replace") if log.is_file() else ""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    tail = f"; last output: {lines[-1][:300]}" if lines else ""
    return _record(job, "failed", f"worker process died ({how}){tail}")


def result_or_death(job: dict, how: str, output: str | None = None, wall_s: float | None = None) -> dict:
    """The variant's ``result.json`` if its process wrote one, else the record of its death (``died``),
    written atomically in its place.  Every executor ends a variant with this."""
    rec = read_result(job)
    if rec is None:
        rec = died(job, how, output)
        if wall_s is not None:
            rec["wall_s"] = wall_s
        Path(job["run_dir"]).mkdir(parents=True, exist_ok=True)
        atomic_write(Path(job["run_dir"]) / RESULT, _dumps(rec))
    return rec


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_job_subprocess(job: dict) -> dict:
    """Run one variant in a fresh ``python -m cmstack.campaign --child`` process and return its
    record (the Dask task: a variant that kills its process does not take the Dask worker with it)."""
    t0 = time.perf_counter()
    Path(job["run_dir"]).parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "cmstack.campaign", "--child"],
        input=json.dumps(job),
        text=True,
        capture_output=True,
    )
    rec = result_or_death(job, _exit_text(proc.returncode), proc.stderr or "", time.perf_counter() - t0)
    rec["task_wall_s"] = time.perf_counter() - t0
    return rec


# ------------------------------------------------------------------------------------- fork server
# A Dask task runs its variant in a process forked from a long-lived, single-threaded "fork server" of
# the task's worker thread, which has imported this module, cmstack.scenarios._common and the job's
# scenario (numpy, Pinocchio, MuJoCo, ProxSuite, ...) once: a child starts in milliseconds, as in the
# local pool, instead of a fresh interpreter importing everything again.
#
# Protocol (one JSON object per line; the worker's end is _ForkServer):
#   worker → server  {"job": JOB, "learn": BOOL}
#   server → worker  {"stale": true, "threads": BOOL}   (it will not fork: the code changed since it started,
#                                                        or a Python thread runs in it; it exits, ask a new one)
#                    | {"started": PID} then {"pid": PID, "code": EXIT}   (EXIT < 0: killed by signal −EXIT)
# The server forks one child per job and waits for it; the child runs _child_main(job) (result.json
# written atomically by run_job) and leaves with os._exit.  A server dies with the thread that started it
# (PR_SET_PDEATHSIG; the worker thread pool's threads live as long as the worker) and exits on EOF on its
# stdin, which the kernel gives it when the worker process is gone however it ended, killing its running
# child first; each child dies with the server in the same way.  So neither outlives the Dask worker.
_SERVE = "import sys; from cmstack.campaign.executors import _serve; _serve(int(sys.argv[1]))"


def _code_files() -> dict:
    """{file: mtime_ns} of the loaded cmstack modules (the package, shipped and user scenarios)."""
    out = {}
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) if name.startswith("cmstack") else None
        if f:
            try:
                out[f] = os.stat(f).st_mtime_ns
            except OSError:
                pass
    return out


def _stale(stamp: dict) -> bool:
    for f, m in stamp.items():
        try:
            if os.stat(f).st_mtime_ns != m:
                return True
        except OSError:
            return True
    return False


def _serve(parent: int) -> None:
    """The fork server's loop: ``python -c _SERVE WORKER_PID``, started by _ForkServer (see above).

    Before forking a job's child it has imported the job's scenario and resolved one config (pydantic
    schemas); after a child that ran to its end it imports the modules that child imported lazily
    (numba, scipy, matplotlib, the controllers, ... : about 1.5 s per YuMi variant otherwise), so that
    later children start with them.  An import that starts a Python thread would make forking unsafe:
    the server then exits (answering "stale") and the client starts one that learns nothing.  The only
    other threads are native BLAS pools, fork-safe as in the local pool's driver."""
    import select
    import signal

    _die_with_parent()
    if os.getppid() != parent:  # the thread that started us is already gone
        return
    rfd, wfd = os.dup(0), os.dup(1)  # the protocol's pipes, off fds 0 and 1: a child reads no job
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # and stray output goes to the worker's stderr, not the protocol
    buf = bytearray()

    def recv():
        while b"\n" not in buf:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                return None  # EOF: the worker closed our stdin, or is gone
            buf.extend(chunk)
        i = buf.index(b"\n")
        line = bytes(buf[:i])
        del buf[: i + 1]
        return json.loads(line)

    def send(obj) -> None:
        data = (json.dumps(obj) + "\n").encode()
        while data:
            data = data[os.write(wfd, data) :]

    def wait(pid: int, mfd: int):
        """(the child's exit code as subprocess gives it, what it wrote on ``mfd``), or None on EOF from
        the worker meanwhile."""
        try:
            pfd = os.pidfd_open(pid)  # Linux ≥ 5.3: readable when the child ends
        except (AttributeError, OSError):
            pfd = None
        out = bytearray()
        fds = [rfd, mfd] + ([] if pfd is None else [pfd])
        try:
            while True:
                r, _, _ = select.select(fds, [], [], 0.05 if pfd is None else None)
                if rfd in r:
                    chunk = os.read(rfd, 1 << 16)
                    if not chunk:
                        return None
                    buf.extend(chunk)
                if mfd in r:
                    chunk = os.read(mfd, 1 << 16)
                    out.extend(chunk)
                    if not chunk:
                        fds.remove(mfd)
                if pfd is None or pfd in r:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        if mfd in fds:  # what is left in the pipe (a grandchild may hold it open)
                            os.set_blocking(mfd, False)
                            try:
                                while chunk := os.read(mfd, 1 << 16):
                                    out.extend(chunk)
                            except BlockingIOError:
                                pass
                        return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
        finally:
            if pfd is not None:
                os.close(pfd)

    import cmstack.scenarios._common  # noqa: F401 — what every scenario needs
    from cmstack.scenarios._common import resolve_config

    stamp = _code_files()
    loaded: set = set()
    child = None
    me = os.getpid()
    try:
        while True:
            msg = recv()
            if msg is None:
                return
            job = msg["job"]
            if _stale(stamp) or threading.active_count() > 1:
                send({"stale": True, "threads": threading.active_count() > 1})
                return  # code changed under an editable install, or unsafe to fork
            if job["scenario"] not in loaded:
                loaded.add(job["scenario"])
                try:
                    name, _mod, defaults = load_scenario(job["scenario"])  # its children inherit the imports
                    resolve_config(name, overrides=job["overrides"], defaults=defaults)
                except Exception:  # noqa: BLE001 — the child imports it again and records the error
                    pass
                for f, m in _code_files().items():
                    stamp.setdefault(f, m)
            sys.stdout.flush()
            sys.stderr.flush()
            mr, mw = os.pipe()
            child = os.fork()
            if child == 0:  # the variant's process
                code = 70
                try:
                    os.close(rfd)
                    os.close(wfd)
                    os.close(mr)
                    _die_with_parent()
                    if os.getppid() == me:  # else the server died before prctl: do not run orphaned
                        base = set(sys.modules)
                        _child_main(job)
                        code = 0
                        new = "\n".join(m for m in list(sys.modules) if m not in base)
                        with os.fdopen(mw, "w") as fh:
                            fh.write(new)
                except BaseException:  # noqa: BLE001 — run_job records the variant's errors; this is ours
                    traceback.print_exc()
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            os.close(mw)
            try:
                send({"started": child})
                got = wait(child, mr)
            finally:
                os.close(mr)
            if got is None:
                return
            pid, child = child, None
            code, new = got
            send({"pid": pid, "code": code})
            if code == 0 and msg.get("learn", True):
                learn_modules(new)  # after the reply: this task is not delayed by it
                stamp.update({f: m for f, m in _code_files().items() if f not in stamp})
    except OSError:  # the worker is gone (broken pipe)
        return
    finally:
        if child is not None:  # never leave the variant behind
            try:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
            except OSError:
                pass


class _ForkServer:
    """The worker's end of one fork server: a ``python -c _SERVE`` child of the calling thread."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def send(self, obj) -> bool:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):  # broken pipe: it died
            return False

    def recv(self) -> dict | None:
        try:
            line = self.proc.stdout.readline()
        except (OSError, ValueError):
            return None
        return json.loads(line) if line.strip() else None

    def close(self) -> int:
        """Close its stdin (it exits at EOF), reap it; its exit code."""
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


_SERVERS = threading.local()  # one fork server per worker thread, started on its first task


def _server() -> _ForkServer:
    srv = getattr(_SERVERS, "server", None)
    if srv is None or srv.proc.poll() is not None:
        if srv is not None:
            srv.close()
        srv = _SERVERS.server = _ForkServer()
    return srv


def _drop_server() -> int | None:
    srv = getattr(_SERVERS, "server", None)
    _SERVERS.server = None
    return None if srv is None else srv.close()


def run_job_forked(job: dict) -> dict:
    """Run one variant in a process forked from this thread's fork server (started on first use) and
    return its record: the Dask task.  As with :func:`run_job_subprocess`, every variant has its own
    process, and one that dies (exit, signal) is recorded as failed without harming the Dask worker;
    a variant that kills the fork server itself is recorded as failed too ("fork server killed by
    SIGKILL") and the next task starts a new server.  Falls back to run_job_subprocess where there is
    no ``os.fork`` or no server can be started.

    Caveat: a server keeps the modules it imported.  It checks the modification times of the cmstack
    modules it loaded (scenario files included) before each job and is replaced when one changed, but
    an edit to another module (a third-party package, a helper module a scenario file imports) reaches
    the variants only through a new Dask worker; so does an edit to this client code, which the Dask
    worker imported once (as it did run_job_subprocess before).  The check costs one stat per loaded
    cmstack module per job.  Each server's warm-up (start, imports: a few seconds for YuMi) is paid once
    per worker thread."""
    if not hasattr(os, "fork"):
        return run_job_subprocess(job)
    t0 = time.perf_counter()
    Path(job["run_dir"]).parent.mkdir(parents=True, exist_ok=True)
    how = server_pid = None
    for _attempt in range(3):
        try:
            srv = _server()
        except OSError:
            break
        server_pid = srv.proc.pid
        r = srv.recv() if srv.send({"job": job, "learn": getattr(_SERVERS, "learn", True)}) else None
        if r is None or "started" not in r:  # gone while idle, or stale: the job did not start
            if r is not None and r.get("threads"):
                _SERVERS.learn = False  # a learned import started a thread: learn nothing more
            _drop_server()
            continue
        r = srv.recv()
        if r is None:  # the server died while the variant ran
            how = f"fork server {_exit_text(_drop_server())}"
        else:
            how = _exit_text(r["code"])
        break
    if how is None:
        return run_job_subprocess(job)
    rec = result_or_death(job, how, wall_s=time.perf_counter() - t0)
    rec["task_wall_s"] = time.perf_counter() - t0
    rec["fork_server_pid"] = server_pid
    rec["worker_pid"] = os.getpid()
    return rec


#: the function each Dask task runs (run_job_subprocess: a fresh interpreter per variant, as before the
#: fork server; bench.campaign --dask-fresh compares the two)
DASK_TASK = run_job_forked


# ------------------------------------------------------------------------------------- executors
def run_local(jobs: list[dict], workers: int, on_result) -> None:
    """At most ``workers`` variants at once, each in a freshly forked process (the parent has imported
    the scenario, so a child starts in milliseconds; it builds its own MuJoCo/Pinocchio/ProxSuite
    objects).  After a variant that ran to its end, the driver imports the modules it loaded lazily
    (``learn_modules``), so that later children inherit them instead of importing them each (as long as
    the driver stays single-threaded, which forking needs).  A single-threaded loop waits on the
    process sentinels."""
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    pending = list(jobs)
    running: dict = {}
    learn = method == "fork" and threading.active_count() == 1
    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.pop(0)
                p = ctx.Process(target=_local_child, args=(job,), name=f"variant-{job['id']}")
                p.start()
                running[p.sentinel] = (p, job)
            for s in mp.connection.wait(list(running)):
                p, job = running.pop(s)
                p.join()
                mods = _modules_file(job)
                if learn and p.exitcode == 0 and mods.is_file():
                    learn = learn_modules(mods.read_text())
                mods.unlink(missing_ok=True)
                on_result(result_or_death(job, _exit_text(p.exitcode)))
    finally:
        for p, _ in running.values():  # interrupted (Ctrl-C): take the workers down with us
            p.kill()
            p.join()


def run_dask(jobs: list[dict], scheduler: str, on_result) -> None:
    """Submit every variant to an existing Dask distributed scheduler, each task running ``DASK_TASK``
    (run_job_forked); records come back as they finish."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--scheduler needs Dask distributed: pip install 'cmstack[cluster]'") from None
    try:
        client = Client(scheduler, timeout=20)
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"--scheduler {scheduler}: cannot connect ({type(exc).__name__}: {exc})") from None
    try:
        futs = {
            client.submit(
                DASK_TASK, job, key=f"cmstack-{job['campaign']}-{job['id']}-{os.getpid()}", pure=False
            ): job
            for job in jobs
        }
        for fut in as_completed(futs):
            job = futs[fut]
            try:
                rec = fut.result()
            except Exception as exc:  # noqa: BLE001 — the task itself failed (worker lost, …)
                rec = _record(job, "failed", f"Dask task failed: {type(exc).__name__}: {exc}")
            Path(job["run_dir"]).mkdir(parents=True, exist_ok=True)
            atomic_write(Path(job["run_dir"]) / RESULT, _dumps(rec))
            on_result(rec)
    finally:
        client.close()
