"""MkDocs hook (mkdocs.yml ``hooks:``): before the build, a folder ``build/api_src`` in which the package has
the layout Python imports, so that mkdocstrings (griffe) reads the sources of ``cmstack.*`` statically.

The repository keeps the design card's folders at its root and maps them into the ``cmstack`` namespace
(pyproject.toml ``[tool.setuptools.package-dir]``: ``cmstack.models`` is ``models/``, ...); griffe looks for
``cmstack/models/`` on disk.  The tree holds copies of the repository's Python sources, made anew each build
from that table (copies, not symbolic links: griffe resolves a link to its target's folder, where the package
has its other layout)."""

from __future__ import annotations

import shutil
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "api_src"


def _sources_only(folder: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore: everything but Python sources, py.typed and sub-folders (no caches)."""
    return {
        n
        for n in names
        if n == "__pycache__"
        or not (n.endswith((".py", ".pyi")) or n == "py.typed" or (Path(folder) / n).is_dir())
    }


def on_config(config):
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-dir"
    ]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "cmstack"
    shutil.copytree(ROOT / mapping["cmstack"], top, ignore=_sources_only)
    for name, folder in mapping.items():
        if name != "cmstack":
            shutil.copytree(ROOT / folder, top / name.split(".", 1)[1], ignore=_sources_only)
    return config
