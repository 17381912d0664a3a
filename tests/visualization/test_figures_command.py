"""`keras-capsules figures`: every kind written as a non-blank PNG of the expected size."""

import os
import re

import numpy as np
import pytest

from keras_capsules import cli
from tests.visualization.test_figures import tiny

matplotlib_image = pytest.importorskip("matplotlib.image")


def saved(tmp_path, input_shape):
    path = tmp_path / f"model{input_shape[0]}.keras"
    tiny(input_shape).save(path)
    return str(path)


def check_written(paths, printed):
    for path in paths:
        assert str(path) in printed
        png = matplotlib_image.imread(path)
        assert png.ndim == 3 and png.var() > 0
        assert len(np.unique(png.reshape(-1, png.shape[-1]), axis=0)) > 10


def test_all_kinds_for_an_mnist_model(tmp_path, capsys):
    model = saved(tmp_path, (28, 28, 1))
    out = tmp_path / "figs"
    args = ["figures", model, "--output", str(out), "--count", "3", "--dpi", "40"]
    assert cli.main(args + ["--dims", "0,5", "--steps=-0.1,0,0.1", "--sample", "40"]) == 0
    kinds = ("reconstructions", "dimensions", "routing", "routing_statistics")
    check_written([out / f"{kind}.png" for kind in kinds], capsys.readouterr().out)
    assert not (out / "multimnist.png").exists()
    # Two dimensions x three tweaks: the mosaic has 2 rows and 3 columns of 28 px tiles.
    dims = matplotlib_image.imread(out / "dimensions.png")
    assert dims.shape[0] < dims.shape[1]


def test_with_no_model_the_capsnet_mnist_preset_is_drawn(tmp_path, capsys):
    out = tmp_path / "figs"
    args = ["figures", "--output", str(out), "--count", "3", "--dpi", "40", "--sample", "40"]
    assert cli.main(args) == 0
    kinds = ("reconstructions", "dimensions", "routing", "routing_statistics")
    check_written([out / f"{kind}.png" for kind in kinds], capsys.readouterr().out)


def test_a_preset_by_name_or_folder(tmp_path, capsys):
    model = tiny((28, 28, 1))
    folder = model.save_to_preset(str(tmp_path / "preset"), metadata={"data": {"name": "mnist"}})
    out = tmp_path / "figs"
    args = ["figures", "--preset", folder, "--kind", "reconstructions", "--output", str(out)]
    assert cli.main(args + ["--count", "2", "--dpi", "40"]) == 0
    check_written([out / "reconstructions.png"], capsys.readouterr().out)
    with pytest.raises(SystemExit, match="preset 'no_such_preset'"):
        cli.main(["figures", "--preset", "no_such_preset", "--output", str(out)])
    with pytest.raises(SystemExit, match="not both"):
        cli.main(["figures", "m.keras", "--preset", folder, "--output", str(out)])


def test_multimnist_kind_for_a_36_pixel_model(tmp_path, capsys):
    model = saved(tmp_path, (36, 36, 1))
    out = tmp_path / "figs"
    args = ["figures", model, "--kind", "multimnist", "--output", str(out), "--count", "2"]
    # The test set is the one named, not one guessed from the input size.
    with pytest.raises(SystemExit, match=r"\(36, 36, 1\), and mnist's are \(28, 28, 1\).*--data"):
        cli.main(args)
    assert cli.main(args + ["--data", "multimnist", "--dpi", "40", "--index", "5"]) == 0
    check_written([out / "multimnist.png"], capsys.readouterr().out)
    # 2 successes and 2 failures among the 500 pairs, 1 inch each, 2 rows at 40 dpi.
    assert matplotlib_image.imread(out / "multimnist.png").shape[:2] == (80, 160)


def test_bad_requests_are_clear_errors(tmp_path):
    model = saved(tmp_path, (28, 28, 1))
    out = str(tmp_path / "figs")
    with pytest.raises(SystemExit, match="needs a model trained on MultiMNIST"):
        cli.main(["figures", model, "--kind", "multimnist", "--output", out])
    with pytest.raises(SystemExit, match=r"\(28, 28, 1\), and expanded-mnist's are \(40, 40"):
        cli.main(["figures", model, "--data", "expanded-mnist", "--output", out])
    with pytest.raises(SystemExit, match="--index must be in"):
        cli.main(["figures", model, "--index", "10000", "--output", out])
    with pytest.raises(SystemExit, match="dims"):
        cli.main(["figures", model, "--kind", "dimensions", "--dims", "99", "--output", out])
    with pytest.raises(SystemExit, match="no model at"):
        cli.main(["figures", str(tmp_path / "missing.keras")])


@pytest.mark.parametrize(
    "classes",
    [{"class_names": ["cat", "dog"]}, {"num_classes": 3}],
    ids=["two-named-classes", "three-classes"],
)
def test_a_model_of_other_classes_is_told_to_pass_its_images(tmp_path, classes):
    import applications

    model = applications.CapsNet(
        conv_filters=8, primary_capsule_types=2, capsule_dim=4, compile=False, **classes
    )
    path = str(tmp_path / "pets.keras")
    model.save(path)
    with pytest.raises(SystemExit, match=r"are not mnist's.*pass --images DIR"):
        cli.main(["figures", path, "--output", str(tmp_path / "figs")])


def test_a_colour_model_of_another_size_draws_from_a_folder_of_its_classes(tmp_path, capsys):
    from PIL import Image

    import applications

    folder = tmp_path / "images"
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (folder / name).mkdir(parents=True)
        for i in range(4):
            pixels = rng.integers(0, 256, (18, 22, 3)).astype("uint8")
            Image.fromarray(pixels).save(folder / name / f"{i}.png")
    model = applications.CapsNet(
        input_shape=(20, 24, 3),
        class_names=["cat", "dog"],
        conv_filters=8,
        conv_kernel_size=5,
        primary_capsule_types=2,
        primary_kernel_size=5,
        decoder_units=(16,),
    )
    path = tmp_path / "pets.keras"
    model.save(path)
    out = tmp_path / "figs"
    args = ["figures", str(path), "--images", str(folder), "--output", str(out), "--dpi", "40"]
    assert cli.main(args + ["--count", "3", "--sample", "8"]) == 0
    kinds = ("reconstructions", "dimensions", "routing", "routing_statistics")
    check_written([out / f"{kind}.png" for kind in kinds], capsys.readouterr().out)
    with pytest.raises(SystemExit, match=r"\(20, 24, 3\), and mnist's.*or --images DIR"):
        cli.main(["figures", str(path), "--output", str(out)])


def test_all_kinds_of_a_model_without_a_decoder_skip_what_needs_one(tmp_path, capsys):
    import applications

    path = tmp_path / "em.keras"
    applications.MatrixCapsNet(A=8, B=2, C=2, D=2, iterations=1).save(path)
    out = tmp_path / "figs"
    args = ["figures", str(path), "--output", str(out), "--dpi", "40", "--sample", "20"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "skipped reconstructions: MatrixCapsNet has no decoder" in printed
    assert "skipped dimensions: MatrixCapsNet has no decoder" in printed
    assert "skipped routing: " in printed and "CapsuleLayer" in printed
    check_written([out / "routing_statistics.png"], printed)
    with pytest.raises(SystemExit, match="reconstructions: MatrixCapsNet has no decoder"):
        cli.main([*args, "--kind", "reconstructions"])


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path, read_only_folder):
    model = saved(tmp_path, (28, 28, 1))
    output = os.path.join(read_only_folder, "figs")
    with pytest.raises(SystemExit) as refused:  # was a traceback from os.makedirs
        cli.main(["figures", model, "--output", output, "--kind", "routing", "--dpi", "40"])
    assert re.fullmatch(
        rf"keras-capsules figures: cannot create the output folder {re.escape(output)}: "
        "(Read-only file system|Permission denied)",
        str(refused.value.code),
    )
