"""Markers by module, so that ``make test`` and ``make check`` can pick their parts:

* ``site``: needs the built book (``_build/html``): the site's offline, layout and per-chapter browser checks;
* ``browser``: drives Debian's Chromium (the site tests, the standalone widget pages, JupyterLab);
* ``slow``: real PyTorch runs or transformers models (real distributed runs, the families against transformers,
  the activation ledger against autograd).
"""

from __future__ import annotations

import pytest

SITE = ("test_browser_", "test_site_")
BROWSER = (*SITE, "test_widget_pages", "test_widget_js", "test_jupyterlab")
SLOW = ("test_realrun", "test_families", "test_engine_activations")


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if name.startswith(SITE):
            item.add_marker(pytest.mark.site)
        if name.startswith(BROWSER):
            item.add_marker(pytest.mark.browser)
        if name.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
