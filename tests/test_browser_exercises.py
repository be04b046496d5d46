"""Chapter 1 in the built site (headless Chromium, file://, network blocked): the model-states exercise.

The answers the page shows were computed by the library when the book was built; these tests compute the same
answers with the library now and compare them with what the page shows after moving a control, skipping the
prediction ("Show me") or typing one. The parts every exercise shares (no answer before a prediction, Enter,
no sideways scroll) are checked on every page by ``test_browser_smoke.py``.
"""

from __future__ import annotations

import pytest
from browser import chosen, predict, site_page, skip_prediction
from meshplan import Plan, evaluate
from meshplan.widgets import Result, compare

CH1 = "notebooks/01_one_gpu.html"


def _states_gb(model: str, gpus: int) -> float:
    return evaluate(Plan.create(model, gpus=gpus, zero=3)).memory_bytes["model_states"] / 1e9


def test_chapter1_controls_show_the_library_answer():
    with site_page(CH1) as page:
        ex = page.locator("#mp-ex-ch1-floor")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "gpus") == "8"                         # the default: one node
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_states_gb('qwen3.8-27b', 8):.1f} GB."

        slider = ex.locator('input.mp-slider[data-name="gpus"]')
        slider.focus()
        page.keyboard.press("ArrowRight")                        # 8 -> 12: not a valid plan, flagged at once
        assert chosen(ex, "gpus") == "12"
        with pytest.raises(ValueError) as err:
            Plan.create("qwen3.8-27b", gpus=12, zero=3)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"
        assert ex.locator(".mp-check").is_disabled()

        slider.focus()
        page.keyboard.press("ArrowRight")                        # 12 -> 16
        assert ex.locator(".mp-answer").inner_text() == ""
        answer = predict(ex, "20")
        value = _states_gb("qwen3.8-27b", 16)
        assert answer[0] == compare("20", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert f"{value:.1f} GB" in answer[0] and "−" in answer[0]
        assert ex.locator(".mp-explanation").inner_text()        # the worked answer follows
