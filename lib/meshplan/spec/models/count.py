"""Exact parameter counts of a decoder layer and of a whole model, from ``LayerSpec`` s.

One formula per block, each the sum of the weight (and bias) shapes of the modules that block holds in the
Hugging Face ``transformers`` implementation (pinned 5.23.0) of the families that use it; the tests build every
family on the meta device and compare the totals exactly.

    >>> from meshplan.spec.models.spec import LayerSpec
    >>> layer = LayerSpec(num_heads=32, num_kv_heads=8, head_dim=128, v_head_dim=128, intermediate_size=14336)
    >>> layer_params(4096, layer)    # Llama 3.1 8B / Mistral 7B: attention + SwiGLU MLP + 2 RMSNorms
    (218112000, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import lru_cache
from types import MappingProxyType

from meshplan.core.units import add_up
from meshplan.spec.models.spec import COMPONENT_KEYS, LayerSpec, ModelSpec, ParamCount


def norm_params(width: int, kind: str = "rmsnorm", bias: bool = False) -> int:
    """RMSNorm: a weight of ``width``; LayerNorm: weight and (if ``bias``) bias."""
    return width * (2 if kind == "layernorm" and bias else 1)


def attention_params(h: int, s: LayerSpec) -> int:
    """Softmax attention: q (doubled when it also yields the output gate), k, v, o, their biases, q/k norms.

    h·a·d·(1 or 2) + 2·h·kv·d + a·d·h [+ a·d·(1 or 2) + 2·kv·d] [+ h] [+ 2·d or (a + kv)·d]
    """
    a, kv, d = s.num_heads, s.num_kv_heads, s.head_dim
    q_out = a * d * (2 if s.output_gate else 1)
    p = h * q_out + 2 * h * kv * d + a * d * h
    if s.qkv_bias:
        p += q_out + 2 * kv * d
    if s.o_bias:
        p += h
    if s.qk_norm:
        p += 2 * d if s.qk_norm_scope == "head" else (a + kv) * d
    return p


def mla_params(h: int, s: LayerSpec) -> int:
    """DeepSeek's multi-head latent attention (DeepSeek-V2 paper, section 2.1.2; ``DeepseekV3Attention``).

    q: h·r_q + r_q (q_a_norm) + r_q·a·(d_nope + d_rope), or h·a·(d_nope + d_rope) without a q rank;
    kv: h·(r_kv + d_rope) + r_kv (kv_a_norm) + r_kv·a·(d_nope + d_v); o: a·d_v·h; biases on q_a, kv_a and o.
    """
    a, qr, kvr = s.num_heads, s.q_lora_rank, s.kv_lora_rank
    qk = s.qk_nope_head_dim + s.qk_rope_head_dim
    q = h * qr + qr + qr * a * qk if qr else h * a * qk
    kv = h * (kvr + s.qk_rope_head_dim) + kvr + kvr * a * (s.qk_nope_head_dim + s.v_head_dim)
    o = a * s.v_head_dim * h
    if s.qkv_bias:
        q += qr
        kv += kvr + s.qk_rope_head_dim
    if s.o_bias:
        o += h
    return q + kv + o


def linear_attention_params(h: int, s: LayerSpec) -> int:
    """Gated DeltaNet (Qwen3.5 ``GatedDeltaNet``): in_proj_qkv, in_proj_z, in_proj_a/b, a depthwise conv1d without
    bias, dt_bias and A_log per value head, a gated RMSNorm over the value head dim, out_proj.
    """
    nk, nv, dk, dv = s.linear_num_key_heads, s.linear_num_value_heads, s.linear_key_head_dim, s.linear_value_head_dim
    qkv = 2 * nk * dk + nv * dv
    return h * qkv + h * nv * dv + 2 * h * nv + qkv * s.linear_conv_kernel + 2 * nv + dv + nv * dv * h


def mixer_params(h: int, s: LayerSpec) -> int:
    """The token mixer of a layer, whichever it is."""
    mixers = {"attention": attention_params, "mla": mla_params, "linear_attention": linear_attention_params}
    return mixers[s.mixer](h, s)


def mlp_params(h: int, width: int, kind: str = "gated", bias: bool = False) -> int:
    """Gated (gate, up, down: 3·h·f) or plain (up, down: 2·h·f) MLP, with biases 2f + h or f + h."""
    if kind == "gated":
        return 3 * h * width + (2 * width + h if bias else 0)
    return 2 * h * width + (width + h if bias else 0)


def ffn_params(h: int, s: LayerSpec) -> tuple[int, int]:
    """(dense MLP or router + shared experts + shared gate, routed experts) of a layer.

    A MoE layer: router E·h (+ E with a bias), routed experts E·3·h·f_e (no biases), shared MLP of width f_s
    (with biases if ``shared_mlp_bias``; transformers builds it even at width 0), shared gate h.
    """
    if not s.num_experts:
        return mlp_params(h, s.intermediate_size, s.mlp, s.mlp_bias), 0
    router = s.num_experts * h + (s.num_experts if s.router_bias else 0)
    shared = mlp_params(h, s.shared_intermediate_size, "gated", s.shared_mlp_bias)
    gate = h if s.shared_expert_gate else 0
    return router + shared + gate, s.num_experts * mlp_params(h, s.expert_intermediate_size)


def layer_norms(h: int, s: LayerSpec) -> int:
    return s.norms_per_layer * norm_params(h, s.norm, s.norm_bias)


def layer_params(h: int, s: LayerSpec) -> tuple[int, int]:
    """(parameters of the whole layer, of its routed experts)."""
    dense, experts = ffn_params(h, s)
    return mixer_params(h, s) + dense + experts + layer_norms(h, s), experts


@lru_cache(maxsize=4096)
def counted(h: int, s: LayerSpec) -> LayerSpec:
    """``s`` with ``params`` and ``expert_params`` filled in (cached: the layers of a model repeat)."""
    total, experts = layer_params(h, s)
    return replace(s, params=total, expert_params=experts)


def _group_names(layers: tuple[LayerSpec, ...]) -> list[str]:
    """A name per layer, made of the features that vary between layers (``"layers"`` when none does)."""

    def attn(s: LayerSpec) -> str:
        if s.mixer == "linear_attention":
            return "linear_attention"
        return "sliding_attention" if s.sliding_window is not None else "full_attention"

    def ffn(s: LayerSpec) -> str:
        return "moe" if s.is_moe else "dense"

    vary = [f for f in (attn, ffn) if len({f(s) for s in layers}) > 1]
    return ["_".join([f(s) for f in vary] + ["layers"]) for s in layers]


def layer_groups(layers: tuple[LayerSpec, ...]) -> list[tuple[str, int, int]]:
    """``(name, count, params_per_layer)`` per kind of layer, sorted by name (dense before moe, full before linear or
    sliding attention)."""
    names = _group_names(layers)
    groups: dict[tuple[str, int], int] = {}
    for name, s in zip(names, layers, strict=True):
        groups[(name, s.params)] = groups.get((name, s.params), 0) + 1
    clash = {n for n, _ in groups if sum(1 for m, _ in groups if m == n) > 1}
    return sorted((f"{n}_{p}" if n in clash else n, c, p) for (n, p), c in groups.items())


def build_spec(
    *,
    name: str,
    family: str,
    hidden_size: int,
    vocab_size: int,
    layers: Iterable[LayerSpec],
    tie_word_embeddings: bool,
    final_norm: str = "rmsnorm",
    final_norm_bias: bool = False,
    position_embeddings: int = 0,
    max_position_embeddings: int | None = None,
    final_logit_softcapping: float | None = None,
    vision: int = 0,
    mtp: int = 0,
    num_mtp_layers: int = 0,
    extra: Mapping[str, int] | None = None,
) -> ModelSpec:
    """Assemble the ``ModelSpec`` of a decoder-only text model (plus vision tower and MTP module, if any).

    total = V·h (embedding) [+ P·h learned positions] + V·h (head, 0 if tied) + Σ layers + final norm
            + vision + MTP.
    flop_params = Σ activated layer parameters + final norm + V·h (the head's matmul runs even when tied).
    """
    h, V = hidden_size, vocab_size
    # a MoE layer's intermediate_size is the width of each routed expert (LayerSpec's documented meaning)
    layers = tuple(
        counted(h, replace(s, intermediate_size=s.expert_intermediate_size) if s.num_experts else s) for s in layers
    )
    if not layers:
        raise ValueError(f"{name}: a model needs at least one decoder layer")
    comps = dict.fromkeys(COMPONENT_KEYS, 0)
    for s in layers:
        dense, experts = ffn_params(h, s)
        comps["linear_attention" if s.mixer == "linear_attention" else "attention"] += mixer_params(h, s)
        comps["mlp"] += dense
        comps["routed_experts"] += experts
        comps["norms"] += layer_norms(h, s)
    final = norm_params(h, final_norm, final_norm_bias)
    head = 0 if tie_word_embeddings else V * h
    comps.update(embedding=V * h + position_embeddings * h, head=head, vision=vision, mtp=mtp)
    comps["norms"] += final
    groups = [("embedding", 1, V * h)]
    if position_embeddings:
        groups.append(("position_embedding", 1, position_embeddings * h))
    groups += [("head", 1, head), *layer_groups(layers), ("final_norm", 1, final)]
    if vision:
        groups.append(("vision_tower", 1, vision))
    if mtp:
        groups.append(("mtp", 1, mtp))
    total = add_up(comps.values())
    assert total == add_up(n * p for _, n, p in groups), (name, total, groups)
    attn = [s for s in layers if s.mixer != "linear_attention"] or list(layers)
    first = attn[0]
    if first.mixer == "mla":
        kv_heads, head_dim = first.num_heads, first.qk_nope_head_dim + first.qk_rope_head_dim
        kv_width = first.num_heads * head_dim + first.num_heads * first.v_head_dim
    else:
        kv_heads, head_dim = first.num_kv_heads, first.head_dim
        kv_width = first.num_kv_heads * (first.head_dim + first.v_head_dim)
    linear = next((s for s in layers if s.mixer == "linear_attention"), None)
    moe = [s for s in layers if s.is_moe]
    pc = ParamCount(total, MappingProxyType(comps), tuple(groups), MappingProxyType(dict(extra or {})))
    return ModelSpec(
        name=name,
        family=family,
        hidden_size=h,
        num_layers=len(layers),
        num_attention_heads=first.num_heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        kv_width=kv_width,
        num_full_attention_layers=sum(1 for s in layers if s.mixer != "linear_attention"),
        vocab_size=V,
        params=pc,
        layer_params=tuple(s.params for s in layers),
        flop_params=add_up(s.activated_params for s in layers) + final + V * h,
        linear_num_key_heads=linear.linear_num_key_heads if linear else 0,
        linear_num_value_heads=linear.linear_num_value_heads if linear else 0,
        num_experts=max((s.num_experts for s in moe), default=0),
        experts_per_token=max((s.experts_per_token for s in moe), default=0),
        num_moe_layers=len(moe),
        routed_expert_params=comps["routed_experts"],
        layer_expert_params=tuple(s.expert_params for s in layers) if moe else (),
        max_position_embeddings=max_position_embeddings,
        layers=layers,
        tie_word_embeddings=tie_word_embeddings,
        position_embedding="learned" if position_embeddings else "rope",
        final_norm=final_norm,
        final_logit_softcapping=final_logit_softcapping,
        num_mtp_layers=num_mtp_layers,
    )
