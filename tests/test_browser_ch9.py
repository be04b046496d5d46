"""Chapter 9 in the built site: the ZeroRedundancyOptimizer exercise; its rank control cannot pass N − 1
(headless Chromium, offline)."""

from __future__ import annotations

from browser import chosen, predict, site_page, skip_prediction
from meshplan import load_model, units
from meshplan.realrun.predict import gpt_param_numels, zero1_partition
from meshplan.widgets import Result, compare

CH9 = "notebooks/09_real_runs.html"


def _owned_mb(n: int, rank: int) -> float:
    return zero1_partition(gpt_param_numels(load_model("small-3.7m")), n)[rank] * 8 / units.MB


def test_chapter9_zero1_owner_exercise_shows_the_library_answer():
    with site_page(CH9) as page:
        ex = page.locator("#mp-ex-ch9-zero1-owner")
        ex.scroll_into_view_if_needed()
        rank = ex.locator('input.mp-slider[data-name="rank"]')
        assert chosen(ex, "rank") == "0"
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_owned_mb(8, 0):,.3f} MB."

        rank.focus()
        page.keyboard.press("ArrowRight")                        # rank 0 -> 1
        assert chosen(ex, "rank") == "1" and ex.locator(".mp-answer").inner_text() == ""
        value = _owned_mb(8, 1)
        assert predict(ex, "3.7")[0] == compare("3.7", Result(value, f"{value:,.3f} MB"), unit="MB", digits=3)
        assert ex.locator(".mp-explanation").inner_text()

        n = ex.locator('input.mp-slider[data-name="n"]')
        n.focus()
        page.keyboard.press("Home")                              # N 8 -> 2: rank 1 still exists
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_owned_mb(2, 1):,.3f} MB."
        rank.focus()
        page.keyboard.press("End")                               # the largest rank offered is N − 1 = 1
        assert chosen(ex, "rank") == "1"
