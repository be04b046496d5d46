"""DeepSeek-V2 and DeepSeek-V3: multi-head latent attention, dense layers first, then MoE layers of routed and
shared experts.

Layer i is MoE if i ≥ ``first_k_dense_replace`` and i is a multiple of ``moe_layer_freq`` (DeepSeek's own
``modeling_deepseek.py``; transformers 5.23.0 ignores ``moe_layer_freq``, which is 1 in every released config).
``q_lora_rank`` must be present: null means an uncompressed query projection (DeepSeek-V2-Lite), and a
missing key would silently take the config class's 1536.
"""

from __future__ import annotations

from typing import Any

from meshplan.spec.models.common import routed_experts, unused
from meshplan.spec.models.count import build_spec, counted, norm_params
from meshplan.spec.models.fields import MAX_LAYERS, Fields
from meshplan.spec.models.spec import LayerSpec, ModelSpec


def _read(f: Fields, name: str, family: str) -> ModelSpec:
    h, n_layers = f.integer("hidden_size"), f.integer("num_hidden_layers", hi=MAX_LAYERS)
    a, vocab = f.integer("num_attention_heads"), f.integer("vocab_size")
    if "q_lora_rank" not in f.cfg:
        raise f.error(f"missing key '{f.name('q_lora_rank')}' (null for an uncompressed query projection)")
    v3 = family == "deepseek_v3"
    attn_bias = f.boolean("attention_bias", False)
    mlp_bias = False if v3 else f.boolean("mlp_bias", False)
    nope, rope = f.integer("qk_nope_head_dim"), f.integer("qk_rope_head_dim")
    mla: dict[str, Any] = {
        "mixer": "mla",
        "num_heads": a,
        "num_kv_heads": a,
        "head_dim": nope + rope,
        "v_head_dim": f.integer("v_head_dim"),
        "q_lora_rank": f.opt_integer("q_lora_rank") or 0,
        "kv_lora_rank": f.integer("kv_lora_rank"),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "qkv_bias": attn_bias,
        "o_bias": attn_bias,
        "activation": f.string("hidden_act", "silu"),
    }
    n, k = routed_experts(f, "n_routed_experts")
    width = f.integer("moe_intermediate_size")
    shared = f.opt_integer("n_shared_experts", 1 if v3 else 2, lo=0)
    first_dense = f.integer("first_k_dense_replace", 3 if v3 else 0, lo=0)
    freq = f.integer("moe_layer_freq", 1, hi=MAX_LAYERS)
    is_moe = [i >= first_dense and i % freq == 0 for i in range(n_layers)]
    moe = LayerSpec(
        **mla,
        num_experts=n,
        experts_per_token=k,
        expert_intermediate_size=width,
        num_shared_experts=shared or 0,
        shared_intermediate_size=(shared or 0) * width,
        shared_mlp_bias=mlp_bias and shared is not None,
        router_bias=v3,
    )
    ffn = f.integer("intermediate_size") if not all(is_moe) else unused(f, "intermediate_size")
    dense = LayerSpec(**mla, intermediate_size=ffn, mlp_bias=mlp_bias)
    extra = {}
    n_mtp = f.integer("num_nextn_predict_layers", 0, lo=0, hi=MAX_LAYERS) if v3 else 0
    if n_mtp:
        # DeepSeek-V3 MTP module per depth: enorm, hnorm, eh_proj (2h -> h), one MoE layer, shared_head.norm; the
        # embedding and head it shares are not counted again (the paper's 671B excludes the module).
        extra["mtp"] = n_mtp * (2 * norm_params(h) + 2 * h * h + counted(h, moe).params + norm_params(h))
    return build_spec(
        name=name,
        family=family,
        hidden_size=h,
        vocab_size=vocab,
        layers=[moe if m else dense for m in is_moe],
        tie_word_embeddings=f.boolean("tie_word_embeddings", False),
        max_position_embeddings=f.opt_integer("max_position_embeddings"),
        extra=extra,
        num_mtp_layers=n_mtp,
    )


def deepseek_v2(f: Fields, name: str) -> ModelSpec:
    """DeepSeek-V2 / V2-Lite / Coder-V2: ``attention_bias`` on q_a, kv_a and o; ``mlp_bias`` on the dense and shared
    MLPs; a bias-free router (``DeepseekV2Moe``)."""
    return _read(f, name, "deepseek_v2")


def deepseek_v3(f: Fields, name: str) -> ModelSpec:
    """DeepSeek-V3/R1: the router also holds a per-expert score-correction bias (a tensor of the checkpoint; a
    buffer in transformers); the MTP module (``num_nextn_predict_layers``) is counted in ``params.extra``."""
    return _read(f, name, "deepseek_v3")
