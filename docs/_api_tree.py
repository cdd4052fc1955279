"""MkDocs hook (mkdocs.yml ``hooks:``): before the build, a folder ``build/api_src`` in which the package has
the layout Python imports, so that mkdocstrings (griffe) reads the sources of ``cmstack.*`` statically.

The repository keeps the design card's folders at its root and maps them into the ``cmstack`` namespace
(pyproject.toml ``[tool.setuptools.package-dir]``: ``cmstack.models`` is ``models/``, ...); griffe looks for
``cmstack/models/`` on disk.  The tree is symbolic links to the repository's own files, made anew each build
from that table."""

from __future__ import annotations

import shutil
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "api_src"


def on_config(config):
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-dir"
    ]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "cmstack"
    top.mkdir(parents=True)
    for f in (ROOT / mapping["cmstack"]).iterdir():
        if f.suffix in (".py", ".pyi") or f.name == "py.typed":
            (top / f.name).symlink_to(f)
    for name, folder in mapping.items():
        if name != "cmstack":
            (top / name.split(".", 1)[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return config
