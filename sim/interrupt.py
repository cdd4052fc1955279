"""Stop a run cleanly on SIGINT (Ctrl-C) or SIGTERM (``kill``).

While :func:`handle_signals` is active:

* the first signal only records a stop request.  A simulation loop asks :func:`requested` once per
  control step and ends early when it returns the signal's name; the scenario then summarizes what
  it has, within a bound: whatever the scenario does after the loop must end by
  :func:`post_loop_deadline` (``POST_LOOP_S`` after the signal), when SIGALRM raises
  :class:`Interrupted` in it (``post_loop_cut``) unless it is inside :func:`deferred`.  A scenario
  that can stop part-way (a post-loop pass chunk by chunk) checks the deadline itself and says what
  it left out.  A loop that never asks (a hand-written loop, a long computation) is stopped by
  raising :class:`Interrupted` in it after ``grace_s`` seconds of wall time;
* a second signal raises :class:`Interrupted` at once;
* inside :func:`deferred` (the final save) signals are only recorded, so the save completes.

:class:`Interrupted` derives from ``KeyboardInterrupt``: ``except Exception`` does not swallow it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal.

    Args:
        signame: "SIGINT" or "SIGTERM".
        reason: one line for the user (e.g. "interrupted at t = 0.420 s (SIGINT)"), once known.
        out: the run directory, once written.
    """

    def __init__(
        self,
        signame: str = "SIGINT",
        reason: str | None = None,
        out: str | Path | None = None,
        post_loop_cut: bool = False,
    ) -> None:
        super().__init__(reason or signame)
        self.signame, self.reason, self.out = signame, reason or f"interrupted ({signame})", out
        #: True when raised because the work after a stopped loop passed POST_LOOP_S
        self.post_loop_cut = post_loop_cut


#: wall seconds after the signal by which the work after a stopped loop (summaries, diagnostics) must
#: end; the final save (inside :func:`deferred`) and the exit follow, so a Ctrl-C returns within ~2 s
POST_LOOP_S = 1.2


class _State:
    signame: str | None = None  # the first signal received while handling, or None
    count: int = 0  # signals received
    t_signal: float | None = None  # time.monotonic() of the first signal
    seen: bool = False  # a loop has asked requested() since the first signal
    deferring: int = 0  # > 0 inside deferred()
    grace_s: float = 1.0
    active: bool = False


_S = _State()


def requested() -> str | None:
    """The name of the signal that asked the run to stop ("SIGINT"/"SIGTERM"), or None.  Loops call
    this once per step and end when it is not None."""
    if _S.signame is not None:
        deadline = post_loop_deadline()
        if not _S.seen and _S.active and deadline is not None and _in_main_thread():
            # a loop is stopping: what follows it has until the post-loop deadline
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, deadline - time.monotonic()))
        _S.seen = True
    return _S.signame


def post_loop_deadline() -> float | None:
    """The ``time.monotonic()`` instant by which the work after a loop stopped by a signal must end
    (``POST_LOOP_S`` after the signal), or None when no signal was received."""
    return None if _S.t_signal is None else _S.t_signal + POST_LOOP_S


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _S.count += 1
    if _S.signame is None:
        _S.signame, _S.t_signal = name, time.monotonic()
    if _S.deferring:
        return
    if _S.count >= 2:
        raise Interrupted(_S.signame)
    # give a cooperating loop grace_s to notice; otherwise SIGALRM raises in whatever is running
    signal.setitimer(signal.ITIMER_REAL, _S.grace_s)


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    if _S.signame is not None and not _S.deferring:
        raise Interrupted(_S.signame, post_loop_cut=_S.seen)


@contextmanager
def handle_signals(grace_s: float = 1.0) -> Iterator[_State]:
    """Install the SIGINT/SIGTERM handlers for the duration of the block (main thread only; elsewhere
    the block runs with the handlers it has).  Yields the state; ``state.signame`` tells whether a stop
    was requested."""
    if not _in_main_thread():
        yield _S
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    _S.signame, _S.count, _S.seen, _S.deferring, _S.grace_s, _S.active = None, 0, False, 0, grace_s, True
    _S.t_signal = None
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGALRM, _on_alarm)
    try:
        yield _S
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        for s, h in old.items():
            signal.signal(s, h)
        _S.active = False


@contextmanager
def deferred() -> Iterator[None]:
    """Inside this block a signal is recorded but raises nothing (used around the final save)."""
    _S.deferring += 1
    try:
        yield
    finally:
        _S.deferring -= 1


def reset() -> None:
    """Forget a recorded stop request (tests)."""
    _S.signame, _S.count, _S.seen, _S.t_signal = None, 0, False, None
