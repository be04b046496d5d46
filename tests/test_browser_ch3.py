"""Chapter 3 in the built site (headless Chromium, offline, desktop and phone): the ZeRO-ladder exercise, and the
ledger exercise flagging what an engine refuses as the control moves."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page, skip_prediction

from meshplan import Plan, evaluate, load_model
from meshplan.parallel import zero
from meshplan.widgets import Result, compare

PAGE = "notebooks/03_zero_fsdp.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


def _states_gb(gpus: int, stage: int) -> float:
    return zero.model_states_bytes(load_model("qwen3.8-27b").params.total, stage, gpus) / 1e9


@VIEWPORTS
def test_chapter3_ladder_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        ex = page.locator("#mp-ex-ch3-ladder")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "gpus"), chosen(ex, "stage")) == ("16", "2")
        assert ex.locator(".mp-check").is_disabled()  # nothing typed, nothing to check
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_states_gb(16, 2):,.1f} GB."

        ex.locator('input.mp-slider[data-name="stage"]').focus()
        page.keyboard.press("ArrowRight")  # ZeRO-2 -> ZeRO-3
        assert chosen(ex, "stage") == "3" and ex.locator(".mp-answer").inner_text() == ""
        value = _states_gb(16, 3)
        answer = predict(ex, "27,8")  # a decimal comma reads as 27.8
        assert answer[0] == compare("27.8", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert answer[0].startswith("Read as 27.8 GB.") and "✓" in answer[0]
        assert ex.locator(".mp-explanation").inner_text().endswith(f"= {value:,.1f} GB.")


@VIEWPORTS
def test_chapter3_ledger_exercise_flags_what_fsdp2_refuses(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch3-ledger")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "ledger"), chosen(ex, "stage"), chosen(ex, "micro_batches")) == ("DeepSpeed", "2", "4")
        choose(ex, "ledger", "FSDP2 (torchtitan)")
        ex.locator('input.mp-slider[data-name="stage"]').focus()
        page.keyboard.press("ArrowLeft")  # ZeRO-2 -> ZeRO-1, which FSDP2 does not have
        assert chosen(ex, "stage") == "1"
        with pytest.raises(ValueError) as refused:
            Plan.create("qwen3.8-27b", gpus=8, zero=1, accounting="fsdp2")
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {refused.value}"
        assert ex.locator(".mp-check").is_disabled() and ex.locator(".mp-show").is_disabled()

        page.keyboard.press("End")  # ZeRO-3: FSDP2's per-micro-batch bytes at m = 4
        assert chosen(ex, "stage") == "3"
        report = evaluate(Plan.create("qwen3.8-27b", gpus=8, zero=3, micro_batches=4, accounting="fsdp2"))
        value = report.comm_bytes_per_step["dp"] / 1e9
        answer = predict(ex, f"{value:.0f}", enter=True)
        assert answer[0] == compare(f"{value:.0f}", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert ex.locator(".mp-explanation").inner_text().endswith(f"→ {value:,.1f} GB per step.")
