"""Qwen decoders: qwen2 (Qwen2, Qwen2.5), qwen2_moe (Qwen1.5-MoE, Qwen2-57B-A14B), qwen3, qwen3_moe.

Each reader follows its ``transformers`` 5.23.0 module tree and config defaults; keys whose class default is a
particular checkpoint's size (heads, head_dim, expert counts) are required instead of defaulted.
"""

from __future__ import annotations

from typing import Any

from meshplan.spec.models.common import (
    REQUIRED,
    attention_types,
    gqa_attention,
    qwen_moe_layers,
    read_shape,
    routed_experts,
    unused,
    windows,
)
from meshplan.spec.models.count import build_spec
from meshplan.spec.models.fields import Fields
from meshplan.spec.models.spec import LayerSpec, ModelSpec


def _window(f: Fields, n_layers: int, alternate: bool = False) -> tuple[int | None, ...]:
    """Qwen's sliding windows: off unless ``use_sliding_window``; then ``sliding_window`` (default 4096) applies to
    the layers from ``max_window_layers`` on (Qwen2-MoE: the odd-numbered layers below it), or as
    ``layer_types`` says."""
    use = f.boolean("use_sliding_window", False)
    window = f.opt_integer("sliding_window", 4096) if use else None
    below = f.integer("max_window_layers", 28, lo=0)
    if alternate:
        default = [
            "sliding_attention" if (i + 1) % 2 and i < below and use else "full_attention" for i in range(n_layers)
        ]
    else:
        default = [
            "sliding_attention" if window is not None and i >= below else "full_attention" for i in range(n_layers)
        ]
    return windows(attention_types(f, n_layers, default), window)


def _qwen(f: Fields, name: str, family: str, s, layers) -> ModelSpec:
    return build_spec(
        name=name,
        family=family,
        hidden_size=s.hidden,
        vocab_size=s.vocab,
        layers=layers,
        tie_word_embeddings=f.boolean("tie_word_embeddings", False),
        max_position_embeddings=f.opt_integer("max_position_embeddings"),
    )


def _experts(f: Fields) -> tuple[int, int, int]:
    """(routed experts, experts per token, expert width); ``num_experts`` 0 makes every layer dense.

    The expert count is ``num_experts`` (the Hub's Qwen2/3-MoE configs) or ``num_local_experts``, the name
    transformers 5 writes for Qwen3-MoE (``Qwen3MoeConfig.attribute_map = {"num_experts": "num_local_experts"}``,
    so ``save_pretrained`` puts the latter on disk) and reads either by. Both present must agree."""
    key = "num_local_experts" if f.cfg.get("num_local_experts") is not None else "num_experts"
    n = f.integer(key, lo=0)
    if key == "num_local_experts" and f.cfg.get("num_experts") is not None:
        other = f.integer("num_experts", lo=0)
        if other != n:
            raise f.error(f"'{f.name('num_experts')}' = {other} and '{f.name(key)}' = {n} name two expert counts")
    if not n:
        unused(f, "num_experts_per_tok", "moe_intermediate_size")
        return 0, 0, 0
    n, k = routed_experts(f, key, n)
    return n, k, f.integer("moe_intermediate_size")


def qwen2(f: Fields, name: str) -> ModelSpec:
    """Qwen2/2.5: biases on q, k and v (always, ``Qwen2Attention``), none on o or the MLP."""
    s = read_shape(f, kv_heads=REQUIRED)
    act, ffn = f.string("hidden_act", "silu"), f.integer("intermediate_size")
    layers = [
        LayerSpec(
            **gqa_attention(s),
            sliding_window=w,
            qkv_bias=True,
            activation=act,
            intermediate_size=ffn,
        )
        for w in _window(f, s.layers)
    ]
    return _qwen(f, name, "qwen2", s, layers)


def qwen3(f: Fields, name: str) -> ModelSpec:
    """Qwen3: ``attention_bias`` on q, k, v and o; per-head RMSNorm on q and k (``q_norm``, ``k_norm``)."""
    s = read_shape(f, kv_heads=REQUIRED, head_dim=REQUIRED)
    bias, act, ffn = f.boolean("attention_bias", False), f.string("hidden_act", "silu"), f.integer("intermediate_size")
    layers = [
        LayerSpec(
            **gqa_attention(s, head_qk_norm=True),
            sliding_window=w,
            qkv_bias=bias,
            o_bias=bias,
            activation=act,
            intermediate_size=ffn,
        )
        for w in _window(f, s.layers)
    ]
    return _qwen(f, name, "qwen3", s, layers)


def qwen2_moe(f: Fields, name: str) -> ModelSpec:
    """Qwen1.5/2-MoE: Qwen2's attention (q/k/v biases per ``qkv_bias``); MoE layers (``decoder_sparse_step``,
    ``mlp_only_layers``) hold a router, the routed experts, one shared SwiGLU expert of
    ``shared_expert_intermediate_size`` and its sigmoid gate (``Qwen2MoeSparseMoeBlock``)."""
    s = read_shape(f, kv_heads=REQUIRED)
    bias, act = f.boolean("qkv_bias", True), f.string("hidden_act", "silu")
    n, k, width = _experts(f)
    moe = qwen_moe_layers(f, s.layers, n)
    shared_key = "shared_expert_intermediate_size"
    shared = f.integer(shared_key, lo=0) if any(moe) else unused(f, shared_key)
    ffn = f.integer("intermediate_size") if not all(moe) else unused(f, "intermediate_size")
    layers = []
    for w, is_moe in zip(_window(f, s.layers, alternate=True), moe, strict=True):
        ffn_kw: dict[str, Any] = {"intermediate_size": ffn}
        if is_moe:
            ffn_kw = {
                "num_experts": n,
                "experts_per_token": k,
                "expert_intermediate_size": width,
                "num_shared_experts": 1,
                "shared_intermediate_size": shared,
                "shared_expert_gate": True,
            }
        layers.append(
            LayerSpec(
                **gqa_attention(s),
                sliding_window=w,
                qkv_bias=bias,
                activation=act,
                **ffn_kw,
            )
        )
    return _qwen(f, name, "qwen2_moe", s, layers)


def qwen3_moe(f: Fields, name: str) -> ModelSpec:
    """Qwen3-MoE: Qwen3's attention; MoE layers (``decoder_sparse_step``, ``mlp_only_layers``) hold a router and
    the routed experts, no shared expert; every layer windowed when ``use_sliding_window``."""
    s = read_shape(f, kv_heads=REQUIRED)
    bias, act = f.boolean("attention_bias", False), f.string("hidden_act", "silu")
    n, k, width = _experts(f)
    moe = qwen_moe_layers(f, s.layers, n)
    ffn = f.integer("intermediate_size") if not all(moe) else unused(f, "intermediate_size")
    window = f.opt_integer("sliding_window", 4096) if f.boolean("use_sliding_window", False) else None
    sparse: dict[str, Any] = {"num_experts": n, "experts_per_token": k, "expert_intermediate_size": width}
    dense: dict[str, Any] = {"intermediate_size": ffn}
    layers = [
        LayerSpec(
            **gqa_attention(s, head_qk_norm=True),
            sliding_window=window,
            qkv_bias=bias,
            o_bias=bias,
            activation=act,
            **(sparse if is_moe else dense),
        )
        for is_moe in moe
    ]
    return _qwen(f, name, "qwen3_moe", s, layers)
