"""Markers by module, so that ``make test`` and ``make check`` can pick their parts:

* ``site``: needs the built book (``_build/html``): the site's offline, layout and per-chapter browser checks;
* ``browser``: drives Debian's Chromium (the site tests, the standalone widget pages, JupyterLab);
* ``slow``: real PyTorch runs or transformers models (real distributed runs, the families against transformers,
  the activation ledger against autograd), figures rendered to measure their text, the build's math
  typesetter (Node processes), and the notebook tests' warm kernels against plain ones (Jupyter kernels).
"""

from __future__ import annotations

import os
import re
import sys

import pytest

# ``make check`` (the inner loop) runs the property tests and fuzzers on a fifth of their examples; ``make test``
# runs them all. Deterministic either way (derandomized).
HYPOTHESIS_SCALE = float(os.environ.get("MESHPLAN_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> int:
    """``n`` hypothesis examples, scaled for the inner loop (at least 10)."""
    return max(10, round(n * HYPOTHESIS_SCALE))


SITE = ("test_browser_", "test_site_")
BROWSER = (*SITE, "test_widget_pages", "test_widget_js", "test_jupyterlab")
SLOW = (
    "test_realrun",
    "test_families",
    "test_engine_activations",
    "test_figures",
    "test_typeset_math",
    "test_warm_kernels",
)


MODULE_MARKERS = {"site": SITE, "browser": BROWSER, "slow": SLOW}


def module_markers(name: str) -> set[str]:
    """The markers every test of the module ``name`` (a file name) carries."""
    return {marker for marker, prefixes in MODULE_MARKERS.items() if name.startswith(prefixes)}


# The longest files (seconds of one worker each, measured on the 2-core machine), run first. xdist hands whole files to
# its two workers (``--dist loadfile``) in collection order (``--no-loadscope-reorder`` in pytest.ini: by default it
# would sort them by their number of tests, which put the 2-test JupyterLab file last, running alone for 12 s while the
# other worker had finished); the rest then go to whichever worker is free. Only the order depends on this list.
LONGEST_FIRST = (
    "test_site_layout.py",  # every page of the site at two widths: ~40 s
    "test_realrun.py",  # the real PyTorch runs, on forked ranks: ~19 s
    "test_jupyterlab.py",  # a JupyterLab server running chapter 1: ~12 s
    "08_4d_lab.ipynb",  # ~9.5 s
    "10_your_model.ipynb",  # ~9.3 s
    "test_widget_pages.py",  # ~9 s
    "test_properties.py",  # ~7 s
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker in module_markers(item.path.name):
            item.add_marker(getattr(pytest.mark, marker))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def pytest_ignore_collect(collection_path, config):
    """Do not even import the test modules a marker expression leaves out (``make check``: ``-m "not browser and not
    slow"``; ``make test``'s browser part: ``-m browser``): the slow ones import torch and transformers, which costs
    seconds per test process. Decided only when the expression names nothing but the module markers above; ``site``
    and ``browser`` are only ever given by module, ``slow`` also by single tests."""
    expr = config.getoption("markexpr")
    name = collection_path.name
    if not expr or not (name.startswith("test_") and name.endswith(".py")):
        return None
    if not set(re.findall(r"[A-Za-z_]\w*", expr)) - {"and", "or", "not"} <= set(MODULE_MARKERS):
        return None  # a marker set on single tests: pytest decides test by test
    try:
        from _pytest.mark.expression import Expression  # pytest's own parser of -m expressions (private)

        compiled = Expression.compile(expr)
    except (ImportError, AttributeError, SyntaxError):  # another pytest, or an expression pytest itself will reject
        return None
    markers = module_markers(name)

    def matches(carried: set[str]) -> bool:
        def has(marker: str, /, **_: str | int | bool | None) -> bool:
            return marker in carried

        return compiled.evaluate(has)

    # ``slow`` is also set on single tests (``@pytest.mark.slow``): ignore the module only if no test of it can match
    return True if not (matches(markers) or matches(markers | {"slow"})) else None


@pytest.fixture(autouse=True, scope="module")
def _close_site_pages():
    """At the end of each module, close the site pages its tests shared (``browser.site_page``)."""
    yield
    browser = sys.modules.get("browser")
    if browser is not None:
        browser.close_site_pages()
