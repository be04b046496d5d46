"""What the runtime *should* do, without torch: the small model's tensors and FSDP units, DDP's buckets,
ZeroRedundancyOptimizer's partition, FSDP2's collectives with gradient accumulation, the stage boundaries a
pipeline layout sends across, and a replay of ``torch.distributed.pipelining``'s action order.

The predictions come from the library: DDP's bucket walk is ``meshplan.parallel.buckets.assign_buckets``, the
replay is ``meshplan.schedule.replay`` and the ring costs come from ``meshplan.core.collectives``; this module
only describes the small model in the library's terms and translates torch's names.

* ``small_grad_tensors``: the small GPT's parameters as ``meshplan.parallel.buckets.GradTensor`` s, in registration
  order (DDP walks them reversed).
* ``ddp_buckets``: ``assign_buckets`` over tensors given by their gradient bytes.
* ``zero1_partition``: ``ZeroRedundancyOptimizer``'s sorted greedy packing: whole tensors, largest first,
  each to the rank holding the fewest elements so far (ties: the lowest rank).
* ``fsdp2_resharded``: which FSDP2 units reshard after forward, for True, False and FSDP2's default (the
  collectives per step with m micro-batches are ``meshplan.parallel.zero.fsdp2_collectives_per_step``).
* ``replay``: torch's ``pipeline_order`` through the library's schedule simulation.

    >>> ddp_buckets([1024, 1 << 20, 1 << 20, 1024], cap_bytes=25 << 20, first_cap_bytes=1 << 20)
    [1049600, 1049600]
    >>> zero1_partition([10, 7, 5, 3], 2)
    [13, 12]
    >>> replay({0: [("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)],
    ...         1: [("F", 1, 0), ("F", 1, 1), ("B", 1, 0), ("B", 1, 1)]}).sync_bubble
    0.5
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from meshplan.parallel.buckets import GradTensor, assign_buckets
from meshplan.schedule import Timeline, position
from meshplan.schedule import orders as schedule_orders
from meshplan.schedule import replay as replay_order
from meshplan.spec.model import ModelSpec

# torch.distributed.pipelining's computation types (``_ComputationType``) in meshplan.schedule's names:
# F forward, I backward for inputs, W backward for weights, B full backward; OVERLAP_F_B is F&B.
TORCH_KINDS = {"F": "F", "I": "B", "W": "W", "B": "BW", "OVERLAP_F_B": "F&B"}


def gpt_param_numels(spec: ModelSpec) -> list[int]:
    """Elements of each parameter tensor of the small GPT (``realrun.model``) in registration order:
    token embedding (tied with the head), positions, then per layer norm1, q, k, v, o, norm2, fc1, fc2,
    then the final norm. ``spec`` is a gpt2-family ``ModelSpec``; the MLP width comes from its layer size.

        >>> from meshplan import load_model
        >>> sum(gpt_param_numels(load_model("small-3.7m")))
        3688704
    """
    h, L, positions = spec.hidden_size, spec.num_layers, spec.max_position_embeddings
    if positions is None:
        raise ValueError(f"{spec.name}: the small GPT needs max_position_embeddings (learned positions)")
    ffn = (spec.layer_params[0] - 4 * h * h - 2 * h) // (2 * h)
    layer = [h, h * h, h * h, h * h, h * h, h, ffn * h, h * ffn]
    return [spec.vocab_size * h, positions * h] + layer * L + [h]


def small_grad_tensors(spec: ModelSpec) -> tuple[GradTensor, ...]:
    """The small GPT's parameters in registration order, named as ``realrun.model.GPT.named_parameters``.

    >>> from meshplan import load_model
    >>> [t.name for t in small_grad_tensors(load_model("small-3.7m"))][:4]
    ['wte.weight', 'wpe.weight', 'blocks.0.norm1.weight', 'blocks.0.attn.q.weight']
    """
    layer = ("norm1", "attn.q", "attn.k", "attn.v", "attn.o", "norm2", "mlp.fc1", "mlp.fc2")
    names = ["wte", "wpe"] + [f"blocks.{i}.{n}" for i in range(spec.num_layers) for n in layer] + ["norm"]
    blocks = ["embedding"] * 2 + [f"layer {i}" for i in range(spec.num_layers) for _ in layer] + ["final norm"]
    return tuple(
        GradTensor(f"{n}.weight", blk, numel)
        for n, blk, numel in zip(names, blocks, gpt_param_numels(spec), strict=True)
    )


def ddp_buckets(sizes_bytes: Sequence[int], cap_bytes: int, first_cap_bytes: int | None = None) -> list[int]:
    """Byte sizes of DDP's buckets for gradients of ``sizes_bytes`` taken in that order (pass the
    parameters reversed): ``meshplan.parallel.buckets.assign_buckets`` with each size already in bytes (so one
    "parameter" per byte); ``first_cap_bytes`` defaults to ``cap_bytes``, as with an explicit
    ``bucket_cap_mb``."""
    tensors = [GradTensor(str(i), "gradient", size) for i, size in enumerate(sizes_bytes)]
    first = cap_bytes if first_cap_bytes is None else first_cap_bytes
    return [b.n_bytes for b in assign_buckets(tensors, cap_bytes, first, grad_bytes_per_param=1)]


def fsdp2_resharded(units: int, reshard_after_forward: bool | None) -> list[bool]:
    """Which of ``units`` ``fully_shard`` units (the root first) reshard their parameters after forward:
    every unit with True, none with False; with FSDP2's default (None, ``reshard_after_forward`` not passed)
    every unit but the root, whose parameters stay gathered from its forward to its backward (torch 2.13.0,
    ``fully_shard``'s docstring, ``_fully_shard.py`` lines 189-190: "If ``None``, it is set to ``True`` for
    non-root modules and ``False`` for root modules"; ``_fsdp_state.py`` lines 205-207 apply it at lazy init).

        >>> fsdp2_resharded(3, None), fsdp2_resharded(3, False)
        ([False, True, True], [False, False, False])
    """
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise ValueError(f"units={units!r} must be a positive integer")
    if reshard_after_forward not in (True, False, None):
        raise ValueError(f"reshard_after_forward={reshard_after_forward!r} must be True, False or None")
    return [reshard_after_forward is not False and not (reshard_after_forward is None and i == 0) for i in range(units)]


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
    return sum(stage_to_rank[a] != stage_to_rank[b] for a, b in pairwise(stages))


def torch_order(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> dict[int, list[tuple]]:
    """``meshplan.schedule.orders`` written as a ``pipeline_order`` in torch's names, with model stage indices
    (``meshplan.schedule.position``), to compare with ``torch.distributed.pipelining``'s own.

        >>> torch_order("dualpipev", 1, 2)[0][:3]
        [('F', 0, 0), ('F', 1, 0), ('F', 0, 1)]
    """
    names = {ours: theirs for theirs, ours in TORCH_KINDS.items()}
    out = {}
    for d, ops in enumerate(schedule_orders(kind, pp, micro_batches, virtual_stages)):

        def stage(chunk: int | None, d: int = d) -> int:
            return position(kind, pp, d, chunk or 0)

        out[d] = [
            (names[o.kind], stage(o.chunk), o.micro_batch)
            if o.kind != "F&B"
            else (names[o.kind], stage(o.chunk), o.micro_batch, stage(o.bw_chunk), o.bw_micro_batch)
            for o in ops
        ]
    return out


def replay(order: Mapping[int, Sequence[tuple]]) -> Timeline:
    """``meshplan.schedule.replay`` of a ``pipeline_order`` written in torch's names: ``order[rank]`` lists
    ``(kind, stage, microbatch)`` with kind F, B (full backward), I (input gradient) or W (weight gradient),
    or ``("OVERLAP_F_B", forward stage, forward micro-batch, backward stage, backward micro-batch)``; every
    operation takes one unit (a full backward two, an overlapped pair three), communication is free.
    ValueError if the order deadlocks or the ranks are unequally loaded."""
    converted = {}
    for rank, acts in order.items():
        row = []
        for a in acts:
            if a[0] not in TORCH_KINDS:
                raise ValueError(f"rank {rank}: unknown computation type {a[0]!r}")
            kind = TORCH_KINDS[a[0]]
            row.append((kind, a[1], a[2]) if kind != "F&B" else (kind, a[1], a[2], a[3], a[4]))
        converted[rank] = row
    return replay_order(converted)
