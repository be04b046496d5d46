"""Every example in the docstrings of ``meshplan`` runs and passes (``doctest.testmod``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import meshplan

# modules whose docstrings carry examples (each must attempt at least one)
WITH_EXAMPLES = [
    "activations", "collectives", "compute", "cp", "derive", "dp", "ep", "hardware", "lab", "mesh", "model",
    "plan", "pp", "published", "tp", "units", "widgets", "zero",
]
WITHOUT_EXAMPLES = ["__init__", "cli"]  # still run: any example added later must pass
NOT_IMPORTED = ["__main__"]  # runs the command line on import


def test_every_module_is_covered():
    found = {m.name for m in pkgutil.iter_modules(meshplan.__path__)}
    assert found | {"__init__"} == set(WITH_EXAMPLES) | set(WITHOUT_EXAMPLES) | set(NOT_IMPORTED)


def _module(name: str):
    return meshplan if name == "__init__" else importlib.import_module(f"meshplan.{name}")


@pytest.mark.parametrize("name", WITH_EXAMPLES + WITHOUT_EXAMPLES)
def test_doctests(name):
    if name == "derive":
        pytest.importorskip("sympy")
    result = doctest.testmod(_module(name), optionflags=doctest.ELLIPSIS, verbose=False, report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in meshplan.{name}"
    if name in WITH_EXAMPLES:
        assert result.attempted > 0, f"meshplan.{name} lost its examples"
