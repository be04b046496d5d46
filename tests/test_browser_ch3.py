"""Chapter 3 in the built site: drive the ZeRO-ladder exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import offline_browser, require_site
from meshplan import load_model, zero
from meshplan.widgets import Result, compare

PAGE = "notebooks/03_zero_fsdp.html"



def _states_gb(gpus: int, stage: int) -> float:
    return zero.model_states_bytes(load_model("qwen3.8-27b").params.total, stage, gpus) / 1e9


def test_chapter3_ladder_exercise():
    require_site(PAGE)
    with offline_browser() as browser:
        page = browser.open(PAGE)
        ex = page.locator("#mp-ex-ch3-ladder")
        ex.scroll_into_view_if_needed()
        stage = ex.locator('input.mp-slider[data-name="stage"]')
        label = stage.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "2"
        ex.locator(".mp-check").click()
        assert ex.locator(".mp-answer").inner_text().startswith(f"The library says {_states_gb(8, 2):,.1f} GB.")

        stage.focus()
        page.keyboard.press("ArrowRight")                     # ZeRO-2 -> ZeRO-3
        assert label.inner_text() == "3"
        assert ex.locator(".mp-answer").inner_text() == ""
        ex.locator(".mp-prediction").fill("55.6")
        ex.locator(".mp-check").click()
        answer = ex.locator(".mp-answer").inner_text()
        value = _states_gb(8, 3)
        assert answer.splitlines()[0] == compare("55.6", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert "55.6 GB" in answer and "✓" in answer
        assert ex.locator(".mp-explanation").inner_text()

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
