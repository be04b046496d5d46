"""Chapter 7 in the built site (headless Chromium, offline, desktop and phone): the all-to-all ratio exercise with
named choices, the world-size and expert-DP exercises (an invalid folding flagged as the control moves)."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page, skip_prediction

from meshplan import evaluate
from meshplan.parallel import ep
from meshplan.spec.dims import ParallelDims
from meshplan.steptime import breakdowns
from meshplan.steptime import fitting as calibration
from meshplan.widgets import Result, compare

PAGE = "notebooks/07_expert_parallel.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


@VIEWPORTS
def test_chapter7_reads_like_a_book(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        assert page.locator("div.cell div.cell_input").count() <= 5  # only the cells that teach the library
        assert page.locator("#mp-ex-ch7-ratio .mp-check").is_disabled()  # nothing to check before a prediction


@VIEWPORTS
def test_chapter7_ratio_exercise(viewport):
    report = evaluate(calibration.run_plan(calibration.run("deepseek-v3-pretraining")))
    with site_page(PAGE, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch7-ratio")
        ex.scroll_into_view_if_needed()
        assert [chosen(ex, n) for n in ("dispatch", "routing", "gemms")] == ["FP8", "≤ 4 nodes", "bf16"]
        fp8_nodes = breakdowns.all_to_all_balance(report, dispatch_bytes=ep.FP8_DISPATCH_BYTES, max_nodes=4).ratio
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {fp8_nodes:,.2f} ×."

        choose(ex, "gemms", "FP8")  # DeepSeek-V3's three choices together
        assert chosen(ex, "gemms") == "FP8" and ex.locator(".mp-answer").inner_text() == ""
        value = breakdowns.all_to_all_balance(
            report, dispatch_bytes=ep.FP8_DISPATCH_BYTES, max_nodes=4, gemm_speedup=2.0
        ).ratio
        answer = predict(ex, "1", enter=True)
        assert answer[0] == compare("1", Result(value, f"{value:,.2f} ×"), unit="×", digits=2)
        assert (
            f"{value:.2f}" == "0.89" and "24.25 × h bytes on InfiniBand" in ex.locator(".mp-explanation").inner_text()
        )


@VIEWPORTS
def test_chapter7_world_size_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch7-world")
        ex.scroll_into_view_if_needed()
        assert [chosen(ex, n) for n in ("tp", "pp", "ep_size", "expert_tp")] == ["2", "8", "32", "same as TP"]
        value = ep.moe_world_size(2, 8, 32)
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.0f} GPUs."
        assert value == 512

        choose(ex, "expert_tp", "1 (experts not split)")
        assert ex.locator(".mp-answer").inner_text() == ""
        value = ep.moe_world_size(2, 8, 32, expert_tp=1)
        answer = predict(ex, "512")
        assert answer[0] == compare("512", Result(value, f"{value:,.0f} GPUs"), unit="GPUs", digits=0)
        assert value == 256 and "lcm(2, 32) = 32" in ex.locator(".mp-explanation").inner_text()


@VIEWPORTS
def test_chapter7_expert_dp_exercise_flags_an_invalid_folding(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch7-expert-dp")
        ex.scroll_into_view_if_needed()
        assert [chosen(ex, n) for n in ("tp", "dp", "ep_size")] == ["2", "48", "8"]
        expected = ParallelDims(tp=2, pp=1, dp=48, ep=8, expert_tp=1).expert_dp
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {expected:,.0f} ranks."

        ex.locator('input.mp-slider[data-name="ep_size"]').focus()
        page.keyboard.press("End")  # EP 64 does not fold into TP 2 x DP 48 = 96 ranks
        with pytest.raises(ValueError) as err:
            ParallelDims(tp=2, pp=1, dp=48, ep=64, expert_tp=1)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"
        assert ex.locator(".mp-check").is_disabled() and ex.locator(".mp-show").is_disabled()


def _lines(ck) -> dict[str, str]:
    ck.locator(".mp-check").click()
    items = ck.locator("li.mp-pass, li.mp-fail")
    return {items.nth(i).get_attribute("data-check"): items.nth(i).inner_text() for i in range(items.count())}


@VIEWPORTS
def test_chapter7_plan_checklist(viewport):
    run = calibration.run_plan(calibration.run("deepseek-v3-pretraining"))
    with site_page(PAGE, viewport=viewport) as page:
        ck = page.locator("#mp-ck-ch7-plan")
        ck.scroll_into_view_if_needed()
        assert [chosen(ck, n) for n in ("tp", "ep_size", "expert_tp")] == ["1", "8", "same as TP"]
        lines = _lines(ck)
        assert ck.locator(".mp-summary").inner_text() == "3 of 4 checks pass; failing: fits in memory."
        r = evaluate(run.replace(ep=8))
        assert not r.fits and f"{r.memory_bytes['total'] / 1e9:,.1f} GB" in lines["fits in memory"]
        assert (
            lines["EP divides the experts"] == "✓ EP divides the experts: 256 experts ÷ EP 8 = 32 per GPU per MoE layer"
        )

        ck.locator('input.mp-slider[data-name="ep_size"]').focus()
        for _ in range(3):  # EP 8 -> 16 -> 32 -> 48: 256 experts do not divide
            page.keyboard.press("ArrowRight")
        lines = _lines(ck)
        assert lines["EP divides the experts"] == "✗ EP divides the experts: 256 experts ÷ EP 48 leaves 16 over"
        ck.locator('input.mp-slider[data-name="ep_size"]').focus()  # the button took the focus
        page.keyboard.press("ArrowRight")  # EP 64: DeepSeek-V3's own plan passes every line
        assert chosen(ck, "ep_size") == "64"
        lines = _lines(ck)
        assert ck.locator(".mp-summary").inner_text() == "4 of 4 checks pass.", lines
        b = breakdowns.all_to_all_balance(
            evaluate(run), dispatch_bytes=ep.FP8_DISPATCH_BYTES, max_nodes=4, gemm_speedup=2.0
        )
        assert f"(ratio {b.ratio:.2f})" in lines["all-to-all within the compute"]
