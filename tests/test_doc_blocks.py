"""Every ```python block of README.md and docs/*.md runs: each in a fresh interpreter, in an empty temporary
directory, under a wall-clock limit.  A block that cannot run on its own says so just before it, with
``<!-- no-run: reason -->``; those are listed (test_no_run_blocks_are_listed_with_their_reason).  Shell
commands, TOML and printed output use other fences.

One change is made to the blocks as written, by the runner below and not in the text: ``simulate`` (imported
from ``cmstack`` or ``cmstack.sim.runner``) runs at most ``DOC_DURATION_S`` simulated seconds, so that the
README's 5 s carry is checked in 0.5 s (the README says so)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_DURATION_S = 0.5
TIMEOUT_S = 600

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
_NO_RUN = re.compile(r"<!--\s*no-run:\s*(.+?)\s*-->\s*$")

#: wraps simulate (duration capped), then runs the block as __main__
RUNNER = textwrap.dedent(f"""
    import runpy, sys
    import cmstack, cmstack.sim.runner as runner
    _simulate = runner.simulate
    def simulate(*a, duration, **k):
        return _simulate(*a, duration=min(duration, {DOC_DURATION_S}), **k)
    runner.simulate = cmstack.simulate = simulate
    runpy.run_path(sys.argv[1], run_name="__main__")
""")


def blocks() -> list[tuple[str, int, str, str | None]]:
    """(page, line, code, no-run reason or None) of every ```python block."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            reason = _NO_RUN.search(before)
            out.append(
                (page.relative_to(ROOT).as_posix(), line, m.group(1), reason.group(1) if reason else None)
            )
    return out


BLOCKS = blocks()
RUNNABLE = [b for b in BLOCKS if b[3] is None]


def test_the_blocks_are_found():
    assert len(BLOCKS) >= 10
    assert (
        sum(p == "README.md" for p, *_ in RUNNABLE) == 4
    )  # "Your own robot", "Your own closed chain" (PIDC and UK), "the thesis by hand"
    assert any(p == "docs/add_a_scenario.md" for p, *_ in RUNNABLE)


def test_no_run_blocks_are_listed_with_their_reason(capsys):
    skipped = [(p, n, r) for p, n, _, r in BLOCKS if r is not None]
    for p, n, r in skipped:
        assert len(r) >= 10, f"{p}:{n}: a no-run block needs its reason"
        print(f"not run: {p}:{n}: {r}")
    assert not any(p == "README.md" for p, *_ in skipped), "the README's snippets must run"


@pytest.mark.parametrize(
    "page, line, code", [b[:3] for b in RUNNABLE], ids=[f"{p}:{n}" for p, n, *_ in RUNNABLE]
)
def test_python_block_runs(page, line, code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    runner = tmp_path / "_runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    work = tmp_path / "cwd"
    work.mkdir()
    r = subprocess.run(
        [sys.executable, str(runner), str(script)],
        cwd=work,
        capture_output=True,
        text=True,
        env=dict(os.environ, MPLBACKEND="Agg"),
        timeout=TIMEOUT_S,
    )
    assert r.returncode == 0, f"{page}:{line} failed:\n{r.stderr[-3000:]}"
