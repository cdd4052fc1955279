"""python -m bench [NAME ...] (or ``cmstack bench``) — run the benchmarks in bench/ and print their
numbers (never asserted in tests)."""
import importlib
import pkgutil
import sys
from pathlib import Path


def main(names=None) -> int:
    here = Path(__file__).resolve().parent
    available = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))
    unknown = [n for n in (names or []) if n not in available]
    if unknown:
        print(f"error: no benchmark named {unknown}; benchmarks: {available}", file=sys.stderr)
        return 2
    for name in names or available:
        mod = importlib.import_module(f"cmstack.bench.{name}")
        if hasattr(mod, "main"):
            print(f"\n=== bench.{name} ===")
            mod.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
