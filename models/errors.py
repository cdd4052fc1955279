"""One module of exception types for the whole stack.

Every error a user can cause (a bad file, a wrong name, a bad config value, an infeasible
constraint set, a state that went NaN) is raised as one of these, with a message that names the
file, frame, joint, constraint or parameter at fault and says what to do. Nothing here is raised
by a bare ``assert``.
"""


class StackError(Exception):
    """Base class of every error the stack raises on purpose."""


class ModelFileError(StackError):
    """A URDF, SRDF or MJCF file is missing, unreadable or malformed, or describes bodies that cannot exist
    (a NaN or negative mass, a moving body without mass, an inertia that is not positive semi-definite or
    breaks the triangle inequality of the principal moments)."""


class ModelFileWarning(UserWarning):
    """A model file read as written but not as its author probably meant: e.g. its initial pose is not
    assembled, and closing its loops moved joints far from it."""


class MissingExtraError(ModelFileError):
    """A file or module comes from an optional package that is not installed (e.g. the Panda of
    example-robot-data, in cmstack's ``dev`` extra).  ``package``: the distribution to install;
    ``extra``: the cmstack extra that brings it.  A ModelFileError, as before it had its own type."""

    def __init__(self, message: str, package: str = "", extra: str = "dev"):
        super().__init__(message)
        self.package = package
        self.extra = extra


class FrameNotFoundError(StackError):
    """A frame, body or joint name does not exist in the model."""


class JointMapError(StackError):
    """The plant's joints do not match the model's (names missing on either side, or wrong type)."""


class ConfigError(StackError):
    """A scenario configuration is invalid: unknown key, wrong type, value out of range."""


class InfeasibleError(StackError):
    """A constraint set cannot be satisfied (incompatible hard constraints, QP infeasible)."""


class SolverError(StackError):
    """A QP did not solve; the message carries its status and the state that caused it."""


class StateError(StackError):
    """The state handed to a model or controller is not valid (NaN, wrong size, out of range)."""


class SensorFault(StateError):
    """A measurement the loop cannot use: an encoder frame that admits no loop closure (a jump, a dead encoder),
    a reconstruction of the passive joints that does not converge in its budget, a branch flip, a singular loop.
    ``kind`` names it (one of ``models/estimator.py: FAULTS``, or ``stale_frame``: the rt loop received the
    driver's frame counter twice, sim/rt_loop.py), ``joint`` the encoder at fault when there is one,
    ``t`` the time of the frame [s] when the loop knows it (sim/sensors.py sets it)."""

    def __init__(self, kind: str, message: str, joint: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.joint = joint
        self.t: float | None = None

    def fields(self) -> dict:
        """The fault for metrics.json: fault, fault_joint, fault_t."""
        return {"fault": self.kind, "fault_joint": self.joint, "fault_t": self.t}


def check_finite(name: str, x: object, where: str = "") -> None:
    """Raise StateError if ``x`` contains NaN or inf, naming the quantity and where it was seen."""
    import numpy as np

    arr = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))
        raise StateError(
            f"{name} contains non-finite values at indices {bad[:10].tolist()}"
            + (f" ({where})" if where else "")
            + "; the simulation diverged or the input is corrupt."
        )
