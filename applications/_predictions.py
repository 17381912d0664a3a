"""`predict` with Keras's signature, and the capsule outputs through their own methods."""

import warnings


class CapsulePredictions:
    """A mixin for models whose outputs are a dict of class scores and class poses.

    `predict` keeps `keras.Model.predict`'s signature and returns the class
    scores (`SCORES`, the model's key for them); `predict_poses` returns the
    class capsules' poses and `predict_outputs` the whole dict.
    """

    SCORES = "probabilities"

    def _prediction_inputs(self, x):
        return x

    def predict_outputs(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Every output of the model: a dict of NumPy arrays (the class scores and `"poses"`).

        Args: as `keras.Model.predict`'s.
        """
        return super().predict(
            self._prediction_inputs(x),
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

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None, **kwargs):
        """The class scores, `(n, num_classes)`, like `keras.Model.predict`.

        `predict_poses` gives the class capsules' poses and `predict_outputs`
        every output. The `outputs=` argument of earlier versions still works
        and warns (`DeprecationWarning`).
        """
        outputs = kwargs.pop("outputs", None)
        if kwargs:
            raise TypeError(f"predict() got unexpected keyword arguments: {sorted(kwargs)}")
        if outputs is None:
            return self.predict_outputs(x, batch_size, verbose, steps, callbacks)[self.SCORES]
        warnings.warn(
            "predict(outputs=...) is deprecated: use predict() for the class scores, "
            "predict_poses() for the poses and predict_outputs() for both.",
            DeprecationWarning,
            stacklevel=2,
        )
        if outputs not in (self.SCORES, "poses", "all"):
            raise ValueError(
                f'`outputs` must be "{self.SCORES}", "poses" or "all". '
                f"Received: outputs={outputs!r}"
            )
        result = self.predict_outputs(x, batch_size, verbose, steps, callbacks)
        return result if outputs == "all" else result[outputs]
