"""The chapters' views of the step-time model: what one layer, one ring pass or one micro-batch's all-to-all costs
against its compute, priced by ``meshplan.steptime.model`` (its fitted efficiencies and NCCL's latency).

* ``layer_time`` (chapter 4): an average decoder layer's compute and exposed TP time;
* ``ring_overlap`` and ``fold_into_dp`` (chapter 6): the CP ring's K/V exchange against the attention, and the same
  GPUs without CP;
* ``all_to_all_balance`` (chapter 7): the EP all-to-all of one micro-batch against its compute.

They take a ``Report`` and live above the plan, apart from the dimensions' byte formulas (``meshplan.parallel``),
which the plan itself uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshplan.core.units import add_up
from meshplan.parallel.compute import attention_forward_flop
from meshplan.parallel.ep import ACT_BYTES, all_to_all_bytes_per_token
from meshplan.plan import Plan, Report
from meshplan.steptime import model as steptime
from meshplan.steptime.model import (
    Calibration,
    Execution,
    collective_latency_s,
    execution_for,
    flash_attention_utilisation,
)
from meshplan.steptime.model import calibration as fitted

__all__ = [
    "AllToAllBalance",
    "LayerTime",
    "RingOverlap",
    "all_to_all_balance",
    "fold_into_dp",
    "layer_time",
]


@dataclass(frozen=True)
class LayerTime:
    """One average decoder layer of one micro-batch on one GPU of a TP group, in seconds (``layer_time``).

    forward_s, backward_s: its compute (the backward includes any recomputation); tp_s: its TP collectives that
    compute does not hide, under ``tp_overlap`` (``steptime.Execution``: ``"none"``, ``"backward"``, ``"full"``);
    link: the TP group's link (None without TP).
    """

    forward_s: float
    backward_s: float
    tp_s: float
    tp_overlap: str
    link: str | None

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def tp_over_compute(self) -> float:
        """The exposed TP time as a fraction of the layer's compute."""
        return self.tp_s / self.compute_s


def layer_time(report: Report, tp_overlap: str | None = None) -> LayerTime:
    """Compute and exposed TP communication of an average decoder layer, per micro-batch, on one GPU.

    The step-time model's micro-batch (``steptime.micro_batch``, with its fitted matmul and link efficiencies and
    NCCL's latency) on the pipeline stage with the most layers, divided by that stage's layers: the average layer,
    whose compute includes its share of the stage's other work (the output head and logits on the last stage).
    TP sends 8 all-gather-sized transfers of s·b·h/c bf16 per layer (4 all-reduces; + 4 with full recomputation;
    + 2 with Megatron-LM's sequence-parallel re-gather: the report's ``collectives["tp"]``), on the plan's TP
    link. ``tp_overlap`` defaults to what the
    plan's ledger's engine does (``steptime.execution_for``: the lab's and torchtitan's ``"none"``, Megatron-LM's
    ``"backward"``, its asynchronous input-gradient reduction); ``"full"`` is Megatron-LM's ``--tp-comm-overlap``,
    off by default. Units: seconds.

        >>> from meshplan.plan import Plan, evaluate
        >>> lt = layer_time(evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, recompute="selective")))
        >>> round(lt.compute_s * 1e3, 2), round(lt.tp_s * 1e3, 2), lt.link, round(lt.tp_over_compute, 2)
        (2.09, 2.72, 'nvlink', 1.31)
    """
    execution = steptime.execution_for(report.plan.accounting.name)
    if tp_overlap is not None:
        execution = replace(execution, tp_overlap=tp_overlap)
    stage = report.traffic_stage
    mb = steptime.micro_batch(report, stage, execution)
    n = report.plan.stages[stage].num_layers
    return LayerTime(mb.forward_s / n, mb.backward_s / n, mb.tp_s / n, execution.tp_overlap, report.link["tp"])


@dataclass(frozen=True)
class RingOverlap:
    """One full-attention layer's K/V exchange against its attention, for one pass of the ring on one GPU.

    Attributes:
        kv_bytes: bytes the GPU sends per pass, (c−1)/c × the sequence's K and V of the KV heads it holds.
        transfer_s: kv_bytes ÷ (link bandwidth × the fitted link efficiency) + c − 1 point-to-point latencies.
        attention_s: the attention core's forward for the GPU's s/c queries (causal, zig-zag balanced, 1/t of the
            heads), at the step-time model's attention rate.
        passes: ring passes per micro-batch: 3 (K and V forward; K and V again and their gradients backward,
            Liu et al. 2023), + 1 when recomputation re-runs the attention.
        layers: full-attention layers of the stage.
        link: the link the CP group uses.
        overlapped: whether the exchange runs under the attention (Ring Attention; ``Execution.cp_overlap``) or
            before it (Llama 3's all-gather: K and V gathered, then attention computed).
    """

    kv_bytes: float
    transfer_s: float
    attention_s: float
    passes: int
    layers: int
    link: str
    overlapped: bool = True

    @property
    def exposed_s(self) -> float:
        """What the attention does not hide, per pass: max(0, transfer − attention) when overlapped, else all."""
        return max(0.0, self.transfer_s - self.attention_s) if self.overlapped else self.transfer_s

    @property
    def ratio(self) -> float:
        """Transfer time over attention time (< 1: the exchange hides behind the attention)."""
        return self.transfer_s / self.attention_s

    @property
    def per_micro_batch_s(self) -> float:
        """Exposed seconds per micro-batch on the stage: passes × layers × exposed (``steptime``'s CP term ÷ m on that
        stage)."""
        return self.passes * self.layers * self.exposed_s


def ring_overlap(
    report: Report,
    stage: int | None = None,
    execution: Execution | None = None,
    calibration: Calibration | None = None,
) -> RingOverlap:
    """The K/V exchange of one full-attention layer against its attention compute, per ring pass, on one GPU of
    pipeline stage ``stage`` (default: the stage whose traffic the report counts), as ``meshplan.steptime`` prices
    them: its CP term is ``passes × layers × exposed_s`` per micro-batch, with ``exposed_s`` max(0, transfer −
    attention) under ``Execution.cp_overlap`` and the whole transfer without it. ``execution`` defaults to the
    plan's ledger's engine (``steptime.execution_for``).

    Transfer: one pass of the report's ``collectives["cp"]`` (``cp.cp_collectives``: ``all_gather_bytes(c,
    kv_bytes_per_layer(s, b, kv_width_per_gpu))``) at the CP link's bandwidth ×
    ``Calibration.link_efficiency``, plus (c − 1) × NCCL's point-to-point latency (``steptime.collective_latency_s``).
    Attention: ``compute.attention_forward_flop`` of the stage's softmax-attention layers (half the pairs for the
    flash kernel, all of them for the dense one) × b ÷ (t·c), at the dense bf16 peak × the documented FlashAttention
    utilisation of the GPU (``steptime.flash_attention_utilisation``), or × the fitted matmul efficiency where none
    is documented or the kernel is dense; averaged over the stage's full-attention layers. Seconds.

    ValueError when the plan has no context parallelism (cp = 1), when the stage has no full-attention layer, or when
    the hardware has no bf16 peak.

        >>> from meshplan.plan import Plan, evaluate
        >>> plan = Plan.create("qwen3.8-27b", gpus=64, tp=8, cp=8, seq=131072, recompute="full", micro_batches=1)
        >>> o = ring_overlap(evaluate(plan))
        >>> o.link, o.passes, o.layers, o.transfer_s < o.attention_s
        ('infiniband', 4, 16, True)
    """
    plan = report.plan
    model, hw, dims = plan.model, plan.hardware, plan.dims
    t, c, s, b = dims.tp, dims.cp, plan.seq, plan.micro_batch_size
    if c == 1:
        raise ValueError("cp=1: the plan has no context parallelism, so no K/V are exchanged")
    k = report.traffic_stage if stage is None else stage
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < dims.pp:
        raise ValueError(f"stage={k!r} must be a pipeline stage from 0 to {dims.pp - 1}")
    st = plan.stages[k]
    if not st.full_attention_layers:
        raise ValueError(f"stage {k} of {model.name} has no full-attention layer: no K/V to exchange")
    if hw.peak_bf16_flop_per_s is None:
        raise ValueError(f"hardware {hw.name!r} has no peak_bf16_flop_per_s for the step-time model")
    ex = execution or execution_for(plan.accounting.name)
    cal = calibration or fitted()
    flash = ex.attention == "flash"
    link = report.link["cp"]
    if link is None:  # a CP group of c > 1 ranks always has a link; a hand-built Report might not
        raise ValueError(f"cp={c}: the report gives the CP group no link")
    ring = report.collectives["cp"]  # the passes the step-time model prices, each of the same K and V
    kv = ring[0].bytes_each
    transfer = kv / (hw.bandwidth(link) * cal.link_efficiency) + collective_latency_s(ring[0].kind, c, link)
    rate = hw.peak_bf16_flop_per_s * ((flash_attention_utilisation(hw) if flash else None) or cal.matmul_efficiency)
    flop = add_up(
        attention_forward_flop(model.layers[i], s, flash)
        for i in st.layers
        if model.layers[i].mixer != "linear_attention"
    )
    attention = flop * b / (t * c) / rate / st.full_attention_layers
    passes = add_up(coll.count for coll in ring)
    return RingOverlap(kv, transfer, attention, passes, st.full_attention_layers, link, ex.cp_overlap)


def fold_into_dp(plan: Plan) -> Plan:
    """The same GPUs and the same global batch without context parallelism: the c CP ranks of each replica become
    c data-parallel replicas (dp × c, cp = 1), each holding whole sequences, so each gets c times fewer micro-batches
    (m = B ÷ (dp·c·b)). The interleaved schedule is kept where it can still run (m ≥ pp); otherwise v = 1.

    This is the comparison Llama 3's Table 4 makes: at a fixed number of tokens per step, longer sequences leave
    fewer sequences per replica, and the pipeline's bubble (p − 1)/(m·v) grows as m falls.

    ValueError (``Plan.create``'s) when the global batch has fewer sequences than dp·c·b, or does not divide.

        >>> from meshplan.plan import Plan
        >>> p = Plan.create("qwen3.8-27b", gpus=64, tp=4, cp=4, pp=4, seq=32768, global_batch=16)
        >>> q = fold_into_dp(p)
        >>> (p.dp, p.micro_batches), (q.cp, q.dp, q.micro_batches)
        ((1, 16), (1, 4, 4))
    """
    if plan.cp == 1:
        return plan
    dp = plan.dp * plan.cp
    batch = plan.global_batch
    per_replica = batch // (dp * plan.micro_batch_size) if batch % (dp * plan.micro_batch_size) == 0 else 0
    v = plan.virtual_stages if per_replica >= plan.pp else 1
    return plan.replace(cp=1, dp=dp, global_batch=batch, virtual_stages=v)


@dataclass(frozen=True)
class AllToAllBalance:
    """One micro-batch on one GPU of a pipeline stage: compute against the EP all-to-all, in seconds.

    Attributes:
        stage: the pipeline stage (0-based): the report's traffic stage, the one with the most MoE layers.
        compute_s: forward + backward compute (``steptime.micro_batch``; GEMMs ÷ ``gemm_speedup``).
        gemm_s: the GEMMs' part of it.
        all_to_all_s: dispatch and combine, forward and backward (and the recomputed forward's), none of it
            overlapped: the step-time model's wire time scaled to the bytes per token asked for, plus NCCL's latency.
    """

    stage: int
    compute_s: float
    gemm_s: float
    all_to_all_s: float

    @property
    def ratio(self) -> float:
        """Communication ÷ computation (DeepSeek-V3 §3.2.1 writes computation-to-communication as about 1:1)."""
        return self.all_to_all_s / self.compute_s


def all_to_all_balance(
    report: Report,
    *,
    dispatch_bytes: float = ACT_BYTES,
    combine_bytes: float = ACT_BYTES,
    max_nodes: int | None = None,
    gemm_speedup: float = 1.0,
) -> AllToAllBalance:
    """The EP all-to-all of one micro-batch against its compute, by the step-time model (``meshplan.steptime``).

    ``steptime.micro_batch`` prices the report's traffic stage with the engine of the plan's ledger, run as 1F1B
    (no DualPipe, so nothing is hidden): its ``ep_s`` sends every token to each of its k experts in bf16
    (``ep_bytes_per_step``). Here the wire part of ``ep_s`` is scaled by ``all_to_all_bytes_per_token`` with the
    choices given (the nodes an EP group spans read from the plan's mesh) ÷ the same with the defaults, the latency
    kept; ``gemm_speedup`` divides the GEMM time (FP8 GEMMs
    run at twice the bf16 peak: DeepSeek-V3 §3.3 computes every linear layer's forward, input- and weight-gradient
    GEMM in FP8; attention, norms and the element-wise work stay as they are). Assumes FLOP-bound GEMMs (true for
    DeepSeek-V3's stages: the weights are read in a fraction of the matmul time).

    ValueError if the plan has no EP (ep = 1) or its traffic stage no MoE layer.
    """
    p = report.plan
    d = p.dims
    if d.ep == 1 or not p.model.is_moe:
        raise ValueError(f"ep={d.ep}: the plan has no expert-parallel all-to-all")
    st = p.stages[report.traffic_stage]
    if not st.moe_layers:
        raise ValueError(f"stage {st.index} holds no MoE layer")
    if isinstance(gemm_speedup, bool) or not isinstance(gemm_speedup, (int, float)) or not gemm_speedup >= 1:
        raise ValueError(f"gemm_speedup={gemm_speedup!r} must be a number >= 1")
    ex = replace(steptime.execution_for(p.accounting.name), pipeline="1f1b")
    mb = steptime.micro_batch(report, st.index, ex)
    link = report.link["ep"]
    count = add_up(coll.count for coll in report.collectives["ep"]) * st.moe_layers
    latency = count * steptime.collective_latency_s("all-to-all", d.ep, link)
    h, k = p.model.hidden_size, p.model.experts_per_token
    mesh = p.mesh
    group_nodes = len({mesh.node(rank) for rank in mesh.group(0, "ep")})  # every EP group spans as many
    chosen = all_to_all_bytes_per_token(
        h,
        k,
        d.ep,
        dispatch_bytes=dispatch_bytes,
        combine_bytes=combine_bytes,
        max_nodes=max_nodes,
        nodes=group_nodes,
    )
    scale = chosen / all_to_all_bytes_per_token(h, k, d.ep)
    gemm = mb.gemm_s / gemm_speedup
    return AllToAllBalance(st.index, mb.compute_s - mb.gemm_s + gemm, gemm, (mb.ep_s - latency) * scale + latency)
