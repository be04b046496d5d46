"""Chapter 2 in the built site: the exposed-communication exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import chosen, predict, site_page, skip_prediction
from meshplan import buckets, load_hardware, load_model
from meshplan.widgets import Result, compare

PAGE = "notebooks/02_data_parallel.html"


def _exposed(tokens: int, gb_s: int) -> float:
    return buckets.exposed_comm_s(load_model("qwen3.8-27b"), tokens, 8, gb_s * 1e9, load_hardware().effective_flop_per_s)


def test_chapter2_exposed_communication_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch2-exposed")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "tokens"), chosen(ex, "bandwidth_gb_s")) == ("4096", "50")
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_exposed(4096, 50):,.2f} s."

        for name in ("tokens", "bandwidth_gb_s"):                # 4,096 -> 8,192 tokens; 50 -> 100 GB/s
            ex.locator(f'input.mp-slider[data-name="{name}"]').focus()
            page.keyboard.press("ArrowRight")
        assert (chosen(ex, "tokens"), chosen(ex, "bandwidth_gb_s")) == ("8192", "100")
        value = _exposed(8192, 100)
        assert predict(ex, "0.5", enter=True)[0] == compare("0.5", Result(value, f"{value:,.2f} s"), unit="s", digits=2)
        assert value < _exposed(4096, 50)
        assert ex.locator(".mp-explanation").inner_text()
