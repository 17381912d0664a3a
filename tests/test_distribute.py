import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_capsules import distribute
from tests.conftest import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TensorFlow and JAX engines")
def test_two_devices_give_the_single_device_losses_and_weights():
    """MirroredStrategy (TF) or DataParallel (JAX) over a CPU split in two devices.

    Four Adam steps of a small CapsNetMNIST on 64 real MNIST images, global
    batch 16, from the same initial weights. Tolerance: losses to 1e-5
    relative, weights to 1e-5 absolute (the steps move them by ~4e-3); only the
    order of the gradient sums differs. Measured: 7e-8 relative, 4e-8 (TF) and
    2e-7 (JAX) absolute.
    """
    result = subprocess.run(
        [sys.executable, "-m", "tests._data_parallel_run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env=dict(os.environ, KERAS_BACKEND=BACKEND),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["replicas"] == 2
    np.testing.assert_allclose(run["distributed_losses"], run["single_losses"], rtol=1e-5)
    assert run["single_losses"][-1] < run["single_losses"][0]  # it trained
    assert run["max_weight_change"] > 1e-3
    assert run["max_weight_difference"] < 1e-5
    # The loss trackers report the global batch, not a replica's share of it.
    evaluated = run["distributed_evaluate"]
    assert evaluated["margin_loss"] + evaluated["reconstruction_loss"] == pytest.approx(
        evaluated["loss"], rel=1e-5
    )


def test_without_a_strategy_losses_are_not_scaled():
    assert distribute.replicas_in_sync() == 1
    assert distribute.scale_loss(3.0) == 3.0 and distribute.unscale_loss(3.0) == 3.0


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's strategies")
def test_tensorflow_scope_and_argument_errors():
    import tensorflow as tf

    with distribute.data_parallel() as strategy:
        assert isinstance(strategy, tf.distribute.MirroredStrategy)
        assert tf.distribute.get_strategy() is strategy
    with pytest.raises(ValueError, match="`devices` cannot be combined"):
        with distribute.data_parallel(devices=["/cpu:0"], multi_worker=True):
            pass


@pytest.mark.skipif(BACKEND != "jax", reason="the Keras distribution API on JAX")
def test_jax_scope_and_argument_errors():
    with distribute.data_parallel() as distribution:
        assert isinstance(distribution, keras.distribution.DataParallel)
        assert keras.distribution.distribution() is distribution
    assert keras.distribution.distribution() is None
    with pytest.raises(ValueError, match="`multi_worker` is a TensorFlow option"):
        with distribute.data_parallel(multi_worker=True):
            pass


@pytest.mark.skipif(BACKEND in ("tensorflow", "jax"), reason="backends without an engine")
def test_other_backends_are_refused():
    with pytest.raises(ValueError, match="TensorFlow or JAX backend"):
        with distribute.data_parallel():
            pass
