"""Collective communication costs: the only module that knows ring formulas.

Convention: the bytes **one rank sends** for a collective over ``n`` ranks on a ring, for a buffer of
``size_bytes`` (the full, unsharded tensor). Latency and the alpha term are ignored; time = bytes ÷
bandwidth. Source: Patarasuk & Yuan 2009 (ring all-reduce); Rajbhandari et al. 2019, §7.1 (all-reduce
= reduce-scatter + all-gather, Ψ each).

* all-reduce: 2(n−1)/n × size (a reduce-scatter then an all-gather)
* all-gather, reduce-scatter: (n−1)/n × size
* all-to-all: (n−1)/n × size (each rank keeps 1/n of its buffer and sends the rest)
* naive gather to rank 0: rank 0 receives (n−1) × size (and must send as much back to broadcast
  the result); the lab page quotes this one-way figure.

``ring_all_reduce_schedule`` lists every transfer of the ring step by step and ``run_ring_all_reduce``
replays it on numpy arrays (the chapter-2 figure and its test).

    >>> ring_all_reduce_bytes(8, 100.0)
    175.0
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from meshplan.core.units import add_up


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"group size n={n!r} must be a positive integer")


def ring_factor(n: int) -> float:
    """The ring all-reduce factor 2(n−1)/n (tends to 2 as n grows)."""
    _check_n(n)
    return 2 * (n - 1) / n


def ring_all_reduce_bytes(n: int, size_bytes: float) -> float:
    """Bytes each rank sends in a ring all-reduce of ``size_bytes``: 2(n−1)/n × size."""
    return ring_factor(n) * size_bytes


def all_gather_bytes(n: int, size_bytes: float) -> float:
    """Bytes each rank sends in a ring all-gather whose *output* is ``size_bytes``: (n−1)/n × size."""
    _check_n(n)
    return (n - 1) / n * size_bytes


def reduce_scatter_bytes(n: int, size_bytes: float) -> float:
    """Bytes each rank sends in a ring reduce-scatter whose *input* is ``size_bytes``: (n−1)/n × size."""
    _check_n(n)
    return (n - 1) / n * size_bytes


def all_to_all_bytes(n: int, size_bytes: float) -> float:
    """Bytes each rank sends in an all-to-all of a local buffer of ``size_bytes`` spread evenly: (n−1)/n × size."""
    _check_n(n)
    return (n - 1) / n * size_bytes


def naive_gather_bytes(n: int, size_bytes: float) -> float:
    """Bytes rank 0 receives when every other rank sends it its whole buffer: (n−1) × size."""
    _check_n(n)
    return (n - 1) * size_bytes


def transfer_time_s(n_bytes: float, bytes_per_s: float) -> float:
    """Time to move ``n_bytes`` at ``bytes_per_s`` (no latency, no overlap)."""
    if bytes_per_s <= 0:
        raise ValueError(f"bandwidth {bytes_per_s!r} B/s must be positive")
    return n_bytes / bytes_per_s


# ---------------------------------------------------------------- a collective as data
ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER = "all-reduce", "reduce-scatter", "all-gather"
ALL_TO_ALL, RING_PASS = "all-to-all", "ring pass"
KINDS = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, RING_PASS)
PHASES = ("forward", "backward", "recompute")
# what can hide a collective, if the engine overlaps it: the weight-gradient GEMM (Megatron-Core's asynchronous
# input-gradient reduction), the input-gradient GEMM (its sequence-parallel re-gather), the attention of the
# chunk in hand (Ring Attention)
HIDERS = ("weight-gradient GEMM", "input-gradient GEMM", "attention")
_RING_BYTES = {
    ALL_REDUCE: ring_all_reduce_bytes,
    REDUCE_SCATTER: reduce_scatter_bytes,
    ALL_GATHER: all_gather_bytes,
    ALL_TO_ALL: all_to_all_bytes,
    RING_PASS: all_gather_bytes,  # c−1 sends of a 1/c chunk: an all-gather's bytes, hop by hop
}


@dataclass(frozen=True)
class Collective:
    """One collective a parallel dimension runs, as data: what the bytes ledger sums and the step-time model
    prices, from the same entry (``tp.tp_collectives``, ``cp.cp_collectives``, ``ep.ep_collectives``).

    Attributes:
        label: what it moves, e.g. ``"reduce-scatter after attention and MLP (forward)"``.
        kind: ``all-reduce``, ``reduce-scatter``, ``all-gather``, ``all-to-all`` or ``ring pass`` (c−1 point-to-point
            sends of a 1/c chunk round a ring, as Ring Attention passes K and V).
        ranks: the group size n.
        size_bytes: the whole tensor (an all-gather's output, a reduce-scatter's input, an all-to-all's local
            buffer, the K and V a ring passes round).
        count: how many run per unit (per layer and micro-batch for TP, CP and EP).
        phase: ``"forward"``, ``"backward"`` or ``"recompute"`` (the forward that recomputation runs again).
        in_ledger: whether the bytes ledger counts it (the lab page's convention counts TP's four collectives and
            one K/V pass per layer, not what recomputation re-runs nor the backward's K/V passes); the step-time
            model prices every entry.
        hidden_by: what may hide it when the engine overlaps it (``HIDERS``), None when nothing can.

    Bytes one rank sends: ``count`` × the ring cost of ``kind`` (``sent_bytes``).

        >>> c = Collective("all-gather (forward)", ALL_GATHER, 8, 100.0, count=2)
        >>> c.sent_bytes, c.bytes_each
        (175.0, 87.5)
    """

    label: str
    kind: str
    ranks: int
    size_bytes: float
    count: int = 1
    phase: str = "forward"
    in_ledger: bool = True
    hidden_by: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} must be one of {', '.join(KINDS)}")
        if self.phase not in PHASES:
            raise ValueError(f"phase={self.phase!r} must be one of {', '.join(PHASES)}")
        if self.hidden_by is not None and self.hidden_by not in HIDERS:
            raise ValueError(f"hidden_by={self.hidden_by!r} must be None or one of {', '.join(HIDERS)}")
        _check_n(self.ranks)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ValueError(f"count={self.count!r} must be a non-negative integer")

    @cached_property
    def bytes_each(self) -> float:
        """Bytes one rank sends in one of them (computed once: a search prices each collective many times)."""
        return _RING_BYTES[self.kind](self.ranks, self.size_bytes)

    @property
    def sent_bytes(self) -> float:
        """Bytes one rank sends in all ``count`` of them."""
        return self.count * self.bytes_each


def ledger_bytes(collectives: tuple[Collective, ...]) -> float:
    """Bytes one rank sends per unit for the entries the bytes ledger counts (``in_ledger``).

    >>> ledger_bytes((Collective("a", ALL_GATHER, 2, 8.0), Collective("b", ALL_GATHER, 2, 8.0, in_ledger=False)))
    4.0
    """
    return add_up(c.sent_bytes for c in collectives if c.in_ledger)


# ---------------------------------------------------------------- the ring, step by step
@dataclass(frozen=True)
class RingSend:
    """One transfer of a ring all-reduce: at ``step`` (0-based), ``src`` sends chunk ``chunk`` to ``dst``.

    ``phase`` is ``"reduce-scatter"`` (the receiver adds the chunk to its own) or ``"all-gather"`` (the
    receiver overwrites its copy with the finished chunk).
    """

    step: int
    phase: str
    src: int
    dst: int
    chunk: int


def ring_all_reduce_schedule(n: int) -> tuple[RingSend, ...]:
    """Who sends which chunk to whom at each of the 2(n−1) steps of a ring all-reduce over ``n`` ranks.

    The buffer is cut into n chunks; rank r always sends to rank (r + 1) mod n.

    * reduce-scatter, steps k = 0 … n−2: rank r sends chunk (r − k) mod n, the receiver adds it. After
      n−1 steps rank r holds the complete sum of chunk (r + 1) mod n.
    * all-gather, steps k = n−1 … 2n−3 (j = k − (n−1)): rank r sends chunk (r + 1 − j) mod n, the receiver
      stores it. After n−1 more steps every rank holds every summed chunk.

    Each rank sends one chunk (size/n) per step: 2(n−1) × size/n = ``ring_all_reduce_bytes``. Source:
    Patarasuk & Yuan 2009; the same schedule as NCCL's ring and Gibiansky's (Baidu) 2017 write-up.

        >>> [(s.step, s.src, s.dst, s.chunk) for s in ring_all_reduce_schedule(2)]
        [(0, 0, 1, 0), (0, 1, 0, 1), (1, 0, 1, 1), (1, 1, 0, 0)]
        >>> len(ring_all_reduce_schedule(4))  # 2(n−1) steps × n sends
        24
    """
    _check_n(n)
    sends = []
    for k in range(n - 1):
        sends += [RingSend(k, "reduce-scatter", r, (r + 1) % n, (r - k) % n) for r in range(n)]
    for j in range(n - 1):
        sends += [RingSend(n - 1 + j, "all-gather", r, (r + 1) % n, (r + 1 - j) % n) for r in range(n)]
    return tuple(sends)


def run_ring_all_reduce(buffers) -> tuple[list, list[int]]:
    """Replay ``ring_all_reduce_schedule`` on real arrays: ``buffers[r]`` is rank r's 1-D numpy array.

    Returns (the arrays each rank holds at the end, the bytes each rank sent). Every step reads the chunks
    as they were before the step (sends happen simultaneously). The arrays are split into n chunks with
    ``numpy.array_split``, so the bytes per rank equal 2(n−1)/n × the buffer's bytes exactly when n divides
    its length.

        >>> import numpy as np
        >>> out, sent = run_ring_all_reduce([np.arange(4.0), np.ones(4)])
        >>> out[0].tolist(), out[1].tolist(), sent
        ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], [32, 32])
    """
    import numpy as np

    n = len(buffers)
    _check_n(n)
    first = np.asarray(buffers[0])
    if any(np.asarray(b).shape != first.shape for b in buffers) or first.ndim != 1:
        raise ValueError("every rank needs a 1-D buffer of the same length")
    chunks = [[c.copy() for c in np.array_split(np.asarray(b), n)] for b in buffers]
    sent = [0] * n
    schedule = ring_all_reduce_schedule(n)
    for step in range(2 * (n - 1)):
        moves = [s for s in schedule if s.step == step]
        payload = {(s.src, s.chunk): chunks[s.src][s.chunk].copy() for s in moves}
        for s in moves:
            data = payload[(s.src, s.chunk)]
            sent[s.src] += data.nbytes
            if s.phase == "reduce-scatter":
                chunks[s.dst][s.chunk] = chunks[s.dst][s.chunk] + data
            else:
                chunks[s.dst][s.chunk] = data
    return [np.concatenate(c) for c in chunks], sent
