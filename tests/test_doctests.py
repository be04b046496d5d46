"""Every example in the docstrings of ``meshplan`` runs and passes (``doctest.testmod``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import meshplan

ALL = sorted(m.name.removeprefix("meshplan.") for m in pkgutil.walk_packages(meshplan.__path__, "meshplan."))
NOT_IMPORTED = ["__main__"]  # runs the command line on import
# every top-level module must carry at least one example; these are still run (any example must pass)
WITHOUT_EXAMPLES = ["__init__", "cli", "measure"]
TOP = [n for n in ALL if "." not in n]
WITH_EXAMPLES = sorted(set(TOP) - set(WITHOUT_EXAMPLES) - set(NOT_IMPORTED))
# modules inside subpackages (models, realrun, schedule, widgets): their examples run, none is required
SUBMODULES = [n for n in ALL if "." in n]


def test_core_modules_are_covered():
    # a guard against the discovery above silently finding nothing
    assert {"model", "plan", "mesh", "zero", "collectives", "widgets"} <= set(WITH_EXAMPLES)


def _module(name: str):
    if name.startswith("realrun.") and name != "realrun.predict":
        pytest.importorskip("torch")
    return meshplan if name == "__init__" else importlib.import_module(f"meshplan.{name}")


@pytest.mark.parametrize("name", WITH_EXAMPLES + WITHOUT_EXAMPLES + SUBMODULES)
def test_doctests(name):
    if name == "derive":
        pytest.importorskip("sympy")
    result = doctest.testmod(_module(name), optionflags=doctest.ELLIPSIS, verbose=False, report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in meshplan.{name}"
    if name in WITH_EXAMPLES:
        assert result.attempted > 0, f"meshplan.{name} lost its examples"
