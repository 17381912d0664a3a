import keras
import numpy as np
import pytest

import applications
from keras_capsules._compile import compile_again
from keras_capsules.callbacks import SpreadMarginSchedule
from keras_capsules.layers import ImageConverter
from keras_capsules.losses import SpreadLoss
from keras_capsules.metrics import SpreadMargin
from tests.conftest import BACKEND


def tiny_model():
    # One EM iteration: the margin is a matter of the loss, not of routing, and each
    # test compiles the training step anew once or twice (on JAX, 5 s less each).
    # One step per call, so that the callbacks see every step.
    model = applications.MatrixCapsNet(
        A=8,
        B=2,
        C=2,
        D=2,
        iterations=1,
        input_shape=(20, 20, 1),
        num_classes=3,
        image_converter=ImageConverter(),
    )
    return compile_again(model, steps_per_execution=1)


def data(n=32):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 20, 20, 1)).astype("float32"), rng.integers(0, 3, n)


class Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.margins, self.losses = [], []

    def on_train_batch_end(self, batch, logs=None):
        # The margin the step just taken trained at, as the compiled step logged it.
        self.margins.append(float(logs["spread_margin"]))
        self.losses.append(logs["spread_loss"])


def test_margin_rises_linearly_over_the_fit():
    schedule = SpreadMarginSchedule(0.2, 0.9)
    record = Record()
    x, y = data()
    tiny_model().fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[schedule, record])
    expected = [0.2 + 0.7 * step / 8 for step in range(8)]  # 4 steps x 2 epochs
    np.testing.assert_allclose(record.margins, expected, atol=1e-3)


def test_the_compiled_step_sees_the_new_margin():
    x, y = data()
    model = tiny_model()
    weights = model.get_weights()
    runs = []
    for end in (0.2, 0.9):
        model.set_weights(weights)
        model.optimizer = keras.optimizers.SGD(0.0)  # same weights in every step
        model.compile(optimizer=model.optimizer, metrics=["accuracy"])
        record = Record()
        schedule = SpreadMarginSchedule(0.2, end, steps=1)
        model.fit(
            x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[schedule, record]
        )
        runs.append(record.losses)
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-5)  # both start at 0.2
    assert runs[1][-1] > runs[0][-1] + 1e-3  # a larger margin, a larger loss


def test_resumes_from_the_optimizer_step():
    x, y = data()
    model = tiny_model()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # 4 steps done
    record = Record()
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=1,
        verbose=0,
        callbacks=[SpreadMarginSchedule(0.2, 0.9, steps=8), record],
    )
    np.testing.assert_allclose(record.margins, [0.2 + 0.7 * s / 8 for s in range(4, 8)], atol=1e-3)


class OwnMarginModel(keras.Model):
    """A model with its own `SpreadMargin`, whose loss is that margin."""

    def __init__(self):
        inputs = keras.Input((3,))
        super().__init__(inputs, keras.layers.Dense(3)(inputs))
        self.spread_margin = SpreadMargin(0.5)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return keras.ops.mean(y_pred) * 0.0 + self.spread_margin.margin


def test_every_step_reads_the_models_own_margin():
    # On JAX the compiled step reads the variable only if the callback wrote it
    # back into the training state: without, every step would read the first margin.
    model = OwnMarginModel()
    model.compile(optimizer="sgd")
    x = np.zeros((16, 3), "float32")
    schedule = SpreadMarginSchedule(0.2, 0.8, steps=3)
    history = model.fit(x, x, batch_size=4, epochs=1, verbose=0, callbacks=[schedule])
    margins = [0.2, 0.4, 0.6, 0.8]  # steps 0 to 3
    assert history.history["loss"][0] == pytest.approx(np.mean(margins), abs=1e-4)
    assert history.history["spread_margin"][0] == pytest.approx(0.8)  # the last step's
    assert model.count_params() == 12  # the margin is state, not a weight


@pytest.mark.skipif(BACKEND == "jax", reason="a SpreadLoss margin is a constant of a JAX step")
def test_updates_a_compiled_spread_loss():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="sigmoid")(inputs))
    loss = SpreadLoss()
    model.compile(optimizer="sgd", loss=loss)
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    model.fit(
        x,
        np.arange(16) % 3,
        batch_size=4,
        epochs=1,
        verbose=0,
        callbacks=[SpreadMarginSchedule(0.2, 0.9, steps=3)],
    )
    assert float(keras.ops.convert_to_numpy(loss.margin)) == pytest.approx(0.9, abs=1e-3)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="a constant of a JAX step; PyTorch: 1 per call")
def test_counts_every_step_of_a_call_running_several():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="sigmoid")(inputs))
    loss = SpreadLoss()
    model.compile(optimizer="sgd", loss=loss, steps_per_execution=3)
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    schedule = SpreadMarginSchedule(0.2, 0.9, steps=8)
    # 4 steps in two calls, of 3 and 1: the second call starts at step 3.
    model.fit(x, np.arange(16) % 3, batch_size=4, epochs=1, verbose=0, callbacks=[schedule])
    margin = float(keras.ops.convert_to_numpy(loss.margin))
    assert margin == pytest.approx(0.2 + 0.7 * 3 / 8, abs=1e-3)


def test_errors():
    with pytest.raises(ValueError, match="start"):
        SpreadMarginSchedule(start=0.0)
    with pytest.raises(ValueError, match="steps"):
        SpreadMarginSchedule(steps=0)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((4, 3), "float32")
    with pytest.raises(ValueError, match="nothing to schedule"):
        model.fit(x, x, epochs=1, verbose=0, callbacks=[SpreadMarginSchedule()])
