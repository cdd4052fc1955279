"""mypy for the typing tests: ONE run whose output test_typing.py, test_public_api.py and
test_protocols_static.py all read (the ``typecheck`` fixture of conftest.py), instead of three runs of
mypy, each on its own copy of the package with its own cold cache (about 68 s of the suite's 2-core CI
time before; one run checks the library once).

The run: ``python -m mypy`` in a child process with a wall-clock limit, with the repository's own mypy
configuration (``--config-file pyproject.toml``: whatever ``[tool.mypy]`` says applies, it is read, not
copied here), missing imports ignored and followed imports silent, on

* the library tier of the package as installed (``tree/cmstack``, test_import_contract.installed_tree),
  ``-p``/``-m`` targets of test_typing.TARGETS, with one type error planted at the end of
  ``cmstack/models/lie.py`` (test_typing checks that it is reported, by module, and that nothing else is);
* the snippet files of each test module's ``MYPY_FILES`` ({file name: source}) and copies of the files
  of its ``MYPY_PATHS`` (the examples), in ``snippets/`` (on MYPYPATH, each checked as a module: mypy
  takes modules or files, not both), each then read back by its own test.

mypy checks each file on its own merits and reports each error under its file, so a good snippet is
"no error in its file" and a bad one is "exactly these errors in its file", as with a run of its own.
When pytest-xdist runs the suite, the first worker that needs the result runs mypy (a file lock in the
session's shared temporary directory) and the other one reads its result.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the modules whose snippets (MYPY_FILES, MYPY_PATHS) the one run checks
CLIENTS = ("test_typing", "test_public_api", "test_protocols_static")
#: appended to cmstack/models/lie.py in the checked copy: one error mypy must report there
PLANTED = '\n\ndef _planted() -> int:\n    return "not an int"\n'
_LINE = re.compile(r"^(?P<path>[^:\n]+\.py):(?P<line>\d+): error: (?P<msg>.*)$", re.MULTILINE)
_SUMMARY = re.compile(
    r"^(?:Found \d+ errors? in \d+ files?|Success: no issues found in) .*?(\d+) source files?\)?$"
)


def mypy(
    *targets: str | Path,
    tree: Path,
    cache: Path,
    cwd: Path,
    timeout: float | None = None,
    path: list[Path] = (),
) -> subprocess.CompletedProcess:
    """``python -m mypy TARGETS`` (files, or ``-p``/``-m`` options and their names) in ``cwd`` with the
    repository's mypy configuration, the package copy ``tree`` (and the folders ``path``) on MYPYPATH, its
    output as text."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(cache),
            *map(str, targets),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"MYPYPATH": os.pathsep.join(map(str, [tree, *path])), "PATH": "/usr/bin:/bin"},
        timeout=timeout,
    )


@dataclass
class TypeCheck:
    """The one mypy run: its exit code and output, where it ran (``root``: ``tree/`` the package copy,
    ``snippets/`` the snippet files) and the lines of ``cmstack/models/lie.py`` that hold the planted error."""

    returncode: int
    stdout: str
    stderr: str
    root: Path
    planted_lines: tuple[int, int]
    checked: int  # source files mypy says it checked

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    def snippet(self, name: str) -> Path:
        return self.root / "snippets" / name

    def errors(self) -> list[tuple[Path, int, str]]:
        """(absolute path, line, message) of every error line."""
        return [
            ((self.root / m["path"]).resolve(), int(m["line"]), m["msg"]) for m in _LINE.finditer(self.stdout)
        ]

    def errors_in(self, name: str) -> list[str]:
        """The messages of the errors reported in the snippet file ``name`` (of MYPY_FILES or MYPY_PATHS)."""
        p = self.snippet(name).resolve()
        assert p.is_file(), f"{name} is not one of the checked snippets"
        return [msg for f, _, msg in self.errors() if f == p]

    def library_errors(self) -> dict[str, list[tuple[int, str]]]:
        """{module: [(line, message)]} of the errors in the package copy (``cmstack.models.lie``, ...)."""
        tree = self.tree.resolve()
        out: dict[str, list[tuple[int, str]]] = {}
        for f, line, msg in self.errors():
            if tree in f.parents:
                mod = ".".join(f.relative_to(tree).with_suffix("").parts).removesuffix(".__init__")
                out.setdefault(mod, []).append((line, msg))
        return out

    def describe(self) -> str:
        return f"mypy exit {self.returncode} in {self.root}:\n{self.stdout[-6000:]}\n{self.stderr[-3000:]}"


def _inputs() -> tuple[list[str], dict[str, str], list[Path]]:
    """The library targets and every client module's snippets and paths."""
    targets: list[str] = []
    files: dict[str, str] = {}
    paths: list[Path] = []
    for name in CLIENTS:
        mod = importlib.import_module(name)
        targets += getattr(mod, "MYPY_TARGETS", [])
        for fname, src in getattr(mod, "MYPY_FILES", {}).items():
            assert fname not in files, f"two typing tests write the snippet {fname}"
            files[fname] = src
        paths += list(getattr(mod, "MYPY_PATHS", []))
    return targets, files, paths


def run_typecheck(root: Path, timeout: float = 900) -> TypeCheck:
    """Build ``root`` (the package copy with the planted error, the snippets) and run mypy once on all."""
    from test_import_contract import installed_tree  # the package as installed, in a folder

    targets, files, paths = _inputs()
    tree = installed_tree(root / "tree")
    lie = tree / "cmstack" / "models" / "lie.py"
    text = lie.read_text(encoding="utf-8")
    lie.write_text(text + PLANTED, encoding="utf-8")
    planted = (len(text.splitlines()) + 1, len((text + PLANTED).splitlines()))  # after the file's own lines
    snippets = root / "snippets"  # a folder on MYPYPATH: each snippet a module (-m), as the library is
    snippets.mkdir()  # (mypy takes modules or files, not both)
    for fname, src in files.items():
        (snippets / fname).write_text(src, encoding="utf-8")
    for p in paths:
        assert p.name not in files, f"two typing tests write the snippet {p.name}"
        shutil.copyfile(p, snippets / p.name)
    modules = [a for f in [*files, *(p.name for p in paths)] for a in ("-m", f.removesuffix(".py"))]
    res = mypy(
        *targets, *modules, tree=tree, cache=root / "cache", cwd=root, timeout=timeout, path=[snippets]
    )
    last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    m = _SUMMARY.match(last)
    return TypeCheck(res.returncode, res.stdout, res.stderr, root, planted, int(m.group(1)) if m else 0)


def shared_typecheck(base: Path) -> TypeCheck:
    """The run's result from ``base`` (a directory every pytest-xdist worker of this session sees): run it
    there under a file lock if no worker has yet, else read what the first one wrote."""
    base.mkdir(parents=True, exist_ok=True)
    root, result = base / "typecheck", base / "typecheck.json"
    with open(base / "typecheck.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if result.is_file():
            d = json.loads(result.read_text(encoding="utf-8"))
            return TypeCheck(**{**d, "root": Path(d["root"]), "planted_lines": tuple(d["planted_lines"])})
        if root.exists():  # a worker that failed half-way
            shutil.rmtree(root)
        tc = run_typecheck(root)
        d = {**tc.__dict__, "root": str(tc.root)}
        tmp = result.with_suffix(".tmp")
        tmp.write_text(json.dumps(d), encoding="utf-8")
        os.replace(tmp, result)
        return tc
