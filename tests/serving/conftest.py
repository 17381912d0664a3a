import keras
import numpy as np
import pytest

from tests.conftest import BACKEND

# A small applications.EfficientCapsNet (self-attention routing, batch normalisation).
EFFICIENT_SMALL = dict(
    conv_filters=(8, 8, 8, 32), primary_capsule_types=4, capsule_dim=8, decoder_units=(32,)
)


@pytest.fixture(scope="session")
def efficient_capsnet_export(tmp_path_factory):
    """A small EfficientCapsNet saved as .keras, `keras-capsules export`ed, and some images.

    Returns `(model, version directory, images)`.
    """
    if BACKEND != "tensorflow":
        pytest.skip("SavedModel export is the TensorFlow part")
    import applications
    from keras_capsules import cli

    keras.utils.set_random_seed(7)
    root = tmp_path_factory.mktemp("efficient")
    model = applications.EfficientCapsNet(**EFFICIENT_SMALL)
    model.save(str(root / "model.keras"))
    assert cli.main(["export", str(root / "model.keras"), str(root / "efficient")]) == 0
    x = np.random.default_rng(5).integers(0, 256, (4, 28, 28, 1)).astype("float32")
    return model, str(root / "efficient" / "1"), x
