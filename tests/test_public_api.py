"""The public API (issue 22 item 5): curated namespaces, one name per concept, the aliases gone.

Each namespace's ``__all__`` names exactly what it gives, every name is the defining module's own object
(a re-export, never a copy or a wrapper), a name exported by two namespaces is the same object, and the
former aliases ``run_closed_loop`` and ``circle_trajectory`` exist nowhere."""
from __future__ import annotations

import importlib
import inspect

import pytest

import cmstack

NAMESPACES = {
    "cmstack.tasks": {"Task", "RigidCoupling", "FrameTask", "RelativeFrameTask", "PostureTask", "GAUSS",
                      "Circle", "Constant", "Sinusoid", "MinimumJerk", "Trajectory"},
    "cmstack.limits": {"Limit", "EffortLimit", "JointVelocityLimit", "JointPositionLimit"},
    "cmstack.controllers": {"Controller", "UdwadiaKalabaController", "RobustUKController", "PIDC",
                            "RobustPartitionController", "VelocityLaw", "PoseLaw", "TaskSpaceLaw"},
    "cmstack.plants": {"Plant", "plant_from_urdf", "MujocoPlant", "ProjectionPlant", "ChainMujocoPlant"},
    "cmstack.scenario": {"Context", "Outcome", "Row"},
}
ALIASES = ("run_closed_loop", "circle_trajectory")


def _exports(ns: str) -> dict[str, object]:
    mod = importlib.import_module(ns)
    return {name: getattr(mod, name) for name in mod.__all__}


@pytest.mark.parametrize("ns", sorted(NAMESPACES))
def test_namespace_gives_what_it_lists(ns):
    names = _exports(ns)
    assert NAMESPACES[ns] <= set(names), sorted(NAMESPACES[ns] - set(names))
    assert len(names) == len(importlib.import_module(ns).__all__)          # no name listed twice
    for name, obj in names.items():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__name__ == name, f"{ns}.{name} is {obj.__name__}: one name per concept, no alias"
            home = importlib.import_module(obj.__module__)
            assert getattr(home, name) is obj, f"{ns}.{name} is not {obj.__module__}.{name}"
            assert not obj.__module__.startswith("cmstack.scenarios") or ns == "cmstack.scenario", (ns, name)


def test_a_name_in_two_namespaces_is_one_object():
    seen: dict[str, object] = {name: getattr(cmstack, name) for name in cmstack.__all__ if name != "__version__"}
    for ns in NAMESPACES:
        for name, obj in _exports(ns).items():
            if name in seen:
                assert seen[name] is obj, f"{ns}.{name} differs from another public {name}"
            seen[name] = obj


def test_unknown_names_raise_attribute_error():
    import cmstack.controllers

    with pytest.raises(AttributeError, match="no attribute 'UKController'"):
        cmstack.controllers.UKController      # noqa: B018
    with pytest.raises(AttributeError):
        cmstack.circle_trajectory             # noqa: B018


@pytest.mark.parametrize("alias", ALIASES)
def test_aliases_are_gone(alias):
    assert alias not in cmstack.__all__
    for mod in ("cmstack.sim.runner", "cmstack.models.trajectory", "cmstack.models.coupling", *NAMESPACES):
        assert not hasattr(importlib.import_module(mod), alias), f"{mod}.{alias}"


def test_controllers_package_stays_lazy():
    """``import cmstack.controllers.base`` does not import every law (the namespace imports on first use)."""
    import subprocess
    import sys

    code = ("import sys, cmstack.controllers.base; "
            "print(sorted(m for m in sys.modules if m.startswith('cmstack.controllers.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "['cmstack.controllers.base']", out
