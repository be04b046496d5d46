"""Model states (weights, gradients, optimizer) per GPU, and ZeRO's stages.

Source: Rajbhandari et al. 2019 (arXiv:1910.02054), §3.1 and Figure 1: mixed-precision Adam keeps
2Ψ (fp16/bf16 weights) + 2Ψ (grads) + KΨ with K = 12 (fp32 master weights, momentum, variance) = 16Ψ
bytes. ZeRO stage 1 shards the optimizer terms over the N data-parallel ranks, stage 2 also the
gradients, stage 3 also the weights:

* stage 0: 16Ψ
* stage 1: 4Ψ + 12Ψ/N
* stage 2: 2Ψ + 14Ψ/N
* stage 3: 16Ψ/N

Megatron-LM keeps fp32 gradients (``MEGATRON_BPP``: 2 + 4 + 12 = 18 B; its distributed optimizer is
"6 + 12/dp"). FSDP2 keeps fp32 sharded parameters and gradients (4 + 4 + 8 per parameter with no separate
master copy: ``FSDP2_BPP``).

Assumptions (the lab page's): parameters split evenly over tensor- and pipeline-parallel ranks
(embedding/output-layer imbalance ignored unless ``most_loaded_stage_params`` is used); no temporary
buffers, no fragmentation. Units: bytes.

    >>> round(model_states_bytes(27_781_427_952, zero_stage=3, dp=8) / 1e9, 1)
    55.6
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from meshplan.core.collectives import all_gather_bytes, reduce_scatter_bytes, ring_all_reduce_bytes
from meshplan.core.units import add_up
from meshplan.core.validation import check_count, check_non_negative_int, check_zero
from meshplan.spec.accounting import (
    DEFAULT_BPP,
    LAB_SYNC,
    BytesPerParam,
    SyncCollective,
)

# which named terms each ZeRO stage shards over the data-parallel group
STAGE_SHARDS: dict[int, frozenset[str]] = {
    0: frozenset(),
    1: frozenset({"master", "adam_m", "adam_v"}),
    2: frozenset({"master", "adam_m", "adam_v", "grads"}),
    3: frozenset({"master", "adam_m", "adam_v", "grads", "weights"}),
}


def model_states_terms(
    params: float, zero_stage: int = 0, dp: int = 1, bpp: BytesPerParam = DEFAULT_BPP
) -> dict[str, float]:
    """Bytes per GPU of each named term for ``params`` parameters held by this GPU's model replica shard.

    ``params`` is already divided by TP × PP; ``dp`` is the size of the group ZeRO shards over.
    """
    check_zero(zero_stage)
    check_count("dp", dp)
    sharded = STAGE_SHARDS[zero_stage]
    return {name: params * b / (dp if name in sharded else 1) for name, b in bpp.terms().items()}


def model_states_bytes(params: float, zero_stage: int = 0, dp: int = 1, bpp: BytesPerParam = DEFAULT_BPP) -> float:
    """Total model-state bytes per GPU: the sum of ``model_states_terms``."""
    return add_up(model_states_terms(params, zero_stage, dp, bpp).values())


def min_gpus_for_states(params: float, gpu_memory_bytes: float, bpp: BytesPerParam = DEFAULT_BPP) -> int:
    """The fewest GPUs whose memory adds up to the model states: ⌈bpp × Ψ ÷ GPU memory⌉.

    The best any sharding (ZeRO-3 over N GPUs) can do before a single activation is stored.

        >>> min_gpus_for_states(27_781_427_952, 80e9)
        6
    """
    if not gpu_memory_bytes > 0:
        raise ValueError(f"gpu_memory_bytes={gpu_memory_bytes!r} must be positive")
    return math.ceil(model_states_bytes(params, 0, 1, bpp) / gpu_memory_bytes)


def zero_comm_factor(zero_stage: int) -> int:
    """Gradient-sized transfers per step in units of a reduce-scatter (or all-gather) of the gradients.

    Stages 0–2: reduce-scatter + all-gather = 2 (the same volume as DP's all-reduce, ZeRO §7.2.1).
    Stage 3: parameter all-gather in forward and again in backward + gradient reduce-scatter = 3 (§7.2.2:
    3Ψ, 1.5× DP).
    """
    check_zero(zero_stage)
    return 3 if zero_stage == 3 else 2


def sync_terms(n: int, params: float, schedule: tuple[SyncCollective, ...], micro_batches: int = 1) -> dict[str, float]:
    """Bytes one rank sends per step for each collective of ``schedule`` (keyed by label), to keep ``params``
    parameters in sync over ``n`` data-parallel ranks with ``micro_batches`` micro-batches per step. The one
    place the data-parallel synchronisation is priced, for every ledger.

        >>> t = sync_terms(8, 27_781_427_952, LAB_SYNC[3])
        >>> {k: round(v / 1e9, 1) for k, v in t.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'all-gather (weights, forward)': 48.6, 'all-gather (weights, backward)': 48.6,
         'reduce-scatter (gradients)': 48.6}
    """
    check_count("n", n)
    out: dict[str, float] = {}
    for c in schedule:
        out[c.label] = out.get(c.label, 0.0) + c.bytes(n, params, micro_batches)
    return out


def zero_sync_terms(n: int, grad_bytes: float, zero_stage: int = 0) -> dict[str, float]:
    """The lab page's collectives (``LAB_SYNC``) for a bf16 gradient of ``grad_bytes``: bytes one rank sends per
    step for each. The values sum to ``zero_sync_bytes``.

        >>> {k: round(v / 1e9, 1) for k, v in zero_sync_terms(8, 2 * 27_781_427_952, 1).items()}
        {'reduce-scatter (gradients)': 48.6, 'all-gather (updated weights)': 48.6}
    """
    check_zero(zero_stage)
    return sync_terms(n, grad_bytes / 2, LAB_SYNC[zero_stage])


def zero_sync_bytes(n: int, grad_bytes: float, zero_stage: int = 0) -> float:
    """Bytes one rank sends per step to keep ``n`` data-parallel replicas in sync, the lab page's way.

    ``grad_bytes`` is the size of this rank's unsharded bf16 gradient (= its bf16 weights). Stages 0–2: ring
    all-reduce 2(n−1)/n × G. Stage 3: all-gather (forward) + all-gather (backward) + reduce-scatter =
    3(n−1)/n × G.

        >>> round(zero_sync_bytes(8, 2 * 27_781_427_952, 3) / 1e9, 1)
        145.9
    """
    return add_up(zero_sync_terms(n, grad_bytes, zero_stage).values())


# ---------------------------------------------------------------- FSDP2 unit by unit (what torch actually runs)
def fsdp_unit_params(spec) -> list[int]:
    """Parameters of each ``fully_shard`` unit of a ``ModelSpec`` when every decoder layer is its own unit and the
    root holds the rest (embeddings, tied head, final norm): [root, layer 0, …, layer L−1].

        >>> from meshplan import load_model
        >>> fsdp_unit_params(load_model("small-3.7m"))
        [540928, 786944, 786944, 786944, 786944]
    """
    layers = list(spec.layer_params)
    return [spec.params.total - add_up(layers), *layers]


def fsdp2_collectives_per_step(
    unit_params: Sequence[int],
    resharded: Sequence[bool],
    micro_batches: int,
    sync_every_micro_batch: bool = True,
    param_bytes: int = 4,
    grad_bytes: int = 4,
) -> dict[str, int]:
    """FSDP2's collectives on one rank per optimizer step with gradient accumulation over m micro-batches.

    Each unit all-gathers its parameters before its forward in every micro-batch; a unit resharded after
    forward (``resharded[i]``) gathers them again before its backward; every unit reshards after its
    backward (``reshard_after_backward`` defaults to True), so the next micro-batch gathers anew. The
    gradients are reduce-scattered after every backward, or only after the last one when
    ``set_requires_gradient_sync(False)`` holds them unsharded on the others. With U units of Ψ_i
    parameters, R of them resharded after forward:

        all-gathers      = m × (U + R)
        all-gather bytes = m × (Σ Ψ_i + Σ_resharded Ψ_i) × param_bytes   (the gathered output)
        reduce-scatters  = (m if sync_every_micro_batch else 1) × U
        reduce-scatter bytes = (m or 1) × Σ Ψ_i × grad_bytes              (the input before scattering)

    Payloads are the logger's convention (``realrun.logger``): bytes per rank on the wire follow from
    ``meshplan.core.collectives``. Source: ``torch/distributed/fsdp/_fully_shard`` at torch 2.13:
    ``_fsdp_param_group.py`` ``post_backward`` (reshard, then reduce-scatter only if ``reduce_grads``),
    ``_fully_shard.py`` ``set_requires_gradient_sync`` (sets ``reduce_grads``), and ``_fsdp_state.py``
    ``_lazy_init`` (a root left at the default ``reshard_after_forward=None`` is not resharded after forward).
    Units: counts and bytes.

        >>> units = [540_928] + [786_944] * 4
        >>> fsdp2_collectives_per_step(units, [True] * 5, 2)
        {'all_gathers': 20, 'reduce_scatters': 10, 'all_gather_bytes': 59019264, 'reduce_scatter_bytes': 29509632}
        >>> fsdp2_collectives_per_step(units, [False] + [True] * 4, 4, sync_every_micro_batch=False)["reduce_scatters"]
        5
    """
    check_count("micro_batches", micro_batches)
    if len(resharded) != len(unit_params):
        raise ValueError(f"resharded has {len(resharded)} entries for {len(unit_params)} units")
    m, units, params = micro_batches, len(unit_params), add_up(unit_params)
    again = [p for p, r in zip(unit_params, resharded) if r]
    syncs = m if sync_every_micro_batch else 1
    return {
        "all_gathers": m * (units + len(again)),
        "reduce_scatters": syncs * units,
        "all_gather_bytes": m * (params + add_up(again)) * param_bytes,
        "reduce_scatter_bytes": syncs * params * grad_bytes,
    }


# ---------------------------------------------------------------- FSDP2: resharding, wire bytes, memory held, HSDP
# Sources, PyTorch v2.13.0 (cf30153), torch/distributed/fsdp/_fully_shard/ (the ``_TORCH_FSDP`` prefix below):
# _fully_shard.py#L183-L190 (reshard_after_forward: True reshards and re-gathers in backward, False keeps the unsharded
# parameters, None "is set to True for non-root modules and False for root modules"), _fsdp_state.py#L203-L207 (the
# root is not resharded after forward), _fsdp_param_group.py#L576-L585 and #L795-L830 (backward prefetch of the next
# unit), #L419-L429 (implicit forward prefetch: the next unit's all-gather issued while this one computes),
# _fsdp_collectives.py#L618-L624 and #L634-L662 (HSDP: reduce-scatter over the shard group, then all-reduce over the
# replicate group), _fully_shard.py#L413-L452 (set_requires_gradient_sync, set_requires_all_reduce).
_TORCH_FSDP = "pytorch/pytorch v2.13.0 (cf30153), torch/distributed/fsdp/_fully_shard/"
RESHARD_AFTER_FORWARD = (True, False, None)  # None: torch's default


def fsdp2_resharded(units: int, reshard_after_forward: bool | None) -> list[bool]:
    """Which of ``units`` ``fully_shard`` units ([root, unit 1, …], as ``fsdp_unit_params`` lists them) reshard
    their parameters after forward when every call passes ``reshard_after_forward``.

    True: every unit; False: none; None (torch's default): every unit but the root, which "is typically required
    immediately when the backward pass begins" (``_fully_shard.py#L183-L190``, ``_fsdp_state.py#L203-L207`` at
    torch v2.13.0). The same rule ``realrun`` applies to its FSDP2 runs.

        >>> fsdp2_resharded(3, None), fsdp2_resharded(3, False)
        ([False, True, True], [False, False, False])
    """
    check_count("units", units)
    if reshard_after_forward not in RESHARD_AFTER_FORWARD or not isinstance(reshard_after_forward, (bool, type(None))):
        raise ValueError(f"reshard_after_forward={reshard_after_forward!r} must be True, False or None")
    if reshard_after_forward is None:
        return [i > 0 for i in range(units)]
    return [reshard_after_forward] * units


def fsdp2_sync_bytes(
    unit_params: Sequence[int],
    resharded: Sequence[bool],
    n: int,
    micro_batches: int,
    sync_every_micro_batch: bool = True,
    param_bytes: int = 2,
    grad_bytes: int = 4,
) -> dict[str, float]:
    """Bytes one rank sends per optimizer step for FSDP2's all-gathers and reduce-scatters over ``n`` ranks.

    The payloads of ``fsdp2_collectives_per_step`` on a ring: all-gather (n−1)/n × the gathered output, reduce-scatter
    (n−1)/n × the input (``collectives``). With U units, R of them resharded after forward, Ψ parameters in all:

        all-gather     = m × (Ψ + Ψ_resharded) × param_bytes × (n−1)/n
        reduce-scatter = (m, or 1 with the sync on the last micro-batch only) × Ψ × grad_bytes × (n−1)/n

    Defaults: torchtitan's ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (bf16 gathers,
    fp32 gradient reductions; ``accounting.FSDP2``'s sources). Units: bytes per rank per step.

        >>> units = [10, 20, 20]
        >>> fsdp2_sync_bytes(units, fsdp2_resharded(3, None), n=2, micro_batches=2)
        {'all-gather (bf16 weights)': 180.0, 'reduce-scatter (fp32 gradients)': 200.0}
    """
    check_count("n", n)
    c = fsdp2_collectives_per_step(
        unit_params, resharded, micro_batches, sync_every_micro_batch, param_bytes, grad_bytes
    )
    names = {2: "bf16", 4: "fp32"}
    return {
        f"all-gather ({names.get(param_bytes, f'{param_bytes}-byte')} weights)": all_gather_bytes(
            n, c["all_gather_bytes"]
        ),
        f"reduce-scatter ({names.get(grad_bytes, f'{grad_bytes}-byte')} gradients)": reduce_scatter_bytes(
            n, c["reduce_scatter_bytes"]
        ),
    }


def fsdp2_unsharded_bytes(
    unit_params: Sequence[int],
    resharded: Sequence[bool],
    sync_every_micro_batch: bool = True,
    param_bytes: int = 2,
    grad_bytes: int = 4,
    prefetch: int = 1,
) -> dict[str, float]:
    """Bytes of unsharded parameters and gradients one rank holds at the peak of a micro-batch, on top of its
    sharded states (``unit_params`` as ``fsdp_unit_params``: the root first).

    * ``root``: the root unit's parameters. The root's forward is the whole model's, so they are unsharded from
      the model's first operation to its last, and again through the whole backward, whatever
      ``reshard_after_forward`` says: Ψ_root × param_bytes.
    * ``kept after forward``: the other units that do not reshard after forward hold their parameters from their
      forward to their backward; at the turn from forward to backward all of them at once: Σ × param_bytes.
    * ``in flight``: the unit computing and the ``prefetch`` units gathered ahead of it (FSDP2 prefetches one: the
      next unit's all-gather is issued while this one computes, ``_fsdp_param_group.py#L419-L429`` and
      ``#L795-L830`` at torch v2.13.0), among those resharded after forward: (1 + prefetch) × the largest of them
      × param_bytes (0 when none reshards).
    * ``accumulated gradients``: with ``set_requires_gradient_sync(False)`` on all but the last micro-batch, every
      unit's unsharded gradient stays in the reduce dtype until the last backward: Ψ × grad_bytes.

    Not counted: one unit's bf16 gradients and the reduce-scatter input buffer before its reduction (transient,
    one unit each). Units: bytes.

        >>> fsdp2_unsharded_bytes([10, 20, 30], fsdp2_resharded(3, None))
        {'root': 20, 'kept after forward': 0, 'in flight': 120, 'accumulated gradients': 0}
        >>> fsdp2_unsharded_bytes([10, 20, 30], fsdp2_resharded(3, False), sync_every_micro_batch=False)
        {'root': 20, 'kept after forward': 100, 'in flight': 0, 'accumulated gradients': 240}
    """
    if len(resharded) != len(unit_params) or not unit_params:
        raise ValueError(f"resharded has {len(resharded)} entries for {len(unit_params)} units (at least the root)")
    check_non_negative_int("prefetch", prefetch)
    rest = list(zip(unit_params[1:], resharded[1:]))
    moving = [p for p, r in rest if r]
    return {
        "root": unit_params[0] * param_bytes,
        "kept after forward": add_up(p for p, r in rest if not r) * param_bytes,
        "in flight": (min(1 + prefetch, len(moving)) * max(moving) * param_bytes) if moving else 0,
        "accumulated gradients": 0 if sync_every_micro_batch else add_up(unit_params) * grad_bytes,
    }


def hsdp_sync_bytes(
    params: float,
    shard: int,
    replicate: int,
    micro_batches: int = 1,
    gathers_per_micro_batch: int = 2,
    param_bytes: int = 2,
    grad_bytes: int = 4,
    all_reduce_every_micro_batch: bool = True,
) -> dict[str, float]:
    """Bytes one rank sends per optimizer step with HSDP: FSDP2 on a 2-D mesh (replicate, shard), the parameters
    sharded over the ``shard`` ranks of a group (a node) and replicated over ``replicate`` groups.

    Each micro-batch all-gathers the weights inside the shard group (``gathers_per_micro_batch``: 2 when resharded
    after forward, 1 when not), reduce-scatters the gradients inside it, then all-reduces each rank's 1/shard of
    the gradients over the replicate group (``_fsdp_collectives.py#L618-L624`` and ``#L634-L662`` at torch
    v2.13.0); ``set_requires_all_reduce(False)`` on all but the last micro-batch keeps the reduce-scatter and does
    the all-reduce once (``all_reduce_every_micro_batch=False``). FSDP over N ranks is shard = N, replicate = 1.

        all-gather (shard group)     = m × gathers × Ψ × param_bytes × (s−1)/s
        reduce-scatter (shard group) = m × Ψ × grad_bytes × (s−1)/s
        all-reduce (replicate group) = (m or 1) × Ψ × grad_bytes / s × 2(r−1)/r

    Model states per rank are those of ZeRO-3 over s ranks, 16Ψ/s. Units: bytes per rank per step.

        >>> t = hsdp_sync_bytes(27_781_427_952, shard=8, replicate=8)
        >>> {k: round(v / 1e9, 1) for k, v in t.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'all-gather (shard group)': 97.2, 'reduce-scatter (shard group)': 97.2,
         'all-reduce (replicate group)': 24.3}
    """
    for name, value in (
        ("shard", shard),
        ("replicate", replicate),
        ("micro_batches", micro_batches),
        ("gathers_per_micro_batch", gathers_per_micro_batch),
    ):
        check_count(name, value)
    if not params > 0:
        raise ValueError(f"params={params!r} must be positive")
    m = micro_batches
    return {
        "all-gather (shard group)": m * gathers_per_micro_batch * all_gather_bytes(shard, params * param_bytes),
        "reduce-scatter (shard group)": m * reduce_scatter_bytes(shard, params * grad_bytes),
        "all-reduce (replicate group)": (m if all_reduce_every_micro_batch else 1)
        * ring_all_reduce_bytes(replicate, params * grad_bytes / shard),
    }
