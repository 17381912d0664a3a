"""`predict` with Keras's signature, and the capsule outputs through their own methods."""

import numpy as np
from keras import ops


class CapsulePredictions:
    """A mixin for models whose outputs are a dict of class scores and class poses.

    `predict` keeps `keras.Model.predict`'s signature and returns the class
    scores (`"probabilities"`, as every classifier names them); `predict_poses` returns the
    class capsules' poses and `predict_outputs` the whole dict.
    """

    def _prediction_inputs(self, x):
        return x

    def predict_outputs(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Every output of the model: a dict of NumPy arrays (the class scores and `"poses"`).

        Args: as `keras.Model.predict`'s.
        """
        x = self._prediction_inputs(x)
        if isinstance(x, np.ndarray) and x.ndim and len(x) == 0:
            # Keras's predict fails on no data, and some convolution kernels on an
            # empty batch (TensorFlow's oneDNN ones return their input): the
            # outputs of one blank image, cut to none.
            blank = ops.convert_to_tensor(np.zeros((1, *x.shape[1:]), "float32"))
            outputs = self(blank, training=False)
            return {key: ops.convert_to_numpy(value)[:0] for key, value in outputs.items()}
        return super().predict(
            x,
            batch_size=batch_size,
            verbose=verbose,
            steps=steps,
            callbacks=callbacks,
        )

    def predict_poses(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """The class capsules' poses, `(n, num_classes, capsule_dim)`.

        Args: as `keras.Model.predict`'s.
        """
        return self.predict_outputs(x, batch_size, verbose, steps, callbacks)["poses"]

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """The class scores, `(n, num_classes)`, like `keras.Model.predict`.

        `predict_poses` gives the class capsules' poses and `predict_outputs`
        every output.
        """
        return self.predict_outputs(x, batch_size, verbose, steps, callbacks)["probabilities"]
