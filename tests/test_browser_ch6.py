"""Chapter 6 in the built site: drive the causal-load exercise (headless Chromium, offline)."""

from __future__ import annotations

import pytest

from browser import offline_browser, require_site
from meshplan import cp
from meshplan.widgets import Result, compare

PAGE = "notebooks/06_context_parallel.html"



def test_chapter6_causal_load_exercise():
    require_site(PAGE)
    with offline_browser() as browser:
        page = browser.open(PAGE)
        ex = page.locator("#mp-ex-ch6-causal")
        ex.scroll_into_view_if_needed()
        split = ex.locator('input.mp-slider[data-name="split"]')
        label = split.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "contiguous"
        ex.locator(".mp-check").click()
        assert ex.locator(".mp-answer").inner_text().startswith(f"The library says {max(cp.causal_load(16, 4))} pairs.")

        split.focus()
        page.keyboard.press("ArrowRight")                     # contiguous -> zig-zag
        assert label.inner_text() == "zig-zag"
        ex.locator(".mp-prediction").fill("40")
        ex.locator(".mp-check").click()
        answer = ex.locator(".mp-answer").inner_text()
        value = max(cp.causal_load(16, 4, zigzag=True))
        expected = compare("40", Result(value, f"{value:,.0f} pairs"), unit="pairs", digits=0)
        assert answer.splitlines()[0] == expected and value == 34
        assert ex.locator(".mp-explanation").inner_text().count("34") >= 4

        tokens = ex.locator('input.mp-slider[data-name="tokens"]')
        gpus = ex.locator('input.mp-slider[data-name="gpus"]')
        tokens.focus()
        page.keyboard.press("ArrowRight")                     # 16 -> 24 tokens
        gpus.focus()
        page.keyboard.press("ArrowRight")                     # 4 -> 8 GPUs: 16 chunks do not divide 24 tokens
        ex.locator(".mp-check").click()
        with pytest.raises(ValueError) as err:
            cp.causal_load(24, 8, zigzag=True)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid plan: {err.value}"

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
