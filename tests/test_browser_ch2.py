"""Chapter 2 in the built site (headless Chromium, file://, network blocked): the exercises a learner uses, each
answer checked against the library now."""

from __future__ import annotations

import pytest
from browser import choose, chosen, predict, site_page, skip_prediction, slide

from meshplan import load_hardware, load_model
from meshplan.core import collectives
from meshplan.parallel import buckets, dp
from meshplan.widgets import Result, compare

PAGE = "notebooks/02_data_parallel.html"
P = 27_781_427_952


def _exposed(tokens: int, gb_s: int, grad_bytes: int = 2) -> float:
    flop_per_s = load_hardware().effective_flop_per_s
    assert flop_per_s is not None  # the lab page's machine has an effective rate
    return buckets.exposed_comm_s(
        load_model("qwen3.8-27b"), tokens, 8, gb_s * 1e9, flop_per_s, grad_bytes_per_param=grad_bytes
    )


def test_chapter2_exposed_communication_exercise():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch2-exposed")
        ex.scroll_into_view_if_needed()
        # the default is not the 4,096-token, 50 GB/s case the timeline above it prints
        assert (chosen(ex, "tokens"), chosen(ex, "bandwidth_gb_s"), chosen(ex, "grad_bytes")) == (
            "2048",
            "100",
            "bf16 (lab page, DeepSpeed)",
        )
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {_exposed(2048, 100):,.2f} s."

        for name in ("tokens", "bandwidth_gb_s"):  # 2,048 -> 4,096 tokens; 100 -> 160 GB/s
            slide(ex, name)
        choose(ex, "grad_bytes", "fp32 (Megatron-LM, FSDP2)")
        assert (chosen(ex, "tokens"), chosen(ex, "bandwidth_gb_s")) == ("4096", "160")
        value = _exposed(4096, 160, 4)
        assert predict(ex, "0.5", enter=True)[0] == compare("0.5", Result(value, f"{value:,.2f} s"), unit="s", digits=2)
        assert value > _exposed(4096, 160, 2)  # fp32 gradients: twice the bytes, more exposed
        assert ex.locator(".mp-explanation").inner_text()


def test_chapter2_accumulation_exercise_flags_what_an_engine_refuses():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch2-accumulation")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "ledger"), chosen(ex, "zero_stage"), chosen(ex, "m")) == ("DeepSpeed", "2", "4")
        expected = sum(dp.ledger_sync_bytes(P, 8, "deepspeed", 2, 4).values()) / 1e9
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {expected:,.1f} GB."

        choose(ex, "ledger", "FSDP2 (torchtitan)")
        slide(ex, "zero_stage", "ArrowLeft")  # ZeRO-1: FSDP2 has none, flagged at once
        assert chosen(ex, "zero_stage") == "1"
        with pytest.raises(ValueError) as err:
            dp.ledger_sync_bytes(P, 8, "fsdp2", 1, 4)
        assert ex.locator(".mp-answer").inner_text() == f"Not a valid combination: {err.value}"
        assert ex.locator(".mp-check").is_disabled()

        choose(ex, "ledger", "lab page")  # the lab page's once-per-step ledger: m does not matter
        lab = sum(dp.ledger_sync_bytes(P, 8, "lab", 1, 4).values()) / 1e9
        assert predict(ex, "100")[0] == compare("100", Result(lab, f"{lab:,.1f} GB"), unit="GB", digits=1)


def test_chapter2_allreduce_exercise_offers_nvlink_only_inside_a_node():
    with site_page(PAGE) as page:
        ex = page.locator("#mp-ex-ch2-allreduce-time")
        ex.scroll_into_view_if_needed()
        gpus = ex.locator('input.mp-slider[data-name="gpus"]')
        assert chosen(ex, "link") == "NVLink" and chosen(ex, "gpus") == "4"
        assert gpus.get_attribute("max") == "2"  # 2, 4, 8: one node of the lab page's machine
        slide(ex, "gpus", "End")
        assert chosen(ex, "gpus") == "8"
        choose(ex, "link", "InfiniBand")
        assert gpus.get_attribute("max") == "4"  # 2, 4, 8, 64, 512 between nodes
        slide(ex, "gpus", "End")
        assert chosen(ex, "gpus") == "512"
        hw = load_hardware()
        value = collectives.transfer_time_s(
            dp.dp_bytes_per_step(P, 512, grad_bytes_per_param=4), hw.infiniband_bytes_per_s
        )
        assert skip_prediction(ex) == f"You skipped the prediction. The library says {value:,.2f} s."
