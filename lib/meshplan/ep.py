"""Expert parallelism: experts per GPU and the all-to-all traffic of token dispatch and combine.

Source: Lepikhin et al. 2020 (GShard); DeepSeek-V3 report §3.2. Each token is routed to k experts; with
experts spread over e ranks, a token's hidden state leaves its GPU for a fraction (e−1)/e of its k
destinations under uniform routing. Convention: per MoE layer per micro-batch, one dispatch and one
combine all-to-all forward and the same two backward, each of (tokens × k × h) bf16 elements, sending
(e−1)/e of it. Ignored: DeepSeek-V3's FP8 dispatch, node-limited routing's de-duplication, load imbalance.

    >>> experts_per_gpu(256, 64)
    4

Node-limited routing (DeepSeek-V3 §3.2.2): each token goes to at most M nodes (M = 4, the config's
``topk_group``); once on a node its hidden state fans out over NVLink, which is 160/50 = 3.2 times faster
than InfiniBand, so a token can reach about 3.2 experts per node for the price of one IB transfer:
4 × 3.2 = 12.8, "a maximum of 13 experts" (``node_limited_routing``).

World size with experts (``moe_world_size``): expert parallelism is not an axis of its own. Per pipeline
stage, the non-pipeline ranks (TP × CP × DP of the attention layers) are re-grouped for the expert layers
into expert-TP × EP × expert-DP, so the world is TP × CP × PP × DP whatever EP is; EP only has to fit in
(divide) those ranks. Multiplying TP × PP × EP as if EP were one more axis counts GPUs twice.
By default ``meshplan.mesh`` folds EP inside DP × CP, keeping each expert split over TP like the dense
layers (expert-TP = TP); with a smaller expert-TP (``Mesh(..., etp=1)``, ``Plan(..., expert_tp=1)``,
Megatron-Core's MoE parallel folding) an EP group spans the attention's TP ranks too, folding over
TP × CP × DP.

A hot expert (``skewed_routing``): routing is sampled from a Zipf law over the experts (seeded), tokens
are counted per GPU, and the layer waits for the busiest GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def tokens_per_gpu(seq: int, micro_batch_size: int, cp: int = 1, tp: int = 1, sequence_parallel: bool = False) -> float:
    """Tokens of one micro-batch that one GPU dispatches to the experts: s·b/c, ÷ t more with sequence
    parallelism (each TP rank then holds, and dispatches, only its sequence shard; Megatron demands sequence
    parallelism whenever MoE runs with TP, and gathers the tokens over TP after the all-to-all).

        >>> tokens_per_gpu(4096, 1, cp=1, tp=8, sequence_parallel=True)
        512.0
    """
    tokens = seq // cp * micro_batch_size
    return tokens / tp if sequence_parallel else float(tokens)


def ep_bytes_per_step(tokens: int, experts_per_token: int, h: int, ep: int, moe_layers: int, micro_batches: int,
                      act_bytes: int = ACT_BYTES) -> float:
    """Bytes one GPU sends per step: 4 × (e−1)/e × tokens·k·h × 2 B × MoE layers it holds × m.

    ``tokens`` are the tokens of one micro-batch on this GPU: s·b/c, and ÷ t more with sequence
    parallelism, whose TP ranks each dispatch their own sequence shard.
    """
    per_a2a = all_to_all_bytes(ep, tokens * experts_per_token * h * act_bytes)
    return EP_ALL_TO_ALLS_PER_LAYER * per_a2a * moe_layers * micro_batches


def _pos(name: str, x) -> None:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name}={x!r} must be a positive integer")


@dataclass(frozen=True)
class NodeLimitedRouting:
    """What node-limited routing means for one EP layout.

    Attributes:
        nodes: nodes an EP group spans (ep ÷ GPUs per node, at least 1).
        experts_per_node: routed experts on one node, per MoE layer.
        max_nodes_per_token: nodes a token may reach, min(M, nodes, k).
        ib_copies_unlimited: worst-case IB transfers of a token without the limit, min(k, nodes − 1): one
            per destination node (de-duplicated), every node of the EP group but the token's own, which
            NVLink reaches.
        ib_copies_limited: the same with the limit, min(M, nodes − 1, k) (all M nodes remote).
        nvlink_over_ib: NVLink ÷ InfiniBand bandwidth per GPU.
        expert_budget: experts a token can reach at the cost of its IB transfers, M × NVLink/IB.
    """

    nodes: int
    experts_per_node: int
    max_nodes_per_token: int
    ib_copies_unlimited: int
    ib_copies_limited: int
    nvlink_over_ib: float
    expert_budget: float


def node_limited_routing(num_experts: int, experts_per_token: int, ep: int, gpus_per_node: int, max_nodes: int,
                         nvlink_bytes_per_s: float, infiniband_bytes_per_s: float) -> NodeLimitedRouting:
    """Node-limited routing numbers (DeepSeek-V3 §3.2.2).

        >>> r = node_limited_routing(256, 8, 64, 8, 4, 160e9, 50e9)
        >>> r.nodes, r.experts_per_node, r.max_nodes_per_token, r.ib_copies_unlimited, r.ib_copies_limited
        (8, 32, 4, 7, 4)
        >>> round(r.expert_budget, 1)
        12.8
    """
    for name, x in (("experts_per_token", experts_per_token), ("gpus_per_node", gpus_per_node),
                    ("max_nodes", max_nodes)):
        _pos(name, x)
    per_gpu = experts_per_gpu(num_experts, ep)
    if infiniband_bytes_per_s <= 0 or nvlink_bytes_per_s <= 0:
        raise ValueError("link bandwidths must be positive")
    nodes = max(1, ep // gpus_per_node)
    if ep > gpus_per_node and ep % gpus_per_node:
        raise ValueError(f"gpus_per_node={gpus_per_node} does not divide ep={ep}")
    ratio = nvlink_bytes_per_s / infiniband_bytes_per_s
    return NodeLimitedRouting(
        nodes=nodes, experts_per_node=per_gpu * min(ep, gpus_per_node),
        max_nodes_per_token=min(max_nodes, nodes, experts_per_token),
        ib_copies_unlimited=min(experts_per_token, nodes - 1),
        ib_copies_limited=min(max_nodes, nodes - 1, experts_per_token), nvlink_over_ib=ratio,
        expert_budget=max_nodes * ratio,
    )


def moe_world_size(tp: int, pp: int, ep: int, cp: int = 1, expert_tp: int | None = None) -> int:
    """The fewest GPUs for TP × PP with EP experts: PP × lcm(TP × CP, expert-TP × EP).

    Per pipeline stage the attention layers use TP × CP × DP ranks and the expert layers re-group the same
    ranks as expert-TP × EP × expert-DP, so both products must be equal; the smallest such count is the lcm.
    ``expert_tp=None`` means expert-TP = TP (``meshplan.mesh``'s default: EP inside DP × CP); ``expert_tp=1``
    folds EP over TP × CP × DP (``Mesh(..., etp=1)``).

        >>> moe_world_size(2, 16, 64, expert_tp=1), moe_world_size(2, 16, 64)
        (1024, 2048)
    """
    etp = tp if expert_tp is None else expert_tp
    for name, x in (("tp", tp), ("pp", pp), ("ep", ep), ("cp", cp), ("expert_tp", etp)):
        _pos(name, x)
    return pp * math.lcm(tp * cp, etp * ep)


def plain_product(*sizes: int) -> int:
    """The product of the sizes, the reading that treats EP as one more axis (wrong for MoE).

        >>> plain_product(2, 16, 64)
        2048
    """
    for x in sizes:
        _pos("size", x)
    return math.prod(sizes)


@dataclass(frozen=True)
class RoutingLoad:
    """Tokens per GPU of one MoE layer under skewed routing.

    Attributes:
        expert_tokens: token-expert assignments per expert.
        gpu_tokens: per GPU (experts e·E/ep … on GPU e, contiguous).
        mean: the balanced load, tokens × k ÷ ep.
        straggler: busiest GPU ÷ mean; the layer's expert time is this × the balanced time.
        busiest_gpu: index of the busiest GPU.
    """

    expert_tokens: tuple[int, ...]
    gpu_tokens: tuple[int, ...]
    mean: float
    straggler: float
    busiest_gpu: int


def skewed_routing(tokens: int, num_experts: int, experts_per_token: int, ep: int, skew: float,
                   seed: int = 0) -> RoutingLoad:
    """Route ``tokens`` tokens to ``experts_per_token`` distinct experts each, expert i being chosen with
    weight (i + 1)^−skew (Zipf; skew 0 is uniform), sampled without replacement with a seeded generator
    (Gumbel top-k). Expert 0 is the hottest and sits on GPU 0. Returns the load per GPU and the straggler
    factor. Assumptions: no capacity limit, no token dropping, no auxiliary-loss balancing, compute time
    proportional to tokens.

        >>> r = skewed_routing(4096, 256, 8, 64, 0.0, seed=0)
        >>> sum(r.gpu_tokens), r.mean
        (32768, 512.0)
    """
    import numpy as np

    for name, x in (("tokens", tokens), ("experts_per_token", experts_per_token)):
        _pos(name, x)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    per = experts_per_gpu(num_experts, ep)
    if experts_per_token > num_experts:
        raise ValueError(f"experts_per_token={experts_per_token} exceeds {num_experts} experts")
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not math.isfinite(skew) or skew < 0:
        raise ValueError(f"skew={skew!r} must be a non-negative number")
    rng = np.random.default_rng(seed)
    logw = -skew * np.log(np.arange(1, num_experts + 1))
    keys = logw + rng.gumbel(size=(tokens, num_experts))
    chosen = np.argpartition(-keys, experts_per_token - 1, axis=1)[:, :experts_per_token]
    counts = np.bincount(chosen.ravel(), minlength=num_experts)
    gpu = counts.reshape(ep, per).sum(axis=1)
    mean = tokens * experts_per_token / ep
    return RoutingLoad(tuple(int(x) for x in counts), tuple(int(x) for x in gpu), mean,
                       float(gpu.max() / mean), int(gpu.argmax()))
