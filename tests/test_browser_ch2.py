"""Chapter 2 in the built site: drive the exposed-communication exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import offline_browser, require_site
from meshplan import buckets, load_hardware, load_model
from meshplan.widgets import Result, compare

PAGE = "notebooks/02_data_parallel.html"



def _exposed(tokens: int, gb_s: int) -> float:
    return buckets.exposed_comm_s(load_model("qwen3.8-27b"), tokens, 8, gb_s * 1e9, load_hardware().effective_flop_per_s)


def test_chapter2_exposed_communication_exercise():
    require_site(PAGE)
    with offline_browser() as browser:
        page = browser.open(PAGE)
        ex = page.locator("#mp-ex-ch2-exposed")
        ex.scroll_into_view_if_needed()
        tokens = ex.locator('input.mp-slider[data-name="tokens"]')
        bandwidth = ex.locator('input.mp-slider[data-name="bandwidth_gb_s"]')
        t_label = tokens.locator("xpath=following-sibling::output[1]")
        b_label = bandwidth.locator("xpath=following-sibling::output[1]")
        assert (t_label.inner_text(), b_label.inner_text()) == ("4096", "50")

        ex.locator(".mp-check").click()
        value = _exposed(4096, 50)
        assert ex.locator(".mp-answer").inner_text().startswith(f"The library says {value:,.2f} s.")

        tokens.focus()
        page.keyboard.press("ArrowRight")                     # 4,096 -> 8,192 tokens per GPU
        bandwidth.focus()
        page.keyboard.press("ArrowRight")                     # 50 -> 100 GB/s
        assert (t_label.inner_text(), b_label.inner_text()) == ("8192", "100")
        ex.locator(".mp-prediction").fill("0.5")
        ex.locator(".mp-check").click()
        answer = ex.locator(".mp-answer").inner_text()
        value = _exposed(8192, 100)
        expected = compare("0.5", Result(value, f"{value:,.2f} s"), unit="s", digits=2)
        assert answer.splitlines()[0] == expected
        assert value < _exposed(4096, 50)
        assert ex.locator(".mp-explanation").inner_text()

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
