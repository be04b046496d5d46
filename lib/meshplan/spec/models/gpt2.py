"""GPT-2 (``GPT2LMHeadModel``): learned positions, pre-LayerNorm blocks of multi-head attention (fused c_attn) and
a plain GELU MLP, all with biases, head tied to the embedding by default.

Two keys that Hugging Face's GPT-2 does not have select the variants the course uses: ``bias`` (default true)
drops every bias, and ``norm`` (``layernorm`` or ``rmsnorm``) picks the norm (the course's 3,688,704-parameter
small model uses ``bias: false, norm: rmsnorm``).
"""

from __future__ import annotations

from meshplan.spec.models.count import build_spec
from meshplan.spec.models.fields import MAX_LAYERS, Fields
from meshplan.spec.models.spec import LayerSpec, ModelSpec


def gpt2(f: Fields, name: str) -> ModelSpec:
    h, n_layers, a = f.integer("n_embd"), f.integer("n_layer", hi=MAX_LAYERS), f.integer("n_head")
    vocab, positions = f.integer("vocab_size"), f.integer("n_positions")
    if h % a:
        raise f.error(f"n_head={a} does not divide n_embd={h}")
    bias = f.boolean("bias", True)
    norm = f.string("norm", "layernorm", choices=("layernorm", "rmsnorm"))
    layer = LayerSpec(
        mixer="attention",
        num_heads=a,
        num_kv_heads=a,
        head_dim=h // a,
        v_head_dim=h // a,
        qkv_bias=bias,
        o_bias=bias,
        mlp="plain",
        activation=f.string("activation_function", "gelu_new"),
        intermediate_size=f.integer("n_inner", 4 * h),
        mlp_bias=bias,
        norm=norm,
        norm_bias=bias,
    )
    return build_spec(
        name=name,
        family="gpt2",
        hidden_size=h,
        vocab_size=vocab,
        layers=[layer] * n_layers,
        tie_word_embeddings=f.boolean("tie_word_embeddings", True),
        final_norm=norm,
        final_norm_bias=bias,
        position_embeddings=positions,
        max_position_embeddings=positions,
    )
