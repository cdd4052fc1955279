"""python -m scenarios — list the runnable scenarios, one line each."""
import importlib
import pkgutil
from pathlib import Path


def main() -> None:
    here = Path(__file__).resolve().parent
    print("Scenarios (run: python -m scenarios.<name> [--set key=value ...] [--viewer meshcat]):")
    for m in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if m.name.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"scenarios.{m.name}")
            line = (mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else ""
        except Exception as exc:  # a broken scenario must not hide the others
            line = f"(failed to import: {exc})"
        print(f"  {m.name:<22} {line}")


if __name__ == "__main__":
    main()
