"""The engine activation ledger: what autograd saves for backward, per layer type, term by term (issue 11).

Definition (the ``fsdp2`` accounting): the bytes of the tensors autograd saves for backward when the model is the
pinned ``transformers`` 5.23.0 implementation of its family (torch 2.13.0), in bf16, SDPA attention, dropout
off; each storage counted once, parameters excluded, logits and loss included. ``meshplan.realrun.measure`` measures it
on a CPU; ``tests/test_engine_activations.py`` holds these formulas to the measurement within 3 % for every
family (in practice they match to the byte). The lab page's ledger (``meshplan.parallel.activations``, Korthikanti's GPT
layer) is a different convention and stays as it is.

Each function returns named terms (bytes, floats) grouped like the measurement: per decoder layer the parts
``norms``, ``mixer`` (attention, MLA or Gated DeltaNet), ``mlp`` (dense MLP or MoE) and ``layer`` (the input a
full-recompute checkpoint keeps); outside the layers ``embedding``, ``rotary``, ``shared``, ``final_norm``,
``head``, ``logits``, ``loss``. Notation: b micro-batch, s sequence, T = b·s tokens, h hidden size, a query heads,
kv KV heads, d head dim, f MLP width, V vocabulary; "bf16" tensors take 2 bytes an element.

What is saved, with its source (transformers 5.23.0, ``transformers/models/<family>/modeling_<family>.py``
unless named otherwise; llama's lines stand for the families that copy them):

* Linear layers save their input (``MmBackward0.self``; ``AddmmBackward0.mat1`` with a bias), never their output:
  the input of q/k/v (or of a fused qkv), of o_proj, of gate/up and of down. Inputs shared by several projections
  (q, k, v read the same norm output) are one storage.
* RMSNorm, three implementations. Llama-style (``llama`` 62-66, also mistral, mixtral, qwen2, qwen2_moe, qwen3,
  qwen3_moe, phi3, deepseek_v2/v3): ``x.to(float32)`` is saved by ``pow`` and ``mul`` (4 bytes an element), the
  rsqrt (4 bytes a row), and the normalized x cast back to bf16 for the weight's gradient (2 bytes an element).
  OLMo 2 (``olmo2`` 64, ``(weight * x̂).to(bf16)``): the normalized x stays fp32 (4 bytes). Zero-centred
  (``gemma2`` 57-62, gemma3, qwen3_5, qwen3_5_moe: ``x̂ * (1 + weight.float())``): x̂ in fp32 and the fp32
  vector ``1 + weight`` (4 bytes a channel, per call, batch-independent). LayerNorm (GPT-2, ``native_layer_norm``):
  its bf16 input and the mean and rstd (bf16 on the CPU; fp32, 4 bytes, on CUDA).
* Rotary embeddings (``llama`` 145-149): ``q * cos`` and ``rotate_half(q) * sin`` save only cos and sin, which the
  model computes once (``rotary_emb``): a model-level term, ``2 · s · rotary_dim`` elements, bf16 (OLMo 2 keeps
  them fp32, ``olmo2`` 113; Qwen3.5's multimodal rotary carries the batch: ``2 · b · s · rotary_dim``;
  DeepSeek-V2 one complex64 table of ``s · rotary_dim / 2``; Gemma 3 one pair per layer type). The rotated q and k
  are new tensors that attention saves. Phi-3 (``phi3`` 184) and Qwen3.5 (partial rotary) build them with
  ``torch.cat``, which makes them head-major, so the CPU SDPA output is head-major too and
  ``sdpa_attention_forward``'s ``transpose(1, 2).contiguous()`` (integrations/sdpa_attention.py:206) copies it:
  one more ``a·d`` per token. CUDA kernels return a token-major output and skip that copy (``device="cuda"``).
* SDPA (integrations/sdpa_attention.py:95-208): GQA stays at kv heads (``enable_gqa``) when there is no mask and
  d = d_v <= 256 (``use_gqa_in_sdpa``, line 43); otherwise ``repeat_kv`` copies k and v to a heads (line 137). A
  mask exists only for a sliding window with s >= window (masking_utils.py:301); the CPU kernel saves it converted
  to bf16, ``b · s²`` per layer. The CPU flash kernel (equal head dims) saves q, k, v, the output and an fp32
  logsumexp (``4·a`` per token); with unequal head dims (MLA) the CPU runs the math kernel, which saves q, k (after
  scaling) and v in fp32 and the fp32 softmax, ``4 · b · a · s²``. On CUDA MLA takes the memory-efficient kernel:
  q, k, v, output and a logsumexp padded to 32 rows (``device="cuda"``, a convention, not measured here).
* Eager attention (``llama`` 180-202; gemma2 176-207 adds the softcap ``tanh``, saving it in bf16; gpt2 54-72
  keeps the softmax in bf16): q, k and v as reshaped for the matmuls (k and v repeated to a heads; ``torch.matmul``
  folds (b, heads) into one dimension, a copy unless b = 1, when without GQA the inputs' own storages are saved,
  all of MLA's kv_b output for v), the fp32 softmax (4 bytes a score), its bf16 cast that multiplies v (2 bytes a
  score), and the output transposed to the token-major layout (a copy that o_proj saves). The mask is added, which
  saves nothing. 6 bytes a score in all, 8 with Gemma 2's softcap, 2 for GPT-2, against Korthikanti's 5.
* Output gate (Qwen3.5, ``qwen3_5`` 811): ``attn_output * sigmoid(gate)`` saves the sigmoid and the attention
  output, and o_proj saves the product.
* MLA (``deepseek_v3`` 426-483): the q_a/kv_a projections read the layer's norm output; q_a_layernorm and
  kv_a_layernorm (Llama-style RMSNorm at the LoRA ranks); the q_b/kv_b inputs; q is a ``torch.cat``, k a new
  tensor, v a view of the kv_b output (so that whole storage, ``a·(d_nope + d_v)``, is what SDPA keeps).
* Gated DeltaNet (``qwen3_5`` 499-656), the reference PyTorch path that runs without ``flash-linear-attention``
  and ``causal-conv1d`` (neither is installed here, nor pinned): the conv input, the conv output before its
  causal slice (``s + K − 1`` positions, line 265-271), sigmoid(b), the softplus input and output (fp32), and in
  ``torch_chunk_gated_delta_rule`` (lines 286-424, chunk C = 64, the sequence padded to S = ⌈s/C⌉·C) the fp32
  copies of q, k after l2norm, of v and beta, the k·beta product, five C-wide chunk matrices per head (decay,
  k·βkᵀ, qkᵀ, the UT system, the intra-chunk attention), the two triangular-solve results, three decay
  exponentials, the decayed q and k, and per chunk the recurrent state (``nv·dk·dv`` fp32) and v_new (with a
  single chunk the state update is dead code and the first state is a constant zero: the decayed q and k, the
  chunk decay and one exponential are then not saved); then the gated RMSNorm (lines
  210-219: fp32 input and gate, silu(gate) in fp32, two bf16 products) and out_proj's input. fla's fused kernels
  save far less: this ledger is the reference path's, not a GPU run's.
* MLP (``llama`` 164): the gate output (the activation's input), the up output, the activation output and their
  product (down's input): ``8·f`` bytes a token with SiLU or GeLU (``GELUTanh``). GPT-2's ``gelu_new`` is written
  in Python (activations.py:66) and saves x, tanh(...), 0.5·x and 1 + tanh(...): three more ``2f`` tensors.
* MoE (the default ``grouped_mm`` experts, integrations/moe.py:424-537; routers: ``mixtral`` 103-110,
  ``qwen2_moe`` 319-328, ``deepseek_v2`` 96-116, ``deepseek_v3`` 133-160): the router's fp32 softmax (or
  sigmoid) over E experts, the top-k indices (int64), the top-k values and their sum when normalized (fp32);
  DeepSeek's router also saves an fp32 copy of its input (``4h`` a token) and of its weight (``4·E·h``). For each
  of the T·k dispatched tokens: the gathered copy of the token (``2h``), the expert gate/up output (``4·f_e``),
  the activation output and the product (``2·f_e`` each), the routing weight (fp32 for Mixtral and DeepSeek, bf16
  for Qwen), the expert output weighted by it (``2h``) and three int64 index vectors; 4 bytes an expert of offsets.
  Shared experts are a dense MLP; Qwen's shared-expert gate saves its sigmoid and the shared output.
* Model level: the token ids (int64, saved by the embedding; GPT-2 also its position ids, Gemma its scale), the
  final norm, lm_head's input, the logits kept for the loss (``loss_utils.py`` 61: ``logits.float()``, then
  ``cross_entropy`` saves ``log_softmax``'s fp32 output, ``4·T·V``; Gemma 2's final softcap also saves a bf16
  ``tanh``, ``gemma2`` 518-521), and ``nll_loss``'s int64 targets (the labels padded to s + 1 and sliced,
  loss_utils.py:65-66: with b = 1 the slice is contiguous and the padded storage is what is kept) and fp32
  ``total_weight``. The bf16 logits the
  forward returns (``2·T·V``) are held by the caller, not by autograd: ``output_logits`` reports them apart.

Recompute (what is kept; ``meshplan.realrun.measure`` measures all three with reentrant ``torch.utils.checkpoint``):

* ``"none"``: everything above.
* ``"selective"``: the attention core is recomputed, Megatron-LM's ``--recompute-granularity selective``
  applied to the ``transformers`` code: the attention-interface call (SDPA or eager, from q, k, v after rotary to
  the output before o_proj) and ``torch_chunk_gated_delta_rule``. Dropped: everything they save inside (SDPA's
  logsumexp, repeated k/v, converted mask, fp32 math copies and softmax; eager's scores, softmax and
  probabilities; the whole chunked delta rule). Kept in their place: their inputs (q, k, v at kv heads, the
  model's mask once; Gated DeltaNet's conv output and g) and their output (which o_proj or the gate saves).
* ``"full"``: each decoder layer keeps only its input, ``2·T·h`` (``transformers``' ``GradientCheckpointingLayer``,
  modeling_layers.py:54-123, checkpoints ``partial(forward, self, **kwargs)`` with the hidden states as its only
  argument); the rotary tables are then held by that closure, not saved by autograd.

Device: ``device="cpu"`` (the default) is what ``meshplan.realrun.measure`` measures. ``device="cuda"`` changes three
things, from the kernels' documented behaviour, not measured here (no GPU): the SDPA output is token-major, so the
transposed copy above disappears; MLA (unequal head dims) runs the memory-efficient kernel, which saves bf16 q, k,
v, the output and an fp32 logsumexp padded to 32 rows instead of the math kernel's fp32 copies and s² softmax
(so does a layer with a materialized sliding-window mask); LayerNorm keeps its mean and rstd in fp32. Everything
else (Gated DeltaNet's reference path included) is the same.

Tensor parallelism (``tp > 1``): a documented convention, Megatron-LM's sharding, not a measurement. Each term is
token-wise (``seq``: norms, the inputs of column-parallel projections, the residual stream, the router: divided by
t only with sequence parallelism, whose linear layers save their sequence shard and gather it again in backward),
head- or channel-wise (``width``: q, k, v, attention cores and scores, o_proj/down inputs, MLP and expert
intermediates, Gated DeltaNet heads, vocab-parallel logits: always divided by t), or replicated (``none``: token
ids and targets, batch-independent constants, the gathered tokens of the experts and their outputs, since Megatron's
MoE dispatcher gathers the sequence shards within the TP group before the experts). Expert parallelism is not
modelled here. ``sp`` defaults to ``tp > 1``.

Example: a Llama-3.1-70B layer saves 48.5 bytes per s·b·h element with SDPA (the lab ledger: 34 + 5as/h):

    >>> from meshplan.spec.model import LayerSpec
    >>> llama = LayerSpec(num_heads=64, num_kv_heads=8, head_dim=128, v_head_dim=128, intermediate_size=28672)
    >>> round(layer_bytes(llama, 8192, 4096, 1, family="llama") / (4096 * 8192), 2)
    48.53
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from meshplan.core.units import add_up
from meshplan.core.validation import check_count
from meshplan.spec.model import LayerSpec, ModelSpec
from meshplan.spec.models.spec import NORM_NAMES

ATTENTIONS = ("sdpa", "eager", "unfused")
RECOMPUTE_MODES = ("none", "selective", "full", "op")
# The kernel paths: "cpu" (what ``meshplan.realrun.measure`` measures) and "cuda" (SDPA's CUDA kernels), each
# with dropout off; "cuda-unfused" is Megatron-Core's unfused core attention (``--attention-backend unfused``, or
# ``--transformer-impl local``: ``_megatron_unfused``); "+dropout" adds the dropout masks Megatron's default
# ``--attention-dropout 0.1 --hidden-dropout 0.1`` keeps (``_hidden_dropout``; in the unfused core, its mask and
# output).
DEVICES = ("cpu", "cuda", "cuda+dropout", "cuda-unfused", "cuda-unfused+dropout")
GDN_CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size (modeling_qwen3_5.py:292)
LSE_ALIGN_CUDA = 32  # memory-efficient attention pads its logsumexp rows to 32 (a convention, not measured)
# saved copies of the activation's input width beyond the input itself (measured: silu, gelu_pytorch_tanh, gelu_new)
ACTIVATION_EXTRA_SAVES = {"silu": 0, "swish": 0, "gelu": 0, "gelu_pytorch_tanh": 0, "gelu_new": 3}
_GELU_NEW_EXTRAS = ("tanh(...)", "0.5·x", "1 + tanh(...)")


@dataclass(frozen=True)
class Term:
    """One saved tensor (or group of same-shaped tensors) of the ledger.

    Attributes:
        name: what it is, e.g. ``"sdpa: logsumexp (fp32)"``.
        part: ``norms`` | ``mixer`` | ``mlp`` | ``layer`` inside a layer; a model-level bucket outside.
        nbytes: bytes for one micro-batch on one GPU (after the tensor-parallel split).
        split: ``seq`` | ``width`` | ``none``: how tensor parallelism divides it (see the module docstring).
    """

    name: str
    part: str
    nbytes: float
    split: str = "seq"


@dataclass(frozen=True)
class _Saved:
    name: str
    part: str
    nbytes: float
    split: str
    when: str = "always"  # "always" | "not_selective" (inside the recomputed core) | "selective" (its kept inputs)


@dataclass(frozen=True)
class Implementation:
    """How a family's ``transformers`` 5.23.0 code computes what it saves, where families differ.

    Attributes:
        family: the ``model_type``.
        norm: ``cast_then_scale`` (Llama), ``scale_in_fp32`` (OLMo 2), ``zero_centered`` (Gemma, Qwen3.5) or
            ``layernorm`` (GPT-2).
        rotary: dtype of the saved cos/sin: ``bf16``, ``fp32`` (OLMo 2), ``complex64`` (DeepSeek-V2) or ``none``.
        rotary_per_sample: cos/sin carry the batch dimension (Qwen3.5's multimodal rotary).
        rotary_per_layer_type: one cos/sin pair per attention layer type (Gemma 3).
        rotary_cat: the rotated q and k come out of ``torch.cat`` (head-major: the CPU SDPA output is copied).
        partial_rotary_factor: fraction of the head dim that rotates.
        qkv: ``separate``; ``fused_v_view`` (Phi-3: v is a view of the fused qkv output); ``fused_views`` (GPT-2:
            q, k, v are all views of ``c_attn``'s output, no rotary).
        sdpa: the family supports SDPA (Gemma 2 does not).
        eager_softmax_fp32: eager attention's softmax runs in fp32 then is cast to bf16 (all but GPT-2).
        final_softcap: Gemma 2's tanh softcapping of the logits (the scores' softcap is ``LayerSpec``'s
            ``attn_logit_softcapping``).
        embed_scale, learned_positions: Gemma's embedding scale; GPT-2's position embedding.
        router: ``softmax`` (Mixtral, Qwen), ``softmax_fp32`` (DeepSeek-V2: fp32 copies of input and weight),
            ``sigmoid_fp32`` (DeepSeek-V3).
        routing_weight_bytes: dtype of the routing weights the experts multiply by (4 fp32, 2 bf16).
        norm_topk_prob: the top-k weights are renormalized (a division that saves both operands).
        group_limited: DeepSeek-V2's ``group_limited_greedy`` routing (saves a bool mask over the experts).
    """

    family: str
    norm: str = "cast_then_scale"
    rotary: str = "bf16"
    rotary_per_sample: bool = False
    rotary_per_layer_type: bool = False
    rotary_cat: bool = False
    partial_rotary_factor: float = 1.0
    qkv: str = "separate"
    sdpa: bool = True
    eager_softmax_fp32: bool = True
    final_softcap: bool = False
    embed_scale: bool = False
    learned_positions: bool = False
    router: str = "softmax"
    routing_weight_bytes: int = 2
    norm_topk_prob: bool = False
    group_limited: bool = False


_QWEN3_5: dict[str, Any] = {
    "norm": "zero_centered",
    "rotary_per_sample": True,
    "rotary_cat": True,
    "partial_rotary_factor": 0.25,
}
FAMILIES: Mapping[str, Implementation] = MappingProxyType(
    {
        impl.family: impl
        for impl in (
            Implementation("llama"),
            Implementation("mistral"),
            Implementation("qwen2"),
            Implementation("qwen3"),
            Implementation("mixtral", routing_weight_bytes=4, norm_topk_prob=True),
            Implementation("qwen2_moe"),
            Implementation("qwen3_moe", norm_topk_prob=True),
            Implementation("qwen3_5", **_QWEN3_5),
            Implementation("qwen3_5_moe", **_QWEN3_5, norm_topk_prob=True),
            Implementation("gemma2", norm="zero_centered", sdpa=False, final_softcap=True, embed_scale=True),
            Implementation("gemma3_text", norm="zero_centered", rotary_per_layer_type=True, embed_scale=True),
            Implementation("phi3", rotary_cat=True, qkv="fused_v_view"),
            Implementation("olmo2", norm="scale_in_fp32", rotary="fp32"),
            Implementation(
                "deepseek_v2", rotary="complex64", router="softmax_fp32", routing_weight_bytes=4, group_limited=True
            ),
            Implementation("deepseek_v3", router="sigmoid_fp32", routing_weight_bytes=4, norm_topk_prob=True),
            Implementation(
                "gpt2",
                norm="layernorm",
                rotary="none",
                qkv="fused_views",
                eager_softmax_fp32=False,
                learned_positions=True,
            ),
        )
    }
)
_ALIASES = {"gemma3": "gemma3_text", "qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}
# per-family facts that follow each model's config: (config key, Implementation field, how to read it)
_CONFIG_FLAGS = (
    ("norm_topk_prob", "norm_topk_prob", bool),
    ("final_logit_softcapping", "final_softcap", lambda v: v is not None),
    ("topk_method", "group_limited", lambda v: v == "group_limited_greedy"),
)
# fields a family's code fixes whatever its config says (mixtral 108 and qwen3_5_moe 885 always renormalize the
# top-k weights; deepseek_v2 96-116 never does, although its config carries norm_topk_prob)
_FIXED = {"mixtral": {"norm_topk_prob"}, "qwen3_5_moe": {"norm_topk_prob"}, "deepseek_v2": {"norm_topk_prob"}}


def implementation(family: str, config: Mapping[str, Any] | None = None) -> Implementation:
    """The ``Implementation`` of a family, its config-dependent choices read from ``config`` when given.

    Without a config the family's defaults describe its flagship checkpoints (Qwen3.5: partial rotary 0.25;
    Gemma 2: final softcap; DeepSeek-V2: group-limited routing; Qwen3-MoE and DeepSeek-V3: normalized top-k).
    Config keys read: ``norm_topk_prob``, ``final_logit_softcapping``, ``topk_method``,
    ``partial_rotary_factor`` (also inside ``rope_parameters``); a multimodal config's ``text_config`` is used.

        >>> implementation("qwen2_moe", {"norm_topk_prob": True}).norm_topk_prob
        True
    """
    key = _ALIASES.get(family, family)
    if key not in FAMILIES:
        raise ValueError(f"family={family!r} is not modelled; known: {', '.join(sorted(FAMILIES))}")
    impl = FAMILIES[key]
    if config is None:
        return impl
    cfg = config.get("text_config", config) if isinstance(config.get("text_config"), Mapping) else config
    changes: dict[str, Any] = {
        field_name: read(cfg[cfg_key])
        for cfg_key, field_name, read in _CONFIG_FLAGS
        if cfg_key in cfg and field_name not in _FIXED.get(key, ())
    }
    rope = cfg.get("rope_parameters") or {}
    factor = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor") if isinstance(rope, Mapping) else None)
    if factor is not None and impl.rotary != "none":
        changes["partial_rotary_factor"] = float(factor)
    return replace(impl, **changes)


def _attention_kind(impl: Implementation, device: str) -> str:
    """The attention a kernel path runs: Megatron's unfused core on ``cuda-unfused``, else SDPA, or eager for a
    family without SDPA in transformers 5.23.0 (Gemma 2)."""
    if device.startswith("cuda-unfused"):
        return "unfused"
    return "sdpa" if impl.sdpa else "eager"


def _impl(family: str | Implementation) -> Implementation:
    return family if isinstance(family, Implementation) else implementation(family)


def _check_mode(attention: str, recompute: str, device: str, act_bytes: int) -> None:
    if attention not in ATTENTIONS:
        raise ValueError(f"attention={attention!r} must be one of {', '.join(ATTENTIONS)}")
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute={recompute!r} must be one of {', '.join(RECOMPUTE_MODES)}")
    if device not in DEVICES:
        raise ValueError(f"device={device!r} must be one of {', '.join(DEVICES)}")
    if (attention == "unfused") != device.startswith("cuda-unfused"):
        raise ValueError(
            f"attention={attention!r} with device={device!r}: Megatron's unfused core attention is the "
            "'cuda-unfused' kernel path, and that path runs no other"
        )
    if act_bytes != 2:
        raise ValueError(f"act_bytes={act_bytes!r}: only bf16 activations (2 bytes) are modelled and measured")


def _positive(**values: int) -> None:
    for name, value in values.items():
        check_count(name, value)


# ---------------------------------------------------------------- building blocks (bytes for one micro-batch)
def _norm(
    name: str, rows: int, width: int, impl: Implementation, part: str, split: str, device: str, style: str | None = None
) -> list[_Saved]:
    """The tensors one norm call saves (its output is saved by whoever reads it)."""
    style = style or impl.norm
    if style == "layernorm":
        stats = 2 if device == "cpu" else 4
        return [
            _Saved(f"{name}: input (bf16)", part, 2 * rows * width, split),
            _Saved(f"{name}: mean and rstd", part, 2 * stats * rows, split),
        ]
    out = [
        _Saved(f"{name}: input upcast to fp32", part, 4 * rows * width, split),
        _Saved(f"{name}: rsqrt (fp32)", part, 4 * rows, split),
    ]
    if style == "cast_then_scale":
        out.append(_Saved(f"{name}: normalized input in bf16 (for the weight grad)", part, 2 * rows * width, split))
    else:
        out.append(_Saved(f"{name}: normalized input in fp32 (for the weight grad)", part, 4 * rows * width, split))
    if style == "zero_centered":
        out.append(_Saved(f"{name}: 1 + weight in fp32", part, 4 * width, "none"))
    return out


def _activation(prefix: str, count: int, width_bytes: float, activation: str, part: str, split: str) -> list[_Saved]:
    """The activation's own saves beyond its input (Python-written GeLU only)."""
    if activation not in ACTIVATION_EXTRA_SAVES:
        raise ValueError(f"activation={activation!r} is not modelled; known: {', '.join(ACTIVATION_EXTRA_SAVES)}")
    extras = _GELU_NEW_EXTRAS[: ACTIVATION_EXTRA_SAVES[activation]]
    return [_Saved(f"{prefix}activation {what} ({activation})", part, count * width_bytes, split) for what in extras]


def _gated_mlp(prefix: str, T: int, f: int, activation: str) -> list[_Saved]:
    return [
        _Saved(f"{prefix}gate projection output (activation input)", "mlp", 2 * T * f, "width"),
        *_activation(prefix, T, 2 * f, activation, "mlp", "width"),
        _Saved(f"{prefix}up projection output", "mlp", 2 * T * f, "width"),
        _Saved(f"{prefix}activation output", "mlp", 2 * T * f, "width"),
        _Saved(f"{prefix}down projection input (activation × up)", "mlp", 2 * T * f, "width"),
    ]


def _mlp(L: LayerSpec, h: int, T: int, impl: Implementation) -> list[_Saved]:
    out = [_Saved("mlp input (saved by its first projections)", "mlp", 2 * T * h, "seq")]
    if not L.is_moe:
        if L.mlp == "plain":
            return [
                *out,
                _Saved("up projection output (activation input)", "mlp", 2 * T * L.intermediate_size, "width"),
                *_activation("", T, 2 * L.intermediate_size, L.activation, "mlp", "width"),
                _Saved("down projection input (activation output)", "mlp", 2 * T * L.intermediate_size, "width"),
            ]
        if L.mlp != "gated":
            raise ValueError(f"mlp={L.mlp!r} must be 'gated' or 'plain'")
        return out + _gated_mlp("", T, L.intermediate_size, L.activation)
    E, k = L.num_experts, L.experts_per_token
    fe = L.expert_intermediate_size or L.intermediate_size
    if not 0 < k <= E:
        raise ValueError(f"experts_per_token={k} must be between 1 and num_experts={E}")
    if impl.router == "softmax":
        out.append(_Saved("router: softmax over the experts (fp32)", "mlp", 4 * T * E, "seq"))
        out.append(_Saved("router: top-k indices (int64)", "mlp", 8 * T * k, "seq"))
    elif impl.router in ("softmax_fp32", "sigmoid_fp32"):
        out.append(_Saved("router: input upcast to fp32", "mlp", 4 * T * h, "seq"))
        out.append(_Saved("router: weight upcast to fp32", "mlp", 4 * E * h, "none"))
        kind = "softmax" if impl.router == "softmax_fp32" else "sigmoid"
        out.append(_Saved(f"router: {kind} over the experts (fp32)", "mlp", 4 * T * E, "seq"))
        out.append(
            _Saved(f"router: top-k indices (int64{', gather' if kind == 'sigmoid' else ''})", "mlp", 8 * T * k, "seq")
        )
        if impl.group_limited and impl.router == "softmax_fp32":
            out.append(_Saved("router: group mask over the experts (bool)", "mlp", T * E, "seq"))
    else:
        raise ValueError(f"router={impl.router!r} is not modelled")
    if impl.norm_topk_prob:
        out.append(_Saved("router: top-k values before normalization (fp32)", "mlp", 4 * T * k, "seq"))
        out.append(_Saved("router: top-k sum (fp32)", "mlp", 4 * T, "seq"))
    S = T * k  # dispatched (token, expert) pairs
    out += [
        _Saved("experts: gathered token copies (grouped_mm input)", "mlp", 2 * S * h, "none"),
        _Saved("experts: gate/up output", "mlp", 2 * S * 2 * fe, "width"),
        *_activation("experts: ", S, 2 * fe, L.activation, "mlp", "width"),
        _Saved("experts: activation output", "mlp", 2 * S * fe, "width"),
        _Saved("experts: down input (activation × up)", "mlp", 2 * S * fe, "width"),
        _Saved("experts: routing weights", "mlp", S * impl.routing_weight_bytes, "none"),
        _Saved("experts: down output (multiplied by the routing weight)", "mlp", 2 * S * h, "none"),
        _Saved("experts: sort, gather and unsort indices (int64)", "mlp", 3 * 8 * S, "none"),
        _Saved("experts: group offsets (int32)", "mlp", 4 * E, "none"),
    ]
    fs = L.shared_intermediate_size
    if fs:
        out += _gated_mlp("shared experts: ", T, fs, L.activation)
        if L.shared_expert_gate:
            out += [
                _Saved("shared expert gate: sigmoid (bf16)", "mlp", 2 * T, "seq"),
                _Saved("shared expert gate: shared output it multiplies", "mlp", 2 * T * h, "seq"),
            ]
    return out


def _attention_core(
    L: LayerSpec,
    s: int,
    b: int,
    impl: Implementation,
    attention: str,
    device: str,
    q_bytes: float,
    k_store: float,
    v_store: float,
    q_head_major: bool,
) -> list[_Saved]:
    """From q, k, v after rotary (storages ``q_bytes``, ``k_store``, ``v_store``) to the output before o_proj."""
    a, kv, d = L.num_heads, L.num_kv_heads or L.num_heads, L.head_dim
    dv = L.v_head_dim or d
    T, scores = s * b, b * L.num_heads * s * s
    inputs = [
        _Saved("core input q (after rotary)", "mixer", q_bytes, "width"),
        _Saved("core input k", "mixer", k_store, "width" if L.mixer == "mla" or a == kv else "kv"),
        _Saved("core input v", "mixer", v_store, "width" if L.mixer == "mla" or a == kv else "kv"),
    ]
    out_bytes = 2 * T * a * dv
    if attention == "unfused":
        return _megatron_unfused(L, s, b, device.endswith("+dropout"), inputs, out_bytes)
    if attention == "eager":
        if not impl.eager_softmax_fp32:
            probs = [_Saved("eager: softmax output (bf16)", "mixer", 2 * scores, "width", "not_selective")]
        else:
            probs = [
                _Saved("eager: softmax output (fp32)", "mixer", 4 * scores, "width", "not_selective"),
                _Saved("eager: probabilities cast to bf16", "mixer", 2 * scores, "width", "not_selective"),
            ]
        if L.attn_logit_softcapping is not None:
            probs.insert(
                0, _Saved("eager: softcapped scores, tanh (bf16)", "mixer", 2 * scores, "width", "not_selective")
            )
        # torch.matmul folds (b, a) into one batch dimension: a view when b = 1 (then, without GQA, the saved q, k
        # and v are the inputs' storages, e.g. all of MLA's kv_b output), a copy otherwise
        views = b == 1 and a == kv
        qe, ke, ve = (q_bytes, k_store, v_store) if views else (2 * T * a * d, 2 * T * a * d, 2 * T * a * dv)
        return [
            _Saved("eager: q as the score matmul reads it", "mixer", qe, "width", "not_selective"),
            _Saved("eager: k as the score matmul reads it (a heads)", "mixer", ke, "width", "not_selective"),
            *probs,
            _Saved("eager: v as the output matmul reads it (a heads)", "mixer", ve, "width", "not_selective"),
            _Saved("attention output, transposed to token-major (a copy)", "mixer", out_bytes, "width"),
            *[replace(t, when="selective") for t in inputs],
        ]
    if not impl.sdpa:
        raise ValueError(f"family {impl.family!r} has no SDPA in transformers 5.23.0: use attention='eager'")
    mask = L.sliding_window is not None and s >= L.sliding_window
    gqa = not mask and d == dv <= 256
    repeat = a != kv and not gqa
    if device == "cpu":
        kernel = "flash" if d == dv else "math"
    else:  # CUDA's flash kernel takes neither a mask nor unequal head dims
        kernel = "flash" if d == dv and not mask else "efficient"
    out: list[_Saved] = []
    if kernel == "math":
        out += [
            _Saved("sdpa math: q upcast to fp32 (scaled)", "mixer", 4 * T * a * d, "width", "not_selective"),
            _Saved("sdpa math: k upcast to fp32 (scaled)", "mixer", 4 * T * a * d, "width", "not_selective"),
            _Saved("sdpa math: softmax (fp32)", "mixer", 4 * scores, "width", "not_selective"),
            _Saved("sdpa math: v upcast to fp32", "mixer", 4 * T * a * dv, "width", "not_selective"),
            _Saved("attention output, transposed to token-major (a copy)", "mixer", out_bytes, "width"),
            *[replace(t, when="selective") for t in inputs],
        ]
    else:
        out.append(replace(inputs[0], name="sdpa: q (after rotary)"))
        for t, heads_d in ((inputs[1], d), (inputs[2], dv)):
            which = t.name[-1]
            if repeat:
                out.append(
                    _Saved(
                        f"sdpa: {which} repeated to {a} heads", "mixer", 2 * T * a * heads_d, "width", "not_selective"
                    )
                )
                out.append(replace(t, when="selective"))
            else:
                out.append(replace(t, name=f"sdpa: {which}"))
        copy = kernel == "flash" and device == "cpu" and q_head_major
        out.append(_Saved("sdpa: output", "mixer", out_bytes, "width", "not_selective" if copy else "always"))
        if copy:
            out.append(_Saved("attention output, transposed to token-major (a copy)", "mixer", out_bytes, "width"))
        rows = s if kernel == "flash" else math.ceil(s / LSE_ALIGN_CUDA) * LSE_ALIGN_CUDA
        out.append(_Saved("sdpa: logsumexp (fp32)", "mixer", 4 * b * a * rows, "width", "not_selective"))
    if mask:
        out.append(
            _Saved("sdpa: sliding-window mask converted to bf16", "mixer", 2 * b * s * s, "none", "not_selective")
        )
    return out


def fused_softmax_available(s: int, b: int, heads: int) -> bool:
    """Whether Megatron-Core's fused causal softmax kernel runs for a micro-batch of ``b`` sequences of ``s`` tokens
    and ``heads`` attention heads on this GPU (``FusedScaleMaskSoftmax.is_kernel_available``,
    megatron/core/fusions/fused_softmax.py#L238-L270 at core_v0.19.0: 16 < s ≤ 4096, s and b·heads multiples of 4,
    b·heads a multiple of the kernel's batches per block, 128 threads over min(2^⌈log2 s⌉, 32)-wide warps, two
    rows a warp up to 128 keys); the ``--no-masked-softmax-fusion`` flag turns it off, which the ledger does not
    model."""
    if not (16 < s <= 4096 and s % 4 == 0 and (b * heads) % 4 == 0):
        return False
    width = 1 << (s - 1).bit_length()
    warp = min(width, 32)
    per_block = (128 // warp) * (2 if width <= 128 else 1)
    return (b * heads) % per_block == 0


def _megatron_unfused(
    L: LayerSpec, s: int, b: int, dropout: bool, inputs: list[_Saved], out_bytes: float
) -> list[_Saved]:
    """Megatron-Core's unfused core attention (megatron/core/transformer/dot_product_attention.py#L142-L251 at
    core_v0.19.0; ``--attention-backend unfused``, and the ``local`` transformer implementation): with GQA, k and v
    repeated to the query heads (``repeat_interleave``, copies); ``baddbmm`` saves q and k; the scaled causal softmax
    saves its output, bf16 when the fused kernel runs (``fused_softmax_available``; ``ScaledUpperTriangMaskedSoftmax``
    saves ``softmax_results``), else PyTorch's fp32 softmax (``forward_torch_softmax`` with
    ``attention_softmax_in_fp32``, Megatron's default) and its bf16 cast; attention dropout (``torch.nn.Dropout``,
    p > 0) saves its bool mask and the bmm its bf16 output; the bmm saves v; the context is permuted to token-major
    (a copy that the output projection saves). With dropout and the fused kernel: 5 bytes a score, Korthikanti et
    al.'s 5as/h (2022, Table 2). Selective recompute (``--recompute-modules core_attn``) keeps the inputs and the
    output only."""
    a, kv, d = L.num_heads, L.num_kv_heads or L.num_heads, L.head_dim
    dv = L.v_head_dim or d
    T, scores = s * b, b * a * s * s
    q_in, k_in, v_in = inputs
    # q, k and v as views of one fused qkv storage (GPT-2's layout: counted once, as v): baddbmm's q keeps it whole
    shared = q_in.nbytes == 0
    out = [replace(q_in, name="unfused: q (saved by baddbmm)", when="always")]
    for t, width, which in ((k_in, d, "k"), (v_in, dv, "v")):
        if a != kv:
            out.append(
                _Saved(f"unfused: {which} repeated to {a} heads", "mixer", 2 * T * a * width, "width", "not_selective")
            )
            out.append(replace(t, when="always" if shared and t.nbytes else "selective"))
        else:
            out.append(replace(t, name=f"unfused: {which} (saved by its matmul)", when="always"))
    if fused_softmax_available(s, b, a):
        out.append(_Saved("unfused: fused softmax output (bf16)", "mixer", 2 * scores, "width", "not_selective"))
        probs_cast = 0.0
    else:
        out.append(_Saved("unfused: softmax output (fp32)", "mixer", 4 * scores, "width", "not_selective"))
        probs_cast = 2 * scores  # its bf16 cast: read by the bmm (no dropout) or freed after dropout reads it
    if dropout:
        out += [
            _Saved("unfused: attention dropout mask (bool)", "mixer", scores, "width", "not_selective"),
            _Saved("unfused: attention dropout output (bf16)", "mixer", 2 * scores, "width", "not_selective"),
        ]
    elif probs_cast:
        out.append(_Saved("unfused: probabilities cast to bf16", "mixer", probs_cast, "width", "not_selective"))
    out.append(_Saved("attention output, permuted to token-major (a copy)", "mixer", out_bytes, "width"))
    return out


def _hidden_dropout(T: int, h: int) -> list[_Saved]:
    """Megatron's hidden dropout (``--hidden-dropout`` > 0): the bias-dropout-add after the attention and after the
    MLP each keeps a bool mask of the residual stream (megatron/core/fusions/fused_bias_dropout.py#L11-L59 at
    core_v0.19.0: ``torch.nn.functional.dropout``)."""
    return [
        _Saved("hidden dropout mask after the attention (bool)", "mixer", T * h, "seq"),
        _Saved("hidden dropout mask after the MLP (bool)", "mlp", T * h, "seq"),
    ]


def _attention(L: LayerSpec, h: int, s: int, b: int, impl: Implementation, attention: str, device: str) -> list[_Saved]:
    a, kv, d = L.num_heads, L.num_kv_heads or L.num_heads, L.head_dim
    dv = L.v_head_dim or d
    if not (a and d):
        raise ValueError(f"attention layer needs num_heads and head_dim, got {a} and {d}")
    if a % kv:
        raise ValueError(f"num_kv_heads={kv} does not divide num_heads={a}")
    T = s * b
    out = [_Saved("attention input (saved by the q, k, v projections)", "mixer", 2 * T * h, "seq")]
    if L.qk_norm:
        if (L.qk_norm_scope or ("head" if L.qk_norm_width in (0, d) else "projection")) == "head":
            out += _norm("q_norm", T * a, d, impl, "mixer", "width", device)  # Qwen3, Gemma 3, Qwen3.5
            out += _norm("k_norm", T * kv, d, impl, "mixer", "width", device)
        else:  # over the whole projection (OLMo 2)
            out += _norm("q_norm", T, a * d, impl, "mixer", "width", device)
            out += _norm("k_norm", T, kv * d, impl, "mixer", "width", device)
    fused = 2 * T * (a + 2 * kv) * d
    if impl.qkv == "fused_views":  # GPT-2: q, k, v are views of one storage, counted once (as v)
        q, k, v = 0.0, 0.0, fused
    elif impl.qkv == "fused_v_view":  # Phi-3: rotary makes new q, k; v stays a view of the qkv output
        q, k, v = 2 * T * a * d, 2 * T * kv * d, fused
    else:
        q, k, v = 2 * T * a * d, 2 * T * kv * d, 2 * T * kv * dv
    core = _attention_core(L, s, b, impl, attention, device, q, k, v, impl.rotary_cat)
    if impl.qkv in ("fused_views", "fused_v_view"):  # v is the fused qkv storage: split over TP as a width
        core = [replace(t, split="width") if t.split == "kv" else t for t in core]
    if impl.qkv == "fused_views":  # name the one storage behind q, k and v
        core = [
            replace(t, name=t.name[:-1] + "q, k, v (views of the fused qkv output)")
            if t.name in ("sdpa: v", "core input v")
            else t
            for t in core
        ]
    out += core
    if L.output_gate:
        out += [
            _Saved("output gate: sigmoid (bf16)", "mixer", 2 * T * a * dv, "width"),
            _Saved("o_proj input (gated output)", "mixer", 2 * T * a * dv, "width"),
        ]
    return out


def _mla(L: LayerSpec, h: int, s: int, b: int, impl: Implementation, attention: str, device: str) -> list[_Saved]:
    a, nope, rope, dv = L.num_heads, L.qk_nope_head_dim, L.qk_rope_head_dim, L.v_head_dim
    if not (a and rope and dv and L.kv_lora_rank):
        raise ValueError("MLA layer needs num_heads, qk_rope_head_dim, v_head_dim and kv_lora_rank")
    T, d = s * b, nope + rope
    out = [_Saved("attention input (saved by the q/q_a and kv_a projections)", "mixer", 2 * T * h, "seq")]
    if L.q_lora_rank:
        out += _norm("q_a_layernorm", T, L.q_lora_rank, impl, "mixer", "seq", device)
        out.append(_Saved("q_b_proj input", "mixer", 2 * T * L.q_lora_rank, "seq"))
    out += _norm("kv_a_layernorm", T, L.kv_lora_rank, impl, "mixer", "seq", device)
    out.append(_Saved("kv_b_proj input", "mixer", 2 * T * L.kv_lora_rank, "seq"))
    core_layer = replace(L, num_kv_heads=a, head_dim=d, v_head_dim=dv)
    out += _attention_core(
        core_layer, s, b, impl, attention, device, 2 * T * a * d, 2 * T * a * d, 2 * T * a * (nope + dv), True
    )
    return out


def _gated_deltanet(L: LayerSpec, h: int, s: int, b: int, impl: Implementation, device: str) -> list[_Saved]:
    nk, nv, dk, dv, K = (
        L.linear_num_key_heads,
        L.linear_num_value_heads,
        L.linear_key_head_dim,
        L.linear_value_head_dim,
        L.linear_conv_kernel,
    )
    if not (nk and nv and dk and dv and K):
        raise ValueError(
            "linear-attention layer needs linear_num_key_heads, linear_num_value_heads, "
            "linear_key_head_dim, linear_value_head_dim and linear_conv_kernel"
        )
    if nv % nk:
        raise ValueError(f"linear_num_key_heads={nk} does not divide linear_num_value_heads={nv}")
    T, C = s * b, GDN_CHUNK
    S = math.ceil(s / C) * C  # padded length
    n = S // C
    conv = 2 * nk * dk + nv * dv
    P = b * nv * S  # padded rows over the value heads

    def core(name: str, nbytes: float) -> _Saved:
        return _Saved(f"chunked delta rule: {name}", "mixer", nbytes, "width", "not_selective")

    return [
        _Saved("linear-attention input (saved by in_proj_qkv, z, b, a)", "mixer", 2 * T * h, "seq"),
        _Saved("conv1d input (in_proj_qkv output)", "mixer", 2 * T * conv, "width"),
        _Saved(
            f"conv1d output before the causal slice (silu input, s + {K - 1} positions)",
            "mixer",
            2 * b * conv * (s + K - 1),
            "width",
        ),
        _Saved("beta = sigmoid(b) (bf16)", "mixer", 2 * T * nv, "width"),
        _Saved("exp(A_log) and its negation (fp32)", "mixer", 2 * 4 * nv, "width"),
        _Saved("softplus input and output (fp32)", "mixer", 2 * 4 * T * nv, "width"),
        _Saved("core input q, k, v (conv output after silu)", "mixer", 2 * T * conv, "width", "selective"),
        _Saved("core input g (fp32)", "mixer", 4 * T * nv, "width", "selective"),
        core("q and k after repeat to the value heads, l2norm inputs (fp32)", 2 * 4 * T * nv * dk),
        core("q and k l2norm rsqrt (fp32)", 2 * 4 * T * nv),
        core("beta padded (fp32)", 4 * P),
        core("v padded (fp32)", 4 * P * dv),
        core("k padded (fp32)", 4 * P * dk),
        core("q padded and scaled (fp32)", 4 * P * dk),
        core("k·beta (fp32)", 4 * P * dk),
        core(f"strictly upper {C}×{C} mask (bool)", C * C),
        core(
            f"five {C}-wide chunk matrices: decay, k·βkᵀ, qkᵀ, UT system, intra-chunk attention (fp32)", 5 * 4 * P * C
        ),
        core("triangular-solve results: new values and k_cumdecay (fp32)", 4 * P * (dv + dk)),
        core(f"recurrent state before each of the {n} chunks (fp32)", 4 * n * b * nv * dk * dv),
        core("v_new per chunk (fp32)", 4 * P * dv),
        # The state update after the last chunk is dead code for the loss (its saves are freed), and the first
        # chunk multiplies a zero state that needs no gradient: the decayed q and k, the third decay exponential
        # and the chunk decay are saved only when there are two chunks or more.
        core("decay exponentials (fp32)", (3 if n > 1 else 2) * 4 * P),
        core("chunk decay (fp32)", 4 * b * nv * n if n > 1 else 0),
        core("decayed q and k (fp32)", 2 * 4 * P * dk if n > 1 else 0),
        *_norm("gated norm", T * nv, dv, impl, "mixer", "width", device, style="cast_then_scale"),
        _Saved("gated norm: gate z upcast to fp32 (silu input)", "mixer", 4 * T * nv * dv, "width"),
        _Saved("gated norm: silu(z) (fp32)", "mixer", 4 * T * nv * dv, "width"),
        _Saved("gated norm: weighted normalized input (bf16)", "mixer", 2 * T * nv * dv, "width"),
        _Saved("out_proj input", "mixer", 2 * T * nv * dv, "width"),
    ]


# ---------------------------------------------------------------- public API
def _tp_divisor(split: str, tp: int, sp: bool, kv: int = 0) -> int:
    """What TP divides a term by: ``width`` by t, ``seq`` by t with sequence parallelism, ``kv`` (a layer's K and V
    at its ``kv`` KV heads) by t while t divides them and by kv beyond: Megatron-Core gives each rank one whole KV
    head when t > kv (``tp.qkv_gather_collectives``), ``none`` not at all."""
    if split == "kv":
        return min(tp, kv) if kv else tp
    return tp if split == "width" or (split == "seq" and sp) else 1


def _check_tp(L: LayerSpec, tp: int) -> None:
    _positive(tp=tp)
    if tp == 1:
        return
    checks = []
    if L.mixer in ("attention", "mla"):
        checks += [
            (L.num_heads, "attention heads"),
            (L.num_kv_heads if L.mixer == "attention" else L.num_heads, "KV heads"),
        ]
    if L.mixer == "linear_attention":
        checks += [
            (L.linear_num_key_heads, "linear-attention key heads"),
            (L.linear_num_value_heads, "linear-attention value heads"),
        ]
    checks += [
        (L.expert_intermediate_size or L.intermediate_size if L.is_moe else L.intermediate_size, "MLP channels"),
        (L.shared_intermediate_size, "shared-expert channels"),
    ]
    for count, what in checks:
        # beyond the KV heads each rank holds one (Megatron-Core: tp a multiple of them, ``_tp_divisor``)
        if count and count % tp and not (what == "KV heads" and L.mixer == "attention" and tp % count == 0):
            raise ValueError(f"tp={tp} does not divide {count} {what}")


def _op_refusal(L: LayerSpec, impl: Implementation) -> str | None:
    """Why torchtitan's op-level checkpointing is not priced for layer ``L`` of a family run as ``impl`` (None when
    it is: SDPA attention layers with a dense MLP)."""
    if L.mixer != "attention" or L.num_experts:
        what = "layers with routed experts" if L.num_experts else f"{L.mixer} layers"
        return (
            f"recompute='op' (torchtitan's op-level selective checkpointing) is priced for attention layers with a "
            f"dense MLP, not yet for {what}"
        )
    if not impl.sdpa:
        return (
            f"recompute='op' (torchtitan's op-level selective checkpointing) is priced with SDPA attention; "
            f"{impl.family} runs eager attention in transformers"
        )
    return None


@lru_cache(maxsize=256)
def op_refusal(spec: ModelSpec) -> str | None:
    """Why ``recompute='op'`` cannot be priced for ``spec`` (its first layer that torchtitan's op-level policy is not
    priced for), or None; ``Plan`` refuses the mode with this message, so a search rejects such plans by name."""
    if not spec.layers:
        return f"recompute='op' needs the per-layer description of {spec.name!r} (ModelSpec.layers is empty)"
    impl = spec_implementation(spec)
    for L in dict.fromkeys(spec.layers):
        why = _op_refusal(L, impl)
        if why:
            return why
    return None


def op_projections(L: LayerSpec, h: int, impl: Implementation) -> list[tuple[str, str, int, int, str, bool]]:
    """The projections of a decoder layer's forward, in order, as torchtitan's op-level selective checkpointing
    treats them (``SelectiveAC`` in ``torchtitan/distributed/activation_checkpoint.py``, torchtitan 0.3.0): (name,
    part, input width, output width, TP split of the output, kept). Every ``mm`` is counted from one and every second
    one is recomputed; a projection with a bias runs as an ``addmm``, which the save list always keeps and the count
    skips. Priced for SDPA attention layers with a dense MLP (ValueError otherwise)."""
    why = _op_refusal(L, impl)
    if why:
        raise ValueError(why)
    a, kv, d, dv = L.num_heads, L.num_kv_heads, L.head_dim, L.v_head_dim or L.head_dim
    q_width = a * d * (2 if L.output_gate else 1)
    if impl.qkv == "fused_v_view":
        rows = [("qkv_proj", "mixer", h, q_width + kv * d + kv * dv, "width", L.qkv_bias)]
    elif impl.qkv == "fused_views":
        rows = [("c_attn", "mixer", h, 3 * a * d, "width", True)]
    else:
        rows = [
            ("q_proj", "mixer", h, q_width, "width", L.qkv_bias),
            ("k_proj", "mixer", h, kv * d, "width", L.qkv_bias),
            ("v_proj", "mixer", h, kv * dv, "width", L.qkv_bias),
        ]
    rows.append(("o_proj", "mixer", a * dv, h, "seq", L.o_bias or impl.qkv == "fused_views"))
    f = L.intermediate_size
    if L.mlp == "gated":
        if impl.qkv == "fused_v_view":
            rows.append(("gate_up_proj", "mlp", h, 2 * f, "width", L.mlp_bias))
        else:
            rows += [("gate_proj", "mlp", h, f, "width", L.mlp_bias), ("up_proj", "mlp", h, f, "width", L.mlp_bias)]
    else:
        rows.append(("c_fc", "mlp", h, f, "width", L.mlp_bias or impl.qkv == "fused_views"))
    rows.append(("down_proj", "mlp", f, h, "seq", L.mlp_bias or impl.qkv == "fused_views"))
    out, count = [], 0
    for name, part, n_in, n_out, split, bias in rows:
        kept = True
        if not bias:
            count += 1
            kept = count % 2 == 1
        out.append((name, part, n_in, n_out, split, kept))
    return out


def _op_saved(L: LayerSpec, h: int, s: int, b: int, impl: Implementation, attention: str) -> list[_Saved]:
    """What torchtitan's op-level selective activation checkpointing keeps of one decoder layer (``"op"``): the
    block's input (the checkpoint's), the outputs of the projections ``op_projections`` keeps, and the attention
    kernel's outputs (its output and fp32 logsumexp, the SDPA kernels being on the save list); everything else is
    recomputed in the backward. Only SDPA attention is priced."""
    if attention != "sdpa":
        raise ValueError("recompute='op' is priced with SDPA attention only")
    T = s * b
    a, dv = L.num_heads, L.v_head_dim or L.head_dim
    projections = op_projections(L, h, impl)
    out = [_Saved("layer input (kept by the layer checkpoint)", "layer", 2 * T * h, "seq")]
    for name, part, _n_in, n_out, split, kept in projections:
        if name == "o_proj":  # the attention kernel runs between the q/k/v projections and o_proj
            out.append(_Saved("sdpa: output (saved op)", "mixer", 2 * T * a * dv, "width"))
            out.append(_Saved("sdpa: logsumexp (fp32, saved op)", "mixer", 4 * T * a, "width"))
        if kept:
            out.append(_Saved(f"{name} output (saved op)", part, 2 * T * n_out, split))
    return out


def _layer_saved(
    L: LayerSpec, h: int, s: int, b: int, impl: Implementation, attention: str, recompute: str, device: str
) -> list[_Saved]:
    T = s * b
    if recompute == "full":
        return [_Saved("layer input (kept by the layer checkpoint)", "layer", 2 * T * h, "seq")]
    if recompute == "op":
        return _op_saved(L, h, s, b, impl, attention)
    names = ("ln_1", "ln_2") if impl.norm == "layernorm" else NORM_NAMES.get(L.norm_position, ())
    if len(names) != L.norms_per_layer:
        raise ValueError(f"norms_per_layer={L.norms_per_layer} does not fit norm_position={L.norm_position!r}")
    out: list[_Saved] = []
    for name in names:
        out += _norm(name, T, h, impl, "norms", "seq", device)
    if L.mixer == "attention":
        out += _attention(L, h, s, b, impl, attention, device)
    elif L.mixer == "mla":
        out += _mla(L, h, s, b, impl, attention, device)
    elif L.mixer == "linear_attention":
        out += _gated_deltanet(L, h, s, b, impl, device)
    else:
        raise ValueError(f"mixer={L.mixer!r} must be 'attention', 'mla' or 'linear_attention'")
    out += _mlp(L, h, T, impl)
    if device.endswith("+dropout"):
        out += _hidden_dropout(T, h)
    keep = ("always", "selective") if recompute == "selective" else ("always", "not_selective")
    return [t for t in out if t.when in keep and t.nbytes]


def layer_terms(
    layer: LayerSpec,
    hidden_size: int,
    seq: int,
    batch: int,
    *,
    family: str | Implementation,
    attention: str = "sdpa",
    recompute: str = "none",
    tp: int = 1,
    sp: bool | None = None,
    device: str = "cpu",
    act_bytes: int = 2,
) -> tuple[Term, ...]:
    """The tensors one decoder layer saves for one micro-batch on one GPU, as named ``Term``s (bytes).

    Args:
        layer: the layer's shape (``ModelSpec.layers``).
        hidden_size, seq, batch: h, s and the micro-batch b.
        family: the ``model_type`` or an ``Implementation`` (``implementation(family, config)``).
        attention: ``"sdpa"`` (the fsdp2 ledger) or ``"eager"``.
        recompute: ``"none"``, ``"selective"`` or ``"full"`` (module docstring).
        tp, sp: tensor-parallel size and sequence parallelism (default ``tp > 1``): Megatron-style split.
        device: ``"cpu"`` (what ``meshplan.realrun.measure`` measures) or ``"cuda"`` (the documented kernel
            differences).
        act_bytes: bytes of an activation element; only bf16 (2) is modelled.
    """
    _check_mode(attention, recompute, device, act_bytes)
    _positive(hidden_size=hidden_size, seq=seq, batch=batch)
    _check_tp(layer, tp)
    sp = tp > 1 if sp is None else sp
    impl = _impl(family)
    return tuple(
        Term(t.name, t.part, t.nbytes / _tp_divisor(t.split, tp, sp, layer.num_kv_heads or layer.num_heads), t.split)
        for t in _layer_saved(layer, hidden_size, seq, batch, impl, attention, recompute, device)
    )


def layer_bytes(
    layer: LayerSpec,
    hidden_size: int,
    seq: int,
    batch: int,
    *,
    family: str | Implementation,
    attention: str = "sdpa",
    recompute: str = "none",
    tp: int = 1,
    sp: bool | None = None,
    device: str = "cpu",
    act_bytes: int = 2,
) -> float:
    """Bytes one decoder layer saves for one micro-batch on one GPU: the sum of ``layer_terms``."""
    return add_up(
        t.nbytes
        for t in layer_terms(
            layer,
            hidden_size,
            seq,
            batch,
            family=family,
            attention=attention,
            recompute=recompute,
            tp=tp,
            sp=sp,
            device=device,
            act_bytes=act_bytes,
        )
    )


def layer_breakdown(layer: LayerSpec, hidden_size: int, seq: int, batch: int, **kwargs: Any) -> dict[str, float]:
    """``layer_terms`` as an ordered dict, term name -> bytes (same keyword arguments)."""
    out: dict[str, float] = {}
    for t in layer_terms(layer, hidden_size, seq, batch, **kwargs):
        out[t.name] = out.get(t.name, 0.0) + t.nbytes
    return out


def model_level_terms(
    layers: Sequence[LayerSpec],
    hidden_size: int,
    vocab_size: int,
    seq: int,
    batch: int,
    *,
    family: str | Implementation,
    attention: str = "sdpa",
    recompute: str = "none",
    tp: int = 1,
    sp: bool | None = None,
    device: str = "cpu",
    act_bytes: int = 2,
) -> tuple[Term, ...]:
    """What the model saves outside its decoder layers, for one micro-batch on one GPU (bytes).

    Parts: ``embedding`` (token ids, int64; GPT-2's position ids; Gemma's scale), ``rotary`` (cos/sin, once),
    ``shared`` (with selective recompute: the attention masks the checkpointed cores keep, once each),
    ``final_norm``, ``head`` (lm_head's input), ``logits`` (``log_softmax``'s fp32 output, ``4·T·V``; Gemma 2's
    softcap tanh) and ``loss`` (int64 targets, fp32 ``total_weight``).
    """
    _check_mode(attention, recompute, device, act_bytes)
    _positive(hidden_size=hidden_size, vocab_size=vocab_size, seq=seq, batch=batch, tp=tp)
    sp = tp > 1 if sp is None else sp
    impl = _impl(family)
    h, s, b, T, V = hidden_size, seq, batch, seq * batch, vocab_size
    out = [_Saved("token ids (int64)", "embedding", 8 * T, "none")]
    if impl.learned_positions:
        out.append(_Saved("position ids (int64)", "embedding", 8 * s, "none"))
    if impl.embed_scale:
        out.append(_Saved("embedding scale (bf16 scalar)", "embedding", 2, "none"))
    rotating = [L for L in layers if L.mixer in ("attention", "mla")]
    if rotating and impl.rotary != "none" and recompute != "full":
        kinds = {L.sliding_window is not None for L in rotating} if impl.rotary_per_layer_type else {True}
        rows = b * s if impl.rotary_per_sample else s
        L0 = rotating[0]
        dim = L0.qk_rope_head_dim if L0.mixer == "mla" else int(L0.head_dim * impl.partial_rotary_factor)
        table = (
            rows * dim / 2 * 8 if impl.rotary == "complex64" else 2 * rows * dim * (4 if impl.rotary == "fp32" else 2)
        )
        out.append(
            _Saved(
                f"rotary cos/sin ({len(kinds)} table{'s' if len(kinds) > 1 else ''})",
                "rotary",
                len(kinds) * table,
                "none",
            )
        )
    if recompute == "selective":
        if attention == "eager":
            masks = {L.sliding_window for L in rotating}
            nbytes = 2
        else:  # a bool mask, broadcast over the batch (masking_utils.sdpa_mask)
            masks = {L.sliding_window for L in rotating if L.sliding_window is not None and s >= L.sliding_window}
            nbytes = 1
        if masks:
            rows = b if attention == "eager" else 1
            out.append(
                _Saved(
                    f"attention masks kept by the checkpointed cores ({len(masks)})",
                    "shared",
                    len(masks) * nbytes * rows * s * s,
                    "none",
                )
            )
    out += _norm("final norm", T, h, impl, "final_norm", "seq", device)
    out.append(_Saved("lm_head input (final norm output)", "head", 2 * T * h, "seq"))
    if impl.final_softcap:
        out.append(_Saved("final logit softcap: tanh (bf16)", "logits", 2 * T * V, "width"))
    out.append(_Saved("log_softmax of the fp32 logits (cross-entropy)", "logits", 4 * T * V, "width"))
    # labels padded to s + 1 then sliced (loss_utils.py:65-66): the slice is contiguous, hence not copied, when b = 1
    out += [
        _Saved("shifted labels (int64)", "loss", 8 * (s + 1) if b == 1 else 8 * T, "none"),
        _Saved("nll_loss total_weight (fp32)", "loss", 4, "none"),
    ]
    return tuple(Term(t.name, t.part, t.nbytes / _tp_divisor(t.split, tp, sp), t.split) for t in out)


@dataclass(frozen=True)
class ModelActivations:
    """The ledger of a whole model for one micro-batch on one GPU (bytes).

    Attributes:
        layers: per decoder layer, its ``Term``s.
        model: the model-level ``Term``s.
        total: the sum of every term.
        output_logits: the bf16 logits the forward returns (``2·T·V / t``), held by the caller, not in ``total``.
    """

    layers: tuple[tuple[Term, ...], ...]
    model: tuple[Term, ...]
    total: float
    output_logits: float

    def layer_parts(self, i: int) -> dict[str, float]:
        """Bytes of layer ``i`` by part (``norms``, ``mixer``, ``mlp``, ``layer``)."""
        out = dict.fromkeys(("norms", "mixer", "mlp", "layer"), 0.0)
        for t in self.layers[i]:
            out[t.part] += t.nbytes
        return out

    def model_parts(self) -> dict[str, float]:
        """Bytes outside the layers by part."""
        out: dict[str, float] = {}
        for t in self.model:
            out[t.part] = out.get(t.part, 0.0) + t.nbytes
        return out


def model_activations(
    layers: Sequence[LayerSpec],
    hidden_size: int,
    vocab_size: int,
    seq: int,
    batch: int,
    *,
    family: str | Implementation,
    attention: str = "sdpa",
    recompute: str = "none",
    tp: int = 1,
    sp: bool | None = None,
    device: str = "cpu",
    act_bytes: int = 2,
) -> ModelActivations:
    """The whole ledger: every decoder layer's terms plus the model-level terms (one micro-batch, one GPU)."""
    per_layer = tuple(
        layer_terms(
            L,
            hidden_size,
            seq,
            batch,
            family=family,
            attention=attention,
            recompute=recompute,
            tp=tp,
            sp=sp,
            device=device,
            act_bytes=act_bytes,
        )
        for L in layers
    )
    model = model_level_terms(
        layers,
        hidden_size,
        vocab_size,
        seq,
        batch,
        family=family,
        attention=attention,
        recompute=recompute,
        tp=tp,
        sp=sp,
        device=device,
        act_bytes=act_bytes,
    )
    total = add_up(t.nbytes for terms in per_layer for t in terms) + add_up(t.nbytes for t in model)
    return ModelActivations(per_layer, model, total, 2 * seq * batch * vocab_size / tp)


def spec_activations(
    spec: ModelSpec, seq: int, batch: int, *, config: Mapping[str, Any] | None = None, **kwargs: Any
) -> ModelActivations:
    """``model_activations`` for a ``ModelSpec``: its ``layers``, its family's ``Implementation`` (config-dependent
    choices read from ``config`` when given, the final softcap from the spec).

        >>> from meshplan import load_model
        >>> round(spec_activations(load_model("llama-3.1-70b"), 4096, 1).total / 1e9, 2)  # GB: 80 layers, logits
        132.65
    """
    if not spec.layers:
        raise ValueError(f"model {spec.name!r} has no per-layer description (ModelSpec.layers is empty)")
    impl = replace(implementation(spec.family, config), final_softcap=spec.final_logit_softcapping is not None)
    return model_activations(spec.layers, spec.hidden_size, spec.vocab_size, seq, batch, family=impl, **kwargs)


# ---------------------------------------------------------------- a pipeline stage, for the plan's engine ledgers
_FIRST_PARTS = ("embedding", "rotary")
# the attention masks selective recompute's checkpointed cores keep: each stage keeps those of its own layers
_LAST_PARTS = ("final_norm", "head", "logits", "loss")


@lru_cache(maxsize=65536)
def _layer_bytes_cached(
    layer: LayerSpec, h: int, s: int, b: int, impl: Implementation, recompute: str, tp: int, sp: bool, device: str
) -> float:
    return layer_bytes(
        layer,
        h,
        s,
        b,
        family=impl,
        attention=_attention_kind(impl, device),
        recompute=recompute,
        tp=tp,
        sp=sp,
        device=device,
    )


@lru_cache(maxsize=4096)
def _shared_masks(
    spec: ModelSpec, layers: range, s: int, b: int, recompute: str, tp: int, sp: bool, device: str
) -> float:
    """Bytes of the attention masks that selective recompute's checkpointed cores keep, for the stage holding
    ``layers``: once per mask its own layers use (a stage without a windowed layer keeps no sliding-window mask)."""
    if recompute != "selective":
        return 0.0
    impl = spec_implementation(spec)
    terms = model_level_terms(
        tuple(spec.layers[i] for i in layers),
        spec.hidden_size,
        spec.vocab_size,
        s,
        b,
        family=impl,
        attention=_attention_kind(impl, device),
        recompute=recompute,
        tp=tp,
        sp=sp,
        device=device,
    )
    return add_up(t.nbytes for t in terms if t.part == "shared")


def _model_parts(
    spec: ModelSpec, s: int, b: int, recompute: str, tp: int, sp: bool, device: str
) -> tuple[float, float]:
    """(bytes the first stage keeps outside its layers, bytes the last stage keeps) for one micro-batch, less the
    shared masks (``_shared_masks``: every stage keeps its own)."""
    part = _model_level_parts(spec, s, b, recompute, tp, sp, device)
    return add_up(part.get(p, 0.0) for p in _FIRST_PARTS), add_up(part.get(p, 0.0) for p in _LAST_PARTS)


def spec_implementation(spec: ModelSpec) -> Implementation:
    """The ``Implementation`` of a ``ModelSpec``'s family (flagship defaults, the final softcap from the spec)."""
    return replace(implementation(spec.family), final_softcap=spec.final_logit_softcapping is not None)


def stage_bytes(
    spec: ModelSpec,
    layers: range,
    seq: int,
    batch: int,
    *,
    recompute: str = "none",
    tp: int = 1,
    sp: bool | None = None,
    first: bool = False,
    last: bool = False,
    device: str = "cuda",
) -> tuple[float, float]:
    """(bytes of the decoder layers ``layers``, bytes outside the layers) one micro-batch leaves on one GPU of a
    pipeline stage: the first stage also keeps the token ids and the rotary tables, the last the final norm, lm_head's
    input, the fp32 logits and the loss, and with selective recompute every stage the attention masks its own
    layers' checkpointed cores keep. ``device="cuda"`` by default: a plan prices a GPU run
    (the three documented kernel differences from the CPU measurement, module docstring); SDPA attention, or eager
    for a family that has no SDPA in transformers 5.23.0 (Gemma 2).

        >>> from meshplan import load_model
        >>> m = load_model("llama-3.1-70b")
        >>> lay, rest = stage_bytes(m, range(80), 4096, 1, first=True, last=True)
        >>> round(lay / 80 / (4096 * 8192), 2), round(rest / 1e9, 2)
        (48.53, 2.37)
    """
    if not spec.layers:
        raise ValueError(f"model {spec.name!r} has no per-layer description (ModelSpec.layers is empty)")
    _positive(seq=seq, batch=batch, tp=tp)
    sp = tp > 1 if sp is None else sp
    return _stage_bytes(spec, layers, seq, batch, recompute, tp, sp, first, last, device)


# Keyed on the model itself (a ModelSpec hashes its layers once) and on everything else the bytes depend on.
@lru_cache(maxsize=65536)
def _stage_bytes(
    spec: ModelSpec,
    layers: range,
    seq: int,
    batch: int,
    recompute: str,
    tp: int,
    sp: bool,
    first: bool,
    last: bool,
    device: str,
) -> tuple[float, float]:
    impl = spec_implementation(spec)
    h = spec.hidden_size
    in_layers = add_up(
        _layer_bytes_cached(spec.layers[i], h, seq, batch, impl, recompute, tp, sp, device) for i in layers
    )
    rest = _shared_masks(spec, layers, seq, batch, recompute, tp, sp, device)
    if first or last:  # a middle stage keeps nothing else outside its layers
        f, l_ = _model_parts(spec, seq, batch, recompute, tp, sp, device)
        rest += (f if first else 0.0) + (l_ if last else 0.0)
    return in_layers, rest


@lru_cache(maxsize=4096)
def _model_level_parts(
    spec: ModelSpec, seq: int, batch: int, recompute: str, tp: int, sp: bool, device: str
) -> dict[str, float]:
    """``model_level_terms`` of the whole model summed by part (cached: a search asks for every stage)."""
    impl = spec_implementation(spec)
    terms = model_level_terms(
        spec.layers,
        spec.hidden_size,
        spec.vocab_size,
        seq,
        batch,
        family=impl,
        attention=_attention_kind(impl, device),
        recompute=recompute,
        tp=tp,
        sp=sp,
        device=device,
    )
    out: dict[str, float] = {}
    for t in terms:
        out[t.part] = out.get(t.part, 0.0) + t.nbytes
    return out


def stage_parts(
    spec: ModelSpec,
    layers: range,
    seq: int,
    batch: int,
    *,
    recompute: str = "none",
    tp: int = 1,
    sp: bool | None = None,
    first: bool = False,
    last: bool = False,
    device: str = "cuda",
) -> dict[str, float]:
    """One micro-batch's saved bytes on one GPU of a pipeline stage, split the way a step frees them (the peak-memory
    moments of ``parallel.peak``): ``layers`` (all its decoder layers, as ``stage_bytes``), ``first_layer`` (its first
    layer, under ``recompute``), ``recomputed`` (with full recompute: the most a layer saves without it, what its
    backward rebuilds; else 0), ``before`` (what the stage keeps outside its layers before them: token ids and rotary
    tables on the first stage, the shared masks), ``head`` (the final norm's and lm_head's inputs, last stage) and
    ``loss`` (the fp32 logits and the targets the loss keeps, last stage). ``layers + before + head + loss`` is
    ``stage_bytes``' sum.

        >>> from meshplan import load_model
        >>> p = stage_parts(load_model("llama-3.1-8b"), range(32), 8192, 1, first=True, last=True)
        >>> round(p["loss"] / 1e9, 2), round(p["layers"] / 32 / 1e9, 3)
        (4.2, 1.645)
    """
    if not spec.layers:
        raise ValueError(f"model {spec.name!r} has no per-layer description (ModelSpec.layers is empty)")
    _positive(seq=seq, batch=batch, tp=tp)
    sp = tp > 1 if sp is None else sp
    return _stage_parts(spec, layers, seq, batch, recompute, tp, sp, first, last, device)


@lru_cache(maxsize=65536)
def _stage_parts(
    spec: ModelSpec,
    layers: range,
    seq: int,
    batch: int,
    recompute: str,
    tp: int,
    sp: bool,
    first: bool,
    last: bool,
    device: str,
) -> dict[str, float]:
    impl = spec_implementation(spec)
    h = spec.hidden_size

    def one(i: int, mode: str) -> float:
        return _layer_bytes_cached(spec.layers[i], h, seq, batch, impl, mode, tp, sp, device)

    in_layers, _ = _stage_bytes(spec, layers, seq, batch, recompute, tp, sp, False, False, device)
    part = _model_level_parts(spec, seq, batch, recompute, tp, sp, device)
    return {
        "layers": in_layers,
        "first_layer": one(layers[0], recompute),
        # what a layer's backward rebuilds: all it would save (full), or all but the kept ops' outputs (op)
        "recomputed": max(one(i, "none") for i in layers)
        if recompute == "full"
        else (max(one(i, "none") - one(i, "op") for i in layers) if recompute == "op" else 0.0),
        "before": _shared_masks(spec, layers, seq, batch, recompute, tp, sp, device)
        + (add_up(part.get(p, 0.0) for p in _FIRST_PARTS) if first else 0.0),
        "head": part.get("final_norm", 0.0) + part.get("head", 0.0) if last else 0.0,
        "loss": part.get("logits", 0.0) + part.get("loss", 0.0) if last else 0.0,
    }
