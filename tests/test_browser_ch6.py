"""Chapter 6 in the built site: the causal-load exercise, with a named choice (headless Chromium, offline)."""

from __future__ import annotations

import pytest
from browser import choose, chosen, predict, site_page, skip_prediction
from meshplan import cp
from meshplan.widgets import Result, compare

PAGE = "notebooks/06_context_parallel.html"


def test_chapter6_causal_load_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch6-causal")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "split") == "contiguous"
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {max(cp.causal_load(16, 4))} pairs."

        choose(ex, "split", "zig-zag")                           # a visible option, not a slider position
        assert chosen(ex, "split") == "zig-zag"
        value = max(cp.causal_load(16, 4, zigzag=True))
        answer = predict(ex, "40 pairs")
        assert answer[0] == compare("40", Result(value, f"{value:,.0f} pairs"), unit="pairs", digits=0)
        assert value == 34
        assert ex.locator(".mp-explanation").inner_text().count("34") >= 4

        for name in ("tokens", "gpus"):                          # 16 -> 24 tokens; 4 -> 8 GPUs
            ex.locator(f'input.mp-slider[data-name="{name}"]').focus()
            page.keyboard.press("ArrowRight")
        with pytest.raises(ValueError) as err:                   # 16 chunks do not divide 24 tokens
            cp.causal_load(24, 8, zigzag=True)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"
