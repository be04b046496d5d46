"""Pipeline parallelism: the bubble and the bytes sent between stages.

Bubble (Narayanan et al. 2021 §2.2): GPipe and 1F1B idle (p−1)(t_f + t_b) per step against an ideal
m(t_f + t_b), a fraction (p−1)/m of the ideal time; the interleaved schedule with v model chunks per GPU
divides it by v: (p−1)/(m·v). As a share of the total time: (p−1)/(m·v + p − 1).

Bytes: one micro-batch crosses a stage boundary as s·b·h bf16 activations forward and the same-sized
gradient backward. Convention (the lab page's): a GPU sends 2 × s·b·h × 2 B per micro-batch (one
activation forward and one gradient backward, as a middle stage does), × v for the interleaved schedule
(each GPU holds v chunks, Narayanan §2.2.2); Megatron's scatter/gather optimisation (÷ t) is not applied.
The engines' convention (``sp_pp_bytes_per_step``): with sequence parallelism each of the t tensor-parallel
ranks holds and sends only its s/t tokens, so a GPU sends 1/t of that.

    >>> bubble_fraction(8, 32)
    0.21875
    >>> round(bubble_share_of_time(8, 32), 3)
    0.179
    >>> pp_bytes_per_step(4096, 1, 5120, 8, 32) / sp_pp_bytes_per_step(4096, 1, 5120, 8, 32, tp=8)
    8.0
"""

from __future__ import annotations

from meshplan.core.validation import check_count

ACT_BYTES = 2


def _check(p: int, m: int, v: int) -> None:
    for name, x in (("pp", p), ("micro_batches", m), ("virtual_stages", v)):
        check_count(name, x)


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Idle time over ideal compute time: (p−1)/(m·v); 0 without pipeline parallelism."""
    _check(p, m, v)
    return (p - 1) / (m * v)


def bubble_share_of_time(p: int, m: int, v: int = 1) -> float:
    """Idle time over total time: (p−1)/(m·v + p − 1)."""
    _check(p, m, v)
    return (p - 1) / (m * v + p - 1)


def boundary_bytes(s: int, b: int, h: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes of one micro-batch's activations crossing one stage boundary: s·b·h × 2 B.

    >>> boundary_bytes(4096, 1, 5120) / 1e6
    41.94304
    """
    return s * b * h * act_bytes


def pp_bytes_per_step(
    s: int, b: int, h: int, pp: int, micro_batches: int, virtual_stages: int = 1, act_bytes: int = ACT_BYTES
) -> float:
    """Bytes one GPU sends per step: 2 × v × s·b·h × 2 B × m (0 when pp = 1)."""
    _check(pp, micro_batches, virtual_stages)
    if pp == 1:
        return 0.0
    return 2 * virtual_stages * boundary_bytes(s, b, h, act_bytes) * micro_batches


def sp_pp_bytes_per_step(
    s: int,
    b: int,
    h: int,
    pp: int,
    micro_batches: int,
    tp: int,
    virtual_stages: int = 1,
    act_bytes: int = ACT_BYTES,
) -> float:
    """Bytes one GPU sends per step between stages when, with sequence parallelism, each of the ``tp`` ranks sends
    only its own s/t tokens: ``pp_bytes_per_step`` ÷ t, i.e. 2 × v × (s/t)·b·h × 2 B × m.

    Source: Megatron-LM at 000c4ac, ``megatron/core/pipeline_parallel/schedules.py#L1939-L1945``
    (``get_tensor_shapes``: ``effective_seq_length // tp_group.size()`` with ``config.sequence_parallel``);
    torchtitan's TP is always sequence-parallel and a stage sends its last block's (b, s/t, h) shard; DeepSpeed's
    ``pipe_partitioned`` sends 1/t and all-gathers it on the receiving stage (data/engines/conventions.md, §3 of
    each engine). Without sequence parallelism every TP rank sends the whole s·b·h (``pp_bytes_per_step``).

    ValueError when tp is not a positive integer or does not divide the sequence (Megatron's integer division
    would drop tokens).

        >>> round(sp_pp_bytes_per_step(4096, 1, 5120, 4, 8, tp=2) / 1e9, 3)
        0.336
    """
    check_count("tp", tp)
    if s % tp:
        raise ValueError(f"tp={tp} does not divide seq={s} (each TP rank sends s/t tokens)")
    return pp_bytes_per_step(s, b, h, pp, micro_batches, virtual_stages, act_bytes) / tp
