"""Context parallelism: splitting the sequence, the causal load, and the K/V traffic.

Ring Attention (Liu et al. 2023) passes each rank's K and V chunk around the ring, c−1 hops, so every rank
sends (c−1)/c of the full-sequence K and V per full-attention layer; Llama 3's all-gather based CP moves
the same bytes. Linear-attention layers (the anchor's Gated DeltaNet) carry a fixed-size state instead and
are not counted. Convention (the lab page's): forward only (CP's backward, which sends the K/V gradients
back, is ignored), bf16 K and V, no overlap.

Causal attention's work for token i (1-based) is i (it attends to i tokens). Splitting the sequence into c
contiguous chunks makes the last rank do most; the zig-zag split (Llama 3 §3.3.2) cuts it into 2c chunks
and gives rank i chunks i and 2c−1−i, which balances it exactly.

    >>> causal_load(16, 4)
    (10, 26, 42, 58)
    >>> causal_load(16, 4, zigzag=True)
    (34, 34, 34, 34)

Ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses) re-shards with all-to-alls so that each rank holds whole
attention heads for the whole sequence: its degree must divide the query heads and the KV heads, so the
anchor's 4 KV heads cap it at 4 (``ulysses_max_degree``). Ring Attention has no such cap but passes K and
V (``ring_kv_bytes_per_layer``); a linear-attention layer (Gated DeltaNet, Yang et al. 2024) carries only
its recurrent state, heads × d_k × d_v per sequence, whatever the sequence length
(``linear_state_bytes``).

Against the attention it feeds (``ring_overlap``): the K/V a rank passes grow as s (its (c−1)/c share of the
sequence's K and V), the attention its s/c queries compute as s²/c. The step-time model overlaps each pass with
the attention of the chunk in hand, so short sequences expose the exchange and long ones hide it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .collectives import all_gather_bytes

if TYPE_CHECKING:
    from .plan import Plan, Report
    from .steptime import Calibration, Execution

ACT_BYTES = 2


def kv_bytes_per_layer(s: int, b: int, kv_width: float, act_bytes: int = ACT_BYTES) -> float:
    """Bytes of K plus V of one full-attention layer for the whole sequence: s·b·kv_width × 2 B.

    ``kv_width`` is the K plus V elements per token (2 × KV heads × head dim).

        >>> round(kv_bytes_per_layer(131072, 1, 2 * 4 * 256) / 1e9, 1)
        0.5
    """
    return s * b * kv_width * act_bytes


def kv_width_per_gpu(kv_width: int, num_kv_heads: int, tp: int) -> float:
    """K plus V elements per token that one TP rank holds: kv_width × (KV heads per rank) ÷ KV heads, where a rank
    holds kv/t heads, or one replicated head when t > kv (``tp.head_split``).

        >>> kv_width_per_gpu(2 * 4 * 256, 4, 8)
        512.0
    """
    return kv_width * max(num_kv_heads // tp, 1) / num_kv_heads


def cp_kv_bytes_per_step(
    s: int, b: int, kv_width: float, cp: int, full_attention_layers: int, micro_batches: int, act_bytes: int = ACT_BYTES
) -> float:
    """Bytes one GPU sends per step for K/V: (c−1)/c × K+V bytes × full-attention layers it holds × m."""
    return all_gather_bytes(cp, kv_bytes_per_layer(s, b, kv_width, act_bytes)) * full_attention_layers * micro_batches


def causal_load(tokens: int, ranks: int, zigzag: bool = False) -> tuple[int, ...]:
    """Attention work (query-key pairs) per rank for causal attention over ``tokens`` split over ``ranks``.

    Contiguous: rank r gets tokens r·n/c+1 … (r+1)·n/c. Zig-zag: 2c chunks, rank r gets chunks r and 2c−1−r.
    """
    for name, x in (("tokens", tokens), ("ranks", ranks)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name}={x!r} must be a positive integer")
    chunks = 2 * ranks if zigzag else ranks
    if tokens % chunks:
        kind = "2 × ranks" if zigzag else "ranks"
        raise ValueError(f"{kind} = {chunks} does not divide tokens={tokens}")
    size = tokens // chunks

    def work(chunk: int) -> int:
        first, last = chunk * size + 1, (chunk + 1) * size
        return (first + last) * size // 2

    if zigzag:
        return tuple(work(r) + work(chunks - 1 - r) for r in range(ranks))
    return tuple(work(r) for r in range(ranks))


def _pos(name: str, x) -> None:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name}={x!r} must be a positive integer")


def zigzag_chunks(ranks: int) -> tuple[tuple[int, int], ...]:
    """The two chunks (0-based, of 2c) each rank holds under the zig-zag split: (r, 2c−1−r) (Llama 3 §3.3.2).

    >>> zigzag_chunks(4)
    ((0, 7), (1, 6), (2, 5), (3, 4))
    """
    _pos("ranks", ranks)
    return tuple((r, 2 * ranks - 1 - r) for r in range(ranks))


def token_ranges(tokens: int, ranks: int, zigzag: bool = False) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The tokens (1-based, inclusive ranges) each rank holds: one contiguous range, or two with zig-zag.

    >>> token_ranges(16, 4, zigzag=True)[0]
    ((1, 2), (15, 16))
    """
    causal_load(tokens, ranks, zigzag)  # validates the sizes
    if not zigzag:
        n = tokens // ranks
        return tuple(((r * n + 1, (r + 1) * n),) for r in range(ranks))
    n = tokens // (2 * ranks)
    return tuple(tuple((c * n + 1, (c + 1) * n) for c in pair) for pair in zigzag_chunks(ranks))


def causal_owners(tokens: int, ranks: int, zigzag: bool = False) -> tuple[tuple[int, ...], ...]:
    """Which rank computes each (query, key) pair of causal attention: row q (0-based query token), column k (key
    token), the rank holding query q where k ≤ q and −1 where the mask hides the pair. A row's rank is the one
    ``token_ranges`` gives the query; its count of non-negative entries is that query's work (``causal_load``).

        >>> causal_owners(4, 2)
        ((0, -1, -1, -1), (0, 0, -1, -1), (1, 1, 1, -1), (1, 1, 1, 1))
    """
    owner = [0] * tokens
    for r, ranges in enumerate(token_ranges(tokens, ranks, zigzag)):
        for first, last in ranges:
            owner[first - 1 : last] = [r] * (last - first + 1)
    return tuple(tuple(owner[q] if k <= q else -1 for k in range(tokens)) for q in range(tokens))


def load_imbalance(loads) -> float:
    """The busiest rank's load over the mean: 1.0 is perfectly balanced (every rank waits for the busiest).

    >>> round(load_imbalance(causal_load(16, 4)), 3)
    1.706
    """
    loads = list(loads)
    if not loads or min(loads) < 0 or sum(loads) == 0:
        raise ValueError(f"loads={loads!r} must be non-negative with a positive sum")
    return max(loads) / (sum(loads) / len(loads))


def ring_kv_bytes_per_layer(s: int, b: int, kv_width: float, cp: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes one rank sends for one full-attention layer in Ring Attention (forward): each of the c−1 hops
    passes a K+V chunk of s/c tokens, (c−1)/c × the whole sequence's K and V (``collectives``' all-gather).

        >>> round(ring_kv_bytes_per_layer(131072, 1, 2 * 4 * 256, 8) / 1e9, 2)
        0.47
    """
    _pos("cp", cp)
    if s % cp:
        raise ValueError(f"cp={cp} does not divide seq={s}")
    return all_gather_bytes(cp, kv_bytes_per_layer(s, b, kv_width, act_bytes))


def ulysses_max_degree(num_heads: int, num_kv_heads: int) -> int:
    """The largest Ulysses degree: it must divide the query heads and the KV heads, gcd(a, kv).

    >>> ulysses_max_degree(24, 4)
    4
    """
    _pos("num_heads", num_heads)
    _pos("num_kv_heads", num_kv_heads)
    return math.gcd(num_heads, num_kv_heads)


def ulysses_heads_per_rank(num_heads: int, num_kv_heads: int, cp: int) -> tuple[int, int]:
    """(query heads, KV heads) each rank holds after Ulysses' all-to-all; ValueError when cp does not divide
    them (KV heads are not replicated here).

        >>> ulysses_heads_per_rank(24, 4, 4)
        (6, 1)
    """
    _pos("cp", cp)
    if num_kv_heads % cp:
        raise ValueError(f"cp={cp} does not divide {num_kv_heads} KV heads (Ulysses splits heads over the CP ranks)")
    if num_heads % cp:
        raise ValueError(
            f"cp={cp} does not divide {num_heads} attention heads (Ulysses splits heads over the CP ranks)"
        )
    return num_heads // cp, num_kv_heads // cp


def linear_state_bytes(heads: int, key_dim: int, value_dim: int, b: int = 1, state_bytes: int = ACT_BYTES) -> float:
    """Bytes of a linear-attention layer's recurrent state for b sequences: heads × d_k × d_v × bytes,
    independent of the sequence length (bf16 by default, like the K/V above; an fp32 state doubles it).

        >>> linear_state_bytes(48, 128, 128) / 1e6
        1.572864
    """
    for name, x in (("heads", heads), ("key_dim", key_dim), ("value_dim", value_dim), ("b", b)):
        _pos(name, x)
    return heads * key_dim * value_dim * b * state_bytes


def linear_attention_shape(model) -> dict[str, int]:
    """The Gated DeltaNet shape of a model (a name, path or ``ModelSpec``) with linear-attention layers, read from
    its first such layer (``ModelSpec.layers``): value heads, key head dim, value head dim.

        >>> linear_attention_shape("qwen3.8-27b")
        {'heads': 48, 'key_dim': 128, 'value_dim': 128}
    """
    from .model import load_model

    spec = load_model(model)
    for layer in spec.layers:
        if layer.mixer == "linear_attention":
            return {
                "heads": layer.linear_num_value_heads,
                "key_dim": layer.linear_key_head_dim,
                "value_dim": layer.linear_value_head_dim,
            }
    raise ValueError(f"{spec.name} has no linear-attention layers")


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

    Transfer: ``all_gather_bytes(c, kv_bytes_per_layer(s, b, kv_width_per_gpu))`` at the CP link's bandwidth ×
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
    from .compute import attention_forward_flop
    from .steptime import calibration as fitted
    from .steptime import collective_latency_s, execution_for, flash_attention_utilisation

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
    kv_width = int(kv_width_per_gpu(model.kv_width, model.num_key_value_heads, t))
    kv = all_gather_bytes(c, kv_bytes_per_layer(s, b, kv_width))
    transfer = kv / (hw.bandwidth(link) * cal.link_efficiency) + (c - 1) * collective_latency_s("send", 2, link)
    rate = hw.peak_bf16_flop_per_s * ((flash_attention_utilisation(hw) if flash else None) or cal.matmul_efficiency)
    flop = sum(
        attention_forward_flop(model.layers[i], s, flash)
        for i in st.layers
        if model.layers[i].mixer != "linear_attention"
    )
    attention = flop * b / (t * c) / rate / st.full_attention_layers
    passes = 3 + (1 if plan.recompute in ("full", "selective") else 0)
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
