"""Chapter 4 in the built site: the check-bench exercise, a word answer (headless Chromium, offline)."""

from __future__ import annotations

from browser import chosen, predict, site_page
from meshplan import tpbench
from meshplan.widgets import Result, compare

PAGE = "notebooks/04_tensor_parallel.html"


def _word(t: int, dtype: str) -> str:
    return "exactly zero" if tpbench.bench(t, dtype).reorder_max_abs_diff == 0 else "nonzero"


def test_chapter4_check_bench_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch4-bench")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "t") == "2"
        assert _word(2, "float32") == "exactly zero"
        assert predict(ex, "exactly zero")[0] == compare("exactly zero", Result("exactly zero", "exactly zero"))

        ex.locator('input.mp-slider[data-name="t"]').focus()
        page.keyboard.press("ArrowRight")                        # t = 2 -> 3
        assert chosen(ex, "t") == "3"
        word = _word(3, "float32")
        assert word == "nonzero"
        answer = predict(ex, "exactly zero", enter=True)
        assert answer[0] == compare("exactly zero", Result(word, word)) and "✗ No match." in answer[0]
        assert ex.locator(".mp-explanation").inner_text().startswith(
            f"max |difference| = {tpbench.bench(3).reorder_max_abs_diff:.1e}")
