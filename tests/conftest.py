"""Markers by module, so that ``make test`` and ``make check`` can pick their parts:

* ``site``: needs the built book (``_build/html``): the site's offline, layout and per-chapter browser checks;
* ``browser``: drives Debian's Chromium (the site tests, the standalone widget pages, JupyterLab);
* ``slow``: real PyTorch runs or transformers models (real distributed runs, the families against transformers,
  the activation ledger against autograd), and figures rendered to measure their text.
"""

from __future__ import annotations

import os

import pytest

# ``make check`` (the inner loop) runs the property tests and fuzzers on a fifth of their examples; ``make test``
# runs them all. Deterministic either way (derandomized).
HYPOTHESIS_SCALE = float(os.environ.get("MESHPLAN_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> int:
    """``n`` hypothesis examples, scaled for the inner loop (at least 10)."""
    return max(10, round(n * HYPOTHESIS_SCALE))


SITE = ("test_browser_", "test_site_")
BROWSER = (*SITE, "test_widget_pages", "test_widget_js", "test_jupyterlab")
SLOW = ("test_realrun", "test_families", "test_engine_activations", "test_figures")


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if name.startswith(SITE):
            item.add_marker(pytest.mark.site)
        if name.startswith(BROWSER):
            item.add_marker(pytest.mark.browser)
        if name.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


def pytest_ignore_collect(collection_path, config):
    """Do not even import the modules a marker expression leaves out (``make check``: ``-m "not browser and not
    slow"``): the slow ones import torch and transformers, which costs seconds per test process."""
    expr = config.getoption("markexpr") or ""
    name = collection_path.name
    if "not slow" in expr and name.startswith(SLOW):
        return True
    if "not browser" in expr and name.startswith(BROWSER):
        return True
    return None
