"""No library function over 150 lines (issue 29 item 6): every function and method of cmstack/, controllers/,
models/, sim/ and scenarios/ (numba kernels and nested functions included), counted from its ``def`` line (or
first decorator's) to its last line, docstring and comments included.  The few still over it are named in
``OVER_YET`` with the date they were listed and why; the test fails when one of them is gone or has come
under the limit, so that the list cannot go stale."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("cmstack", "controllers", "models", "sim", "scenarios")
LIMIT = 150

#: (file, qualified name) -> (date listed, why it is still over the limit); remove an entry once it is split
OVER_YET: dict[tuple[str, str], tuple[str, str]] = {
    ("scenarios/balloon.py", "run"): (
        "2026-11-28",
        "a scenario's run, phases and metrics inline: not split yet",
    ),
    ("scenarios/chain_open_loop.py", "run"): ("2026-11-28", "161: the bookkeeping after the loop inline"),
    ("scenarios/slider_crank.py", "run"): ("2026-11-28", "a scenario's run: not split yet"),
}


def function_lengths(source: str) -> dict[str, int]:
    """{qualified name: lines} of every function of ``source``: module functions, methods (``Class.m``) and
    nested functions (``outer.inner``), from the first decorator to the last line."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([ch.lineno] + [d.lineno for d in ch.decorator_list])
                out[prefix + ch.name] = max(out.get(prefix + ch.name, 0), ch.end_lineno - first + 1)
                visit(ch, f"{prefix}{ch.name}.")
            elif isinstance(ch, ast.ClassDef):
                visit(ch, f"{prefix}{ch.name}.")
            else:
                visit(ch, prefix)

    visit(ast.parse(source), "")
    return out


@cache
def library_lengths() -> dict[tuple[str, str], int]:
    """{(file relative to the repository, qualified name): lines} over the library folders (read once)."""
    return {
        (str(f.relative_to(ROOT)), name): n
        for d in LIBRARY
        for f in sorted((ROOT / d).rglob("*.py"))
        for name, n in function_lengths(f.read_text(encoding="utf-8")).items()
    }


def test_no_library_function_is_over_the_limit():
    lengths = library_lengths()
    assert len(lengths) > 1000  # the walk found the library
    over = {k: n for k, n in lengths.items() if n > LIMIT and k not in OVER_YET}
    assert not over, f"functions over {LIMIT} lines (split them by what they compute):\n" + "\n".join(
        f"{f} {name}: {n} lines" for (f, name), n in sorted(over.items())
    )


def test_the_list_of_functions_still_over_is_current():
    lengths = library_lengths()
    gone = [k for k in OVER_YET if k not in lengths]
    assert not gone, f"{gone} no longer exist: remove them from OVER_YET"
    done = [k for k in OVER_YET if lengths[k] <= LIMIT]
    assert not done, f"{done} are {LIMIT} lines or fewer now: remove them from OVER_YET"


def test_the_count_sees_methods_nested_functions_and_decorators():
    src = (
        "import numba\n\n"
        "@numba.njit(\n    cache=True,\n)\n"
        "def kernel(x):\n" + "    x += 1\n" * 3 + "\n"
        "class A:\n    def m(self):\n        def inner():\n            return 1\n\n        return inner\n"
    )
    assert function_lengths(src) == {"kernel": 7, "A.m": 5, "A.m.inner": 2}
