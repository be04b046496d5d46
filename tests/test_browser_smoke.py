"""The built book opens in headless Chromium from file:// with the network blocked; on every page, at a
1366-px desktop and a 390-px phone, every exercise waits for a prediction and no widget is wider than the
screen."""

from __future__ import annotations

import os

import pytest
from browser import DESKTOP, PHONE, SITE_DIR, offline_browser, require_site

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


def _pages_or_skip() -> list[str]:
    pages = _content_pages()
    if not pages:
        if os.environ.get("CI"):
            pytest.fail(f"{SITE_DIR} has no pages")
        pytest.skip(f"{SITE_DIR} has no pages: build the site first (`make book`)")
    return pages


def test_every_page_renders_offline_and_typesets_math():
    untypeset = []
    with offline_browser() as browser:
        for relpath in _pages_or_skip():
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


# What every exercise of a page does before a prediction, in one pass over the page (the page's own script):
# Check is disabled, Enter on an empty box shows a hint and no answer, "Show me" says the prediction was skipped.
_WAITS = """() => [...document.querySelectorAll('.mp-exercise')].map(ex => {
    const box = ex.querySelector('.mp-prediction'), check = ex.querySelector('.mp-check'),
          show = ex.querySelector('.mp-show'), ans = ex.querySelector('.mp-answer');
    if (show.disabled) return [ex.id, 'invalid at its defaults', ans.textContent];
    box.value = ''; box.dispatchEvent(new Event('input'));
    const disabled = check.disabled;
    box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
    const hint = ans.textContent;
    show.click();
    const shown = ans.firstChild ? ans.firstChild.textContent : '';
    return [ex.id, disabled, hint, shown.startsWith('You skipped the prediction. The library says ')];
})"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_exercise_waits_for_a_prediction_and_no_widget_is_wider_than_the_screen(viewport):
    problems = []
    with offline_browser() as browser:
        for relpath in _pages_or_skip():
            page = browser.open(relpath, viewport=viewport)
            for ex_id, disabled, hint, *skipped in page.evaluate(_WAITS):
                if (disabled, hint, skipped) != (True, "Type a prediction first, or press Show me.", [True]):
                    problems.append(f"{relpath} #{ex_id}: {disabled!r} {hint!r} {skipped!r}")
            wide = page.evaluate("w => [...document.querySelectorAll('.mp-widget')].filter(e => "
                                 "e.getBoundingClientRect().right > w + 0.5).map(e => e.id)", viewport["width"])
            problems += [f"{relpath} #{w} is wider than {viewport['width']} px" for w in wide]
            page.close()
    assert browser.blocked == [], f"external requests: {browser.blocked}"
    assert browser.page_errors == [], browser.page_errors
    assert not problems, problems
