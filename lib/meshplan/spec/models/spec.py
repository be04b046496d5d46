"""The frozen descriptions a loaded model is turned into: ``LayerSpec`` (one decoder layer), ``ParamCount`` (the
exact count with its breakdowns) and ``ModelSpec`` (the model as the parallelism formulas need it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType

COMPONENT_KEYS = (
    "embedding",  # input token embedding (and learned positions for gpt2)
    "head",  # output projection (0 when tied to the embedding)
    "attention",  # softmax-attention mixers (q, k, v, o, their biases and norms; MLA for DeepSeek)
    "linear_attention",  # Gated DeltaNet mixers (qwen3_5)
    "mlp",  # dense MLPs, shared experts (and their gates) and MoE routers
    "routed_experts",  # routed expert MLPs (MoE)
    "norms",  # per-layer and final norms
    "vision",  # vision tower and its projector (qwen3_5, gemma3)
    "mtp",  # multi-token-prediction module (qwen3_5; DeepSeek-V3's is in ``extra``)
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


# The norm modules of a decoder layer, named and ordered as transformers registers them, by ``norm_position``
# (``Olmo2DecoderLayer``: post; ``Gemma2DecoderLayer``/``Gemma3DecoderLayer``: sandwich; the others: pre).
# GPT-2's layer norms are ``ln_1`` and ``ln_2`` instead.
NORM_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "pre": ("input_layernorm", "post_attention_layernorm"),
        "post": ("post_attention_layernorm", "post_feedforward_layernorm"),
        "sandwich": (
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ),
    }
)


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer, as the per-layer formulas (TP splits, activations, EP, pipeline stages) need it.

    Every field is read from the config, never assumed; a field that does not apply keeps its default.
    ``meshplan.spec.models.count.layer_params`` turns a ``LayerSpec`` (and the hidden size) into its exact parameter
    count: the fields below are all that count needs.

    Attributes:
        mixer: ``"attention"`` (softmax attention over heads; full or sliding-window), ``"mla"`` (DeepSeek's
            multi-head latent attention) or ``"linear_attention"`` (Gated DeltaNet: a fixed-size state).
        sliding_window: tokens a query attends to in a sliding-window layer; ``None`` for full attention.
        num_heads, num_kv_heads, head_dim: query heads, KV heads and the query/key head width.
        v_head_dim: value head width (= head_dim except for MLA).
        qk_norm: RMSNorm on q and k before the dot product.
        qk_norm_scope: ``"head"`` (one weight of head_dim shared by the heads: Qwen3, Gemma 3, Qwen3.5) or
            ``"projection"`` (over the whole q and k projections: OLMo 2); ``""`` without q/k norms.
        qk_norm_width: elements of the q norm's weight (head_dim, or heads × head_dim for ``"projection"``; the
            k norm then holds KV heads × head_dim).
        qkv_bias, o_bias: biases of the q/k/v projections and of the output projection (for MLA: of the q_a and
            kv_a down-projections, and of o_proj).
        output_gate: the query projection also produces a sigmoid gate on the attention output (Qwen3.5).
        attn_logit_softcapping: tanh cap on the attention logits (Gemma 2), ``None`` if none.
        q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim: MLA's low-rank shapes (0 if not MLA;
            q_lora_rank 0 means an uncompressed q projection).
        linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
        linear_conv_kernel: Gated DeltaNet's shape (0 if not linear attention).
        mlp: ``"gated"`` (gate and up projections, SwiGLU/GeGLU) or ``"plain"`` (up, activation, down).
        activation: the config's activation name (``"silu"``, ``"gelu_pytorch_tanh"``, ``"gelu_new"``, ...).
        intermediate_size: width of the dense MLP (or of each routed expert in a MoE layer: see below).
        mlp_bias: biases in the dense MLP.
        num_experts, experts_per_token, expert_intermediate_size: the routed experts (0 for a dense layer).
        num_shared_experts, shared_intermediate_size: always-active shared experts (total width of the shared MLP).
        shared_mlp_bias: biases in the shared-expert MLP (DeepSeek-V2 with ``mlp_bias``).
        shared_expert_gate: a sigmoid gate (a hidden → 1 projection) on the shared experts' output (Qwen2-MoE,
            Qwen3.5-MoE).
        router_bias: the router carries a per-expert bias (DeepSeek-V3's e_score_correction_bias).
        norm: ``"rmsnorm"`` or ``"layernorm"``; norm_bias: the layer norms carry a bias.
        norms_per_layer: 2 or 4 (Gemma 2/3's sandwich norms).
        norm_position: ``"pre"`` (norm before each block), ``"sandwich"`` (before and after: Gemma 2/3) or
            ``"post"`` (after each block, on its output: OLMo 2).
        params: parameters of the whole layer; expert_params: of its routed experts.
    """

    mixer: str = "attention"
    sliding_window: int | None = None
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    qk_norm: bool = False
    qk_norm_scope: str = ""
    qk_norm_width: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    output_gate: bool = False
    attn_logit_softcapping: float | None = None
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
    shared_mlp_bias: bool = False
    shared_expert_gate: bool = False
    router_bias: bool = False
    norm: str = "rmsnorm"
    norm_bias: bool = False
    norms_per_layer: int = 2
    norm_position: str = "pre"
    params: int = 0
    expert_params: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def activated_params(self) -> int:
        """Parameters one token's matmuls touch in this layer: all but the routed experts it is not sent to."""
        if not self.num_experts:
            return self.params
        return self.params - self.expert_params + self.experts_per_token * (self.expert_params // self.num_experts)


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a model as the parallelism formulas need it (all sizes are counts, not bytes).

    Attributes:
        name: file stem or a label.
        family: the config's ``model_type`` (``llama``, ``mistral``, ``qwen3_moe``, ``deepseek_v3``, ...; see
            ``meshplan.spec.model.FAMILIES``).
        hidden_size: h, the residual-stream width.
        num_layers: L, the decoder layers of the text model (MTP and vision excluded).
        num_attention_heads: a, query heads of the softmax-attention layers.
        num_key_value_heads: KV heads of the softmax-attention layers (= a for MHA and MLA).
        head_dim: width of one query head.
        kv_width: elements of K plus V per token per softmax-attention layer (all heads).
        num_full_attention_layers: layers with softmax attention, whose K and V context parallelism exchanges;
            sliding-window layers count too (the all-gather and ring implementations move the whole sequence's
            K and V whatever the window: ``layers[i].sliding_window`` says which are windowed). Linear-attention
            layers carry a fixed-size state instead and do not count.
        linear_num_key_heads, linear_num_value_heads: Gated DeltaNet heads (0 if none).
        vocab_size: V.
        num_experts, experts_per_token, num_moe_layers: MoE shape (0 for dense models).
        params: the exact ``ParamCount``.
        layer_params: parameters of each decoder layer in order (for the most-loaded pipeline stage).
        flop_params: parameters a text token's matmuls touch: the text model without the input
            embedding, counting only the activated experts (routed top-k plus shared); the output head counts
            even when tied (2 FLOP per parameter per token forward, 4 backward).
        routed_expert_params: parameters of all routed experts of the decoder layers (0 for dense models).
        layer_expert_params: routed-expert parameters of each layer (empty for dense models).
        max_position_embeddings: positions the model was trained for (None if the config has none).
        layers: one ``LayerSpec`` per decoder layer, in order.
        tie_word_embeddings: the output head shares the input embedding's weight.
        position_embedding: ``"rope"`` or ``"learned"`` (gpt2: a position table inside ``embedding``).
        final_norm: ``"rmsnorm"`` or ``"layernorm"`` (the norm before the head; its size is in ``norms``).
        final_logit_softcapping: tanh cap on the output logits (Gemma 2), ``None`` if none.
        num_mtp_layers: decoder layers of the multi-token-prediction module (0 if none).
        rope_theta, rotary_fraction, norm_eps: the rotary base, the fraction of each head's width that rotates and the
            norms' epsilon, read from the config (None when it has none); an export needs them.
        estimated: names of the fields that are estimates rather than exact counts (empty for the analytic
            families; the transformers fallback for other families fills it).
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
    tie_word_embeddings: bool = False
    position_embedding: str = "rope"
    final_norm: str = "rmsnorm"
    final_logit_softcapping: float | None = None
    num_mtp_layers: int = 0
    estimated: tuple[str, ...] = ()
    rope_theta: float | None = None
    rotary_fraction: float = 1.0
    norm_eps: float | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def activated_params(self) -> int:
        """Parameters a token activates, the model cards' convention: ``flop_params`` (the text model's matmuls,
        the activated experts only, the output head) plus the input embedding, counted once when it is tied to the
        head.

            >>> from meshplan import load_model
            >>> load_model("qwen3-30b-a3b").activated_params
            3353032704
        """
        return self.flop_params + (0 if self.tie_word_embeddings else self.params.components["embedding"])

    # Hashed once: the caches of the formulas (stage tables, layer work, activation bytes) are keyed on the model,
    # and hashing its ~100 LayerSpecs costs about 70 µs (Llama 3.1 405B's 126), more than a plan's evaluation.
    # Every field but ``params``, whose mappings are not hashable, and its total: equal specs hash equal.
    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.params.total, *(getattr(self, f.name) for f in fields(self) if f.name != "params")))
