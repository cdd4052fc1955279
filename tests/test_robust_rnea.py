"""The robust law's model term by one RNEA on the open tree (PartitionModel.model_force) equals the
paper's body-wise sums Γ q̈ + h − Q_e, with and without the actuator bodies, and the two controller
paths give the same torques; bad states are refused by name."""
import numpy as np
import pytest

from cmstack.controllers.robust_partition import RobustPartitionController
from cmstack.models.errors import ConfigError, StateError
from cmstack.models.partition import PartitionModel


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
    traj = lambda t: (np.array([0.1 * np.sin(t), -0.2, 0.1]), np.array([0.1 * np.cos(t), 0, 0]), np.array([-0.1 * np.sin(t), 0, 0]))
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
