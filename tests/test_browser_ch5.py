"""Chapter 5 in the built site (headless Chromium, offline, desktop and phone): the bubble exercise with its
dependent chunk control, the schedule explorer drawn to one scale, the pipeline-design checklist, and the DeepSeek
tables that fit."""

from __future__ import annotations

import pytest
from browser import (
    DESKTOP,
    PHONE,
    choose,
    chosen,
    horizontal_overflow,
    predict,
    site_page,
    skip_prediction,
    slide,
    slider,
)

from meshplan import schedule
from meshplan.course.lab import pipeline_design_checklist
from meshplan.widgets import Result, compare

PAGE = "notebooks/05_pipeline_parallel.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


@VIEWPORTS
def test_chapter5_bubble_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        ex = page.locator("#mp-ex-ch5-bubble")
        ex.scroll_into_view_if_needed()
        assert [chosen(ex, n) for n in ("schedule_kind", "p", "m", "v")] == ["1F1B", "8", "16", "1"]
        assert slider(ex, "v").is_disabled()  # 1F1B has no chunks to choose
        assert ex.locator(".mp-check").is_disabled()  # nothing typed: nothing to check
        value = 100 * schedule.simulate("1f1b", 8, 16).bubble
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.1f} %."

        choose(ex, "schedule_kind", "interleaved 1F1B")
        v = slider(ex, "v")
        assert not v.is_disabled() and v.get_attribute("max") == "2"  # v = 1, 2, 4
        v.focus()
        page.keyboard.press("End")
        assert chosen(ex, "v") == "4"
        value = 100 * schedule.simulate("interleaved", 8, 16, 4).bubble
        answer = predict(ex, "20 %", enter=True)
        assert answer[0] == compare("20 %", Result(value, f"{value:,.1f} %"), unit="%", digits=1)
        assert "10.9 %" in answer[0] and ex.locator(".mp-explanation").inner_text()

        choose(ex, "schedule_kind", "DualPipeV")
        assert chosen(ex, "v") == "1" and slider(ex, "v").is_disabled()
        slider(ex, "m").focus()
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


@VIEWPORTS
def test_chapter5_explorer_scrolls_on_a_phone_with_a_cue_and_pinned_gpu_labels(viewport):
    """Issue 28: at 390 px the explorer hid the right 40 % of every schedule with no sign that it scrolls. Wider than
    its box, it now says so above the timelines, is a named keyboard stop (arrow keys scroll it), and keeps each
    timeline's GPU labels at its left edge while it scrolls; where the timelines fit there is neither."""
    with site_page(PAGE, viewport=viewport) as page:
        tl = page.locator("#mp-tl-ch5-explore")
        tl.scroll_into_view_if_needed()
        view = tl.locator(".mp-tl-view")
        wide, box = view.evaluate("v => [v.scrollWidth, v.clientWidth]")
        hint = tl.locator(".mp-tl-hint")
        if viewport == DESKTOP:
            assert wide <= box + 1 and not hint.is_visible() and view.get_attribute("tabindex") is None
            assert tl.locator(".mp-tl-gpus").count() == 0
            return
        assert wide > box and hint.is_visible()
        assert hint.inner_text() == "Scroll sideways for the rest of each schedule →"
        assert (view.get_attribute("tabindex"), view.get_attribute("role")) == ("0", "region")
        rows = tl.locator(".mp-tl-row")
        assert tl.locator(".mp-tl-gpus").count() == rows.count()
        view.focus()
        page.keyboard.press("End")
        page.keyboard.press("ArrowRight")
        view.evaluate("v => { v.scrollLeft = v.scrollWidth; }")
        left, pinned = view.evaluate(
            "v => [v.getBoundingClientRect().left, [...v.querySelectorAll('.mp-tl-gpus')].map("
            "g => g.getBoundingClientRect().left)]"
        )
        assert view.evaluate("v => v.scrollLeft") > 0
        assert all(abs(x - left) <= 1 for x in pinned), (left, pinned)
        labels = tl.locator(".mp-tl-gpus").first.inner_text().split("\n")
        assert labels == [f"GPU {g}" for g in range(8)]
        view.evaluate("v => { v.scrollLeft = 0; }")
        assert horizontal_overflow(page) == 0


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


@VIEWPORTS
def test_chapter5_pipeline_design_checklist_prints_the_library_lines(viewport):
    ck = pipeline_design_checklist()
    with site_page(PAGE, viewport=viewport) as page:
        root = page.locator(f"#{ck.dom_id}")
        root.scroll_into_view_if_needed()
        names = ("tp", "cp", "pp", "zero", "recompute", "b", "m")
        assert (
            [chosen(root, n) for n in names]
            == [str(ck.defaults[n]) for n in names]
            == [
                "4",
                "1",
                "4",
                "0",
                "full",
                "1",
                "8",
            ]
        )
        assert root.locator(".mp-check").is_enabled()
        root.locator(".mp-check").click()
        start = root.locator(".mp-answer").inner_text()
        assert start == ck.report(**ck.defaults)
        assert start.startswith("3 of 6 checks pass; failing: acceptable bubble, global batch, the search.")
        # PP 2, ZeRO-1, selective recomputation, m = 16: one of the plans that pass every line
        slide(root, "pp", "ArrowLeft")
        slide(root, "zero", "End")
        choose(root, "recompute", "selective")
        slide(root, "m", "ArrowRight")
        assert root.locator(".mp-answer").inner_text() == ""  # moving a control clears the lines
        root.locator(".mp-check").click()
        plan = {"tp": 4, "cp": 1, "pp": 2, "zero": 1, "recompute": "selective", "b": 1, "m": 16}
        assert plan in ck.passing()
        assert root.locator(".mp-answer").inner_text() == ck.report(**plan)
        assert root.locator("li.mp-fail").count() == 0
        # TP 4 on 32 GPUs leaves PP at most 8, whose DP of 1 has no optimizer to shard: ZeRO falls back to 0
        slide(root, "pp", "End")
        assert chosen(root, "pp") == "8" and chosen(root, "zero") == "0" and slider(root, "zero").is_disabled()
        assert int(chosen(root, "m")) >= 8  # m >= p
        root.locator(".mp-check").click()
        values = {n: chosen(root, n) if n == "recompute" else int(chosen(root, n)) for n in names}
        assert root.locator(".mp-answer").inner_text() == ck.report(**values)
        assert horizontal_overflow(page) == 0
