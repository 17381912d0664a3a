import numpy as np
import pytest

import applications
from keras_capsules.datasets import smallnorb


def test_the_papers_configuration_for_smallnorb():
    model = applications.MatrixCapsNetNORB(64, 8, 16, 16, compile=False)
    assert type(model) is applications.MatrixCapsNet and model.count_params() == 68_754
    assert model.image_shape == (32, 32, 2) and model.class_names == smallnorb.CLASS_NAMES
    assert model.image_converter.scale is None  # the smallNORB pipelines standardise them
    assert model.name == "matrix_capsnet_norb"
    config = model.get_config()
    again = applications.MatrixCapsNet.from_config(config)
    assert again.get_config() == config
    x = np.zeros((2, 32, 32, 2), "float32")
    assert again.predict(x, verbose=0)["probabilities"].shape == (2, 5)


@pytest.mark.parametrize("kwargs", [{"input_shape": (28, 28, 1)}, {"num_classes": 10}])
def test_other_images_or_classes_point_to_matrix_capsnet(kwargs):
    pattern = r"MatrixCapsNetNORB is the paper's.*applications\.MatrixCapsNet\b"
    with pytest.raises(ValueError, match=pattern):
        applications.MatrixCapsNetNORB(**kwargs)
