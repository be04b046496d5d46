"""Tensor (Megatron) parallelism with optional sequence parallelism: bytes per GPU per step.

Source: Shoeybi et al. 2019 (column-then-row split: one all-reduce forward and one backward per MLP and per
attention block); Narayanan et al. 2021 §3.2: "total communication of 8bsh((t−1)/t) per layer per device
for each microbatch" (elements). With sequence parallelism (Korthikanti 2022) each all-reduce becomes an
all-gather plus a reduce-scatter: the same bytes.

Convention (the lab page's): four collectives of s·b·h bf16 elements per layer per micro-batch (two
forward, two backward), each a ring all-reduce over t ranks. Full recompute re-runs the forward and with
it two more collectives per layer; like the lab page, the bytes ledger does not count them. Overlap is ignored
here: these collectives block the layer.

``tp_collectives`` lists them as data (``core.collectives.Collective``): the bytes ledger sums the entries it
counts (``tp_bytes_per_layer``) and the step-time model prices every entry, so the two cannot drift apart.

    >>> round(tp_bytes_per_step(4096, 1, 5120, 64, 8, 1) / 1e9, 1)
    18.8
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.core.collectives import (
    ALL_GATHER,
    REDUCE_SCATTER,
    Collective,
    all_gather_bytes,
    ledger_bytes,
    reduce_scatter_bytes,
    ring_all_reduce_bytes,
)
from meshplan.core.validation import PlanError, check_count

TP_BLOCKS_PER_LAYER = 2  # attention and the MLP: a column-parallel then a row-parallel linear each
TP_COLLECTIVES_PER_LAYER = 2 * TP_BLOCKS_PER_LAYER  # one all-reduce forward and one backward per block
ACT_BYTES = 2  # bf16 activations


def tp_collectives(
    s: int, b: int, h: int, t: int, *, recompute: str = "none", regather: bool = False, act_bytes: int = ACT_BYTES
) -> tuple[Collective, ...]:
    """The TP collectives of one decoder layer and one micro-batch on one GPU, as data: what the bytes ledger sums
    (``in_ledger``) and the step-time model prices (every entry, with what may hide it).

    Each block (attention, MLP; ``TP_BLOCKS_PER_LAYER``) runs one all-reduce of its s·b·h activations forward (out
    of the row-parallel linear) and one backward (the gradient of the column-parallel linear's input), written as
    the reduce-scatter and all-gather a ring all-reduce is, and which sequence parallelism runs apart (Korthikanti
    2022 §4.2.2): the same bytes. The backward's reduce-scatter of the column-parallel input gradients can run under
    the weight-gradient GEMM (Megatron-Core's asynchronous input-gradient reduction). ``recompute="full"`` re-runs
    the forward's (the ledger does not count them, as the lab page does not); ``regather`` adds Megatron-LM's
    sequence-parallel backward re-gather of each column-parallel input, which the input-gradient GEMM can hide
    (``megatron_sp_regather_bytes_per_layer``). Units: bytes.

        >>> [(c.kind, c.count, c.phase) for c in tp_collectives(4096, 1, 5120, 8)]  # doctest: +NORMALIZE_WHITESPACE
        [('reduce-scatter', 2, 'forward'), ('all-gather', 2, 'forward'), ('all-gather', 2, 'backward'),
         ('reduce-scatter', 2, 'backward')]
    """
    x = s * b * h * act_bytes
    k = TP_BLOCKS_PER_LAYER
    out = [
        Collective("reduce-scatter out of the row-parallel linears (forward)", REDUCE_SCATTER, t, x, k),
        Collective("all-gather into the column-parallel linears (forward)", ALL_GATHER, t, x, k),
        Collective("all-gather of the row-parallel linears' output gradients", ALL_GATHER, t, x, k, "backward"),
        Collective(
            "reduce-scatter of the column-parallel linears' input gradients",
            REDUCE_SCATTER,
            t,
            x,
            k,
            "backward",
            hidden_by="weight-gradient GEMM",
        ),
    ]
    if recompute == "full":
        out += [
            Collective("reduce-scatter (recomputed forward)", REDUCE_SCATTER, t, x, k, "recompute", in_ledger=False),
            Collective("all-gather (recomputed forward)", ALL_GATHER, t, x, k, "recompute", in_ledger=False),
        ]
    if regather:
        out.append(_sp_regather(t, x))
    return tuple(out)


def qkv_gather_collectives(
    s: int, b: int, qkv_width: int, t: int, *, recompute: str = "none", act_bytes: int = ACT_BYTES
) -> tuple[Collective, ...]:
    """The collectives Megatron-Core adds to one attention layer and one micro-batch when TP exceeds the KV heads
    (t a multiple of them): the qkv weights stay split evenly over the t ranks, so a rank's qkv output holds no whole
    head group; the forward all-gathers it over TP (``qkv_width`` = the full qkv output's channels, (a + 2·kv)·d, or
    (2a + 2·kv)·d with an output gate) and each rank slices out its KV head and query heads; the backward
    reduce-scatters its gradient (``all_gather_last_dim_from_tensor_parallel_region`` and its backward,
    megatron/core/transformer/attention.py#L1839-L1860 at core_v0.19.0; the rule, num_query_groups a divisor or
    multiple of the TP size: transformer_config.py#L1338-L1345). Nothing computes beside them, so nothing hides
    them. Full recompute re-runs the forward's gather (not in the ledger). Units: bytes.

        >>> [(c.kind, c.phase, c.size_bytes) for c in qkv_gather_collectives(4096, 1, (24 + 2 * 4) * 256, 8)]
        [('all-gather', 'forward', 67108864), ('reduce-scatter', 'backward', 67108864)]
    """
    x = s * b * qkv_width * act_bytes
    out = [
        Collective("all-gather of the qkv output (tp > KV heads)", ALL_GATHER, t, x, 1),
        Collective("reduce-scatter of the qkv output's gradient (tp > KV heads)", REDUCE_SCATTER, t, x, 1, "backward"),
    ]
    if recompute == "full":
        out.append(
            Collective(
                "all-gather of the qkv output (recomputed forward)", ALL_GATHER, t, x, 1, "recompute", in_ledger=False
            )
        )
    return tuple(out)


def _sp_regather(t: int, x: float) -> Collective:
    return Collective(
        "all-gather of the column-parallel inputs again (Megatron-LM's sequence-parallel backward)",
        ALL_GATHER,
        t,
        x,
        TP_BLOCKS_PER_LAYER,
        "backward",
        hidden_by="input-gradient GEMM",
    )


def tp_bytes_per_layer(s: int, b: int, h: int, t: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes one GPU sends per layer per micro-batch: 4 × 2(t−1)/t × s·b·h × 2 B (``tp_collectives``' ledger
    entries)."""
    return ledger_bytes(tp_collectives(s, b, h, t, act_bytes=act_bytes))


def tp_bytes_per_step(
    s: int, b: int, h: int, layers: int, t: int, micro_batches: int, act_bytes: int = ACT_BYTES
) -> float:
    """Bytes one GPU sends per step: per-layer bytes × the ``layers`` it holds × micro-batches."""
    return tp_bytes_per_layer(s, b, h, t, act_bytes) * layers * micro_batches


@dataclass(frozen=True)
class HeadSplit:
    """How attention heads spread over t tensor-parallel ranks.

    q_heads_per_gpu: query heads each GPU computes; kv_heads_per_gpu: distinct KV heads each GPU holds;
    kv_replicas: on how many GPUs each KV head is stored (1 = no replication).
    """

    t: int
    q_heads_per_gpu: int
    kv_heads_per_gpu: int
    kv_replicas: int


def kv_replicas(num_kv_heads: int, t: int, replication: bool = True) -> int:
    """On how many of ``t`` tensor-parallel ranks each KV head is stored: 1 when t divides the KV heads (each rank
    owns kv/t of them), t/kv when the lab page's replication is allowed and the KV heads divide t.

    ``replication=False`` is the engine ledgers' rule: t must divide the KV heads. Megatron-LM at 000c4ac split them
    evenly and refused anything else (``num_query_groups_per_partition = divide(num_query_groups, world_size)``,
    ``megatron/core/transformer/attention.py#L180``; ``divide`` asserts, ``megatron/core/utils.py#L468-L477``);
    Megatron-Core 0.19 (core_v0.19.0) also runs t a multiple of the KV heads (``transformer_config.py#L1338-L1345``):
    the qkv weights stay split evenly, the qkv output is all-gathered over TP in every layer and each rank slices out
    one KV head (``attention.py#L1839-L1860``), an all-gather the engine ledgers do not price yet, so they keep the
    rule. torchtitan's ``ColwiseParallel`` splits k and v's output features evenly; vLLM (inference) replicates.

        >>> kv_replicas(4, 8), kv_replicas(4, 2)
        (2, 1)
        >>> kv_replicas(4, 8, replication=False)
        Traceback (most recent call last):
        ...
        meshplan.core.validation.PlanError: tp=8 does not divide 4 KV heads
    """
    check_count("t", t)
    check_count("num_kv_heads", num_kv_heads)
    if num_kv_heads % t == 0:
        return 1
    if not replication:
        raise PlanError(f"tp={t} does not divide {num_kv_heads} KV heads", "tp")
    if t % num_kv_heads == 0:
        return t // num_kv_heads
    raise PlanError(
        f"tp={t} does not divide {num_kv_heads} KV heads (and {num_kv_heads} KV heads do not "
        f"divide tp={t} for replication)",
        "tp",
    )


def head_split(num_attention_heads: int, num_kv_heads: int, t: int) -> HeadSplit:
    """Split attention by heads over ``t`` ranks (Megatron: each rank owns whole heads, so no communication
    inside attention; the output projection is row-parallel).

    Query heads must divide by t. KV heads (``kv_replicas``): if t divides them each rank owns kv/t; if t is a
    multiple of them (t > kv), a rank cannot own a fraction of a head, so each KV head is **replicated** on t/kv
    ranks (its k/v weights and K/V activations stored and computed t/kv times; ``Plan.kv_replication``), the lab
    page's convention, which the engines refuse; otherwise the split is impossible. Source: Ainslie et al. 2023
    (GQA); Megatron-LM requires ``num_query_groups % tp == 0`` and vLLM replicates KV heads when tp > KV heads.

        >>> head_split(24, 4, 8)
        HeadSplit(t=8, q_heads_per_gpu=3, kv_heads_per_gpu=1, kv_replicas=2)
    """
    for name, x in (("t", t), ("num_attention_heads", num_attention_heads), ("num_kv_heads", num_kv_heads)):
        check_count(name, x)
    if num_attention_heads % t:
        raise PlanError(f"tp={t} does not divide {num_attention_heads} attention heads", "tp")
    replicas = kv_replicas(num_kv_heads, t)
    return HeadSplit(t, num_attention_heads // t, num_kv_heads * replicas // t, replicas)


def tp_collectives_per_layer(
    s: int, b: int, h: int, t: int, sp: bool = False, act_bytes: int = ACT_BYTES
) -> dict[str, float]:
    """Bytes one GPU sends per layer per micro-batch, by collective.

    Without SP: 2 all-reduces forward (after attention's and the MLP's row-parallel matmul) and 2 backward
    (the gradients of their column-parallel inputs). With SP (Korthikanti 2022 §4.2.2) each all-reduce is
    split into a reduce-scatter (out of the row-parallel matmul, into the sequence-sharded norm/dropout
    region) and an all-gather (back into the column-parallel matmul): (t−1)/t + (t−1)/t = 2(t−1)/t, the
    same bytes.

        >>> sum(tp_collectives_per_layer(4096, 1, 5120, 8, sp=True).values()) == tp_bytes_per_layer(4096, 1, 5120, 8)
        True
    """
    x = s * b * h * act_bytes
    if not sp:
        ar = ring_all_reduce_bytes(t, x)
        return {"all-reduce (forward)": 2 * ar, "all-reduce (backward)": 2 * ar}
    ag, rs = all_gather_bytes(t, x), reduce_scatter_bytes(t, x)
    return {
        "all-gather (forward)": 2 * ag,
        "reduce-scatter (forward)": 2 * rs,
        "all-gather (backward)": 2 * ag,
        "reduce-scatter (backward)": 2 * rs,
    }


def megatron_sp_regather_bytes_per_layer(s: int, b: int, h: int, t: int, act_bytes: int = ACT_BYTES) -> float:
    """Extra bytes Megatron-LM's sequence-parallel backward sends per layer per micro-batch.

    The forward all-gathers the sequence-sharded input of each column-parallel linear (attention's QKV and the
    MLP's first matrix) but saves only the shard, to keep activations divided by t; the backward needs the
    full input for the weight gradient and all-gathers it again, overlapped with the input-gradient matmul
    (Megatron-LM ``megatron/core/tensor_parallel/layers.py``,
    ``LinearWithGradAccumulationAndAsyncCommunication.backward``, the ``sequence_parallel and
    wgrad_compute`` branch). Two all-gathers of s·b·h per layer: (t−1)/t × s·b·h × 2 B each, a quarter more
    than the four all-reduces of ``tp_bytes_per_layer``, which follow the paper and count SP as costing
    exactly what TP costs.

        >>> megatron_sp_regather_bytes_per_layer(4096, 1, 5120, 8) / tp_bytes_per_layer(4096, 1, 5120, 8)
        0.25
    """
    return _sp_regather(t, s * b * h * act_bytes).sent_bytes
