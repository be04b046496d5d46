"""Every example in the docstrings of ``meshplan`` runs and passes (``doctest.testmod``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import meshplan

ALL = sorted(m.name.removeprefix("meshplan.") for m in pkgutil.walk_packages(meshplan.__path__, "meshplan."))
NOT_IMPORTED = ["__main__"]  # runs the command line on import
PACKAGES = sorted(
    m.name.removeprefix("meshplan.") for m in pkgutil.walk_packages(meshplan.__path__, "meshplan.") if m.ispkg
)
# every formula module (the layers' modules and the top-level ones) must carry at least one example; the packages'
# faces, the command line and these are still run (any example must pass)
WITHOUT_EXAMPLES = ["__init__", "cli", "steptime.breakdowns"]
# the layers' own packages of modules (models, realrun, schedule, widgets): their examples run, none is required
OPTIONAL = ("spec.models.", "realrun.", "schedule.", "widgets.")
WITH_EXAMPLES = sorted(
    set(ALL) - set(PACKAGES) - set(WITHOUT_EXAMPLES) - set(NOT_IMPORTED) - {n for n in ALL if n.startswith(OPTIONAL)}
)
SUBMODULES = sorted(set(ALL) - set(WITH_EXAMPLES) - set(WITHOUT_EXAMPLES) - set(NOT_IMPORTED))


def test_core_modules_are_covered():
    # a guard against the discovery above silently finding nothing
    assert {"spec.model", "plan.evaluation", "spec.mesh", "parallel.zero", "core.collectives", "search"} <= set(
        WITH_EXAMPLES
    )


def _module(name: str):
    if name.startswith("realrun.") and name != "realrun.predict":
        pytest.importorskip("torch")
    return meshplan if name == "__init__" else importlib.import_module(f"meshplan.{name}")


@pytest.mark.parametrize("name", WITH_EXAMPLES + WITHOUT_EXAMPLES + SUBMODULES)
def test_doctests(name):
    if name == "course.derive":
        pytest.importorskip("sympy")
    result = doctest.testmod(_module(name), optionflags=doctest.ELLIPSIS, verbose=False, report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in meshplan.{name}"
    if name in WITH_EXAMPLES:
        assert result.attempted > 0, f"meshplan.{name} lost its examples"
