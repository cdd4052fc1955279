"""Joint limits as bounds on the acceleration, l ≤ C v̇ ≤ u, for the controllers' QPs: the public names.

from cmstack.limits import EffortLimit, JointPositionLimit
UdwadiaKalabaController(robot, levels=[...], limits=[EffortLimit(robot, tau_max)])
"""

from __future__ import annotations

from cmstack.models.limits import EffortLimit, JointPositionLimit, JointVelocityLimit, Limit

__all__ = ["Limit", "EffortLimit", "JointVelocityLimit", "JointPositionLimit"]
