"""Finding a scenario: the shipped ones by name, or a scenario file of the user's (application tier).

    name, module, defaults = load_scenario("yumi_dual_arm")        # or "path/to/my_scenario.py"
    shipped_scenarios()                                             # ['balloon', 'chain_open_loop', ...]

One module that everything which runs a scenario by name uses: the command line (``cmstack run``,
``cmstack list``), ``cmstack rt``, ``cmstack campaign`` (cmstack/campaign/), the pytest plugin and the
benchmarks.  It imports none of them (the command line imports the campaign, so a loader kept in the
command line made an import cycle).

A file of the user's defines ``NAME`` (optional; default its stem) and ``run(ctx) -> Outcome``; its default
config is ``CONFIG`` in the module (a path relative to the file), else ``<stem>.toml`` beside the file,
else none (the caller then asks for ``--config``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

from cmstack.models.errors import ConfigError

#: the module name a scenario file is imported under: ``USER_MODULE_PREFIX + <stem>``
USER_MODULE_PREFIX = "cmstack_user_scenario_"
#: the shipped scenarios' default configs, ``<name>.toml`` (the folder _common.CONFIG_DIR names too; here
#: so that listing the scenarios or printing a config does not import the scenario machinery)
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def shipped_scenarios() -> list[str]:
    """The shipped scenarios: the modules of ``scenarios/`` (not ``_private``) that have a default config
    ``scenarios/configs/<name>.toml``; helper modules such as ``schemas`` have none and are not scenarios."""
    import cmstack.scenarios as pkg

    return sorted(
        m.name
        for m in pkgutil.iter_modules(pkg.__path__)
        if not m.name.startswith("_") and (CONFIG_DIR / f"{m.name}.toml").is_file()
    )


def is_user_file(mod: ModuleType) -> bool:
    """``mod`` was loaded from a scenario file of the user's (not a shipped scenario)."""
    return mod.__name__.startswith(USER_MODULE_PREFIX)


def load_scenario(target: str) -> tuple[str, ModuleType, Path | None]:
    """(name, module, default config path or None) of a shipped scenario name or a scenario file."""
    path = Path(target).expanduser()
    if target.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"scenario file not found: {path}")
        mod_name = f"{USER_MODULE_PREFIX}{path.stem}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"scenario file {path} cannot be imported as a Python module")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as exc:
            raise ConfigError(f"scenario file {path} failed to import: {type(exc).__name__}: {exc}") from None
        if not callable(getattr(mod, "run", None)):
            raise ConfigError(f"scenario file {path} defines no run(ctx) function")
        name = str(getattr(mod, "NAME", path.stem))
        cfg = getattr(mod, "CONFIG", None)
        if cfg is not None:
            cfg = (path.parent / cfg).resolve()
        elif (path.with_suffix(".toml")).is_file():
            cfg = path.with_suffix(".toml").resolve()
        return name, mod, cfg
    names = shipped_scenarios()
    if target not in names:
        close = difflib.get_close_matches(target, names, n=3)
        raise ConfigError(
            f"no scenario named '{target}'"
            + (f"; did you mean {close}?" if close else f"; scenarios: {names}")
        )
    mod = importlib.import_module(f"cmstack.scenarios.{target}")
    if not callable(
        getattr(mod, "run", None)
    ):  # a config without a scenario module: refuse, do not crash later
        raise ConfigError(
            f"cmstack.scenarios.{target} defines no run(ctx) function: not a scenario; scenarios: {names}"
        )
    return target, mod, None


def listing() -> list[str]:
    """``cmstack list``: a header and one line per shipped scenario (its name and its docstring's first line)."""
    lines = ["Scenarios (run one: cmstack run NAME [--set key=value ...] [--viewer meshcat]):"]
    for name in shipped_scenarios():
        try:
            doc = importlib.import_module(f"cmstack.scenarios.{name}").__doc__
            line = doc.strip().splitlines()[0] if doc and doc.strip() else ""
        except Exception as exc:  # a broken scenario must not hide the others
            line = f"(failed to import: {exc})"
        lines.append(f"  {name:<22} {line}")
    return lines
