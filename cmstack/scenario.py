"""Writing a scenario of your own (docs/add_a_scenario.md): the public names of the scenario contract.

A scenario file defines ``run(ctx: Context) -> Outcome``; ``cmstack run FILE.py`` calls it with the
resolved config (``ctx.cfg``), the run directory (``ctx.out``) and the run's logger, writes
``metrics.json`` with each :class:`Row`'s target checked, and the log, plots and replay.

    from cmstack.scenario import Context, Outcome, Row

``script_settings(__file__, __doc__)`` is the command line of a scenario file run as a plain script (its
settings TOML beside it, ``--duration``, ``--out``).  ``default_config(name)`` reads a shipped scenario's
defaults (scenarios/configs/<name>.toml);
``apply_perturbation(plant, cfg)`` puts the config's ``[perturbation]`` table on a plant (read into the
library's typed ``cmstack.sim.perturb.Perturbation``, applied by ``perturb_plant``).

This module is the application tier (it re-exports cmstack.scenarios._common): the library never imports it.
"""

from __future__ import annotations

from cmstack.scenarios._common import (
    Context,
    Outcome,
    Row,
    apply_perturbation,
    default_config,
    run_scenario,
    scenario_main,
    script_settings,
)

__all__ = [
    "Context",
    "Outcome",
    "Row",
    "run_scenario",
    "scenario_main",
    "script_settings",
    "default_config",
    "apply_perturbation",
]
