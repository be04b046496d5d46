"""Chapter 7 in the built site: the world-size exercise (headless Chromium, offline)."""

from __future__ import annotations

from browser import choose, chosen, predict, site_page, skip_prediction
from meshplan import ep
from meshplan.widgets import Result, compare

PAGE = "notebooks/07_expert_parallel.html"


def test_chapter7_world_size_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch7-world")
        ex.scroll_into_view_if_needed()
        assert chosen(ex, "expert_tp") == "1 (experts not split)"
        value = ep.moe_world_size(2, 16, 64, expert_tp=1)
        answer = predict(ex, "2,048")
        assert answer[0] == compare("2,048", Result(value, f"{value:,.0f} GPUs"), unit="GPUs", digits=0)
        assert value == 1024 and answer[0].startswith("Read as 2,048 GPUs (the comma read as a thousands separator).")

        choose(ex, "expert_tp", "same as TP")                    # experts split over TP like the dense layers
        assert ex.locator(".mp-answer").inner_text() == ""
        value = ep.moe_world_size(2, 16, 64)
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.0f} GPUs."
        assert value == 2048
