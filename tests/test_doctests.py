"""Every example in the docstrings of ``meshplan`` runs and passes (``doctest.testmod``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import meshplan

WITHOUT_EXAMPLES = ["__init__", "cli"]  # still run: any example added later must pass
NOT_IMPORTED = ["__main__"]  # runs the command line on import
# every other module of the package must carry at least one example in its docstrings
WITH_EXAMPLES = sorted({m.name for m in pkgutil.iter_modules(meshplan.__path__)}
                       - set(WITHOUT_EXAMPLES) - set(NOT_IMPORTED))


def test_core_modules_are_covered():
    # a guard against the discovery above silently finding nothing
    assert {"model", "plan", "mesh", "zero", "collectives", "widgets"} <= set(WITH_EXAMPLES)


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
