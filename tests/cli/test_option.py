"""Each architecture's options, declared once by its family, as `train ARCH` offers them."""

import glob
import inspect
import os
import re

import pytest

import applications
from applications.applications_catalog import CATALOG
from keras_capsules import cli
from keras_capsules.cli.option import Option
from keras_capsules.routing import EMSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHITECTURES = tuple(CATALOG.architectures())


def _help(capsys, *argv):
    with pytest.raises(SystemExit) as stopped:
        cli.main([*argv, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def _refused(capsys, *argv):
    """The one line `train` writes refusing `argv` as a usage error."""
    with pytest.raises(SystemExit) as stopped:
        cli.main(list(argv))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_help_lists_the_architectures_options_and_no_others(capsys, name):
    text = _help(capsys, "train", name)
    own = {option.flag for option in CATALOG.options(name)}
    others = {o.flag for other in ARCHITECTURES for o in CATALOG.options(other)} - own
    listed = set(re.findall(r"^\s+(-[-\w]+)", text, flags=re.MULTILINE))
    assert own <= listed
    assert not others & listed
    for option in CATALOG.options(name):  # the declared help, with the declared default
        assert " ".join(option.help_text().split())[:40] in " ".join(text.split())
    assert ("'s options:" in text) == bool(own)


def test_every_architecture_is_a_subcommand_of_train(capsys):
    text = _help(capsys, "train")
    for name in ARCHITECTURES:
        assert name in text


@pytest.mark.parametrize(
    "argv, owner",
    [
        (["efficient-capsnet", "--conv-filters", "8"], "capsnet"),
        (["capsnet", "-A", "8"], "matrix-capsnet"),
        (["capsnet", "--tempering=0.5"], "matrix-capsnet"),
        (["efficient-capsnet", "--iterations", "2"], "capsnet and matrix-capsnet and backbone"),
        (["matrix-capsnet", "--backbone", "ResNet50"], "backbone-capsnet"),
        (["capsnet", "--backbone-w", "none"], "backbone-capsnet"),  # a prefix, as argparse reads
    ],
)
def test_another_architectures_option_is_refused_naming_both(capsys, tmp_path, argv, owner):
    output = tmp_path / "run"
    err = _refused(capsys, "train", *argv, "--output", str(output))
    flag = re.sub(r"=.*", "", argv[1])
    assert f"{flag} is an option of {owner}" in err and f"not of {argv[0]}" in err
    assert not output.exists()


def test_an_option_no_architecture_takes_is_argparses_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["train", "capsnet", "--no-such-option"])
    assert stopped.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, needs",
    [
        (["--image-size", "32", "32"], "--image-size needs --images"),
        (["--color-mode", "rgb"], "--color-mode needs --images"),
        (["--validation-split", "0.3"], "--validation-split needs --images"),
        (["--skip-bad-images"], "--skip-bad-images needs --images"),
        (["--data", "smallnorb", "--max-shift", "1"], "--max-shift needs --data mnist or"),
        (["--images", "IMAGES", "--max-shift", "1"], "--max-shift needs --data mnist or"),
        (["--images", "IMAGES", "--train-size", "5"], "--train-size needs --data"),
        (["--images", "IMAGES", "--data-dir", "FILES"], "--data-dir needs --data"),
    ],
)
def test_an_option_that_needs_another_says_so(tmp_path, argv, needs):
    images = tmp_path / "images"
    (images / "a").mkdir(parents=True)
    (images / "a" / "x.png").write_bytes(b"")
    paths = {"IMAGES": str(images), "FILES": str(images / "a")}
    argv = [paths.get(arg, arg) for arg in argv]
    output = tmp_path / "run"
    with pytest.raises(SystemExit, match=re.escape(needs)) as stopped:
        cli.main(["train", "capsnet", *argv, "--output", str(output)])
    assert "\n" not in str(stopped.value.code)
    assert not output.exists()


def test_an_architecture_option_beside_a_preset_and_a_missing_required_one(tmp_path):
    output = str(tmp_path / "run")
    with pytest.raises(SystemExit, match=r"--iterations, --conv-filters: --from-preset .*not both"):
        cli.main(
            ["train", "capsnet", "--from-preset", "capsnet_mnist", "--conv-filters", "8"]
            + ["--iterations", "2", "--output", output]
        )
    with pytest.raises(SystemExit, match=r"backbone-capsnet needs --backbone NAME, the keras"):
        cli.main(["train", "backbone-capsnet", "--output", output])
    assert not os.path.exists(output)


def _constructor_default(cls, argument):
    """The default of `argument` in `cls`'s constructor, or in its backbone's."""
    for owner in (cls, cls.BACKBONE):
        if owner is None:
            continue
        parameter = inspect.signature(owner.__init__).parameters.get(argument)
        if parameter is not None and parameter.default not in (None, inspect.Parameter.empty):
            return parameter.default
    return None


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_declared_defaults_are_the_constructors(name):
    cls = CATALOG.model_class(name)
    for option in cls.OPTIONS:
        assert isinstance(option, Option)
        if option.required or option.argument in "ABCD":  # no default; the paper's letters
            continue
        assert option.default == _constructor_default(cls, option.argument), option.argument


def test_the_letters_and_em_settings_build_the_default_network():
    cls = applications.MatrixCapsNet
    values = {option.argument: option.default for option in cls.OPTIONS}
    arguments = cls.option_arguments(values)
    assert arguments["em_settings"] == EMSettings()
    built = cls(**arguments, compile=False)
    assert built.count_params() == cls(compile=False).count_params()
    values.update(A=8, B=4, iterations=2, tempering=[0.5])
    smaller = cls(**cls.option_arguments(values), compile=False)
    assert smaller.backbone.get_config()["conv_filters"] == 8
    assert smaller.backbone.em_settings == EMSettings(iterations=2, tempering=(0.5,))


def test_no_module_outside_the_families_names_their_options():
    flags = {o.flag for name in ARCHITECTURES for o in CATALOG.options(name)}
    long_flags = {flag for flag in flags if flag.startswith("--")}
    outside = glob.glob(os.path.join(ROOT, "keras_capsules", "cli", "*.py"))
    outside.append(os.path.join(ROOT, "applications", "applications_catalog.py"))
    for path in outside:
        text = open(path).read()
        named = {flag for flag in long_flags if re.search(re.escape(flag) + r"(?![\w-])", text)}
        assert not named, f"{os.path.relpath(path, ROOT)} names {sorted(named)}"


def test_an_option_is_checked_when_declared():
    with pytest.raises(ValueError, match="`argument` must be"):
        Option("conv-filters", "Conv1's filters")
    with pytest.raises(ValueError, match="`help` must be"):
        Option("conv_filters", "")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_cli_reference_lists_each_architectures_declared_options(name):
    text = open(os.path.join(ROOT, "docs", "cli.md")).read()
    section = text.split(f"#### `{name}`\n", 1)[1].split("\n#", 1)[0]
    documented = re.findall(r"^\| `(-[-\w]+)", section, flags=re.MULTILINE)
    assert documented == [option.flag for option in CATALOG.options(name)]
