"""Peak memory through one training step, as each engine allocates it (issue 24).

A GPU runs out of memory at the *peak* of its step, not at "model states + saved activations". This module walks
one optimizer step of one pipeline stage on one GPU through the few moments where an engine's allocations can peak,
and gives each moment's bytes by term. The peak is the largest moment; the memory verdict compares it, grown by the
caching allocator and the memory outside it, with the device (``headroom``).

Terms (the categories of PyTorch's ``FSDPMemTracker``, ``torch/distributed/_tools/fsdp2_mem_tracker.py`` at torch
v2.13.0, which tags every storage by what it is and when it was allocated; ``tests/test_peak.py`` holds the fsdp2
moments to that tracker's measurement of a real FSDP2 step):

* ``parameters``: the resident weights (bf16 for Megatron and DeepSpeed, FSDP2's fp32 shards);
* ``gradients``: the resident gradients (Megatron's fp32 ``main_grad`` buffer; FSDP2's fp32 shards, which torchtitan
  0.3.0 zeroes in place, ``zero_grad(set_to_none=False)`` while CUDA graphs are on, its default: ``trainer.py#L874``
  and ``config/configs.py#L66``), allocated through the whole step;
* ``optimizer states``: fp32 master weights and Adam's two moments;
* ``unsharded parameters``: bf16 weights gathered for compute (FSDP2/ZeRO-3 units, or FSDP2 under pipelining, which
  keeps them for the whole step);
* ``all-gather buffers`` and ``reduce-scatter buffers``: the collectives' own buffers (FSDP2 allocates them per unit:
  the all-gather output in bf16, the reduce-scatter input in the fp32 reduce dtype);
* ``activations``: what the in-flight micro-batches saved for backward (``engine_activations``, the plan's ledger);
* ``temporaries``: what exists only for a moment: the loss's and the logits' working copies, a recomputed layer, the
  gradients of activations and the bf16 parameter gradients before their reduction, the optimizer step's buffers.

Moments (T local tokens b·s/c, V' the vocabulary on this GPU V/t, h', f' the hidden and MLP widths on this GPU):

* ``loss forward`` (last stage): the bf16 logits (2·T·V'), their fp32 copy and, in transformers'
  ``ForCausalLMLoss`` (``loss_utils.py``: ``logits.float()`` then ``cross_entropy``), the fp32 ``log_softmax`` being
  written (4·T·V', counted in the saved activations): 2·T·V' + 4·T·V' of temporaries over all saved activations. In
  Megatron-LM's ``VocabParallelCrossEntropy`` (``megatron/core/tensor_parallel/cross_entropy.py#L25-L63`` at 000c4ac)
  the fp32 copy is subtracted, exponentiated and normalised *in place* and saved (line 187), so only the bf16 logits
  (2·T·V') are extra.
* ``loss backward``: transformers' cross-entropy backward allocates the fp32 gradient of ``log_softmax``'s output and
  of its input (4·T·V' each; measured by the tracker: 8·T·V' exactly) while everything saved is still held. Megatron
  writes the gradient into the saved softmax in place (``#L192-L216``); the ``.float()``'s backward casts it to bf16:
  2·T·V'.
* ``backward of the last layer`` and ``of the first layer``: a decoder layer's backward at its MLP, the largest point
  of a layer's backward measured by the tracker: the incoming gradient (2·T·h'), down_proj's bf16 weight gradient
  (2·h·f'), and the gradients of the MLP's three T×f' activations (6·T·f' for a gated MLP, 4·T·f' otherwise), while
  down_proj's saved input (2·T·f') has been freed. With full recompute the layer's recomputed activations are
  temporaries too, and (measured, FSDP2) the previous layer's bf16 gradients (2·Ψ_layer) are still alive: its
  post-backward reduction runs after this layer's recomputation. Saved activations shrink layer by layer through the
  backward while the gradients grow, so of all the layers' backwards only the first and the last can be largest.
  FSDP2 adds the layer's gathered weights and all-gather buffer, the next unit's prefetched all-gather buffer, and
  the previous unit's reduce-scatter input (fp32), ``_fsdp_param_group.py`` (prefetch, ``#L419-L429``) at v2.13.0.
* ``optimizer step``: torchtitan's default AdamW is ``fused`` (``components/optimizer/optimizer.py#L109-L111`` in
  torchtitan 0.3.0) and Megatron's distributed optimizer uses a fused Adam: both step in place (torch's ``foreach``
  AdamW would allocate one fp32 temporary the size of the shard, measured). DeepSpeed's ZeRO-1/2 step flattens the
  bf16 gradient partition and copies it to fp32 (``deepspeed/runtime/zero/stage_1_and_2.py#L2327-L2341`` at
  v0.19.5): 2 + 4 bytes a local parameter.

Units: bytes. Assumptions: micro-batches run one after another within a stage (gradient accumulation, or 1F1B's
steady state, whose in-flight micro-batches the caller passes); the layer working set is the gated (or plain) MLP's,
measured on Llama-style layers; MoE layers use the routed tokens (T·k) and the expert width.

    >>> s = StageStep(  # a 4-layer model of Llama-3-8B's widths, s = 8,192, FSDP2 over 8 GPUs (tests/test_peak.py)
    ...     engine="fsdp2", states={"parameters": 961562624, "gradients": 961562624, "optimizer states": 1923125248},
    ...     saved=11056611340, micro_saved=11056611340, loss_saved=4202758156, head_saved=268468224,
    ...     embedding_saved=4259840, first_layer_saved=1645281280, recomputed=0, tokens=8192, vocab=128256,
    ...     hidden=4096, mlp_width=14336, mlp_tokens=8192, gated_mlp=True, mlp_weight_grad=117440512,
    ...     layer_weights=436224000, head_weights=1050681344, embedding_weights=1050673152, shard=8, layers=4, zero=3)
    >>> m = peak_moment(step_moments(s))  # FSDPMemTracker measures 24,358,863,524 B, at the loss's backward
    >>> m.name, int(m.total), int(m.terms["temporaries"])  # 8·T·V: the loss's fp32 gradients
    ('loss backward', 24358928396, 8405385216)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from meshplan.core.resources import read_json
from meshplan.core.validation import check_count, check_non_negative_int

__all__ = [
    "ENGINE_RESERVED_RATIO",
    "MOMENT_TERMS",
    "Headroom",
    "Moment",
    "StageStep",
    "outside_allocator",
    "peak_moment",
    "step_moments",
]

MOMENT_TERMS = (
    "parameters",
    "gradients",
    "optimizer states",
    "unsharded parameters",
    "all-gather buffers",
    "reduce-scatter buffers",
    "activations",
    "temporaries",
)
ENGINES = ("lab", "megatron", "fsdp2", "deepspeed")
_TERM_SET = frozenset(MOMENT_TERMS)


@dataclass(frozen=True)
class Moment:
    """One instant of a step on one GPU: its name and its bytes by term, ``values`` in ``MOMENT_TERMS``' order."""

    name: str
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(MOMENT_TERMS):
            raise ValueError(
                f"a moment has {len(MOMENT_TERMS)} terms ({', '.join(MOMENT_TERMS)}), not {len(self.values)}"
            )

    @classmethod
    def of(cls, name: str, terms: Mapping[str, float]) -> Moment:
        """A moment from its terms by name (missing ones are 0; an unknown name is a ValueError)."""
        unknown = sorted(set(terms) - set(MOMENT_TERMS))
        if unknown:
            raise ValueError(f"{unknown} are not moment terms ({', '.join(MOMENT_TERMS)})")
        return cls(name, tuple(float(terms.get(k, 0.0)) for k in MOMENT_TERMS))

    @classmethod
    def trusted(cls, name: str, values: tuple[float, ...]) -> Moment:
        """A moment from values already in ``MOMENT_TERMS``' order (no check: the report's inner loop)."""
        m = object.__new__(cls)
        object.__setattr__(m, "name", name)
        object.__setattr__(m, "values", values)
        return m

    @property
    def terms(self) -> dict[str, float]:
        return dict(zip(MOMENT_TERMS, self.values, strict=True))

    @property
    def total(self) -> float:
        """The terms added left to right in ``MOMENT_TERMS``' order (not ``sum``, which compensates its rounding
        from Python 3.12 on): ``plan.evaluation`` prices a stage's peak from partial sums and must find this total
        to the bit."""
        t = 0.0
        for x in self.values:
            t += x
        return t


@dataclass(slots=True)
class StageStep:
    """What one GPU of one pipeline stage holds and computes in a step (bytes; widths and tokens on this GPU).

    Attributes:
        engine: ``"lab"``, ``"megatron"``, ``"fsdp2"`` or ``"deepspeed"``.
        states: resident model states by moment term (``parameters``, ``gradients``, ``optimizer states``,
            ``unsharded parameters``); a missing term is 0.
        saved: bytes saved for backward by all the micro-batches in flight at the stage's peak (the plan's ledger).
        micro_saved: of ``saved``, one micro-batch's (the one whose backward runs).
        loss_saved: of one micro-batch's, what the loss keeps (fp32 ``log_softmax``, targets); last stage only.
        head_saved: what the final norm and lm_head keep (their inputs); last stage only.
        embedding_saved: what lies before the layers (token ids, rotary tables, shared masks).
        first_layer_saved: what the stage's first decoder layer keeps under the plan's recompute mode.
        recomputed: what full recomputation rebuilds in one layer's backward (the layer's saved bytes without
            recompute, the largest layer's); 0 without full recompute.
        tokens: tokens per micro-batch on this GPU (b·s/c); vocab: vocabulary entries on this GPU (V/t).
        hidden: the width of the residual stream's gradient per token on this GPU (h, ÷ t with sequence
            parallelism); mlp_width: the MLP's (or a routed expert's) width on this GPU.
        mlp_tokens: tokens the MLP computes (T, or T·k routed tokens for a MoE layer).
        gated_mlp: SwiGLU/GeGLU (three T×f' activations) rather than a plain MLP (two).
        mlp_weight_grad: bf16 bytes of the down projection's weight gradient (every local expert's for MoE).
        layer_weights, head_weights, embedding_weights: bf16 bytes, on this GPU before sharding, of the largest
            decoder layer, of the output unit (final norm + lm_head) and of the embedding.
        shard: ranks FSDP2/ZeRO-3 shard a unit over; micro_batches: per step (m); layers: on the stage.
        zero: the ZeRO stage; pipelined: pp > 1; first, last: the stage holds the embedding / the head.
        bucket_bytes: DeepSpeed ZeRO-1/2's gradient buckets (``reduce_bucket_size`` × its dtype, × 2 with
            ``overlap_comm``); ZeRO-3's live-parameter limit in bytes (``stage3_max_live_parameters`` × 2).
        reduce_bucket_bytes: DeepSpeed ZeRO-3's reduce buffer (``reduce_bucket_size`` × its dtype), held through
            the backward.
        mlp_weight_grads: bf16 bytes of all the MLP's weight gradients (every local expert's, for MoE).
        gather_kept: FSDP2 keeps a layer's all-gather output beside its unsharded parameters while it computes
            (parameters sharded on a dimension other than 0: torchtitan shards routed experts on dim 1 when the
            FSDP × EP ranks outnumber the experts, ``torchtitan/distributed/fsdp.py`` in 0.3.0).
        loss_parallel: the loss is computed on vocabulary shards as a DTensor (torchtitan with TP,
            ``torch.distributed.tensor.parallel.loss_parallel``).
        optimizer_grad_copy: bytes the optimizer step allocates for an fp32 copy of its gradients: Megatron-LM with
            bf16 gradients (``--grad-reduce-in-bf16``) sets each fp32 main parameter's ``.grad`` to
            ``shard_model_grad.float()`` (the distributed optimizer, ``megatron/core/optimizer/distrib_optimizer.py``
            L2782 at core_v0.19.0) or ``main_grad.float()`` (ZeRO 0, ``optimizer.py`` L1097), 4 bytes for every
            parameter the GPU's optimizer updates; 0 with fp32 gradients, whose ``.float()`` is the buffer itself.
        fp8_copy_bytes_per_param: Megatron-FSDP at ZeRO-3 with FP8 GEMMs: the bytes of Transformer Engine's FP8 copy
            per parameter of a gathered unit, made with the unit and dropped with it (``evaluation.
            fp8_weight_copy_bytes``), so held with the gathered layers only.
    """

    engine: str
    states: Mapping[str, float]
    saved: float
    micro_saved: float
    loss_saved: float
    head_saved: float
    embedding_saved: float
    first_layer_saved: float
    recomputed: float
    tokens: float
    vocab: float
    hidden: float
    mlp_width: float
    mlp_tokens: float
    gated_mlp: bool
    mlp_weight_grad: float
    layer_weights: float
    head_weights: float
    embedding_weights: float
    shard: int = 1
    micro_batches: int = 1
    layers: int = 1
    zero: int = 0
    pipelined: bool = False
    first: bool = True
    last: bool = True
    bucket_bytes: float = 0.0
    reduce_bucket_bytes: float = 0.0
    mlp_weight_grads: float = 0.0
    gather_kept: bool = False
    loss_parallel: bool = False
    optimizer_grad_copy: float = 0.0
    fp8_copy_bytes_per_param: float = 0.0

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r} must be one of {', '.join(ENGINES)}")
        if not _TERM_SET.issuperset(self.states):
            unknown = sorted(set(self.states) - _TERM_SET)
            raise ValueError(f"states has terms {unknown} that are not moment terms ({', '.join(MOMENT_TERMS)})")
        for name in ("micro_batches", "shard", "layers"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                check_count(name, v)


_INDEX = {t.replace(" ", "_").replace("-", "_"): i for i, t in enumerate(MOMENT_TERMS)}


def _moment(name: str, base: Sequence[float], **terms: float) -> Moment:
    """A moment: the resident ``base`` (in ``MOMENT_TERMS``' order) with some terms replaced."""
    out = list(base)
    for k, v in terms.items():
        out[_INDEX[k]] = v
    return Moment.trusted(name, tuple(out))  # as many terms as MOMENT_TERMS: base has them


def layer_backward_work(s: StageStep) -> float:
    """Net temporaries of a decoder layer's backward at the largest of two points the tracker measures (module
    docstring), over the incoming gradient (2·T·h'): at the MLP's activation, the down projection's bf16 weight
    gradient and the gradients of the MLP's activations (6·T_mlp·f' gated, 4·T_mlp·f' plain) less down_proj's
    freed input (2·T_mlp·f'); after the MLP's first projections, all its bf16 weight gradients (the larger for a MoE
    layer, whose grouped GEMMs produce every local expert's at once)."""
    grads = (6 if s.gated_mlp else 4) * s.mlp_tokens * s.mlp_width
    at_activation = s.mlp_weight_grad + grads - 2 * s.mlp_tokens * s.mlp_width
    return 2 * s.tokens * s.hidden + max(at_activation, s.mlp_weight_grads)


# bytes per logit (T·V' of them) of the loss's working copies over what it saves (module docstring): transformers'
# ForCausalLMLoss (fsdp2 and deepspeed run transformers models) 6 in forward (bf16 logits and their fp32 copy) and 8
# in backward (the fp32 gradients of log_softmax's output and input, measured to the byte by FSDPMemTracker); torch's
# loss_parallel under TP 10 and 12 (measured with the tracker); Megatron-LM's in-place vocab-parallel cross-entropy 2
# and 2 (the bf16 logits; the bf16 cast of the gradient written into the saved softmax)
LOSS_BYTES_PER_LOGIT = {
    ("transformers", "forward"): 6,
    ("transformers", "backward"): 8,
    ("loss_parallel", "forward"): 10,
    ("loss_parallel", "backward"): 12,
    ("megatron", "forward"): 2,
    ("megatron", "backward"): 2,
}


def loss_working_bytes(tokens: float, vocab: float, engine: str, phase: str, loss_parallel: bool = False) -> float:
    """Bytes the loss allocates beyond what it saves, at its ``phase`` (``"forward"`` or ``"backward"``), for
    ``tokens`` tokens and ``vocab`` vocabulary entries on this GPU, as ``engine`` computes it
    (``LOSS_BYTES_PER_LOGIT``).

        >>> loss_working_bytes(8192, 128256, "fsdp2", "backward") / 1e9   # transformers' cross-entropy
        8.405385216
    """
    if phase not in ("forward", "backward"):
        raise ValueError(f"phase={phase!r} must be 'forward' or 'backward'")
    if engine not in ENGINES or engine == "lab":
        raise ValueError(f"engine={engine!r} must be one of megatron, fsdp2, deepspeed")
    kind = "megatron" if engine == "megatron" else ("loss_parallel" if loss_parallel else "transformers")
    return LOSS_BYTES_PER_LOGIT[kind, phase] * tokens * vocab


def step_moments(s: StageStep) -> tuple[Moment, ...]:
    """The moments of one step of stage ``s`` on one GPU, in step order (module docstring).

    The lab page's ledger has a single moment, its own total (model states + saved activations), so that every
    number the lab page gives stays as it is."""
    base = tuple(float(s.states.get(k, 0.0)) for k in MOMENT_TERMS)
    if s.engine == "lab":
        return (_moment("model states + activations", base, activations=s.saved),)
    TV = s.tokens * s.vocab
    full = s.recomputed
    work = layer_backward_work(s)
    # saved bytes at the last layer's backward (the loss's and the head's are freed) and at the first layer's
    # (only this micro-batch's first layer and what lies before the layers, plus the other micro-batches in flight)
    at_top = s.saved - (s.loss_saved + s.head_saved if s.last else 0.0)
    at_bottom = s.saved - s.micro_saved + s.first_layer_saved + (s.embedding_saved if s.first else 0.0)
    out: list[Moment] = []

    if s.engine == "fsdp2":
        per_unit = not s.pipelined and s.zero in (0, 3)  # units gathered per use (reshard_after_forward=True)
        kept = not s.pipelined and s.zero == 2  # reshard_after_forward=False: in ``unsharded parameters`` already
        unit = s.layer_weights if per_unit else 0.0
        head = s.head_weights if s.last and not s.pipelined and not kept else 0.0
        embed = s.embedding_weights if s.first and per_unit else 0.0
        rs = 2 * s.layer_weights if not s.pipelined else 0.0  # the previous unit's fp32 reduce-scatter input
        # a layer's backward holds one all-gather buffer: the next unit's, prefetched (that of the layer below, or
        # the embedding's below the first layer), or its own when FSDP2 keeps it (``gather_kept``)
        ag_top = unit if (s.layers > 1 or s.gather_kept) else embed
        ag_bottom = unit if s.gather_kept else embed
        loss_fwd = loss_working_bytes(s.tokens, s.vocab, "fsdp2", "forward", s.loss_parallel) / TV if TV else 0.0
        loss_bwd = loss_working_bytes(s.tokens, s.vocab, "fsdp2", "backward", s.loss_parallel) / TV if TV else 0.0
        if s.last:
            out.append(
                _moment(
                    "loss forward",
                    base,
                    unsharded_parameters=base[_INDEX["unsharded_parameters"]] + head,
                    all_gather_buffers=head,
                    activations=s.saved,
                    temporaries=loss_fwd * TV,
                )
            )
            out.append(
                _moment(
                    "loss backward",
                    base,
                    unsharded_parameters=base[_INDEX["unsharded_parameters"]] + head,
                    activations=s.saved,
                    temporaries=loss_bwd * TV,
                )
            )
        u = base[_INDEX["unsharded_parameters"]] + unit
        out.append(
            _moment(
                "backward of the last layer",
                base,
                unsharded_parameters=u,
                all_gather_buffers=ag_top,
                activations=at_top,
                temporaries=work + full,
            )
        )
        if s.layers > 1:
            out.append(
                _moment(
                    "backward of the first layer",
                    base,
                    unsharded_parameters=u,
                    all_gather_buffers=ag_bottom,
                    reduce_scatter_buffers=rs,
                    activations=at_bottom,
                    temporaries=work + (full + s.layer_weights if full else 0.0),
                )
            )
        out.append(_moment("optimizer step", base))  # torchtitan's fused AdamW steps in place
        return tuple(out)

    if s.engine == "megatron":
        if s.last:
            for phase in ("forward", "backward"):
                logits = loss_working_bytes(s.tokens, s.vocab, "megatron", phase)
                out.append(_moment(f"loss {phase}", base, activations=s.saved, temporaries=logits))
        gathered = 2 * s.layer_weights if s.zero == 3 else 0.0  # Megatron-FSDP: this layer's and the prefetched
        gathered *= 1 + s.fp8_copy_bytes_per_param / 2  # and their FP8 copies (layer_weights: 2 bytes a parameter)
        out.append(
            _moment(
                "backward of the last layer",
                base,
                unsharded_parameters=gathered,
                activations=at_top,
                temporaries=work + full,
            )
        )
        if s.layers > 1:
            out.append(
                _moment(
                    "backward of the first layer",
                    base,
                    unsharded_parameters=gathered,
                    activations=at_bottom,
                    temporaries=work + full,
                )
            )
        out.append(_moment("optimizer step", base, temporaries=s.optimizer_grad_copy))
        return tuple(out)

    # deepspeed (transformers models, so transformers' loss)
    live = min(s.bucket_bytes, s.layers * s.layer_weights) if s.zero == 3 else 0.0
    bucket = s.bucket_bytes if s.zero in (1, 2) else s.reduce_bucket_bytes
    if s.last:
        fwd = loss_working_bytes(s.tokens, s.vocab, "deepspeed", "forward")
        out.append(_moment("loss forward", base, unsharded_parameters=live, activations=s.saved, temporaries=fwd))
        out.append(
            _moment(
                "loss backward",
                base,
                unsharded_parameters=live,
                reduce_scatter_buffers=bucket,
                activations=s.saved,
                temporaries=loss_working_bytes(s.tokens, s.vocab, "deepspeed", "backward"),
            )
        )
    out.append(
        _moment(
            "backward of the last layer",
            base,
            unsharded_parameters=live,
            reduce_scatter_buffers=bucket,
            activations=at_top,
            temporaries=work + full,
        )
    )
    if s.layers > 1:
        out.append(
            _moment(
                "backward of the first layer",
                base,
                unsharded_parameters=live,
                reduce_scatter_buffers=bucket,
                activations=at_bottom,
                temporaries=work + full,
            )
        )
    # ZeRO-1/2's step: the flat bf16 gradient partition and its fp32 copy (stage_1_and_2.py#L2327-L2341)
    shard_params = base[_INDEX["optimizer_states"]] / 12 if s.zero < 3 else 0.0
    out.append(_moment("optimizer step", base, temporaries=6 * shard_params))
    return tuple(out)


def peak_moment(moments: Sequence[Moment]) -> Moment:
    """The largest moment (the first of equals)."""
    if not moments:
        raise ValueError("no moments")
    return max(moments, key=lambda m: m.total)


# ---------------------------------------------------------------- the verdict: allocated peak → device


@cache
def overheads() -> dict[str, float]:
    """The sourced figures of ``data/memory_overheads.json`` by name (bytes or ratios; their sources are there)."""
    return {k: float(v["value"]) for k, v in read_json("memory_overheads.json")["figures"].items()}


# The caching allocator's reserved ÷ allocated at the peak: Megatron-LM PR #5662's logged peak pair (max allocated
# 5,670.39 MiB, max reserved 6,406 MiB), the recent of the two peak-to-peak pairs in data/memory_overheads.json (the
# other, Megatron-LM #60 on V100 in 2020, is 1.39). A stated default, not a measurement of the reader's run.
RESERVED_RATIO = 6406.0 / 5670.39
# Per engine: torchtitan launches with PYTORCH_ALLOC_CONF="expandable_segments:True" (run_train.sh#L43 at
# pytorch/torchtitan b5bcd76), whose segments grow by mapping pages as needed, so its reserve beyond the allocated
# peak is taken as 0 (no published allocated/reserved pair with expandable segments was found: an assumption, said in
# the verdict); Megatron-LM refuses expandable segments with its overlapped gradient buffers
# (megatron/core/distributed/distributed_data_parallel_config.py#L263-L266 at d98e8a6) and DeepSpeed does not set
# them: both take RESERVED_RATIO.
ENGINE_RESERVED_RATIO = {"fsdp2": 1.0, "megatron": RESERVED_RATIO, "deepspeed": RESERVED_RATIO, "lab": 1.0}
# NCCL's memory per communicator: nccl issue #964's measurement on 4 A100s (688 MB for a group of more than 2 GPUs).
NCCL_PER_COMMUNICATOR = 688e6


@dataclass(frozen=True)
class Headroom:
    """The memory verdict of one GPU: the allocated peak, grown by the caching allocator (``reserved_ratio``) and
    added to what lives outside PyTorch's allocator (``outside``: the CUDA context, cuBLAS/cuBLASLt workspaces and
    NCCL's buffers per communicator), against what the device exposes (``usable``). Bytes.

        >>> h = Headroom(peak_allocated=60e9, usable=84.94e9, outside=2.6e9, reserved_ratio=1.13)
        >>> h.verdict
        'fits, 14.5 GB to spare'
        >>> Headroom(peak_allocated=74e9, usable=84.94e9, outside=2.6e9, reserved_ratio=1.13).verdict
        'fits only if the allocator reserves under 11.3 % more'
    """

    peak_allocated: float
    usable: float
    outside: float
    reserved_ratio: float = RESERVED_RATIO

    @property
    def peak_reserved(self) -> float:
        """What the allocator holds from CUDA at the peak: allocated × ``reserved_ratio``."""
        return self.peak_allocated * self.reserved_ratio

    @property
    def headroom(self) -> float:
        """Bytes left at the peak (negative: short by that much)."""
        return self.usable - self.outside - self.peak_reserved

    @property
    def fits(self) -> bool:
        return self.headroom >= 0

    @property
    def verdict(self) -> str:
        room = self.usable - self.outside
        if self.headroom >= 0:
            return f"fits, {self.headroom / 1e9:.1f} GB to spare"
        if self.peak_allocated <= room:
            slack = room / self.peak_allocated - 1
            return f"fits only if the allocator reserves under {slack * 100:.1f} % more"
        over = f"does not fit: {(self.peak_allocated - room) / 1e9:.1f} GB over"
        return over + (" before the allocator's reserve" if self.reserved_ratio > 1 else "")


def outside_allocator(communicators: int) -> float:
    """Bytes one GPU's process holds outside PyTorch's caching allocator: the CUDA context on Hopper (the larger of
    the two measured contexts), one cuBLAS and one cuBLASLt workspace, and NCCL's buffers for each communicator
    (``NCCL_PER_COMMUNICATOR``) of the plan's process groups larger than one GPU."""
    check_non_negative_int("communicators", communicators)
    f = overheads()
    fixed = f["cuda_context_hopper_bytes"] + f["cublas_workspace_hopper_bytes"] + f["cublaslt_workspace_hopper_bytes"]
    return fixed + communicators * NCCL_PER_COMMUNICATOR
