"""Chapter 9 in the built site: move a slider of the ZeroRedundancyOptimizer exercise with the keyboard,
type a prediction, press Check, and compare the page's answer with the library's answer now."""

from __future__ import annotations

from browser import offline_browser, require_site
from meshplan import load_model, units
from meshplan.realrun.predict import gpt_param_numels, zero1_partition
from meshplan.widgets import Result, compare

CH9 = "notebooks/09_real_runs.html"



def _owned_mb(n: int, rank: int) -> float:
    return zero1_partition(gpt_param_numels(load_model("small-3.7m")), n)[rank] * 8 / units.MB


def test_chapter9_zero1_owner_exercise_shows_the_library_answer():
    require_site(CH9)
    with offline_browser() as browser:
        page = browser.open(CH9)
        ex = page.locator("#mp-ex-ch9-zero1-owner")
        ex.scroll_into_view_if_needed()
        slider = ex.locator('input.mp-slider[data-name="rank"]')
        label = slider.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "0"
        ex.locator(".mp-check").click()
        assert ex.locator(".mp-answer").inner_text().startswith(f"The library says {_owned_mb(8, 0):,.3f} MB.")

        slider.focus()
        page.keyboard.press("ArrowRight")                       # rank 0 -> 1
        assert label.inner_text() == "1"
        assert ex.locator(".mp-answer").inner_text() == ""
        ex.locator(".mp-prediction").fill("3.7")
        ex.locator(".mp-check").click()
        value = _owned_mb(8, 1)
        expected = compare("3.7", Result(value, f"{value:,.3f} MB"), unit="MB", digits=3)
        answer = ex.locator(".mp-answer").inner_text()
        assert answer.splitlines()[0] == expected
        assert ex.locator(".mp-explanation").inner_text()

        n_slider = ex.locator('input.mp-slider[data-name="n"]')
        n_slider.focus()
        page.keyboard.press("ArrowLeft")                        # N 8 -> 4
        n_slider.focus()
        page.keyboard.press("ArrowLeft")                        # N 4 -> 2: rank 1 still exists
        ex.locator(".mp-check").click()
        assert ex.locator(".mp-answer").inner_text().startswith(f"The library says {_owned_mb(2, 1):,.3f} MB.")

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
