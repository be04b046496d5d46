"""The built book opens in headless Chromium from file:// with the network blocked; on every page, at a
1366-px desktop and a 390-px phone, every exercise waits for a prediction and no widget is wider than the
screen. The intro opens with the evolution map; the map reads at both widths (main line and dashed branches,
text of 11 px or more, every stage's number from the library) and its exercise answers as the library does."""

from __future__ import annotations

import os

import pytest
from browser import (
    DESKTOP,
    PHONE,
    SITE_DIR,
    choose,
    chosen,
    horizontal_overflow,
    offline_browser,
    predict,
    require_site,
    site_page,
)

from meshplan import load_hardware
from meshplan.course import evolution
from meshplan.course.lab import ANCHOR
from meshplan.widgets import Result, compare

BOOK_TITLE = "Parallelism for LLM training: a computed course"
INTRO = "book/intro.html"
MAP = "notebooks/00_evolution_map.html"


def test_the_offline_context_records_and_fails_every_network_request(tmp_path):
    """The guard every browser test leans on (``blocked == []``): a page that asks the network for a script, a
    stylesheet, an image, a fetch and a WebSocket gets none of them, and every attempt is recorded."""
    asked = [
        "http://127.0.0.1:9/x.js",
        "https://example.com/a.css",
        "http://example.org/i.png",
        "http://127.0.0.1:9/f",
        "ws://127.0.0.1:9/ws",
    ]
    page_path = tmp_path / "asks.html"
    page_path.write_text(
        f'<!doctype html><html><head><script src="{asked[0]}"></script><link rel="stylesheet" href="{asked[1]}">'
        f'</head><body><img src="{asked[2]}"><script>window.got = "waiting";'
        f'fetch("{asked[3]}").then(() => {{ window.got = "answer"; }}, () => {{ window.got = "refused"; }});'
        f'new WebSocket("{asked[4]}").onopen = () => {{ window.got = "socket"; }};</script></body></html>',
        encoding="utf-8",
    )
    with offline_browser() as browser:
        failures: list[str] = []
        browser.context.on("requestfailed", lambda request: failures.append(request.failure or ""))
        page = browser.context.new_page()
        page.goto(page_path.as_uri(), wait_until="load")
        page.wait_for_function("() => window.got !== 'waiting'", timeout=5_000)
        for _ in range(40):  # the events reach Python asynchronously
            if len(browser.blocked) == len(asked) and len(failures) == len(asked) - 1:
                break
            page.wait_for_timeout(50)
        assert page.evaluate("window.got") == "refused"
        assert sorted(browser.blocked) == sorted(asked)
        # failed because the context is offline, not because nothing answered (the WebSocket has no request event)
        assert failures == ["net::ERR_INTERNET_DISCONNECTED"] * (len(asked) - 1)


def test_intro_renders_offline():
    require_site(INTRO)
    with offline_browser() as browser:
        page = browser.open(INTRO)
        assert BOOK_TITLE in page.title()
        h1 = page.locator("article h1").first
        h1.wait_for(state="visible", timeout=10_000)
        assert h1.inner_text().strip()
        # site.js has done its work (the math is typeset at build time: no page runs MathJax)
        page.wait_for_function("document.documentElement.dataset.siteMath === 'ready'", timeout=10_000)
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


# Every page offline, its math typeset, every exercise waiting for a prediction, no widget wider than the screen:
# tests/test_site_layout.py checks these in its one visit of every page at each width.


# ------------------------------------------------------------------------------------------ the intro and the map
def test_the_intro_opens_with_the_map_and_links_every_chapter():
    with site_page(INTRO) as page:
        hrefs = page.eval_on_selector_all(
            "article a.reference.internal", "els => els.map(e => e.getAttribute('href').split('#')[0])"
        )
        assert hrefs[0] == "../" + MAP  # the first link of the intro's text
        for st in evolution.STAGES:
            assert f"../notebooks/{st.chapter}.html" in hrefs, st.chapter
        assert "../notebooks/09_real_runs.html" in hrefs and "../notebooks/lab_tables.html" in hrefs


_BOXES = """() => [...document.querySelectorAll('.mp-evomap > li')].map(li => {
    const r = li.getBoundingClientRect(), cs = getComputedStyle(li);
    return {stage: +li.dataset.stage, branch: li.classList.contains('mp-evo-branch'), left: r.left, right: r.right,
            border: cs.borderTopStyle, text: li.innerText.replace(/\\s+/g, ' ')}; })"""
_SMALLEST_TEXT = """() => Math.min(...[...document.querySelectorAll('.mp-evomap *')]
    .filter(e => [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
    .map(e => parseFloat(getComputedStyle(e).fontSize)))"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_evolution_map_reads_at_every_width(viewport):
    rows = evolution.rows()
    with site_page(MAP, viewport) as page:
        boxes = page.evaluate(_BOXES)
        assert [b["stage"] for b in boxes] == [r.stage.number for r in rows]
        main = [b for b in boxes if not b["branch"]]
        branches = [b for b in boxes if b["branch"]]
        assert [b["stage"] for b in branches] == list(evolution.BRANCHES)
        assert len({round(b["left"]) for b in main}) == 1 and {b["border"] for b in main} == {"solid"}
        assert all(b["left"] > main[0]["left"] + 10 and b["border"] == "dashed" for b in branches)
        assert max(b["right"] for b in boxes) <= viewport["width"]
        for box, row in zip(boxes, rows):
            assert f"stuck: {row.number}" in box["text"], row.stage.number
        assert page.evaluate(_SMALLEST_TEXT) >= 11
        assert horizontal_overflow(page) == 0
        table = page.locator("table", has_text="Where it got stuck")
        assert table.locator("tbody tr").count() == len(rows)
        links = table.locator("tbody a.reference.internal")
        hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
        assert hrefs == [f"{r.stage.chapter}.html" for r in rows]
        assert all((SITE_DIR / "notebooks" / h).is_file() for h in hrefs)


def test_the_map_exercise_keeps_nvlink_inside_a_node_and_answers_as_the_library():
    hw = load_hardware()
    assert hw.effective_flop_per_s is not None  # the lab preset states it
    with site_page(MAP) as page:
        ex = page.locator("#mp-ex-map-hide-allreduce")
        ex.scroll_into_view_if_needed()
        n = ex.locator('input.mp-slider[data-name="n"]')
        assert (chosen(ex, "link"), chosen(ex, "n")) == ("NVLink", "4")  # not the InfiniBand case the map prints
        assert n.get_attribute("max") == "2"  # 2, 4, 8: one node
        choose(ex, "link", "InfiniBand")
        assert n.get_attribute("max") == "6"  # 2 … 1,024 GPUs, one or more nodes
        n.focus()
        page.keyboard.press("Home")
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        assert chosen(ex, "n") == "8"
        value = evolution.break_even_tokens(ANCHOR, 8, hw.infiniband_bytes_per_s, hw.effective_flop_per_s)
        shown = Result(value, f"{value:,.0f} tokens")
        assert predict(ex, "7500")[0] == compare("7500", shown, unit="tokens", digits=0)
        assert f"{value:,.0f} tokens" in ex.locator(".mp-explanation").inner_text()
