"""Data parallelism: gradient synchronisation bytes per GPU per step.

Convention (the lab page's): gradients are bf16 (2 B per parameter), synchronised once per step (after
gradient accumulation over the micro-batches) with a ring all-reduce, 2(N−1)/N × gradient bytes sent per
rank; ZeRO-3 sends 3(N−1)/N × (``zero.zero_sync_bytes``). Overlap with the backward pass and latency are
ignored. The naive alternative gathers everything to rank 0: (N−1) × gradient bytes arrive there.

    >>> round(dp_bytes_per_step(27_781_427_952, 8) / 1e9, 1)
    97.2

Gradient accumulation: a step of B sequences runs m = B ÷ (dp × b) micro-batches of b sequences on every replica
(``global_batch``); each micro-batch's backward adds into the local gradients, and the lab page synchronises once,
after the last. The engines' own schedules (``ledger_sync_bytes``, from ``meshplan.spec.accounting``) differ:
Megatron-LM and FSDP2 reduce fp32 gradients, and ZeRO-2/3 and FSDP reduce (and gather) on every micro-batch.
"""

from __future__ import annotations

from meshplan.core.collectives import naive_gather_bytes
from meshplan.core.units import add_up
from meshplan.core.validation import check_count, check_zero
from meshplan.parallel.zero import model_states_bytes, sync_terms, zero_sync_bytes
from meshplan.spec.accounting import DEFAULT_BPP, LAB_SYNC, Accounting, BytesPerParam, SyncCollective, get_accounting

GRAD_BYTES_PER_PARAM = 2  # bf16 gradients on the wire


def dp_bytes_per_step(
    params: float, dp: int, zero_stage: int = 0, grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM
) -> float:
    """Bytes one GPU sends per step to synchronise ``params`` parameters over ``dp`` replicas."""
    return zero_sync_bytes(dp, params * grad_bytes_per_param, zero_stage)


def grad_sync_bytes(
    params: float, dp: int, cp: int = 1, schedule: tuple[SyncCollective, ...] = LAB_SYNC[0], micro_batches: int = 1
) -> dict[str, float]:
    """Bytes one GPU sends per step to synchronise ``params`` parameters (this GPU's unsharded share of the model,
    after the TP/PP splits) over its dp × cp data-parallel ranks, split as a two-level ring: each collective of
    ``schedule`` (``zero.LAB_SYNC[stage]`` or an engine's, ``accounting``) runs first over the c CP ranks (reported
    under ``"cp"``), then over the d DP ranks on the 1/c-sized result (``"dp"``). With c = 1 it is the plain ring
    over d. ZeRO shards over the dp × cp ranks (Megatron's dp-cp group, torchtitan's dp_shard × cp).

        >>> {k: round(v / 1e9, 1) for k, v in grad_sync_bytes(27_781_427_952, 8).items()}
        {'dp': 97.2, 'cp': 0.0}
    """
    return {
        "dp": add_up(sync_terms(dp, params / cp, schedule, micro_batches).values()),
        "cp": add_up(sync_terms(cp, params, schedule, micro_batches).values()),
    }


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


def global_batch(dp: int, micro_batch_size: int, micro_batches: int) -> int:
    """Sequences per optimizer step: B = dp × b × m (each of the dp replicas accumulates m micro-batches of b).

    >>> global_batch(8, 1, 8), global_batch(128, 1, 16) * 8192   # Llama 3 405B: 16 sequences per DP rank
    (64, 16777216)
    """
    for name, value in (("dp", dp), ("micro_batch_size", micro_batch_size), ("micro_batches", micro_batches)):
        check_count(name, value)
    return dp * micro_batch_size * micro_batches


def _schedule(accounting: str | Accounting, zero_stage: int, micro_batches: int, pp: int) -> tuple[SyncCollective, ...]:
    check_count("micro_batches", micro_batches)
    check_count("pp", pp)
    check_zero(zero_stage)
    return get_accounting(accounting).sync_schedule(zero_stage, pp)


def ledger_sync_bytes(
    params: float,
    dp: int,
    accounting: str | Accounting = "lab",
    zero_stage: int = 0,
    micro_batches: int = 1,
    pp: int = 1,
) -> dict[str, float]:
    """Bytes one GPU sends per optimizer step for each data-parallel collective of a ledger (keyed by its label),
    keeping ``params`` parameters in sync over ``dp`` replicas with ``micro_batches`` micro-batches per step.

    The schedule is ``accounting``'s for ZeRO stage ``zero_stage`` with ``pp`` pipeline stages
    (``Accounting.sync_schedule``; ValueError where the engine refuses the stage): each collective's ring bytes
    (``meshplan.core.collectives``) at its wire dtype, × m for the collectives the engine runs every micro-batch. The
    lab ledger's values do not depend on m; at ZeRO-0 they sum to ``dp_bytes_per_step``.

        >>> P = 27_781_427_952
        >>> {k: round(v / 1e9, 1) for k, v in ledger_sync_bytes(P, 8, "megatron").items()}
        {'all-reduce (fp32 gradients)': 194.5}
        >>> round(sum(ledger_sync_bytes(P, 8, "fsdp2", zero_stage=3, micro_batches=8).values()) / 1e9, 1)
        1555.8
    """
    return sync_terms(dp, params, _schedule(accounting, zero_stage, micro_batches, pp), micro_batches)


def per_micro_batch_bytes(
    params: float,
    dp: int,
    accounting: str | Accounting = "lab",
    zero_stage: int = 0,
    micro_batches: int = 1,
    pp: int = 1,
) -> dict[str, float]:
    """``ledger_sync_bytes`` split by when the collectives run: ``"every micro-batch"`` (the sum over the m
    micro-batches) and ``"once per step"``. Bytes one GPU sends per step.

        >>> {k: round(v / 1e9, 1) for k, v in per_micro_batch_bytes(27_781_427_952, 8, "deepspeed", 2, 8).items()}
        {'every micro-batch': 777.9, 'once per step': 48.6}
    """
    check_count("dp", dp)
    out = {"every micro-batch": 0.0, "once per step": 0.0}
    for c in _schedule(accounting, zero_stage, micro_batches, pp):
        out["every micro-batch" if c.per_micro_batch else "once per step"] += c.bytes(dp, params, micro_batches)
    return out
