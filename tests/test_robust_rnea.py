"""The robust law's model term by one RNEA on the open tree (PartitionModel.model_force) equals the
paper's body-wise sums Γ q̈ + h − Q_e, with and without the actuator bodies, and the two controller
paths give the same torques; bad states are refused by name."""

import numpy as np
import pytest

from cmstack.controllers.robust_partition import RobustPartitionController
from cmstack.models.errors import ConfigError, StateError
from cmstack.models.partition import PartitionModel
from cmstack.models.trajectory import Sinusoid


def _states(n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = np.array([rng.uniform(-3, 3), rng.uniform(-1.2, 1.2), rng.uniform(0.0, 0.2)])
        yield q, rng.normal(size=3), rng.normal(size=3) * 3


@pytest.mark.parametrize("with_actuator", [False, True])
def test_model_force_equals_partition_sums(with_actuator):
    pm = PartitionModel(with_actuator=with_actuator)
    for q, v, a in _states(100):
        tm = pm.compute(q, v)
        ref = tm.Gamma @ a + tm.h - tm.Qe
        assert np.allclose(pm.model_force(q, v, a), ref, rtol=1e-12, atol=1e-10 * np.abs(ref).max())


def test_model_force_follows_reconfiguration():
    pm = PartitionModel()
    pm.set_body("link2", mass=80.0, length=2.5)
    q, v, a = next(_states(1, seed=3))
    tm = pm.compute(q, v)
    assert np.allclose(pm.model_force(q, v, a), tm.Gamma @ a + tm.h - tm.Qe, rtol=1e-12, atol=1e-9)


def test_controller_paths_agree_and_refuse_bad_input():
    traj = lambda t: (
        np.array([0.1 * np.sin(t), -0.2, 0.1]),
        np.array([0.1 * np.cos(t), 0, 0]),
        np.array([-0.1 * np.sin(t), 0, 0]),
    )
    fast = RobustPartitionController(PartitionModel(), traj)
    ref = RobustPartitionController(PartitionModel(), traj, terms="partition")
    for i, (q, v, _) in enumerate(_states(50, seed=1)):
        t = 0.01 * i
        assert np.allclose(fast(t, q, v), ref(t, q, v), rtol=1e-9, atol=1e-9)
    with pytest.raises(StateError, match="stroke"):
        fast(0.0, np.array([0.0, 0.0, 0.5]), np.zeros(3))
    with pytest.raises(StateError, match="non-finite"):
        fast(0.0, np.array([np.nan, 0.0, 0.1]), np.zeros(3))
    with pytest.raises(ConfigError, match="terms"):
        RobustPartitionController(PartitionModel(), traj, terms="fast")


class NamedSinusoid(Sinusoid):
    """Adds a convenience, not maths: still sampled in the kernel."""

    def label(self):
        return "named"


class LateSinusoid(Sinusoid):
    """Redefines its sampling (``late`` = a quarter period late): must be called, not sampled as a Sinusoid."""

    late = 0.25  # s

    def sample(self, t):
        return Sinusoid.sample(self, t - self.late)


def test_reference_chosen_by_what_it_does():
    """The compiled step samples a reference as a sinusoid by ``kernel_sinusoid()``, not by its type
    (issue 22): a subclass that adds no maths is sampled in the kernel with the built-in's torques; one that
    redefines its sampling is called (its torques are those of the same function given as a plain callable);
    a reference set after construction replaces the kernel's copy of the former one."""
    args = ([0.1, -0.2, 0.1], [0.3, 0.1, 0.02], [0.5, 0.25, 1.0], [0.0, 1.0, 2.0])
    builtin = RobustPartitionController(PartitionModel(), Sinusoid(*args))
    named = RobustPartitionController(PartitionModel(), NamedSinusoid(*args))
    late = RobustPartitionController(PartitionModel(), LateSinusoid(*args))
    late_fn = RobustPartitionController(PartitionModel(), lambda t: tuple(Sinusoid(*args).sample(t - 0.25)))
    assert builtin._sinus and named._sinus and not late._sinus
    switched = RobustPartitionController(PartitionModel(), Sinusoid([0.0, 0.0, 0.05], 0.5, 2.0))
    switched.trajectory = Sinusoid(*args)
    for i, (q, v, _) in enumerate(_states(30, seed=2)):
        t = 0.013 * i
        tau = builtin(t, q, v)
        assert np.array_equal(named(t, q, v), tau) and np.array_equal(switched(t, q, v), tau)
        assert np.array_equal(late(t, q, v), late_fn(t, q, v))
        assert np.abs(late(t, q, v) - tau).max() > 1e-6
