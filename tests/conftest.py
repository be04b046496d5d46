"""Markers by module, so that ``make test`` and ``make check`` can pick their parts:

* ``site``: needs the built book (``_build/html``): the site's offline, layout and per-chapter browser checks;
* ``browser``: drives Debian's Chromium (the site tests, the standalone widget pages, JupyterLab);
* ``slow``: real PyTorch runs or transformers models (real distributed runs, the families against transformers,
  the activation ledger against autograd), figures rendered to measure their text, and the build's math
  typesetter (Node processes).
"""

from __future__ import annotations

import ast
import os
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


def _marker_expression(expr: str) -> ast.expr | None:
    """``expr`` (a ``-m`` expression) as a Python expression of marker names joined by ``and``, ``or`` and ``not``
    (pytest's grammar of ``-m``, with the same precedence); None for anything else (keyword arguments, names pytest
    reads as one where Python reads several, such as ``site-browser``, or a syntax error): pytest then decides."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None
    allowed = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.Name, ast.Load)
    return tree if all(isinstance(node, allowed) for node in ast.walk(tree)) else None


def _selects(tree: ast.expr, carried: set[str]) -> bool:
    """Whether the marker expression ``tree`` selects a test that carries the markers ``carried``."""
    if isinstance(tree, ast.Name):
        return tree.id in carried
    if isinstance(tree, ast.UnaryOp):
        return not _selects(tree.operand, carried)
    assert isinstance(tree, ast.BoolOp)
    values = (_selects(value, carried) for value in tree.values)
    return all(values) if isinstance(tree.op, ast.And) else any(values)


def pytest_ignore_collect(collection_path, config):
    """Do not even import the test modules a marker expression leaves out (``make check``: ``-m "not browser and not
    slow"``; ``make test``'s browser part: ``-m browser``): the slow ones import torch and transformers, which costs
    seconds per test process. Decided only when the expression names nothing but the module markers above; ``site``
    and ``browser`` are only ever given by module, ``slow`` also by single tests."""
    expr = config.getoption("markexpr")
    name = collection_path.name
    if not expr or not (name.startswith("test_") and name.endswith(".py")):
        return None
    tree = _marker_expression(expr)
    if tree is None or not {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} <= set(MODULE_MARKERS):
        return None  # a marker set on single tests, or an expression read otherwise: pytest decides test by test
    markers = module_markers(name)
    # ``slow`` is also set on single tests (``@pytest.mark.slow``): ignore the module only if no test of it can match
    return True if not (_selects(tree, markers) or _selects(tree, markers | {"slow"})) else None


@pytest.fixture(autouse=True, scope="module")
def _close_site_pages():
    """At the end of each module, close the site pages its tests shared (``browser.site_page``)."""
    yield
    browser = sys.modules.get("browser")
    if browser is not None:
        browser.close_site_pages()
