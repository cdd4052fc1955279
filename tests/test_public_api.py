"""The public API (issue 22 item 5): curated namespaces, one name per concept, the aliases gone.

Each namespace's ``__all__`` names exactly what it gives, every name is the defining module's own object
(a re-export, never a copy or a wrapper), a name exported by two namespaces is the same object, and the
former aliases ``run_closed_loop`` and ``circle_trajectory`` exist nowhere."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import cmstack

NAMESPACES = {
    "cmstack.tasks": {
        "Task",
        "RigidCoupling",
        "FrameTask",
        "RelativeFrameTask",
        "PostureTask",
        "CenterOfMassTask",
        "PointContact",
        "GAUSS",
        "LoopClosure",
        "Circle",
        "Constant",
        "Sinusoid",
        "MinimumJerk",
        "Trajectory",
    },
    "cmstack.limits": {"Limit", "EffortLimit", "JointVelocityLimit", "JointPositionLimit"},
    "cmstack.controllers": {
        "Controller",
        "UdwadiaKalabaController",
        "ContactUKController",
        "RobustUKController",
        "PIDC",
        "RobustPartitionController",
        "VelocityLaw",
        "PoseLaw",
        "TaskSpaceLaw",
    },
    "cmstack.plants": {
        "Plant",
        "plant_from_urdf",
        "plant_from_mjcf",
        "MujocoPlant",
        "ProjectionPlant",
        "ChainMujocoPlant",
    },
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
    assert len(names) == len(importlib.import_module(ns).__all__)  # no name listed twice
    for name, obj in names.items():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__name__ == name, f"{ns}.{name} is {obj.__name__}: one name per concept, no alias"
            home = importlib.import_module(obj.__module__)
            assert getattr(home, name) is obj, f"{ns}.{name} is not {obj.__module__}.{name}"
            assert not obj.__module__.startswith("cmstack.scenarios") or ns == "cmstack.scenario", (ns, name)


def test_a_name_in_two_namespaces_is_one_object():
    seen: dict[str, object] = {
        name: getattr(cmstack, name) for name in cmstack.__all__ if name != "__version__"
    }
    for ns in NAMESPACES:
        for name, obj in _exports(ns).items():
            if name in seen:
                assert seen[name] is obj, f"{ns}.{name} differs from another public {name}"
            seen[name] = obj


def test_unknown_names_raise_attribute_error():
    import cmstack.controllers

    with pytest.raises(AttributeError, match="no attribute 'UKController'"):
        cmstack.controllers.UKController  # noqa: B018
    with pytest.raises(AttributeError):
        cmstack.circle_trajectory  # noqa: B018


@pytest.mark.parametrize("alias", ALIASES)
def test_aliases_are_gone(alias):
    assert alias not in cmstack.__all__
    for mod in ("cmstack.sim.runner", "cmstack.models.trajectory", "cmstack.models.coupling", *NAMESPACES):
        assert not hasattr(importlib.import_module(mod), alias), f"{mod}.{alias}"


def test_controllers_package_stays_lazy():
    """``import cmstack.controllers.base`` does not import every law (the namespace imports on first use)."""
    import subprocess
    import sys

    code = (
        "import sys, cmstack.controllers.base; "
        "print(sorted(m for m in sys.modules if m.startswith('cmstack.controllers.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "['cmstack.controllers.base']", out


LAZY_CLI = """
import contextlib, io, sys
from cmstack.cli import build_parser, command_of, main

heavy = lambda: sorted({"cmstack.scenarios._common", "mujoco", "pinocchio"} & set(sys.modules))
out = {}
for argv in (["baseline", "check", "a", "--against", "b"], ["view", "r"]):
    build_parser(only=command_of(argv)).parse_args(argv)
    out[argv[0]] = heavy()
with contextlib.redirect_stdout(io.StringIO()) as text:
    assert main(["config", "slider_crank"]) == 0
    out["config"] = heavy() if "kp = 2500.0" in text.getvalue() else "no config printed"
    with contextlib.suppress(SystemExit):
        main(["--version"])
    out["--version"] = heavy() if "cmstack " in text.getvalue() else "no version printed"
build_parser(only=command_of(["run", "x"])).parse_args(["run", "x"])
out["run"] = heavy()
print(out)
"""


def test_command_line_imports_only_what_its_command_needs():
    """``cmstack config NAME``, ``--version`` and ``baseline``/``view`` parse (and the first two run)
    without importing the scenario machinery (cmstack.scenarios._common: MuJoCo, Pinocchio, pydantic);
    ``run`` imports it."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", LAZY_CLI], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert eval(out) == {
        "baseline": [],
        "view": [],
        "config": [],
        "--version": [],
        "run": ["cmstack.scenarios._common", "mujoco", "pinocchio"],
    }, out


@pytest.mark.parametrize("path", ["cmstack/__init__.py", "controllers/__init__.py"])
def test_lazy_namespace_declares_the_same_names_to_type_checkers(path):
    """A lazily imported namespace lists each name twice: in ``_EXPORTS`` (run time) and under
    ``if TYPE_CHECKING:`` (type checkers); both say the same name from the same module."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / path).read_text(encoding="utf-8"))
    exports = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_EXPORTS"
    )
    guard = next(
        n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    declared = {
        a.name: imp.module for imp in guard.body if isinstance(imp, ast.ImportFrom) for a in imp.names
    }
    assert declared == exports
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body), (
        "a module-level __getattr__ visible to mypy makes every name resolve (to Any)"
    )


GOOD = """
import numpy as np
from cmstack import Robot, simulate
from cmstack.controllers import Controller, PIDC, RobustUKController, TaskSpaceLaw, UdwadiaKalabaController
from cmstack.limits import EffortLimit, Limit
from cmstack.plants import MujocoPlant, Plant, plant_from_urdf
from cmstack.scenario import Context, Outcome, Row
from cmstack.tasks import GAUSS, Circle, FrameTask, PostureTask, RigidCoupling, Task


def build(robot: Robot, q0: np.ndarray) -> tuple[Controller, list[Limit], list[Task]]:
    hand = FrameTask(robot, "tool", Circle([0.4, 0.0, 0.5], 0.1, 2.0), kp=400.0, kd=40.0)
    tasks: list[Task] = [hand, PostureTask(robot, q0, kp=100.0, kd=20.0)]
    return UdwadiaKalabaController(robot, levels=[[hand], [tasks[1], GAUSS]]), [EffortLimit(robot)], tasks


def outcome(err: float) -> Outcome:
    return Outcome({"e": err}, [Row("e", err, target="<= 1e-3", ok=err <= 1e-3)])
"""
BAD = """
from cmstack import simulate
from cmstack.controllers import UKController
from cmstack.plants import plant_from_urdf
from cmstack.tasks import circle_trajectory


def f(plant, ctrl) -> None:
    simulate(plant, ctrl, duration="5 s", control_dt=1e-3)
"""


#: checked by the typing tests' one mypy run (tests/_mypy.py), each file on its own merits
MYPY_FILES = {"api_good.py": GOOD, "api_bad.py": BAD}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MYPY_PATHS = [EXAMPLES / "panda_circle.py", EXAMPLES / "dual_panda_carry.py"]


@pytest.mark.slow
def test_public_api_type_checks(typecheck):
    """A program written against the public namespaces type-checks (mypy), the two examples too; a wrong
    name (an alias that is gone, a law that does not exist) or a wrongly typed argument does not."""
    assert typecheck.returncode in (0, 1) and typecheck.checked > 0, typecheck.describe()  # mypy ran
    for good in ("api_good.py", *(p.name for p in MYPY_PATHS)):
        assert typecheck.errors_in(good) == [], (good, typecheck.describe())
    bad = typecheck.errors_in("api_bad.py")
    assert 'Module "cmstack.controllers" has no attribute "UKController"' in "\n".join(bad), bad
    assert 'Module "cmstack.tasks" has no attribute "circle_trajectory"' in "\n".join(bad), bad
    assert 'Argument "duration" to "simulate" has incompatible type "str"; expected "float"' in "\n".join(
        bad
    ), bad
