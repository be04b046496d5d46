"""The activation ledger against autograd: ``validate``'s ``activations`` rows (issue 11, deliverable 3).

For every family the library counts analytically, a tiny config (``TINY_CONFIGS``: a few layers, small widths,
the family's features kept: GQA, MoE with several experts and shared experts, sliding windows shorter than the
longer sequence, full and linear attention mixed for Qwen3.5, MLA with and without a q LoRA) is built with the
pinned ``transformers`` and runs one training forward, with the loss, under saved-tensor hooks
(``meshplan.realrun.measure.saved_activation_bytes``), at two sequence lengths and two micro-batch sizes (``SHAPES``).
The prediction is ``meshplan.parallel.engine_activations.spec_activations`` for the ``ModelSpec`` of the same config
(the ``fsdp2`` ledger's definition: bf16, SDPA attention, or eager for a family without SDPA, dropout off, the logits
and the loss included). Each row is exact: the formula must equal the measurement to the byte; the explanation
names every part (of a layer or of the model) whose bytes differ, with both figures.

Nothing is imported at import time: ``torch`` and ``transformers`` load when ``activation_rows`` runs.

    >>> sorted(TINY_CONFIGS)[:3], SHAPES[0]
    (['deepseek_v2', 'deepseek_v3', 'gemma2'], (24, 1))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from meshplan.parallel import engine_activations as ea
from meshplan.parallel.engine_activations import implementation
from meshplan.realrun import measure
from meshplan.realrun.rows import Row
from meshplan.spec.model import model_from_config

_BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 176,
    "vocab_size": 160,
    "max_position_embeddings": 256,
    "pad_token_id": 0,
}
_MOE = {"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
_GDN = {
    "layer_types": ["linear_attention", "linear_attention", "full_attention"],
    "num_hidden_layers": 3,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
}
_MLA = {
    "num_key_value_heads": 8,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "n_routed_experts": 6,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
}


def _frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


# One tiny ``config.json`` (a dict) per family, keyed by the family name the library uses.
TINY_CONFIGS: Mapping[str, Mapping[str, Any]] = _frozen(
    {
        "llama": _frozen(dict(_BASE, model_type="llama")),
        "mistral": _frozen(dict(_BASE, model_type="mistral", sliding_window=32)),
        "mixtral": _frozen(
            dict(_BASE, model_type="mixtral", intermediate_size=48, num_local_experts=6, num_experts_per_tok=2)
        ),
        "qwen2": _frozen(dict(_BASE, model_type="qwen2")),
        "qwen2_moe": _frozen(dict(_BASE, **_MOE, model_type="qwen2_moe", shared_expert_intermediate_size=96)),
        "qwen3": _frozen(dict(_BASE, model_type="qwen3", head_dim=16)),
        "qwen3_moe": _frozen(dict(_BASE, **_MOE, model_type="qwen3_moe", head_dim=16, norm_topk_prob=True)),
        "qwen3_5": _frozen(dict(_BASE, **_GDN, model_type="qwen3_5_text")),
        "qwen3_5_moe": _frozen(
            dict(_BASE, **_GDN, **_MOE, model_type="qwen3_5_moe_text", shared_expert_intermediate_size=48)
        ),
        "gemma2": _frozen(
            dict(
                _BASE,
                model_type="gemma2",
                head_dim=16,
                sliding_window=32,
                query_pre_attn_scalar=16,
                attn_logit_softcapping=50.0,
                final_logit_softcapping=30.0,
            )
        ),
        "gemma3": _frozen(
            dict(
                _BASE,
                model_type="gemma3_text",
                num_hidden_layers=3,
                head_dim=16,
                sliding_window=32,
                query_pre_attn_scalar=16,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            )
        ),
        "phi3": _frozen(dict(_BASE, model_type="phi3")),
        "olmo2": _frozen(dict(_BASE, model_type="olmo2")),
        "deepseek_v2": _frozen(
            dict(
                _BASE,
                **_MLA,
                model_type="deepseek_v2",
                q_lora_rank=None,
                topk_method="group_limited_greedy",
                n_group=2,
                topk_group=1,
            )
        ),
        "deepseek_v3": _frozen(dict(_BASE, **_MLA, model_type="deepseek_v3", q_lora_rank=48, n_group=2, topk_group=1)),
        "gpt2": _frozen(
            {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 8, "vocab_size": 160, "n_positions": 256}
        ),
    }
)
# (sequence length, micro-batch size): s = 24 < the sliding window 32 <= s = 80, which also exceeds Gated
# DeltaNet's 64-token chunk; b = 1 and b = 3 (a contiguous label slice at b = 1, a copy above)
SHAPES: tuple[tuple[int, int], ...] = ((24, 1), (24, 3), (80, 1), (80, 3))
QUICK_FAMILIES = ("llama", "qwen3_5_moe", "deepseek_v3")  # dense GQA; linear attention with MoE; MLA with MoE


def tiny_config(family: str) -> dict[str, Any]:
    """A fresh, mutable copy of the tiny ``config.json`` of ``family`` (ValueError for an unknown one)."""
    if family not in TINY_CONFIGS:
        raise ValueError(f"family={family!r} has no tiny config; known: {', '.join(TINY_CONFIGS)}")
    return {k: list(v) if isinstance(v, list) else v for k, v in TINY_CONFIGS[family].items()}


def ledger_attention(family: str) -> str:
    """The attention implementation the ``fsdp2`` ledger prices for ``family``: SDPA, or eager where the pinned
    ``transformers`` has no SDPA (Gemma 2)."""

    return "sdpa" if implementation(family, TINY_CONFIGS.get(family)).sdpa else "eager"


def part_differences(measured: Any, formula: Any) -> list[str]:
    """Every part whose bytes differ between a measurement (``measure.SavedActivations``) and the formula
    (``engine_activations.ModelActivations``), as ``"layer 0 mlp: measured 1,234 B, formula 1,200 B"``; empty
    when every part agrees."""
    out = []
    for i, parts in enumerate(measured.layers):
        want = formula.layer_parts(i)
        out += [
            f"layer {i} {part}: measured {got:,} B, formula {want[part]:,.0f} B"
            for part, got in parts.items()
            if got != want[part]
        ]
    want = formula.model_parts()
    for part in sorted(set(measured.model) | set(want)):
        got, expected = measured.model.get(part, 0), want.get(part, 0)
        if got != expected:
            out.append(f"{part}: measured {got:,} B, formula {expected:,.0f} B")
    return out


def _explain(formula: Any, diffs: Sequence[str], attention: str, layers: int) -> str:
    parts: dict[str, float] = {}
    for i in range(layers):
        for part, nbytes in formula.layer_parts(i).items():
            parts[part] = parts.get(part, 0.0) + nbytes
    inside = ", ".join(f"{p} {b:,.0f}" for p, b in parts.items() if b)
    outside = ", ".join(f"{p} {b:,.0f}" for p, b in formula.model_parts().items() if b)
    head = (
        f"meshplan.parallel.engine_activations.spec_activations ({attention}): {layers} layers ({inside} B) + outside "
        f"the layers ({outside} B). Measured by meshplan.realrun.measure.saved_activation_bytes: one training forward "
        "of the "
        "transformers model in bf16 on the CPU under saved-tensor hooks, each saved storage once, parameters excluded."
    )
    return head + (" Parts that differ: " + "; ".join(diffs) + "." if diffs else " Every part agrees to the byte.")


def activation_rows(families: Iterable[str] | None = None, shapes: Sequence[tuple[int, int]] = SHAPES) -> list[Row]:
    """One exact row per family and shape: the bytes the ``fsdp2`` activation ledger predicts for one training
    micro-batch against the bytes autograd saves (see the module docstring). Each model is built once;
    ``transformers``' warnings about the tiny configs are silenced while it runs (its verbosity is restored)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return [row for family in (TINY_CONFIGS if families is None else families) for row in _rows(family, shapes)]
    finally:
        hf_logging.set_verbosity(verbosity)


def _rows(family: str, shapes: Sequence[tuple[int, int]]) -> list[Row]:

    cfg = tiny_config(family)
    attention = ledger_attention(family)
    model = measure.build_model(cfg, attention=attention)
    spec = model_from_config(cfg, name=f"tiny-{family}")
    rows = []
    for seq, batch in shapes:
        got = measure.saved_activation_bytes(None, seq, batch, attention=attention, model=model)
        want = ea.spec_activations(spec, seq, batch, config=cfg, attention=attention)
        rows.append(
            Row(
                "activations",
                f"{family} s={seq} b={batch}: bytes autograd saves for backward",
                want.total,
                got.total,
                "bytes",
                True,
                _explain(want, part_differences(got, want), attention, spec.num_layers),
            )
        )
    return rows
