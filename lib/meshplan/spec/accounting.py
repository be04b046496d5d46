"""Bookkeeping conventions ("ledgers"): which bytes a plan's memory and traffic are counted in.

The course keeps two kinds of ledger.

* ``lab`` is the lab page's teaching convention, and every number the book prints from it stays exactly as it
  is: model states by the ZeRO paper (16 B per parameter: bf16 weights and gradients, fp32 master weights and
  Adam moments), activations by Korthikanti et al. 2022 (a GPT layer), bf16 gradients on the wire once per step
  (``zero.LAB_SYNC``), pipeline sends of the full s·b·h activation, the paper's four TP collectives per layer.
* ``megatron``, ``fsdp2`` and ``deepspeed`` are what each engine allocates and sends at the versions named in
  ``data/engines/`` (Megatron-LM: its choices re-verified at core_v0.19.0 in ``conventions.json``, the cited lines
  below still at 000c4ac, where the code they cite is unchanged but for two choices: Megatron-FSDP's main gradients,
  bf16 by default at core_v0.19.0, which the export sets to the fp32 this ledger counts, and TP beyond the KV heads,
  which core_v0.19.0 runs by all-gathering the qkv output over TP and this ledger prices (``kv_gather``; 000c4ac
  refused it);
  PyTorch 2.13.0's FSDP2 as torchtitan 6404b93 configures it; DeepSpeed v0.19.5, re-checked against the 0.19.8
  release, whose buffers the DeepSpeed export configures and ``plan.evaluation.DEEPSPEED_BUCKET_BYTES`` counts).
  Each choice that differs from the lab's names the engine's file and lines; the full evidence (quotes, notes) is
  ``data/engines/conventions.json``, read by ``source(choice)``.

How each engine maps the plan's ZeRO stage:

=========  ===============================  ==================================  ================================
stage      megatron                         fsdp2 (torchtitan)                  deepspeed
=========  ===============================  ==================================  ================================
0          DDP: fp32 grads all-reduced      replicate: fp32 all-reduce every    engine: bf16 all-reduce at the
           once per step (18 B/param)       micro-batch (16 B/param)            accumulation boundary (16 B)
1          distributed optimizer: fp32 RS   refused: FSDP2 has no ZeRO-1        ZeRO-1: bf16 all-reduce once +
           once + bf16 AG (6 + 12/d)                                            bf16 AG once (4 + 12/d)
2          Megatron-FSDP optim_grads: fp32  reshard_after_forward=False: one    ZeRO-2: bf16 all-reduce every
           RS every micro-batch (2 + 16/d)  bf16 AG + fp32 RS every micro-batch  micro-batch + AG once (2 + 14/d)
3          Megatron-FSDP optim_grads_params reshard_after_forward=True: two     ZeRO-3: two bf16 AG + bf16 RS
           two bf16 AG + fp32 RS every      bf16 AG + fp32 RS every micro-batch every micro-batch (16/d)
           micro-batch (18/d)               (16/d)
=========  ===============================  ==================================  ================================

With pipeline parallelism FSDP2 (torch.distributed.pipelining) syncs once per step per stage, keeps the
parameters unsharded from forward to backward and the fp32 gradients unsharded until the last micro-batch;
DeepSpeed refuses ZeRO-2/3 with pipeline parallelism.

    >>> LAB.name, LAB.bytes_per_param.total, LAB.sync_schedule(3, pp=1)[0].label
    ('lab', 16, 'all-gather (weights, forward)')
    >>> [c.per_micro_batch for c in get_accounting("fsdp2").sync_schedule(3, pp=1)]
    [True, True, True]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache

from meshplan.core.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    all_gather_bytes,
    reduce_scatter_bytes,
    ring_all_reduce_bytes,
)
from meshplan.core.resources import read_json
from meshplan.core.units import add_up
from meshplan.core.validation import LedgerError, PlanError
from meshplan.spec.dims import DEFAULT_ORDER, MEGATRON_ORDER


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes per parameter, as named terms (defaults: bf16 mixed-precision Adam, 16 B)."""

    weights: int = 2  # bf16 working copy of the weights
    grads: int = 2  # bf16 gradients
    master: int = 4  # fp32 master weights
    adam_m: int = 4  # fp32 Adam first moment
    adam_v: int = 4  # fp32 Adam second moment

    def __post_init__(self) -> None:
        for name, b in self.terms().items():
            if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b <= 64:
                raise ValueError(f"bytes_per_param {name}={b!r} must be an integer from 0 to 64 bytes")

    @property
    def total(self) -> int:
        return add_up(self.terms().values())

    @property
    def optimizer(self) -> int:
        return self.master + self.adam_m + self.adam_v

    def terms(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _BPP_TERMS}


_BPP_TERMS = tuple(f.name for f in fields(BytesPerParam))  # the term names, in order (``fields`` is slow per call)
DEFAULT_BPP = BytesPerParam()
MEGATRON_BPP = BytesPerParam(grads=4)
FSDP2_BPP = BytesPerParam(weights=4, grads=4, master=0)


WINDOWS = ("forward", "backward", "after")


@dataclass(frozen=True)
class SyncCollective:
    """One collective of the data-parallel synchronisation, as an engine schedules it.

    Attributes:
        label: what it moves, e.g. ``"reduce-scatter (gradients)"``.
        kind: ``"all-reduce"``, ``"reduce-scatter"`` or ``"all-gather"`` (ring costs from ``collectives``).
        wire_bytes: bytes per parameter on the wire (2 for bf16, 4 for fp32).
        per_micro_batch: True if it runs once per micro-batch (m times per step), False once per step.
        window: the compute it can run under, when the engine overlaps data-parallel traffic (``WINDOWS``):
            ``"forward"`` (a micro-batch's forward: the weight gathers before each layer), ``"backward"`` (its
            backward: gradient reductions and the backward's gathers) or ``"after"`` (after the optimizer step: the
            updated weights' gather, under the next step's first forward).
    """

    label: str
    kind: str
    wire_bytes: int = 2
    per_micro_batch: bool = False
    window: str = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.kind not in (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER):
            raise ValueError(f"kind={self.kind!r} must be all-reduce, reduce-scatter or all-gather")
        if self.wire_bytes not in (1, 2, 4) or isinstance(self.wire_bytes, bool):
            raise ValueError(f"wire_bytes={self.wire_bytes!r} must be 1, 2 or 4")
        if self.window not in WINDOWS:
            raise ValueError(f"window={self.window!r} must be one of {', '.join(WINDOWS)}")

    def bytes(self, n: int, params: float, micro_batches: int = 1) -> float:
        """Bytes one rank sends per step for ``params`` parameters over ``n`` ranks."""
        size = params * self.wire_bytes
        ring = {ALL_REDUCE: ring_all_reduce_bytes, REDUCE_SCATTER: reduce_scatter_bytes, ALL_GATHER: all_gather_bytes}[
            self.kind
        ](n, size)
        return ring * (micro_batches if self.per_micro_batch else 1)


# The lab page's (ZeRO paper's) schedule: bf16 on the wire, once per step (after gradient accumulation).
# Stage 0: one all-reduce of the gradients. Stages 1–2: a reduce-scatter of the gradients (each rank keeps the
# sum of its shard) and an all-gather of the updated weights (ZeRO §7.2.1; the all-reduce's volume). Stage 3:
# the weights are all-gathered before each layer's forward and again before its backward, and the gradients
# reduce-scattered (§7.2.2: 3Ψ, 1.5× DP).
LAB_SYNC: dict[int, tuple[SyncCollective, ...]] = {
    0: (SyncCollective("all-reduce (gradients)", ALL_REDUCE, window="backward"),),
    1: (
        SyncCollective("reduce-scatter (gradients)", REDUCE_SCATTER, window="backward"),
        SyncCollective("all-gather (updated weights)", ALL_GATHER, window="after"),
    ),
    2: (
        SyncCollective("reduce-scatter (gradients)", REDUCE_SCATTER, window="backward"),
        SyncCollective("all-gather (updated weights)", ALL_GATHER, window="after"),
    ),
    3: (
        SyncCollective("all-gather (weights, forward)", ALL_GATHER, window="forward"),
        SyncCollective("all-gather (weights, backward)", ALL_GATHER, window="backward"),
        SyncCollective("reduce-scatter (gradients)", REDUCE_SCATTER, window="backward"),
    ),
}


LEDGERS = ("lab", "megatron", "fsdp2", "deepspeed")
ENGINE_KEY = {"megatron": "megatron", "fsdp2": "fsdp2", "deepspeed": "deepspeed"}


def _c(label: str, kind: str, wire: int, per_mb: bool, window: str) -> SyncCollective:
    return SyncCollective(label, kind, wire, per_mb, window=window)


@dataclass(frozen=True)
class Accounting:
    """One bookkeeping convention.

    Attributes:
        name: ``"lab"`` or an engine's name.
        bytes_per_param: the model-state terms per parameter (``zero.BytesPerParam``); ZeRO stage s shards the
            terms ``zero.STAGE_SHARDS[s]`` over the data-parallel ranks.
        sync: ZeRO stage → the data-parallel collectives per step (``zero.SyncCollective``).
        sync_with_pp: the same when pipeline parallelism is on, where it differs (``None``: as ``sync``).
        refused: ZeRO stage → why the engine refuses it (always, or ``"pp"``-suffixed keys with pipeline
            parallelism only).
        pp_send_divided_by_tp: each TP rank sends only its 1/t share of the activation between stages instead of
            the full s·b·h: with sequence parallelism (Megatron, torchtitan), or always (DeepSpeed's
            ``pipe_partitioned``, which all-gathers it over TP on arrival): ``pp_send_divided_needs_sp``.
        tp_backward_regather: the sequence-parallel backward all-gathers each column-parallel input again
            (Megatron-LM), +2 all-gathers per layer per micro-batch (``tp.megatron_sp_regather_bytes_per_layer``).
        linear_attention_cp: context parallelism re-shards each Gated DeltaNet layer from sequence to heads and back
            with all-to-alls (Megatron-Core: ``cp.linear_attention_cp_collectives``); False: the layer's fixed-size
            state is all it needs (the lab page's convention), or the engine has no CP for these layers.
        unsharded_weight_bytes: ZeRO stage → bytes per parameter held unsharded besides the sharded states (FSDP2
            without resharding after forward keeps the bf16 weights from forward to backward).
        unsharded_with_pp_bytes: bytes per parameter held unsharded for the whole step with pipeline parallelism
            (FSDP2 under torch.distributed.pipelining: bf16 weights and fp32 gradients, 2 + 4).
        activations: ``"korthikanti"`` (the lab's GPT layer) or ``"engine"`` (``engine_activations``, per layer
            type, what autograd saves, priced for a GPU: SDPA attention, no s² scores).
        kv_replication: whether tp may exceed the KV heads (each replicated on tp/kv ranks, the lab's allowance);
            the engines split KV heads evenly over the TP ranks and refuse it.
        sharding_stage: ZeRO stage → the stage whose terms it shards (``zero.STAGE_SHARDS``), where the engine
            shards more than the ZeRO paper's stage: FSDP2 without resharding after forward (the plan's ZeRO-2) still
            shards its fp32 parameters, as at ZeRO-3, and holds the bf16 copy unsharded beside them.
        kv_gather: TP may be a multiple of the KV heads, run as Megatron-Core runs it: the qkv weights split evenly,
            the qkv output all-gathered over TP in every attention layer and its gradient reduce-scattered
            (``tp.qkv_gather_collectives``, priced), each rank holding one KV head's K and V.
        tied_pp_refused: why the engine refuses a head tied to the embedding with pipeline parallelism ("" when it
            keeps a copy of the embedding on the last stage instead, ``stages``).
        grad_reduce_bf16: the gradients are accumulated and reduced in bf16 instead of the engine's fp32
            (Megatron-LM's ``--grad-reduce-in-bf16``: ``with_grad_dtype``).
        sources: choice → where it comes from.
    """

    name: str = "lab"
    bytes_per_param: BytesPerParam = DEFAULT_BPP
    sync: Mapping[int, tuple[SyncCollective, ...]] = field(default_factory=lambda: LAB_SYNC)
    sync_with_pp: Mapping[int, tuple[SyncCollective, ...]] | None = None
    refused: Mapping[str, str] = field(default_factory=dict)
    pp_send_divided_by_tp: bool = False
    pp_send_divided_needs_sp: bool = True
    tp_backward_regather: bool = False
    linear_attention_cp: bool = False
    unsharded_weight_bytes: Mapping[int, int] = field(default_factory=dict)
    unsharded_with_pp_bytes: int = 0
    activations: str = "korthikanti"
    kv_replication: bool = True
    sharding_stage: Mapping[int, int] = field(default_factory=dict)
    kv_gather: bool = False
    tied_pp_refused: str = ""
    grad_reduce_bf16: bool = False
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.bytes_per_param, BytesPerParam):
            raise ValueError(f"bytes_per_param={self.bytes_per_param!r} must be a BytesPerParam")
        if sorted(self.sync) != [0, 1, 2, 3]:
            raise ValueError(f"accounting {self.name!r}: sync must give the collectives of ZeRO stages 0-3")
        if self.activations not in ("korthikanti", "engine"):
            raise ValueError(f"activations={self.activations!r} must be 'korthikanti' or 'engine'")

    @property
    def grad_wire_bytes(self) -> int:
        """Bytes per gradient element of the gradient reduction at ZeRO stage 0 (2 bf16, 4 fp32)."""
        return self.sync[0][0].wire_bytes

    @property
    def stage_balance(self) -> str:
        """Where the engine puts what lies outside the decoder layers (``Plan.stage_balance``): ``"max"`` for the
        engines, the embedding on the first pipeline stage and the output head (and an MTP module) on the last, as
        Megatron-LM, torchtitan's pipeline split and DeepSpeed's ``PipelineModule`` place them; ``"even"`` for the lab
        page's ledger, which spreads them over the stages."""
        return "even" if self.name == "lab" else "max"

    @property
    def order(self) -> str:
        """The rank order the ledger's engine builds its mesh in (``ParallelDims.order``, inner to outer), which
        decides which groups stay inside an NVLink domain: the lab page's Llama 3 order ``tp-cp-pp-dp`` (its
        Figure 5) for the lab ledger; for the engines ``tp-cp-ep-dp-pp``, Megatron-LM's default rank order
        (``default_order`` in ``data/engines/megatron-lm.json``; ``--use-tp-pp-dp-mapping`` switches to
        tp-cp-ep-pp-dp), torchtitan's mesh ``["pp", "dp_replicate", "dp_shard", "cp", "tp"]`` outermost first
        (``export.TORCHTITAN_ORDER``) with its EP groups cut from the inner DP × CP ranks, and DeepSpeed's
        ``PipeModelDataParallelTopology`` axes ``["pipe", "data", "model"]`` outermost first
        (``deepspeed/runtime/pipe/topology.py`` L244-L248 at v0.19.8), its expert groups runs of contiguous ranks
        (``deepspeed/utils/groups.py`` L462-L463, the default ``use_data_before_expert_parallel_=False``).
        ``search`` and the command line use it unless an order is given."""
        return DEFAULT_ORDER if self.name == "lab" else MEGATRON_ORDER

    @property
    def grad_dtype(self) -> str:
        """The gradients' dtype in memory and on the wire of the gradient reduction at ZeRO stages 0 and 1:
        ``"fp32"`` or ``"bf16"`` (read off ``bytes_per_param.grads``)."""
        return "fp32" if self.bytes_per_param.grads == 4 else "bf16"

    def with_grad_dtype(self, dtype: str) -> Accounting:
        """This convention with its gradients in ``dtype`` (``"fp32"`` or ``"bf16"``). Only Megatron-LM has the
        choice: ``--grad-reduce-in-bf16`` turns off the fp32 accumulation ``--bf16`` forces on
        (``megatron/training/arguments.py`` L1190-L1193 at core_v0.19.0, the flag at L2905-L2906), so the DDP
        grad buffer takes the parameters' dtype (``megatron/core/distributed/param_and_grad_buffer.py`` L917) and
        the gradient all-reduce or reduce-scatter sends 2 bytes an element instead of 4. NVIDIA's performance
        recipes run so (Megatron-Bridge ``scripts/performance/configs/llama/llama3_llm_pretrain.py`` L43-L44 at
        00919dc). The optimizer step then copies the gradients it updates to fp32 (``distrib_optimizer.py`` L2782:
        ``shard_model_grad.float()``; at ZeRO 0 all of them, ``optimizer.py`` L1097), priced in ``parallel.peak``:
        at ZeRO 0 that step can peak higher than with fp32 gradients. Megatron-FSDP (ZeRO-2/3) does not read
        the flag, and the other engines have no such switch: a ValueError naming ``grad_dtype``.

            >>> m = get_accounting("megatron").with_grad_dtype("bf16")
            >>> m.grad_dtype, m.bytes_per_param.grads, [c.wire_bytes for c in m.sync[1]]
            ('bf16', 2, [2, 2])
        """
        if dtype not in ("fp32", "bf16"):
            raise PlanError(f"grad_dtype={dtype!r} must be 'fp32' or 'bf16'", "grad_dtype")
        if dtype == self.grad_dtype:
            return self
        if self.name != "megatron":
            raise LedgerError(
                f"grad_dtype={dtype!r}: the {self.name} ledger keeps its gradients in {self.grad_dtype}; only "
                "Megatron-LM chooses (--grad-reduce-in-bf16, the megatron ledger)",
                "grad_dtype",
            )
        base = ACCOUNTINGS[self.name]
        if dtype == "fp32":  # back to the engine's default
            return replace(
                self, bytes_per_param=replace(self.bytes_per_param, grads=4), sync=base.sync, grad_reduce_bf16=False
            )
        sync = {
            z: tuple(_bf16_gradients(c) for c in collectives) if z < 2 else collectives
            for z, collectives in self.sync.items()
        }
        return replace(self, bytes_per_param=replace(self.bytes_per_param, grads=2), sync=sync, grad_reduce_bf16=True)

    def with_bytes_per_param(self, bpp: BytesPerParam) -> Accounting:
        """This convention with other model-state terms (e.g. ``MEGATRON_BPP``'s fp32 gradients)."""
        return replace(self, bytes_per_param=bpp)

    def check(self, zero: int, pp: int) -> None:
        """LedgerError when the engine refuses ZeRO stage ``zero`` (with ``pp`` pipeline stages)."""
        why = self.refused.get(str(zero)) or (self.refused.get(f"{zero}pp") if pp > 1 else None)
        if why:
            with_pp = f" with pp={pp}" if pp > 1 and f"{zero}pp" in self.refused else ""
            raise LedgerError(f"zero={zero}{with_pp}: {why}", "zero")

    def sync_schedule(self, zero: int, pp: int) -> tuple[SyncCollective, ...]:
        """The data-parallel collectives of ZeRO stage ``zero`` with ``pp`` pipeline stages."""
        self.check(zero, pp)
        if pp > 1 and self.sync_with_pp is not None:
            return self.sync_with_pp[zero]
        return self.sync[zero]

    def shard_stage(self, zero: int) -> int:
        """The ZeRO stage whose terms this engine shards at the plan's stage ``zero`` (``sharding_stage``)."""
        return self.sharding_stage.get(zero, zero)

    def pp_send_divided(self, sequence_parallel: bool) -> bool:
        """Whether each TP rank sends 1/t of the activation between pipeline stages."""
        return self.pp_send_divided_by_tp and (sequence_parallel or not self.pp_send_divided_needs_sp)

    def unsharded_bytes_per_param(self, zero: int, pp: int) -> int:
        """Bytes per parameter held unsharded on top of the sharded model states."""
        if pp > 1 and self.unsharded_with_pp_bytes:
            return self.unsharded_with_pp_bytes if zero > 0 else 0
        return self.unsharded_weight_bytes.get(zero, 0)

    def source(self, choice: str) -> str:
        """Where ``choice`` comes from (``sources``, else the engine's entry in data/engines/conventions.json)."""
        if choice in self.sources:
            return self.sources[choice]
        entry = conventions().get(ENGINE_KEY.get(self.name, ""), {}).get("choices", {}).get(choice)
        return entry["source"] if entry else ""


@cache
def conventions() -> dict:
    """The engines' choices with their evidence: ``data/engines/conventions.json``."""
    return read_json("engines", "conventions.json")


_MEGATRON = "NVIDIA/Megatron-LM at 000c4ac: "
_TORCH = "pytorch/pytorch v2.13.0: "
_TITAN = "pytorch/torchtitan at 6404b93: "
_DS = "deepspeedai/DeepSpeed v0.19.5: "

_KV_SOURCE = (
    _MEGATRON + "megatron/core/transformer/attention.py#L180 (num_query_groups_per_partition = "
    "divide(num_query_groups, world_size)) and megatron/core/utils.py#L468-L477 (ensure_divisibility "
    "asserts): the KV heads must divide among the TP ranks (core_v0.19.0 also runs TP a multiple of them, "
    "transformer_config.py#L1338-L1345 at 5be9626: the qkv weights stay split evenly, the qkv output is all-gathered "
    "over TP in every layer and each rank slices out one KV head, attention.py#L353-L367 and #L1839-L1860; the "
    "megatron ledger prices that path, Accounting.kv_gather)"
)

LAB = Accounting(
    "lab",
    DEFAULT_BPP,
    LAB_SYNC,
    sources={
        "bytes_per_param": "Rajbhandari et al. 2019 (ZeRO) §3.1: 2Ψ + 2Ψ + 12Ψ = 16Ψ bytes",
        "sync": "ZeRO §7.2: 2Ψ per step for stages 0–2 (all-reduce = reduce-scatter + all-gather), 3Ψ for stage 3; "
        "the lab page: bf16 gradients, once per step",
        "activations": "Korthikanti et al. 2022, Table 2: sbh(34 + 5as/h) per GPT layer",
    },
)

MEGATRON = Accounting(
    "megatron",
    MEGATRON_BPP,
    sync={
        0: (_c("all-reduce (fp32 gradients)", ALL_REDUCE, 4, False, "backward"),),
        1: (
            _c("reduce-scatter (fp32 gradients)", REDUCE_SCATTER, 4, False, "backward"),
            _c("all-gather (bf16 updated weights)", ALL_GATHER, 2, False, "after"),
        ),
        2: (
            _c("reduce-scatter (fp32 gradients, every micro-batch)", REDUCE_SCATTER, 4, True, "backward"),
            _c("all-gather (bf16 updated weights)", ALL_GATHER, 2, False, "after"),
        ),
        3: (
            _c("all-gather (bf16 weights, forward)", ALL_GATHER, 2, True, "forward"),
            _c("all-gather (bf16 weights, backward)", ALL_GATHER, 2, True, "backward"),
            _c("reduce-scatter (fp32 gradients, every micro-batch)", REDUCE_SCATTER, 4, True, "backward"),
        ),
    },
    pp_send_divided_by_tp=True,
    tp_backward_regather=True,
    linear_attention_cp=True,
    activations="engine",
    kv_replication=False,
    kv_gather=True,
    sources={
        "kv_gather": "NVIDIA/Megatron-LM at core_v0.19.0 (5be9626): megatron/core/transformer/attention.py#L1839-L1860 "
        "(all_gather_last_dim_from_tensor_parallel_region of the qkv output when num_query_groups < TP) and "
        "transformer_config.py#L1338-L1345 (num_query_groups a multiple or a divisor of the TP size)",
        "bytes_per_param": _MEGATRON + "megatron/training/theoretical_memory_usage.py#L179-L181: 18 B/param, "
        "6 + 12/d with the distributed optimizer (fp32 main grads: arguments.py#L736-L748)",
        "sync": _MEGATRON + "distributed_data_parallel.py#L168 (fp32 grad_dtype), param_and_grad_buffer.py#L396-L414 "
        "(reduce-scatter with the distributed optimizer, all-reduce without) and #L490-L507 (once per step); "
        "megatron_fsdp.py#L577-L589 (Megatron-FSDP reduces every backward) and #L726-L730 (gathers again "
        "before the backward)",
        "pp_send_divided_by_tp": _MEGATRON + "megatron/core/pipeline_parallel/schedules.py#L1939-L1945 "
        "(get_tensor_shapes: s/(cp·t) with sequence parallelism)",
        "tp_backward_regather": _MEGATRON + "megatron/core/tensor_parallel/layers.py#L508-L522",
        "linear_attention_cp": "NVIDIA/Megatron-LM at core_v0.19.0 (5be9626): "
        "megatron/core/ssm/gated_delta_net/gdn.py#L134-L164 (the in_proj output all-to-all, CP to heads) and "
        "common.py#L332-L363 (the gated norm's output all-to-all, heads to CP)",
        "kv_replication": _KV_SOURCE,
        "activations": "meshplan.parallel.engine_activations (transformers 5.23.0's saved tensors, SDPA, "
        "device='cuda'); "
        "selective recompute = core attention (transformer_config.py#L967-L980)",
    },
)

_FSDP2_PP = {
    z: (
        _c("all-gather (bf16 weights, once per step)", ALL_GATHER, 2, False, "forward"),
        _c("reduce-scatter (fp32 gradients, last micro-batch)", REDUCE_SCATTER, 4, False, "backward"),
    )
    for z in (2, 3)
}
FSDP2 = Accounting(
    "fsdp2",
    FSDP2_BPP,
    sync={
        0: (_c("all-reduce (fp32 gradients, every micro-batch)", ALL_REDUCE, 4, True, "backward"),),
        1: (),
        2: (
            _c("all-gather (bf16 weights, forward)", ALL_GATHER, 2, True, "forward"),
            _c("reduce-scatter (fp32 gradients, every micro-batch)", REDUCE_SCATTER, 4, True, "backward"),
        ),
        3: (
            _c("all-gather (bf16 weights, forward)", ALL_GATHER, 2, True, "forward"),
            _c("all-gather (bf16 weights, backward)", ALL_GATHER, 2, True, "backward"),
            _c("reduce-scatter (fp32 gradients, every micro-batch)", REDUCE_SCATTER, 4, True, "backward"),
        ),
    },
    sync_with_pp={
        0: (_c("all-reduce (fp32 gradients, every micro-batch)", ALL_REDUCE, 4, True, "backward"),),
        1: (),
        **_FSDP2_PP,
    },
    refused={
        "1": "FSDP2 has no ZeRO-1: it shards the gradients whenever it shards the optimizer states "
        "(use zero=2, reshard_after_forward=False)"
    },
    pp_send_divided_by_tp=True,
    unsharded_weight_bytes={2: 2},
    unsharded_with_pp_bytes=6,
    activations="engine",
    kv_replication=False,
    sharding_stage={2: 3},
    tied_pp_refused="torchtitan refuses a head tied to the embedding with pipeline parallelism (torchtitan 0.3.0, "
    "torchtitan/models/common/decoder.py#L139-L142: 'Weight tying is not supported with Pipeline Parallel.')",
    sources={
        "sharding_stage": _TORCH + "torch/distributed/fsdp/_fully_shard/_fully_shard.py#L114-L121 and #L180-L196: "
        "fully_shard always shards the parameters (the fp32 master) over the mesh; reshard_after_forward=False only "
        "keeps the gathered bf16 copy from forward to backward",
        "bytes_per_param": _TORCH + "torch/distributed/fsdp/_fully_shard/_fully_shard.py#L114-L121: fp32 sharded "
        "parameters (the master), fp32 sharded gradients, fp32 Adam: 4 + 4 + 8 per parameter",
        "sync": _TITAN + "torchtitan/config/job_config.py#L207-L211 (mixed_precision_reduce fp32), train.py#L494-L497 "
        "(reduce every micro-batch); " + _TORCH + "_fully_shard.py#L180-L196 (gathers in forward and, "
        "resharded, again in backward)",
        "sync_with_pp": _TORCH + "torch/distributed/pipelining/stage.py#L843-L848 (gradient sync and reshard after "
        "backward only on the last micro-batch)",
        "pp_send_divided_by_tp": _TITAN + "torchtitan/models/llama3/infra/parallelize.py#L204-L211 (TP is always "
        "sequence-parallel)",
        "unsharded_weight_bytes": _TORCH + "_fully_shard.py#L180-L196: reshard_after_forward=False keeps the bf16 "
        "parameters unsharded from forward to backward",
        "unsharded_with_pp_bytes": _TORCH + "torch/distributed/pipelining/stage.py#L843-L848",
        "refused": _TITAN + "torchtitan/config/job_config.py: data_parallel_shard_degree shards parameters, gradients "
        "and optimizer together (fully_shard)",
        "kv_replication": "torchtitan's ColwiseParallel splits wk/wv's output features evenly over the TP ranks, which "
        "must then hold whole KV heads (derived; Megatron's rule: " + _KV_SOURCE + ")",
        "activations": "the definition of the fsdp2 ledger: what autograd saves in the pinned transformers "
        "implementation, bf16, SDPA, dropout off (meshplan.parallel.engine_activations, measured by "
        "meshplan.realrun.measure)",
    },
)

DEEPSPEED = Accounting(
    "deepspeed",
    DEFAULT_BPP,
    sync={
        0: (_c("all-reduce (bf16 gradients)", ALL_REDUCE, 2, False, "backward"),),
        1: (
            _c("all-reduce (bf16 gradients)", ALL_REDUCE, 2, False, "backward"),
            _c("all-gather (bf16 updated weights)", ALL_GATHER, 2, False, "after"),
        ),
        2: (
            _c("all-reduce (bf16 gradients, every micro-batch)", ALL_REDUCE, 2, True, "backward"),
            _c("all-gather (bf16 updated weights)", ALL_GATHER, 2, False, "after"),
        ),
        3: (
            _c("all-gather (bf16 weights, forward)", ALL_GATHER, 2, True, "forward"),
            _c("all-gather (bf16 weights, backward)", ALL_GATHER, 2, True, "backward"),
            _c("reduce-scatter (bf16 gradients, every micro-batch)", REDUCE_SCATTER, 2, True, "backward"),
        ),
    },
    refused={
        "2pp": "DeepSpeed refuses ZeRO-2 and ZeRO-3 with pipeline parallelism (deepspeed/runtime/pipe/"
        "engine.py#L76-L77: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism')",
        "3pp": "DeepSpeed refuses ZeRO-2 and ZeRO-3 with pipeline parallelism (deepspeed/runtime/pipe/"
        "engine.py#L76-L77: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism')",
    },
    pp_send_divided_by_tp=True,
    pp_send_divided_needs_sp=False,
    activations="engine",
    kv_replication=False,
    sources={
        "bytes_per_param": _DS + "deepspeed/runtime/zero/stage_1_and_2.py#L2335-L2341: 4 + 12/d, 2 + 14/d, 16/d",
        "sync": _DS + "deepspeed/runtime/engine.py#L1364-L1375 (bf16 communication_data_type), "
        "zero/stage_1_and_2.py#L1416-L1433 (bucket all-reduce), engine.py#L2857-L2865 (ZeRO-1 at the "
        "boundary, ZeRO-2/3 every micro-batch), zero/parameter_offload.py#L352-L354 (ZeRO-3 gathers)",
        "refused": _DS + "deepspeed/runtime/pipe/engine.py#L76-L77",
        "pp_send_divided_by_tp": _DS + "deepspeed/runtime/pipe/engine.py#L754-L771 (pipe_partitioned)",
        "kv_replication": "the model's own TP (e.g. Megatron-DeepSpeed): " + _KV_SOURCE,
        "activations": "the model's autograd (deepspeed/runtime/config.py#L419-L426: no activation policy of its "
        "own): meshplan.parallel.engine_activations",
    },
)

ACCOUNTINGS: dict[str, Accounting] = {a.name: a for a in (LAB, MEGATRON, FSDP2, DEEPSPEED)}


def _bf16_gradients(c: SyncCollective) -> SyncCollective:
    """A gradient collective of Megatron-LM's DDP with ``--grad-reduce-in-bf16``: 2 bytes an element."""
    if "fp32 gradients" not in c.label:
        return c
    return replace(c, label=c.label.replace("fp32 gradients", "bf16 gradients"), wire_bytes=2)


def get_accounting(name: str | Accounting) -> Accounting:
    """An ``Accounting`` by name (ValueError listing the known ones)."""
    if isinstance(name, Accounting):
        return name
    if name not in ACCOUNTINGS:
        raise ValueError(f"accounting={name!r} must be one of {', '.join(ACCOUNTINGS)}")
    return ACCOUNTINGS[name]
