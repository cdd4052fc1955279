"""Every ```python block of README.md and docs/*.md runs, in a fresh interpreter, in an empty temporary
directory, under a wall-clock limit: each README block on its own, and each page of docs/ as one walkthrough,
its blocks pasted top to bottom into one script (issue 33 item 4).  A block that is no step of a walkthrough
(a sketch against an imaginary API, the end of a module) says so just before it, with
``<!-- no-run: reason -->``; those are listed (test_no_run_blocks_are_listed_with_their_reason).  The blocks
that run import public names only: ``cmstack`` and its namespaces ``cmstack.tasks``, ``cmstack.limits``,
``cmstack.plants``, ``cmstack.controllers``, ``cmstack.scenario``.  Shell commands, TOML and printed output
use other fences.

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
README_BLOCKS = [b for b in RUNNABLE if b[0] == "README.md"]
#: page -> its runnable blocks pasted top to bottom (the walkthrough as a reader would paste it)
WALKTHROUGHS = {
    page: "\n".join(code for p, _, code, _ in RUNNABLE if p == page)
    for page in dict.fromkeys(p for p, *_ in RUNNABLE if p != "README.md")
}
#: the public namespaces (README, "Public API"); any other cmstack module is internal
PUBLIC = (
    "cmstack",
    "cmstack.tasks",
    "cmstack.limits",
    "cmstack.plants",
    "cmstack.controllers",
    "cmstack.scenario",
)
_IMPORT = re.compile(r"^\s*(?:from\s+(cmstack[\w.]*)\s+import|import\s+(cmstack[\w.]*))", re.M)


def test_the_blocks_are_found():
    assert len(BLOCKS) >= 10
    assert (
        sum(p == "README.md" for p, *_ in RUNNABLE) == 5
    )  # "Your own robot", "Your own closed chain" (PIDC and UK), "Your own legged robot", "the thesis by hand"
    assert any(p == "docs/add_a_scenario.md" for p, *_ in RUNNABLE)
    walk = [b for b in BLOCKS if b[0] == "docs/bring_your_own_robot.md"]
    assert len(walk) >= 8 and all(r is None for *_, r in walk)  # every step of the walkthrough runs
    assert "docs/bring_your_own_robot.md" in WALKTHROUGHS and "docs/closed_chains.md" in WALKTHROUGHS


def test_blocks_import_public_names_only():
    """README and docs blocks that run import from the public namespaces only."""
    bad = []
    for page, line, code, _ in RUNNABLE:
        for m in _IMPORT.finditer(code):
            mod = m.group(1) or m.group(2)
            if mod not in PUBLIC:
                bad.append(f"{page}:{line}: {mod}")
    assert not bad, f"internal module paths in runnable blocks (use {PUBLIC}): {bad}"


def test_no_run_blocks_are_listed_with_their_reason(capsys):
    skipped = [(p, n, r) for p, n, _, r in BLOCKS if r is not None]
    for p, n, r in skipped:
        assert len(r) >= 10, f"{p}:{n}: a no-run block needs its reason"
        print(f"not run: {p}:{n}: {r}")
    assert not any(p == "README.md" for p, *_ in skipped), "the README's snippets must run"


def _run_script(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    runner = tmp_path / "_runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    work = tmp_path / "cwd"
    work.mkdir()
    return subprocess.run(
        [sys.executable, str(runner), str(script)],
        cwd=work,
        capture_output=True,
        text=True,
        env=dict(os.environ, MPLBACKEND="Agg"),
        timeout=TIMEOUT_S,
    )


@pytest.mark.parametrize(
    "page, line, code", [b[:3] for b in README_BLOCKS], ids=[f"{p}:{n}" for p, n, *_ in README_BLOCKS]
)
def test_readme_block_runs(page, line, code, tmp_path):
    r = _run_script(code, tmp_path)
    assert r.returncode == 0, f"{page}:{line} failed:\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("page", sorted(WALKTHROUGHS))
def test_walkthrough_runs_pasted_top_to_bottom(page, tmp_path):
    """The page's python blocks, in order, as one script (what a reader who pastes them all runs)."""
    r = _run_script(WALKTHROUGHS[page], tmp_path)
    assert r.returncode == 0, f"{page} (its blocks as one script) failed:\n{r.stderr[-3000:]}"
