"""Public names imported on first use (PEP 562): the ``__getattr__`` of ``cmstack`` and ``cmstack.controllers``,
so that importing a namespace stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module's ``__getattr__``: a public name is fetched from the module ``exports[name]`` names and stored in
    ``namespace`` (the module's globals: the next access is a plain lookup); any other name raises AttributeError
    naming ``package`` and the name."""

    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(mod), name)
        namespace[name] = value
        return value

    return __getattr__
