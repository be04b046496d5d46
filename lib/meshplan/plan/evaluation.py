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
from functools import lru_cache

from meshplan.core.collectives import ledger_bytes
from meshplan.parallel import activations as act
from meshplan.parallel.cp import cp_collectives, kv_width_per_gpu
from meshplan.parallel.dp import grad_sync_bytes
from meshplan.parallel.engine_activations import stage_bytes
from meshplan.parallel.ep import ep_collectives, tokens_per_gpu
from meshplan.parallel.pp import bubble_fraction, bubble_share_of_time, pp_bytes_per_step
from meshplan.parallel.tp import tp_collectives
from meshplan.parallel.zero import model_states_terms, sync_terms
from meshplan.plan.construct import Plan
from meshplan.plan.notes import report_notes
from meshplan.plan.report import TRAFFIC, Report
from meshplan.spec.dims import ParallelDims
from meshplan.spec.mesh import Mesh
from meshplan.spec.stages import Stage, inflight_micro_batches, interleave_factor

__all__ = ["evaluate"]


@lru_cache(maxsize=4096)
def _links(dims: ParallelDims, gpus_per_node: int) -> tuple[tuple[str, str | None], ...]:
    """The link of every traffic key for a mesh shape (cached: large expert meshes walk their groups)."""
    mesh = Mesh.from_dims(dims, gpus_per_node)
    return tuple((k, mesh.link(k)) for k in TRAFFIC)


def _stage_activations(plan: Plan, stage: Stage, per_layer_lab: float) -> float:
    """Activation bytes per GPU of one pipeline stage: its layers × its in-flight micro-batches (× the interleave
    factor), per layer by the plan's ledger (Korthikanti's GPT layer for the lab's, ``engine_activations`` per layer
    type for the engines', whose first stage also keeps the token ids and rotary tables and whose last stage the
    final norm, the head's input and the fp32 logits), ÷ c (each CP rank holds s/c tokens)."""
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
    )
    return (layers * factor + rest) * inflight


def _stage_states(plan: Plan, stage: Stage) -> dict[str, float]:
    """Model-state bytes per GPU of one pipeline stage, by term: its dense parameters ÷ t and its routed experts
    ÷ (expert TP × EP), each through ``zero.model_states_terms`` over the group its ZeRO stage shards across."""
    d, bpp = plan.dims, plan.accounting.bytes_per_param
    terms = model_states_terms(stage.dense_params / d.tp, plan.zero, d.shard_group, bpp)
    if stage.expert_params:
        expert_group = d.expert_dp if (d.ep > 1 or d.etp != d.tp) else d.shard_group
        for k, x in model_states_terms(stage.expert_params / (d.etp * d.ep), plan.zero, expert_group, bpp).items():
            terms[k] += x
    extra = plan.accounting.unsharded_bytes_per_param(plan.zero, d.pp)
    if extra:
        terms["unsharded weights/gradients"] = extra * (
            stage.dense_params / d.tp + stage.expert_params / (d.etp * d.ep)
        )
    return terms


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


def evaluate(plan: Plan) -> Report:
    """Evaluate ``plan``: memory per GPU, bytes per dimension per step with link and time, bubble."""
    if not isinstance(plan, Plan):
        raise ValueError(f"evaluate() needs a Plan, got {type(plan).__name__}")
    m, hw, d = plan.model, plan.hardware, plan.dims
    t, c, p, e = d.tp, d.cp, d.pp, d.ep
    s, b, h, mb, v = plan.seq, plan.micro_batch_size, m.hidden_size, plan.micro_batches, plan.virtual_stages

    # ---- memory: the most-loaded stage (its own states plus its own activations)
    per_layer = act.activation_bytes_per_layer(
        s, b, h, m.num_attention_heads, t, plan.recompute, plan.sequence_parallel
    )
    per_stage = _stage_memory(plan, per_layer)
    totals = [sum(terms.values()) + activ for terms, activ in per_stage]
    k_mem = max(range(p), key=lambda k: (totals[k], -k))
    terms, activ = per_stage[k_mem]
    states = sum(terms.values())
    total = states + activ
    st_mem = plan.stages[k_mem]
    experts_here = st_mem.expert_params / (d.etp * e)
    params_per_gpu = st_mem.dense_params / t + experts_here

    # ---- bytes per dimension, on the stage with the most layers (the most MoE layers among ties)
    st = max(plan.stages, key=lambda x: (x.num_layers, x.moe_layers, -x.index))
    acc = plan.accounting
    schedule = acc.sync_schedule(plan.zero, p)
    separate_experts = e > 1 or d.etp != t
    dense_here = st.dense_params / t
    experts_gpu = st.expert_params / (d.etp * e)
    comm = dict.fromkeys(TRAFFIC, 0.0)
    sync = grad_sync_bytes(dense_here + (0.0 if separate_experts else experts_gpu), d.dp, c, schedule, mb)
    comm["dp"], comm["cp"] = sync["dp"], sync["cp"]
    if separate_experts and experts_gpu:
        comm["edp"] = sum(sync_terms(d.expert_dp, experts_gpu, schedule, mb).values())
    grad_sync = {"dp": comm["dp"], "cp": comm["cp"], "edp": comm["edp"]}
    # TP, CP and EP as lists of collectives per layer and micro-batch (the step-time model prices the same lists)
    collectives = {
        "tp": tp_collectives(
            s // c, b, h, t, recompute=plan.recompute, regather=acc.tp_backward_regather and plan.sequence_parallel
        )
        if t > 1
        else (),
        "cp": cp_collectives(s, b, kv_width_per_gpu(m.kv_width, m.num_key_value_heads, t), c, recompute=plan.recompute)
        if c > 1
        else (),
        "ep": ep_collectives(
            tokens_per_gpu(s, b, c, t, plan.sequence_parallel), m.experts_per_token, h, e, recompute=plan.recompute
        )
        if e > 1
        else (),
    }
    comm["tp"] = ledger_bytes(collectives["tp"]) * st.num_layers * mb
    comm["pp"] = pp_bytes_per_step(s // c, b, h, p, mb, v)
    if acc.pp_send_divided(plan.sequence_parallel):
        comm["pp"] /= t
    comm["cp"] += ledger_bytes(collectives["cp"]) * st.full_attention_layers * mb
    comm["ep"] = ledger_bytes(collectives["ep"]) * st.moe_layers * mb

    link = dict(_links(d, hw.gpus_per_node))
    if not (separate_experts and m.is_moe):
        link["edp"] = None  # the experts (if any) sync with the dense gradients
    times = {k: (comm[k] / hw.bandwidth(link[k]) if link[k] else 0.0) for k in TRAFFIC}

    notes = report_notes(plan, comm)
    if not all(math.isfinite(x) for x in (total, *comm.values())):
        raise ValueError(
            f"seq={s}, hidden_size={h}: memory or bytes per step overflow a float; the inputs are too large"
        )
    return Report(
        plan=plan,
        params_per_gpu=params_per_gpu,
        model_states_terms=terms,
        memory_bytes={"model_states": states, "activations": activ, "total": total},
        fits=total <= hw.gpu_memory_bytes,
        comm_bytes_per_step=comm,
        link=link,
        comm_time_s=times,
        bubble=bubble_fraction(p, mb, v) if p > 1 else 0.0,
        bubble_share=bubble_share_of_time(p, mb, v) if p > 1 else 0.0,
        notes=notes,
        grad_sync_bytes=grad_sync,
        stage=k_mem,
        traffic_stage=st.index,
        collectives=collectives,
    )
