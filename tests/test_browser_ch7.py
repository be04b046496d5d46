"""Chapter 7 in the built site: drive the world-size exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import offline_browser, require_site
from meshplan import ep
from meshplan.widgets import Result, compare

PAGE = "notebooks/07_expert_parallel.html"



def test_chapter7_world_size_exercise():
    require_site(PAGE)
    with offline_browser() as browser:
        page = browser.open(PAGE)
        ex = page.locator("#mp-ex-ch7-world")
        ex.scroll_into_view_if_needed()
        etp = ex.locator('input.mp-slider[data-name="expert_tp"]')
        label = etp.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "1 (experts not split)"
        ex.locator(".mp-prediction").fill("2048")
        ex.locator(".mp-check").click()
        value = ep.moe_world_size(2, 16, 64, expert_tp=1)
        answer = ex.locator(".mp-answer").inner_text()
        assert answer.splitlines()[0] == compare("2048", Result(value, f"{value:,.0f} GPUs"), unit="GPUs", digits=0)
        assert value == 1024 and "✗ off" in answer

        etp.focus()
        page.keyboard.press("ArrowRight")                     # experts split over TP like the dense layers
        assert label.inner_text() == "same as TP"
        assert ex.locator(".mp-answer").inner_text() == ""
        ex.locator(".mp-check").click()
        value = ep.moe_world_size(2, 16, 64)
        assert ex.locator(".mp-answer").inner_text().startswith(f"The library says {value:,.0f} GPUs.")
        assert value == 2048

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
