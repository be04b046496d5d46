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
By default ``meshplan.spec.mesh`` folds EP inside DP × CP, keeping each expert split over TP like the dense
layers (expert-TP = TP); with a smaller expert-TP (``Mesh(..., etp=1)``, ``Plan(..., expert_tp=1)``,
Megatron-Core's MoE parallel folding) an EP group spans the attention's TP ranks too, folding over
TP × CP × DP.

A hot expert (``skewed_routing``): routing is sampled from a Zipf law over the experts (seeded), tokens
are counted per GPU, and the layer waits for the busiest GPU. Two remedies act on the router:

* a capacity factor (``expert_capacity``, ``capacity_drops``): each expert takes at most
  ⌈tokens·k/E × factor⌉ tokens and drops the rest (GShard, Switch Transformer; Megatron-Core's
  ``--moe-expert-capacity-factor``); DeepSeek-V3 drops none (§2.1.2);
* DeepSeek-V3's auxiliary-loss-free balancing (``bias_balancing``): a per-expert bias, added to the routing
  scores for the top-k choice only, lowered by γ after each step for an overloaded expert and raised by γ for
  an underloaded one (§2.1.2; the config's ``e_score_correction_bias``, ``LayerSpec.router_bias``).

What the convention above leaves out, priced apart (``all_to_all_bytes_per_token``, ``all_to_all_balance``):
DeepSeek-V3 dispatches in FP8 and combines in bf16 (§3.3.3), and sends a token across InfiniBand at most once
per node, to at most M nodes, letting NVLink fan it out (§3.2.2). ``all_to_all_balance`` sets the step-time
model's all-to-all time of one micro-batch against its compute, with and without those choices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from meshplan.core.collectives import ALL_TO_ALL, Collective, all_to_all_bytes, ledger_bytes
from meshplan.core.units import add_up
from meshplan.core.validation import PlanError, check_count, check_non_negative, check_non_negative_int, check_positive

ACT_BYTES = 2
EP_ALL_TO_ALLS_FORWARD = 2  # dispatch and combine; the backward runs both again
EP_ALL_TO_ALLS_PER_LAYER = 2 * EP_ALL_TO_ALLS_FORWARD  # dispatch + combine, forward and backward
# DeepSeek-V3 dispatches FP8 (e4m3, 1 B) with one fp32 scale per 128 channels (§3.3.3; deepseek-ai/DeepEP
# deep_ep/buffer.py: the dispatched x is float8_e4m3fn with float scales of shape [..., hidden // 128])
FP8_BYTES = 1
FP8_SCALE_BLOCK = 128  # channels per fp32 scale
FP8_DISPATCH_BYTES = FP8_BYTES + 4 / FP8_SCALE_BLOCK
# DeepSeek-V3's balancing, from its report (arXiv:2412.19437): the bias update speed γ of auxiliary-loss-free
# balancing (§4.2: 0.001 for the first 14.3T tokens, 0 for the last 500B), the weight α of the complementary
# sequence-wise balance loss (§4.2: 0.0001, "just to avoid extreme imbalance within any single sequence"), and
# §2.1.2 "No Token-Dropping": no capacity limit in training or inference
DEEPSEEK_V3_BIAS_UPDATE_SPEED = 0.001
DEEPSEEK_V3_SEQUENCE_BALANCE_WEIGHT = 0.0001
DEEPSEEK_V3_DROPS_TOKENS = False


def experts_per_gpu(num_experts: int, ep: int) -> int:
    """Routed experts each GPU holds per MoE layer: E / e (e must divide E, else PlanError naming ep)."""
    check_count("ep", ep)
    if num_experts % ep:
        raise PlanError(f"ep={ep} does not divide {num_experts} experts", "ep")
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


def ep_collectives(
    tokens: float, experts_per_token: int, h: int, ep: int, *, recompute: str = "none", act_bytes: int = ACT_BYTES
) -> tuple[Collective, ...]:
    """The EP all-to-alls of one MoE layer and one micro-batch on one GPU, as data: what the bytes ledger sums
    (``in_ledger``) and the step-time model prices (every entry).

    The forward dispatches each of its ``tokens`` to its k experts and combines the results
    (``EP_ALL_TO_ALLS_FORWARD``: two all-to-alls of tokens·k·h elements), the backward runs both again for the
    gradients, and full recomputation the forward's once more (not counted by the ledger). Under uniform routing
    (e−1)/e of each buffer leaves the GPU (``all_to_all_bytes``). Units: bytes.

        >>> [(c.count, c.phase) for c in ep_collectives(4096, 8, 7168, 64)]
        [(2, 'forward'), (2, 'backward')]
    """
    x = tokens * experts_per_token * h * act_bytes
    k = EP_ALL_TO_ALLS_FORWARD
    out = [
        Collective("dispatch and combine (forward)", ALL_TO_ALL, ep, x, k),
        Collective("dispatch and combine of the gradients (backward)", ALL_TO_ALL, ep, x, k, "backward"),
    ]
    if recompute == "full":
        out.append(Collective("dispatch and combine (recomputed forward)", ALL_TO_ALL, ep, x, k, "recompute", False))
    return tuple(out)


def ep_bytes_per_step(
    tokens: float,
    experts_per_token: int,
    h: int,
    ep: int,
    moe_layers: int,
    micro_batches: int,
    act_bytes: int = ACT_BYTES,
) -> float:
    """Bytes one GPU sends per step: 4 × (e−1)/e × tokens·k·h × 2 B × MoE layers it holds × m (the ledger entries
    of ``ep_collectives``).

    ``tokens`` are the tokens of one micro-batch on this GPU: s·b/c, and ÷ t more with sequence
    parallelism, whose TP ranks each dispatch their own sequence shard.
    """
    return (
        ledger_bytes(ep_collectives(tokens, experts_per_token, h, ep, act_bytes=act_bytes)) * moe_layers * micro_batches
    )


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


def remote_copies_per_token(experts_per_token: int, nodes: int, max_nodes: int | None = None) -> int:
    """InfiniBand transfers of one token's hidden state per dispatch when it is sent once per remote node of its EP
    group, the token's own node being reached over NVLink: min(k, nodes − 1), or with node-limited routing to at
    most M nodes (DeepSeek-V3 §3.2.2) min(M, nodes − 1, k) (all M nodes remote: a worst case). ``nodes``: the nodes
    the EP group spans.

    >>> remote_copies_per_token(8, 8), remote_copies_per_token(8, 8, max_nodes=4), remote_copies_per_token(8, 1)
    (7, 4, 0)
    """
    check_count("experts_per_token", experts_per_token)
    check_count("nodes", nodes)
    if max_nodes is None:
        return min(experts_per_token, nodes - 1)
    check_count("max_nodes", max_nodes)
    return min(max_nodes, nodes - 1, experts_per_token)


def _contiguous_nodes(ep: int, gpus_per_node: int) -> int:
    """Nodes an EP group of ``ep`` consecutive GPUs spans."""
    check_count("gpus_per_node", gpus_per_node)
    if ep > gpus_per_node and ep % gpus_per_node:
        raise ValueError(f"gpus_per_node={gpus_per_node} does not divide ep={ep}")
    return max(1, ep // gpus_per_node)


def node_limited_routing(
    num_experts: int,
    experts_per_token: int,
    ep: int,
    gpus_per_node: int,
    max_nodes: int,
    nvlink_bytes_per_s: float,
    infiniband_bytes_per_s: float,
) -> NodeLimitedRouting:
    """Node-limited routing numbers (DeepSeek-V3 §3.2.2) for an EP group of ``ep`` consecutive GPUs.

    >>> r = node_limited_routing(256, 8, 64, 8, 4, 160e9, 50e9)
    >>> r.nodes, r.experts_per_node, r.max_nodes_per_token, r.ib_copies_unlimited, r.ib_copies_limited
    (8, 32, 4, 7, 4)
    >>> round(r.expert_budget, 1)
    12.8
    """
    for name, x in (
        ("experts_per_token", experts_per_token),
        ("gpus_per_node", gpus_per_node),
        ("max_nodes", max_nodes),
    ):
        check_count(name, x)
    per_gpu = experts_per_gpu(num_experts, ep)
    if infiniband_bytes_per_s <= 0 or nvlink_bytes_per_s <= 0:
        raise ValueError("link bandwidths must be positive")
    nodes = _contiguous_nodes(ep, gpus_per_node)
    ratio = nvlink_bytes_per_s / infiniband_bytes_per_s
    return NodeLimitedRouting(
        nodes=nodes,
        experts_per_node=per_gpu * min(ep, gpus_per_node),
        max_nodes_per_token=min(max_nodes, nodes, experts_per_token),
        ib_copies_unlimited=remote_copies_per_token(experts_per_token, nodes),
        ib_copies_limited=remote_copies_per_token(experts_per_token, nodes, max_nodes),
        nvlink_over_ib=ratio,
        expert_budget=max_nodes * ratio,
    )


def moe_world_size(tp: int, pp: int, ep: int, cp: int = 1, expert_tp: int | None = None) -> int:
    """The fewest GPUs for TP × PP with EP experts: PP × lcm(TP × CP, expert-TP × EP).

    Per pipeline stage the attention layers use TP × CP × DP ranks and the expert layers re-group the same
    ranks as expert-TP × EP × expert-DP, so both products must be equal; the smallest such count is the lcm.
    ``expert_tp=None`` means expert-TP = TP (``meshplan.spec.mesh``'s default: EP inside DP × CP); ``expert_tp=1``
    folds EP over TP × CP × DP (``Mesh(..., etp=1)``).

        >>> moe_world_size(2, 16, 64, expert_tp=1), moe_world_size(2, 16, 64)
        (1024, 2048)
    """
    etp = tp if expert_tp is None else expert_tp
    for name, x in (("tp", tp), ("pp", pp), ("ep", ep), ("cp", cp), ("expert_tp", etp)):
        check_count(name, x)
    return pp * math.lcm(tp * cp, etp * ep)


def plain_product(*sizes: int) -> int:
    """The product of the sizes, the reading that treats EP as one more axis (wrong for MoE).

    >>> plain_product(2, 16, 64)
    2048
    """
    for x in sizes:
        check_count("size", x)
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


def skewed_routing(
    tokens: int, num_experts: int, experts_per_token: int, ep: int, skew: float, seed: int = 0
) -> RoutingLoad:
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
        check_count(name, x)
    check_non_negative_int("seed", seed)
    per = experts_per_gpu(num_experts, ep)
    if experts_per_token > num_experts:
        raise ValueError(f"experts_per_token={experts_per_token} exceeds {num_experts} experts")
    check_non_negative("skew", skew)
    counts = np.array(_expert_counts(tokens, num_experts, experts_per_token, float(skew), seed))
    gpu = counts.reshape(ep, per).sum(axis=1)
    mean = tokens * experts_per_token / ep
    return RoutingLoad(
        tuple(int(x) for x in counts), tuple(int(x) for x in gpu), mean, float(gpu.max() / mean), int(gpu.argmax())
    )


@lru_cache(maxsize=64)
def _expert_counts(tokens: int, num_experts: int, experts_per_token: int, skew: float, seed: int) -> tuple[int, ...]:
    """Assignments per expert of ``skewed_routing`` (cached: the draw does not depend on the EP size)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    logw = -skew * np.log(np.arange(1, num_experts + 1))
    keys = logw + rng.gumbel(size=(tokens, num_experts))
    chosen = np.argpartition(-keys, experts_per_token - 1, axis=1)[:, :experts_per_token]
    return tuple(int(x) for x in np.bincount(chosen.ravel(), minlength=num_experts))


# ---------------------------------------------------------------------------------------------- capacity
def expert_capacity(tokens: int, num_experts: int, experts_per_token: int, capacity_factor: float) -> int:
    """Tokens one expert may take per micro-batch: ⌈tokens·k ÷ E × capacity factor⌉.

    Source: Switch Transformer (Fedus et al. 2022, §2.1: capacity = tokens per batch ÷ experts × capacity factor);
    Megatron-Core counts the k assignments of each token (``moe_utils.topk_softmax_with_capacity`` calls
    ``get_capacity(num_tokens * topk, num_experts, capacity_factor)``, which is ``ceil(num_tokens / num_experts *
    capacity_factor)``). Assignments beyond it are dropped: the token skips that expert (its residual passes on).

    >>> expert_capacity(4096, 256, 8, 1.0), expert_capacity(4096, 256, 8, 1.25)
    (128, 160)
    """
    for name, x in (("tokens", tokens), ("num_experts", num_experts), ("experts_per_token", experts_per_token)):
        check_count(name, x)
    if experts_per_token > num_experts:
        raise ValueError(f"experts_per_token={experts_per_token} exceeds {num_experts} experts")
    check_positive("capacity_factor", capacity_factor)
    return math.ceil(tokens * experts_per_token / num_experts * capacity_factor)


@dataclass(frozen=True)
class CapacityDrops:
    """What a capacity limit does to one MoE layer's routing.

    Attributes:
        capacity: token-expert assignments an expert may take (``expert_capacity``).
        dropped: assignments beyond the capacity, summed over the experts.
        dropped_fraction: dropped ÷ all assignments (tokens × k).
        full_experts: experts that reached the capacity and dropped something.
        padded_compute: expert compute when every expert's buffer is padded to the capacity (GShard's and Switch's
            fixed-shape dispatch), as a multiple of the balanced compute: E × capacity ÷ (tokens × k).
    """

    capacity: int
    dropped: int
    dropped_fraction: float
    full_experts: int
    padded_compute: float


def capacity_drops(load: RoutingLoad, experts_per_token: int, capacity_factor: float) -> CapacityDrops:
    """Drops when the layer of ``load`` (``skewed_routing``) caps each expert at ``expert_capacity``.

    >>> r = skewed_routing(4096, 256, 8, 64, 0.0, seed=0)
    >>> d = capacity_drops(r, 8, 1.25)
    >>> d.capacity, d.dropped, d.padded_compute
    (160, 0, 1.25)
    """
    experts = len(load.expert_tokens)
    assignments = add_up(load.expert_tokens)
    if assignments % experts_per_token:
        raise ValueError(f"experts_per_token={experts_per_token} does not divide {assignments} assignments")
    cap = expert_capacity(assignments // experts_per_token, experts, experts_per_token, capacity_factor)
    over = [n - cap for n in load.expert_tokens if n > cap]
    return CapacityDrops(cap, add_up(over), add_up(over) / assignments, len(over), experts * cap / assignments)


# ---------------------------------------------------------------------------------------------- balancing
@dataclass(frozen=True)
class BiasBalancing:
    """Auxiliary-loss-free balancing, simulated step by step (``bias_balancing``).

    Attributes:
        straggler: per step, the busiest GPU's load ÷ the mean, with the bias of that step (step 0: no bias).
        hottest_share: per step, the fraction of the step's tokens that chose the hottest expert (expert 0).
        bias: the per-expert bias after the last update.
    """

    straggler: tuple[float, ...]
    hottest_share: tuple[float, ...]
    bias: tuple[float, ...]


def bias_balancing(
    tokens: int,
    num_experts: int,
    experts_per_token: int,
    ep: int,
    skew: float,
    steps: int,
    update_speed: float,
    seed: int = 0,
) -> BiasBalancing:
    """DeepSeek-V3's auxiliary-loss-free balancing (§2.1.2) on ``skewed_routing``'s router.

    Each step routes a fresh batch of ``tokens`` tokens: token t picks the k experts with the largest
    score + bias, the score of expert i being −skew·ln(i + 1) plus a Gumbel draw (so that with no bias the choice
    is ``skewed_routing``'s Zipf law). After the step every expert's bias moves by ``update_speed``: down if it
    took more than the mean tokens·k/E, up if fewer, unchanged if exactly the mean. The bias changes which
    experts are chosen, never the gating weights (not modelled here), so no gradient and no loss term is
    involved. Assumptions: the router's preferences are fixed (a trained router's move too), compute ∝ tokens;
    ``update_speed`` is in this simulation's score units (DeepSeek-V3's γ = 0.001 acts on sigmoid affinities:
    ``DEEPSEEK_V3_BIAS_UPDATE_SPEED``). Seeded: the same arguments give the same result.

    >>> r = bias_balancing(1024, 16, 2, 4, 1.0, steps=30, update_speed=0.1, seed=0)
    >>> r.straggler[0] > 1.5 > 1.2 > r.straggler[-1]
    True
    """
    import numpy as np

    for name, x in (("tokens", tokens), ("experts_per_token", experts_per_token), ("steps", steps)):
        check_count(name, x)
    per = experts_per_gpu(num_experts, ep)
    if experts_per_token > num_experts:
        raise ValueError(f"experts_per_token={experts_per_token} exceeds {num_experts} experts")
    check_non_negative("skew", skew)
    check_non_negative("update_speed", update_speed)
    check_non_negative_int("seed", seed)
    rng = np.random.default_rng(seed)
    logw = -skew * np.log(np.arange(1, num_experts + 1))
    bias = np.zeros(num_experts)
    mean_expert = tokens * experts_per_token / num_experts
    mean_gpu = tokens * experts_per_token / ep
    stragglers, hottest = [], []
    for _ in range(steps + 1):
        # top-k of score + Gumbel noise, the noise being −ln E with E ~ Exp(1): the k smallest of ln E − score,
        # in float32 and in place (the choice is a ranking); a draw of exactly 0 (float32 underflow) is read as
        # the smallest positive float
        keys = rng.standard_exponential(size=(tokens, num_experts), dtype=np.float32)
        np.maximum(keys, np.finfo(np.float32).tiny, out=keys)
        np.log(keys, out=keys)
        keys -= (logw + bias).astype(np.float32)
        chosen = np.argpartition(keys, experts_per_token - 1, axis=1)[:, :experts_per_token]
        counts = np.bincount(chosen.ravel(), minlength=num_experts)
        stragglers.append(float(counts.reshape(ep, per).sum(axis=1).max() / mean_gpu))
        hottest.append(float(counts[0] / tokens))
        bias += update_speed * np.sign(mean_expert - counts)
    return BiasBalancing(tuple(stragglers), tuple(hottest), tuple(float(b) for b in bias))


# ---------------------------------------------------------------------------------------------- the all-to-all
def all_to_all_bytes_per_token(
    hidden_size: int,
    experts_per_token: int,
    ep: int,
    *,
    dispatch_bytes: float = ACT_BYTES,
    combine_bytes: float = ACT_BYTES,
    max_nodes: int | None = None,
    gpus_per_node: int = 8,
    nodes: int | None = None,
) -> float:
    """Bytes one token's hidden state puts on the EP group's slowest link per MoE layer, forward and backward.

    Four all-to-alls: the forward dispatch and the backward's dispatch of the output gradients to the experts (at
    ``dispatch_bytes`` an element), the forward combine and the backward's return of the input gradients (at
    ``combine_bytes``). Copies of the token: without a node limit the library's convention, each of its k experts
    reached separately, (e−1)/e of them off the GPU (``ep_bytes_per_step``); with ``max_nodes`` = M (node-limited
    routing, DeepSeek-V3 §3.2.2) at most one InfiniBand transfer per remote node, min(M, nodes − 1, k)
    (``remote_copies_per_token``), NVLink forwarding it inside the node. ``nodes`` is the number of nodes the EP
    group spans (by default that of ``ep`` consecutive GPUs, ep ÷ ``gpus_per_node``; a mesh whose EP group is
    strided spans more: ``all_to_all_balance`` reads it from the plan's mesh); a group inside one node sends every
    copy over NVLink, limit or not. DeepSeek-V3: dispatch FP8 with scales
    (``FP8_DISPATCH_BYTES``), combine bf16 in both directions (§3.3.3), M = 4.

    >>> all_to_all_bytes_per_token(7168, 8, 64) == ep_bytes_per_step(1, 8, 7168, 64, 1, 1)
    True
    >>> round(all_to_all_bytes_per_token(7168, 8, 64, dispatch_bytes=FP8_DISPATCH_BYTES, max_nodes=4) / 7168, 4)
    24.25
    """
    check_count("hidden_size", hidden_size)
    check_count("experts_per_token", experts_per_token)
    check_count("ep", ep)
    for name, x in (("dispatch_bytes", dispatch_bytes), ("combine_bytes", combine_bytes)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"{name}={x!r} must be a positive number of bytes")
    spanned = _contiguous_nodes(ep, gpus_per_node) if nodes is None else nodes
    check_count("nodes", spanned)
    if max_nodes is None or spanned == 1:  # inside one node NVLink carries every copy: no limit applies
        copies = all_to_all_bytes(ep, experts_per_token) if ep > 1 else 0.0
    else:
        copies = remote_copies_per_token(experts_per_token, spanned, max_nodes)
    return copies * hidden_size * 2 * (dispatch_bytes + combine_bytes)
