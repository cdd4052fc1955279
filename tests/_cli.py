"""The ``cmstack`` command line in a child process, as the tests run it: ``python -W ignore::UserWarning -m
cmstack.cli ARGV`` with MPLBACKEND=Agg (no display), its output captured as text.  ``cli`` forks the child from
this test process's fork server (tests/_forkserver.py: the stack imported once, ~3 s of CPU less per child);
``spawn`` starts a real interpreter (the interrupt tests send it signals and read its output as it comes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import _forkserver


def cli_argv(*argv: str, quiet: bool = True) -> list[str]:
    """The child's command line: ``cmstack`` with ``argv``; ``quiet``: Python's UserWarnings not printed."""
    return [sys.executable, *(["-W", "ignore::UserWarning"] if quiet else []), "-m", "cmstack.cli", *argv]


def cli(
    *argv: str, cwd: Path | str | None = None, timeout: float = 300, quiet: bool = True, **kw: Any
) -> subprocess.CompletedProcess:
    """Run ``cmstack ARGV`` in ``cwd`` to its end (at most ``timeout`` s: killed, subprocess.TimeoutExpired), in a
    child forked from the fork server; ``kw`` goes to subprocess.run (a keyword the fork server does not take
    sends the call there)."""
    return _forkserver.run(
        cli_argv(*argv, quiet=quiet),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, MPLBACKEND="Agg"),
        timeout=timeout,
        **kw,
    )


def spawn(argv: list[str], cwd: Path | str) -> subprocess.Popen:
    """Start ``cmstack ARGV`` in ``cwd`` without waiting (unbuffered; stdout and stderr piped, as text)."""
    return subprocess.Popen(
        cli_argv(*argv),
        cwd=cwd,
        env=dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
