"""Keep numba's disk cache honest across modules.

numba's ``cache=True`` keys each compiled function by the stamp (modification time, size) of the file that
defines it, and only that file.  A cached kernel that calls a kernel of another module has the callee's
machine code compiled into it; after that other module changes, the old machine code is loaded again: a
silent wrong answer (seen here: the chain's RK4 step kept an old SO(3) log after ``_lie_kernels`` changed).

``depends_on(__file__, dep, ...)``, called at import by a kernel module after importing its kernel
dependencies, drops the module's own cache files when a dependency's source (or, transitively, one of
the dependency's declared dependencies) is newer than the oldest of them, so numba compiles the module
afresh on first use.  Cache files live in ``__pycache__`` beside the source (numba's default when that
folder is writable); with ``NUMBA_CACHE_DIR`` set or a read-only install, nothing is found and nothing is
dropped (a fresh install writes every source anew, so its caches are rebuilt anyway).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

_DEPS: dict[Path, tuple[Path, ...]] = {}


def _newest_source(files: tuple[Path, ...], seen: set[Path]) -> float:
    """The latest modification time among ``files`` and, transitively, their declared dependencies."""
    newest = 0.0
    for f in files:
        if f in seen:
            continue
        seen.add(f)
        try:
            newest = max(newest, f.stat().st_mtime)
        except OSError:
            continue
        newest = max(newest, _newest_source(_DEPS.get(f, ()), seen))
    return newest


def cache_files(module_file: str | Path) -> list[Path]:
    """numba's index and data files of the functions defined in ``module_file`` (``__pycache__/<stem>.*``)."""
    src = Path(module_file).resolve()
    folder = src.parent / "__pycache__"
    if not folder.is_dir():
        return []
    return [p for p in folder.glob(src.stem + ".*") if p.suffix in (".nbi", ".nbc")]


def depends_on(module_file: str | Path, *deps: ModuleType | str | Path) -> int:
    """Declare that the kernels of ``module_file`` call kernels of ``deps`` (modules or source paths), and drop
    the module's cache files if a dependency is newer than them.  Returns the number of files dropped."""
    src = Path(module_file).resolve()
    paths = [(d.__file__ if isinstance(d, ModuleType) else d) for d in deps]
    dep_files = tuple(Path(p).resolve() for p in paths if p is not None)
    _DEPS[src] = dep_files
    if os.environ.get("NUMBA_CACHE_DIR"):
        return 0
    files = cache_files(src)
    if not files:
        return 0
    try:
        oldest = min(p.stat().st_mtime for p in files)
    except OSError:
        return 0
    if _newest_source(dep_files, {src}) <= oldest:
        return 0
    dropped = 0
    for p in files:
        try:
            p.unlink()
            dropped += 1
        except OSError:
            pass
    return dropped
