"""The package as `pip install ./lib` builds it: every data file the library reads is package data, the version has one
source, and the console script answers ``--version``.

Building a wheel here would cost seconds of every `make test`; these tests read what the build reads instead
(``lib/pyproject.toml``'s package-data patterns, matched the way setuptools matches them: ``glob`` relative to the
package, where ``*`` never crosses a ``/``).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import tomllib
from commands import run

import meshplan

LIB = Path(meshplan.__file__).resolve().parents[1]
PACKAGE = LIB / "meshplan"


def _pyproject() -> dict:
    with open(LIB / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_every_data_file_is_package_data():
    patterns = _pyproject()["tool"]["setuptools"]["package-data"]["meshplan"]
    shipped = {Path(p) for pattern in patterns for p in glob.glob(pattern, root_dir=PACKAGE) if (PACKAGE / p).is_file()}
    on_disk = {  # every file of the package but its Python modules: data/ and the widgets' page scripts
        (Path(root) / name).relative_to(PACKAGE)
        for root, dirs, files in os.walk(PACKAGE)
        for name in files
        if "__pycache__" not in root and not name.endswith(".py")
    }
    assert len([p for p in on_disk if p.parts[0] == "data"]) > 30  # models, hardware, engines' sources, tables
    assert {p.name for p in on_disk if p.parts[:2] == ("widgets", "static")} >= {"runtime.js", "exercise.js"}
    assert on_disk - shipped == set(), (
        "data files a built package would leave out: fix lib/pyproject.toml's package-data"
    )


def test_the_version_has_one_source():
    project = _pyproject()["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert _pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "meshplan.__version__"}


def test_the_command_line_prints_its_version():
    assert run(["--version"]) == (0, f"meshplan {meshplan.__version__}\n", "")


def test_the_realrun_extra_brings_what_validate_needs():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras["realrun"] == ["meshplan[hf]"]
    assert {r.split(">=")[0] for r in extras["hf"]} == {"torch", "transformers"}
