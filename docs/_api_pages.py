"""Writes docs/api/*.md, the API reference's pages: one per public namespace, every class and function it
exports documented once (``::: module.Name``, on the first family page that exports it; the ``cmstack`` page
documents the names no family exports and links the others).  Run it after adding a public name:

    .venv/bin/python docs/_api_pages.py

tests/test_docs_site.py fails while a public name is missing from the pages."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

API = Path(__file__).resolve().parent / "api"
FAMILIES = {
    "tasks": "cmstack.tasks",
    "limits": "cmstack.limits",
    "controllers": "cmstack.controllers",
    "plants": "cmstack.plants",
    "scenario": "cmstack.scenario",
}
HEAD = ["    options:", "      members: false", "      show_root_heading: false", ""]


def _home(obj) -> str | None:
    """module.Name where a class or function is defined (None for other objects, e.g. GAUSS)."""
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__name__}"
    return None


def write() -> None:
    seen: dict[str, tuple[str, str]] = {}
    for page, ns in FAMILIES.items():
        mod = importlib.import_module(ns)
        out = [f"# `{ns}`", "", f"::: {ns}", *HEAD]
        for name in mod.__all__:
            home = _home(getattr(mod, name))
            if home is None:
                out += [f"`{name}`: see the module's docstring above.", ""]
            elif home in seen:
                out += [f"`{name}`: see [{seen[home][1]}]({seen[home][0]}.md#{home}).", ""]
            else:
                seen[home] = (page, ns)
                out += [f"::: {home}", ""]
        (API / f"{page}.md").write_text("\n".join(out), encoding="utf-8")
    import cmstack

    out = [
        "# `cmstack`",
        "",
        "::: cmstack",
        *HEAD,
        "The names of a family are documented on its namespace's page:",
        "",
    ]
    rest = []
    for name in cmstack.__all__:
        if name.startswith("__"):
            continue
        home = _home(getattr(cmstack, name))
        if home in seen:
            out.append(f"- `{name}`: [{seen[home][1]}]({seen[home][0]}.md#{home})")
        elif home is None:
            out.append(f"- `{name}`: [cmstack.tasks](tasks.md) (the Gauss level of the UK controller)")
        else:
            rest.append(home)
    out += ["", "## Other names", ""]
    for home in rest:
        out += [f"::: {home}", "    options:", "      heading_level: 3", ""]
    (API / "cmstack.md").write_text("\n".join(out), encoding="utf-8")


if __name__ == "__main__":
    write()
