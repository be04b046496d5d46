"""Tensor (Megatron) parallelism with optional sequence parallelism: bytes per GPU per step.

Source: Shoeybi et al. 2019 (column-then-row split: one all-reduce forward and one backward per MLP and per
attention block); Narayanan et al. 2021 §3.2: "total communication of 8bsh((t−1)/t) per layer per device
for each microbatch" (elements). With sequence parallelism (Korthikanti 2022) each all-reduce becomes an
all-gather plus a reduce-scatter: the same bytes.

Convention (the lab page's): four collectives of s·b·h bf16 elements per layer per micro-batch (two
forward, two backward), each a ring all-reduce over t ranks. Full recompute re-runs the forward and with
it two more collectives per layer; like the lab page, this module does not count them. Overlap is ignored:
these collectives block the layer.

    >>> round(tp_bytes_per_step(4096, 1, 5120, 64, 8, 1) / 1e9, 1)
    18.8
"""

from __future__ import annotations

from .collectives import ring_all_reduce_bytes

TP_COLLECTIVES_PER_LAYER = 4
ACT_BYTES = 2  # bf16 activations


def tp_bytes_per_layer(s: int, b: int, h: int, t: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes one GPU sends per layer per micro-batch: 4 × 2(t−1)/t × s·b·h × 2 B."""
    return TP_COLLECTIVES_PER_LAYER * ring_all_reduce_bytes(t, s * b * h * act_bytes)


def tp_bytes_per_step(s: int, b: int, h: int, layers: int, t: int, micro_batches: int, act_bytes: int = ACT_BYTES) -> float:
    """Bytes one GPU sends per step: per-layer bytes × the ``layers`` it holds × micro-batches."""
    return tp_bytes_per_layer(s, b, h, t, act_bytes) * layers * micro_batches
