"""Control laws: a controller turns (t, q, v) into joint torques (the ``Controller`` protocol of base.py).
The public names:

    from cmstack.controllers import UdwadiaKalabaController, RobustUKController, PIDC

* ``UdwadiaKalabaController`` prioritized Udwadia–Kalaba [Milioshin] (udwadia_kalaba.py), and
  ``RobustUKController`` the same law with integral action and a position filter (uk_robust.py);
* ``ContactUKController`` the same law on a floating base standing on ``PointContact`` feet, the contact forces
  inside friction pyramids (contact_uk.py, docs/legged.md), and ``ContactPIDC`` projected inverse dynamics on the same
  contacts, taken as closures to the ground, the internal forces chosen inside the pyramids (contact_pidc.py);
* ``PIDC`` projected inverse dynamics [Aghili] (pidc.py), with its force loop ``ForceLaw`` (λ_d, e.g. ``Squeeze``);
* ``RobustPartitionController`` the robust inertia-partitioning law (18) [Dastranj] (robust_partition.py);
* the DAC port laws [Eslami] (dac.py): ``VelocityLaw`` (I), ``PoseLaw`` (II), ``TaskSpaceLaw`` (III), on
  the ``PortLaw`` base, with ``Obstacle`` for law III's null-space avoidance.

Each name is imported on first use, so that ``import cmstack.controllers.base`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# public name -> module that defines it
_EXPORTS = {
    "Controller": "cmstack.controllers.base",
    "StepInfo": "cmstack.controllers.base",
    "SensesPlant": "cmstack.controllers.base",
    "ReportsErrors": "cmstack.controllers.base",
    "ReportsMetrics": "cmstack.controllers.base",
    "UdwadiaKalabaController": "cmstack.controllers.udwadia_kalaba",
    "UKStepInfo": "cmstack.controllers.udwadia_kalaba",
    "ContactUKController": "cmstack.controllers.contact_uk",
    "ContactStepInfo": "cmstack.controllers.contact_uk",
    "ContactPIDC": "cmstack.controllers.contact_pidc",
    "ContactPIDCInfo": "cmstack.controllers.contact_pidc",
    "RobustUKController": "cmstack.controllers.uk_robust",
    "PIDC": "cmstack.controllers.pidc",
    "PIDCInfo": "cmstack.controllers.pidc",
    "ForceLaw": "cmstack.controllers.pidc",
    "Squeeze": "cmstack.controllers.pidc",
    "RobustPartitionController": "cmstack.controllers.robust_partition",
    "RobustInfo": "cmstack.controllers.robust_partition",
    "PortLaw": "cmstack.controllers.dac",
    "VelocityLaw": "cmstack.controllers.dac",
    "PoseLaw": "cmstack.controllers.dac",
    "TaskSpaceLaw": "cmstack.controllers.dac",
    "Obstacle": "cmstack.controllers.dac",
    "LawInfo": "cmstack.controllers.dac",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the same names for type checkers (mypy reads these; at run time __getattr__ serves them)
    from cmstack.controllers.base import Controller, ReportsErrors, ReportsMetrics, SensesPlant, StepInfo
    from cmstack.controllers.contact_pidc import ContactPIDC, ContactPIDCInfo
    from cmstack.controllers.contact_uk import ContactStepInfo, ContactUKController
    from cmstack.controllers.dac import LawInfo, Obstacle, PortLaw, PoseLaw, TaskSpaceLaw, VelocityLaw
    from cmstack.controllers.pidc import PIDC, ForceLaw, PIDCInfo, Squeeze
    from cmstack.controllers.robust_partition import RobustInfo, RobustPartitionController
    from cmstack.controllers.udwadia_kalaba import UdwadiaKalabaController, UKStepInfo
    from cmstack.controllers.uk_robust import RobustUKController
else:  # hidden from type checkers, which then know exactly the names above
    from cmstack.models._lazy import lazy_getattr

    __getattr__ = lazy_getattr("cmstack.controllers", _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
