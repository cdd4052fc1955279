"""python -m bench — run every benchmark in bench/ and print its numbers (never asserted in tests)."""
import importlib
import pkgutil
from pathlib import Path


def main() -> None:
    here = Path(__file__).resolve().parent
    for m in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if m.name.startswith("_"):
            continue
        mod = importlib.import_module(f"bench.{m.name}")
        if hasattr(mod, "main"):
            print(f"\n=== bench.{m.name} ===")
            mod.main()


if __name__ == "__main__":
    main()
