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
"""

from __future__ import annotations

from .collectives import all_gather_bytes

ACT_BYTES = 2


def kv_bytes_per_layer(s: int, b: int, kv_width: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes of K plus V of one full-attention layer for the whole sequence: s·b·kv_width × 2 B.

    ``kv_width`` is the K plus V elements per token (2 × KV heads × head dim).

        >>> round(kv_bytes_per_layer(131072, 1, 2 * 4 * 256) / 1e9, 1)
        0.5
    """
    return s * b * kv_width * act_bytes


def cp_kv_bytes_per_step(s: int, b: int, kv_width: int, cp: int, full_attention_layers: int, micro_batches: int,
                         act_bytes: int = ACT_BYTES) -> float:
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
