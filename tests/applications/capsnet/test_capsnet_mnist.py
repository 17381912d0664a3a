import pytest

import applications


def test_the_papers_configuration_of_capsnet():
    model = applications.CapsNetMNIST(conv_filters=16, primary_capsule_types=4, compile=False)
    assert type(model) is applications.CapsNet and model.name == "capsnet_mnist"
    assert model.image_shape == (28, 28, 1) and model.num_classes == 10
    assert model.class_names == tuple("0123456789")
    config = model.get_config()
    assert applications.CapsNet.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs", [{"input_shape": (64, 64, 3)}, {"num_classes": 5}, {"class_names": ["a"]}]
)
def test_other_images_or_classes_point_to_capsnet(kwargs):
    with pytest.raises(ValueError, match=r"CapsNetMNIST is the paper's.*applications\.CapsNet\b"):
        applications.CapsNetMNIST(**kwargs)
