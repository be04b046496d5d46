"""What the runtime *should* do, without torch: DDP's bucket walk, ZeroRedundancyOptimizer's partition,
the stage boundaries a pipeline layout sends across, and a replay of a pipeline schedule's action order.

These are the library's predictions for the real runs of ``meshplan.realrun``; the ring costs they feed
come from ``meshplan.collectives`` and the per-dimension modules, never from here.

* ``ddp_buckets``: DDP's greedy walk (``torch.distributed._compute_bucket_assignment_by_size``): take the
  gradients in the order they are expected to become ready (the reverse of the parameters), add each to
  the open bucket, close the bucket once it holds at least the current limit, then move to the next
  limit (the first bucket's limit is 1 MiB when ``bucket_cap_mb`` is left at its default of 25 MiB).
* ``zero1_partition``: ``ZeroRedundancyOptimizer``'s sorted greedy packing: whole tensors, largest
  first, each to the rank holding the fewest elements so far (ties: the lowest rank).
* ``replay``: run each rank's list of compute actions in order, each as soon as its rank is free and its
  inputs exist (forward after the previous stage's forward; backward after the next stage's backward;
  weight-gradient after input-gradient), with unit costs F = I = W = 1 and a full backward B = 2;
  communication is free. The bubble is the idle time over the ideal (busy) time of a rank.

    >>> ddp_buckets([1024, 1 << 20, 1 << 20, 1024], cap_bytes=25 << 20, first_cap_bytes=1 << 20)
    [1049600, 1049600]
    >>> zero1_partition([10, 7, 5, 3], 2)
    [13, 12]
    >>> replay({0: [("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)],
    ...         1: [("F", 1, 0), ("F", 1, 1), ("B", 1, 0), ("B", 1, 1)]})
    0.5
"""

from __future__ import annotations

from typing import Mapping, Sequence

COSTS = {"F": 1, "I": 1, "W": 1, "B": 2}


def gpt_param_numels(spec) -> list[int]:
    """Elements of each parameter tensor of the small GPT (``realrun.model``) in registration order:
    token embedding (tied with the head), positions, then per layer norm1, q, k, v, o, norm2, fc1, fc2,
    then the final norm. ``spec`` is a gpt2-family ``ModelSpec``; the MLP width comes from its layer size.

        >>> from meshplan import load_model
        >>> sum(gpt_param_numels(load_model("small-3.7m")))
        3688704
    """
    h, L = spec.hidden_size, spec.num_layers
    ffn = (spec.layer_params[0] - 4 * h * h - 2 * h) // (2 * h)
    layer = [h, h * h, h * h, h * h, h * h, h, ffn * h, h * ffn]
    return [spec.vocab_size * h, spec.max_position_embeddings * h] + layer * L + [h]


def ddp_buckets(sizes_bytes: Sequence[int], cap_bytes: int, first_cap_bytes: int | None = None) -> list[int]:
    """Byte sizes of DDP's buckets for gradients of ``sizes_bytes`` taken in that order (pass the
    parameters reversed)."""
    if cap_bytes <= 0:
        raise ValueError(f"cap_bytes={cap_bytes!r} must be positive")
    limits = [first_cap_bytes, cap_bytes] if first_cap_bytes and first_cap_bytes < cap_bytes else [cap_bytes]
    buckets, current = [], 0
    for size in sizes_bytes:
        current += size
        if current >= limits[0]:
            buckets.append(current)
            current = 0
            if len(limits) > 1:
                limits.pop(0)
    if current:
        buckets.append(current)
    return buckets


def zero1_partition(numels: Sequence[int], n: int) -> list[int]:
    """Elements each of ``n`` ranks owns under ZeroRedundancyOptimizer's sorted greedy partition."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer")
    owned = [0] * n
    for numel in sorted(numels, reverse=True):
        owned[owned.index(min(owned))] += numel
    return owned


def crossing_boundaries(stage_to_rank: Mapping[int, int]) -> int:
    """Stage boundaries s → s+1 whose two stages sit on different ranks (each is crossed by every
    micro-batch's activation forward and its gradient backward)."""
    stages = sorted(stage_to_rank)
    return sum(stage_to_rank[a] != stage_to_rank[b] for a, b in zip(stages, stages[1:]))


def replay(order: Mapping[int, Sequence[tuple[str, int, int]]], costs: Mapping[str, int] = COSTS) -> float:
    """Bubble fraction of a schedule: (makespan − busy time of a rank) ÷ busy time.

    ``order[rank]`` lists ``(kind, stage, microbatch)`` with kind F, B (full backward), I (input
    gradient) or W (weight gradient), in the order the rank runs them. Raises ValueError if the order
    deadlocks or ranks are unequally loaded.
    """
    stages = {s for acts in order.values() for _, s, _ in acts}
    last = max(stages)
    done: dict[tuple[str, int, int], int] = {}
    clock = {r: 0 for r in order}
    pos = {r: 0 for r in order}
    busy = {r: sum(costs[k] for k, _, _ in acts) for r, acts in order.items()}
    if len(set(busy.values())) != 1:
        raise ValueError(f"ranks are unequally loaded: {busy}")

    def deps(kind, s, mb):
        if kind == "F":
            return [("F", s - 1, mb)] if s > 0 else []
        if kind in ("B", "I"):
            own = [("F", s, mb)]
            if s < last:
                nxt = ("B", s + 1, mb) if ("B", s + 1, mb) in wanted else ("I", s + 1, mb)
                own.append(nxt)
            return own
        return [("I", s, mb)]   # W

    wanted = {(k, s, mb) for acts in order.values() for k, s, mb in acts}
    remaining = sum(len(a) for a in order.values())
    while remaining:
        progressed = False
        for r, acts in order.items():
            while pos[r] < len(acts):
                act = acts[pos[r]]
                ds = deps(*act)
                if any(d not in done for d in ds):
                    break
                start = max([clock[r]] + [done[d] for d in ds])
                clock[r] = done[act] = start + costs[act[0]]
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: order[r][pos[r]] for r in order if pos[r] < len(order[r])}
            raise ValueError(f"schedule deadlocks at {stuck}")
    work = next(iter(busy.values()))
    return (max(clock.values()) - work) / work
