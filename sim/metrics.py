"""metrics.json (flat, snake_case, SI units in keys where ambiguous) and the "ours vs paper" table.

Every ``metrics.json`` has the contract keys ``ok`` (bool), ``failed_targets`` (list of metric keys
whose target was missed), ``not_evaluated`` (list of metric keys whose target could not be
evaluated) and ``reason`` (a string, ``""`` when ``ok``).  NaN and inf become ``null``; lists and
tuples stay JSON lists.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from cmstack.sim.logger import atomic_write

#: keys every metrics.json has, with their value when a run says nothing about them
CONTRACT = {"ok": False, "failed_targets": [], "not_evaluated": [], "reason": ""}


def _clean(x: Any) -> Any:
    if isinstance(x, (bool, str)) or x is None:
        return x
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if hasattr(x, "tolist") and getattr(x, "ndim", 0) > 0:  # numpy arrays
        return _clean(x.tolist())
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f) or math.isinf(f):
        return None
    return int(f) if isinstance(x, int) else f


def with_contract(metrics: dict) -> dict:
    """``metrics`` with the contract keys filled in and typed: ``ok`` a bool, ``failed_targets`` and
    ``not_evaluated`` lists (a single string becomes a one-element list), ``reason`` a string."""
    m = dict(metrics)
    for k, default in CONTRACT.items():
        if m.get(k) is None:
            m[k] = list(default) if isinstance(default, list) else default
    m["ok"] = bool(m["ok"])
    for k in ("failed_targets", "not_evaluated"):
        if isinstance(m[k], str):
            m[k] = [m[k]]
        m[k] = [str(x) for x in m[k]]
    m["reason"] = str(m["reason"])
    return m


def write_metrics(path: Path, metrics: dict) -> None:
    """Write ``metrics`` (with the contract keys) as JSON, atomically."""
    flat = {k: _clean(v) for k, v in with_contract(metrics).items()}
    atomic_write(path, json.dumps(flat, indent=2, sort_keys=True) + "\n")


def format_table(rows: list[tuple]) -> str:
    """rows: (key, ours, paper, target, ok) — paper/target/ok may be None."""

    def fmt(x: Any) -> str:
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
