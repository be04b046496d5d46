"""Chapter 3 in the built site: the ZeRO-ladder exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import chosen, predict, site_page, skip_prediction
from meshplan import load_model, zero
from meshplan.widgets import Result, compare

PAGE = "notebooks/03_zero_fsdp.html"


def _states_gb(gpus: int, stage: int) -> float:
    return zero.model_states_bytes(load_model("qwen3.8-27b").params.total, stage, gpus) / 1e9


def test_chapter3_ladder_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch3-ladder")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "stage") == "2"
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_states_gb(8, 2):,.1f} GB."

        ex.locator('input.mp-slider[data-name="stage"]').focus()
        page.keyboard.press("ArrowRight")                        # ZeRO-2 -> ZeRO-3
        assert chosen(ex, "stage") == "3" and ex.locator(".mp-answer").inner_text() == ""
        value = _states_gb(8, 3)
        answer = predict(ex, "55,6")                             # a decimal comma reads as 55.6
        assert answer[0] == compare("55.6", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert answer[0].startswith("Read as 55.6 GB.") and "✓" in answer[0]
        assert ex.locator(".mp-explanation").inner_text()
