"""Chapter 9 in the built site (headless Chromium, offline, desktop and phone): the ZeroRedundancyOptimizer
exercise, whose rank control never passes N − 1; the FSDP2 gradient-accumulation and bubble exercises, answered
from the library and the results file."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page, skip_prediction

from meshplan import load_model
from meshplan.core import units
from meshplan.parallel import zero
from meshplan.realrun import load_results, rows_from_results
from meshplan.realrun.predict import fsdp2_resharded, gpt_param_numels, zero1_partition
from meshplan.widgets import Result, compare

CH9 = "notebooks/09_real_runs.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
SMALL = load_model("small-3.7m")


def _owned_mb(n: int, rank: int) -> float:
    return zero1_partition(gpt_param_numels(SMALL), n)[rank] * 8 / units.MB


@VIEWPORTS
def test_chapter9_zero1_owner_exercise_offers_only_existing_ranks(viewport):
    with site_page(CH9, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        assert "absent: no GPU was available to this project" in page.locator("main").inner_text()
        ex = page.locator("#mp-ex-ch9-zero1-owner")
        ex.scroll_into_view_if_needed()
        rank = ex.locator('input.mp-slider[data-name="rank"]')
        assert (chosen(ex, "n"), chosen(ex, "rank")) == ("4", "2")
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_owned_mb(4, 2):,.3f} MB."

        rank.focus()
        page.keyboard.press("End")  # the largest rank offered is N − 1 = 3
        assert chosen(ex, "rank") == "3" and ex.locator(".mp-answer").inner_text() == ""
        value = _owned_mb(4, 3)
        assert predict(ex, "3.7")[0] == compare("3.7", Result(value, f"{value:,.3f} MB"), unit="MB", digits=3)
        assert ex.locator(".mp-explanation").inner_text()

        n = ex.locator('input.mp-slider[data-name="n"]')
        n.focus()
        page.keyboard.press("Home")  # N 4 -> 2: rank 3 does not exist, the control moves to rank 1
        assert (chosen(ex, "n"), chosen(ex, "rank")) == ("2", "1")
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_owned_mb(2, 1):,.3f} MB."


@VIEWPORTS
def test_chapter9_fsdp_accumulation_exercise(viewport):
    units_ = zero.fsdp_unit_params(SMALL)
    stored = {r.check: r for r in rows_from_results(load_results())}
    with site_page(CH9, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch9-fsdp-accum")
        ex.scroll_into_view_if_needed()
        assert [chosen(ex, n) for n in ("reshard", "m", "sync")] == ["default", "4", "last micro-batch only"]
        value = zero.fsdp2_collectives_per_step(units_, fsdp2_resharded(5, None), 4, False)["all_gathers"]
        assert (
            value
            == 36
            == stored[
                "FSDP2 N=2, reshard_after_forward default, sync on the last micro-batch only, m=4: all-gathers per step"
            ].measured
        )
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.0f} all-gathers."

        choose(ex, "reshard", "True")
        value = zero.fsdp2_collectives_per_step(units_, fsdp2_resharded(5, True), 4, False)["all_gathers"]
        answer = predict(ex, "36")
        assert answer[0] == compare("36", Result(value, f"{value:,.0f} all-gathers"), unit="all-gathers", digits=0)
        assert value == 40 == stored["FSDP2 N=2, reshard_after_forward=True, m=4: all-gathers per step"].measured


@VIEWPORTS
def test_chapter9_bubble_exercise_reads_the_replay(viewport):
    stored = {r.check: r for r in rows_from_results(load_results())}
    with site_page(CH9, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch9-bubble")
        ex.scroll_into_view_if_needed()
        choose(ex, "schedule", "DualPipeV")
        ex.locator('input.mp-slider[data-name="p"]').focus()
        page.keyboard.press("Home")  # p = 2
        row = stored["DualPipeV p=2 v=2 m=8: bubble replayed from pipeline_order"]
        value = 100 * row.measured
        answer = predict(ex, "5 %")
        assert answer[0] == compare("5 %", Result(value, f"{value:,.2f} %"), unit="%", digits=2)
        assert row.exact and row.agrees and "meshplan.schedule.replay" in ex.locator(".mp-explanation").inner_text()
