"""Expert parallelism: experts per GPU and the all-to-all traffic of token dispatch and combine.

Source: Lepikhin et al. 2020 (GShard); DeepSeek-V3 report §3.2. Each token is routed to k experts; with
experts spread over e ranks, a token's hidden state leaves its GPU for a fraction (e−1)/e of its k
destinations under uniform routing. Convention: per MoE layer per micro-batch, one dispatch and one
combine all-to-all forward and the same two backward, each of (tokens × k × h) bf16 elements, sending
(e−1)/e of it. Ignored: DeepSeek-V3's FP8 dispatch, node-limited routing's de-duplication, load imbalance.

    >>> experts_per_gpu(256, 64)
    4
"""

from __future__ import annotations

from .collectives import all_to_all_bytes

ACT_BYTES = 2
EP_ALL_TO_ALLS_PER_LAYER = 4  # dispatch + combine, forward and backward


def experts_per_gpu(num_experts: int, ep: int) -> int:
    """Routed experts each GPU holds per MoE layer: E / e (e must divide E)."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ValueError(f"ep={ep!r} must be a positive integer")
    if num_experts % ep:
        raise ValueError(f"ep={ep} does not divide {num_experts} experts")
    return num_experts // ep


def ep_bytes_per_step(tokens: int, experts_per_token: int, h: int, ep: int, moe_layers: int, micro_batches: int,
                      act_bytes: int = ACT_BYTES) -> float:
    """Bytes one GPU sends per step: 4 × (e−1)/e × tokens·k·h × 2 B × MoE layers it holds × m.

    ``tokens`` are the tokens of one micro-batch on this GPU (s·b/c).
    """
    per_a2a = all_to_all_bytes(ep, tokens * experts_per_token * h * act_bytes)
    return EP_ALL_TO_ALLS_PER_LAYER * per_a2a * moe_layers * micro_batches
