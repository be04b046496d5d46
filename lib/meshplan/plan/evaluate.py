"""A parallel plan and its report: memory per GPU, bytes per dimension with link and time, bubble.

A ``Plan`` is built from small validated parts, each checked once where it is defined:

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
from dataclasses import dataclass, field, fields
from functools import cached_property, lru_cache
from typing import Any

from meshplan.parallel import activations as act
from meshplan.parallel.cp import cp_kv_bytes_per_step, kv_width_per_gpu
from meshplan.parallel.dp import grad_sync_bytes
from meshplan.parallel.engine_activations import stage_bytes
from meshplan.parallel.ep import ep_bytes_per_step, tokens_per_gpu
from meshplan.parallel.pp import bubble_fraction, bubble_share_of_time, pp_bytes_per_step
from meshplan.parallel.tp import kv_replicas, megatron_sp_regather_bytes_per_layer, tp_bytes_per_step
from meshplan.parallel.zero import model_states_terms, sync_terms
from meshplan.spec.accounting import LAB, Accounting, BytesPerParam, get_accounting
from meshplan.spec.dims import DEFAULT_ORDER, MAX_GPUS, ParallelDims, check_count
from meshplan.spec.hardware import Hardware, load_hardware
from meshplan.spec.mesh import Mesh, check_nodes
from meshplan.spec.model import ModelSpec, load_model
from meshplan.spec.stages import Stage, inflight_micro_batches, interleave_factor, spread_layers, stages

__all__ = [
    "DIMS",
    "MESH_KEYS",
    "TRAFFIC",
    "Plan",
    "Report",
    "Workload",
    "evaluate",
]

DIMS = ("dp", "tp", "pp", "cp", "ep")
TRAFFIC = (*DIMS, "edp")  # the report's traffic keys: the five dimensions and the expert-data-parallel sync
MESH_KEYS = ("tp", "cp", "ep", "dp", "pp")
MAX_SEQ = 2**26  # 67M tokens per sequence
MAX_MICRO_BATCH_SIZE = 2**16
MAX_MICRO_BATCHES = 2**20
MAX_VIRTUAL_STAGES = 2**10


@dataclass(frozen=True)
class Workload:
    """What one optimizer step processes: ``micro_batches`` micro-batches of ``micro_batch_size`` sequences of
    ``seq`` tokens on each data-parallel replica (gradient accumulation over m micro-batches)."""

    seq: int = 4096
    micro_batch_size: int = 1
    micro_batches: int = 8

    def __post_init__(self) -> None:
        check_count("seq", self.seq, MAX_SEQ)
        check_count("micro_batch_size", self.micro_batch_size, MAX_MICRO_BATCH_SIZE)
        check_count("micro_batches", self.micro_batches, MAX_MICRO_BATCHES)

    def global_batch(self, dp: int) -> int:
        """Sequences per step over ``dp`` replicas: dp × b × m."""
        return dp * self.micro_batch_size * self.micro_batches

    @staticmethod
    def micro_batches_for(global_batch: int, dp: int, micro_batch_size: int) -> int:
        """m = B ÷ (dp × b) for a global batch of B sequences (ValueError when it does not divide)."""
        check_count("global_batch", global_batch, MAX_MICRO_BATCHES * MAX_MICRO_BATCH_SIZE * MAX_GPUS)
        if global_batch % (dp * micro_batch_size):
            raise ValueError(
                f"global batch {global_batch} is not divisible by dp × micro-batch size = {dp} × "
                f"{micro_batch_size} = {dp * micro_batch_size}"
            )
        return global_batch // (dp * micro_batch_size)


def _check_tp_heads(model: ModelSpec, t: int, kv_replication: bool) -> None:
    if model.num_attention_heads % t:
        raise ValueError(f"tp={t} does not divide {model.num_attention_heads} attention heads")
    kv_replicas(model.num_key_value_heads, t, replication=kv_replication)  # the one rule for KV heads over TP
    for heads, what in (
        (model.linear_num_key_heads, "linear-attention key heads"),
        (model.linear_num_value_heads, "linear-attention value heads"),
    ):
        if heads and heads % t:
            raise ValueError(f"tp={t} does not divide {heads} {what}")


@dataclass(frozen=True)
class Plan:
    """One parallel configuration, built from validated parts (see the module docstring).

    Attributes:
        model: the ``ModelSpec``.
        dims: the mesh shape (``ParallelDims``).
        workload: sequence length, micro-batch size, micro-batches per step.
        hardware: the machine.
        accounting: the bookkeeping convention (``accounting.LAB`` by default).
        zero: ZeRO stage 0–3 over the data-parallel ranks.
        recompute: ``"none"``, ``"selective"`` or ``"full"``.
        sp: sequence parallel; ``None`` means on whenever tp > 1.
        virtual_stages: v (interleaved schedule when > 1).
        layers_per_stage: ``None`` (pp × v must divide the layers) or the layers of each pipeline rank, first to
            last (e.g. ``stages.spread_layers(126, 16)``); they add up to the layers, at least v each.
        stage_balance: ``"even"`` (the lab page: everything outside the layers spread evenly) or ``"max"`` (the
            embedding on the first stage, the head and MTP module on the last).
        kv_replication: allow tp > KV heads when KV heads divide tp (each KV head replicated on tp/kv GPUs, as
            engines do); ``False`` demands tp | KV heads.

    The sizes, the workload and the machine read through properties (``plan.tp``, ``plan.seq``,
    ``plan.gpu_memory_bytes``, ...); ``plan.replace(...)`` takes the same flat names as ``Plan.create``.
    """

    model: ModelSpec
    dims: ParallelDims
    workload: Workload = field(default_factory=Workload)
    hardware: Hardware = field(default_factory=load_hardware)
    accounting: Accounting = LAB
    zero: int = 0
    recompute: str = "none"
    sp: bool | None = None
    virtual_stages: int = 1
    layers_per_stage: tuple[int, ...] | None = None
    stage_balance: str = "even"
    kv_replication: bool = True

    # ------------------------------------------------------------------ the front door
    @classmethod
    def create(
        cls,
        model: Any,
        gpus: int,
        dp: int | None = None,
        *,
        tp: int = 1,
        cp: int = 1,
        pp: int = 1,
        ep: int = 1,
        expert_tp: int | None = None,
        order: str = DEFAULT_ORDER,
        seq: int = 4096,
        micro_batch_size: int = 1,
        micro_batches: int | None = None,
        global_batch: int | None = None,
        hardware: Hardware | str | None = None,
        gpus_per_node: int | None = None,
        gpu_memory_bytes: float | None = None,
        accounting: Accounting | str = "lab",
        bytes_per_param: BytesPerParam | None = None,
        zero: int = 0,
        recompute: str = "none",
        sp: bool | None = None,
        virtual_stages: int = 1,
        layers_per_stage: Sequence[int] | None = None,
        uneven_stages: bool = False,
        stage_balance: str = "even",
        kv_replication: bool = True,
    ) -> Plan:
        """A plan from a model name, path or spec and flat settings.

        ``dp`` defaults to gpus ÷ (tp × cp × pp). ``micro_batches`` defaults to 8, or to B ÷ (dp × b) when
        ``global_batch`` (B sequences per step) is given (ValueError when it does not divide, or when both are
        given and disagree). ``hardware``: a ``Hardware``, a preset name or None (the lab page's machine);
        ``gpus_per_node`` and ``gpu_memory_bytes`` override it. ``uneven_stages``: when pp does not divide the
        layers, spread them ends-lighter (``stages.spread_layers``) instead of refusing.
        """
        spec = load_model(model)
        dims = ParallelDims.from_gpus(gpus, tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, expert_tp=expert_tp, order=order)
        if global_batch is not None:
            m = Workload.micro_batches_for(global_batch, dims.dp, check_count("micro_batch_size", micro_batch_size))
            if micro_batches is not None and micro_batches != m:
                raise ValueError(
                    f"micro_batches={micro_batches} disagrees with global batch {global_batch} = "
                    f"dp × b × m = {dims.dp} × {micro_batch_size} × m, which needs m = {m}"
                )
            micro_batches = m
        workload = Workload(seq, micro_batch_size, 8 if micro_batches is None else micro_batches)
        hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
        hw = hw.with_overrides(gpu_memory_bytes, gpus_per_node)
        acc = get_accounting(accounting)
        if bytes_per_param is not None:
            acc = acc.with_bytes_per_param(bytes_per_param)
        if uneven_stages and layers_per_stage is None and spec.num_layers % pp:
            layers_per_stage = spread_layers(spec.num_layers, pp)
        return cls(
            model=spec,
            dims=dims,
            workload=workload,
            hardware=hw,
            accounting=acc,
            zero=zero,
            recompute=recompute,
            sp=sp,
            virtual_stages=virtual_stages,
            layers_per_stage=None if layers_per_stage is None else tuple(layers_per_stage),
            stage_balance=stage_balance,
            kv_replication=kv_replication,
        )

    def settings(self) -> dict[str, Any]:
        """The flat keyword arguments of ``Plan.create`` that rebuild this plan."""
        d = self.dims
        return {
            "model": self.model,
            "gpus": d.world_size,
            "dp": d.dp,
            "tp": d.tp,
            "cp": d.cp,
            "pp": d.pp,
            "ep": d.ep,
            "expert_tp": d.expert_tp,
            "order": d.order,
            "seq": self.seq,
            "micro_batch_size": self.micro_batch_size,
            "micro_batches": self.micro_batches,
            "hardware": self.hardware,
            "accounting": self.accounting,
            "zero": self.zero,
            "recompute": self.recompute,
            "sp": self.sp,
            "virtual_stages": self.virtual_stages,
            "layers_per_stage": self.layers_per_stage,
            "stage_balance": self.stage_balance,
            "kv_replication": self.kv_replication,
        }

    def replace(self, **changes: Any) -> Plan:
        """This plan with some settings changed, by ``Plan.create``'s names (a new size of tp, cp or pp keeps dp
        unless ``gpus`` or ``dp`` changes too: give them)."""
        kw = self.settings()
        if "gpus" in changes and "dp" not in changes:
            kw["dp"] = None
        for k in ("gpus_per_node", "gpu_memory_bytes"):
            if k in changes:
                kw["hardware"] = self.hardware.with_overrides(**{k: changes.pop(k)})
        if "bytes_per_param" in changes:
            kw["accounting"] = self.accounting.with_bytes_per_param(changes.pop("bytes_per_param"))
        unknown = set(changes) - set(kw) - {"global_batch", "uneven_stages"}
        if unknown:
            raise ValueError(f"unknown plan setting(s): {', '.join(sorted(unknown))}")
        if "global_batch" in changes and "micro_batches" not in changes:
            kw["micro_batches"] = None
        kw.update(changes)
        if kw["dp"] is not None and {"tp", "cp", "pp"} & set(changes) and "dp" not in changes:
            kw["gpus"] = kw["dp"] * kw["tp"] * kw["cp"] * kw["pp"]
        return Plan.create(**kw)

    def __post_init__(self) -> None:
        m, d = self.model, self.dims
        if not isinstance(m, ModelSpec):
            raise ValueError(f"model={m!r} must be a ModelSpec (use Plan.create with a name or path)")
        for name, part, kind in (
            ("dims", d, ParallelDims),
            ("workload", self.workload, Workload),
            ("hardware", self.hardware, Hardware),
            ("accounting", self.accounting, Accounting),
        ):
            if not isinstance(part, kind):
                raise ValueError(f"{name}={part!r} must be a {kind.__name__}")
        check_count("virtual_stages", self.virtual_stages, MAX_VIRTUAL_STAGES)
        if self.zero not in (0, 1, 2, 3) or not isinstance(self.zero, int) or isinstance(self.zero, bool):
            raise ValueError(f"zero={self.zero!r} must be 0, 1, 2 or 3")
        if self.recompute not in act.RECOMPUTE_MODES:
            raise ValueError(f"recompute={self.recompute!r} must be one of {', '.join(act.RECOMPUTE_MODES)}")
        if self.stage_balance not in ("even", "max"):
            raise ValueError(f"stage_balance={self.stage_balance!r} must be 'even' or 'max'")
        if self.sp is not None and not isinstance(self.sp, bool):
            raise ValueError(f"sp={self.sp!r} must be True, False or None")
        check_nodes(d.world_size, self.hardware.gpus_per_node)
        self.accounting.check(self.zero, d.pp)
        _check_tp_heads(m, d.tp, self.kv_replication and self.accounting.kv_replication)
        if self.layers_per_stage is not None:
            self._check_layers_per_stage()
        elif m.num_layers % (d.pp * self.virtual_stages):
            if self.virtual_stages > 1:
                raise ValueError(
                    f"pp×virtual_stages = {d.pp}×{self.virtual_stages} does not divide {m.num_layers} layers"
                )
            raise ValueError(
                f"pp={d.pp} does not divide {m.num_layers} layers (uneven stages give the first and last stages "
                "fewer: uneven_stages=True, or --uneven-stages on the command line)"
            )
        if self.virtual_stages > 1:
            if d.pp == 1:
                raise ValueError(f"virtual_stages={self.virtual_stages} needs pp > 1")
            if self.micro_batches < d.pp:
                raise ValueError(
                    f"micro_batches={self.micro_batches} is fewer than pp={d.pp} stages, which the "
                    "interleaved schedule needs"
                )
        if self.seq % d.cp:
            raise ValueError(f"cp={d.cp} does not divide seq={self.seq}")
        if d.ep > 1 and not m.is_moe:
            raise ValueError(f"ep={d.ep} but {m.name} has no experts")
        if m.is_moe and m.num_experts % d.ep:
            raise ValueError(f"ep={d.ep} does not divide {m.num_experts} experts")

    def _check_layers_per_stage(self) -> None:
        lps = self.layers_per_stage
        if isinstance(lps, (str, bytes)) or not isinstance(lps, tuple):
            raise ValueError(f"layers_per_stage={lps!r} must be a sequence of layer counts, one per pipeline rank")
        for n in lps:
            check_count("layers_per_stage entry", n)
        if len(lps) != self.pp:
            raise ValueError(f"layers_per_stage has {len(lps)} entries but pp={self.pp}")
        if sum(lps) != self.model.num_layers:
            raise ValueError(f"layers_per_stage adds up to {sum(lps)}, not {self.model.num_layers} layers")
        if min(lps) < self.virtual_stages:
            raise ValueError(
                f"virtual_stages={self.virtual_stages} needs at least {self.virtual_stages} layers on "
                f"every pipeline rank (layers_per_stage has {min(lps)})"
            )

    # ------------------------------------------------------------------ reading the parts
    gpus = property(lambda self: self.dims.world_size)
    tp = property(lambda self: self.dims.tp)
    cp = property(lambda self: self.dims.cp)
    pp = property(lambda self: self.dims.pp)
    dp = property(lambda self: self.dims.dp)
    ep = property(lambda self: self.dims.ep)
    expert_tp = property(lambda self: self.dims.expert_tp)
    etp = property(
        lambda self: self.dims.etp, doc="The expert tensor-parallel size (tp unless expert_tp says otherwise)."
    )
    expert_dp = property(lambda self: self.dims.expert_dp, doc="Ranks holding the same expert shard.")
    order = property(lambda self: self.dims.order)
    seq = property(lambda self: self.workload.seq)
    micro_batch_size = property(lambda self: self.workload.micro_batch_size)
    micro_batches = property(lambda self: self.workload.micro_batches)
    gpus_per_node = property(lambda self: self.hardware.gpus_per_node)
    gpu_memory_bytes = property(lambda self: self.hardware.gpu_memory_bytes)
    bytes_per_param = property(lambda self: self.accounting.bytes_per_param)

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: dp × b × m."""
        return self.workload.global_batch(self.dims.dp)

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step: dp × b × m × s."""
        return self.global_batch * self.seq

    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else self.sp

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Layers of each pipeline rank (equal unless ``layers_per_stage`` says otherwise)."""
        if self.layers_per_stage is not None:
            return self.layers_per_stage
        return (self.model.num_layers // self.pp,) * self.pp

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        """What each pipeline rank holds (``stages.stages``)."""
        return stages(self.model, self.pp, self.layers_per_stage, self.stage_balance)

    @cached_property
    def mesh(self) -> Mesh:
        return Mesh.from_dims(self.dims, self.hardware.gpus_per_node)


@dataclass(frozen=True)
class Report:
    """What a plan costs per GPU. Bytes are per GPU; communication is bytes sent per step.

    ``stage`` is the pipeline rank whose memory is reported (the most loaded); ``traffic_stage`` the one whose
    bytes are (the one with the most layers). ``grad_sync_bytes`` is the part of ``comm_bytes_per_step`` that
    synchronises gradients (and, with ZeRO-3, gathers weights), by key: the traffic that can overlap the backward
    pass, unlike TP's, PP's, CP's K/V and EP's dispatch.
    """

    plan: Plan
    params_per_gpu: float
    model_states_terms: Mapping[str, float]
    memory_bytes: Mapping[str, float]
    fits: bool
    comm_bytes_per_step: Mapping[str, float]
    link: Mapping[str, str | None]
    comm_time_s: Mapping[str, float]
    bubble: float
    bubble_share: float
    notes: tuple[str, ...] = ()
    grad_sync_bytes: Mapping[str, float] = field(default_factory=dict)
    stage: int = 0
    traffic_stage: int = 0

    @property
    def heaviest_dim(self) -> str | None:
        """The dimension that sends the most bytes per step (None if nothing is sent)."""
        dim = max(TRAFFIC, key=lambda d: self.comm_bytes_per_step[d])
        return dim if self.comm_bytes_per_step[dim] > 0 else None

    def to_dict(self) -> dict:
        """The ``plan --json`` contract (extra keys after the contract's)."""
        p = self.plan
        return {
            "model": p.model.name,
            "params": p.model.params.total,
            "gpus": p.gpus,
            "mesh": {k: getattr(p, k) for k in MESH_KEYS},
            "memory_bytes": dict(self.memory_bytes),
            "fits": self.fits,
            "comm_bytes_per_step": dict(self.comm_bytes_per_step),
            "link": dict(self.link),
            "bubble": self.bubble,
            "bubble_share_of_time": self.bubble_share,
            "comm_time_s": dict(self.comm_time_s),
            "model_states_terms": dict(self.model_states_terms),
            "settings": {
                "zero": p.zero,
                "recompute": p.recompute,
                "seq": p.seq,
                "micro_batch_size": p.micro_batch_size,
                "micro_batches": p.micro_batches,
                "global_batch": p.global_batch,
                "tokens_per_step": p.tokens_per_step,
                "virtual_stages": p.virtual_stages,
                "sequence_parallel": p.sequence_parallel,
                "order": p.order,
                "gpus_per_node": p.gpus_per_node,
                "gpu_memory_bytes": p.gpu_memory_bytes,
                "hardware": p.hardware.name,
                "accounting": p.accounting.name,
                "stage_balance": p.stage_balance,
                "layers_per_stage": list(p.layers_per_stage) if p.layers_per_stage else None,
                "expert_tp": p.etp,
                "expert_dp": p.expert_dp,
                "memory_stage": self.stage,
                "traffic_stage": self.traffic_stage,
            },
            "notes": list(self.notes),
        }


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
    if t > 1:
        comm["tp"] = tp_bytes_per_step(s // c, b, h, st.num_layers, t, mb)
        if acc.tp_backward_regather and plan.sequence_parallel:
            comm["tp"] += megatron_sp_regather_bytes_per_layer(s // c, b, h, t) * st.num_layers * mb
    comm["pp"] = pp_bytes_per_step(s // c, b, h, p, mb, v)
    if acc.pp_send_divided(plan.sequence_parallel):
        comm["pp"] /= t
    if c > 1:
        kv_gpu = kv_width_per_gpu(m.kv_width, m.num_key_value_heads, t)
        comm["cp"] += cp_kv_bytes_per_step(s, b, kv_gpu, c, st.full_attention_layers, mb)
    if e > 1:
        comm["ep"] = ep_bytes_per_step(
            tokens_per_gpu(s, b, c, t, plan.sequence_parallel), m.experts_per_token, h, e, st.moe_layers, mb
        )

    link = dict(_links(d, hw.gpus_per_node))
    if not (separate_experts and m.is_moe):
        link["edp"] = None  # the experts (if any) sync with the dense gradients
    times = {k: (comm[k] / hw.bandwidth(link[k]) if link[k] else 0.0) for k in TRAFFIC}

    notes = []
    if t > m.num_key_value_heads:
        notes.append(
            f"tp={t} > {m.num_key_value_heads} KV heads: each KV head is replicated on "
            f"{t // m.num_key_value_heads} GPUs (the extra k/v weights are not counted)"
        )
    if plan.recompute == "full" and t > 1:
        if plan.accounting.name == "lab":
            notes.append(
                "full recompute re-runs the forward's 2 TP collectives per layer; not counted (lab convention)"
            )
        else:
            notes.append(
                "full recompute re-runs the forward's 2 TP collectives per layer: the step time charges them, "
                "these bytes do not"
            )
    if comm["edp"]:
        notes.append(
            f"routed-expert gradients sync over {d.expert_dp} expert-data-parallel ranks (edp), apart from "
            f"the dense gradients' {d.dp * c} data-parallel ranks"
        )
    if getattr(m, "estimated", ()):
        notes.append(
            f"{m.name} ({m.family}) is counted exactly by transformers on the meta device; estimated from "
            f"its config: {', '.join(m.estimated)}"
        )
    if m.max_position_embeddings and s > m.max_position_embeddings:
        notes.append(f"seq={s:,} is longer than the {m.max_position_embeddings:,} positions {m.name} was trained for")
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
        notes=tuple(notes),
        grad_sync_bytes=grad_sync,
        stage=k_mem,
        traffic_stage=st.index,
    )


def plan_field_names() -> tuple[str, ...]:
    """The ``Plan`` dataclass fields (its parts and choices)."""
    return tuple(f.name for f in fields(Plan))
