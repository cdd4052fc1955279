"""models/_kernel_cache.py: a kernel module's numba cache is dropped when a module it calls changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cmstack.models._kernel_cache import cache_files, depends_on


def _touch(p: Path, t: float) -> None:
    p.write_text(p.read_text() if p.exists() else "x = 1\n")
    os.utime(p, (t, t))


def test_cache_dropped_only_when_a_dependency_is_newer(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    a, b, c = tmp_path / "kern_a.py", tmp_path / "kern_b.py", tmp_path / "kern_c.py"
    for p in (a, b, c):
        _touch(p, 1000.0)
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    files = [cache / "kern_a.step-10.py311.nbi", cache / "kern_a.step-10.py311.0.nbc"]
    other = cache / "kern_ab.step-3.py311.nbi"  # another module whose name starts alike: kept
    for p in files + [other]:
        _touch(p, 2000.0)
    depends_on(b, c)  # b calls c (transitive)
    assert depends_on(a, b) == 0 and all(p.exists() for p in files)  # cache newer than b and c
    _touch(c, 3000.0)  # c changed after a's cache was written
    assert depends_on(a, b) == 2 and cache_files(a) == [] and other.exists()
    assert depends_on(a, b) == 0  # nothing left to drop


def test_a_changed_callee_is_recompiled_into_its_caller(tmp_path):
    """End to end with numba: the caller's cached machine code follows its callee's new source."""
    pkg = tmp_path / "kpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "callee.py").write_text(
        "from numba import njit\n@njit(cache=True)\ndef f(x):\n    return x + 1.0\n"
    )
    (pkg / "caller.py").write_text(
        textwrap.dedent("""\
        from numba import njit
        from kpkg import callee
        from kpkg.callee import f
        from cmstack.models._kernel_cache import depends_on
        depends_on(__file__, callee)
        @njit(cache=True)
        def g(x):
            return 2.0 * f(x)
        """)
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    run = [sys.executable, "-c", "from kpkg.caller import g; print(g(1.0))"]
    assert subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout.strip() == "4.0"
    src = pkg / "callee.py"
    src.write_text(src.read_text().replace("x + 1.0", "x + 2.0"))
    later = max(p.stat().st_mtime for p in (pkg / "__pycache__").glob("caller.*")) + 10
    os.utime(src, (later, later))
    assert subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout.strip() == "6.0"
