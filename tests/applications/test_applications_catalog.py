import applications
from applications.applications_catalog import CATALOG


def test_every_architecture_has_its_class_and_recipe():
    for name in CATALOG.architectures():
        assert isinstance(CATALOG.model_class(name).RECIPE, applications.Recipe)


def test_the_cheaper_option_for_large_images_is_a_capsule_head_on_a_backbone():
    option, build = CATALOG.cheaper_option("capsnet", (64, 64, 3), 10)
    assert option == "backbone-capsnet --backbone MobileNetV3Small"
    model = build()
    assert isinstance(model, applications.BackboneCapsNet) and model.image_shape == (64, 64, 3)
    assert model.count_params() < applications.CapsNet(input_shape=(64, 64, 3)).count_params() / 10
    assert CATALOG.cheaper_option("capsnet", (28, 28, 1), 10) is None  # too small for it
    assert CATALOG.cheaper_option("backbone-capsnet", (224, 224, 3), 10) is None
