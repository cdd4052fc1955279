"""Compilation is said (issue 33, item 2): one line on stderr when numba compiles a listed kernel (what, about
how long, that it happens once), nothing when the kernel is loaded from numba's cache, one line per kernel
and process however often it is called, none for the callees it compiles with it, and the warm-up's single
line instead of the per-kernel ones.  Each case runs in a fresh interpreter (numba's event listeners and
dispatchers are per process) with its own numba cache folder and a wall-clock limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

KERNELS = textwrap.dedent("""
    import numpy as np
    from numba import njit

    @njit(cache=True)
    def inner(x):
        return x * 2.0

    @njit(cache=True)
    def outer(x):
        return inner(x) + 1.0

    @njit(cache=True)
    def other(x):
        return x - 1.0
""")

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from cmstack.models import _compile_notice as N
    N.ENTRY_POINTS.update({
        "fh_kernels.outer": ("the outer kernel", 12.0),
        "fh_kernels.inner": ("the inner kernel", 5.0),
        "fh_kernels.other": ("a quick kernel", 0.5),
    })
    if len(sys.argv) > 2:
        N.say_once_instead("cmstack: compiling every control-step kernel once (~45 s) ...")
    import fh_kernels as K
    for _ in range(3):
        K.outer(1.0)
    K.other(1.0)
    K.inner(1.0)
    print("ran", K.outer(2.0))
""")


def _run(tmp_path, *extra):
    r = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), str(tmp_path), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **{k: v for k, v in os.environ.items() if k != "CMSTACK_QUIET_COMPILE"},  # conftest sets it
            "NUMBA_CACHE_DIR": str(tmp_path / "numba_cache"),
        },
    )
    assert r.returncode == 0, r.stderr
    assert "ran 5.0" in r.stdout
    return [line for line in r.stderr.splitlines() if line.strip()]


@pytest.fixture
def kernels(tmp_path):
    (tmp_path / "fh_kernels.py").write_text(KERNELS)
    (tmp_path / "script.py").write_text(SCRIPT)
    return tmp_path


def test_one_line_when_compiling_none_from_the_cache(kernels):
    cold = _run(kernels)
    assert cold == [
        "cmstack: compiling the outer kernel (first run after install, ~12 s; cached afterwards; "
        "python -m cmstack.warmup compiles them all) ..."
    ], cold  # outer once for three calls; inner compiled with it (no line); other below the threshold
    assert _run(kernels) == []  # the same kernels loaded from numba's cache: not a word


def test_quiet_in_the_environment_says_nothing(kernels):
    r = subprocess.run(
        [sys.executable, str(kernels / "script.py"), str(kernels)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, CMSTACK_QUIET_COMPILE="1", NUMBA_CACHE_DIR=str(kernels / "numba_cache")),
    )
    assert r.returncode == 0 and "ran 5.0" in r.stdout, r.stderr
    assert "cmstack: compiling" not in r.stderr  # compiled (a fresh cache), but silenced


def test_the_warm_up_says_one_line_instead(kernels):
    assert _run(kernels, "warmup") == ["cmstack: compiling every control-step kernel once (~45 s) ..."]
    assert _run(kernels, "warmup") == []


def test_every_announced_kernel_exists():
    """The table names real kernels (a renamed kernel would silently lose its line)."""
    import importlib

    from cmstack.models._compile_notice import ENTRY_POINTS

    for key, (what, seconds) in ENTRY_POINTS.items():
        mod, name = key.rsplit(".", 1)
        fn = getattr(importlib.import_module(mod), name)
        assert hasattr(fn, "py_func"), key  # a numba dispatcher
        assert what and seconds > 0
