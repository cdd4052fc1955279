"""mypy in a child process, as the typing tests run it: on the package copy ``tree`` (MYPYPATH), missing
imports ignored, followed imports silent, its cache in ``cache``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def mypy(
    *targets: str | Path, tree: Path, cache: Path, cwd: Path, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """``python -m mypy TARGETS`` (files, or ``-p``/``-m`` options and their names) in ``cwd``, its output as text."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(cache),
            *map(str, targets),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"MYPYPATH": str(tree), "PATH": "/usr/bin:/bin"},
        timeout=timeout,
    )
