"""The built book opens in headless Chromium from file:// with the network blocked."""

from __future__ import annotations

import os

import pytest

from browser import SITE_DIR, offline_browser, require_site

BOOK_TITLE = "Parallelism for LLM training: a computed course"
INTRO = "book/intro.html"



def test_intro_renders_offline():
    require_site(INTRO)
    with offline_browser() as browser:
        page = browser.open(INTRO)
        assert BOOK_TITLE in page.title()
        h1 = page.locator("article h1").first
        h1.wait_for(state="visible", timeout=10_000)
        assert h1.inner_text().strip()
        browser.wait_for_mathjax(page)
        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors


def _content_pages() -> list[str]:
    if not SITE_DIR.is_dir():
        return []
    skip = {"index.html"}  # a meta-refresh redirect to book/intro.html
    return sorted(
        str(p.relative_to(SITE_DIR))
        for p in SITE_DIR.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
    )


def test_every_page_renders_offline_and_typesets_math():
    pages = _content_pages()
    if not pages:
        if os.environ.get("CI"):
            pytest.fail(f"{SITE_DIR} has no pages")
        pytest.skip(f"{SITE_DIR} has no pages: build the site first (`make book`)")
    untypeset = []
    with offline_browser() as browser:
        for relpath in pages:
            page = browser.open(relpath)
            if browser.wait_for_mathjax(page):
                # Every math element the page carries must have been typeset by MathJax.
                raw = page.locator("div.math, span.math").count()
                done = page.locator("mjx-container").count()
                if done < raw:
                    untypeset.append(f"{relpath}: {done}/{raw} math elements typeset")
            page.close()
    assert browser.blocked == [], f"external requests: {browser.blocked}"
    assert browser.page_errors == [], browser.page_errors
    assert not untypeset, untypeset
