"""Qwen3.5/3.6/3.8 (``qwen3_5``: dense MLPs; ``qwen3_5_moe``: a MoE in every layer).

The text model (under ``text_config``, or at the top level) mixes full-attention layers (gated query: the q
projection also yields a sigmoid gate on the output, per-head q/k RMSNorm, GQA) with Gated DeltaNet
linear-attention layers (``layer_types``, else every ``full_attention_interval``-th layer is full attention).
The checkpoints also hold a vision tower (``vision_config``) and a multi-token-prediction module
(``mtp_num_hidden_layers``); both are in ``total`` (the shipped anchor's 27,781,427,952).
"""

from __future__ import annotations

from typing import Any

from meshplan.spec.models.common import REQUIRED, composite_tie, gqa_attention, read_shape, routed_experts, unused
from meshplan.spec.models.count import build_spec, counted
from meshplan.spec.models.fields import MAX_LAYERS, Fields
from meshplan.spec.models.spec import LayerSpec, ModelSpec


def vision_params(v: Fields, text_hidden: int) -> int:
    """Qwen3.5's vision tower (``Qwen3_5VisionModel``): a Conv3d patch embedding with bias, learned positions,
    ``depth`` pre-LayerNorm blocks (fused qkv and proj with biases, a GELU MLP with biases) and the patch merger
    (LayerNorm, then two linear layers over ``spatial_merge_size``² patches, to ``out_hidden_size``).

    patch C·t·p²·w + w; positions n·w; block 2w + 3w² + 3w + w² + w + 2w + 2·w·f + f + w;
    merger 2w + m² + m + m·o + o with m = w·s².
    """
    w, ffn = v.integer("hidden_size"), v.integer("intermediate_size")
    depth = v.integer("depth", hi=MAX_LAYERS)
    patch, temporal = v.integer("patch_size"), v.integer("temporal_patch_size", 2)
    channels, positions = v.integer("in_channels", 3), v.integer("num_position_embeddings")
    merge, out = v.integer("spatial_merge_size", 2), v.integer("out_hidden_size")
    if out != text_hidden:
        raise v.error(f"'{v.name('out_hidden_size')}' = {out} differs from the text hidden size {text_hidden}")
    block = 2 * w + 3 * w * w + 3 * w + w * w + w + 2 * w + 2 * w * ffn + ffn + w
    m = w * merge * merge
    merger = 2 * w + m * m + m + m * out + out
    return channels * temporal * patch * patch * w + w + positions * w + depth * block + merger


def _read(f: Fields, name: str, family: str, moe: bool) -> ModelSpec:
    t = f.opt_section("text_config") or f
    s = read_shape(t, kv_heads=REQUIRED, head_dim=REQUIRED)
    given = t.strings("layer_types", s.layers, ("full_attention", "linear_attention"))
    if given is None:
        if not t.has("full_attention_interval"):
            raise t.error(f"missing key '{t.name('layer_types')}' (or '{t.name('full_attention_interval')}')")
        interval = t.integer("full_attention_interval", hi=MAX_LAYERS)
        given = tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(s.layers))
    n_linear = given.count("linear_attention")
    bias, act = t.boolean("attention_bias", False), t.string("hidden_act", "silu")
    ffn: dict[str, Any]
    if moe:
        n, k = routed_experts(t, "num_experts")
        ffn = {
            "num_experts": n,
            "experts_per_token": k,
            "expert_intermediate_size": t.integer("moe_intermediate_size"),
            "num_shared_experts": 1,
            "shared_intermediate_size": t.integer("shared_expert_intermediate_size", lo=0),
            "shared_expert_gate": True,
        }
    else:
        ffn = {"intermediate_size": t.integer("intermediate_size")}
    full = LayerSpec(
        **gqa_attention(s, head_qk_norm=True),
        qkv_bias=bias,
        o_bias=bias,
        output_gate=t.boolean("attn_output_gate", True),
        activation=act,
        **ffn,
    )
    linear = full
    keys = (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
    )
    if not n_linear:
        unused(t, *keys)
    else:
        linear = LayerSpec(
            mixer="linear_attention",
            linear_num_key_heads=t.integer("linear_num_key_heads"),
            linear_num_value_heads=t.integer("linear_num_value_heads"),
            linear_key_head_dim=t.integer("linear_key_head_dim"),
            linear_value_head_dim=t.integer("linear_value_head_dim"),
            linear_conv_kernel=t.integer("linear_conv_kernel_dim"),
            activation=act,
            **ffn,
        )
    layers = [full if kind == "full_attention" else linear for kind in given]
    # MTP (checkpoint ``mtp.*``, not built by transformers): fc 2h -> h, pre-fc norms of the hidden state and of the
    # embedding, a final norm, and n full-attention decoder layers; it shares the embedding and the head.
    n_mtp = t.integer("mtp_num_hidden_layers", 0, lo=0, hi=MAX_LAYERS)
    if t.boolean("mtp_use_dedicated_embeddings", False):
        raise t.error(
            f"'{t.name('mtp_use_dedicated_embeddings')}' = true: an MTP module with its own embedding is not modelled"
        )
    mtp = 2 * s.hidden * s.hidden + 3 * s.hidden + n_mtp * counted(s.hidden, full).params if n_mtp else 0
    v = f.opt_section("vision_config")
    vision = 0
    if v is not None and not f.boolean("language_model_only", False):
        vision = vision_params(v, s.hidden)
        v.refuse_unread(family)
    tied = composite_tie(f, t, False)
    spec = build_spec(
        name=name,
        family=family,
        hidden_size=s.hidden,
        vocab_size=s.vocab,
        layers=layers,
        tie_word_embeddings=tied,
        max_position_embeddings=t.opt_integer("max_position_embeddings"),
        vision=vision,
        mtp=mtp,
        num_mtp_layers=n_mtp,
    )
    if t is not f:
        t.refuse_unread(family)
    return spec


def qwen3_5(f: Fields, name: str) -> ModelSpec:
    """Qwen3.5 dense: a SwiGLU MLP of ``intermediate_size`` in every layer."""
    return _read(f, name, "qwen3_5", moe=False)


def qwen3_5_moe(f: Fields, name: str) -> ModelSpec:
    """Qwen3.5-MoE: every layer's MLP is a router, ``num_experts`` routed SwiGLU experts, one shared expert of
    ``shared_expert_intermediate_size`` and its sigmoid gate (``Qwen3_5MoeSparseMoeBlock``)."""
    return _read(f, name, "qwen3_5_moe", moe=True)
