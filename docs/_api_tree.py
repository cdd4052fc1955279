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


def make_tree() -> None:
    """``build/api_src`` made anew from pyproject.toml's package-dir table."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-dir"
    ]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "cmstack"
    shutil.copytree(ROOT / mapping["cmstack"], top, ignore=_sources_only)
    for name, folder in mapping.items():
        if name != "cmstack":
            shutil.copytree(ROOT / folder, top / name.split(".", 1)[1], ignore=_sources_only)


# Made when MkDocs loads this hook, before the plugins are configured: mkdocstrings drops a search path that
# does not exist when it reads its options, so a tree made only in on_config was missing from the first build
# of a fresh clone (griffe then found the repository's own cmstack/ folder, without models/, and the build
# failed on its first cmstack.models name).
make_tree()


def on_config(config):
    make_tree()  # (again for each build of `mkdocs serve`: the sources may have changed)
    return config
