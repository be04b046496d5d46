"""The plans whose Megatron-LM exports are checked against Megatron-LM's start-up rules
(tests/test_export_megatron_rules.py, from ``data/engines/megatron-lm.json``) and, with a checkout of the pinned
release, by Megatron-LM's own parser, ``validate_args`` and ``TransformerConfig`` (scripts/check_megatron_export.py):
every family the shipped models cover (dense GQA, MoE with and without EP and expert TP, MLA with an MTP module,
Gated DeltaNet with a gated attention output, sliding windows), every ZeRO stage, every recompute mode, PP with
uneven and interleaved stages, CP, both rank orders."""

from __future__ import annotations

from pathlib import Path

from meshplan import Plan

H100 = "h100-sxm-80gb"
PUBLIC = Path(__file__).resolve().parents[1] / "lib" / "meshplan" / "data" / "models" / "public"
MEGATRON_ORDER = "tp-cp-ep-dp-pp"

CASES: dict[str, dict] = {
    "dense, TP 8 x PP 4, interleaved, ZeRO-1, selective": {
        "model": "llama-3.1-70b",
        "gpus": 64,
        "tp": 8,
        "pp": 4,
        "virtual_stages": 2,
        "zero": 1,
        "recompute": "selective",
        "seq": 8192,
        "micro_batches": 16,
        "order": MEGATRON_ORDER,
    },
    "dense, TP 4 x CP 2 x PP 4 (seed 004), full recompute": {
        "model": "llama-3.1-70b",
        "gpus": 64,
        "tp": 4,
        "pp": 4,
        "cp": 2,
        "seq": 8192,
        "micro_batches": 256,
        "recompute": "full",
        "order": MEGATRON_ORDER,
    },
    "dense, DP only, ZeRO-0": {"model": "llama-3.1-8b", "gpus": 8, "zero": 0, "seq": 4096},
    "dense, one GPU, learned positions": {"model": "small-3.7m", "gpus": 1, "seq": 64},
    "dense, sequence beyond the config's positions (rotary)": {"model": "qwen3-8b", "gpus": 8, "zero": 1, "seq": 65536},
    "dense, Megatron-FSDP ZeRO-3 with TP 2": {"model": "qwen3-8b", "gpus": 16, "tp": 2, "zero": 3, "seq": 4096},
    "dense, Megatron-FSDP ZeRO-2": {"model": "qwen3-8b", "gpus": 8, "zero": 2, "seq": 4096},
    "dense, uneven stages (7, 8, ..., 8, 7), tp-cp-pp-dp": {
        "model": "llama-3.1-405b",
        "gpus": 2048,
        "tp": 8,
        "pp": 16,
        "zero": 1,
        "seq": 8192,
        "micro_batches": 16,
        "uneven_stages": True,
    },
    "MoE, EP 8 x TP 2, ZeRO-1": {
        "model": "qwen3-30b-a3b",
        "gpus": 32,
        "tp": 2,
        "ep": 8,
        "zero": 1,
        "seq": 8192,
        "micro_batches": 8,
    },
    "MoE, TP 4 with expert TP 1, no EP": {
        "model": "qwen3-30b-a3b",
        "gpus": 32,
        "tp": 4,
        "expert_tp": 1,
        "zero": 1,
        "seq": 4096,
    },
    "MoE + MLA + MTP, PP 8 x EP 32": {
        "model": "deepseek-v3",
        "gpus": 256,
        "pp": 8,
        "ep": 32,
        "zero": 1,
        "seq": 4096,
        "micro_batches": 8,
        "layers_per_stage": (7, 8, 8, 8, 8, 8, 8, 6),
        "order": MEGATRON_ORDER,
    },
    "Gated DeltaNet + gated attention + MTP, TP 2, ZeRO-3, selective": {
        "model": "qwen3.8-27b",
        "gpus": 16,
        "tp": 2,
        "zero": 3,
        "recompute": "selective",
        "seq": 4096,
    },
    "Gated DeltaNet, TP 4 x CP 2": {"model": "qwen3.8-27b", "gpus": 16, "tp": 4, "cp": 2, "zero": 1, "seq": 16384},
    "sliding window on every layer (Mistral 7B)": {
        "model": str(PUBLIC / "mistral-7b-v0.1.json"),
        "gpus": 8,
        "tp": 2,
        "zero": 1,
        "seq": 4096,
    },
}


def megatron_plans() -> list[tuple[str, Plan]]:
    """(name, plan) of every case, priced in the megatron ledger on H100s."""
    return [(name, Plan.create(**kw, hardware=H100, accounting="megatron")) for name, kw in CASES.items()]
