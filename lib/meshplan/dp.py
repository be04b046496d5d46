"""Data parallelism: gradient synchronisation bytes per GPU per step.

Convention (the lab page's): gradients are bf16 (2 B per parameter), synchronised once per step (after
gradient accumulation over the micro-batches) with a ring all-reduce, 2(N−1)/N × gradient bytes sent per
rank; ZeRO-3 sends 3(N−1)/N × (``zero.zero_sync_bytes``). Overlap with the backward pass and latency are
ignored. The naive alternative gathers everything to rank 0: (N−1) × gradient bytes arrive there.

    >>> round(dp_bytes_per_step(27_781_427_952, 8) / 1e9, 1)
    97.2
"""

from __future__ import annotations

from .collectives import naive_gather_bytes
from .zero import DEFAULT_BPP, LAB_SYNC, BytesPerParam, SyncCollective, model_states_bytes, sync_terms, zero_sync_bytes

GRAD_BYTES_PER_PARAM = 2  # bf16 gradients on the wire


def dp_bytes_per_step(params: float, dp: int, zero_stage: int = 0, grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM) -> float:
    """Bytes one GPU sends per step to synchronise ``params`` parameters over ``dp`` replicas."""
    return zero_sync_bytes(dp, params * grad_bytes_per_param, zero_stage)


def grad_sync_bytes(params: float, dp: int, cp: int = 1, schedule: tuple[SyncCollective, ...] = LAB_SYNC[0],
                    micro_batches: int = 1) -> dict[str, float]:
    """Bytes one GPU sends per step to synchronise ``params`` parameters (this GPU's unsharded share of the model,
    after the TP/PP splits) over its dp × cp data-parallel ranks, split as a two-level ring: each collective of
    ``schedule`` (``zero.LAB_SYNC[stage]`` or an engine's, ``accounting``) runs first over the c CP ranks (reported
    under ``"cp"``), then over the d DP ranks on the 1/c-sized result (``"dp"``). With c = 1 it is the plain ring
    over d. ZeRO shards over the dp × cp ranks (Megatron's dp-cp group, torchtitan's dp_shard × cp).

        >>> {k: round(v / 1e9, 1) for k, v in grad_sync_bytes(27_781_427_952, 8).items()}
        {'dp': 97.2, 'cp': 0.0}
    """
    return {"dp": sum(sync_terms(dp, params / cp, schedule, micro_batches).values()),
            "cp": sum(sync_terms(cp, params, schedule, micro_batches).values())}


def naive_gather_bytes_per_step(params: float, dp: int, grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM) -> float:
    """Bytes that reach rank 0 when every other replica sends it its whole gradient: (N−1) × 2Ψ.

        >>> round(naive_gather_bytes_per_step(27_781_427_952, 64) / 1e9)
        3500
    """
    return naive_gather_bytes(dp, params * grad_bytes_per_param)


def replica_states_bytes(params: float, dp: int, bpp: BytesPerParam = DEFAULT_BPP) -> float:
    """Model states each of ``dp`` plain data-parallel replicas holds: bpp × Ψ, whatever ``dp`` is.

    Data parallelism divides the batch, never the model: every replica keeps every term.

        >>> round(replica_states_bytes(27_781_427_952, 64) / 1e9, 1)
        444.5
    """
    return model_states_bytes(params, zero_stage=0, dp=dp, bpp=bpp)
