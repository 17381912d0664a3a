"""The examples written as doctests in the documentation run."""

import doctest
import pathlib

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("page", ["tutorials/build-your-own.md", "tutorials/own-images.md"])
def test_doctests_of_the_page_pass(page):
    results = doctest.testfile(str(DOCS / page), module_relative=False, verbose=False)
    assert results.attempted > 0 and results.failed == 0, results
