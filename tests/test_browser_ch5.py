"""Chapter 5 in the built site: the bubble exercise and the schedule explorer (headless Chromium, offline)."""

from __future__ import annotations

import pytest
from browser import choose, chosen, predict, site_page, skip_prediction
from meshplan import schedule
from meshplan.widgets import Result, compare

PAGE = "notebooks/05_pipeline_parallel.html"


def test_chapter5_bubble_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch5-bubble")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "p") == "4"
        value = 100 * schedule.simulate("1f1b", 4, 8).bubble
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.1f} %."

        ex.locator('input.mp-slider[data-name="p"]').focus()
        page.keyboard.press("ArrowRight")                        # p: 4 -> 8 stages, m = 8
        assert chosen(ex, "p") == "8" and ex.locator(".mp-answer").inner_text() == ""
        value = 100 * schedule.simulate("1f1b", 8, 8).bubble
        answer = predict(ex, "50 %")
        assert answer[0] == compare("50 %", Result(value, f"{value:,.1f} %"), unit="%", digits=1)
        assert "87.5 %" in answer[0] and ex.locator(".mp-explanation").inner_text()

        v = ex.locator('.mp-control[data-name="v"]')
        if v.evaluate("e => e.tagName") == "INPUT" and not v.is_disabled():   # v = 2 on 1F1B (unless the
            v.focus()                                                         # page offers only v = 1 there)
            page.keyboard.press("ArrowRight")
            with pytest.raises(ValueError) as err:
                schedule.simulate("1f1b", 8, 8, 2)
            assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"


def test_chapter5_explorer_draws_the_schedules_to_one_scale():
    with site_page(PAGE) as page:
        tl = page.locator("#mp-tl-ch5-explore")
        tl.scroll_into_view_if_needed()
        assert tl.locator(".mp-caption").inner_text().startswith("1F1B: p = 4, m = 8, v = 1; bubble 37.5 %")
        rows = tl.locator(".mp-tl-row")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.kind)") == list(schedule.KINDS)
        one = tl.locator('.mp-tl-row[data-kind="1f1b"] rect[data-kind]')
        assert one.count() == len(schedule.simulate("1f1b", 4, 8).events)
        widths = dict(rows.evaluate_all("rs => rs.map(r => [r.dataset.kind, r.querySelector('svg') ? "
                                        "+r.querySelector('svg').getAttribute('width') : null])"))
        assert widths["dualpipe"] < widths["1f1b"] <= widths["gpipe"]
        t = schedule.simulate("dualpipe", 4, 8)
        choose(tl, "schedule", "DualPipe")
        assert tl.locator(".mp-caption").inner_text().startswith(f"DualPipe: p = 4, m = 8, v = 1; bubble "
                                                                 f"{100 * t.bubble:.1f} %")
        assert tl.locator('.mp-tl-row.mp-current').get_attribute("data-kind") == "dualpipe"
