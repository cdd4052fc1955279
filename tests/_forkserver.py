"""Python child processes for the tests, forked from a server that has already imported the stack.

A ``python -m cmstack.cli run ...`` child spends ~3 s of CPU starting (numba's cached kernels, scipy, pydantic,
Pinocchio, MuJoCo, matplotlib) against ~0.5 s simulating a short run.  ``run(argv, ...)`` takes the arguments of
``subprocess.run`` for a ``[sys.executable, (-W OPT)*, -m MODULE | SCRIPT.py, ARGS...]`` child and gives the same
``CompletedProcess`` (or ``TimeoutExpired``), but the child is forked from a long-lived server process of this
test worker, started once per (interpreter options, environment) with the same options and environment the child
asks for, which has imported the stack and loaded its compiled kernels from numba's cache.

What the forked child keeps from a fresh ``python`` child:
  - a process of its own per run: its own pid, memory (copy-on-write), exit code (``returncode``; ``-N`` when
    killed by signal N), a Python that runs the module as ``__main__`` with ``sys.argv``, ``sys.path[0]``,
    the working directory and the environment a fresh one would have, the interpreter's default signal
    handlers, numpy's and ``random``'s generators seeded afresh;
  - stdout and stderr captured separately, in full, decoded as ``subprocess`` decodes them (``text=True``);
  - the interpreter's exit: non-daemon threads joined, ``atexit`` handlers run, stdio flushed; an uncaught
    exception prints its traceback and exits 1, ``SystemExit`` its code, ``KeyboardInterrupt`` dies by SIGINT;
  - a wall-clock limit: at ``timeout`` the child is killed (SIGKILL) and ``subprocess.TimeoutExpired`` raised.
What it does not keep: a fresh interpreter's start (imports already done: a test that checks what a command
imports, the compile notice, the numba cache, an installed entry point, or signal delivery to a real child
keeps ``subprocess``).  Anything ``run`` does not handle (other interpreter options, ``input``/``stdin``,
other keywords, no ``fork``) goes to ``subprocess.run`` unchanged, as does every call with
``CMSTACK_TEST_FORKSERVER=0`` in the environment.  The first call with a given environment goes to
``subprocess.run`` too; the second starts a server for it (a server costs about a child's start, and one
environment used once gains nothing).
"""

from __future__ import annotations

import atexit
import io
import locale
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

_HERE = Path(__file__).resolve()
#: the modules a server imports before it forks (a scenario run's imports; every shipped scenario module)
PRELOAD = (
    "numpy",
    "scipy.linalg",
    "scipy.sparse",
    "scipy.spatial",
    "scipy.special",
    "numba",
    "pinocchio",
    "mujoco",
    "pydantic.main",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",
    "tqdm",
    "cmstack.cli",
    "cmstack.scenarios._common",
    "cmstack.scenarios.loader",
    "cmstack.scenarios.schemas",
    "cmstack.sim.viewer",
    "meshcat.geometry",  # replay.html (meshcat imports IPython, tornado, zmq)
    "meshcat.commands",
    "meshcat.path",
    "cmstack.sim.rt_records",
)
_MAX_SERVERS = 2  # per test process (each ~0.4 GB, shared copy-on-write with its children)
_HDR = struct.Struct("!I")
#: variables that change from test to test and that nothing reads at import: not part of a server's key (the
#: child gets the caller's whole environment all the same)
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})


# --------------------------------------------------------------------------------------------- the wire
def _send(sock: socket.socket, obj: object, fds: tuple[int, ...] = ()) -> None:
    data = pickle.dumps(obj)
    msg = _HDR.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [msg], list(fds))
    else:
        sock.sendall(msg)


def _recv_exact(sock: socket.socket, n: int, fds: list[int]) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk, got, _flags, _addr = socket.recv_fds(sock, n - len(buf), 4)
        fds.extend(got)
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _recv(sock: socket.socket) -> tuple[object, list[int]]:
    fds: list[int] = []
    (n,) = _HDR.unpack(_recv_exact(sock, _HDR.size, fds))
    return pickle.loads(_recv_exact(sock, n, fds)), fds


# --------------------------------------------------------------------------------------------- the server
_index_mtimes: dict[str, float] = {}


def _preload_kernels() -> int:
    """Load, from numba's cache, every compiled signature the cache holds for the stack's kernels (what a
    fresh child loads at its first call of each); the number loaded.  Nothing is compiled here: a signature
    missing from the cache is compiled by the child that calls it, as in a fresh process, and saved to the
    cache; the server calls this again before each fork, and loads what a child saved (an index file whose
    modification time changed), so that the next child loads it as a fresh one would."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import CPUDispatcher

    n = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("cmstack.") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if not isinstance(obj, CPUDispatcher) or getattr(obj, "_cache", None) is None:
                continue
            try:
                cache = obj._cache
                path = cache._cache_file._index_path
                try:
                    mtime = os.stat(path).st_mtime
                except FileNotFoundError:
                    continue
                if _index_mtimes.get(path) == mtime:
                    continue
                _index_mtimes[path] = mtime
                magic = obj.targetctx.codegen().magic_tuple()
                for key in cache._cache_file._load_index():
                    sig = key[0]
                    if key[1] != magic or tuple(sig) in obj.overloads:
                        continue
                    with global_compiler_lock, obj._compiling_counter:  # numba's own cache-hit path
                        cres = cache.load_overload(sig, obj.targetctx)
                        if cres is not None:
                            if not cres.objectmode:
                                obj.targetctx.insert_user_function(
                                    cres.entry_point, cres.fndesc, [cres.library]
                                )
                            obj.add_overload(cres)
                            n += 1
            except Exception:  # noqa: BLE001 -- a kernel not preloaded is loaded by the child, as fresh
                continue
    return n


def _warm_matplotlib() -> None:
    """One small figure drawn to memory and closed: matplotlib's font files, text metrics and mathtext parser are
    loaded into its caches (a fresh child fills them at its first plot; they are caches, nothing else changes)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 1)
    ax[0].plot([0.0, 1.0], [0.0, 1e-3], label=r"$\|\phi\|$ (m)")
    ax[0].set_yscale("log")
    ax[0].legend()
    ax[1].set_xlabel(r"$t$ (s)")
    ax[1].set_title("warm-up")
    fig.tight_layout()
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)


def _serve(fd: int) -> None:
    """The server's loop: import PRELOAD, load the kernels, then one forked child per request."""
    import importlib

    sock = socket.socket(fileno=fd)
    base_path = list(sys.path)
    for name in PRELOAD:
        importlib.import_module(name)
    import cmstack.scenarios.loader as loader

    for name in loader.shipped_scenarios():
        importlib.import_module(f"cmstack.scenarios.{name}")
    loaded = _preload_kernels()
    _warm_matplotlib()
    import gc

    gc.collect()
    gc.freeze()  # the preloaded objects out of the collector's sight: a child's collections do not touch (copy) them
    sys.stdout.flush()
    sys.stderr.flush()
    _send(sock, ("ready", os.getpid(), loaded, threading.active_count()))
    while True:
        try:
            req, fds = _recv(sock)
        except (EOFError, ConnectionError):
            os._exit(0)
        _preload_kernels()  # what the last children compiled and saved to the cache
        pid = os.fork()
        if pid == 0:
            sock.close()
            _child(req, fds, base_path)  # never returns
        for f in fds:
            os.close(f)
        _send(sock, ("pid", pid))
        _, status = os.waitpid(pid, 0)
        _send(sock, ("exit", os.waitstatus_to_exitcode(status)))


def _child(req: dict, fds: list[int], base_path: list[str]) -> None:
    """In the forked child: stdio, cwd, environment, sys.argv/sys.path as a fresh ``python`` sets them, then the
    module (or script) as ``__main__`` and the interpreter's exit."""
    code = 1
    try:
        out, err, nul = fds
        os.dup2(nul, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for f in (out, err, nul):
            os.close(f)
        os.chdir(req["cwd"])
        if req["umask"] >= 0:
            os.umask(req["umask"])
        os.environ.clear()
        os.environ.update(req["env"])
        import random

        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        import runpy

        if req["module"] is not None:
            sys.path[:] = [os.getcwd(), *base_path[1:]]
            sys.argv = ["-m", *req["args"]]
            sys.modules.pop(
                req["module"], None
            )  # as in a fresh `python -m`: the module runs once, as __main__
            runpy._run_module_as_main(req["module"], alter_argv=True)
        else:
            script = os.path.abspath(req["script"])
            sys.path[:] = [os.path.dirname(script), *base_path[1:]]
            sys.argv = [req["script"], *req["args"]]
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 -- as the interpreter does: the traceback, exit 1
        sys.excepthook(type(exc), exc, exc.__traceback__)
        if isinstance(exc, KeyboardInterrupt):
            code = -2
    _finish(code)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except Exception:  # noqa: BLE001
        pass
    return 1


def _finish(code: int) -> None:
    """The interpreter's exit: threads joined, atexit handlers, a last collection, stdio flushed; then exit."""
    import atexit
    import gc
    import signal

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:  # noqa: BLE001
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 -- Python exits 120 when it cannot flush stdout
            code = code or 120
    if code == -2:  # an uncaught KeyboardInterrupt: the interpreter dies by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


# --------------------------------------------------------------------------------------------- the client
class _Server:
    def __init__(self, flags: tuple[str, ...], env: dict[str, str]) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = parent
        log = open(os.devnull, "wb")  # noqa: SIM115 -- the server's own stdio: children dup theirs over it
        self.proc = subprocess.Popen(
            [sys.executable, *flags, "-c", f"import _forkserver; _forkserver._serve({child.fileno()})"],
            env=env,
            cwd=str(_HERE.parent),
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        child.close()
        msg, _ = _recv(self.sock)
        if not (isinstance(msg, tuple) and msg[0] == "ready"):
            raise RuntimeError(f"fork server did not start: {msg!r}")
        self.kernels, self.threads = msg[2], msg[3]

    def run(self, req: dict, timeout: float | None) -> tuple[int, bool]:
        """Fork one child for ``req`` (its stdio fds already in req['_fds']); (exit code, killed at timeout)."""
        fds = req.pop("_fds")
        _send(self.sock, req, fds)
        msg, _ = _recv(self.sock)
        assert msg[0] == "pid", msg
        pid = msg[1]
        self.sock.settimeout(timeout)
        killed = False
        try:
            msg, _ = _recv(self.sock)
        except TimeoutError:
            killed = True
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            self.sock.settimeout(None)
            msg, _ = _recv(self.sock)
        finally:
            self.sock.settimeout(None)
        assert msg[0] == "exit", msg
        return int(msg[1]), killed

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_servers: dict[tuple, _Server] = {}
_seen: set[tuple] = set()
_lock = threading.Lock()
_failed = False
_atexit_set: list = []
stats = {"forked": 0, "subprocess": 0}


def _parse(argv: list[str]) -> tuple[tuple[str, ...], str | None, str | None, list[str]] | None:
    """(interpreter flags, module, script, args) of a python command line this module can fork, else None."""
    if not argv or str(argv[0]) != sys.executable:
        return None
    flags: list[str] = []
    i = 1
    while i < len(argv):
        a = str(argv[i])
        if a == "-W" and i + 1 < len(argv):
            flags += [a, str(argv[i + 1])]
            i += 2
        elif a == "-m" and i + 1 < len(argv):
            return tuple(flags), str(argv[i + 1]), None, [str(x) for x in argv[i + 2 :]]
        elif a.startswith("-"):
            return None
        else:
            return tuple(flags), None, a, [str(x) for x in argv[i + 1 :]]
    return None


def _decode(data: bytes) -> str:
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


def run(
    argv, *, cwd=None, env=None, timeout=None, capture_output=False, text=False, check=False, umask=-1, **kw
):
    """``subprocess.run(argv, cwd=, env=, timeout=, capture_output=, text=, check=)`` for a python child
    (module docstring); anything else, and the first call with an environment, goes to subprocess.run."""
    global _failed
    parsed = _parse(list(argv))
    env = dict(os.environ if env is None else env)
    usable = (
        parsed is not None
        and not kw
        and capture_output
        and not _failed
        and hasattr(os, "fork")
        and hasattr(socket, "send_fds")
        and env.get("CMSTACK_TEST_FORKSERVER", "1") != "0"
        and os.path.isdir(cwd if cwd is not None else os.getcwd())
    )
    if usable:
        flags, module, script, args = parsed
        key = (flags, tuple(sorted((k, v) for k, v in env.items() if k not in _VOLATILE)))
        with _lock:
            if key not in _servers and key not in _seen:
                _seen.add(key)
                usable = False
    if not usable:
        stats["subprocess"] += 1
        if os.environ.get("CMSTACK_TEST_FORKSERVER_STATS"):
            with open(os.environ["CMSTACK_TEST_FORKSERVER_STATS"], "a", encoding="utf-8") as f:
                f.write(
                    f"subprocess: {list(map(str, argv))[:6]} kw={sorted(kw)} parsed={parsed is not None}\n"
                )
        return subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            capture_output=capture_output,
            text=text,
            check=check,
            umask=umask,
            **kw,
        )
    import tempfile

    with _lock:
        server = _servers.get(key)
        if server is None:
            try:
                server = _Server(flags, env)
            except Exception:  # noqa: BLE001 -- no server here: every call takes subprocess.run
                _failed = True
                stats["subprocess"] += 1
                return subprocess.run(
                    argv,
                    cwd=cwd,
                    env=env,
                    timeout=timeout,
                    capture_output=True,
                    text=text,
                    check=check,
                    umask=umask,
                )
            if not _servers and not _atexit_set:
                _atexit_set.append(atexit.register(close_all))
            if len(_servers) >= _MAX_SERVERS:
                _servers.pop(next(iter(_servers))).close()
            _servers[key] = server
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            nul = os.open(os.devnull, os.O_RDONLY)
            try:
                req = {
                    "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
                    "env": env,
                    "module": module,
                    "script": script,
                    "args": args,
                    "umask": umask,
                    "_fds": (out.fileno(), err.fileno(), nul),
                }
                code, killed = server.run(req, timeout)
            finally:
                os.close(nul)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    stats["forked"] += 1
    if text:
        stdout, stderr = _decode(stdout), _decode(stderr)
    if killed:
        raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
    done = subprocess.CompletedProcess(argv, code, stdout, stderr)
    if check:
        done.check_returncode()
    return done


def close_all() -> None:
    """Stop this process's servers (at exit; a server also stops when its test process's socket closes)."""
    with _lock:
        while _servers:
            _servers.popitem()[1].close()
    if os.environ.get("CMSTACK_TEST_FORKSERVER_STATS"):  # how many children were forked (measurements)
        with open(os.environ["CMSTACK_TEST_FORKSERVER_STATS"], "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {stats}\n")
