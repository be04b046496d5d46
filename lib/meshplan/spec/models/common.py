"""Reading the parts most families share: the text model's shape, grouped-query heads, sliding windows, which
layers are MoE."""

from __future__ import annotations

from typing import NamedTuple

from meshplan.spec.models.fields import _MISSING, MAX_LAYERS, Fields

REQUIRED = _MISSING  # no default: the key must be present (the config class's default is one checkpoint's size)
DERIVED = object()  # head_dim default: hidden_size // num_attention_heads (transformers' getattr fallback)
SAME_AS_HEADS = object()  # num_key_value_heads default: num_attention_heads (transformers' None fallback)


class Shape(NamedTuple):
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


def read_shape(f: Fields, *, kv_heads=SAME_AS_HEADS, head_dim=DERIVED) -> Shape:
    """hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim and vocab_size.

    ``kv_heads``/``head_dim``: the family's default when the key is absent or null (``REQUIRED``: none), as in
    its transformers config class; checks that the KV heads divide the query heads.
    """
    h = f.integer("hidden_size")
    n_layers = f.integer("num_hidden_layers", hi=MAX_LAYERS)
    a = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", a if kv_heads is SAME_AS_HEADS else kv_heads)
    if head_dim is DERIVED:
        if h < a:
            raise f.error(
                f"'{f.name('hidden_size')}' = {h} is smaller than '{f.name('num_attention_heads')}' = {a} "
                f"and there is no '{f.name('head_dim')}'"
            )
        head_dim = h // a
    d = f.integer("head_dim", head_dim)
    vocab = f.integer("vocab_size")
    if a % kv:
        raise f.error(
            f"'{f.name('num_key_value_heads')}' = {kv} does not divide "
            f"'{f.name('num_attention_heads')}' = {a} (each KV head serves a whole group of query heads)"
        )
    return Shape(h, n_layers, a, kv, d, vocab)


def gqa_attention(s: Shape, *, head_qk_norm: bool = False, **kw) -> dict:
    """LayerSpec keywords of a grouped-query softmax attention layer of shape ``s`` (v heads as wide as q and k);
    ``head_qk_norm``: a per-head RMSNorm on q and k (Qwen3, Gemma 3: ``q_norm``/``k_norm`` of width ``head_dim``).
    Other keywords (bias, window, activation, the MLP, OLMo 2's whole-projection ``qk_norm``) pass through."""
    norm = {"qk_norm": True, "qk_norm_scope": "head", "qk_norm_width": s.head_dim} if head_qk_norm else {}
    return dict(
        mixer="attention",
        num_heads=s.heads,
        num_kv_heads=s.kv_heads,
        head_dim=s.head_dim,
        v_head_dim=s.head_dim,
        **norm,
        **kw,
    )


def routed_experts(f: Fields, expert_key: str, n: int | None = None) -> tuple[int, int]:
    """(routed experts, experts per token): ``expert_key`` (or ``n``, already read) and ``num_experts_per_tok``,
    refused when a token would be sent to more experts than there are."""
    n = f.integer(expert_key) if n is None else n
    k = f.integer("num_experts_per_tok")
    if k > n:
        raise f.error(f"'{f.name('num_experts_per_tok')}' = {k} exceeds '{f.name(expert_key)}' = {n}")
    return n, k


def qwen_moe_layers(f: Fields, n_layers: int, num_experts: int) -> tuple[bool, ...]:
    """Qwen2/3-MoE: layer i is MoE unless listed in ``mlp_only_layers``, if (i + 1) is a multiple of
    ``decoder_sparse_step`` (``Qwen3MoeDecoderLayer``)."""
    step = f.integer("decoder_sparse_step", 1)
    dense = set(f.integers("mlp_only_layers", 0, n_layers - 1))
    return tuple(num_experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(n_layers))


def windows(types: tuple[str, ...], window: int | None) -> tuple[int | None, ...]:
    """The sliding window of each layer: ``window`` for ``sliding_attention`` layers, None for the others."""
    return tuple(window if t == "sliding_attention" else None for t in types)


def attention_types(f: Fields, n_layers: int, default: list[str]) -> tuple[str, ...]:
    """``layer_types`` (full_attention / sliding_attention) from the config, or the family's default pattern."""
    given = f.strings("layer_types", n_layers, ("full_attention", "sliding_attention"))
    return given if given is not None else tuple(default)


def composite_tie(f: Fields, t: Fields, default: bool) -> bool:
    """``tie_word_embeddings`` of a multimodal config: the top-level flag (the class that holds the whole checkpoint,
    ``...ForConditionalGeneration``, reads that one); a different value under ``text_config`` is ambiguous, since the
    text-only class would read it instead."""
    tied = f.boolean("tie_word_embeddings", default)
    if t is not f and "tie_word_embeddings" in t.cfg and t.boolean("tie_word_embeddings", tied) != tied:
        raise f.error(
            f"'tie_word_embeddings' is {str(tied).lower()} at the top level (or by default) but "
            f"{str(not tied).lower()} in '{t.name('tie_word_embeddings')}': set both alike"
        )
    return tied


def unused(f: Fields, *keys: str) -> int:
    """Check the type of keys that add nothing in this configuration (expert widths with no experts, ...) and
    mark them read, so that they are not refused as unknown."""
    for key in keys:
        f.opt_integer(key, lo=0)
    return 0


__all__ = [
    "DERIVED",
    "REQUIRED",
    "SAME_AS_HEADS",
    "Shape",
    "attention_types",
    "composite_tie",
    "qwen_moe_layers",
    "read_shape",
    "unused",
    "windows",
]
