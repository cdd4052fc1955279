"""The repository is self-contained: no tracked file points outside it, and papers are cited by their
short keys ([Milioshin], [Dastranj], [Eslami], [Alazard], [Aghili]; docs/references.md), never by an
internal file number.

The forbidden strings are assembled from pieces so that this file does not match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("Milioshin", "Dastranj", "Eslami", "Alazard", "Aghili")

_SHARED = "sha" + "red"
OUTSIDE = re.compile(
    "|".join([re.escape(".." + "/" + _SHARED), re.escape("/work/" + _SHARED), re.escape("DESIGN" + ".md")])
)  # case matters: docs/design.md is ours
TEAM_NOTES = re.compile(
    re.escape(_SHARED + "/")
    + "(reference|seeds)"
    + r"|(?<![\w./-])(experiments|projection_method|yu"
    + r"mi)\.md",
    re.IGNORECASE,
)
SEED_NUMBER = re.compile("se" + r"ed 0\d", re.IGNORECASE)


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / p for p in out.decode().split("\0") if p]


def _hits(pattern: re.Pattern) -> list[str]:
    """'path:line: text' of every line of a tracked text file that matches ``pattern``."""
    found = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (meshes, images), or deleted in the work tree but still tracked
        for n, line in enumerate(text.splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    return found


def test_hygiene_patterns_match_what_they_must():
    """The checks below can fail: each pattern catches the forms it is meant to catch."""
    assert OUTSIDE.search("see ../" + _SHARED + "/x") and OUTSIDE.search("(DESIGN" + ".md)")
    assert not OUTSIDE.search("docs/design.md")
    assert TEAM_NOTES.search(_SHARED + "/reference/yu" + "mi.md")
    assert TEAM_NOTES.search("(see experiments" + ".md §001)") and not TEAM_NOTES.search("docs/models.md")
    for s in ("se" + "ed 002", "Se" + "ed 000 §4", "(se" + "ed 04)"):
        assert SEED_NUMBER.search(s), s
    for s in ("seed = 0", "rng seed 1", "[Milioshin] §4.4"):
        assert not SEED_NUMBER.search(s), s


def _assert_no_hits(pattern: re.Pattern, why: str) -> None:
    """No line of a tracked text file matches ``pattern``; else fail with ``why`` and every hit."""
    hits = _hits(pattern)
    assert not hits, why + ":\n" + "\n".join(hits)


def test_no_tracked_file_points_outside_the_repository():
    _assert_no_hits(
        OUTSIDE,
        "tracked files point to files that are not in the repository; write what the reader "
        "needs into docs/ and point there",
    )


def test_no_tracked_file_points_to_team_reference_notes():
    _assert_no_hits(TEAM_NOTES, "tracked files point to the team's reference notes")


def test_papers_are_cited_by_key_not_by_file_number():
    _assert_no_hits(
        SEED_NUMBER,
        "cite papers by their key ([Milioshin], [Dastranj], [Eslami], [Alazard], [Aghili]; docs/references.md)",
    )


def test_references_give_every_key_in_full():
    text = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for key in KEYS:
        assert f"**[{key}]**" in text, f"docs/references.md has no full citation for [{key}]"
        assert f"| [{key}] |" in readme, f"README.md does not list [{key}] in its table of the papers"


def test_license_file_and_metadata_agree():
    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lic = meta.get("license")
    assert (lic.get("text") if isinstance(lic, dict) else lic) == "BSD-3-Clause"
