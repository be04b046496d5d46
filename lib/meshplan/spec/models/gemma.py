"""Gemma 2 and Gemma 3 (text-only ``gemma3_text``, and ``gemma3`` = the same text model + a SigLIP vision tower).

Sandwich norms (an RMSNorm before and after both the attention and the MLP: 4 per layer), GeGLU MLP, embedding
tied to the head by default, alternating sliding-window and full-attention layers (``layer_types``, else the
config class's pattern). Gemma 2 caps attention and output logits with tanh (``attn_logit_softcapping``,
``final_logit_softcapping``); Gemma 3 normalises q and k per head instead.
"""

from __future__ import annotations

from meshplan.spec.models.common import REQUIRED, attention_types, composite_tie, gqa_attention, read_shape, windows
from meshplan.spec.models.count import build_spec
from meshplan.spec.models.fields import MAX_LAYERS, Fields
from meshplan.spec.models.spec import LayerSpec, ModelSpec


def _layers(f: Fields, s, types, window, qk_norm: bool, softcap: float | None) -> list[LayerSpec]:
    bias, act, ffn = (
        f.boolean("attention_bias", False),
        f.string("hidden_activation", "gelu_pytorch_tanh"),
        f.integer("intermediate_size"),
    )
    return [
        LayerSpec(
            **gqa_attention(s, head_qk_norm=qk_norm),
            sliding_window=w,
            qkv_bias=bias,
            o_bias=bias,
            attn_logit_softcapping=softcap,
            activation=act,
            intermediate_size=ffn,
            norms_per_layer=4,
            norm_position="sandwich",
        )
        for w in windows(types, window)
    ]


def gemma2(f: Fields, name: str) -> ModelSpec:
    """Gemma 2 (``Gemma2DecoderLayer``): even-numbered layers (0, 2, ...) slide over ``sliding_window`` tokens by
    default; logit softcapping 50 (attention) and 30 (output) by default."""
    s = read_shape(f, kv_heads=REQUIRED, head_dim=REQUIRED)
    default = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(s.layers)]
    layers = _layers(
        f,
        s,
        attention_types(f, s.layers, default),
        f.opt_integer("sliding_window", 4096),
        False,
        f.number("attn_logit_softcapping", 50.0),
    )
    return build_spec(
        name=name,
        family="gemma2",
        hidden_size=s.hidden,
        vocab_size=s.vocab,
        layers=layers,
        tie_word_embeddings=f.boolean("tie_word_embeddings", True),
        max_position_embeddings=f.opt_integer("max_position_embeddings"),
        final_logit_softcapping=f.number("final_logit_softcapping", 30.0),
    )


def _gemma3_text(f: Fields) -> tuple:
    s = read_shape(f, kv_heads=REQUIRED, head_dim=REQUIRED)
    window = f.opt_integer("sliding_window", 4096)
    if f.boolean("use_bidirectional_attention", False) and window is not None:
        window = window // 2 + 1  # Gemma3TextConfig: the exclusive bound flash attention needs
    pattern = f.integer("sliding_window_pattern", 6, hi=MAX_LAYERS)
    default = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(s.layers)]
    layers = _layers(
        f, s, attention_types(f, s.layers, default), window, True, f.number("attn_logit_softcapping", None)
    )
    return s, layers, f.number("final_logit_softcapping", None)


def gemma3_text(f: Fields, name: str) -> ModelSpec:
    """Gemma 3 text model (Gemma 3 1B; the text part of the larger ones): every sixth layer full attention by
    default (``sliding_window_pattern``), per-head q/k RMSNorm, no softcapping by default."""
    s, layers, cap = _gemma3_text(f)
    return build_spec(
        name=name,
        family="gemma3_text",
        hidden_size=s.hidden,
        vocab_size=s.vocab,
        layers=layers,
        tie_word_embeddings=f.boolean("tie_word_embeddings", True),
        max_position_embeddings=f.opt_integer("max_position_embeddings"),
        final_logit_softcapping=cap,
    )


def siglip_vision_params(v: Fields) -> int:
    """A SigLIP vision tower (``SiglipVisionModel``): patch conv with bias, learned positions for
    (image_size / patch_size)² patches, ``num_hidden_layers`` pre-LayerNorm blocks (q, k, v, o and a GELU MLP,
    all with biases), a final LayerNorm and, if ``vision_use_head``, the attention-pooling head.

    patch C·p²·w + w; positions (image/p)²·w; block 2·2w + 4(w² + w) + 2·w·f + f + w; post-norm 2w;
    head w + 4w² + 4w + 2w + 2·w·f + f + w.
    """
    v.string("model_type", "siglip_vision_model", choices=("siglip_vision_model",))
    w, ffn = v.integer("hidden_size"), v.integer("intermediate_size")
    depth = v.integer("num_hidden_layers", hi=MAX_LAYERS)
    image, patch, channels = v.integer("image_size"), v.integer("patch_size"), v.integer("num_channels", 3)
    if patch > image:
        raise v.error(f"'{v.name('patch_size')}' = {patch} exceeds '{v.name('image_size')}' = {image}")
    mlp = 2 * w * ffn + ffn + w
    block = 4 * w + 4 * (w * w + w) + mlp
    tower = channels * patch * patch * w + w + (image // patch) ** 2 * w + depth * block + 2 * w
    if v.boolean("vision_use_head", True):
        tower += w + 4 * w * w + 4 * w + 2 * w + mlp
    return tower


def gemma3(f: Fields, name: str) -> ModelSpec:
    """Gemma 3 4B/12B/27B (``Gemma3ForConditionalGeneration``): the Gemma 3 text model under ``text_config``, a SigLIP
    tower under ``vision_config`` and the projector (a vision-width × hidden matrix and an RMSNorm of the vision
    width), all counted in ``total``; the vision tower and projector are the ``vision`` component."""
    t = f.section("text_config")
    v = f.section("vision_config")
    s, layers, cap = _gemma3_text(t)
    vision = siglip_vision_params(v) + v.integer("hidden_size") * s.hidden + v.integer("hidden_size")
    spec = build_spec(
        name=name,
        family="gemma3",
        hidden_size=s.hidden,
        vocab_size=s.vocab,
        layers=layers,
        tie_word_embeddings=composite_tie(f, t, True),
        max_position_embeddings=t.opt_integer("max_position_embeddings"),
        final_logit_softcapping=cap,
        vision=vision,
    )
    t.refuse_unread("gemma3")
    v.refuse_unread("gemma3")
    return spec
