"""Context parallelism: splitting the sequence, the causal load, and the K/V traffic.

Ring Attention (Liu et al. 2023) passes each rank's K and V chunk around the ring, c−1 hops, so every rank
sends (c−1)/c of the full-sequence K and V per full-attention layer; Llama 3's all-gather based CP moves
the same bytes. Linear-attention layers (the anchor's Gated DeltaNet) carry a fixed-size state instead and
are not counted in the lab page's ledger; Megatron-Core re-shards them from sequence to heads and back with
all-to-alls whose bytes grow with the sequence (``linear_attention_cp_collectives``, the megatron ledger's).
Convention (the lab page's): forward only (CP's backward, which sends the K/V gradients
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

from meshplan.core.collectives import ALL_TO_ALL, RING_PASS, Collective, all_gather_bytes, ledger_bytes
from meshplan.core.units import add_up
from meshplan.core.validation import check_count
from meshplan.spec.model import load_model

ACT_BYTES = 2
CP_FORWARD_PASSES = 1  # K and V go round the ring once in the forward (Ring Attention)


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


def cp_collectives(
    s: int, b: int, kv_width: float, cp: int, *, recompute: str = "none", act_bytes: int = ACT_BYTES
) -> tuple[Collective, ...]:
    """The K/V ring of one full-attention layer and one micro-batch on one GPU, as data: what the bytes ledger sums
    (``in_ledger``) and the step-time model prices (every entry).

    Ring Attention (Liu et al. 2023) passes the sequence's K and V round the c ranks of the CP group in the forward,
    each hop a 1/c chunk: (c−1)/c × K+V bytes per GPU (``ring_kv_bytes_per_layer``); the backward passes K and V
    round again with their gradients (two passes), and a recomputed attention (``recompute`` ``"selective"`` or
    ``"full"``) one more. Each pass can run under the attention of the chunk in hand. The bytes ledger counts the
    forward pass (the lab page's convention); the step-time model prices them all. Units: bytes.

        >>> [(c.phase, c.in_ledger) for c in cp_collectives(131072, 1, 2048, 8, recompute="full")]
        [('forward', True), ('backward', False), ('backward', False), ('recompute', False)]
    """
    kv = kv_bytes_per_layer(s, b, kv_width, act_bytes)
    out = [
        Collective("K and V round the ring (forward)", RING_PASS, cp, kv, CP_FORWARD_PASSES, hidden_by="attention"),
        Collective("K and V round the ring again (backward)", RING_PASS, cp, kv, 1, "backward", False, "attention"),
        Collective("their gradients round the ring (backward)", RING_PASS, cp, kv, 1, "backward", False, "attention"),
    ]
    if recompute in ("selective", "full"):
        out.append(
            Collective(
                "K and V round the ring (recomputed attention)", RING_PASS, cp, kv, 1, "recompute", False, "attention"
            )
        )
    return tuple(out)


def linear_attention_widths(
    num_key_heads: int, num_value_heads: int, key_dim: int, value_dim: int, tp: int
) -> tuple[float, float]:
    """(in, out) elements per token of a Gated DeltaNet layer on one TP rank around its recurrence: the in_proj
    output (q, k, v, the output gate z, and beta and alpha, one per value head) and the gated norm's output (one
    value vector per value head), as Megatron-Core splits them (``in_proj_split_sections``,
    ``megatron/core/ssm/gated_delta_net/gdn.py#L41-L48`` at core_v0.19.0).

        >>> linear_attention_widths(16, 48, 128, 128, 1)     # the anchor's
        (16480.0, 6144.0)
    """
    for name, x in (("num_key_heads", num_key_heads), ("num_value_heads", num_value_heads), ("tp", tp)):
        check_count(name, x)
    width = 2 * num_key_heads * key_dim + 2 * num_value_heads * value_dim + 2 * num_value_heads
    return width / tp, num_value_heads * value_dim / tp


def linear_attention_cp_collectives(
    s: int, b: int, in_width: float, out_width: float, cp: int, *, recompute: str = "none", act_bytes: int = ACT_BYTES
) -> tuple[Collective, ...]:
    """The all-to-alls of one Gated DeltaNet layer and one micro-batch on one GPU under context parallelism, as
    Megatron-Core runs them: the recurrence needs the whole sequence, so the layer re-shards from s/c tokens of
    every head to every token of 1/c of the heads (the in_proj output, ``tensor_a2a_cp2hp``) and back after its
    gated norm (``tensor_a2a_hp2cp``); the backward sends both gradients the other way, and full recomputation
    runs the forward's two again (``megatron/core/ssm/gated_delta_net/gdn.py#L134-L164``, ``common.py#L332-L363``
    at core_v0.19.0). Each rank's local buffer is (s/c)·b·width elements in bf16 and it keeps 1/c of it; the
    traffic grows with the sequence, unlike the layer's fixed-size state. The bytes ledger counts the forward two
    (as it counts the forward K/V pass); nothing hides them. Units: bytes.

        >>> [(c.phase, c.in_ledger) for c in linear_attention_cp_collectives(65536, 1, 16480, 6144, 4)]
        [('forward', True), ('forward', True), ('backward', False), ('backward', False)]
    """
    check_count("cp", cp)
    into = s // cp * b * in_width * act_bytes
    back = s // cp * b * out_width * act_bytes
    out = [
        Collective("in_proj output, sequence to heads (forward)", ALL_TO_ALL, cp, into),
        Collective("gated norm output, heads to sequence (forward)", ALL_TO_ALL, cp, back),
        Collective("its gradient, sequence to heads (backward)", ALL_TO_ALL, cp, back, 1, "backward", False),
        Collective("in_proj gradient, heads to sequence (backward)", ALL_TO_ALL, cp, into, 1, "backward", False),
    ]
    if recompute == "full":
        out += [
            Collective("in_proj output, sequence to heads (recompute)", ALL_TO_ALL, cp, into, 1, "recompute", False),
            Collective("gated norm output, heads to sequence (recompute)", ALL_TO_ALL, cp, back, 1, "recompute", False),
        ]
    return tuple(out)


def cp_kv_bytes_per_step(
    s: int, b: int, kv_width: float, cp: int, full_attention_layers: int, micro_batches: int, act_bytes: int = ACT_BYTES
) -> float:
    """Bytes one GPU sends per step for K/V: (c−1)/c × K+V bytes × full-attention layers it holds × m (the ledger
    entries of ``cp_collectives``)."""
    return ledger_bytes(cp_collectives(s, b, kv_width, cp, act_bytes=act_bytes)) * full_attention_layers * micro_batches


def causal_load(tokens: int, ranks: int, zigzag: bool = False) -> tuple[int, ...]:
    """Attention work (query-key pairs) per rank for causal attention over ``tokens`` split over ``ranks``.

    Contiguous: rank r gets tokens r·n/c+1 … (r+1)·n/c. Zig-zag: 2c chunks, rank r gets chunks r and 2c−1−r.
    """
    for name, x in (("tokens", tokens), ("ranks", ranks)):
        check_count(name, x)
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


def zigzag_chunks(ranks: int) -> tuple[tuple[int, int], ...]:
    """The two chunks (0-based, of 2c) each rank holds under the zig-zag split: (r, 2c−1−r) (Llama 3 §3.3.2).

    >>> zigzag_chunks(4)
    ((0, 7), (1, 6), (2, 5), (3, 4))
    """
    check_count("ranks", ranks)
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
    if not loads or min(loads) < 0 or add_up(loads) == 0:
        raise ValueError(f"loads={loads!r} must be non-negative with a positive sum")
    return max(loads) / (add_up(loads) / len(loads))


def ring_kv_bytes_per_layer(s: int, b: int, kv_width: float, cp: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes one rank sends for one full-attention layer in Ring Attention (forward): each of the c−1 hops
    passes a K+V chunk of s/c tokens, (c−1)/c × the whole sequence's K and V (``collectives``' all-gather).

        >>> round(ring_kv_bytes_per_layer(131072, 1, 2 * 4 * 256, 8) / 1e9, 2)
        0.47
    """
    check_count("cp", cp)
    if s % cp:
        raise ValueError(f"cp={cp} does not divide seq={s}")
    return all_gather_bytes(cp, kv_bytes_per_layer(s, b, kv_width, act_bytes))


def ulysses_max_degree(num_heads: int, num_kv_heads: int) -> int:
    """The largest Ulysses degree: it must divide the query heads and the KV heads, gcd(a, kv).

    >>> ulysses_max_degree(24, 4)
    4
    """
    check_count("num_heads", num_heads)
    check_count("num_kv_heads", num_kv_heads)
    return math.gcd(num_heads, num_kv_heads)


def ulysses_heads_per_rank(num_heads: int, num_kv_heads: int, cp: int) -> tuple[int, int]:
    """(query heads, KV heads) each rank holds after Ulysses' all-to-all; ValueError when cp does not divide
    them (KV heads are not replicated here).

        >>> ulysses_heads_per_rank(24, 4, 4)
        (6, 1)
    """
    check_count("cp", cp)
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
        check_count(name, x)
    return heads * key_dim * value_dim * b * state_bytes


def linear_attention_shape(model) -> dict[str, int]:
    """The Gated DeltaNet shape of a model (a name, path or ``ModelSpec``) with linear-attention layers, read from
    its first such layer (``ModelSpec.layers``): value heads, key head dim, value head dim.

        >>> linear_attention_shape("qwen3.8-27b")
        {'heads': 48, 'key_dim': 128, 'value_dim': 128}
    """

    spec = load_model(model)
    for layer in spec.layers:
        if layer.mixer == "linear_attention":
            return {
                "heads": layer.linear_num_value_heads,
                "key_dim": layer.linear_key_head_dim,
                "value_dim": layer.linear_value_head_dim,
            }
    raise ValueError(f"{spec.name} has no linear-attention layers")
