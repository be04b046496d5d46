"""The pruned search returns exactly what pricing every candidate on its own returns (``search(..., _prune=False)``:
a ``Plan``, then ``evaluate``, then the step time of those that fit): the same kept plans in the same order with the
same reports and step times, the same rejections with the same constraints and messages, the same counts. The cases
cover what the pruning shares (``search._Pricer``): the recompute modes of one plan, the model states of a shape and
ZeRO stage, the activations of a shape, micro-batch size and virtual stages across EP and ZeRO stages; dense and MoE
models (DeepSeek-V3's MTP module on the last stage), equal and uneven stages, both stage layouts, every ledger, the
engine's refusals, and sizes where memory rejects most plans."""

from __future__ import annotations

from typing import Any

import pytest

from meshplan import search as search_module
from meshplan.core.validation import MeshplanError
from meshplan.search import search

H100 = "h100-sxm-80gb"

CASES: dict[str, dict[str, Any]] = {
    "lab, dense, equal stages": {"model": "qwen3.8-27b", "gpus": 8, "seq": 4096, "global_batch": 8},
    "lab, stage_balance max, uneven stages": {
        "model": "llama-3.1-70b",
        "gpus": 64,
        "seq": 8192,
        "global_batch": 64,
        "hardware": H100,
        "stage_balance": "max",
        "micro_batch_sizes": (1, 2),
    },
    "megatron, dense, long sequences (memory rejects most)": {
        "model": "qwen3.8-27b",
        "gpus": 64,
        "seq": 65536,
        "global_batch": 64,
        "hardware": H100,
        "accounting": "megatron",
    },
    "megatron, bf16 gradients (ZeRO-2/3 refused)": {
        "model": "llama-3.1-8b",
        "gpus": 16,
        "seq": 8192,
        "global_batch": 32,
        "hardware": H100,
        "accounting": "megatron",
        "grad_dtype": "bf16",
        "micro_batch_sizes": (1, 2),
    },
    "fsdp2, dense, stage_balance even": {
        "model": "llama-3.1-70b",
        "gpus": 64,
        "seq": 8192,
        "global_batch": 128,
        "hardware": H100,
        "accounting": "fsdp2",
        "stage_balance": "even",
    },
    "deepspeed, MoE, EP sizes and refusals": {
        "model": "qwen3-30b-a3b",
        "gpus": 32,
        "seq": 16384,
        "global_batch": 64,
        "hardware": H100,
        "accounting": "deepspeed",
        "micro_batch_sizes": (1, 2),
    },
    "megatron, DeepSeek-V3 (MTP module, 61 layers uneven)": {
        "model": "deepseek-v3",
        "gpus": 256,
        "seq": 32768,
        "global_batch": 256,
        "hardware": H100,
        "accounting": "megatron",
        "zero_stages": (1, 3),
        "micro_batch_sizes": (1,),
        "virtual_stages": (1, 2),
    },
}


# the three largest cases (1.2-1.5 s each) run in make test only: make check keeps the inner loop under 20 s
HEAVY = {
    "megatron, dense, long sequences (memory rejects most)",
    "deepspeed, MoE, EP sizes and refusals",
    "megatron, DeepSeek-V3 (MTP module, 61 layers uneven)",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in CASES])
def test_pruned_search_equals_pricing_every_plan(name):
    kw = CASES[name]
    pruned, reference = search(**kw), search(**kw, _prune=False)
    assert pruned.ranked == reference.ranked  # the plans, their reports and step times, in rank order
    assert pruned.rejected == reference.rejected  # the settings, constraints and messages, in enumeration order
    assert pruned == reference
    assert pruned.ranked and pruned.rejections_by_constraint().get("memory")


def test_a_search_beyond_what_it_can_price_is_refused_up_front(monkeypatch):
    monkeypatch.setattr(search_module, "MAX_PLANS", 1000)
    with pytest.raises(MeshplanError) as err:
        search("qwen3.8-27b", gpus=64, seq=4096, global_batch=64)
    assert str(err.value) == (
        "gpus=64: the search of qwen3.8-27b would enumerate 9,819 plans (79 mesh shapes of 5 TP, 6 CP, 7 PP sizes, "
        "each with every ZeRO stage, micro-batch size, virtual stage count and recompute mode), more than the 1,000 it "
        "can price in seconds; narrow it (zero_stages, recompute, micro_batch_sizes, virtual_stages, max_cp)"
    )
    assert err.value.factor == "gpus"
    assert search("qwen3.8-27b", gpus=8, seq=4096, global_batch=8, zero_stages=(1,)).enumerated <= 1000
