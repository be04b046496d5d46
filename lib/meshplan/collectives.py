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

    >>> ring_all_reduce_bytes(8, 100.0)
    175.0
"""

from __future__ import annotations


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
