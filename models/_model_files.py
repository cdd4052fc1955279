"""Checks and captures shared by every model-file reader (URDF, MJCF, SRDF): the file exists and is
well-formed XML, and what C++ parsers print to file descriptor 2 is captured for a one-line error.

Its own module so that the readers (``models/robot.py``, ``models/mjcf.py``, the plants) share it without
importing each other (no import cycle, ``tests/test_import_cycles.py``)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from cmstack.models.errors import ModelFileError


def _check_xml(path: Path, kind: str) -> None:
    if not path.is_file():
        raise ModelFileError(
            f"{kind} file not found: {path}. Check the path (a relative path is taken from the current directory, else from the cmstack package)."  # noqa: E501
        )
    try:
        ET.parse(path)
    except ET.ParseError as exc:
        raise ModelFileError(f"{kind} file {path} is not well-formed XML: {exc}") from None


_T = TypeVar("_T")


def by_mujoco(step: Callable[[], _T], path: Path, what: str) -> _T:
    """``step()``, a MuJoCo call on the MJCF file ``path``; MuJoCo's refusal becomes a ModelFileError naming the file:
    "MJCF {path} could not be {what} by MuJoCo: {its message on one line}" (``what``: read, compiled)."""
    try:
        return step()
    except Exception as exc:
        raise ModelFileError(
            f"MJCF {path} could not be {what} by MuJoCo: {' '.join(str(exc).split())}"
        ) from None


@contextlib.contextmanager
def _captured_fd2() -> Iterator[list[str]]:
    """Capture what C++ code (urdfdom) writes straight to file descriptor 2 while the block runs: fd 2 is
    redirected into a temporary file (``os.dup``/``os.dup2``) and restored afterwards; the yielded list
    receives the captured text (one string) when the block ends."""
    out: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", errors="replace"))
