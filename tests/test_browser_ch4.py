"""Chapter 4 in the built site: drive the check-bench exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import offline_browser, require_site
from meshplan import tpbench
from meshplan.widgets import Result, compare

PAGE = "notebooks/04_tensor_parallel.html"



def _word(t: int, dtype: str) -> str:
    return "exactly zero" if tpbench.bench(t, dtype).reorder_max_abs_diff == 0 else "nonzero"


def test_chapter4_check_bench_exercise():
    require_site(PAGE)
    with offline_browser() as browser:
        page = browser.open(PAGE)
        ex = page.locator("#mp-ex-ch4-bench")
        ex.scroll_into_view_if_needed()
        t = ex.locator('input.mp-slider[data-name="t"]')
        label = t.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "2"
        ex.locator(".mp-prediction").fill("exactly zero")
        ex.locator(".mp-check").click()
        assert _word(2, "float32") == "exactly zero"
        assert ex.locator(".mp-answer").inner_text().splitlines()[0] == compare(
            "exactly zero", Result("exactly zero", "exactly zero"))

        t.focus()
        page.keyboard.press("ArrowRight")                     # t = 2 -> 3
        assert label.inner_text() == "3"
        ex.locator(".mp-prediction").fill("exactly zero")
        ex.locator(".mp-check").click()
        word = _word(3, "float32")
        assert word == "nonzero"
        answer = ex.locator(".mp-answer").inner_text()
        assert answer.splitlines()[0] == compare("exactly zero", Result(word, word))
        assert "✗" in answer
        assert ex.locator(".mp-explanation").inner_text().startswith(
            f"max |difference| = {tpbench.bench(3).reorder_max_abs_diff:.1e}")

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
