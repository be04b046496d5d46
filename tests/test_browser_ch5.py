"""Chapter 5 in the built site (headless Chromium, offline, desktop and phone): the bubble exercise with its
dependent chunk control, the schedule explorer drawn to one scale, and the DeepSeek tables that fit."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page, skip_prediction

from meshplan import schedule
from meshplan.widgets import Result, compare

PAGE = "notebooks/05_pipeline_parallel.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


def _slider(ex, name: str):
    return ex.locator(f'input.mp-slider[data-name="{name}"]')


@VIEWPORTS
def test_chapter5_bubble_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        ex = page.locator("#mp-ex-ch5-bubble")
        ex.scroll_into_view_if_needed()
        assert [chosen(ex, n) for n in ("schedule_kind", "p", "m", "v")] == ["1F1B", "8", "16", "1"]
        assert _slider(ex, "v").is_disabled()  # 1F1B has no chunks to choose
        assert ex.locator(".mp-check").is_disabled()  # nothing typed: nothing to check
        value = 100 * schedule.simulate("1f1b", 8, 16).bubble
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.1f} %."

        choose(ex, "schedule_kind", "interleaved 1F1B")
        v = _slider(ex, "v")
        assert not v.is_disabled() and v.get_attribute("max") == "2"  # v = 1, 2, 4
        v.focus()
        page.keyboard.press("End")
        assert chosen(ex, "v") == "4"
        value = 100 * schedule.simulate("interleaved", 8, 16, 4).bubble
        answer = predict(ex, "20 %", enter=True)
        assert answer[0] == compare("20 %", Result(value, f"{value:,.1f} %"), unit="%", digits=1)
        assert "10.9 %" in answer[0] and ex.locator(".mp-explanation").inner_text()

        choose(ex, "schedule_kind", "DualPipeV")
        assert chosen(ex, "v") == "1" and _slider(ex, "v").is_disabled()
        _slider(ex, "m").focus()
        page.keyboard.press("Home")  # m = 8 < 2p = 16
        with pytest.raises(ValueError) as err:
            schedule.simulate("dualpipev", 8, 8)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"
        assert ex.locator(".mp-check").is_disabled() and ex.locator(".mp-show").is_disabled()


@VIEWPORTS
def test_chapter5_explorer_draws_the_schedules_to_one_scale(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        tl = page.locator("#mp-tl-ch5-explore")
        tl.scroll_into_view_if_needed()
        t = schedule.simulate("interleaved", 8, 16, 2)
        assert (
            tl.locator(".mp-caption")
            .inner_text()
            .startswith(f"interleaved 1F1B: p = 8, m = 16, v = 2; bubble {100 * t.bubble:.1f} %")
        )
        rows = tl.locator(".mp-tl-row")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.kind)") == list(schedule.KINDS)
        widths = dict(
            rows.evaluate_all(
                "rs => rs.map(r => [r.dataset.kind, r.querySelector('svg') ? "
                "+r.querySelector('svg').getAttribute('width') : null])"
            )
        )
        spans = {k: schedule.simulate(k, 8, 16, 2 if k == "interleaved" else 1).makespan for k in schedule.KINDS}
        # one time axis: every width is the same label margin plus the same pixels per unit of time
        scale = (widths["gpipe"] - widths["dualpipe"]) / (spans["gpipe"] - spans["dualpipe"])
        margin = widths["gpipe"] - scale * spans["gpipe"]
        assert scale > 0 and margin >= 0
        for k in schedule.KINDS:
            assert widths[k] == pytest.approx(margin + scale * spans[k], abs=1.5), k
        assert widths["dualpipe"] < widths["dualpipev"] < widths["1f1b"]
        choose(tl, "schedule", "DualPipeV")
        v = schedule.simulate("dualpipev", 8, 16)
        assert (
            tl.locator(".mp-caption")
            .inner_text()
            .startswith(f"DualPipeV: p = 8, m = 16, v = 1; bubble {100 * v.bubble:.1f} %")
        )
        assert tl.locator(".mp-tl-row.mp-current").get_attribute("data-kind") == "dualpipev"
        assert tl.locator('input.mp-slider[data-name="v"]').is_disabled()


def test_chapter5_tables_typeset_their_math_and_fit_the_desktop():
    with site_page(PAGE, viewport=DESKTOP) as page:
        page.wait_for_function("() => document.querySelectorAll('.mathjax_process mjx-container').length >= 9")
        tables = page.locator(".mathjax_process table")
        assert tables.count() == 3  # the lab page's plans and DeepSeek's two tables
        for i in range(tables.count()):
            t = tables.nth(i)
            assert t.evaluate("e => e.textContent.includes('\\\\(')") is False  # every \( \) typeset
            frame = t.evaluate(
                "e => { const f = e.closest('.site-scroll') || e.parentElement; return f.scrollWidth - f.clientWidth; }"
            )
            assert frame <= 1, f"table {i} scrolls sideways at 1366 px"
