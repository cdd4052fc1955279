"""A function run in a forked child process with a wall-clock limit, its (picklable) result returned: the child
inherits the test process's imports and loaded kernels (no interpreter start-up, no numba cache reload: ~8 s of a
fresh ``python -c`` child on a loaded 2-core machine), and a closed loop that stalls is killed at ``timeout``."""

from __future__ import annotations

import multiprocessing
import traceback


def _child(conn, fn, args) -> None:
    try:
        conn.send(("ok", fn(*args)))
    except BaseException:  # noqa: BLE001 -- the parent raises it, with the child's traceback
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_forked(fn, *args, timeout: float = 240.0):
    """``fn(*args)`` in a forked child; its result, or AssertionError with the child's traceback (it raised, died,
    or ran past ``timeout`` s and was killed)."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args), daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout):
            proc.kill()
            raise AssertionError(f"{fn.__name__} ran past {timeout} s in its child process (killed)")
        try:
            status, value = recv.recv()
        except EOFError:
            proc.join(5.0)
            raise AssertionError(
                f"{fn.__name__}: its child process died (exit code {proc.exitcode})"
            ) from None
    finally:
        recv.close()
        proc.join(5.0)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if status == "error":
        raise AssertionError(f"{fn.__name__} failed in its child process:\n{value}")
    return value
