"""`train --images` and `evaluate --images`: the data a run records, checks and reads.

A run records its data's fingerprint in `run.json`; resuming or continuing
it on changed data is refused in one line naming the change. The folder is
walked once and decoded by TensorFlow, as training decodes it, before
anything is written; `run.json` is written once the model is built.
"""

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from keras_capsules import cli
from keras_capsules.cli import train
from keras_capsules.datasets._folder_walk import fingerprint
from keras_capsules.datasets._folder_walk import list_folder
from tests.conftest import requires_tensorflow
from tests.datasets.test_image_folder import edit_in_place

pytestmark = requires_tensorflow

CLASSES = ("one", "two", "zero")
TINY = ["--conv-filters", "8", "--primary-capsule-types", "2", "--batch-size", "4"]
TINY += ["--seed", "0", "--verbose", "0", "--image-size", "28", "28"]


def _pngs(folder, count, value):
    """`count` 28x28 grey PNG files in `folder`, of pixels around `value`."""
    rng = np.random.default_rng(value)
    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        pixels = np.clip(rng.integers(0, 40, (28, 28)) + value, 0, 255).astype("uint8")
        Image.fromarray(pixels).save(os.path.join(folder, f"{i}.png"))


def _tiff_named_jpg(path):
    """A TIFF file named `.jpg`: Pillow reads it, TensorFlow cannot."""
    Image.fromarray(np.full((28, 28), 50, "uint8")).save(path, "TIFF")


def _folder(root):
    """Three classes of 4 grey PNG images each, and a TIFF named .jpg in `one`."""
    for value, name in zip((30, 120, 210), CLASSES):
        _pngs(os.path.join(root, name), 4, value)
    _tiff_named_jpg(os.path.join(root, "one", "bad.jpg"))
    return root


class _Reached(Exception):
    """Raised where a test stops a run that got past the checks."""


def _stop_at_fit(monkeypatch):
    def fit(*args, **kwargs):
        raise _Reached

    monkeypatch.setattr(train, "_fit_and_evaluate", fit)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished one-epoch run on a folder; the run's backup, kept before it was deleted.

    Tests put the folder back as it was (the same files, sizes and times)
    at its path, which `run.json` records, and copy the run to their own
    `--output`, which may differ between a run's sessions.
    """
    base = tmp_path_factory.mktemp("trained")
    images = _folder(str(base / "images"))
    pristine, output, backup = str(base / "pristine"), str(base / "run"), str(base / "backup")
    shutil.copytree(images, pristine)
    report = train._report

    def keep_backup(args, *rest):
        shutil.copytree(os.path.join(args.output, "backup"), backup)
        return report(args, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "_report", keep_backup)
        code = _train(images, output)
    assert code == 0
    return {"images": images, "pristine": pristine, "output": output, "backup": backup}


def _session(trained, tmp_path, resume=False):
    """`(images, output)`: the folder as trained and a copy of the run (interrupted: `resume`)."""
    shutil.rmtree(trained["images"])
    shutil.copytree(trained["pristine"], trained["images"])  # copy2: the times kept
    output = str(tmp_path / "run")
    shutil.copytree(trained["output"], output)
    if resume:  # killed after its epoch: a backup, no metrics
        shutil.copytree(trained["backup"], os.path.join(output, "backup"))
        os.remove(os.path.join(output, "metrics.json"))
    return trained["images"], output


def _train(images, output, *more):
    args = ["train", "capsnet", "--images", images, "--skip-bad-images", *TINY]
    return cli.main([*args, "--output", output, *more])


def test_a_run_records_the_fingerprint_of_the_files_it_read(trained, tmp_path, capsys):
    images, output = _session(trained, tmp_path)
    data = json.load(open(os.path.join(output, "run.json")))["data"]
    assert data["kind"] == "folder" and data["classes"] == list(CLASSES)
    assert data["counts"] == [4, 4, 4] and data["files"] == 13 and data["skipped"] == 1
    assert len(data["digest"]) == 64
    # The unchanged folder continues the run.
    assert _train(images, output, "--epochs", "2") == 0
    assert json.load(open(os.path.join(output, "metrics.json")))["epochs"] == 2


def _change(images, change):
    if change == "add":
        _pngs(os.path.join(images, "three"), 4, 60)
    elif change == "rename":
        os.rename(os.path.join(images, "two"), os.path.join(images, "deux"))
    elif change == "remove":
        shutil.rmtree(os.path.join(images, "two"))
    elif change == "swap":
        os.rename(os.path.join(images, "one"), os.path.join(images, "tmp"))
        os.rename(os.path.join(images, "two"), os.path.join(images, "one"))
        os.rename(os.path.join(images, "tmp"), os.path.join(images, "two"))
    elif change == "modify":  # one image replaced by another of the same name
        _pngs(os.path.join(images, "zero", "new"), 1, 5)
        os.replace(
            os.path.join(images, "zero", "new", "0.png"), os.path.join(images, "zero", "1.png")
        )
        os.rmdir(os.path.join(images, "zero", "new"))
    elif change == "edit":  # other pixels, the same size and modification time
        edit_in_place(os.path.join(images, "zero", "1.png"))


@pytest.mark.parametrize(
    "change, named",
    [
        ("add", "class 'three' added"),
        ("rename", "class 'two' renamed 'deux'"),
        ("remove", "class 'two' renamed or removed"),
        ("swap", "classes reordered ('one' holds what 'two' held, 'two' holds what 'one' held)"),
        ("modify", "1 file changed in class 'zero' (1 modified)"),
        ("edit", "1 file changed in class 'zero' (1 edited in place keeping its size and time)"),
    ],
)
def test_continuing_on_changed_data_is_refused_naming_the_change(trained, tmp_path, change, named):
    images, output = _session(trained, tmp_path)
    _change(images, change)
    with pytest.raises(SystemExit) as refused:
        _train(images, output, "--epochs", "2")
    message = str(refused.value.code)
    assert f"changed since it was trained: {named}. " in message and "--fresh" in message
    assert "\n" not in message
    assert json.load(open(os.path.join(output, "metrics.json")))["epochs"] == 1  # untouched


def test_resuming_on_changed_data_is_refused_and_fresh_starts_over(trained, tmp_path, capsys):
    images, output = _session(trained, tmp_path, resume=True)
    _change(images, "add")
    with pytest.raises(SystemExit, match=r"changed since it was trained: class 'three' added\."):
        _train(images, output, "--epochs", "2")  # was a Keras traceback: 3 classes, 4 in the data
    assert os.path.isdir(os.path.join(output, "backup"))
    assert _train(images, output, "--epochs", "1", "--fresh") == 0
    data = json.load(open(os.path.join(output, "run.json")))["data"]
    assert data["classes"] == ["one", "three", "two", "zero"]


def test_resuming_on_images_edited_in_place_is_refused(trained, tmp_path):
    images, output = _session(trained, tmp_path, resume=True)
    _change(images, "edit")
    with pytest.raises(SystemExit) as refused:
        _train(images, output, "--epochs", "2")
    assert str(refused.value.code) == (
        f"keras-capsules train: the data of the run in {output} changed since it was trained: "
        "1 file changed in class 'zero' (1 edited in place keeping its size and time). Restore "
        "the data to resume or continue the run, choose another --output, or pass --fresh to "
        "start over on this data (the run's files are deleted)."
    )
    assert os.path.isdir(os.path.join(output, "backup"))


def test_a_run_recorded_without_contents_continues_and_records_them(trained, tmp_path, capsys):
    images, output = _session(trained, tmp_path)
    path = os.path.join(output, "run.json")
    run = json.load(open(path))
    content = run["data"]
    older = fingerprint(list_folder(images), content["counts"], [None] * content["skipped"])
    assert "content" not in older and older["digest"] != content["digest"]
    run["data"] = older  # as an older version recorded it: paths, sizes and times
    with open(path, "w") as f:
        json.dump(run, f)
    assert _train(images, output, "--epochs", "2") == 0
    assert "records its images' paths, sizes and times but not their contents" in (
        capsys.readouterr().out
    )
    assert json.load(open(path))["data"] == content


def test_files_tensorflow_cannot_decode_are_named_or_skipped_and_not_read(trained, tmp_path):
    images, output = _session(trained, tmp_path)
    # The fixture's run skipped the TIFF named .jpg and trained (it crashed in epoch 1).
    assert json.load(open(os.path.join(output, "run.json")))["data"]["skipped"] == 1
    fresh = str(tmp_path / "new")
    args = ["train", "capsnet", "--images", images, *TINY, "--output", fresh]
    with pytest.raises(SystemExit) as refused:
        cli.main(args)
    message = str(refused.value.code)
    assert "bad.jpg cannot be read as an image: TensorFlow, which training decodes with" in message
    assert "--skip-bad-images" in message and "\n" not in message
    assert not os.path.exists(fresh)


def test_evaluate_names_an_undecodable_file_and_evaluates_some_classes(trained, tmp_path, capsys):
    images, output = _session(trained, tmp_path)
    model = os.path.join(output, "model.keras")
    with pytest.raises(SystemExit, match=r"^keras-capsules evaluate: .*bad.jpg cannot be read"):
        cli.main(["evaluate", model, "--images", images])  # was a traceback
    assert cli.main(["evaluate", model, "--images", images, "--skip-bad-images"]) == 0
    printed = capsys.readouterr().out
    assert "Skipped 1 file(s)" in printed and "(12 images)" in printed
    some = str(tmp_path / "some")
    shutil.copytree(os.path.join(images, "zero"), os.path.join(some, "zero"))
    assert cli.main(["evaluate", model, "--images", some]) == 0  # was refused: one class folder
    printed = capsys.readouterr().out
    assert "holds 1 of the model's 3 classes: the accuracy is over their images" in printed
    assert "Accuracy: " in printed and "(4 images)" in printed


def test_a_bad_preset_leaves_nothing_that_refuses_the_corrected_command(tmp_path, monkeypatch):
    images = _folder(str(tmp_path / "images"))
    output = str(tmp_path / "run")
    with pytest.raises(SystemExit, match="--from-preset no_such_preset"):
        _train(images, output, "--from-preset", "no_such_preset")
    assert not os.path.exists(os.path.join(output, "run.json"))
    _stop_at_fit(monkeypatch)
    with pytest.raises(_Reached):  # was "a run trained with other options"
        _train(images, output)


def test_a_run_that_crashed_before_its_first_epoch_binds_nothing(tmp_path, monkeypatch):
    images = _folder(str(tmp_path / "images"))
    output = str(tmp_path / "run")
    _stop_at_fit(monkeypatch)
    with pytest.raises(_Reached):  # a crash in the first epoch: run.json, no model, no backup
        _train(images, output)
    assert os.path.exists(os.path.join(output, "run.json"))
    with pytest.raises(_Reached):  # other options: not refused
        _train(images, output, "--learning-rate", "0.002")


def test_folder_faults_are_one_line_before_anything_is_written(tmp_path):
    images = _folder(str(tmp_path / "images"))
    output = str(tmp_path / "run")
    os.symlink("..", os.path.join(images, "zero", "up"))
    with pytest.raises(SystemExit, match=r"zero[/\\]up leads back to .*symlink loop") as e:
        _train(images, output)
    assert "\n" not in str(e.value.code)
    os.remove(os.path.join(images, "zero", "up"))
    os.makedirs(os.path.join(os.fsencode(images), b"caf\xe9"))
    with pytest.raises(SystemExit, match=r"class folder b'caf\\xe9' in .* not UTF-8"):
        _train(images, output)
    assert not os.path.exists(output)


@pytest.mark.parametrize(
    "model, side, smallest",
    [("capsnet", 4, 17), ("efficient-capsnet", 10, 11), ("matrix-capsnet", 16, 17)],
)
def test_an_image_size_the_network_cannot_take_is_one_line(tmp_path, model, side, smallest):
    images = _folder(str(tmp_path / "images"))
    output = str(tmp_path / "run")
    args = ["train", model, "--images", images, "--skip-bad-images", "--verbose", "0"]
    pattern = rf"`input_shape` \({side}, {side}, 1\) is too small.*at least {smallest}x{smallest}"
    with pytest.raises(SystemExit, match=pattern + r".*--image-size\)$") as e:
        cli.main([*args, "--image-size", str(side), str(side), "--output", output])
    assert "\n" not in str(e.value.code)
    assert not os.path.exists(os.path.join(output, "run.json"))


def test_an_image_size_whose_step_cannot_fit_is_refused_with_the_estimate(tmp_path, monkeypatch):
    from keras_capsules.cli import _memory

    monkeypatch.setattr(_memory, "available_memory", lambda: 8 * 2**30)
    monkeypatch.setattr(_memory, "has_accelerator", lambda: False)
    images = _folder(str(tmp_path / "images"))
    output = str(tmp_path / "run")
    args = ["train", "capsnet", "--images", images, "--skip-bad-images", "--verbose", "0"]
    args += ["--image-size", "3000", "3000", "--batch-size", "4", "--output", output]
    pattern = (
        r"would not fit in memory: [\d,]+ parameters and batches of 4 need at least "
        r"[\d,.]+ GiB, and 8\.0 GiB are free\. Use smaller images \(--image-size\)"
    )
    with pytest.raises(SystemExit, match=pattern) as e:
        cli.main(args)
    assert "\n" not in str(e.value.code)
    assert not os.path.exists(os.path.join(output, "run.json"))
