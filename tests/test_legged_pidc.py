"""The legged scenario with ``law = "pidc"`` (controllers/contact_pidc.py: PIDC, the stance feet as closures to the
ground) on mjcf/quadruped_five_bar.xml at 1 kHz on the MuJoCo plant, short: stand 0.05 s, a 5 mm base circle at 4 Hz
(0.05-0.40 s), standing to 0.45 s; no push, no lift (tests/test_legged.py runs them under the UK law; the three-foot
stance of the lift is checked against the rigid dynamics in tests/test_contact_pidc.py).  In a forked child with a
wall-clock limit (tests/_forked.py)."""

from __future__ import annotations

import pytest
from _forked import run_forked

from cmstack.scenarios import legged

SETS = [
    "law=pidc",
    "stand_s=0.05",
    "circle_radius=0.005",
    "circle_frequency=4.0",
    "circle_ramp_s=0.1",
    "push_duration=0.0",
    'lift_foot=""',
    "check_states=1",
    "check_random_states=1",
]


def _run(out: str) -> dict:
    from cmstack.scenarios._common import run_scenario

    m, _ = run_scenario(legged.NAME, legged.run, sets=SETS, duration=0.45, out=out, html=False, plots=False)
    return {k: m[k] for k in sorted(m) if not isinstance(m[k], (list, dict))}


@pytest.fixture(scope="module")
def robot():
    """The model, loaded here so that the child inherits its kernels, and the config schemas (pydantic: seconds to
    import under load) imported here for the same reason."""
    import cmstack.scenarios.schemas  # noqa: F401
    from cmstack.models.robot import Robot
    from cmstack.scenarios._common import default_config

    return Robot.from_mjcf(default_config(legged.NAME)["model"])


def test_pidc_law_stands_and_tracks_the_circle(tmp_path, robot):
    """Every scenario target under the PIDC law: base within 2 mm on the circle (and it moved: the error is not 0),
    no stance foot slipping 1 mm, the commanded forces inside the pyramids on every step (no violation), loops closed
    to 1 µm, the passive coordinates' torque round-off, no fall."""
    m = run_forked(_run, str(tmp_path / "run"), timeout=240)
    assert m["law"] == "pidc" and m["ok"] is True, m
    for key, bound in legged.TARGETS.items():
        if key == "cone_margin_min":
            assert m[key] >= bound, (key, m[key])
        else:
            assert m[key] <= bound, (key, m[key])
    assert 0.0 < m["base_pos_error_max_m"] and m["fell"] is False and m["cone_violations"] == 0
