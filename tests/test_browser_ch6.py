"""Chapter 6 in the built site (headless Chromium, offline, desktop and phone): the causal-load exercise with a
named choice, and the plan checklist, whose lines are checked against the library."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page, skip_prediction

from meshplan import Plan, evaluate, search
from meshplan.core.units import fmt_gb, fmt_int
from meshplan.parallel import cp
from meshplan.steptime import breakdowns
from meshplan.widgets import Result, compare

PAGE = "notebooks/06_context_parallel.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
LONG = 131072


@VIEWPORTS
def test_chapter6_causal_load_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        ex = page.locator("#mp-ex-ch6-causal")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "split") == "contiguous"
        assert ex.locator(".mp-check").is_disabled()
        assert (
            skip_prediction(ex) == f"You skipped the prediction. The library says {max(cp.causal_load(16, 4))} pairs."
        )

        choose(ex, "split", "zig-zag")  # a visible option, not a slider position
        assert chosen(ex, "split") == "zig-zag"
        value = max(cp.causal_load(16, 4, zigzag=True))
        answer = predict(ex, "40 pairs")
        assert answer[0] == compare("40", Result(value, f"{value:,.0f} pairs"), unit="pairs", digits=0)
        assert value == 34
        assert ex.locator(".mp-explanation").inner_text().count("34") >= 4

        for name in ("tokens", "gpus"):  # 16 -> 24 tokens; 4 -> 8 GPUs
            ex.locator(f'input.mp-slider[data-name="{name}"]').focus()
            page.keyboard.press("ArrowRight")
        with pytest.raises(ValueError) as err:  # 16 chunks do not divide 24 tokens
            cp.causal_load(24, 8, zigzag=True)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"


def _lines(ck) -> dict[str, str]:
    ck.locator(".mp-check").click()
    items = ck.locator("li.mp-pass, li.mp-fail")
    return {items.nth(i).get_attribute("data-check"): items.nth(i).inner_text() for i in range(items.count())}


@VIEWPORTS
def test_chapter6_plan_checklist(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        ck = page.locator("#mp-ck-ch6-plan")
        ck.scroll_into_view_if_needed()
        assert [chosen(ck, n) for n in ("tp", "cp", "pp", "zero", "recompute")] == ["8", "1", "8", "ZeRO-0", "full"]
        lines = _lines(ck)
        assert ck.locator(".mp-summary").inner_text() == (
            "4 of 6 checks pass; failing: TP inside a node, on whole KV heads, bubble acceptable."
        )
        assert lines["TP inside a node, on whole KV heads"].startswith("✗ TP inside a node, on whole KV heads: tp=8")
        assert lines["bubble acceptable"] == "✗ bubble acceptable: p = 8, m = 1: (p − 1)/m = 700 % of the ideal compute"
        default = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=8, seq=LONG, recompute="full", micro_batches=1))
        assert fmt_gb(default.memory_bytes["total"]) in lines["memory fits"] and default.fits

        # the search's best shape: TP 4 × CP 16, no pipeline, ZeRO-3 over the 16 CP ranks, selective recompute
        ck.locator('input.mp-slider[data-name="tp"]').focus()
        page.keyboard.press("ArrowLeft")  # TP 8 -> 4
        ck.locator('input.mp-slider[data-name="cp"]').focus()
        page.keyboard.press("End")  # CP 16, the largest that TP 4 leaves on 64 GPUs
        ck.locator('input.mp-slider[data-name="zero"]').focus()
        page.keyboard.press("End")
        choose(ck, "recompute", "selective")
        assert [chosen(ck, n) for n in ("tp", "cp", "pp", "zero", "recompute")] == [
            "4",
            "16",
            "1",  # PP moved to the only value the GPUs leave
            "ZeRO-3",
            "selective",
        ]
        lines = _lines(ck)
        assert ck.locator(".mp-summary").inner_text() == "6 of 6 checks pass."
        plan = Plan.create(
            "qwen3.8-27b", gpus=64, tp=4, cp=16, seq=LONG, zero=3, recompute="selective", micro_batches=1
        )
        report = evaluate(plan)
        o = breakdowns.ring_overlap(report)
        assert fmt_gb(report.memory_bytes["total"]) in lines["memory fits"]
        assert (
            f"K/V {1e3 * o.transfer_s:.2f} ms on InfiniBand against attention {1e3 * o.attention_s:.2f} ms"
            in (lines["K/V hidden behind attention"])
        )
        assert f"{fmt_int(LONG // 16)} tokens per CP rank" in lines["CP chunk long enough"]
        assert LONG // 16 >= search.MIN_SEQ_PER_CP_RANK


def test_chapter6_math_is_typeset():
    with site_page(PAGE, viewport=DESKTOP) as page:
        page.wait_for_function("() => document.querySelectorAll('mjx-container').length >= 4")
        assert page.locator(".mathjax_process mjx-container").count() == 1  # the bubble in the Llama 3 table
