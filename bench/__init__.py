"""Speed benchmarks (``cmstack bench``); their numbers are written to ``./bench/results/*.json``."""
from pathlib import Path


def results_dir() -> Path:
    """``bench/results`` under the current directory (the repository root when run from there)."""
    p = Path.cwd() / "bench" / "results"
    p.mkdir(parents=True, exist_ok=True)
    return p
