"""No import cycle among the library's modules (issue 29 item 6), imports inside functions counted.

An import inside a function hides a cycle from Python (the module is complete by the time the function
runs) but not from the reader: two modules that need each other are one concept split in two, or a
helper in the wrong place.  The check builds the import graph of the package as installed (grimp, the
graph library under import-linter; ``tests/test_import_contract.py`` makes the same copy) with every
``import`` statement, at module level or in a function, but those under ``if TYPE_CHECKING:`` (they are
annotations, never executed), and requires the library tier's graph to have no strongly connected
component of more than one module.  A mutation test adds one function-level import that closes a cycle
and requires the check to name it, so a check that sees nothing cannot pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_import_contract import installed_tree  # noqa: E402 (the copy of the package as installed)

LIBRARY_PREFIXES = ("cmstack.models", "cmstack.controllers", "cmstack.sim")
APPLICATION_IN_LIBRARY_FOLDERS = ("cmstack.campaign",)

PROBE = r"""
import sys
import grimp

g = grimp.build_graph("cmstack", cache_dir=None, exclude_type_checking_imports=True)
lib = sorted(
    m for m in g.modules
    if m.startswith(%(lib)r) and not m.startswith(%(app)r)
)
libs = set(lib)
adj = {m: sorted(n for n in g.find_modules_directly_imported_by(m) if n in libs) for m in lib}
index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)

def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in adj[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            comps.append(sorted(comp))

for v in lib:
    if v not in index:
        visit(v)
print(len(lib))
for comp in comps:
    edges = [f"{a} -> {b}" for a in comp for b in adj[a] if b in comp]
    print("CYCLE " + " ; ".join(edges))
"""


def cycles(tree: Path) -> tuple[int, list[str]]:
    """(number of library modules seen, one line per import cycle listing its edges)."""
    code = PROBE % {"lib": LIBRARY_PREFIXES, "app": APPLICATION_IN_LIBRARY_FOLDERS}
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    return int(lines[0]), [x[len("CYCLE ") :] for x in lines[1:] if x.startswith("CYCLE ")]


@pytest.fixture()
def tree(tmp_path) -> Path:
    return installed_tree(tmp_path / "site")


def test_library_has_no_import_cycle(tree):
    n, found = cycles(tree)
    assert n > 40, f"only {n} library modules found: is the copy of the package complete?"
    assert found == [], "import cycles in the library:\n" + "\n".join(found)


def test_a_function_level_import_that_closes_a_cycle_is_named(tree):
    """models/lie.py is imported by most of the library; an import of models/robot.py inside one of its
    functions closes a cycle (robot -> ... -> lie -> robot) that the check must report."""
    lie = tree / "cmstack" / "models" / "lie.py"
    lie.write_text(
        lie.read_text(encoding="utf-8")
        + "\n\ndef _probe():\n    from cmstack.models.robot import Robot\n\n    return Robot\n",
        encoding="utf-8",
    )
    _, found = cycles(tree)
    assert any("cmstack.models.lie -> cmstack.models.robot" in c for c in found), found


def test_type_checking_imports_are_not_cycles(tree):
    """An import under ``if TYPE_CHECKING:`` is an annotation: it never runs and closes no cycle."""
    lie = tree / "cmstack" / "models" / "lie.py"
    lie.write_text(
        lie.read_text(encoding="utf-8")
        + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from cmstack.models.robot import Robot  # noqa: F401\n",
        encoding="utf-8",
    )
    _, found = cycles(tree)
    assert found == [], found
