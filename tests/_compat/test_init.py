"""`internal` finds another library's internals, or names what changed."""

import json
import json.decoder
import re

import pytest

from keras_capsules._compat import InternalChanged
from keras_capsules._compat import internal


def test_finds_a_module_or_an_attribute_of_it():
    assert internal("json", "json.decoder") is json.decoder
    found = internal("json", "json.decoder", "JSONDecoder.raw_decode")
    assert found is json.decoder.JSONDecoder.raw_decode


@pytest.mark.parametrize(
    "module, name, internal_name",
    [
        ("json.decoder", "no_such_name", "json.decoder.no_such_name"),
        ("json.decoder", "JSONDecoder.no_such_method", "json.decoder.JSONDecoder.no_such_method"),
        ("json.no_such_module", None, "json.no_such_module"),
    ],
)
def test_a_missing_internal_names_the_library_its_version_and_the_internal(
    module, name, internal_name
):
    with pytest.raises(InternalChanged) as raised:
        internal("json", module, name)
    message = str(raised.value)
    assert f"relies on {internal_name}, an internal of json" in message
    assert re.search(rf"installed json {re.escape(json.__version__)}\b", message)
    assert "keras_capsules._compat.json" in message


def test_a_missing_library_is_an_import_error_as_usual():
    with pytest.raises(ModuleNotFoundError) as raised:
        internal("no_such_library", "no_such_library.module")
    assert not isinstance(raised.value, InternalChanged)
