"""Drive the predict-then-check exercises in the built site (headless Chromium, file://, network blocked).

The answers the page shows were computed by the library when the book was built; these tests compute
the same answers with the library now and compare them with what the page shows after moving a slider
and pressing Check.
"""

from __future__ import annotations

import pytest

from browser import offline_browser, require_site
from meshplan import Plan, evaluate
from meshplan.widgets import Result, compare

CH1 = "notebooks/01_one_gpu.html"



def _states_gb(model: str, gpus: int) -> float:
    return evaluate(Plan.create(model, gpus=gpus, zero=3)).memory_bytes["model_states"] / 1e9


def test_chapter1_slider_and_check_show_the_library_answer():
    require_site(CH1)
    with offline_browser() as browser:
        page = browser.open(CH1)
        ex = page.locator("#mp-ex-ch1-floor")
        ex.scroll_into_view_if_needed()
        slider = ex.locator('input.mp-slider[data-name="gpus"]')
        label = slider.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "8"                      # the default: one node
        ex.locator(".mp-check").click()
        before = ex.locator(".mp-answer").inner_text()
        assert before.startswith(f"The library says {_states_gb('qwen3.8-27b', 8):.1f} GB.")

        slider.focus()
        page.keyboard.press("ArrowRight")                       # 8 -> 12: not a valid plan
        assert label.inner_text() == "12"
        assert ex.locator(".mp-answer").inner_text() == ""      # moving a slider clears the answer
        ex.locator(".mp-check").click()
        with pytest.raises(ValueError) as err:
            Plan.create("qwen3.8-27b", gpus=12, zero=3)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid plan: {err.value}"

        slider.focus()
        page.keyboard.press("ArrowRight")                       # 12 -> 16
        assert label.inner_text() == "16"
        ex.locator(".mp-prediction").fill("20")
        ex.locator(".mp-check").click()
        answer = ex.locator(".mp-answer").inner_text()
        value = _states_gb("qwen3.8-27b", 16)
        expected = compare("20", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert answer.splitlines()[0] == expected              # the JavaScript mirrors the library's wording
        assert f"{value:.1f} GB" in answer and "−" in answer and answer != before
        assert ex.locator(".mp-explanation").inner_text()       # a worked answer is shown

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
