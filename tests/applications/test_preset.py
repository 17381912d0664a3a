import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import keras
import numpy as np
import pytest

import applications
from applications import _preset
from keras_capsules.datasets import mnist

SMALL_MODELS = {
    "CapsNet": dict(conv_filters=16, primary_capsule_types=4, decoder_units=(32,)),
    "EfficientCapsNet": dict(conv_filters=(8, 8, 8, 32), primary_capsule_types=4),
    "MatrixCapsNet": dict(
        A=8, B=2, C=3, D=2, iterations=1, input_shape=(28, 28, 1), num_classes=10
    ),
}
SHIPPED = [preset["name"] for preset in applications.list_presets()]


def _images(n=4):
    (_, _), (x_test, _) = mnist.load_data()
    return x_test[:n, ..., None].astype("float32")


def _saved(tmp_path, name="CapsNet", **kwargs):
    model = getattr(applications, name)(**SMALL_MODELS[name])
    folder = model.save_to_preset(str(tmp_path / name), metadata={"note": "test"}, **kwargs)
    return model, folder


@pytest.mark.parametrize("name", sorted(SMALL_MODELS))
def test_save_to_preset_round_trip(tmp_path, name):
    model, folder = _saved(tmp_path, name)
    assert sorted(os.listdir(folder)) == ["config.json", "metadata.json", "model.weights.h5"]
    loaded = getattr(applications, name).from_preset(folder)
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    x = _images()
    np.testing.assert_allclose(
        loaded.predict(x, verbose=0)["probabilities"], model.predict(x, verbose=0)["probabilities"]
    )
    with open(os.path.join(folder, "metadata.json")) as f:
        metadata = json.load(f)
    weights = os.path.join(folder, "model.weights.h5")
    with open(weights, "rb") as f:
        assert metadata["weights_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert metadata["weights_bytes"] == os.path.getsize(weights)
    assert metadata["class_name"] == name
    assert metadata["parameter_count"] == model.count_params()
    assert metadata["keras_version"] == keras.__version__
    assert metadata["note"] == "test"
    assert not [f for f in os.listdir(folder) if f.startswith(".")]
    with h5py.File(weights) as f:
        assert "optimizer" not in f  # the model's weights, not a training run's state


def test_a_trained_models_preset_holds_no_optimizer_state_and_loads_silently(tmp_path):
    import warnings

    model = applications.CapsNet(**SMALL_MODELS["CapsNet"])
    x = _images(8)
    model.fit(x, np.arange(8) % 10, epochs=1, verbose=0)  # Adam's moments exist now
    folder = model.save_to_preset(str(tmp_path / "trained"))
    parameters = sum(int(np.prod(w.shape)) for w in model.weights)
    assert os.path.getsize(os.path.join(folder, "model.weights.h5")) < 4 * parameters * 1.2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = applications.CapsNet.from_preset(folder)
    np.testing.assert_allclose(
        loaded.predict(x, verbose=0)["probabilities"], model.predict(x, verbose=0)["probabilities"]
    )


def test_from_preset_of_a_base_class_and_kwargs(tmp_path):
    _, folder = _saved(tmp_path, "CapsNet")
    model = applications.CapsNet.from_preset(folder, compile=False, name="renamed")
    assert model.name == "renamed" and not model.compiled


def test_float16_storage_halves_the_file_and_loads_as_float32(tmp_path):
    model, full = _saved(tmp_path / "a")
    half = model.save_to_preset(str(tmp_path / "b"), weights_dtype="float16")
    full_bytes = os.path.getsize(os.path.join(full, "model.weights.h5"))
    half_bytes = os.path.getsize(os.path.join(half, "model.weights.h5"))
    assert half_bytes < 0.6 * full_bytes
    with h5py.File(os.path.join(half, "model.weights.h5")) as f:
        dtypes = set()
        f.visititems(lambda _, item: dtypes.add(item.dtype) if hasattr(item, "dtype") else None)
    assert np.dtype("float16") in dtypes and np.dtype("float32") not in dtypes
    loaded = applications.CapsNet.from_preset(half)
    for saved, restored in zip(model.weights, loaded.weights):
        assert restored.dtype == "float32"
        expected = keras.ops.convert_to_numpy(saved).astype("float16").astype("float32")
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(restored), expected)
    with open(os.path.join(half, "metadata.json")) as f:
        assert json.load(f)["weights_dtype"] == "float16"


@pytest.mark.parametrize("damage", ["one_byte", "truncated"])
def test_an_altered_weights_file_is_refused_by_name(tmp_path, damage):
    _, folder = _saved(tmp_path)
    weights = os.path.join(folder, "model.weights.h5")
    with open(weights, "r+b") as f:
        if damage == "one_byte":
            f.seek(os.path.getsize(weights) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
        else:
            f.truncate(os.path.getsize(weights) - 100)
    with pytest.raises(ValueError, match="model.weights.h5 is not the file") as error:
        applications.CapsNet.from_preset(folder)
    assert weights in str(error.value)


def _rewrite_weights(folder, data):
    """Write `data` as the preset's weights, its checksum updated to match."""
    weights = os.path.join(folder, "model.weights.h5")
    with open(weights, "wb") as f:
        f.write(data)
    metadata_path = os.path.join(folder, "metadata.json")
    with open(metadata_path) as f:
        metadata = json.load(f)
    metadata["weights_sha256"] = hashlib.sha256(data).hexdigest()
    with open(metadata_path, "w") as f:
        json.dump(metadata, f)
    return weights


@pytest.mark.parametrize(
    "damage, detail",
    [
        ("truncated", r"not a readable HDF5 weights file \(truncated file: "),
        ("a_zip", r"not a readable HDF5 weights file \(file signature not found\)"),
    ],
)
def test_damaged_weights_with_a_matching_checksum_are_named(tmp_path, damage, detail):
    """Checksummed by whoever damaged them: the file is still named as damaged, in one line."""
    _, folder = _saved(tmp_path)
    with open(os.path.join(folder, "model.weights.h5"), "rb") as f:
        data = f.read()
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:  # another format: the model saved as a .keras archive
        model = applications.CapsNet(**SMALL_MODELS["CapsNet"])
        model.save(str(tmp_path / "model.keras"))
        with open(tmp_path / "model.keras", "rb") as f:
            data = f.read()
    weights = _rewrite_weights(folder, data)
    with pytest.raises(ValueError) as raised:
        applications.CapsNet.from_preset(folder)
    message = str(raised.value)
    assert message.startswith(f"The preset's weights file {weights} is damaged: "), message
    assert re.search(detail, message) and message.endswith("Download or copy the preset again.")
    assert "\n" not in message


@pytest.mark.parametrize("name", ["config.json", "metadata.json"])
def test_json_nested_too_deep_is_named_in_one_line(tmp_path, name):
    _, folder = _saved(tmp_path)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError) as raised:
        applications.CapsNet.from_preset(folder)
    message = str(raised.value)
    assert message.startswith(f"Cannot read {path}: it nests its lists or objects deeper")
    assert "damaged or not a preset's" in message and "\n" not in message


def test_missing_files_and_checksum_are_named(tmp_path):
    _, folder = _saved(tmp_path)
    metadata_path = os.path.join(folder, "metadata.json")
    with open(metadata_path) as f:
        metadata = json.load(f)
    del metadata["weights_sha256"]
    with open(metadata_path, "w") as f:
        json.dump(metadata, f)
    with pytest.raises(ValueError, match="records no weights_sha256"):
        applications.CapsNet.from_preset(folder)
    os.remove(metadata_path)
    with pytest.raises(ValueError, match="no metadata.json"):
        applications.CapsNet.from_preset(folder)


def test_a_preset_of_another_class_is_refused(tmp_path):
    _, folder = _saved(tmp_path, "EfficientCapsNet")
    with pytest.raises(ValueError, match=r"holds a EfficientCapsNet, not a CapsNet"):
        applications.CapsNet.from_preset(folder)


@pytest.mark.parametrize("preset", ["no_such_preset", "s3://bucket/model", 3])
def test_unknown_presets_are_refused(preset):
    with pytest.raises(ValueError, match="preset"):
        applications.CapsNet.from_preset(preset)


def test_bad_save_arguments(tmp_path):
    model = applications.CapsNet(**SMALL_MODELS["CapsNet"], compile=False)
    with pytest.raises(ValueError, match="weights_dtype"):
        model.save_to_preset(str(tmp_path), weights_dtype="int8")
    with pytest.raises(ValueError, match="metadata"):
        model.save_to_preset(str(tmp_path), metadata=["not", "a", "dict"])


@pytest.mark.parametrize(
    "handle, module, extra",
    [
        ("hf://someone/capsnet", "huggingface_hub", "hf"),
        ("kaggle://a/b/keras/c", "kagglehub", "kaggle"),
    ],
)
def test_hub_handles_name_the_extra_to_install(monkeypatch, handle, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # importing it fails
    with pytest.raises(ImportError, match=rf'pip install "keras-capsules\[{extra}\]"'):
        applications.CapsNet.from_preset(handle)


@pytest.mark.parametrize(
    "handle, module, function, expected",
    [
        ("hf://someone/capsnet", "huggingface_hub", "snapshot_download", "someone/capsnet"),
        ("kaggle://a/b/keras/c/2", "kagglehub", "model_download", "a/b/keras/c/2"),
    ],
)
def test_hub_handles_go_through_the_hubs_own_client(
    tmp_path, monkeypatch, handle, module, function, expected
):
    _, folder = _saved(tmp_path)
    asked = []

    def download(*args, **kwargs):
        asked.append(kwargs.get("repo_id", args[0] if args else None))
        return folder

    client = type(sys)(module)
    setattr(client, function, download)
    monkeypatch.setitem(sys.modules, module, client)
    model = applications.CapsNet.from_preset(handle)
    assert asked == [expected] and isinstance(model, applications.CapsNet)


def test_list_presets_describes_each_shipped_folder():
    presets = applications.list_presets()
    folders = os.listdir(_preset.PRESETS_DIR) if os.path.isdir(_preset.PRESETS_DIR) else []
    assert [p["name"] for p in presets] == sorted(folders)
    for preset in presets:
        folder = os.path.join(_preset.PRESETS_DIR, preset["name"])
        metadata = _preset.read_metadata(folder)
        weights = _preset.shipped_weights(preset["name"], metadata)  # keras-capsules-presets's
        assert preset["size"] == os.path.getsize(weights)
        assert hasattr(applications, preset["model"])
        assert preset["data"] in ("mnist", "fashion_mnist", "multimnist")
        assert preset["test_accuracy"] == metadata["test_accuracy"]
        assert 0.5 < preset["test_accuracy"] <= 1.0  # far above chance on its data
        assert preset["parameters"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_preset_reaches_its_recorded_accuracy_on_the_full_test_set(name):
    with open(os.path.join(_preset.PRESETS_DIR, name, "metadata.json")) as f:
        metadata = json.load(f)
    model = getattr(applications, metadata["class_name"]).from_preset(name)
    from keras_capsules.cli.evaluate import measure

    _, accuracy, count = measure(model, metadata["data"]["name"], batch_size=500, verbose=0)
    assert count == 10_000
    assert abs(accuracy - metadata["test_accuracy"]) <= 0.0005


def preset_test_images(data, count=100):
    """The first `count` test images of the data set a preset was trained on, with channels."""
    from keras_capsules import datasets
    from keras_capsules.datasets import multimnist

    if data == "multimnist":
        return multimnist.evaluation_set()["images"][:count, ..., None]
    _, (x, _) = getattr(datasets, data).load_data()
    return x[:count, ..., None]


_PREDICT = """
import os, sys
import numpy as np
import applications
from tests.applications.test_preset import preset_test_images
names, output = sys.argv[1].split(","), sys.argv[2]
results = {}
for preset in applications.list_presets():
    if preset["name"] in names:
        model = getattr(applications, preset["model"]).from_preset(preset["name"])
        outputs = model.predict(preset_test_images(preset["data"]), batch_size=50, verbose=0)
        results[preset["name"]] = outputs["probabilities"]
np.savez(output, **results)
"""


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="compares with TensorFlow")
@pytest.mark.skipif(not SHIPPED, reason="no preset is shipped")
def test_shipped_presets_predict_alike_on_jax_and_pytorch(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    processes = {
        backend: subprocess.Popen(
            [sys.executable, "-c", _PREDICT, ",".join(SHIPPED), str(tmp_path / f"{backend}.npz")],
            cwd=root,
            env=dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES=""),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for backend in ("jax", "torch")
    }
    for backend, process in processes.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"{backend}:\n{output[-3000:]}"
    for preset in applications.list_presets():
        model = getattr(applications, preset["model"]).from_preset(preset["name"])
        x = preset_test_images(preset["data"]).astype("float32")
        expected = model.predict(x, batch_size=50, verbose=0)["probabilities"]
        # Float32 rounding differs between backends; how far it can move the scores
        # is the model's own: EM routing's three capsule layers turn a change of the
        # inputs by one part in a million into 2e-3 (on TensorFlow alone), the
        # vector capsule presets into less than 1e-5. Three times that, at least 1e-4.
        nudged = model.predict(x * (1 + 1e-6), batch_size=50, verbose=0)["probabilities"]
        tolerance = max(1e-4, 3 * float(np.abs(nudged - expected).max()))
        for backend in processes:
            with np.load(tmp_path / f"{backend}.npz") as other:
                got = other[preset["name"]]
                np.testing.assert_allclose(
                    got, expected, atol=tolerance, err_msg=f"{preset} {backend}"
                )
                np.testing.assert_array_equal(got.argmax(-1), expected.argmax(-1))


def test_a_folder_named_like_a_shipped_preset_is_loaded_and_named(tmp_path, monkeypatch):
    model, _ = _saved(tmp_path / "elsewhere")
    name = SHIPPED[0] if SHIPPED else "capsnet_mnist"
    monkeypatch.setattr(_preset, "_shipped", lambda: [name])
    monkeypatch.chdir(tmp_path)
    model.save_to_preset(name)  # the user's own, in the working directory
    with pytest.warns(UserWarning, match=f"named like the shipped preset '{name}'"):
        loaded = applications.PresetMixin.from_preset(name)
    assert loaded.count_params() == model.count_params()
    for mine, theirs in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    os.remove(os.path.join(name, "metadata.json"))  # no longer a preset: the shipped name
    assert _preset.preset_folder(name) == os.path.join(_preset.PRESETS_DIR, name)


def test_copy_of_a_shipped_preset_with_one_byte_altered_is_refused(tmp_path):
    if SHIPPED:
        preset = applications.list_presets()[0]
        source = os.path.join(_preset.PRESETS_DIR, preset["name"])
        cls = getattr(applications, preset["model"])
    else:
        _, source = _saved(tmp_path / "source")
        cls = applications.CapsNet
    folder = shutil.copytree(source, tmp_path / "copy")
    weights = os.path.join(folder, "model.weights.h5")
    if SHIPPED:  # a whole preset: the weights beside the config and metadata
        shutil.copy(_preset.shipped_weights(preset["name"], _preset.read_metadata(source)), weights)
    with open(weights, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ValueError, match="truncated or altered"):
        cls.from_preset(str(folder))


def test_unknown_arguments_are_refused_in_a_preset_and_its_overrides(tmp_path):
    _, folder = _saved(tmp_path)
    with pytest.raises(ValueError, match=r"`conv_filter` \(did you mean `conv_filters`\?\)"):
        applications.CapsNet.from_preset(folder, conv_filter=8)
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["config"]["primary_capsules"] = 4  # a renamed argument, from an older release
    with open(config_path, "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match=r"`primary_capsules` \(did you mean"):
        applications.CapsNet.from_preset(folder)


@pytest.mark.parametrize(
    "damage, match",
    [
        ("config_list", r"config.json holds a JSON list, not an object"),
        ("no_config", r'config.json has no "config" object'),
        ("metadata_list", r"metadata.json holds a JSON list"),
        ("unknown_class", r"names the class 'keras_capsules>NoSuchNet', which is no model"),
    ],
)
def test_a_malformed_preset_is_one_error_naming_the_file(tmp_path, damage, match):
    _, folder = _saved(tmp_path)
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    if damage == "config_list":
        config = [config]
    elif damage == "no_config":
        del config["config"]
    elif damage == "unknown_class":
        config["registered_name"] = "keras_capsules>NoSuchNet"
    if damage == "metadata_list":
        with open(os.path.join(folder, "metadata.json"), "w") as f:
            json.dump([], f)
    else:
        with open(config_path, "w") as f:
            json.dump(config, f)
    with pytest.raises(ValueError, match=match):
        applications.CapsNet.from_preset(folder)


@pytest.mark.parametrize(
    "change, path",
    [
        ({"num_classes": 3, "class_names": None}, "digit_caps/kernel"),  # the tester's case
        ({"backbone": {"conv_filters": 4}}, "conv1/kernel"),  # another size, another layer
    ],
)
def test_a_config_that_disagrees_with_its_weights_is_one_line(tmp_path, change, path):
    _, folder = _saved(tmp_path)
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    for key, value in change.items():
        if key == "backbone":  # the backbone's own config, inside the classifier's
            config["config"]["backbone"]["config"].update(value)
        else:
            config["config"][key] = value
    with open(config_path, "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError) as raised:
        applications.CapsNet.from_preset(folder)
    message = str(raised.value)
    assert len(message.splitlines()) == 1, message[:500]
    assert "does not hold the weights of the model its config.json describes" in message
    assert f"{path} has the shape" in message and "save_to_preset()" in message


def test_metadata_that_is_no_json_leaves_the_existing_preset_whole(tmp_path):
    model, folder = _saved(tmp_path)
    before = {
        name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))
    }
    with pytest.raises(ValueError, match="`metadata` cannot be written as JSON"):
        model.save_to_preset(folder, metadata={"x": object()})
    with pytest.raises(ValueError, match="`metadata` cannot be written as JSON"):
        model.save_to_preset(folder, metadata={"accuracy": float("nan")})
    after = {
        name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))
    }
    assert after == before
    applications.CapsNet.from_preset(folder)
