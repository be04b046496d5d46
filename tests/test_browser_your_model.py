"""The "Plan your own model" page in the built site (headless Chromium, offline, desktop and phone): no sideways
scrolling, the memory exercise used as a learner would (nothing to check before a prediction, a slider, the
ledger's radio buttons, Enter), and the command-line outputs shown as the library prints them."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, choose, chosen, horizontal_overflow, predict, site_page, skip_prediction

from meshplan import Plan, evaluate
from meshplan.widgets import Result, compare

PAGE = "notebooks/10_your_model.html"
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


def _memory_gb(ep: int, zero: int, ledger: str) -> float:
    plan = Plan.create(
        "qwen3-30b-a3b",
        gpus=8,
        ep=ep,
        zero=zero,
        recompute="selective",
        seq=4096,
        global_batch=256,
        hardware="h100-sxm-80gb",
        accounting=ledger,
    )
    return evaluate(plan).memory_bytes["total"] / 1e9


@VIEWPORTS
def test_memory_exercise(viewport):
    with site_page(PAGE, viewport=viewport) as page:
        assert horizontal_overflow(page) == 0
        ex = page.locator("#mp-ex-own-moe-one-node")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "ep"), chosen(ex, "zero"), chosen(ex, "ledger")) == ("4", "1", "lab page")
        assert ex.locator(".mp-check").is_disabled()  # nothing typed, nothing to check
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_memory_gb(4, 1, 'lab'):,.1f} GB."

        ex.locator('input.mp-slider[data-name="ep"]').focus()
        page.keyboard.press("End")  # EP 4 -> EP 8
        assert chosen(ex, "ep") == "8" and ex.locator(".mp-answer").inner_text() == ""
        value = _memory_gb(8, 1, "lab")
        answer = predict(ex, "80", enter=True)
        assert answer[0] == compare("80", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert ex.locator(".mp-explanation").inner_text().endswith("Total 80.1 GB: does not fit in 80 GB.")

        choose(ex, "ledger", "Megatron-LM")  # the engine's ledger: fp32 gradients, autograd's activations
        value = _memory_gb(8, 1, "megatron")
        answer = predict(ex, "100")
        assert answer[0] == compare("100", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert "in the Megatron-LM ledger" in ex.locator(".mp-explanation").inner_text()


def test_command_line_outputs_and_tables():
    with site_page(PAGE) as page:
        blocks = page.locator("div.cell_output pre").all_inner_texts()
        commands = [b.splitlines()[0] for b in blocks if b.startswith("$ python -m meshplan")]
        assert [c.split()[4] for c in commands] == ["plan", "search", "export", "plan", "plan"]
        relabelled = next(b for b in blocks if "qwen3-30b-a3b-as-llama" in b.splitlines()[0])
        assert "'num_experts' = 128" in relabelled and relabelled.rstrip().endswith("(exit status 2)")
        gemma = next(b for b in blocks if "--model gemma-2b" in b.splitlines()[0])
        assert "gemma-2b: 2,506,172,416 parameters" in gemma and "is counted exactly by transformers" in gemma
        # no Python booleans and no index-name header rows in the page's tables
        cells = page.locator("table td, table th").all_inner_texts()
        assert not {"True", "False"} & {c.strip() for c in cells}
