"""A parallel plan, built from small validated parts, each checked once where it is defined:

* the model (``spec.model.ModelSpec``),
* the mesh shape (``spec.dims.ParallelDims``: TP, CP, PP, DP, EP, expert TP, axis order),
* the workload (``Workload``: sequence length, micro-batch size, micro-batches per step),
* the machine (``spec.hardware.Hardware``: the only source of GPU memory, GPUs per node and bandwidths),
* the bookkeeping convention (``spec.accounting.Accounting``: the lab page's by default),
* the plan's own choices: ZeRO stage, recompute mode, sequence parallelism, virtual stages, the layers of each
  pipeline stage.

``Plan.create(...)`` is the front door (a model name or path, flat keyword arguments); ``evaluate``
(``plan.evaluation``) prices it. ``Plan(...)`` checks only what combining the parts adds (whole nodes, heads and
layers over TP and PP, the sequence over CP, experts over EP, interleaving, the ledger's refusals) and its own
choices; a rule that fails raises ``PlanError`` (``LedgerError`` for an engine's refusal) naming its factor.

    >>> p = Plan.create("qwen3.8-27b", gpus=8, dp=8, zero=3, recompute="full")
    >>> p.dims.label(), p.global_batch, p.tokens_per_step
    ('DP 8', 64, 262144)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from meshplan.core.units import add_up
from meshplan.core.validation import LedgerError, PlanError, check_choice, check_count, check_zero, is_count
from meshplan.parallel import activations as act
from meshplan.parallel.engine_activations import op_refusal
from meshplan.parallel.tp import kv_replicas
from meshplan.spec.accounting import LAB, Accounting, BytesPerParam, get_accounting
from meshplan.spec.dims import DEFAULT_ORDER, MAX_GPUS, ParallelDims
from meshplan.spec.hardware import Hardware, load_hardware
from meshplan.spec.mesh import Mesh, check_nodes
from meshplan.spec.model import ModelSpec, load_model
from meshplan.spec.stages import Stage, spread_layers, stage_groups, stages

__all__ = [
    "MAX_GLOBAL_BATCH",
    "MAX_MICRO_BATCHES",
    "MAX_MICRO_BATCH_SIZE",
    "MAX_SEQ",
    "MAX_VIRTUAL_STAGES",
    "PRECISIONS",
    "Plan",
    "Workload",
    "plan_field_names",
]

MAX_SEQ = 2**26  # 67M tokens per sequence
MAX_MICRO_BATCH_SIZE = 2**16
MAX_MICRO_BATCHES = 2**20
MAX_VIRTUAL_STAGES = 2**10
MAX_GLOBAL_BATCH = MAX_MICRO_BATCHES * MAX_MICRO_BATCH_SIZE * MAX_GPUS
PRECISIONS = ("bf16", "fp8", "mxfp8")  # the GEMMs' number format (``precision_refusal``)
ATTENTION_BACKENDS = ("flash", "unfused")  # the attention kernel the engine ledgers price (``Plan.attention_backend``)
OP_RECOMPUTE = "op"  # torchtitan's SelectiveAC (op-level): priced by the engine activation ledger, fsdp2 only


@dataclass(frozen=True)
class Workload:
    """What one optimizer step processes: ``micro_batches`` micro-batches of ``micro_batch_size`` sequences of
    ``seq`` tokens on each data-parallel replica (gradient accumulation over m micro-batches). PlanError naming a
    bad one."""

    seq: int = 4096
    micro_batch_size: int = 1
    micro_batches: int = 8

    def __post_init__(self) -> None:
        check_count("seq", self.seq, MAX_SEQ, PlanError)
        check_count("micro_batch_size", self.micro_batch_size, MAX_MICRO_BATCH_SIZE, PlanError)
        check_count("micro_batches", self.micro_batches, MAX_MICRO_BATCHES, PlanError)

    @classmethod
    def for_global_batch(cls, global_batch: int, dp: int, seq: int = 4096, micro_batch_size: int = 1) -> Workload:
        """The workload of a global batch of B sequences over ``dp`` replicas: m = B ÷ (dp × b)
        (``micro_batches_for``: PlanError naming ``global_batch`` when dp × b does not divide it).

        Each value is checked once, by the constructor: deriving m only tests that seq and b are counts
        (``is_count``); when one is not, the constructor names it."""
        m = 1  # a stand-in: the constructor below names the bad sequence length or micro-batch size
        if is_count(seq, MAX_SEQ) and is_count(micro_batch_size, MAX_MICRO_BATCH_SIZE):
            m = cls.micro_batches_for(global_batch, dp, micro_batch_size)
        return cls(seq, micro_batch_size, m)

    def global_batch(self, dp: int) -> int:
        """Sequences per step over ``dp`` replicas: dp × b × m."""
        return dp * self.micro_batch_size * self.micro_batches

    @staticmethod
    def micro_batches_for(global_batch: int, dp: int, micro_batch_size: int) -> int:
        """m = B ÷ (dp × b) for a global batch of B sequences (PlanError naming ``global_batch`` when it does not
        divide)."""
        check_count("global_batch", global_batch, MAX_GLOBAL_BATCH, PlanError)
        if global_batch % (dp * micro_batch_size):
            raise PlanError(
                f"global batch {global_batch} is not divisible by dp × micro-batch size = {dp} × "
                f"{micro_batch_size} = {dp * micro_batch_size}",
                "global_batch",
            )
        return global_batch // (dp * micro_batch_size)


def _check_tp_heads(model: ModelSpec, t: int, kv_replication: bool) -> None:
    if model.num_attention_heads % t:
        raise PlanError(f"tp={t} does not divide {model.num_attention_heads} attention heads", "tp")
    kv_replicas(model.num_key_value_heads, t, replication=kv_replication)  # the one rule for KV heads over TP
    for heads, what in (
        (model.linear_num_key_heads, "linear-attention key heads"),
        (model.linear_num_value_heads, "linear-attention value heads"),
    ):
        if heads and heads % t:
            raise PlanError(f"tp={t} does not divide {heads} {what}", "tp")


def recompute_refusal(model: ModelSpec, accounting: Accounting, recompute: str) -> str | None:
    """Why ``Plan`` refuses the recompute mode ``recompute`` for ``model`` in ``accounting``'s ledger, or None: a mode
    that is not one of ``act.RECOMPUTE_MODES`` or ``OP_RECOMPUTE``; ``OP_RECOMPUTE`` (torchtitan's op-level selective
    checkpointing) outside the fsdp2 ledger, or for a model with layers it is not priced for
    (``engine_activations.op_refusal``). It reads neither the mesh nor the workload: a search asks it once per mode."""
    if recompute == OP_RECOMPUTE:  # torchtitan's op-level selective checkpointing: the fsdp2 ledger only
        if accounting.name != "fsdp2":
            return (
                f"recompute='op' is torchtitan's op-level selective activation checkpointing; the "
                f"{accounting.name} ledger has no such mode (its modes: {', '.join(act.RECOMPUTE_MODES)})"
            )
        return op_refusal(model)
    try:
        check_choice("recompute", recompute, act.RECOMPUTE_MODES, PlanError)
    except PlanError as exc:
        return str(exc)
    return None


def precision_refusal(hardware: Hardware, accounting: Accounting, precision: str) -> str | None:
    """Why a plan cannot train its GEMMs in ``precision`` on ``hardware`` in ``accounting``'s ledger, or None.

    ``"bf16"``: every GEMM in bf16 (the default). ``"fp8"``: the linear layers' GEMMs in FP8 with per-tensor scales
    (Transformer Engine's ``--fp8-format hybrid`` with the delayed or tensorwise current-scaling recipe in
    Megatron-LM; torchao's float8 training, tensorwise, through torchtitan's ``float8`` converter), which needs FP8
    tensor cores (``Hardware.peak_fp8_flop_per_s``: Hopper and Blackwell). ``"mxfp8"``: block-scaled MXFP8 (TE's
    ``--fp8-recipe mxfp8``; torchao's ``mxfp8`` through torchtitan's ``mx`` converter), Blackwell only
    (``peak_mxfp8_flop_per_s``). The deepspeed ledger refuses both: DeepSpeed's engine has no FP8 recipe of its own
    (its FP8 runs put Transformer Engine modules inside the model, which is Megatron's path, not the engine's).
    """
    if not isinstance(precision, str) or precision not in PRECISIONS:
        return f"precision={precision!r} must be one of {', '.join(PRECISIONS)}"
    if precision == "bf16":
        return None
    if accounting.name == "deepspeed":
        return (
            f"precision={precision!r}: the deepspeed ledger has no FP8 recipe (DeepSpeed's engine trains in bf16 or "
            "fp16; FP8 comes from Transformer Engine modules inside the model): use --accounting megatron or fsdp2"
        )
    peak = hardware.peak_fp8_flop_per_s if precision == "fp8" else hardware.peak_mxfp8_flop_per_s
    if peak is None:
        needs = "FP8 tensor cores (Hopper or Blackwell)" if precision == "fp8" else "MXFP8 tensor cores (Blackwell)"
        key = "peak_fp8_flop_per_s" if precision == "fp8" else "peak_mxfp8_flop_per_s"
        return f"precision={precision!r} needs {needs}: hardware {hardware.name!r} gives no {key}"
    return None


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
        recompute: ``"none"``, ``"selective"`` or ``"full"``; ``"op"`` (torchtitan's op-level selective checkpointing,
            ``engine_activations``) in the fsdp2 ledger only.
        sp: sequence parallel; ``None`` means on whenever tp > 1.
        virtual_stages: v (interleaved schedule when > 1).
        layers_per_stage: ``None`` (pp × v must divide the layers) or the layers of each pipeline rank, first to
            last (e.g. ``stages.spread_layers(126, 16)``); they add up to the layers, at least v each.
        stage_balance: ``"even"`` (the lab page: everything outside the layers spread evenly) or ``"max"`` (the
            embedding on the first stage, the head and MTP module on the last).
        kv_replication: allow tp > KV heads when KV heads divide tp (each KV head replicated on tp/kv GPUs, as
            engines do); ``False`` demands tp | KV heads.
        precision: the linear layers' GEMM format, ``"bf16"``, ``"fp8"`` or ``"mxfp8"`` (``precision_refusal``).
        attention_backend: the attention kernel whose saved tensors the engine ledgers price: ``"flash"`` (SDPA's
            flash or memory-efficient kernels, TE's flash and fused attention: no s × s tensor) or ``"unfused"``
            (Megatron-Core's ``--attention-backend unfused``, or ``--transformer-impl local``: the softmax and
            dropout over s × s scores are saved; megatron ledger only, and without context parallelism, which
            Megatron-Core runs only in Transformer Engine's attention). The step time prices the flash kernel.
        dropout: the attention and hidden dropout probability (Megatron's ``--attention-dropout`` and
            ``--hidden-dropout``, whose default is 0.1; 0 in the recipes for today's LLMs). Above 0 the megatron
            ledger keeps the hidden dropout's masks, and with ``"unfused"`` the attention dropout's mask and output;
            the other ledgers price dropout off and refuse it.

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
    precision: str = "bf16"
    attention_backend: str = "flash"
    dropout: float = 0.0

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
        gpus_per_host: int | None = None,
        bytes_per_param: BytesPerParam | None = None,
        zero: int = 0,
        recompute: str = "none",
        sp: bool | None = None,
        virtual_stages: int = 1,
        layers_per_stage: Sequence[int] | None = None,
        uneven_stages: bool = False,
        stage_balance: str = "even",
        kv_replication: bool = True,
        precision: str = "bf16",
        attention_backend: str = "flash",
        dropout: float = 0.0,
        grad_dtype: str | None = None,
    ) -> Plan:
        """A plan from a model name, path or spec and flat settings.

        ``dp`` defaults to gpus ÷ (tp × cp × pp). ``micro_batches`` defaults to 8, or to B ÷ (dp × b) when
        ``global_batch`` (B sequences per step) is given (``Workload.for_global_batch``; PlanError when it does not
        divide, or when both are given and disagree). ``hardware``: a ``Hardware``, a preset name or None (the lab
        page's machine); ``gpus_per_node`` (the NVLink domain), ``gpus_per_host`` (the launchers' host) and
        ``gpu_memory_bytes`` override it. ``uneven_stages``: when pp does not
        divide the layers, spread them ends-lighter (``stages.spread_layers``) instead of refusing.
        ``grad_dtype`` (``"fp32"`` or ``"bf16"``; None: the ledger's own) sets the gradients' dtype where the engine
        lets it be chosen (``Accounting.with_grad_dtype``: Megatron-LM's ``--grad-reduce-in-bf16``).
        """
        spec = load_model(model)
        dims = ParallelDims.from_gpus(gpus, tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, expert_tp=expert_tp, order=order)
        if global_batch is None:
            workload = Workload(seq, micro_batch_size, 8 if micro_batches is None else micro_batches)
        else:
            workload = Workload.for_global_batch(global_batch, dims.dp, seq, micro_batch_size)
            m = workload.micro_batches
            if micro_batches is not None and micro_batches != m:
                raise PlanError(
                    f"micro_batches={micro_batches} disagrees with global batch {global_batch} = "
                    f"dp × b × m = {dims.dp} × {micro_batch_size} × m, which needs m = {m}",
                    "micro_batches",
                )
        hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
        hw = hw.with_overrides(gpu_memory_bytes, gpus_per_node, gpus_per_host)
        acc = get_accounting(accounting)
        if bytes_per_param is not None:
            acc = acc.with_bytes_per_param(bytes_per_param)
        if grad_dtype is not None:
            acc = acc.with_grad_dtype(grad_dtype)
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
            precision=precision,
            attention_backend=attention_backend,
            dropout=dropout,
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
            "precision": self.precision,
            "attention_backend": self.attention_backend,
            "dropout": self.dropout,
        }

    def replace(self, **changes: Any) -> Plan:
        """This plan with some settings changed, by ``Plan.create``'s names (a new size of tp, cp or pp keeps dp
        unless ``gpus`` or ``dp`` changes too: give them)."""
        kw = self.settings()
        if "gpus" in changes and "dp" not in changes:
            kw["dp"] = None
        for k in ("gpus_per_node", "gpus_per_host", "gpu_memory_bytes"):
            if k in changes:
                kw["hardware"] = kw["hardware"].with_overrides(**{k: changes.pop(k)})
        if "bytes_per_param" in changes:
            kw["accounting"] = self.accounting.with_bytes_per_param(changes.pop("bytes_per_param"))
        unknown = set(changes) - set(kw) - {"global_batch", "uneven_stages", "grad_dtype"}
        if unknown:
            raise PlanError(f"unknown plan setting(s): {', '.join(sorted(unknown))}", sorted(unknown)[0])
        if "global_batch" in changes and "micro_batches" not in changes:
            kw["micro_batches"] = None
        kw.update(changes)
        if kw["dp"] is not None and {"tp", "cp", "pp"} & set(changes) and "dp" not in changes:
            kw["gpus"] = kw["dp"] * kw["tp"] * kw["cp"] * kw["pp"]
        return Plan.create(**kw)

    def __post_init__(self) -> None:
        """What the plan adds to its parts, each validated when it was built: its own choices, then how the parts
        combine. The first rule that fails raises PlanError naming its factor."""
        m, d = self.model, self.dims
        if not isinstance(m, ModelSpec):
            raise PlanError(f"model={m!r} must be a ModelSpec (use Plan.create with a name or path)", "model")
        for name, part, kind in (
            ("dims", d, ParallelDims),
            ("workload", self.workload, Workload),
            ("hardware", self.hardware, Hardware),
            ("accounting", self.accounting, Accounting),
        ):
            if not isinstance(part, kind):
                raise PlanError(f"{name}={part!r} must be a {kind.__name__}", name)
        # its own choices
        check_count("virtual_stages", self.virtual_stages, MAX_VIRTUAL_STAGES, PlanError)
        check_zero(self.zero, PlanError)
        why = recompute_refusal(m, self.accounting, self.recompute)
        if why:
            raise PlanError(why, "recompute")
        if self.stage_balance not in ("even", "max"):
            raise PlanError(f"stage_balance={self.stage_balance!r} must be 'even' or 'max'", "stage_balance")
        if self.sp is not None and not isinstance(self.sp, bool):
            raise PlanError(f"sp={self.sp!r} must be True, False or None", "sp")
        why = precision_refusal(self.hardware, self.accounting, self.precision)
        if why:
            raise PlanError(why, "precision")
        check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS, PlanError)
        if self.accounting.grad_reduce_bf16 and self.zero >= 2:
            raise LedgerError(
                f"grad_dtype='bf16' with zero={self.zero}: Megatron-FSDP (ZeRO-2/3) keeps its main gradients in the "
                "dtype of --megatron-fsdp-main-grads-dtype and does not read --grad-reduce-in-bf16, which applies to "
                "the DDP grad buffer (ZeRO 0 and 1)",
                "grad_dtype",
            )
        p = self.dropout
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
            raise PlanError(f"dropout={p!r} must be a probability from 0 up to (not including) 1", "dropout")
        if self.accounting.name != "megatron":
            for name, value, default in (("attention_backend", self.attention_backend, "flash"), ("dropout", p, 0)):
                if value != default:
                    raise LedgerError(
                        f"{name}={value!r}: the {self.accounting.name} ledger prices {name} {default!r} only (the "
                        "unfused attention and dropout masks are priced in the megatron ledger)",
                        name,
                    )
        # how the parts combine
        check_nodes(d.world_size, self.hardware.gpus_per_node, partial=True)  # a partly filled last node: a note
        self.accounting.check(self.zero, d.pp)
        if d.pp > 1 and m.tie_word_embeddings and self.accounting.tied_pp_refused:
            raise LedgerError(
                f"pp={d.pp}: {m.name} ties its head to the embedding; {self.accounting.tied_pp_refused}", "pp"
            )
        _check_tp_heads(m, d.tp, self.kv_replication and (self.accounting.kv_replication or self.accounting.kv_gather))
        if self.accounting.linear_attention_cp and d.cp > 1:  # Megatron-Core splits Gated DeltaNet heads over TP × CP
            for heads, what in (
                (m.linear_num_key_heads, "linear-attention key heads"),
                (m.linear_num_value_heads, "linear-attention value heads"),
            ):
                if heads and heads % (d.tp * d.cp):
                    raise PlanError(
                        f"cp={d.cp}: tp × cp = {d.tp} × {d.cp} does not divide {heads} {what}, which the "
                        f"{self.accounting.name} ledger's engine splits over TP × CP (Megatron-Core's "
                        "transformer_config.py L1371-L1382 at core_v0.19.0)",
                        "cp",
                    )
        if self.layers_per_stage is not None:
            self._check_layers_per_stage()
        elif m.num_layers % (d.pp * self.virtual_stages):
            if self.virtual_stages > 1:
                raise PlanError(
                    f"pp×virtual_stages = {d.pp}×{self.virtual_stages} does not divide {m.num_layers} layers",
                    "virtual_stages",
                )
            raise PlanError(
                f"pp={d.pp} does not divide {m.num_layers} layers (uneven stages give the first and last stages "
                "fewer: uneven_stages=True, or --uneven-stages on the command line)",
                "pp",
            )
        if self.virtual_stages > 1:
            if d.pp == 1:
                raise PlanError(f"virtual_stages={self.virtual_stages} needs pp > 1", "virtual_stages")
            if self.workload.micro_batches < d.pp:
                raise PlanError(
                    f"micro_batches={self.workload.micro_batches} is fewer than pp={d.pp} stages, which the "
                    "interleaved schedule needs",
                    "micro_batches",
                )
        if self.workload.seq % d.cp:
            raise PlanError(f"cp={d.cp} does not divide seq={self.workload.seq}", "cp")
        if self.attention_backend == "unfused" and d.cp > 1:
            raise LedgerError(
                f"cp={d.cp} with attention_backend='unfused': Megatron-Core runs context parallelism only in "
                "Transformer Engine's attention (megatron/core/transformer/dot_product_attention.py#L57-L59 at "
                "core_v0.19.0: 'Context parallelism is only supported by TEDotProductAttention!')",
                "cp",
            )
        if self.sequence_parallel and d.tp > 1 and (self.workload.seq // d.cp) % d.tp:
            raise PlanError(
                f"tp={d.tp} does not divide the {self.workload.seq // d.cp:,} tokens of a CP rank's sequence: "
                "sequence parallelism splits them over the TP ranks (Megatron-LM asserts it; sp=False, or --no-sp on "
                "the command line, turns it off)",
                "tp",
            )
        if d.ep > 1 and not m.is_moe:
            raise PlanError(f"ep={d.ep} but {m.name} has no experts", "ep")
        if d.expert_tp is not None and d.expert_tp != d.tp and not m.is_moe:
            raise PlanError(f"expert_tp={d.expert_tp} but {m.name} has no experts", "expert_tp")
        if m.is_moe and m.num_experts % d.ep:
            raise PlanError(f"ep={d.ep} does not divide {m.num_experts} experts", "ep")

    def _check_layers_per_stage(self) -> None:
        lps = self.layers_per_stage
        if isinstance(lps, (str, bytes)) or not isinstance(lps, tuple):
            raise PlanError(
                f"layers_per_stage={lps!r} must be a sequence of layer counts, one per pipeline rank",
                "layers_per_stage",
            )
        for n in lps:
            check_count("layers_per_stage entry", n, error=PlanError)
        if len(lps) != self.dims.pp:
            raise PlanError(f"layers_per_stage has {len(lps)} entries but pp={self.dims.pp}", "layers_per_stage")
        if add_up(lps) != self.model.num_layers:
            raise PlanError(
                f"layers_per_stage adds up to {add_up(lps)}, not {self.model.num_layers} layers", "layers_per_stage"
            )
        if min(lps) < self.virtual_stages:
            raise PlanError(
                f"virtual_stages={self.virtual_stages} needs at least {self.virtual_stages} layers on "
                f"every pipeline rank (layers_per_stage has {min(lps)})",
                "virtual_stages",
            )

    # ------------------------------------------------------------------ reading the parts
    # The sizes, the workload and the machine, read through the part that holds each (``plan.tp`` is
    # ``plan.dims.tp``): ``Plan.create``'s flat names.
    @property
    def gpus(self) -> int:
        """GPUs in the plan: tp × cp × pp × dp."""
        return self.dims.world_size

    @property
    def tp(self) -> int:
        """Tensor-parallel size."""
        return self.dims.tp

    @property
    def cp(self) -> int:
        """Context-parallel size."""
        return self.dims.cp

    @property
    def pp(self) -> int:
        """Pipeline-parallel size (stages)."""
        return self.dims.pp

    @property
    def dp(self) -> int:
        """Data-parallel size (replicas)."""
        return self.dims.dp

    @property
    def ep(self) -> int:
        """Expert-parallel size (folded inside dp × cp, or tp × cp × dp with a smaller expert TP)."""
        return self.dims.ep

    @property
    def expert_tp(self) -> int | None:
        """The expert tensor-parallel size as given: None means tp (``etp``)."""
        return self.dims.expert_tp

    @property
    def etp(self) -> int:
        """The expert tensor-parallel size (tp unless expert_tp says otherwise)."""
        return self.dims.etp

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same expert shard."""
        return self.dims.expert_dp

    @property
    def order(self) -> str:
        """The mesh's axis order, inner to outer."""
        return self.dims.order

    @property
    def grad_dtype(self) -> str:
        """The gradients' dtype at ZeRO 0 and 1, ``"fp32"`` or ``"bf16"`` (``Accounting.grad_dtype``)."""
        return self.accounting.grad_dtype

    @property
    def seq(self) -> int:
        """Tokens per sequence."""
        return self.workload.seq

    @property
    def micro_batch_size(self) -> int:
        """Sequences per micro-batch (b)."""
        return self.workload.micro_batch_size

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step on each data-parallel replica (m)."""
        return self.workload.micro_batches

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node of the machine: its NVLink domain."""
        return self.hardware.gpus_per_node

    @property
    def gpus_per_host(self) -> int:
        """GPUs per host, the launchers' unit (``Hardware.host_gpus``: the NVLink domain unless the machine says)."""
        return self.hardware.host_gpus

    @property
    def gpu_memory_bytes(self) -> float:
        """Memory of one GPU, in bytes."""
        return self.hardware.gpu_memory_bytes

    @property
    def bytes_per_param(self) -> BytesPerParam:
        """The ledger's bytes per parameter of each model-state term."""
        return self.accounting.bytes_per_param

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
    def kernel_path(self) -> str:
        """The engine activation ledger's kernel path (``engine_activations.DEVICES``) for a GPU run of this plan:
        ``"cuda"``, ``"-unfused"`` for Megatron's unfused core attention, ``"+dropout"`` when dropout is on."""
        return (
            "cuda" + ("-unfused" if self.attention_backend == "unfused" else "") + ("+dropout" if self.dropout else "")
        )

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

    def with_recompute(self, recompute: str) -> Plan:
        """This plan with another recompute mode. Nothing ``Plan`` checks reads the mode but
        ``recompute_refusal``, which this checks (PlanError naming ``recompute``): the copy is what ``Plan`` would
        build, with the stage layout already derived (a search builds one plan per recompute mode)."""
        why = recompute_refusal(self.model, self.accounting, recompute)
        if why:
            raise PlanError(why, "recompute")
        other = copy.copy(self)
        object.__setattr__(other, "recompute", recompute)
        return other

    @cached_property
    def stage_groups(self) -> tuple[tuple[int, ...], ...]:
        """The stages' indices grouped by what their memory and time read (``stages.stage_groups``)."""
        return stage_groups(self.model, self.pp, self.layers_per_stage, self.stage_balance)

    @cached_property
    def mesh(self) -> Mesh:
        return Mesh.from_dims(self.dims, self.hardware.gpus_per_node)


def plan_field_names() -> tuple[str, ...]:
    """The ``Plan`` dataclass fields (its parts and choices)."""
    return tuple(f.name for f in fields(Plan))
