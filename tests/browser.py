"""Headless Chromium for tests of the built site, fully offline.

Playwright's sync API drives Debian's ``/usr/bin/chromium-headless-shell`` (``make chromium``): the same Blink as
Debian's ``chromium`` without the browser's windowing layer, which is what Playwright itself runs for headless tests
(measured: the browser part of ``make test`` 61 s with ``chromium --headless``, 41 s with the shell; another binary
through ``CHROMIUM=``). Playwright's own browser download is never used. The contexts are offline: every request
whose URL does not start with ``file://`` fails and is recorded in ``OfflineBrowser.blocked``, so a
test can assert that a page needed nothing from the network::

    from browser import offline_browser, site_page_exists

    def test_page():
        if not site_page_exists("notebooks/01_one_gpu.html"):
            pytest.skip("site not built: run `make book`")
        with offline_browser() as browser:
            page = browser.open("notebooks/01_one_gpu.html")
            ...
            assert browser.blocked == []
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from meshplan.course.grid import _members
from meshplan.spec.mesh import AXES

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page, ViewportSize

    from meshplan import Mesh

REPO_ROOT = Path(__file__).resolve().parents[1]
SITE_DIR = Path(os.environ.get("MESHPLAN_SITE_DIR", REPO_ROOT / "_build" / "html"))  # the built book
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium-headless-shell")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


def toc_files() -> list[str]:
    """The files of ``_toc.yml`` in reading order (the root, then every part's chapters), without suffixes."""
    import yaml

    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text(encoding="utf-8"))
    chapters = [c for part in toc.get("parts", []) for c in part.get("chapters", [])] + toc.get("chapters", [])
    return [toc["root"], *(entry["file"] for entry in chapters)]


def toc_numbers() -> dict[str, int]:
    """The chapter number Sphinx gives each file of a ``numbered`` part of ``_toc.yml`` (1, 2, ... over the parts)."""
    import yaml

    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text(encoding="utf-8"))
    numbers: dict[str, int] = {}
    for part in toc.get("parts", []):
        if part.get("numbered"):
            for entry in part.get("chapters", []):
                numbers[entry["file"]] = len(numbers) + 1
    return numbers


def site_path(relpath: str) -> Path:
    """Path of a file of the built site, e.g. ``site_path("book/intro.html")``."""
    return SITE_DIR / relpath


def site_page_exists(relpath: str) -> bool:
    return site_path(relpath).is_file()


def require_site(relpath: str) -> None:
    """Skip the calling test if the page was not built, unless running in CI (``CI`` set), where a missing
    page fails it: `make test` builds the book first, so a missing page there is a defect."""
    import pytest

    if not site_page_exists(relpath):
        if os.environ.get("CI"):
            pytest.fail(f"{site_path(relpath)} was not built")
        pytest.skip(f"{site_path(relpath)} does not exist: build the site first (`make book`)")


def site_url(relpath: str) -> str:
    """``file://`` URL of a file of the built site."""
    return site_path(relpath).resolve().as_uri()


@dataclass
class OfflineBrowser:
    """A browser context whose non-``file://`` requests are aborted and recorded."""

    context: BrowserContext
    blocked: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def open(
        self,
        relpath: str,
        wait_until: Literal["commit", "domcontentloaded", "load", "networkidle"] = "load",
        viewport: ViewportSize | None = None,
    ):
        """Open a page of the built site (path relative to _build/html), at ``viewport`` if given."""
        if not site_page_exists(relpath):
            raise FileNotFoundError(f"{site_path(relpath)} does not exist: run `make book`")
        page = self.context.new_page()
        if viewport:
            page.set_viewport_size(viewport)
        page.on("pageerror", lambda exc: self.page_errors.append(f"{relpath}: {exc}"))
        page.goto(site_url(relpath), wait_until=wait_until)
        return page


_SHARED: dict = {}


def shared_chromium():
    """The one headless Chromium of this test process (Playwright's sync API allows one running instance per thread,
    so every module uses this one; starting it costs about a second). Give each test a fresh context."""
    return _shared_browser()


def _shared_browser():
    """One headless Chromium per test process (starting it costs about a second); each
    ``offline_browser()`` still gets a fresh, isolated context (its own empty profile state)."""
    if "browser" not in _SHARED:
        from playwright.sync_api import sync_playwright

        if not Path(CHROMIUM).exists():
            raise FileNotFoundError(f"{CHROMIUM} not found: run `make chromium`")
        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        _SHARED.update(pw=pw, browser=browser)

        def _stop() -> None:
            with contextlib.suppress(Exception):
                browser.close()
            with contextlib.suppress(Exception):
                pw.stop()

        atexit.register(_stop)
    return _SHARED["browser"]


def offline_context(**options) -> tuple[BrowserContext, list[str]]:
    """A new isolated context of the shared Chromium with the network switched off, and the list it records into.

    The context is offline (Chromium fails every network request, ``net::ERR_INTERNET_DISCONNECTED``; ``file://``
    is not network and loads), and every request or WebSocket its pages try for anything but ``file://`` is recorded
    in the returned list. Nothing is intercepted: recording from Playwright's request events rather than a route
    leaves the file loads alone (a route that passes every request on costs about 0.08 s of CPU per page load)."""
    blocked: list[str] = []

    def _request(request) -> None:
        if not request.url.startswith("file://"):
            blocked.append(request.url)

    def _page(page) -> None:
        page.on("websocket", lambda ws: blocked.append(ws.url))

    context = _shared_browser().new_context(offline=True, service_workers="block", **options)
    context.on("request", _request)
    context.on("page", _page)
    return context, blocked


@contextlib.contextmanager
def offline_browser() -> Iterator[OfflineBrowser]:
    """A new isolated browser context of headless Chromium with the network off (``offline_context``).

    Yields an :class:`OfflineBrowser`; ``.blocked`` lists every URL the pages tried
    to load from anywhere but ``file://``.
    """
    context, blocked = offline_context()
    try:
        yield OfflineBrowser(context=context, blocked=blocked)
    finally:
        context.close()


# ---------------------------------------------------------------------------------------------- standalone pages
# Widgets are tested on pages written from their ``to_html()`` alone (no book build): a minimal page that sets
# the book theme's colour variables (pydata-sphinx-theme 0.17's values, light and ``data-theme="dark"``) and its
# content width, so the widgets meet the variables they read in the book.

DESKTOP: ViewportSize = {"width": 1366, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}

THEME_CSS = """
html{--pst-color-background:#fff;--pst-color-on-background:#fff;--pst-color-surface:#f3f4f5;
--pst-color-text-base:#222832;--pst-color-text-muted:#48566b;--pst-color-border:#d1d5da;--pst-color-primary:#0a7d91;
--pst-color-danger:#d72d47;--pst-color-success:#00843f;color-scheme:light}
html[data-theme=dark]{--pst-color-background:#14181e;--pst-color-on-background:#222832;--pst-color-surface:#29313d;
--pst-color-text-base:#ced6dd;--pst-color-text-muted:#9ca4af;--pst-color-border:#48566b;--pst-color-primary:#3fb1c5;
--pst-color-danger:#e78894;--pst-color-success:#5fb488;color-scheme:dark}
body{margin:0;background:var(--pst-color-background);color:var(--pst-color-text-base);
font-family:-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;font-size:16px}
main{max-width:757px;margin:0 auto;padding:0 16px}
"""


def standalone_page(path: Path, body: str, dark: bool = False, title: str = "widget") -> Path:
    """Write ``body`` (widgets' HTML) into a minimal themed page at ``path``; returns the path."""
    theme = ' data-theme="dark"' if dark else ""
    path.write_text(
        f'<!doctype html><html lang="en"{theme}><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title>'
        f"<style>{THEME_CSS}</style></head><body><main>{body}</main></body></html>",
        encoding="utf-8",
    )
    return path


def open_standalone(browser: OfflineBrowser, path: Path, viewport: ViewportSize = DESKTOP):
    """Open a standalone page at a viewport size; page errors go to ``browser.page_errors``."""
    page = browser.context.new_page()
    page.set_viewport_size(viewport)
    page.on("pageerror", lambda exc: browser.page_errors.append(f"{path.name}: {exc}"))
    page.goto(path.as_uri())
    return page


def horizontal_overflow(page) -> int:
    """How many pixels the page scrolls sideways (0 when nothing is wider than the viewport)."""
    return page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")


# Pages of the built site opened by ``site_page``, one per (page, viewport) in this test module: loading a chapter costs
# about 0.6 s of CPU (a 0.2-0.7 MB page, its typeset math, the exercises' scripts), and a module's tests each drive
# their own exercise, so the second test on a page reuses it. ``close_site_pages`` (conftest, at the end of every
# module) closes them, so no state crosses modules; a test that fails closes its page, so no failure leaves state for
# the next.
_SITE_PAGES: dict[tuple, tuple[contextlib.ExitStack, OfflineBrowser, Page]] = {}


@contextlib.contextmanager
def site_page(relpath: str, viewport: ViewportSize | None = None) -> Iterator:
    """A page of the built site (skipped if not built, see ``require_site``) in an offline context, at ``viewport``;
    on leaving, assert that it has requested nothing from the network and thrown no error.

    The page is loaded once per test module and viewport and handed again to the module's later tests that ask for
    it. Tests that share a page must not depend on what an earlier test did to it: each drives its own exercise,
    scrolled into view."""
    require_site(relpath)
    key = (relpath, None if viewport is None else (viewport["width"], viewport["height"]))
    if key not in _SITE_PAGES:
        stack = contextlib.ExitStack()
        browser = stack.enter_context(offline_browser())
        _SITE_PAGES[key] = (stack, browser, browser.open(relpath, viewport=viewport))
    stack, browser, page = _SITE_PAGES[key]
    try:
        yield page
        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
    except BaseException:
        del _SITE_PAGES[key]  # a failed test's page is not handed on
        stack.close()
        raise


def close_site_pages() -> None:
    """Close every page ``site_page`` keeps open (called at the end of each test module)."""
    while _SITE_PAGES:
        _SITE_PAGES.popitem()[1][0].close()


def slider(widget, name: str):
    """The slider of the control ``name`` in a widget (a locator)."""
    return widget.locator(f'input.mp-slider[data-name="{name}"]')


def slide(widget, name: str, key: str = "ArrowRight", times: int = 1) -> None:
    """Move the slider ``name`` of a widget from the keyboard: focus it, press ``key`` (ArrowRight, ArrowLeft, Home,
    End) ``times`` times."""
    control = slider(widget, name)
    control.focus()
    for _ in range(times):
        control.page.keyboard.press(key)


def skip_prediction(exercise) -> str:
    """Press "Show me" on an exercise (a locator) and return the first line it shows."""
    exercise.locator(".mp-show").click()
    return exercise.locator(".mp-answer").inner_text().splitlines()[0]


def predict(exercise, text: str, enter: bool = False) -> list[str]:
    """Type a prediction (or choose it, for an exercise with choices), press Check (or Enter), and return the lines the
    exercise shows."""
    box = exercise.locator(".mp-prediction")
    if box.get_attribute("role") == "radiogroup":  # a word answer's choices: check the one named ``text``
        box = box.locator(f'input[type="radio"][value="{text}"]')
        box.check()
    else:
        box.fill(text)
    if enter:
        box.press("Enter")
    else:
        exercise.locator(".mp-check").click()
    return exercise.locator(".mp-answer").inner_text().splitlines()


def choose(exercise, name: str, text: str) -> None:
    """Pick the option shown as ``text`` of a named-choice control (radio buttons or a drop-down)."""
    select = exercise.locator(f'select.mp-select[data-name="{name}"]')
    if select.count():
        select.select_option(label=text)
    else:
        exercise.locator(f'.mp-radio[data-name="{name}"] .mp-option', has_text=text).click()


def chosen(exercise, name: str) -> str:
    """The text shown for a control's value (slider output, checked radio button, selected option)."""
    return exercise.evaluate(
        """(root, name) => {
        const el = root.querySelector(`.mp-control[data-name="${name}"]`);
        if (el.tagName === 'INPUT') return el.parentNode.querySelector('.mp-value').textContent;
        if (el.tagName === 'SELECT') return el.options[el.selectedIndex].textContent;
        return el.querySelector('input:checked').parentNode.textContent; }""",
        name,
    )


def grid_highlights(grid) -> dict[str, set[int]]:
    """The ranks a device grid highlights, by mesh axis, and the selected one."""
    cells = grid.locator(".mp-gpu")
    data = cells.evaluate_all("cs => cs.map(c => [+c.dataset.rank, c.dataset.group || '', c.dataset.selected || ''])")
    out: dict[str, set[int]] = {a: set() for a in (*AXES, "selected")}
    for rank, group, selected in data:
        if group:
            out[group].add(rank)
        if selected:
            out["selected"].add(rank)
    return out


def check_grid_rank(grid, mesh: Mesh, rank: int) -> None:
    """Click GPU ``rank`` in a device grid: its highlighted groups, member lists and links are ``mesh``'s."""
    grid.locator(f'.mp-gpu[data-rank="{rank}"]').click()
    got = grid_highlights(grid)
    assert got["selected"] == {rank}
    for a in AXES:
        assert got[a] == set(mesh.group(rank, a)) - {rank}, (a, rank)
        row = grid.locator(f'.mp-legend-row[data-axis="{a}"]')
        assert row.locator(".mp-members").inner_text() == _members(mesh.group(rank, a))
        assert (
            row.locator(".mp-link").inner_text()
            == {"nvlink": "NVLink", "infiniband": "InfiniBand", None: "no traffic"}[mesh.link(a)]
        )
