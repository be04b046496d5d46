"""Step time: the seconds per optimizer step of a plan, as named terms, with MFU and HFU.

The model (one GPU of the slowest pipeline stage; every term in seconds per step):

* **compute** (``compute_s``): each micro-batch's forward and backward on the stage, m times, split over t × c GPUs
  (TP splits every matmul and the heads, CP the tokens, zig-zag-balanced):

  - GEMMs: 2 FLOP per activated parameter per token forward (``compute``; the logits included, the output head and
    final norm on the last stage, as Megatron-LM, torchtitan and DeepSpeed place them), the backward 2 forwards,
    full recomputation one more, at ``peak_bf16_flop_per_s × matmul_efficiency`` — or, if longer, the time to read
    each bf16 weight twice (forward and input-gradient GEMMs) and accumulate its gradient (the ledger's gradient
    bytes, read and written) at HBM bandwidth: a roofline, which only binds where few tokens reach a weight (routed
    experts with a small EP: 256 experts on one GPU see ~tokens·k/256 tokens each).
  - attention: the score and context matmuls as the kernel executes them (``Execution.attention``: ``"flash"`` runs
    half the causal pairs, its backward 2.5 forwards since it recomputes the scores, at the documented
    FlashAttention-2 utilisation of the GPU where there is one (``flash_attention_utilisation``); ``"dense"`` the
    whole score matrix, backward 2 forwards, at the matmul rate); linear attention's state updates at the matmul
    rate; selective recomputation re-runs the attention core.
  - element-wise work (norms, activations, dropout, softmax, residuals; memory-bound): ``hbm_passes`` × the bytes a
    layer stores for its backward (Korthikanti et al. 2022 Table 2 per GPU, the s² score term only with the dense
    kernel) ÷ HBM bandwidth, a third in the forward; full recomputation repeats the forward's.
TP, CP and EP are priced from the report's own lists of collectives (``Report.collectives``: ``tp.tp_collectives``,
``cp.cp_collectives``, ``ep.ep_collectives``), the lists whose ledger entries the report's bytes sum: each entry's
bytes at the link's achieved bandwidth plus its latency, × its count × the stage's layers.

* **tp** (``tp_s``): per layer and micro-batch, the reduce-scatter and all-gather of each of the two blocks'
  all-reduces forward and backward = 8 (t−1)/t × s·b·h/c × 2 B transfers (Narayanan et al. 2021 §3.2), +4 with full
  recompute (its forward runs them again), +2 with Megatron-LM's sequence-parallel re-gather
  (``Accounting.tp_backward_regather``). Exposed, except as ``Execution.tp_overlap`` says: ``"backward"`` hides the
  entries a GEMM can cover (``Collective.hidden_by``: the column-parallel layers' input-gradient reduction behind
  the weight-gradient GEMM, the re-gather behind the input-gradient GEMM; Megatron-Core's
  ``LinearWithGradAccumulationAndAsyncCommunication``, always on); ``"full"`` hides everything the GEMMs can cover
  (``--tp-comm-overlap``, off by default: ``data/engines/conventions.md``); ``"none"`` hides nothing (torchtitan,
  whose async TP is off by default; DeepSpeed).
* **cp** (``cp_s``): the K/V ring of every full-attention layer, forward (K, V) and backward (K, V and their
  gradients: twice; once more when recomputation re-runs the attention), overlapped with the attention of the
  chunk in hand (Ring Attention, Liu et al. 2023): only what outlasts the attention compute shows, max(0, transfer
  − attention) per pass; ``Execution.cp_overlap=False`` (Llama 3's all-gather CP, §3.3.2) exposes it all.
* **ep** (``ep_s``): dispatch and combine all-to-alls per MoE layer, forward and backward (+2 with full
  recompute), exposed; with DualPipe (``Execution.pipeline="dualpipe"``) one micro-batch's all-to-alls overlap
  another's compute (DeepSeek-V3 §3.2.1): only max(0, all-to-all − compute) shows.
* **pp** (``pp_s``): the stage boundary sends of every micro-batch (the report's bytes; 2·v sends), on the critical
  path of 1F1B (Megatron's ``overlap_p2p_comm`` is off by default); hidden by DualPipe.
* **dp** (``dp_exposed_s``): the data-parallel collectives of the plan's ledger (``Accounting.sync_schedule``;
  ``Report.grad_sync_bytes``: DP, CP and expert-DP parts) overlapped, when ``Execution.dp_overlap``, with the
  compute they can run under: gradient reductions and backward gathers with a micro-batch's backward, forward
  gathers (and the updated-weight gather of a step) with a forward; per-micro-batch collectives (FSDP, ZeRO-2/3)
  with every micro-batch's, once-per-step ones with the last (or first). What cannot be hidden is what outlasts
  the window, and at least one bucket or unit (one layer's share: ZeRO-3's first gather, the last bucket).
* **bubble** (``bubble_s``): (p−1)/v micro-batch times of idling for 1F1B and the interleaved schedule
  (Narayanan et al. 2021 §2.2); DualPipe's (p/2 − 1)(F&B + B − 3W) with W = B/2 (DeepSeek-V3 Table 2).
* **optimizer** (``optimizer_s``): Adam reads every model-state byte and writes the optimizer's again, at HBM
  bandwidth.

Communication time = bytes ÷ (link bandwidth × ``link_efficiency``) + NCCL's ring latency: 8.4 µs per collective
plus 3.4 µs per NVLink step and 14 µs per network step (Ring/Simple, ``baseLat`` and ``hwLat`` in NVIDIA/nccl
``src/graph/tuning.cc``#L54-L78 at b6475625); a ring all-reduce has 2(n−1) steps, all-gather and reduce-scatter
n−1, a point-to-point send or an all-to-all one (its peers run concurrently).

The three fitted constants (``Calibration``: matmul efficiency, HBM passes, link efficiency) are stored in
``data/steptime_fit.json`` with the runs they were fitted on (``meshplan.steptime.fitting``).

MFU = model FLOP ÷ (step time × GPUs × peak): forward + backward, no recomputation, attention counted over the
whole score matrix (PaLM's convention, Chowdhery et al. 2022 App. B, which Llama 3 and Korthikanti et al. use).
HFU adds the recomputation (Korthikanti et al. 2022 §6).

    >>> from meshplan.plan import Plan, evaluate
    >>> r = evaluate(Plan.create("llama-3.1-8b", gpus=8, dp=8, seq=8192, zero=3, recompute="selective",
    ...                          hardware="h100-sxm-80gb", accounting="fsdp2", micro_batches=1))
    >>> st = step_time(r)
    >>> list(st.terms()) == list(TERMS), st.total_s == sum(st.terms().values())
    (True, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from meshplan.core.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, RING_PASS, Collective
from meshplan.core.resources import read_json
from meshplan.core.units import add_up
from meshplan.parallel import compute
from meshplan.parallel.activations import activation_bytes_per_layer
from meshplan.parallel.zero import sync_terms
from meshplan.plan import Plan, Report
from meshplan.plan.evaluation import TimeInputs, TimeReport, pipeline_bubble, pp_send_bytes
from meshplan.plan.report import StepInputs
from meshplan.schedule.formulas import dualpipe_idle
from meshplan.spec.hardware import Hardware
from meshplan.spec.models.spec import ModelSpec
from meshplan.spec.stages import Stage, layer_kinds

TERMS = ("compute_s", "tp_s", "cp_s", "ep_s", "pp_s", "dp_exposed_s", "bubble_s", "optimizer_s")
# the step's terms after compute, as the course names them (``StepTime.largest_overhead``)
OVERHEADS = {
    "tp_s": "TP communication",
    "cp_s": "CP communication",
    "ep_s": "EP all-to-all",
    "pp_s": "pipeline sends",
    "dp_exposed_s": "DP synchronisation",
    "bubble_s": "pipeline bubble",
    "optimizer_s": "optimizer step",
}
ACT_BYTES = 2  # bf16 activations on the wire
FLASH_BACKWARD_PER_FORWARD = 2.5  # FlashAttention's backward recomputes QKᵀ: 5 matmuls against the forward's 2
WEIGHT_READS_PER_MICRO_BATCH = 2  # each bf16 weight is read by the forward and by the input-gradient GEMM
# NCCL's ring latency model, Ring/Simple protocol: NVIDIA/nccl src/graph/tuning.cc#L54-L78 at b6475625
NCCL_BASE_LATENCY_S = 8.4e-6  # baseLat[Ring][Simple], per collective
NCCL_HOP_LATENCY_S = {"nvlink": 3.4e-6, "infiniband": 14.0e-6}  # hwLat[NVLINK|NET][Ring][Simple], per step
ATTENTION_KERNELS = ("flash", "dense")
TP_OVERLAPS = ("none", "backward", "full")
PIPELINES = ("1f1b", "dualpipe")


@dataclass(frozen=True)
class Calibration:
    """The step-time model's fitted constants (``data/steptime_fit.json``; fitted by ``meshplan.steptime.fitting``).

    Attributes:
        matmul_efficiency: achieved fraction of the dense bf16 peak in the matmuls (and attention).
        hbm_passes: HBM reads and writes of each activation byte a layer stores, over its forward and backward.
        link_efficiency: achieved fraction of a link's per-direction bandwidth in a collective.
    """

    matmul_efficiency: float
    hbm_passes: float
    link_efficiency: float

    def __post_init__(self) -> None:
        for f in fields(self):
            lo, hi = PHYSICAL_RANGES[f.name]
            x = getattr(self, f.name)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not lo <= x <= hi:
                raise ValueError(f"{f.name}={x!r} must lie in [{lo}, {hi}]")


# what each constant can physically be: an efficiency is a fraction; an activation byte is written once and read at
# least once, and a handful of element-wise kernels touch it at most a few dozen times
PHYSICAL_RANGES = {"matmul_efficiency": (0.05, 1.0), "hbm_passes": (0.0, 50.0), "link_efficiency": (0.05, 1.0)}


@lru_cache(maxsize=1)
def fit_data() -> dict:
    """``data/steptime_fit.json``: the fitted constants, the runs they were fitted on, the validation errors and
    the search's tie band."""
    return read_json("steptime_fit.json")


@lru_cache(maxsize=1)
def calibration() -> Calibration:
    """The stored fitted constants."""
    c = fit_data()["constants"]
    return Calibration(**{k: c[k]["value"] for k in PHYSICAL_RANGES})


def calibration_for(hardware: Hardware) -> Calibration:
    """The constants for ``hardware``: those its file carries (``Hardware.calibration``, fitted to the machine's own
    runs by ``meshplan calibrate``) in place of the stored fit's, the others the stored fit's."""
    own = {k: v for k, v in hardware.calibration if k in PHYSICAL_RANGES}
    return replace(calibration(), **own) if own else calibration()


@dataclass(frozen=True)
class Execution:
    """How an engine runs a plan, beyond its bytes: the attention kernel and which communication it overlaps.

    Attributes:
        attention: ``"flash"`` (causal blocks skipped: FlashAttention-2, cuDNN/TE fused attention, PyTorch SDPA) or
            ``"dense"`` (the whole s×s score matrix computed, then masked: Megatron-LM's 2021 fused softmax).
        tp_overlap: ``"none"``, ``"backward"`` or ``"full"`` (see the module docstring).
        cp_overlap: the K/V exchange overlaps the attention (Ring Attention); False: all-gathered, then computed.
        dp_overlap: data-parallel collectives overlap compute (PyTorch DDP and FSDP by construction; Megatron-LM with
            ``--overlap-grad-reduce --overlap-param-gather``, DeepSpeed with ``overlap_comm``); False: they run after
            the backward (Megatron-LM's and DeepSpeed ZeRO-1/2's defaults).
        pipeline: ``"1f1b"`` (1F1B, interleaved when v > 1) or ``"dualpipe"`` (DeepSeek-V3's, for the plans it can run:
            an even pp ≥ 2, an even number of micro-batches, v = 1 (§3.2.1); the others run 1F1B).
        pp_scatter_gather: each TP rank sends 1/t of a stage's output and the receiver all-gathers it over NVLink
            (Narayanan et al. 2021 §4.1; Megatron-LM 2021's default, ``--no-scatter-gather-tensors-in-pipeline`` off),
            even without sequence parallelism; the ledgers that divide by t already do it under sequence parallelism.
    """

    attention: str = "flash"
    tp_overlap: str = "none"
    cp_overlap: bool = True
    dp_overlap: bool = True
    pipeline: str = "1f1b"
    pp_scatter_gather: bool = False

    def __post_init__(self) -> None:
        for name, allowed in (("attention", ATTENTION_KERNELS), ("tp_overlap", TP_OVERLAPS), ("pipeline", PIPELINES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} must be one of {', '.join(allowed)}")
        for name in ("cp_overlap", "dp_overlap", "pp_scatter_gather"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")


# Each ledger's engine as it runs by default, except that data-parallel overlap is on everywhere: production
# configurations switch it on (NVIDIA NeMo's Llama 3 70B recipe sets overlap_grad_reduce=True and
# overlap_param_gather=True, nemo/collections/llm/recipes/llama3_70b.py at de778f8; FSDP overlaps by construction),
# and ``export`` should emit the flags. Megatron-Core's asynchronous input-gradient reduction needs no flag.
ENGINE_EXECUTION = {
    "lab": Execution(),
    "megatron": Execution(tp_overlap="backward"),
    "fsdp2": Execution(),
    "deepspeed": Execution(),
}


def dualpipe(plan: Plan, ex: Execution) -> bool:
    """Whether ``plan`` runs DualPipe under ``ex``: asked for, and possible (even pp ≥ 2, even m, v = 1)."""
    return _dualpipe(plan, ex, plan.virtual_stages)


def _dualpipe(plan: Plan, ex: Execution, v: int) -> bool:
    """``dualpipe`` for ``plan`` with ``v`` chunks per rank."""
    return ex.pipeline == "dualpipe" and plan.pp >= 2 and plan.pp % 2 == 0 and plan.micro_batches % 2 == 0 and v == 1


def execution_for(accounting: str) -> Execution:
    """The default ``Execution`` of a ledger's engine (``ENGINE_EXECUTION``); ValueError naming the ledgers for any
    other name.

        >>> execution_for("megatron").tp_overlap
        'backward'
        >>> execution_for("nemo")
        Traceback (most recent call last):
        ...
        ValueError: accounting='nemo' has no engine execution: one of lab, megatron, fsdp2, deepspeed
    """
    ex = ENGINE_EXECUTION.get(accounting)
    if ex is None:
        raise ValueError(f"accounting={accounting!r} has no engine execution: one of {', '.join(ENGINE_EXECUTION)}")
    return ex


@dataclass(frozen=True)
class StepTime:
    """The estimated step time of one plan, in seconds, as named terms (see the module docstring)."""

    compute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    dp_exposed_s: float
    bubble_s: float
    optimizer_s: float

    @property
    def total_s(self) -> float:
        return add_up(self.terms().values())

    def terms(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TERMS}

    def largest_overhead(self) -> str:
        """What the step waits on longest besides its own arithmetic: the name (``OVERHEADS``) of its largest term
        after ``compute_s``, the first in ``TERMS`` order among equals. The course's "what becomes the bottleneck"
        exercises ask for it.

            >>> StepTime(10.0, 0.5, 0.0, 0.0, 0.1, 0.7, 0.7, 0.01).largest_overhead()
            'DP synchronisation'
        """
        overheads = {k: v for k, v in self.terms().items() if k != "compute_s"}
        return OVERHEADS[max(overheads, key=overheads.__getitem__)]


# ---------------------------------------------------------------- helpers
def _peak(hw: Hardware) -> float:
    if hw.peak_bf16_flop_per_s is None:
        raise ValueError(f"hardware {hw.name!r} has no peak_bf16_flop_per_s for the step-time model")
    return hw.peak_bf16_flop_per_s


def _hbm(hw: Hardware) -> float:
    if hw.hbm_bytes_per_s is None:
        raise ValueError(f"hardware {hw.name!r} has no hbm_bytes_per_s for the step-time model")
    return hw.hbm_bytes_per_s


def collective_latency_s(kind: str, n: int, link: str | None) -> float:
    """NCCL's ring latency of one collective over ``n`` ranks on ``link``: 8.4 µs + steps × per-step latency, with
    2(n−1) steps for an all-reduce, n−1 for an all-gather or reduce-scatter, 1 for a send or an all-to-all; a ring
    pass (Ring Attention's K/V) is n − 1 sends one after another. Every
    step of a group that crosses nodes is charged the network's 14 µs (an upper bound: NCCL charges only the
    inter-node steps so).

        >>> round(collective_latency_s("all-reduce", 8, "nvlink") * 1e6, 1)
        56.0
    """
    if n <= 1 or link is None:
        return 0.0
    if kind == RING_PASS:  # n − 1 point-to-point sends, one after another round the ring
        return (n - 1) * collective_latency_s("send", 2, link)
    steps = {ALL_REDUCE: 2 * (n - 1), REDUCE_SCATTER: n - 1, ALL_GATHER: n - 1, "send": 1, ALL_TO_ALL: 1}[kind]
    return NCCL_BASE_LATENCY_S + steps * NCCL_HOP_LATENCY_S[link]


@dataclass(frozen=True)
class _LayerWork:
    """Prefix sums over a model's decoder layers, for one sequence length: the forward matmul FLOP per token of the
    dense weights and of the activated routed experts, the forward FLOP per sequence of the softmax attention as the
    kernel executes it and of the linear attention, and the parameters outside and inside the routed experts."""

    dense_flop: tuple[float, ...]
    expert_flop: tuple[float, ...]
    softmax: tuple[float, ...]
    linear: tuple[float, ...]
    dense_params: tuple[float, ...]
    expert_params: tuple[float, ...]

    @staticmethod
    def span(prefix: tuple[float, ...], layers: range) -> float:
        return prefix[layers.stop] - prefix[layers.start]


@lru_cache(maxsize=256)  # keyed on the model itself: a ModelSpec hashes its layers once
def _layer_work(model: ModelSpec, seq: int, causal: bool) -> _LayerWork:
    cols: list[list[float]] = [[0.0] for _ in range(6)]
    for layer in model.layers:
        a = compute.attention_forward_flop(layer, seq, causal)
        linear = layer.mixer == "linear_attention"
        dense = layer.params - layer.expert_params
        row = (
            compute.forward_flop(dense, 1),
            compute.forward_flop(layer.activated_params - dense, 1),
            0.0 if linear else a,
            a if linear else 0.0,
            dense,
            layer.expert_params,
        )
        for col, x in zip(cols, row, strict=True):
            col.append(col[-1] + x)
    return _LayerWork(*(tuple(col) for col in cols))


_PRECISION_OVERRIDE: dict | None = None  # a trial value while ``precision_fit.fit`` searches


@lru_cache(maxsize=1)
def precision_fit() -> dict:
    """``data/precision_fit.json``: the achieved fraction of the FP8 and MXFP8 peaks in the layers' GEMMs, each
    fitted on its declared published runs (``meshplan.steptime.precision_fit``), with the held-out errors."""
    return _PRECISION_OVERRIDE if _PRECISION_OVERRIDE is not None else read_json("precision_fit.json")


def low_precision_gemm_rate(hw: Hardware, precision: str) -> float:
    """FLOP/s of the decoder layers' GEMMs in ``precision`` (``"fp8"`` or ``"mxfp8"``) on ``hw``: the datasheet's
    dense peak in that format (``Hardware.peak_fp8_flop_per_s``, ``peak_mxfp8_flop_per_s``) × the fraction of it
    the published FP8 runs reach (``precision_fit``, fitted with the bf16 constants fixed; it absorbs the casts and
    amax reductions of the recipe, which run as element-wise kernels around each GEMM).

    What stays in bf16, as the engines run it: the attention core (FlashAttention / cuDNN fused attention in bf16;
    Transformer Engine's FP8 attention, ``NVTE_FP8_DPA``, is off by default), the output head (Megatron-Core's
    ``output_layer`` is a ``tensor_parallel.ColumnParallelLinear``, not a TE module; torchtitan's ``mx`` converter
    filters ``output`` by default and the torchtitan export filters it for ``float8`` too), the norms and the
    embedding lookup. The router's GEMM (h × experts) is counted with the layer's dense FLOP, a rounding error.
    MFU stays reported against the bf16 peak, as NVIDIA's and torchtitan's FP8 tables report it.
    """
    peak = hw.peak_fp8_flop_per_s if precision == "fp8" else hw.peak_mxfp8_flop_per_s
    if peak is None:
        raise ValueError(f"hardware {hw.name!r} has no {precision} peak for the step-time model")
    return peak * precision_fit()["constants"][precision]["value"]


def flash_attention_utilisation(hw: Hardware) -> float | None:
    """The documented fraction of the bf16 peak a FlashAttention-2-generation kernel reaches on ``hw``
    (``data/steptime_fit.json``, ``documented``), None where nothing is documented (the matmul efficiency applies)."""
    own = dict(hw.calibration).get("flash_attention_utilisation")  # a calibrated file carries its base's
    if own is not None:
        return own
    entry = fit_data()["documented"]["flash_attention_utilisation"].get(hw.name)
    return None if entry is None else entry["value"]


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch on one GPU of a pipeline stage, in seconds: forward and backward compute (the backward
    includes the recomputation), the GEMMs' part of both, and the exposed TP, CP and EP communication."""

    forward_s: float
    backward_s: float
    gemm_s: float
    tp_s: float
    cp_s: float
    ep_s: float

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.tp_s + self.cp_s + self.ep_s


def micro_batch(
    report: Report, stage: int, execution: Execution | None = None, calibration_: Calibration | None = None
) -> MicroBatch:
    """The time of one micro-batch on one GPU of pipeline stage ``stage`` (0-based)."""
    p = report.plan
    ex = execution or execution_for(p.accounting.name)
    cal = calibration_ or calibration_for(p.hardware)
    return _micro_batch(report, p.stages[stage], ex, cal)


def _op_share(m, layers: range, recompute: str) -> float:
    """The share of a stage's projection FLOP that torchtitan's op-level checkpointing recomputes (0 otherwise)."""
    if recompute != "op" or not m.layers:
        return 0.0
    specs = [m.layers[i] for i in layers]
    total = add_up(L.params - L.expert_params for L in specs)
    return add_up(compute.op_recomputed_params(L, m) for L in specs) / total if total else 0.0


def _micro_batch(
    report: Report | StepInputs | TimeInputs | TimeReport, st: Stage, ex: Execution, cal: Calibration
) -> MicroBatch:
    p, m, hw, d = report.plan, report.plan.model, report.plan.hardware, report.plan.dims
    t, c, e, s, b, h = d.tp, d.cp, d.ep, p.seq, p.micro_batch_size, m.hidden_size
    flash = ex.attention == "flash"
    rate = _peak(hw) * cal.matmul_efficiency
    gemm_rate = rate if p.precision == "bf16" else low_precision_gemm_rate(hw, p.precision)
    attn_rate = _peak(hw) * ((flash_attention_utilisation(hw) if flash else None) or cal.matmul_efficiency)
    work = _layer_work(m, s, flash)
    layers = st.layers
    n = len(layers)
    split = t * c  # TP splits every matmul and the heads; CP the tokens (zig-zag balanced)

    # ---- GEMMs, as a roofline: the FLOP at the matmul rate, or the weights read and the gradients accumulated
    # every micro-batch at HBM bandwidth, whichever is longer (the routed experts apart: few tokens reach each)
    tokens = s * b
    head = compute.head_params(m) if st.index == p.pp - 1 else 0.0
    # forwards' worth of FLOP: full recompute one more forward; torchtitan's op-level checkpointing the share of the
    # projections it recomputes (every second mm, ``compute.op_recomputed_params``)
    passes = 1 + compute.BACKWARD_PER_FORWARD + (1 if p.recompute == "full" else _op_share(m, layers, p.recompute))
    weight_bytes = (
        WEIGHT_READS_PER_MICRO_BATCH * ACT_BYTES
        + 2 * p.accounting.bytes_per_param.grads
        + (ACT_BYTES if p.recompute == "full" else 0)
    )
    dense_flop = (work.span(work.dense_flop, layers) * tokens) / split
    head_flop = compute.forward_flop(head, tokens) / split
    expert_flop = work.span(work.expert_flop, layers) * tokens / split
    if gemm_rate == rate:  # every GEMM at one rate (bf16)
        flop_s = (passes * dense_flop + 3 * head_flop) / rate
        share = (dense_flop + head_flop + expert_flop) / (passes * (dense_flop + expert_flop) + 3 * head_flop)
    else:  # the layers' GEMMs in FP8 or MXFP8, the output head in bf16 (``low_precision_gemm_rate``)
        flop_s = passes * dense_flop / gemm_rate + 3 * head_flop / rate
        forward_s = (dense_flop + expert_flop) / gemm_rate + head_flop / rate
        share = forward_s / (passes * (dense_flop + expert_flop) / gemm_rate + 3 * head_flop / rate)
    dense_s = max(flop_s, (work.span(work.dense_params, layers) + head) / t * weight_bytes / _hbm(hw))
    expert_bytes = work.span(work.expert_params, layers) / (d.etp * e) * weight_bytes
    expert_s = max(passes * expert_flop / gemm_rate, expert_bytes / _hbm(hw)) if expert_flop else 0.0
    gemm = dense_s + expert_s
    gemm_f = gemm * share
    # ---- attention: the backward is 2 forwards, FlashAttention's 2.5 (it recomputes the scores: Dao 2023 §3.1;
    # its benchmark counts backward FLOP as 2.5 × forward); selective recomputation re-runs the attention core,
    # full the whole layer
    softmax_f = work.span(work.softmax, layers) * b / split / attn_rate
    linear_f = work.span(work.linear, layers) * b / split / rate
    softmax_b = (FLASH_BACKWARD_PER_FORWARD if flash else compute.BACKWARD_PER_FORWARD) * softmax_f
    extra = {"full": softmax_f + linear_f, "selective": softmax_f, "none": 0.0, "op": 0.0}[p.recompute]
    # ---- memory-bound element-wise work: hbm_passes × the activations a layer stores, a third in the forward
    kernel = "selective" if flash else "none"
    stored = activation_bytes_per_layer(s // c, b, h, m.num_attention_heads, t, kernel, p.sequence_parallel) * n
    mem = cal.hbm_passes * stored / _hbm(hw)
    mem_extra = mem / 3 if p.recompute in ("full", "op") else 0.0  # op recomputes every element-wise op
    forward = gemm_f + softmax_f + linear_f + mem / 3
    backward = (gemm - gemm_f) + compute.BACKWARD_PER_FORWARD * linear_f + softmax_b + extra + 2 * mem / 3 + mem_extra
    attention_pass = softmax_f

    def seconds(coll: Collective, link: str) -> float:
        """One of ``coll``'s collectives on ``link``: its bytes at the link's achieved bandwidth, plus latency."""
        return coll.bytes_each / (hw.bandwidth(link) * cal.link_efficiency) + collective_latency_s(
            coll.kind, coll.ranks, link
        )

    # ---- TP: the report's collectives per layer (the ledger's, plus what recomputation re-runs), n layers
    tp_s = 0.0
    link = report.link["tp"]
    if t > 1 and link:
        coll = report.collectives["tp"]
        if ex.tp_overlap == "backward":  # Megatron-Core hides what a GEMM can cover in the backward
            tp_s = add_up(x.count * seconds(x, link) for x in coll if x.hidden_by is None) * n
        else:
            tp_s = add_up(x.count * seconds(x, link) for x in coll) * n
            if ex.tp_overlap == "full":
                tp_s = max(0.0, tp_s - gemm)
        # TP beyond the KV heads: the qkv output's gather and its gradient's reduce-scatter, each attention layer
        # (nothing hides them: evaluation._collectives' "tp_qkv")
        qkv = report.collectives.get("tp_qkv", ())
        tp_s += add_up(x.count * seconds(x, link) for x in qkv) * st.full_attention_layers

    # ---- CP: the K/V ring of the full-attention layers (every pass of the report's list), each pass under the
    # attention of the chunk in hand when the engine overlaps it
    cp_s = 0.0
    link = report.link["cp"]
    if c > 1 and link and st.linear_attention_layers:  # Megatron-Core's Gated DeltaNet all-to-alls: nothing hides them
        linear = report.collectives.get("cp_linear", ())
        cp_s += add_up(x.count * seconds(x, link) for x in linear) * st.linear_attention_layers
    if c > 1 and link and st.full_attention_layers:
        attn_pass = attention_pass / st.full_attention_layers
        for ring in report.collectives["cp"]:
            per_pass = seconds(ring, link)
            if ex.cp_overlap and ring.hidden_by == "attention":
                per_pass = max(0.0, per_pass - attn_pass)
            cp_s += ring.count * st.full_attention_layers * per_pass

    # ---- EP: the report's all-to-alls per MoE layer, exposed (DualPipe hides them under another micro-batch)
    ep_s = 0.0
    link = report.link["ep"]
    if e > 1 and link and st.moe_layers:
        ep_s = add_up(x.count * seconds(x, link) for x in report.collectives["ep"]) * st.moe_layers
        if dualpipe(p, ex):
            ep_s = max(0.0, ep_s - forward - backward)
    return MicroBatch(forward, backward, gemm, tp_s, cp_s, ep_s)


def _dp_exposed_s(
    report: Report | StepInputs | TimeReport, mb: MicroBatch, units: int, ex: Execution, cal: Calibration
) -> float:
    """Seconds of data-parallel synchronisation not hidden under compute (see the module docstring)."""
    p, hw, d = report.plan, report.plan.hardware, report.plan.dims
    m = p.micro_batches
    schedule = p.accounting.sync_schedule(p.zero, p.pp)
    if not schedule:
        return 0.0
    # each collective's share of the synchronisation bytes: the same for every group size (the ring factors of
    # all-reduce, reduce-scatter and all-gather keep their ratios), so one computation serves the DP, CP and EDP parts
    total = add_up(sync_terms(2, 1.0, schedule, m).values())
    groups = {"dp": d.dp, "cp": d.cp, "edp": d.expert_dp}
    slots = {"forward": [0.0, 0.0], "backward": [0.0, 0.0], "after": [0.0, 0.0]}  # [every micro-batch, once]
    for c in schedule:
        occurrences = m if c.per_micro_batch else 1
        share = c.bytes(2, 1.0, m) / total if total else 0.0
        seconds = 0.0
        for key, n_bytes in report.grad_sync_bytes.items():
            link = report.link[key]
            if not n_bytes or not link:
                continue
            seconds += n_bytes * share / occurrences / (hw.bandwidth(link) * cal.link_efficiency)
            seconds += units * collective_latency_s(c.kind, groups[key], link)
        slots[c.window][0 if c.per_micro_batch else 1] += seconds
    if not ex.dp_overlap:
        return add_up(m * every + once for every, once in slots.values())

    def exposed(busy: float, window: float) -> float:
        return min(busy, max(0.0, busy - window) + busy / units)

    fwd, bwd, after = slots["forward"], slots["backward"], slots["after"]
    return (
        (m - 1) * (exposed(fwd[0], mb.forward_s) + exposed(bwd[0], mb.backward_s))
        + exposed(fwd[0] + fwd[1] + after[0] + after[1], mb.forward_s)
        + exposed(bwd[0] + bwd[1], mb.backward_s)
    )


def _slowest_stage(
    report: Report | StepInputs | TimeInputs | TimeReport, ex: Execution, cal: Calibration, memo: dict | None = None
) -> tuple[int, MicroBatch]:
    """The pipeline stage whose micro-batch takes longest, and that time (stages with the same work computed once).
    ``memo`` (a search's, for plans of one model, hardware, sequence length, ledger, execution and calibration)
    keeps each micro-batch time by all that ``_micro_batch`` reads of the plan besides those: the mesh's TP, CP, EP
    and expert TP sizes and its TP, CP and EP links, the micro-batch size, recompute mode, sequence parallelism,
    whether DualPipe runs, and the stage's layer kinds and whether it holds the head, so plans that differ in ZeRO
    stage, DP or virtual stages share it."""
    p = report.plan
    best: tuple[int, MicroBatch] | None = None
    seen: set[tuple] = set()
    kinds, stages = layer_kinds(p.model), p.stages
    for group in p.stage_groups:  # in the order of their first stage
        st = stages[group[0]]
        key = (kinds[st.layers.start : st.layers.stop], st.index == p.pp - 1)  # linear layers among the kinds
        if key in seen:
            continue
        seen.add(key)
        mb = _stage_micro_batch(report, st, ex, cal, memo)
        if best is None or mb.total_s > best[1].total_s:
            best = (st.index, mb)
    assert best is not None
    return best


def _stage_micro_batch(
    report: Report | StepInputs | TimeInputs | TimeReport, st: Stage, ex: Execution, cal: Calibration, memo: dict | None
) -> MicroBatch:
    """``_micro_batch`` of stage ``st``, kept in ``memo`` (when given) by all it reads (see ``_slowest_stage``)."""
    if memo is None:
        return _micro_batch(report, st, ex, cal)
    p, d, link = report.plan, report.plan.dims, report.link
    # all _micro_batch reads of a stage: the mesh's and the plan's settings below, its layers' kinds (their work,
    # attention and experts) and whether it holds the head
    key = (
        d.tp, d.cp, d.ep, d.etp, p.micro_batch_size, p.recompute, p.sequence_parallel, link["tp"], link["cp"],
        link["ep"], dualpipe(p, ex), layer_kinds(p.model)[st.layers.start : st.layers.stop], st.index == p.pp - 1,
    )  # fmt: skip
    got = memo.get(key)
    if got is None:
        got = memo[key] = _micro_batch(report, st, ex, cal)
    return got


def _pipeline_s(
    p: Plan,
    v: int,
    link: str | None,
    pp_bytes: float,
    bubble: float,
    mb: MicroBatch,
    ex: Execution,
    cal: Calibration,
) -> tuple[float, float]:
    """The pipeline's two terms for ``p`` with ``v`` chunks per rank: the seconds of one micro-batch's
    stage-to-stage sends (``pp_bytes``: the bytes a GPU sends per step, on ``link``; each chunk's sends pay a
    latency) and the bubble's seconds (``bubble``: its fraction of the ideal compute time,
    ``parallel.pp.bubble_fraction``, of slots of the slowest stage's micro-batch ``mb`` plus its sends; DualPipe's
    idle time from its own formula)."""
    m, pp = p.micro_batches, p.pp
    duals = _dualpipe(p, ex, v)
    pp_mb = 0.0
    if pp > 1 and link and not duals:
        sent = pp_bytes / m
        if ex.pp_scatter_gather and not p.accounting.pp_send_divided(p.sequence_parallel):
            sent /= p.tp
        pp_mb = sent / (p.hardware.bandwidth(link) * cal.link_efficiency) + 2 * v * collective_latency_s(
            "send", 2, link
        )
    slot = mb.total_s + pp_mb
    if pp == 1:
        return pp_mb, 0.0
    if duals:
        # W = B/2: the weight-gradient half of the backward (DeepSeek-V3 Table 2's W)
        return pp_mb, dualpipe_idle(pp, mb.forward_s + mb.tp_s + mb.cp_s, mb.backward_s / 2, mb.backward_s / 2)
    return pp_mb, bubble * m * slot


def step_time_floors(
    inputs: Sequence[TimeInputs],
    chunks: Iterable[int],
    execution: Execution | None = None,
    calibration_: Calibration | None = None,
    _memo: dict | None = None,
) -> dict[tuple[int, str], float]:
    """For each plan of ``inputs`` (plans alike but for their recompute modes) and each virtual-stage count v of
    ``chunks``, a lower bound on ``step_time(...).total_s`` of that plan with v chunks per pipeline rank (under
    DualPipe, which runs at v = 1 alone and hides the EP all-to-alls there, of the plan's own v only), at any ZeRO
    stage and with any model states, keyed (v, recompute mode): every term ``step_time`` adds but the two that read
    them, the exposed data-parallel synchronisation and the optimizer step, which are never negative, with the
    micro-batch time of one stage (``TimeInputs.stage``) in place of the slowest stage's, which is no shorter, and
    the sends and the 1F1B bubble (``_pipeline_s``), which grow with it; under DualPipe, whose idle time reads the
    forward and the backward apart (one stage's may be the longer forward of a shorter micro-batch), the slowest
    stage's own. ``step_time`` reads the chunk count nowhere else. A
    search prunes with it (``search.search(top=)``); each bound is 10⁻¹² below that partial sum, so that the order of
    the float additions cannot put it above the step time."""
    out: dict[tuple[int, str], float] = {}
    if not inputs:
        return out
    p = inputs[0].plan
    ex = execution or execution_for(p.accounting.name)
    cal = calibration_ or calibration_for(p.hardware)
    m = p.micro_batches
    # the sends and the bubble fraction read the chunks, not the recompute mode
    per_chunks = {v: (pp_send_bytes(p, v), pipeline_bubble(p, v)) for v in chunks}
    for one in inputs:
        q = one.plan
        if ex.pipeline == "dualpipe":  # its idle time reads the forward and backward apart: the slowest stage's
            mb = _slowest_stage(one, ex, cal, _memo)[1]
        else:
            mb = _stage_micro_batch(one, q.stages[one.stage], ex, cal, _memo)
        micro = m * mb.compute_s + m * mb.tp_s + m * mb.cp_s + m * mb.ep_s
        for v, (sent, bubble) in per_chunks.items():
            pp_mb, idle = _pipeline_s(q, v, one.link["pp"], sent, bubble, mb, ex, cal)
            out[v, q.recompute] = (micro + m * pp_mb + idle) * (1 - 1e-12)
    return out


def step_time(
    report: Report | StepInputs | TimeReport,
    execution: Execution | None = None,
    calibration_: Calibration | None = None,
    _memo: dict | None = None,
) -> StepTime:
    """Estimated seconds per optimizer step of ``report``'s plan (see the module docstring). ``execution`` defaults
    to the plan's ledger's engine (``execution_for``), ``calibration_`` to the stored fit. ``report`` may be the
    ``StepInputs`` of the plan (``plan.evaluation.step_inputs``: the same fields as its report); ``_memo`` is a
    search's store of micro-batch times (``_slowest_stage``)."""
    p = report.plan
    ex = execution or execution_for(p.accounting.name)
    cal = calibration_ or calibration_for(p.hardware)
    m = p.micro_batches
    k, mb = _slowest_stage(report, ex, cal, _memo)
    hw = p.hardware
    pp_mb, bubble = _pipeline_s(
        p, p.virtual_stages, report.link["pp"], report.comm_bytes_per_step["pp"], report.bubble, mb, ex, cal
    )
    units = max(p.stages[k].num_layers, 1)
    states = report.model_states_terms
    optimizer_bytes = add_up(states.values()) + add_up(states.get(x, 0.0) for x in ("master", "adam_m", "adam_v"))
    st = StepTime(
        compute_s=m * mb.compute_s,
        tp_s=m * mb.tp_s,
        cp_s=m * mb.cp_s,
        ep_s=m * mb.ep_s,
        pp_s=m * pp_mb,
        dp_exposed_s=_dp_exposed_s(report, mb, units, ex, cal),
        bubble_s=bubble,
        optimizer_s=optimizer_bytes / _hbm(hw),
    )
    _check_finite(st, report)
    return st


RATES = ("peak_bf16_flop_per_s", "hbm_bytes_per_s", "nvlink_bytes_per_s", "infiniband_bytes_per_s")


def _rate_of(term: str, report: Report | StepInputs | TimeReport) -> str | None:
    """The hardware rate ``term`` divides its work by (None for the bubble, which is made of the others)."""
    p, hw = report.plan, report.plan.hardware
    if term in ("tp_s", "cp_s", "ep_s", "pp_s"):
        link = report.link[term[:2]]
        return f"{link}_bytes_per_s" if link else None
    if term == "dp_exposed_s":
        links = {report.link[k] for k, x in report.grad_sync_bytes.items() if x and report.link[k]}
        return min((f"{x}_bytes_per_s" for x in links), key=lambda r: getattr(hw, r), default=None)
    if term == "optimizer_s":
        return "hbm_bytes_per_s"
    if term == "compute_s":  # the FLOP at the peak, or the bytes at HBM bandwidth: whichever cannot be finite
        flop = hardware_flop_per_step(report) / p.gpus
        return "peak_bf16_flop_per_s" if not math.isfinite(flop / _peak(hw)) else "hbm_bytes_per_s"
    return None


def _check_finite(st: StepTime, report: Report | StepInputs | TimeReport) -> None:
    """ValueError naming the hardware rate that makes the step time infinite (or not a number): a rate so small that
    the work a term divides by it overflows a float, or that the terms' sum does. The rate is the failing term's own
    (its link's bandwidth, the bf16 peak, HBM bandwidth); for the bubble or a sum, the largest finite term's."""
    hw = report.plan.hardware
    terms = st.terms()
    bad = [k for k, x in terms.items() if not math.isfinite(x)]
    if not bad and math.isfinite(st.total_s):
        return
    named = [r for r in (_rate_of(k, report) for k in bad) if r]
    if not named:  # only the bubble, or only the sum, overflows: the largest finite term's rate
        finite = [k for k, x in terms.items() if math.isfinite(x) and _rate_of(k, report)]
        largest = _rate_of(max(finite, key=terms.__getitem__), report) if finite else None
        named = [largest] if largest else []
    name = named[0] if named else min((r for r in RATES if getattr(hw, r)), key=lambda r: getattr(hw, r))
    raise ValueError(
        f"hardware {hw.name!r} has {name}={getattr(hw, name):g}, too small for a finite step time "
        f"({', '.join(bad) or 'their sum'} overflow{'s' if len(bad) == 1 or not bad else ''})"
    )


# ---------------------------------------------------------------- FLOP, MFU, HFU
def model_flop_per_step(report: Report) -> float:
    """Model FLOP per step: forward + backward of every sequence, attention over the whole score matrix, no
    recomputation (``compute.training_flop_per_sequence(..., "none", causal=False)`` × sequences)."""
    p = report.plan
    return compute.training_flop_per_sequence(p.model, p.seq, "none", causal=False) * p.global_batch


def hardware_flop_per_step(report: Report | StepInputs | TimeReport) -> float:
    """Model FLOP plus the plan's recomputation, in the same convention (HFU's numerator)."""
    p = report.plan
    return compute.training_flop_per_sequence(p.model, p.seq, p.recompute, causal=False) * p.global_batch


def _utilisation(flop: float, report: Report, step_s: float, peak_flop_per_s: float) -> float:
    if not peak_flop_per_s > 0 or not step_s > 0:
        raise ValueError(f"peak_flop_per_s={peak_flop_per_s!r} and step_s={step_s!r} must be positive")
    return flop / (step_s * report.plan.gpus * peak_flop_per_s)


def mfu(report: Report, step_s: float, peak_flop_per_s: float | None = None) -> float:
    """Model FLOPs utilisation: ``model_flop_per_step`` ÷ (step time × GPUs × peak); peak defaults to the
    hardware's dense bf16 peak."""
    peak = _peak(report.plan.hardware) if peak_flop_per_s is None else peak_flop_per_s
    return _utilisation(model_flop_per_step(report), report, step_s, peak)


def hfu(report: Report, step_s: float, peak_flop_per_s: float | None = None) -> float:
    """Hardware FLOPs utilisation: ``hardware_flop_per_step`` ÷ (step time × GPUs × peak)."""
    peak = _peak(report.plan.hardware) if peak_flop_per_s is None else peak_flop_per_s
    return _utilisation(hardware_flop_per_step(report), report, step_s, peak)


def step_report(report: Report, execution: Execution | None = None, step: StepTime | None = None) -> dict:
    """The step-time keys ``meshplan plan --json`` adds: ``step_time_s``, its terms, ``tokens_per_step``,
    ``mfu``, ``hfu`` (against the hardware's dense bf16 peak), the FLOP behind them and the execution assumed.
    ``step``: the plan's ``step_time`` under ``execution`` when the caller has it already (a search's candidate)."""
    p = report.plan
    ex = execution or execution_for(p.accounting.name)
    st = step_time(report, ex) if step is None else step
    return {
        "step_time_s": st.total_s,
        "step_time_terms_s": st.terms(),
        "tokens_per_step": p.tokens_per_step,
        "mfu": mfu(report, st.total_s),
        "hfu": hfu(report, st.total_s),
        "model_flop_per_step": model_flop_per_step(report),
        "hardware_flop_per_step": hardware_flop_per_step(report),
        "peak_flop_per_s": _peak(p.hardware),
        "execution": {f.name: getattr(ex, f.name) for f in fields(ex)},
    }


__all__ = [
    "PHYSICAL_RANGES",
    "TERMS",
    "Calibration",
    "Execution",
    "MicroBatch",
    "StepTime",
    "calibration",
    "collective_latency_s",
    "execution_for",
    "fit_data",
    "hardware_flop_per_step",
    "hfu",
    "mfu",
    "micro_batch",
    "model_flop_per_step",
    "step_report",
    "step_time",
    "step_time_floors",
]
