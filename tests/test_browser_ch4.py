"""Chapter 4 in the built site (headless Chromium, offline, desktop and phone): the check-bench exercise (a word
answer, chosen from radio buttons; its slider announces the value), the KV-head exercise flagging Megatron-LM's
refusal, and the plan checklist."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page

from meshplan import Plan, evaluate
from meshplan.core.units import fmt_gb, fmt_pct
from meshplan.course import tpbench
from meshplan.parallel import tp
from meshplan.steptime import breakdowns
from meshplan.widgets import Result, compare

PAGE = "notebooks/04_tensor_parallel.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


def _word(t: int, dtype: str) -> str:
    return "exactly zero" if tpbench.bench(t, dtype).reorder_max_abs_diff == 0 else "nonzero"


@VIEWPORTS
def test_chapter4_check_bench_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        ex = page.locator("#mp-ex-ch4-bench")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "t") == "2"
        assert _word(2, "float32") == "exactly zero"
        assert predict(ex, "exactly zero")[0] == compare("exactly zero", Result("exactly zero", "exactly zero"))

        slider = ex.locator('input.mp-slider[data-name="t"]')
        assert slider.get_attribute("aria-valuetext") == "2"  # announced as the value, not the position (1)
        slider.focus()
        page.keyboard.press("ArrowRight")  # t = 2 -> 3
        assert chosen(ex, "t") == "3" and slider.get_attribute("aria-valuetext") == "3"
        word = _word(3, "float32")
        assert word == "nonzero"
        answer = predict(ex, "exactly zero", enter=True)
        assert answer[0] == compare("exactly zero", Result(word, word)) and "✗ No match." in answer[0]
        assert (
            ex.locator(".mp-explanation")
            .inner_text()
            .startswith(f"max |difference| = {tpbench.bench(3).reorder_max_abs_diff:.1e}")
        )
        # the word is chosen, never typed: the keyboard moves through the choices and Enter checks
        ex.locator('.mp-prediction input[value="exactly zero"]').focus()
        page.keyboard.press("ArrowRight")  # -> nonzero
        page.keyboard.press("Enter")
        assert ex.locator(".mp-answer").inner_text().splitlines()[0] == compare("nonzero", Result(word, word))
        assert "✓ Your prediction matches." in ex.locator(".mp-answer").inner_text()


@VIEWPORTS
def test_chapter4_kv_exercise_flags_megatrons_refusal(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch4-kv")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "t"), chosen(ex, "ledger")) == ("2", "lab page")
        slider = ex.locator('input.mp-slider[data-name="t"]')
        slider.focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")  # t = 2 -> 4 -> 8
        assert chosen(ex, "t") == "8"
        answer = predict(ex, "2")
        assert answer[0] == compare("2", Result(float(tp.kv_replicas(4, 8)), "2 GPUs"), unit="GPUs", digits=0)
        # Megatron-Core 0.19 runs TP beyond the KV heads too (one whole KV head per GPU, the qkv output gathered):
        # the same count, priced, with the engine's rule in the explanation
        choose(ex, "ledger", "Megatron-LM")
        assert "Not a valid" not in ex.locator(".mp-answer").inner_text()
        answer = predict(ex, "2")
        assert answer[0] == compare("2", Result(float(tp.kv_replicas(4, 8)), "2 GPUs"), unit="GPUs", digits=0)
        assert "all-gathered over TP" in ex.locator(".mp-answer").inner_text()


@VIEWPORTS
def test_chapter4_plan_checklist(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        ck = page.locator("#mp-ck-ch4-plan")
        ck.scroll_into_view_if_needed()
        ck.locator(".mp-check").click()
        default = evaluate(
            Plan.create("qwen3.8-27b", gpus=8, tp=2, zero=1, recompute="selective", accounting="megatron")
        )
        assert ck.locator(".mp-summary").inner_text() == "4 of 5 checks pass; failing: the memory fits."
        memory = ck.locator('li[data-check="the memory fits"]').inner_text()
        # Megatron-LM's ledger judges the step's allocated peak, with its verdict on the lab machine
        assert memory.startswith("✗") and f"peak {fmt_gb(default.memory_bytes['peak_allocated'])}" in memory
        assert memory.endswith(default.headroom.verdict)

        # TP 8 in the lab page's ledger on the lab page's machine: everything but the time line passes
        choose(ck, "ledger", "lab page")
        ck.locator('input.mp-slider[data-name="tp_size"]').focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")  # 2 -> 4 -> 8
        assert chosen(ck, "tp_size") == "8" and ck.locator(".mp-answer").inner_text() == ""
        ck.locator(".mp-check").click()
        assert (
            ck.locator(".mp-summary").inner_text() == "4 of 5 checks pass; failing: TP time below the layer's compute."
        )
        lt = breakdowns.layer_time(evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, recompute="selective")))
        line = ck.locator('li[data-check="TP time below the layer\'s compute"]').inner_text()
        assert line.startswith("✗") and f"({fmt_pct(lt.tp_over_compute, 0)})" in line

        choose(ck, "machine", "H100 SXM")  # the same plan on a faster NVLink passes every line
        ck.locator(".mp-check").click()
        assert ck.locator(".mp-summary").inner_text() == "5 of 5 checks pass."
