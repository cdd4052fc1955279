"""metrics.json (flat, snake_case, SI units in keys where ambiguous) and the "ours vs paper" table."""
from __future__ import annotations

import json
import math
from pathlib import Path


def _clean(x):
    if isinstance(x, (bool, str)) or x is None:
        return x
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f) or math.isinf(f):
        return None
    return int(f) if isinstance(x, int) else f


def write_metrics(path: Path, metrics: dict) -> None:
    flat = {k: _clean(v) for k, v in metrics.items()}
    Path(path).write_text(json.dumps(flat, indent=2, sort_keys=True) + "\n")


def format_table(rows: list[tuple]) -> str:
    """rows: (key, ours, paper, target, ok) — paper/target/ok may be None."""
    def fmt(x):
        if x is None:
            return "—"
        if isinstance(x, bool):
            return "yes" if x else "NO"
        if isinstance(x, float) and x != x:
            return "n/a"
        if isinstance(x, (int, float)):
            return f"{x:.4g}"
        return str(x)

    head = ("metric", "ours", "paper", "target", "met")
    body = [tuple(fmt(c) for c in r) for r in rows]
    w = [max(len(head[i]), *(len(b[i]) for b in body)) if body else len(head[i]) for i in range(5)]
    line = "  ".join(h.ljust(w[i]) for i, h in enumerate(head))
    out = [line, "  ".join("-" * x for x in w)]
    out += ["  ".join(c.ljust(w[i]) for i, c in enumerate(b)) for b in body]
    return "\n".join(out)
