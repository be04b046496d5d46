"""The JSON object ``meshplan plan --json`` prints, the report's part: built here once, for ``plan``, ``search`` and
the live planner (``steptime.contract.plan_json`` adds the step-time keys after these).

The contract's keys come first, in this order: ``model``, ``params``, ``gpus``, ``mesh``, ``memory_bytes``, ``fits``,
``comm_bytes_per_step``, ``link``, ``bubble``; the further keys follow (README, "The command line").
"""

from __future__ import annotations

from meshplan.plan.report import MESH_KEYS, Report

__all__ = ["report_json"]


def report_json(report: Report) -> dict:
    """The report's keys of the ``plan --json`` contract (plain dicts, lists and numbers; extra keys after the
    contract's).

        >>> from meshplan.plan import Plan, evaluate
        >>> list(report_json(evaluate(Plan.create("qwen3.8-27b", gpus=8, dp=8, zero=3))))[:5]
        ['model', 'params', 'gpus', 'mesh', 'memory_bytes']
    """
    p = report.plan
    return {
        "model": p.model.name,
        "params": p.model.params.total,
        "gpus": p.gpus,
        "mesh": {k: getattr(p, k) for k in MESH_KEYS},
        "memory_bytes": {**report.memory_bytes, "by_stage": by_stage_json(report)},
        "fits": report.fits,
        "comm_bytes_per_step": dict(report.comm_bytes_per_step),
        "link": dict(report.link),
        "bubble": report.bubble,
        "bubble_share_of_time": report.bubble_share,
        "comm_time_s": dict(report.comm_time_s),
        "model_states_terms": dict(report.model_states_terms),
        "settings": {
            "zero": p.zero,
            "recompute": p.recompute,
            "precision": p.precision,
            "grad_dtype": p.grad_dtype,
            "attention_backend": p.attention_backend,
            "dropout": p.dropout,
            "seq": p.seq,
            "micro_batch_size": p.micro_batch_size,
            "micro_batches": p.micro_batches,
            "global_batch": p.global_batch,
            "tokens_per_step": p.tokens_per_step,
            "virtual_stages": p.virtual_stages,
            "sequence_parallel": p.sequence_parallel,
            "order": p.order,
            "gpus_per_node": p.gpus_per_node,
            "gpu_memory_bytes": p.gpu_memory_bytes,
            "hardware": p.hardware.name,
            "accounting": p.accounting.name,
            "stage_balance": p.stage_balance,
            "layers_per_stage": list(p.layers_per_stage) if p.layers_per_stage else None,
            "expert_tp": p.etp,
            "expert_dp": p.expert_dp,
            "memory_stage": report.stage,
            "traffic_stage": report.traffic_stage,
        },
        "memory_verdict": report.headroom.verdict if report.headroom else "",
        "notes": list(report.notes),
    }


def by_stage_json(report: Report) -> list[dict]:
    """``memory_bytes.by_stage``: one entry per pipeline stage, first to last: ``stage``, ``peak_allocated`` (its
    largest moment), ``peak_moment`` (that moment's name), ``terms`` (its bytes by term at that moment) and ``total``
    (what the ledger calls the stage's total: its model states plus its saved activations).

        >>> from meshplan.plan import Plan, evaluate
        >>> e = by_stage_json(evaluate(Plan.create("llama-3.1-8b", gpus=8, pp=2, dp=4, accounting="megatron")))
        >>> [x["stage"] for x in e], e[1]["peak_moment"]
        ([0, 1], 'loss forward')
    """
    out = []
    for sp in report.by_stage:
        out.append(
            {
                "stage": sp.index,
                "peak_allocated": sp.peak.total,
                "peak_moment": sp.peak.name,
                "terms": sp.peak.terms,
                "total": report.stage_totals[sp.index] if report.stage_totals else sp.peak.total,
            }
        )
    return out
