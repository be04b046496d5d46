"""Chapter 5 in the built site: drive the bubble exercise and the timeline explorer (headless Chromium,
offline)."""

from __future__ import annotations

import pytest

from browser import offline_browser, require_site
from meshplan import schedule
from meshplan.widgets import Result, compare

PAGE = "notebooks/05_pipeline_parallel.html"



def test_chapter5_bubble_exercise_and_explorer():
    require_site(PAGE)
    with offline_browser() as browser:
        page = browser.open(PAGE)
        ex = page.locator("#mp-ex-ch5-bubble")
        ex.scroll_into_view_if_needed()
        p = ex.locator('input.mp-slider[data-name="p"]')
        label = p.locator("xpath=following-sibling::output[1]")
        assert label.inner_text() == "4"
        ex.locator(".mp-check").click()
        assert ex.locator(".mp-answer").inner_text().startswith("The library says 37.5 %.")

        p.focus()
        page.keyboard.press("ArrowRight")                       # p: 4 -> 8 stages, m = 8
        assert label.inner_text() == "8"
        assert ex.locator(".mp-answer").inner_text() == ""
        ex.locator(".mp-prediction").fill("50")
        ex.locator(".mp-check").click()
        answer = ex.locator(".mp-answer").inner_text()
        value = 100 * schedule.simulate("1f1b", 8, 8).bubble
        expected = compare("50", Result(value, f"{value:,.1f} %"), unit="%", digits=1)
        assert answer.splitlines()[0] == expected
        assert "87.5 %" in answer and ex.locator(".mp-explanation").inner_text()

        v = ex.locator('input.mp-slider[data-name="v"]')
        v.focus()
        page.keyboard.press("ArrowRight")                       # v = 2 on 1F1B: not a valid schedule
        ex.locator(".mp-check").click()
        with pytest.raises(ValueError) as err:
            schedule.simulate("1f1b", 8, 8, 2)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid plan: {err.value}"

        tl = page.locator("#mp-tl-ch5-explore")
        tl.scroll_into_view_if_needed()
        assert tl.locator(".mp-caption").inner_text().startswith("1F1B: p = 4, m = 8, v = 1; bubble 37.5 %")
        assert tl.locator(".mp-view svg rect").count() == len(schedule.simulate("1f1b", 4, 8).events)
        kind = tl.locator('input.mp-slider[data-name="schedule"]')
        kind.focus()
        page.keyboard.press("End")                              # the last schedule: DualPipe
        t = schedule.simulate("dualpipe", 4, 8)
        assert tl.locator(".mp-caption").inner_text().startswith(f"DualPipe: p = 4, m = 8, v = 1; bubble "
                                                                 f"{100 * t.bubble:.1f} %")

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
