"""Llama-style decoders: llama, mistral, mixtral, phi3, olmo2.

Pre-norm (OLMo 2: post-norm) layers of GQA attention with RoPE and a SwiGLU MLP (Mixtral: routed SwiGLU
experts), RMSNorm, an untied head by default. Each reader follows its ``transformers`` 5.23.0 module tree and
config defaults (``modeling_<family>.py``, ``configuration_<family>.py``).
"""

from __future__ import annotations

from meshplan.spec.models.common import REQUIRED, gqa_attention, read_shape, routed_experts
from meshplan.spec.models.count import build_spec
from meshplan.spec.models.fields import Fields
from meshplan.spec.models.spec import LayerSpec, ModelSpec


def _attention(f: Fields, s, **kw) -> dict:
    return gqa_attention(s, activation=f.string("hidden_act", "silu"), **kw)


def _spec(f: Fields, name: str, family: str, s, layers, tied: bool) -> ModelSpec:
    return build_spec(
        name=name,
        family=family,
        hidden_size=s.hidden,
        vocab_size=s.vocab,
        layers=layers,
        tie_word_embeddings=tied,
        max_position_embeddings=f.opt_integer("max_position_embeddings"),
    )


def llama(f: Fields, name: str) -> ModelSpec:
    """Llama 2/3 (``LlamaAttention``: q, k, v, o with ``attention_bias``; ``LlamaMLP`` with ``mlp_bias``)."""
    s = read_shape(f)
    bias = f.boolean("attention_bias", False)
    layer = LayerSpec(
        **_attention(f, s, qkv_bias=bias, o_bias=bias),
        intermediate_size=f.integer("intermediate_size"),
        mlp_bias=f.boolean("mlp_bias", False),
    )
    return _spec(f, name, "llama", s, [layer] * s.layers, f.boolean("tie_word_embeddings", False))


def mistral(f: Fields, name: str) -> ModelSpec:
    """Mistral 7B: llama without biases; every layer attends within ``sliding_window`` (default 4096, as
    ``MistralConfig``; null for full attention)."""
    s = read_shape(f, kv_heads=REQUIRED)
    layer = LayerSpec(
        **_attention(f, s, sliding_window=f.opt_integer("sliding_window", 4096)),
        intermediate_size=f.integer("intermediate_size"),
    )
    return _spec(f, name, "mistral", s, [layer] * s.layers, f.boolean("tie_word_embeddings", False))


def mixtral(f: Fields, name: str) -> ModelSpec:
    """Mixtral: mistral's attention; every MLP is ``num_local_experts`` SwiGLU experts of ``intermediate_size``
    with a bias-free router, top-``num_experts_per_tok``."""
    s = read_shape(f, kv_heads=REQUIRED)
    n, k = routed_experts(f, "num_local_experts")
    layer = LayerSpec(
        **_attention(f, s, sliding_window=f.opt_integer("sliding_window", None)),
        num_experts=n,
        experts_per_token=k,
        expert_intermediate_size=f.integer("intermediate_size"),
    )
    return _spec(f, name, "mixtral", s, [layer] * s.layers, f.boolean("tie_word_embeddings", False))


def phi3(f: Fields, name: str) -> ModelSpec:
    """Phi-3: fused qkv_proj and gate_up_proj (the same counts as separate projections), no biases, every layer
    windowed by ``sliding_window`` when set."""
    s = read_shape(f)
    layer = LayerSpec(
        **_attention(f, s, sliding_window=f.opt_integer("sliding_window", None)),
        intermediate_size=f.integer("intermediate_size"),
    )
    return _spec(f, name, "phi3", s, [layer] * s.layers, f.boolean("tie_word_embeddings", False))


def olmo2(f: Fields, name: str) -> ModelSpec:
    """OLMo 2: RMSNorm over the whole q and k projections (heads × head_dim and KV heads × head_dim), and norms
    after the attention and the MLP instead of before (``Olmo2DecoderLayer``)."""
    s = read_shape(f)
    bias = f.boolean("attention_bias", False)
    layer = LayerSpec(
        **_attention(
            f,
            s,
            qkv_bias=bias,
            o_bias=bias,
            qk_norm=True,
            qk_norm_scope="projection",
            qk_norm_width=s.heads * s.head_dim,
        ),
        intermediate_size=f.integer("intermediate_size"),
        norm_position="post",
    )
    return _spec(f, name, "olmo2", s, [layer] * s.layers, f.boolean("tie_word_embeddings", False))
