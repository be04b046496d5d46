"""A plan's report: memory per GPU, bytes per dimension with link and time, bubble.

A ``Plan`` (``plan.construct``) is built from small validated parts, each checked once where it is defined:

* the model (``model.ModelSpec``),
* the mesh shape (``dims.ParallelDims``: TP, CP, PP, DP, EP, expert TP, axis order),
* the workload (``Workload``: sequence length, micro-batch size, micro-batches per step),
* the machine (``hardware.Hardware``: the only source of GPU memory, GPUs per node and bandwidths),
* the bookkeeping convention (``accounting.Accounting``: the lab page's by default),
* the plan's own choices: ZeRO stage, recompute mode, sequence parallelism, virtual stages, the layers of each
  pipeline stage.

``Plan.create(...)`` is the front door (a model name or path, flat keyword arguments); ``evaluate(plan)``
returns a ``Report``. Each number comes from its dimension's module:

* model states: ``zero.model_states_terms`` on each stage's parameters (``stages``), dense parameters split
  over TP and sharded by ZeRO over the dp × cp ranks; routed experts split over expert-TP × EP and sharded over
  the expert-data-parallel ranks. Memory is that of the most-loaded pipeline stage: the maximum over every
  stage of its own model states plus its own activations.
* activations: ``activations.activation_bytes_per_layer`` (Korthikanti 2022 Table 2) × each stage's layers ×
  its in-flight micro-batches (``stages``) ÷ c.
* bytes per GPU per step, by dimension, on the stage with the most layers: ``dp.grad_sync_bytes`` (gradient
  synchronisation as a two-level ring, its CP part reported under ``cp``; ZeRO-3 3Ψ), ``tp.tp_bytes_per_step``,
  ``pp.pp_bytes_per_step``, ``cp.cp_kv_bytes_per_step`` (K/V of the stage's full-attention layers),
  ``ep.ep_bytes_per_step`` (dispatch + combine of ``ep.tokens_per_gpu``), and ``edp``: the routed experts'
  gradient synchronisation over the ranks that hold the same expert shard, when that group differs from the
  dense one (EP > 1 or expert TP ≠ TP; otherwise the experts sync with the dense gradients). A group of size 1
  sends 0 bytes and has link ``None``.
* time per dimension = bytes ÷ the bandwidth of the link its group uses (``mesh.Mesh.link``); overlap and
  latency ignored (the step-time model, ``steptime``, adds them).
* bubble = (p−1)/(m·v) of the ideal compute time (``pp``).

    >>> r = evaluate(Plan.create("qwen3.8-27b", gpus=8, dp=8, zero=3, recompute="full"))
    >>> round(r.memory_bytes["total"] / 1e9, 1), r.fits, round(r.comm_bytes_per_step["dp"] / 1e9, 1)
    (58.2, True, 145.9)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import NamedTuple

from meshplan.core.collectives import Collective, ledger_bytes
from meshplan.core.units import add_up
from meshplan.parallel import activations as act
from meshplan.parallel.cp import (
    cp_collectives,
    kv_width_per_gpu,
    linear_attention_cp_collectives,
    linear_attention_widths,
)
from meshplan.parallel.dp import grad_sync_bytes
from meshplan.parallel.engine_activations import _stage_parts, stage_bytes
from meshplan.parallel.ep import ep_collectives, tokens_per_gpu
from meshplan.parallel.peak import (
    ENGINE_RESERVED_RATIO,
    MOMENT_TERMS,
    Headroom,
    Moment,
    StageStep,
    outside_allocator,
    peak_moment,
    step_moments,
)
from meshplan.parallel.pp import bubble_fraction, bubble_share_of_time, pp_bytes_per_step
from meshplan.parallel.tp import qkv_gather_collectives, tp_collectives
from meshplan.parallel.zero import model_states_terms, sync_terms
from meshplan.plan.construct import Plan
from meshplan.plan.notes import report_notes
from meshplan.plan.report import TRAFFIC, Report, StagePeak, StepInputs
from meshplan.spec.dims import ParallelDims
from meshplan.spec.hardware import Hardware
from meshplan.spec.mesh import Mesh
from meshplan.spec.model import ModelSpec
from meshplan.spec.stages import Stage, inflight_micro_batches, interleave_factor, interleaved_inflight_chunks, stages

__all__ = [
    "evaluate",
    "freed_at_the_head",
    "memory_budget",
    "memory_floor",
    "memory_reason",
    "stage_peak",
    "step_inputs",
]


@lru_cache(maxsize=4096)
def _mesh(dims: ParallelDims, gpus_per_node: int) -> Mesh:
    """The mesh of a shape, kept with the links it has worked out (large expert meshes walk their groups:
    ``_worked_out`` drops the groups once the links are known, so that a search's cache holds no world-sized
    arrays)."""
    return Mesh.from_dims(dims, gpus_per_node)


def _worked_out(mesh: Mesh, keys: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    links = tuple((k, mesh.link(k)) for k in keys)
    mesh.forget_groups()
    return links


@lru_cache(maxsize=4096)
def _links(dims: ParallelDims, gpus_per_node: int) -> tuple[tuple[str, str | None], ...]:
    """The link of every traffic key for a mesh shape (cached: large expert meshes walk their groups)."""
    return _worked_out(_mesh(dims, gpus_per_node), TRAFFIC)


def lab_per_layer(plan: Plan) -> float:
    """The lab page's activation bytes of one layer for ``plan`` (Korthikanti's GPT layer); 0 for the engine ledgers,
    which count each layer by its type (``engine_activations``)."""
    if plan.accounting.activations != "korthikanti":
        return 0.0
    m = plan.model
    return act.activation_bytes_per_layer(
        plan.seq, plan.micro_batch_size, m.hidden_size, m.num_attention_heads, plan.tp, plan.recompute,
        plan.sequence_parallel,
    )  # fmt: skip


def _stage_activations(plan: Plan, stage: Stage, per_layer_lab: float) -> float:
    """Activation bytes per GPU of one pipeline stage: its layers × its in-flight micro-batches (× the interleave
    factor), per layer by the plan's ledger (Korthikanti's GPT layer for the lab's, ``engine_activations`` per layer
    type for the engines', whose first stage also keeps the token ids and rotary tables and whose last stage the
    final norm, the head's input and the fp32 logits), ÷ c (each CP rank holds s/c tokens). With the interleaved
    schedule (v > 1) the lab's ledger keeps Korthikanti's convention, every rank as loaded as the first (× the
    interleave factor), and the engines' ledgers count each rank's own in-flight chunks
    (``stages.interleaved_inflight_chunks``: the last rank holds p − (p−1)/v micro-batches' worth of its layers, not
    1 + (p−1)/(p·v))."""
    d = plan.dims
    inflight = inflight_micro_batches(d.pp, stage.index, plan.micro_batches)
    factor = interleave_factor(d.pp, plan.virtual_stages)
    if plan.accounting.activations == "korthikanti":
        return per_layer_lab * stage.num_layers * inflight * factor / d.cp

    layers, rest = stage_bytes(
        plan.model,
        stage.layers,
        plan.seq // d.cp,
        plan.micro_batch_size,
        recompute=plan.recompute,
        tp=d.tp,
        sp=plan.sequence_parallel,
        first=stage.index == 0,
        last=stage.index == d.pp - 1,
        device=plan.kernel_path,
    )
    if plan.virtual_stages > 1:  # the engines' interleaved schedule: each rank's own warm-up (spec.stages)
        chunks = interleaved_inflight_chunks(d.pp, stage.index, plan.micro_batches, plan.virtual_stages)
        return layers * chunks / plan.virtual_stages + rest * inflight
    return (layers * factor + rest) * inflight


def _stage_states(plan: Plan, stage: Stage) -> dict[str, float]:
    """Model-state bytes per GPU of one pipeline stage, by term: its dense parameters ÷ t and its routed experts
    ÷ (expert TP × EP), each through ``zero.model_states_terms`` over the group its ZeRO stage shards across."""
    d, bpp = plan.dims, plan.accounting.bytes_per_param
    zero = plan.accounting.shard_stage(plan.zero)
    terms = model_states_terms(stage.dense_params / d.tp, zero, d.shard_group, bpp)
    if stage.expert_params:
        expert_group = d.expert_dp if (d.ep > 1 or d.etp != d.tp) else d.shard_group
        for k, x in model_states_terms(stage.expert_params / (d.etp * d.ep), zero, expert_group, bpp).items():
            terms[k] += x
    extra = plan.accounting.unsharded_bytes_per_param(plan.zero, d.pp)
    if extra:
        terms["unsharded weights/gradients"] = extra * (
            stage.dense_params / d.tp + stage.expert_params / (d.etp * d.ep)
        )
    fp8 = fp8_weight_copy_bytes(plan, stage)
    if fp8:
        terms["fp8 weight copies"] = fp8
    return terms


# Transformer Engine's FP8 weight workspaces, per parameter of a TE linear (or grouped linear) on this GPU: the
# rowwise FP8 copy and the columnwise one (the transpose; Hopper's FP8 GEMMs take only the TN layout, so the
# backward's data-gradient GEMM needs it), 1 byte each; MXFP8 adds one E8M0 scale per 32 elements to each copy.
FP8_WEIGHT_COPY_BYTES = {"fp8": 2.0, "mxfp8": 2.0 + 2 / 32}


def fp8_weight_copy_bytes(plan: Plan, stage: Stage) -> float:
    """Bytes of FP8 weight copies a GPU of ``stage`` keeps through the step, in the megatron ledger with
    ``precision`` fp8 or mxfp8: Transformer Engine caches each linear's quantized weight across the micro-batches
    of a step (``_fp8_workspaces``: transformer_engine/pytorch/module/linear.py#L1958-L2071 at TE d0067d0d, whenever
    the caller passes ``is_first_microbatch``, as Megatron-Core's TE wrappers do:
    megatron/core/extensions/transformer_engine.py#L1082-L1088 at core_v0.19.0), ``FP8_WEIGHT_COPY_BYTES`` per
    parameter of the decoder layers' linears on this GPU (the embedding and the output head stay bf16; norms are
    counted with the layers, a rounding error). torchtitan's float8 (torchao) casts each weight when a GEMM needs it
    and frees it after (a temporary, not kept): 0 in the fsdp2 ledger, as in bf16. 0 in the lab page's ledger.
    Megatron-FSDP with its parameters sharded (ZeRO-3) keeps no copy of the whole model: the FP8 copy of a unit is
    made when the unit is gathered and dropped when it is released (``fp8_create_transpose_cache`` and
    ``release_params_fp8_transpose_cache``, megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py
    L497-L498 and L625-L626 at core_v0.19.0, ``keep_fp8_transpose_cache`` off by default), so it is priced with the
    gathered units in ``parallel.peak`` (``fp8_copy_bytes_per_param``), not here."""
    if plan.precision == "bf16" or plan.accounting.name != "megatron" or plan.zero == 3:
        return 0.0
    m, d = plan.model, plan.dims
    dense = add_up(m.layers[i].params - m.layers[i].expert_params for i in stage.layers) / d.tp
    experts = add_up(m.layers[i].expert_params for i in stage.layers) / (d.etp * d.ep)
    return FP8_WEIGHT_COPY_BYTES[plan.precision] * (dense + experts)


def _stage_memory(plan: Plan, per_layer_activations: float) -> list[tuple[dict[str, float], float]]:
    """(model-state terms, activation bytes) per GPU of each pipeline stage. Stages holding the same parameters
    share one computation of their terms (equal stages do: a search evaluates thousands of plans)."""
    states: dict[tuple[float, float], dict[str, float]] = {}
    out = []
    for st in plan.stages:
        key = (st.dense_params, st.expert_params)
        if key not in states:
            states[key] = _stage_states(plan, st)
        out.append((states[key], _stage_activations(plan, st, per_layer_activations)))
    return out


# DeepSpeed v0.19.8 as the export configures it (``export_deepspeed``: its defaults written out, and overlap_comm on,
# as the step time overlaps the data-parallel sync): ZeRO-1/2 keep two gradient buckets of ``reduce_bucket_size`` =
# 5e8 elements in the bf16 training dtype (deepspeed/runtime/zero/config.py#L113; stage_1_and_2.py#L3256-L3280: the
# second bucket is allocated with overlap_comm, #L3272-L3278); ZeRO-3 keeps up to ``stage3_max_live_parameters`` =
# 1e9 bf16 parameters gathered (config.py#L245) and one reduce buffer of ``reduce_bucket_size`` bf16 elements
# (stage3.py#L477, #L780-L784).
DEEPSPEED_BUCKET_BYTES = {1: 2 * 2 * 5e8, 2: 2 * 2 * 5e8, 3: 2 * 1e9}
DEEPSPEED_Z3_REDUCE_BYTES = 2 * 5e8
_STATE_TERM = {
    "weights": "parameters",
    "grads": "gradients",
    "master": "optimizer states",
    "adam_m": "optimizer states",
    "adam_v": "optimizer states",
    "unsharded weights/gradients": "unsharded parameters",
    "fp8 weight copies": "parameters",
}


@lru_cache(maxsize=16384)
def _stage_widths(
    m: ModelSpec, layers: range, t: int, etp: int, ep: int, T: int
) -> tuple[float, float, float, float, bool, float | None]:
    """(MLP width on this GPU, tokens the MLP computes, the down projection's weight-gradient bytes, whether the MLP is
    gated, the largest layer's parameters on this GPU) of the stage holding ``layers``; a MoE layer whose routed
    tokens (T·k at the expert width) outweigh the dense MLP's gives its experts' figures (every local expert's
    weight gradient)."""
    specs = [m.layers[i] for i in layers] if m.layers else []
    dense_mlp = max((L.intermediate_size for L in specs if not L.num_experts), default=4 * m.hidden_size)
    gated = all(L.mlp == "gated" for L in specs) if specs else True
    f, tokens_mlp, wgrad = dense_mlp / t, float(T), 2 * m.hidden_size * dense_mlp / t
    wgrads = (3 if gated else 2) * wgrad
    moe = [L for L in specs if L.num_experts]
    if moe:
        L = max(moe, key=lambda x: x.expert_intermediate_size * x.experts_per_token)
        fe = L.expert_intermediate_size / etp
        experts = 2 * L.expert_params / (etp * ep)  # bf16 weight gradients of the local experts
        if fe * L.experts_per_token > f:
            f, tokens_mlp = fe, float(T * L.experts_per_token)
            wgrad = 2 * m.hidden_size * fe * L.num_experts / ep
        wgrads = max(wgrads, experts)
    per_layer = max((L.params - L.expert_params) / t + L.expert_params / (etp * ep) for L in specs) if specs else None
    return f, tokens_mlp, wgrad, wgrads, gated, per_layer


@lru_cache(maxsize=1024)
def _unit_params(m: ModelSpec) -> tuple[float, float, int]:
    """Parameters of the output unit (final norm + lm_head; with tied embeddings, the embedding too: torchtitan's
    ``apply_fsdp_to_decoder`` groups them, ``torchtitan/distributed/fsdp.py`` in torchtitan 0.3.0) and of the
    embedding's own unit (0 when tied), and the most routed experts a layer has."""
    comp = m.params.components
    tied = m.tie_word_embeddings
    experts = max((L.num_experts for L in m.layers), default=0)
    return (
        comp.get("head", 0) + (comp.get("embedding", 0) if tied else 0) + m.hidden_size,
        0 if tied else comp.get("embedding", 0),
        experts,
    )


_ACT = MOMENT_TERMS.index("activations")


def _with_saved(moments: tuple[Moment, ...], saved: float) -> tuple[Moment, ...]:
    """A stage's moments priced with no saved activations, with ``saved`` (its in-flight saved bytes) added where
    the step holds them: every moment but the optimizer step (``parallel.peak.step_moments``)."""
    a = _ACT
    return tuple(
        m
        if m.name == "optimizer step"
        else Moment.trusted(m.name, (*m.values[:a], m.values[a] + saved, *m.values[a + 1 :]))
        for m in moments
    )


def _lab_terms(states: dict[str, float]) -> dict[str, float]:
    out = dict.fromkeys(MOMENT_TERMS, 0.0)
    for k, v in states.items():
        out[_STATE_TERM[k]] += v
    return out


_NO_PARTS = dict.fromkeys(("layers", "first_layer", "recomputed", "before", "head", "loss"), 0.0)


def _stage_inputs(plan: Plan, stage: Stage) -> tuple[dict[str, float], tuple]:
    """What a stage's moments read of its layers: its saved bytes split as a step frees them
    (``engine_activations.stage_parts``; zeros in the lab page's ledger) and its widths (``_stage_widths``)."""
    d = plan.dims
    T = plan.micro_batch_size * plan.seq // d.cp
    if plan.accounting.activations == "engine":
        parts = _stage_parts(
            plan.model, stage.layers, plan.seq // d.cp, plan.micro_batch_size, plan.recompute, d.tp,
            plan.sequence_parallel, stage.index == 0, stage.index == d.pp - 1, plan.kernel_path,
        )  # fmt: skip
    else:
        parts = _NO_PARTS
    return parts, _stage_widths(plan.model, stage.layers, d.tp, d.etp, d.ep, T)


def _stage_step(
    plan: Plan,
    stage: Stage,
    states: dict[str, float],
    saved: float,
    inputs: tuple[dict[str, float], tuple] | None = None,
) -> StageStep:
    """The inputs of ``parallel.peak`` for one stage's GPU: its states by moment term, its saved bytes split as a
    step frees them (``engine_activations.stage_parts``), its widths, tokens and units on this GPU (``inputs``:
    ``_stage_inputs``' answer, when the caller has it)."""
    m, d = plan.model, plan.dims
    t, sp = d.tp, plan.sequence_parallel
    first, last = stage.index == 0, stage.index == d.pp - 1
    T = plan.micro_batch_size * plan.seq // d.cp
    by_term: dict[str, float] = {}
    for k, v in states.items():
        by_term[_STATE_TERM[k]] = by_term.get(_STATE_TERM[k], 0.0) + v
    parts, widths = inputs if inputs is not None else _stage_inputs(plan, stage)
    f, tokens_mlp, wgrad, wgrads, gated, per_layer = widths
    fsdp2 = plan.accounting.name == "fsdp2"
    experts = _unit_params(m)[2] if fsdp2 else 0
    if per_layer is None:
        per_layer = stage.dense_params / max(stage.num_layers, 1) / t
    head, embed, _ = _unit_params(m)
    head, embed = head / t, embed / t
    micro = parts["layers"] + parts["before"] + parts["head"] + parts["loss"]
    return StageStep(
        engine=plan.accounting.name,
        states=by_term,
        saved=saved,
        micro_saved=micro if plan.accounting.activations == "engine" else saved,
        loss_saved=parts["loss"],
        head_saved=parts["head"],
        embedding_saved=parts["before"],
        first_layer_saved=parts["first_layer"],
        recomputed=parts["recomputed"],
        tokens=T,
        vocab=m.vocab_size / t,
        hidden=m.hidden_size / (t if sp else 1),
        mlp_width=f,
        mlp_tokens=tokens_mlp,
        gated_mlp=gated,
        mlp_weight_grad=wgrad,
        layer_weights=2 * per_layer,
        head_weights=2 * head,
        embedding_weights=2 * embed,
        shard=d.shard_group,
        micro_batches=plan.micro_batches,
        layers=max(stage.num_layers, 1),
        zero=plan.zero,
        pipelined=d.pp > 1,
        first=first,
        last=last,
        bucket_bytes=DEEPSPEED_BUCKET_BYTES.get(plan.zero, 0.0) if plan.accounting.name == "deepspeed" else 0.0,
        reduce_bucket_bytes=DEEPSPEED_Z3_REDUCE_BYTES
        if plan.accounting.name == "deepspeed" and plan.zero == 3
        else 0.0,
        mlp_weight_grads=wgrads,
        gather_kept=fsdp2 and experts > 0 and d.expert_dp * d.ep > experts and stage.moe_layers > 0,
        loss_parallel=fsdp2 and t > 1,
        fp8_copy_bytes_per_param=FP8_WEIGHT_COPY_BYTES[plan.precision]
        if plan.precision != "bf16" and plan.accounting.name == "megatron" and plan.zero == 3
        else 0.0,
        # the fp32 copy of the gradients the optimizer updates (its master weights and moments: 12 bytes each)
        optimizer_grad_copy=4 * by_term.get("optimizer states", 0.0) / 12 if plan.accounting.grad_reduce_bf16 else 0.0,
    )


# A stage's moments priced with no saved bytes, and for each moment in step order (name, the sum of its terms before
# ``activations``, its activations, its temporaries), or (name, total, None, None) for the optimizer step, which holds
# no saved bytes: a moment's total with ``saved`` added is then ``pre + (activations + saved) + temporaries``, the very
# additions ``Moment.total`` makes in ``MOMENT_TERMS``' order (activations is the term before the last).
_Fast = tuple[tuple[str, float, float | None, float | None], ...]
Moments = dict[tuple, tuple[tuple[Moment, ...], _Fast, object]]
assert MOMENT_TERMS[-2:] == ("activations", "temporaries")


def _fast(moments: tuple[Moment, ...]) -> _Fast:
    out: list[tuple[str, float, float | None, float | None]] = []
    for mo in moments:
        if mo.name == "optimizer step":
            out.append((mo.name, mo.total, None, None))
        else:
            pre = 0.0
            for x in mo.values[:_ACT]:
                pre += x
            out.append((mo.name, pre, mo.values[_ACT], mo.values[_ACT + 1]))
    return tuple(out)


def _base_moments(
    plan: Plan, stage: Stage, states: dict[str, float], memo: Moments
) -> tuple[tuple[Moment, ...], _Fast]:
    """``step_moments`` of one stage with no saved bytes (``_with_saved`` adds them), and their ``_fast`` form,
    priced once per what they read: the plan's ZeRO stage, micro-batches, micro-batch size and recompute mode, the
    stage's ends, layers, parameters and states, and what its layers save and how wide they are (``_stage_inputs``).
    ``memo`` may serve several plans of one model, ledger, sequence length and mesh shape (a search's)."""
    inputs = _stage_inputs(plan, stage)
    # the states, parts and widths by identity (one dict or tuple per value, from the caller's and the lru caches),
    # each kept alive in the memo with its entry so that no other object can take its id while the memo lives
    key = (
        plan.zero,
        plan.micro_batch_size,
        plan.micro_batches,
        plan.recompute,
        stage.index == 0,
        stage.index == plan.dims.pp - 1,
        stage.num_layers,
        stage.moe_layers > 0,
        stage.dense_params,
        id(states),
        id(inputs[0]),
        id(inputs[1]),
    )
    got = memo.get(key)
    if got is None:
        moments = step_moments(_stage_step(plan, stage, states, 0.0, inputs))
        got = memo[key] = (moments, _fast(moments), (states, inputs))
    return got[0], got[1]


def _peak_at(fast: _Fast, saved: float) -> tuple[float, str]:
    """The largest moment's total (the first of equals) and name, with ``saved`` bytes added where the step holds
    them: equal to the bit to ``peak_moment(_with_saved(moments, saved)).total`` (see ``_Fast``)."""
    best, name = -math.inf, ""
    for n, pre, a, tmp in fast:
        t = pre if a is None or tmp is None else pre + (a + saved) + tmp
        if t > best:
            best, name = t, n
    return best, name


def stage_peak(
    plan: Plan, states: Sequence[dict[str, float]], saved: Sequence[float], memo: Moments
) -> tuple[float, int, str]:
    """An engine ledger's allocated peak of ``plan`` without building its moments: (bytes, the stage it is on, the
    first of equals, and its moment's name), from each stage's model-state terms (``_stage_states``) and in-flight
    saved bytes (``_stage_activations``): the numbers ``evaluate``'s ``by_stage`` gives, to the bit."""
    best, k_best, name = -math.inf, 0, ""
    sts = plan.stages
    if len(states) != len(sts) or len(saved) != len(sts):
        raise ValueError(f"stage_peak needs {len(sts)} stages' states and saved bytes")
    for group in plan.stage_groups:  # stages alike in all their moments read (their states too: equal parameters)
        k0 = group[0]
        fast = _base_moments(plan, sts[k0], states[k0], memo)[1]
        # each moment's total is a float sum that never falls as the saved bytes grow (rounding is monotone), so the
        # group's largest peak is that of its member with the most saved; when that is its first member (1F1B keeps
        # fewer micro-batches in flight on later stages) no other member can beat it nor tie it with a lower index
        k_top = max(group, key=saved.__getitem__)
        for k in (k0,) if saved[k_top] == saved[k0] else group:
            t, n = _peak_at(fast, saved[k])
            if t > best or (t == best and k < k_best):
                best, k_best, name = t, k, n
    return best, k_best, name


def memory_budget(ledger: str, hw: Hardware, dims: ParallelDims, peak_allocated: float) -> Headroom:
    """The memory verdict of an allocated peak on ``hw`` for a plan of mesh ``dims`` in ``ledger``. The lab page's
    convention has no allocator and nothing outside it, and compares with the datasheet's memory; the engines'
    peak grows by the caching allocator's reserve and sits beside the CUDA context, cuBLAS and one NCCL communicator
    per process group larger than one GPU (``parallel.peak.outside_allocator``), on what the device exposes
    (``device_total_bytes``, else the datasheet's)."""
    if ledger == "lab":
        return Headroom(peak_allocated, hw.gpu_memory_bytes, 0.0, 1.0)
    separate = dims.ep > 1 or dims.etp != dims.tp
    groups = add_up(n > 1 for n in (dims.tp, dims.cp, dims.pp, dims.dp, dims.ep)) + (separate and dims.expert_dp > 1)
    return Headroom(
        peak_allocated,
        hw.device_total_bytes or hw.gpu_memory_bytes,
        _outside(int(groups)),
        ENGINE_RESERVED_RATIO[ledger],
    )


@lru_cache(maxsize=64)
def _outside(communicators: int) -> float:
    return outside_allocator(communicators)


def freed_at_the_head(plan: Plan) -> float:
    """Bytes one micro-batch's loss and output head keep on the last stage and free before its decoder layers'
    backward (``engine_activations.stage_parts``' ``loss`` + ``head``; 0 in the lab page's ledger)."""
    if plan.accounting.activations != "engine":
        return 0.0
    d = plan.dims
    last = plan.stages[-1]
    parts = _stage_parts(
        plan.model, last.layers, plan.seq // d.cp, plan.micro_batch_size, plan.recompute, d.tp,
        plan.sequence_parallel, d.pp == 1, True, plan.kernel_path,
    )  # fmt: skip
    return parts["loss"] + parts["head"]


def memory_floor(
    ledger: str, states: Sequence[float], grads: Sequence[float], saved: Sequence[float], freed_last: float
) -> float:
    """A lower bound on the allocated peak from each stage's model-state total and saved activations alone (the
    search rejects a plan on it before building the plan's moments): every engine's last layer's backward holds at
    least the resident states plus what is saved, less what the last stage's loss and head have freed, and its
    optimizer step at least the states: max over stages of max(states, states + saved − freed·[last]). In the lab
    page's ledger it is the total itself (model states + activations of the most-loaded stage). ``grads`` is kept
    for ledgers whose gradients are not resident through the step (none at the pinned releases)."""
    p = len(states)
    if ledger == "lab":
        return max(s_ + a for s_, a in zip(states, saved, strict=True))
    out = 0.0
    for k, (s_, _g, a) in enumerate(zip(states, grads, saved, strict=True)):
        out = max(out, s_, s_ + a - (freed_last if k == p - 1 else 0.0))
    return out


def memory_reason(report: Report) -> str:
    """Why ``report``'s plan does not fit, in one line (the search's rejection)."""
    p = report.plan
    return floor_reason(p.accounting.name, p.hardware, p.dims, report.memory_floor) or peak_reason(report)


def floor_reason(ledger: str, hw: Hardware, dims: ParallelDims, floor: float) -> str:
    """The rejection when even the floor (``memory_floor``) does not fit; "" when it does."""
    room = memory_budget(ledger, hw, dims, floor)
    if room.fits:
        return ""
    if ledger == "lab":  # the floor is the lab page's total
        return f"needs {floor / 1e9:,.1f} GB per GPU > {hw.gpu_memory_bytes / 1e9:,.0f} GB"
    return f"at least {floor / 1e9:,.1f} GB allocated at its peak: {room.verdict}"


def peak_reason(report: Report) -> str:
    """The allocated peak, its moment (and stage, counted from 1, with pipeline parallelism) and its verdict."""
    peak = report.by_stage[report.peak_stage].peak
    return peak_line(peak.total, peak.name, report.peak_stage, report.plan.pp, report.headroom)


def peak_line(total: float, moment: str, stage: int, pp: int, room: Headroom) -> str:
    """``peak_reason``'s line from its parts: the peak's bytes, moment, 0-based stage and the verdict on it."""
    where = f", stage {stage + 1} of {pp}" if pp > 1 else ""
    return f"{total / 1e9:,.1f} GB allocated at its peak ({moment}{where}): {room.verdict}"


@lru_cache(maxsize=8192)
def _collectives(
    m: ModelSpec,
    s: int,
    b: int,
    t: int,
    c: int,
    e: int,
    recompute: str,
    sp: bool,
    regather: bool,
    linear_cp: bool,
    kv_gather: bool = False,
) -> tuple[tuple[str, tuple[Collective, ...]], ...]:
    """TP's, CP's and EP's collectives per unit and micro-batch (built once per what they read: a search asks the
    same lists for every ZeRO stage, DP size and virtual stage count). ``cp_linear``: CP's all-to-alls per Gated
    DeltaNet layer, where the ledger's engine runs them (``Accounting.linear_attention_cp``); ``tp_qkv``: the qkv
    output's all-gather and its gradient's reduce-scatter per softmax-attention layer when TP exceeds the KV heads
    and the ledger's engine runs that path (``Accounting.kv_gather``, ``tp.qkv_gather_collectives``)."""
    attn = next((L for L in m.layers if L.mixer == "attention"), None) if kv_gather else None
    tp_qkv: tuple[Collective, ...] = ()
    if attn is not None and t > (attn.num_kv_heads or attn.num_heads):
        a, kv, d = attn.num_heads, attn.num_kv_heads or attn.num_heads, attn.head_dim
        width = a * d + kv * d + kv * (attn.v_head_dim or d) + (a * d if attn.output_gate else 0)
        tp_qkv = qkv_gather_collectives(s // c, b, width, t, recompute=recompute)
    linear = next((L for L in m.layers if L.mixer == "linear_attention"), None) if linear_cp and c > 1 else None
    cp_linear: tuple[Collective, ...] = ()
    if linear is not None:
        widths = linear_attention_widths(
            linear.linear_num_key_heads, linear.linear_num_value_heads, linear.linear_key_head_dim,
            linear.linear_value_head_dim, t,
        )  # fmt: skip
        cp_linear = linear_attention_cp_collectives(s, b, widths[0], widths[1], c, recompute=recompute)
    return (
        ("cp_linear", cp_linear),
        ("tp_qkv", tp_qkv),
        ("tp", tp_collectives(s // c, b, m.hidden_size, t, recompute=recompute, regather=regather) if t > 1 else ()),
        (
            "cp",
            cp_collectives(s, b, kv_width_per_gpu(m.kv_width, m.num_key_value_heads, t), c, recompute=recompute)
            if c > 1
            else (),
        ),
        (
            "ep",
            ep_collectives(tokens_per_gpu(s, b, c, t, sp), m.experts_per_token, m.hidden_size, e, recompute=recompute)
            if e > 1
            else (),
        ),
    )


@lru_cache(maxsize=4096)
def _traffic_stage(m: ModelSpec, pp: int, layers_per_stage: tuple[int, ...] | None, balance: str) -> int:
    """The stage whose bytes a report gives: the one with the most layers, the most MoE layers among ties, the
    first among those."""
    return max(stages(m, pp, layers_per_stage, balance), key=lambda x: (x.num_layers, x.moe_layers, -x.index)).index


def _plan_collectives(plan: Plan) -> dict[str, tuple[Collective, ...]]:
    """``_collectives`` of ``plan``: what it reads of the plan and its ledger."""
    d, acc = plan.dims, plan.accounting
    sp = plan.sequence_parallel
    return dict(
        _collectives(
            plan.model, plan.seq, plan.micro_batch_size, d.tp, d.cp, d.ep, plan.recompute, sp,
            acc.tp_backward_regather and sp, acc.linear_attention_cp, acc.kv_gather,
        )
    )  # fmt: skip


def pp_send_bytes(plan: Plan, v: int) -> float:
    """Bytes one GPU of ``plan`` sends to the next stage per step with ``v`` chunks per rank (``pp_bytes_per_step``,
    a TP rank's share where the ledger's engine sends it scattered)."""
    d = plan.dims
    s, b, h = plan.seq // d.cp, plan.micro_batch_size, plan.model.hidden_size
    out = pp_bytes_per_step(s, b, h, d.pp, plan.micro_batches, v)
    return out / d.tp if plan.accounting.pp_send_divided(plan.sequence_parallel) else out


def pipeline_bubble(plan: Plan, v: int) -> float:
    """The bubble fraction of ``plan``'s pipeline with ``v`` chunks per rank (0 without one)."""
    return bubble_fraction(plan.pp, plan.micro_batches, v) if plan.pp > 1 else 0.0


def _plan_links(plan: Plan) -> dict[str, str | None]:
    """The link of every traffic key of ``plan``; none for ``edp`` when the experts sync with the dense gradients."""
    d, m = plan.dims, plan.model
    link = dict(_links(d, plan.hardware.gpus_per_node))
    if not ((d.ep > 1 or d.etp != d.tp) and m.is_moe):
        link["edp"] = None
    return link


@lru_cache(maxsize=4096)
def _time_links(dims: ParallelDims, gpus_per_node: int) -> tuple[tuple[str, str | None], ...]:
    """The links ``TimeInputs`` reads (TP's, CP's and EP's, and the pipeline's) for a mesh shape: not the data- and
    expert-data-parallel groups', the costliest to work out on a large expert mesh."""
    return _worked_out(_mesh(dims, gpus_per_node), ("tp", "cp", "ep", "pp"))


class TimeInputs(NamedTuple):
    """What ``steptime.step_time_floors`` reads of a plan besides the plan itself: its TP, CP, EP and pipeline links
    and TP's, CP's and EP's collectives, as ``step_inputs`` computes them, and the stage whose micro-batch it times
    (``time_inputs``)."""

    plan: Plan
    link: dict[str, str | None]
    collectives: dict[str, tuple[Collective, ...]]
    stage: int

    def for_recompute(self, plan: Plan) -> TimeInputs:
        """These inputs for ``plan``, this plan with another recompute mode: the collectives read it (what
        recomputation re-runs), the links and the stages do not."""
        return self._replace(plan=plan, collectives=_plan_collectives(plan))


def time_inputs(plan: Plan) -> TimeInputs:
    """``TimeInputs`` of ``plan``, timing the stage ``step_inputs`` reports the traffic of (the most layers, the most
    MoE layers among ties): the most work of any stage but for the embedding and head."""
    stage = _traffic_stage(plan.model, plan.pp, plan.layers_per_stage, plan.stage_balance)
    return TimeInputs(plan, dict(_time_links(plan.dims, plan.hardware.gpus_per_node)), _plan_collectives(plan), stage)


def _grad_sync(plan: Plan, st: Stage) -> dict[str, float]:
    """The gradient synchronisation bytes per step of stage ``st``'s GPU (``Report.grad_sync_bytes``): DP's and
    CP's of the dense parameters (with the experts' when they sync together), the expert-data-parallel group's."""
    d = plan.dims
    t, e = d.tp, d.ep
    schedule = plan.accounting.sync_schedule(plan.zero, d.pp)
    separate_experts = e > 1 or d.etp != t
    dense_here = st.dense_params / t
    experts_gpu = st.expert_params / (d.etp * e)
    m = plan.micro_batches
    sync = grad_sync_bytes(dense_here + (0.0 if separate_experts else experts_gpu), d.dp, d.cp, schedule, m)
    edp = 0.0
    if separate_experts and experts_gpu:
        edp = add_up(sync_terms(d.expert_dp, experts_gpu, schedule, m).values())
    return {"dp": sync["dp"], "cp": sync["cp"], "edp": edp}


class TimeReport(NamedTuple):
    """What ``steptime.step_time`` reads of a report, without the model states (``time_report``): timed, it is the
    step time less the optimizer step's term, a lower bound on it that a bounded search reads before pricing a
    plan's memory."""

    plan: Plan
    link: dict[str, str | None]
    collectives: dict[str, tuple[Collective, ...]]
    comm_bytes_per_step: dict[str, float]
    bubble: float
    grad_sync_bytes: dict[str, float]
    model_states_terms: Mapping[str, float]


_NO_STATES: Mapping[str, float] = MappingProxyType({})


def time_report(plan: Plan) -> TimeReport:
    """``TimeReport`` of ``plan``: the links, collectives, pipeline sends, bubble and gradient synchronisation that
    ``step_inputs`` gives it, with no model states."""
    st = plan.stages[_traffic_stage(plan.model, plan.pp, plan.layers_per_stage, plan.stage_balance)]
    v = plan.virtual_stages
    return TimeReport(
        plan,
        _plan_links(plan),
        _plan_collectives(plan),
        {"pp": pp_send_bytes(plan, v)},
        pipeline_bubble(plan, v),
        _grad_sync(plan, st),
        _NO_STATES,
    )


def step_inputs(plan: Plan, model_states_terms: Mapping[str, float]) -> StepInputs:
    """The bytes part of ``evaluate``: bytes per dimension per step on the stage with the most layers (the most MoE
    layers among ties), each dimension's link and time, TP's, CP's and EP's collectives, the bubble; with the
    reported stage's ``model_states_terms``, all that ``steptime.step_time`` reads of a report. ValueError when a
    byte count overflows a float."""
    m, hw, d = plan.model, plan.hardware, plan.dims
    p = d.pp
    s, h, mb, v = plan.seq, m.hidden_size, plan.micro_batches, plan.virtual_stages
    st = plan.stages[_traffic_stage(m, p, plan.layers_per_stage, plan.stage_balance)]
    comm = dict.fromkeys(TRAFFIC, 0.0)
    grad_sync = _grad_sync(plan, st)
    comm["dp"], comm["cp"], comm["edp"] = grad_sync["dp"], grad_sync["cp"], grad_sync["edp"]
    # TP, CP and EP as lists of collectives per layer and micro-batch (the step-time model prices the same lists)
    collectives = _plan_collectives(plan)
    comm["tp"] = ledger_bytes(collectives["tp"]) * st.num_layers * mb
    comm["tp"] += ledger_bytes(collectives["tp_qkv"]) * st.full_attention_layers * mb
    comm["pp"] = pp_send_bytes(plan, v)
    comm["cp"] += ledger_bytes(collectives["cp"]) * st.full_attention_layers * mb
    comm["cp"] += ledger_bytes(collectives["cp_linear"]) * st.linear_attention_layers * mb
    comm["ep"] = ledger_bytes(collectives["ep"]) * st.moe_layers * mb
    if not all(math.isfinite(x) for x in comm.values()):
        raise ValueError(_OVERFLOW.format(s=s, h=h))

    link = _plan_links(plan)
    return StepInputs(
        plan=plan,
        model_states_terms=model_states_terms,
        comm_bytes_per_step=comm,
        link=link,
        comm_time_s={k: (comm[k] / hw.bandwidth(link[k]) if link[k] else 0.0) for k in TRAFFIC},
        grad_sync_bytes=grad_sync,
        collectives=collectives,
        traffic_stage=st.index,
        bubble=pipeline_bubble(plan, v),
        bubble_share=bubble_share_of_time(p, mb, v) if p > 1 else 0.0,
    )


_OVERFLOW = "seq={s}, hidden_size={h}: memory or bytes per step overflow a float; the inputs are too large"


def evaluate(plan: Plan) -> Report:
    """Evaluate ``plan``: memory per GPU, bytes per dimension per step with link and time, bubble."""
    if not isinstance(plan, Plan):
        raise ValueError(f"evaluate() needs a Plan, got {type(plan).__name__}")
    m, hw, d = plan.model, plan.hardware, plan.dims
    t, p, e = d.tp, d.pp, d.ep

    # ---- memory: the most-loaded stage (its own states plus its own activations)
    per_layer = lab_per_layer(plan)
    per_stage = _stage_memory(plan, per_layer)
    totals = [add_up(terms.values()) + activ for terms, activ in per_stage]
    by_stage = []
    memo: Moments = {}  # stages alike in all a step's moments read share them
    for st_, (terms_, activ_) in zip(plan.stages, per_stage, strict=True):
        if plan.accounting.name == "lab":
            moments: tuple[Moment, ...] = (
                Moment.of("model states + activations", {**_lab_terms(terms_), "activations": activ_}),
            )
        else:  # every moment but the optimizer step holds the in-flight saved bytes: price once, add them
            moments = _with_saved(_base_moments(plan, st_, terms_, memo)[0], activ_)
        by_stage.append(StagePeak(st_.index, moments, peak_moment(moments)))
    k_peak = max(range(p), key=lambda k: (by_stage[k].peak.total, -k))
    k_mem = max(range(p), key=lambda k: (totals[k], -k))
    terms, activ = per_stage[k_mem]
    states = add_up(terms.values())
    total = states + activ
    st_mem = plan.stages[k_mem]
    params_per_gpu = st_mem.dense_params / t + st_mem.expert_params / (d.etp * e)
    if not math.isfinite(total):
        raise ValueError(_OVERFLOW.format(s=plan.seq, h=m.hidden_size))

    # ---- bytes per dimension, on the stage with the most layers (the most MoE layers among ties)
    inputs = step_inputs(plan, terms)
    acc = plan.accounting
    notes = report_notes(plan, inputs.comm_bytes_per_step)
    peak = by_stage[k_peak].peak.total
    room = memory_budget(acc.name, hw, d, peak)
    floor = memory_floor(
        acc.name,
        [add_up(terms_.values()) for terms_, _ in per_stage],
        [terms_["grads"] for terms_, _ in per_stage],
        [a for _, a in per_stage],
        freed_at_the_head(plan),
    )
    return Report(
        plan=plan,
        params_per_gpu=params_per_gpu,
        model_states_terms=terms,
        memory_bytes={
            "model_states": states,
            "activations": activ,
            "total": total,
            "peak_allocated": peak,
            "peak_reserved": room.peak_reserved,
            "headroom": room.headroom,
        },
        fits=total <= hw.gpu_memory_bytes
        if acc.name == "lab"
        else (room.fits and memory_budget(acc.name, hw, d, floor).fits),
        comm_bytes_per_step=inputs.comm_bytes_per_step,
        link=inputs.link,
        comm_time_s=inputs.comm_time_s,
        bubble=inputs.bubble,
        bubble_share=inputs.bubble_share,
        notes=notes,
        grad_sync_bytes=inputs.grad_sync_bytes,
        stage=k_mem,
        traffic_stage=inputs.traffic_stage,
        collectives=inputs.collectives,
        by_stage=tuple(by_stage),
        peak_stage=k_peak,
        headroom=room,
        memory_floor=floor,
        stage_totals=tuple(totals),
    )
