"""Model shapes and exact parameter counts, read from Hugging Face ``config.json`` files.

Supported families (``model_type``):

* ``llama``: dense decoder, GQA attention, SwiGLU MLP, RMSNorm (Llama 3.1 8B/70B/405B).
* ``qwen3_5``: Qwen3.5/3.6/3.8 multimodal checkpoints; the text model mixes full-attention layers
  (gated query, GQA) with Gated DeltaNet linear-attention layers, plus a vision tower and an MTP module.
* ``deepseek_v3``: MLA attention, dense layers then MoE layers (routed + shared experts), MTP module.
* ``gpt2``: GPT-style model with learned positions; ``bias`` and ``norm`` keys select the variant
  (the course's 3,688,704-parameter small model uses ``bias: false, norm: rmsnorm``).

Every count is an exact integer, term by term, and is checked against published checkpoint totals in
``tests/test_params.py`` (source: ``shared/reference/param-counts.md``).

Example:
    >>> m = load_model("qwen3.8-27b")
    >>> m.params.total
    27781427952
    >>> m.params.components["vision"]
    460730096
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .resources import DATA_DIR
MODELS_DIR = DATA_DIR / "models"

COMPONENT_KEYS = (
    "embedding",        # input token embedding (and learned positions for gpt2)
    "head",             # output projection (0 when tied to the embedding)
    "attention",        # full-attention mixers (q, k, v, o, their norms; MLA for DeepSeek)
    "linear_attention",  # Gated DeltaNet mixers (qwen3_5)
    "mlp",              # dense MLPs, shared experts and MoE routers
    "routed_experts",   # routed expert MLPs (MoE)
    "norms",            # per-layer and final norms
    "vision",           # vision tower (qwen3_5)
    "mtp",              # multi-token-prediction module
)


@dataclass(frozen=True)
class ParamCount:
    """Exact parameter count with two breakdowns that each sum to ``total``.

    ``components``: by kind (``COMPONENT_KEYS``).
    ``groups``: by block, as ``(name, count, params_per_block)`` triples, mirroring the
    tables of ``param-counts.md`` (e.g. ``("full_attention_layers", 16, 372_255_232)``).
    ``extra``: counted for reference but *not* part of ``total`` (DeepSeek-V3's MTP module: the paper's
    671B excludes it).
    """

    total: int
    components: Mapping[str, int]
    groups: tuple[tuple[str, int, int], ...]
    extra: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer, as the per-layer formulas (TP splits, activations, EP, pipeline stages) need it.

    Every field is read from the config, never assumed; a field that does not apply keeps its default.

    Attributes:
        mixer: ``"attention"`` (softmax attention over heads; full or sliding-window), ``"mla"`` (DeepSeek's
            multi-head latent attention) or ``"linear_attention"`` (Gated DeltaNet: a fixed-size state).
        sliding_window: tokens a query attends to in a sliding-window layer; ``None`` for full attention.
        num_heads, num_kv_heads, head_dim: query heads, KV heads and the query/key head width.
        v_head_dim: value head width (= head_dim except for MLA).
        qk_norm: per-head RMSNorm on q and k (Qwen3, OLMo 2 norms the whole q/k projection: see ``qk_norm_width``).
        qk_norm_width: elements each q/k norm weight holds (head_dim per head, or the projection width).
        qkv_bias, o_bias: biases of the q/k/v projections and of the output projection.
        output_gate: the query projection also produces a sigmoid gate on the attention output (Qwen3.5).
        q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim: MLA's low-rank shapes (0 if not MLA).
        linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
        linear_conv_kernel: Gated DeltaNet's shape (0 if not linear attention).
        mlp: ``"gated"`` (gate and up projections, SwiGLU/GeGLU) or ``"plain"`` (up, activation, down).
        activation: ``"silu"``, ``"gelu"``, ``"gelu_tanh"``, ...
        intermediate_size: width of the dense MLP (or of each routed expert in a MoE layer: see below).
        mlp_bias: biases in the MLP.
        num_experts, experts_per_token, expert_intermediate_size: the routed experts (0 for a dense layer).
        num_shared_experts, shared_intermediate_size: always-active shared experts (total width of the shared MLP).
        shared_expert_gate: a sigmoid gate on the shared experts' output (Qwen2-MoE).
        router_bias: the router carries a per-expert bias (DeepSeek-V3's e_score_correction_bias).
        norm: ``"rmsnorm"`` or ``"layernorm"``; norms_per_layer: 2 (pre-norm), 4 (Gemma 2/3's sandwich norms).
        params: parameters of the whole layer; expert_params: of its routed experts.
    """

    mixer: str = "attention"
    sliding_window: int | None = None
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    qk_norm: bool = False
    qk_norm_width: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    output_gate: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    mlp: str = "gated"
    activation: str = "silu"
    intermediate_size: int = 0
    mlp_bias: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    shared_expert_gate: bool = False
    router_bias: bool = False
    norm: str = "rmsnorm"
    norms_per_layer: int = 2
    params: int = 0
    expert_params: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a model as the parallelism formulas need it (all sizes are counts, not bytes).

    Attributes:
        name: file stem or a label.
        family: ``llama`` | ``qwen3_5`` | ``deepseek_v3`` | ``gpt2``.
        hidden_size: h, the residual-stream width.
        num_layers: L, the decoder layers of the text model (MTP and vision excluded).
        num_attention_heads: a, query heads of the (full) attention layers.
        num_key_value_heads: KV heads of the full-attention layers (= a for MHA and MLA).
        head_dim: width of one query head.
        kv_width: elements of K plus V per token per full-attention layer (all heads).
        num_full_attention_layers: layers whose K and V span the whole sequence (context parallel pays
            for these); linear-attention layers carry a fixed-size state instead.
        linear_num_key_heads, linear_num_value_heads: Gated DeltaNet heads (0 if none).
        vocab_size: V.
        num_experts, experts_per_token, num_moe_layers: MoE shape (0 for dense models).
        params: the exact ``ParamCount``.
        layer_params: parameters of each decoder layer in order (for the most-loaded pipeline stage).
        flop_params: parameters a text token's matmuls touch: the text model without the input
            embedding, counting only the activated experts (2 FLOP per parameter per token forward,
            4 backward).
        routed_expert_params: parameters of all routed experts (0 for dense models).
        layer_expert_params: routed-expert parameters of each layer (empty for dense models).
        max_position_embeddings: positions the model was trained for (None if the config has none).
        layers: one ``LayerSpec`` per decoder layer, in order (empty until every family fills it).
    """

    name: str
    family: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    kv_width: int
    num_full_attention_layers: int
    vocab_size: int
    params: ParamCount
    layer_params: tuple[int, ...]
    flop_params: int
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    num_moe_layers: int = 0
    routed_expert_params: int = 0
    layer_expert_params: tuple[int, ...] = ()
    max_position_embeddings: int | None = None
    layers: tuple[LayerSpec, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def _require(cfg: Mapping, key: str, where: str, default=None):
    if key not in cfg or (cfg[key] is None and default is not None):
        if default is None:
            raise ValueError(f"malformed config {where}: missing key '{key}'")
        return default
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"malformed config {where}: '{key}' must be a positive integer, got {value!r}")
    return value


def _get(cfg: Mapping, key: str, where: str, default=None):
    if key not in cfg:
        if default is None:
            raise ValueError(f"malformed config {where}: missing key '{key}'")
        return default
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"malformed config {where}: '{key}' must be a non-negative integer, got {value!r}")
    return value


def _build(name, family, comps, groups, extra=None, **shape) -> ModelSpec:
    components = {k: 0 for k in COMPONENT_KEYS}
    for k, v in comps.items():
        components[k] += v
    total = sum(components.values())
    assert total == sum(n * p for _, n, p in groups), (name, total, groups)
    pc = ParamCount(total, MappingProxyType(components), tuple(groups), MappingProxyType(dict(extra or {})))
    return ModelSpec(name=name, family=family, params=pc, **shape)


# ---------------------------------------------------------------- llama
def _llama(cfg: Mapping, name: str, where: str) -> ModelSpec:
    h = _require(cfg, "hidden_size", where)
    L = _require(cfg, "num_hidden_layers", where)
    a = _require(cfg, "num_attention_heads", where)
    kv = _require(cfg, "num_key_value_heads", where, a)
    d = _require(cfg, "head_dim", where, h // a if h >= a else 1)
    ffn = _require(cfg, "intermediate_size", where)
    V = _require(cfg, "vocab_size", where)
    tied = bool(cfg.get("tie_word_embeddings", False))
    attn_bias = bool(cfg.get("attention_bias", False))
    mlp_bias = bool(cfg.get("mlp_bias", False))

    attn = h * a * d + 2 * h * kv * d + a * d * h
    if attn_bias:
        attn += a * d + 2 * kv * d + h
    mlp = 3 * h * ffn + (2 * ffn + h if mlp_bias else 0)
    norms = 2 * h
    layer = attn + mlp + norms
    emb = V * h
    head = 0 if tied else V * h
    comps = dict(embedding=emb, head=head, attention=L * attn, mlp=L * mlp, norms=L * norms + h)
    groups = [("embedding", 1, emb), ("head", 1, head), ("layers", L, layer), ("final_norm", 1, h)]
    return _build(
        name, "llama", comps, groups,
        hidden_size=h, num_layers=L, num_attention_heads=a, num_key_value_heads=kv, head_dim=d,
        kv_width=2 * kv * d, num_full_attention_layers=L, vocab_size=V,
        layer_params=(layer,) * L, flop_params=L * layer + h + (V * h),
        max_position_embeddings=cfg.get("max_position_embeddings"),
    )


# ---------------------------------------------------------------- qwen3_5
def _qwen3_5(cfg: Mapping, name: str, where: str) -> ModelSpec:
    t = cfg.get("text_config", cfg)
    if not isinstance(t, Mapping):
        raise ValueError(f"malformed config {where}: 'text_config' must be an object")
    h = _require(t, "hidden_size", where)
    L = _require(t, "num_hidden_layers", where)
    a = _require(t, "num_attention_heads", where)
    kv = _require(t, "num_key_value_heads", where)
    d = _require(t, "head_dim", where)
    ffn = _require(t, "intermediate_size", where)
    V = _require(t, "vocab_size", where)
    tied = bool(t.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    gate = bool(t.get("attn_output_gate", False))
    layer_types = t.get("layer_types")
    if layer_types is None:
        interval = _require(t, "full_attention_interval", where)
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(L)]
    if not isinstance(layer_types, list) or len(layer_types) != L:
        raise ValueError(f"malformed config {where}: 'layer_types' must list {L} layer types")
    bad = sorted(set(layer_types) - {"full_attention", "linear_attention"})
    if bad:
        raise ValueError(f"malformed config {where}: unknown layer type {bad[0]!r}")

    mlp = 3 * h * ffn
    norms = 2 * h
    # full attention: q doubled when it also yields the output gate; q_norm and k_norm over head_dim
    full_mixer = h * a * d * (2 if gate else 1) + 2 * h * kv * d + a * d * h + 2 * d
    full_layer = full_mixer + mlp + norms
    # Gated DeltaNet
    nk = _get(t, "linear_num_key_heads", where, 0)
    nv = _get(t, "linear_num_value_heads", where, 0)
    dk = _get(t, "linear_key_head_dim", where, 0)
    dv = _get(t, "linear_value_head_dim", where, 0)
    conv_k = _get(t, "linear_conv_kernel_dim", where, 0)
    n_linear = layer_types.count("linear_attention")
    if n_linear and not (nk and nv and dk and dv and conv_k):
        raise ValueError(f"malformed config {where}: linear-attention layers need linear_num_key_heads, "
                         "linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim")
    qkv = 2 * nk * dk + nv * dv
    lin_mixer = (h * qkv            # in_proj_qkv
                 + h * nv * dv      # in_proj_z
                 + 2 * h * nv       # in_proj_a, in_proj_b
                 + qkv * conv_k     # depthwise conv1d, no bias
                 + 2 * nv           # dt_bias, A_log
                 + dv               # gated RMSNorm over the value head dim
                 + nv * dv * h)     # out_proj
    lin_layer = lin_mixer + mlp + norms
    n_full = L - n_linear

    emb = V * h
    head = 0 if tied else V * h
    comps = dict(embedding=emb, head=head, attention=n_full * full_mixer, linear_attention=n_linear * lin_mixer,
                 mlp=L * mlp, norms=L * norms + h)
    groups = [("embedding", 1, emb), ("head", 1, head),
              ("full_attention_layers", n_full, full_layer),
              ("linear_attention_layers", n_linear, lin_layer), ("final_norm", 1, h)]

    vis = cfg.get("vision_config")
    if vis is not None and not isinstance(vis, Mapping):
        raise ValueError(f"malformed config {where}: 'vision_config' must be an object")
    if vis is not None:
        vh = _require(vis, "hidden_size", where + " vision_config")
        vi = _require(vis, "intermediate_size", where + " vision_config")
        depth = _require(vis, "depth", where + " vision_config")
        patch = _require(vis, "patch_size", where + " vision_config")
        tpatch = _get(vis, "temporal_patch_size", where, 1)
        cin = _get(vis, "in_channels", where, 3)
        npos = _get(vis, "num_position_embeddings", where, 0)
        merge = _get(vis, "spatial_merge_size", where, 1)
        vout = _get(vis, "out_hidden_size", where, h)
        patch_embed = cin * tpatch * patch * patch * vh + vh
        pos_embed = npos * vh
        block = (2 * vh                      # norm1 (weight + bias)
                 + vh * 3 * vh + 3 * vh      # qkv with bias
                 + vh * vh + vh              # proj with bias
                 + 2 * vh                    # norm2
                 + vh * vi + vi + vi * vh + vh)  # MLP fc1, fc2 with biases
        mh = vh * merge * merge
        merger = 2 * vh + mh * mh + mh + mh * vout + vout
        vision = patch_embed + pos_embed + depth * block + merger
        comps["vision"] = vision
        groups.append(("vision_tower", 1, vision))
    n_mtp = _get(t, "mtp_num_hidden_layers", where, 0)
    if n_mtp:
        mtp = 2 * h * h + 3 * h + n_mtp * full_layer
        comps["mtp"] = mtp
        groups.append(("mtp", 1, mtp))

    layer_params = tuple(full_layer if lt == "full_attention" else lin_layer for lt in layer_types)
    return _build(
        name, "qwen3_5", comps, groups,
        hidden_size=h, num_layers=L, num_attention_heads=a, num_key_value_heads=kv, head_dim=d,
        kv_width=2 * kv * d, num_full_attention_layers=n_full, vocab_size=V,
        layer_params=layer_params, flop_params=sum(layer_params) + h + V * h,
        linear_num_key_heads=nk, linear_num_value_heads=nv,
        max_position_embeddings=t.get("max_position_embeddings"),
    )


# ---------------------------------------------------------------- deepseek_v3
def _deepseek_v3(cfg: Mapping, name: str, where: str) -> ModelSpec:
    h = _require(cfg, "hidden_size", where)
    L = _require(cfg, "num_hidden_layers", where)
    a = _require(cfg, "num_attention_heads", where)
    ffn = _require(cfg, "intermediate_size", where)
    V = _require(cfg, "vocab_size", where)
    q_rank = _get(cfg, "q_lora_rank", where, 0)
    kv_rank = _require(cfg, "kv_lora_rank", where)
    nope = _require(cfg, "qk_nope_head_dim", where)
    rope = _require(cfg, "qk_rope_head_dim", where)
    vd = _require(cfg, "v_head_dim", where)
    E = _require(cfg, "n_routed_experts", where)
    k = _require(cfg, "num_experts_per_tok", where)
    shared = _get(cfg, "n_shared_experts", where, 0)
    moe_ffn = _require(cfg, "moe_intermediate_size", where)
    first_dense = _get(cfg, "first_k_dense_replace", where, 0)
    freq = _get(cfg, "moe_layer_freq", where, 1)
    n_mtp = _get(cfg, "num_nextn_predict_layers", where, 0)
    tied = bool(cfg.get("tie_word_embeddings", False))

    if q_rank:
        q = h * q_rank + q_rank + q_rank * a * (nope + rope)
    else:
        q = h * a * (nope + rope)
    attn = q + h * (kv_rank + rope) + kv_rank + kv_rank * a * (nope + vd) + a * vd * h
    norms = 2 * h
    dense_mlp = 3 * h * ffn
    expert = 3 * h * moe_ffn
    router = E * h + E  # gate weight + e_score_correction_bias
    moe_shared = shared * expert
    dense_layer = attn + dense_mlp + norms
    moe_layer = attn + router + moe_shared + E * expert + norms
    is_moe = [i >= first_dense and (i - first_dense) % freq == 0 for i in range(L)]
    n_moe = sum(is_moe)
    n_dense = L - n_moe
    emb = V * h
    head = 0 if tied else V * h
    comps = dict(embedding=emb, head=head, attention=L * attn,
                 mlp=n_dense * dense_mlp + n_moe * (router + moe_shared),
                 routed_experts=n_moe * E * expert, norms=L * norms + h)
    groups = [("embedding", 1, emb), ("head", 1, head), ("dense_layers", n_dense, dense_layer),
              ("moe_layers", n_moe, moe_layer), ("final_norm", 1, h)]
    # MTP module (not in the paper's 671B): enorm, hnorm, eh_proj 2h->h, one MoE layer, shared_head norm.
    extra = {"mtp": n_mtp * (2 * h + 2 * h * h + moe_layer + h)} if n_mtp else {}
    layer_params = tuple(moe_layer if m else dense_layer for m in is_moe)
    activated_moe = attn + router + moe_shared + k * expert + norms
    flop = n_dense * dense_layer + n_moe * activated_moe + h + V * h
    return _build(
        name, "deepseek_v3", comps, groups, extra,
        hidden_size=h, num_layers=L, num_attention_heads=a, num_key_value_heads=a, head_dim=nope + rope,
        kv_width=a * (nope + rope) + a * vd, num_full_attention_layers=L, vocab_size=V,
        layer_params=layer_params, flop_params=flop, num_experts=E, experts_per_token=k,
        num_moe_layers=n_moe, routed_expert_params=n_moe * E * expert,
        layer_expert_params=tuple(E * expert if m else 0 for m in is_moe),
        max_position_embeddings=cfg.get("max_position_embeddings"),
    )


# ---------------------------------------------------------------- gpt2
def _gpt2(cfg: Mapping, name: str, where: str) -> ModelSpec:
    h = _require(cfg, "n_embd", where)
    L = _require(cfg, "n_layer", where)
    a = _require(cfg, "n_head", where)
    V = _require(cfg, "vocab_size", where)
    P = _require(cfg, "n_positions", where)
    ffn = _require(cfg, "n_inner", where, 4 * h)
    bias = bool(cfg.get("bias", True))
    norm = cfg.get("norm", "layernorm")
    if norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"malformed config {where}: 'norm' must be 'layernorm' or 'rmsnorm', got {norm!r}")
    if h % a:
        raise ValueError(f"malformed config {where}: n_head={a} does not divide n_embd={h}")
    tied = bool(cfg.get("tie_word_embeddings", True))
    norm_p = h * (2 if (norm == "layernorm" and bias) else 1)
    attn = 4 * h * h + (4 * h if bias else 0)
    mlp = 2 * h * ffn + ((ffn + h) if bias else 0)
    layer = attn + mlp + 2 * norm_p
    emb = V * h + P * h
    head = 0 if tied else V * h
    comps = dict(embedding=emb, head=head, attention=L * attn, mlp=L * mlp, norms=L * 2 * norm_p + norm_p)
    groups = [("embedding", 1, V * h), ("position_embedding", 1, P * h), ("head", 1, head),
              ("layers", L, layer), ("final_norm", 1, norm_p)]
    return _build(
        name, "gpt2", comps, groups,
        hidden_size=h, num_layers=L, num_attention_heads=a, num_key_value_heads=a, head_dim=h // a,
        kv_width=2 * h, num_full_attention_layers=L, vocab_size=V,
        layer_params=(layer,) * L, flop_params=L * layer + norm_p + V * h, max_position_embeddings=P,
    )


_FAMILIES = {"llama": _llama, "qwen3_5": _qwen3_5, "deepseek_v3": _deepseek_v3, "gpt2": _gpt2}


def model_from_config(cfg: Mapping, name: str = "custom", where: str | None = None) -> ModelSpec:
    """Build a ``ModelSpec`` from a parsed Hugging Face ``config.json`` (a dict).

    Raises ValueError naming the missing or bad key, or the unsupported ``model_type``.
    """
    where = where or f"'{name}'"
    if not isinstance(cfg, Mapping):
        raise ValueError(f"malformed config {where}: expected a JSON object")
    mtype = cfg.get("model_type")
    if mtype not in _FAMILIES:
        raise ValueError(f"unsupported model_type {mtype!r} in {where}; supported: {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[mtype](cfg, name, where)


def available_models() -> list[str]:
    """File stems of the model configs shipped in ``data/models/``."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a model by file stem in ``data/models/`` (e.g. ``"qwen3.8-27b"``) or by path to a config.json.

    Raises ValueError for an unknown name, an unreadable file, invalid JSON or a malformed config.
    """
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path)
    path = MODELS_DIR / f"{text}.json"
    if not path.is_file():
        path = Path(text)
        if not path.is_file():
            raise ValueError(f"unknown model {text!r}: not a file and not one of {', '.join(available_models())}")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read model config {str(path)!r}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed config {str(path)!r}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    stem = path.stem if path.name != "config.json" else path.parent.name or "config"
    return model_from_config(cfg, name=stem, where=repr(str(path)))
