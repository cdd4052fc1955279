"""One line on stderr when numba compiles a group of cmstack's kernels, so that a first run after an
install or an upgrade does not sit silently at a 0 % progress bar.

numba fires its ``"numba:compile"`` event only on a cache miss (``Dispatcher.compile``: an overload
found in ``__pycache__`` is loaded without the event), so the line appears exactly when machine code is
being built, and never on a warm cache.  One line per outermost kernel and process (the callees it
compiles with it are part of that line); kernels that compile in about a second stay silent.
``python -m cmstack.warmup`` says one line of its own instead (``say_once_instead``).  Installed when a
kernel module imports this one (``install()``, idempotent).  ``CMSTACK_QUIET_COMPILE=1`` in the environment
silences every line (the test suite sets it for its child processes).
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: outermost kernel (module.function) -> (what is compiled, about how long on a cold cache, s).  The times
#: are wall seconds on 2 idle cores, scaled from a cold ``python -m cmstack.warmup`` with each outermost
#: compile's CPU time recorded (load 12-14: 202 s CPU in all; uk_step 40 s, pidc_closed_step 46 s, the
#: tensor chain's rk4 38 s and project 9 s, TITOP's forward_dynamics 28 s, dac_law3_step 16 s,
#: closure_pass 9 s; every other outermost compile under 6 s) by the first flagship run's compile
#: time at load 1.5 (22 s first run, ~3 s warm: ~20 s for the UK step and its callees).  A busy machine
#: takes longer.  Kernels not listed (about a second or less each) compile without a line.
ENTRY_POINTS: dict[str, tuple[str, float]] = {
    "cmstack.controllers._uk_kernels.uk_step": ("the control-step kernels for UK", 15.0),
    "cmstack.controllers._pidc_kernels.pidc_closed_step": ("the closed-chain step kernels for PIDC", 15.0),
    "cmstack.models._tensor_kernels.rk4": ("the tensor chain's dynamics kernels", 15.0),
    "cmstack.models._tensor_kernels.project": ("the tensor chain's projection kernel", 4.0),
    "cmstack.models._titop_kernels.forward_dynamics": ("the TITOP sweeps", 10.0),
    "cmstack.controllers.kernels.dac_law3_step": ("the control-step kernel for DAC law III", 6.0),
    "cmstack.models._loop_kernels.closure_pass": ("the loop-closure kernels", 4.0),
    "cmstack.models._lie_kernels.quat_mul_batch": ("the quaternion kernels", 2.0),
}
#: below this estimate (s) a kernel compiles without a line
SILENT_BELOW_S = 2.0

_installed = False
_quiet = False
_said: set[str] = set()
_depth = 0
_instead: str | None = None  # one line said at the first compile instead of the per-kernel lines


def quiet(flag: bool = True) -> None:
    """Silence (or restore) every line in this process (e.g. a second process of the warm-up)."""
    global _quiet
    _quiet = flag


def say_once_instead(text: str | None) -> None:
    """At the first compile in this process say ``text`` (once), and no per-kernel line after it
    (``cmstack.warmup``, which compiles them all); None restores the per-kernel lines."""
    global _instead
    _instead = text


def message(what: str, seconds: float) -> str:
    """The line for one group: what, about how long, and that it happens once."""
    return (
        f"cmstack: compiling {what} (first run after install, ~{seconds:.0f} s; cached afterwards; "
        "python -m cmstack.warmup compiles them all) ..."
    )


def _entry(dispatcher: Any) -> tuple[str, tuple[str, float]] | None:
    fn = getattr(dispatcher, "py_func", None)
    if fn is None:
        return None
    key = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__name__', '')}"
    return (key, ENTRY_POINTS[key]) if key in ENTRY_POINTS else None


def _say(text: str) -> None:
    try:
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)  # above a progress bar, if one is drawn
    except Exception:  # tqdm missing or the stream closed: plain print
        print(text, file=sys.stderr, flush=True)


def _on_start(dispatcher: Any) -> None:
    global _depth
    _depth += 1
    if _depth != 1 or _quiet or os.environ.get("CMSTACK_QUIET_COMPILE", "") not in ("", "0"):
        return
    if _instead is not None:
        if "*" not in _said:
            _said.add("*")
            _say(_instead)
        return
    g = _entry(dispatcher)
    if g is None:
        return
    key, (what, seconds) = g
    if key in _said or seconds < SILENT_BELOW_S:
        return
    _said.add(key)
    _say(message(what, seconds))


def _on_end() -> None:
    global _depth
    _depth = max(0, _depth - 1)


def install() -> None:
    """Listen to numba's compile events (once per process)."""
    global _installed
    if _installed:
        return
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            _on_start((ev.data or {}).get("dispatcher"))

        def on_end(self, ev: Any) -> None:
            _on_end()

    event.register("numba:compile", _Listener())
    _installed = True


install()
