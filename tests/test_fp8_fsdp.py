"""Transformer Engine's FP8 weight copies under Megatron-FSDP: with its parameters sharded (ZeRO-3) a GPU holds the
copies of the units it has gathered, not of the whole model (megatron_fsdp.py L497-L498 and L625-L626 at
core_v0.19.0)."""

from __future__ import annotations

from typing import Any

import pytest

from meshplan import Plan, evaluate
from meshplan.plan.evaluation import FP8_WEIGHT_COPY_BYTES

KW: dict[str, Any] = {
    "gpus": 8,
    "seq": 8192,
    "global_batch": 128,
    "hardware": "h100-sxm-80gb",
    "accounting": "megatron",
}


def _report(zero: int, precision: str = "fp8"):
    return evaluate(Plan.create("llama-3.1-8b", zero=zero, recompute="full", precision=precision, **KW))


def test_zero3_keeps_the_fp8_copies_of_the_gathered_units_only():
    z1, z3, z3_bf16 = _report(1), _report(3), _report(3, "bf16")
    layer_params = z1.model_states_terms["fp8 weight copies"] / FP8_WEIGHT_COPY_BYTES["fp8"]  # every layer's
    assert "fp8 weight copies" not in z3.model_states_terms  # nothing of the whole model kept
    moment = {m.name: m for m in z3.by_stage[0].moments}["backward of the last layer"]
    bf16 = {m.name: m for m in z3_bf16.by_stage[0].moments}["backward of the last layer"]
    # the two gathered layers (this one and the prefetched) carry their copies: 2 bytes a parameter beside bf16's 2
    two_layers = 2 * layer_params / 32
    assert bf16.terms["unsharded parameters"] == pytest.approx(2 * two_layers)
    assert moment.terms["unsharded parameters"] == pytest.approx((2 + FP8_WEIGHT_COPY_BYTES["fp8"]) * two_layers)
    # Bridge's FP8 Llama 3 8B on 8 H100s (Megatron-FSDP): 14 GB of copies no longer counted on every GPU
    assert z1.model_states_terms["fp8 weight copies"] / 1e9 > 13
