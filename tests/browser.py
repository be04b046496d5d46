"""Headless Chromium for tests of the built site, fully offline.

Playwright's sync API drives Debian's ``/usr/bin/chromium`` (``make chromium``);
Playwright's own browser download is never used. Every request whose URL does not
start with ``file://`` is aborted and recorded in ``OfflineBrowser.blocked``, so a
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

REPO_ROOT = Path(__file__).resolve().parents[1]
SITE_DIR = REPO_ROOT / "_build" / "html"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
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

    context: object  # playwright.sync_api.BrowserContext
    blocked: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def open(self, relpath: str, wait_until: str = "load"):
        """Open a page of the built site (path relative to _build/html)."""
        if not site_page_exists(relpath):
            raise FileNotFoundError(f"{site_path(relpath)} does not exist: run `make book`")
        page = self.context.new_page()
        page.on("pageerror", lambda exc: self.page_errors.append(f"{relpath}: {exc}"))
        page.goto(site_url(relpath), wait_until=wait_until)
        return page

    def wait_for_mathjax(self, page, timeout_ms: int = 20_000) -> bool:
        """Wait until MathJax has typeset the page; False if the page has no MathJax."""
        if not page.evaluate("() => typeof window.MathJax !== 'undefined'"):
            return False
        page.wait_for_function(
            "() => window.MathJax.startup && window.MathJax.startup.promise",
            timeout=timeout_ms,
        )
        page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
        return True


_SHARED: dict = {}


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


@contextlib.contextmanager
def offline_browser() -> Iterator[OfflineBrowser]:
    """A new isolated browser context of headless Chromium with a network block.

    Yields an :class:`OfflineBrowser`; ``.blocked`` lists every URL the pages tried
    to load from anywhere but ``file://``.
    """
    blocked: list[str] = []

    def _route(route) -> None:
        url = route.request.url
        if url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    def _route_ws(ws) -> None:  # WebSockets bypass context.route
        blocked.append(ws.url)
        ws.close()

    context = _shared_browser().new_context(service_workers="block")
    try:
        context.route("**/*", _route)
        if hasattr(context, "route_web_socket"):
            context.route_web_socket("**/*", _route_ws)
        yield OfflineBrowser(context=context, blocked=blocked)
    finally:
        context.close()
