"""A process-wide count of changes to the parameters a compiled control step copies into its tables.

The fused UK step (``controllers/uk_plan.py``) copies the tasks' gains and targets into the arrays its
kernel reads, and copies them again only when ``version`` has moved since: every assignment of a task's
``kp``, ``kd``, ``q_ref``, constant target or trajectory (``models/coupling.py: Task.__setattr__``) and of
any attribute of a ``Circle`` (``models/trajectory.py``) calls ``changed``.  The arrays behind them
(``PostureTask.q_ref``, ``Circle.R``) are read-only copies, so that a change in place, which no
assignment would announce, is refused instead of missed."""

from __future__ import annotations

version = 0


def changed() -> None:
    """Announce a new value of a copied parameter (any task's, any circle's)."""
    global version
    version += 1
