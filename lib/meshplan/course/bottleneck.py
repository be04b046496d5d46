"""Predict a consequence: which part of the step becomes the bottleneck when one choice changes.

The chapters' other exercises ask for a formula's value; these ask what a change does to a whole step. The reader
moves a lever (TP across a node, the pipeline's depth against the batch, EP across a node) and predicts which of the
step-time model's terms after compute (``steptime.OVERHEADS``: TP communication, CP communication, EP all-to-all,
pipeline sends, DP synchronisation, pipeline bubble, optimizer step) is the largest; the answer is
``StepTime.largest_overhead`` of the plan, priced by ``steptime.step_time`` under the ledger's engine, and the worked
answer lists every term in seconds, largest first. Each chapter's exercise is one ``Exercise`` over a plan builder:

* ``tp_bottleneck``  (chapter 4): the anchor on 16 GPUs, two nodes, as TP grows past the node;
* ``pp_bottleneck``  (chapter 5): the anchor on 32 GPUs with TP 2, the pipeline's depth against the global batch;
* ``ep_bottleneck``  (chapter 7): Qwen3-30B-A3B on 64 GPUs as EP grows past the node.

    >>> ex = pp_bottleneck()
    >>> ex.result(pp=2, global_batch=32).value, ex.result(pp=8, global_batch=32).value
    ('DP synchronisation', 'pipeline bubble')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from meshplan.plan import Plan, evaluate
from meshplan.steptime import OVERHEADS, execution_for, step_time
from meshplan.widgets import Exercise

__all__ = ["QUESTION", "bottleneck_exercise", "ep_bottleneck", "overhead_line", "pp_bottleneck", "tp_bottleneck"]

QUESTION = "Which part of the step, after its own compute, takes the longest?"
CHOICES = tuple(OVERHEADS.values())


def overhead_line(plan: Plan) -> str:
    """The plan's step in words: compute, then every term after it that takes time, largest first, in seconds."""
    st = step_time(evaluate(plan), execution_for(plan.accounting.name))
    parts = sorted(((v, OVERHEADS[k]) for k, v in st.terms().items() if k != "compute_s" and v >= 5e-3), reverse=True)
    rest = "; ".join(f"{name} {v:.2f} s" for v, name in parts) or "nothing else"
    return (
        f"{plan.dims.label()}, m = {plan.micro_batches}: compute {st.compute_s:.2f} s per step; then {rest} "
        f"({st.total_s:.2f} s in all)."
    )


def bottleneck_exercise(
    exercise_id: str,
    plan_of: Callable[..., Plan],
    sliders: Mapping[str, Sequence[Any]],
    *,
    labels: Mapping[str, str],
    defaults: Mapping[str, Any] | None = None,
    texts: Mapping[str, Mapping[Any, str]] | None = None,
) -> Exercise:
    """An exercise asking ``QUESTION`` of the plan ``plan_of(**controls)`` (a ValueError marks a combination the
    library refuses, as in every exercise)."""

    def answer(**values: Any) -> str:
        p = plan_of(**values)
        return step_time(evaluate(p), execution_for(p.accounting.name)).largest_overhead()

    return Exercise(
        exercise_id,
        QUESTION,
        answer,
        sliders=dict(sliders),
        defaults=dict(defaults or {}),
        explain=lambda **values: overhead_line(plan_of(**values)),
        labels=dict(labels),
        texts=dict(texts or {}),
        choices=CHOICES,
    )


ANCHOR = "qwen3.8-27b"


def tp_plan(tp: int) -> Plan:
    """Chapter 4's lever: the anchor on 16 GPUs (two nodes of the lab page's machine), TP ``tp`` and DP the rest,
    ZeRO-1, selective recomputation, a global batch of 64 sequences, in the lab page's ledger."""
    return Plan.create(ANCHOR, gpus=16, tp=tp, zero=1, recompute="selective", global_batch=64)


def tp_bottleneck() -> Exercise:
    return bottleneck_exercise("ch4-bottleneck", tp_plan, {"tp": [1, 2, 4, 8]}, labels={"tp": "TP size t"})


def pp_plan(pp: int, global_batch: int) -> Plan:
    """Chapter 5's levers: the anchor on 32 GPUs with TP 2, PP ``pp`` (layers spread ends-lighter when they do not
    divide) and DP the rest, ZeRO-1, selective recomputation, ``global_batch`` sequences per step, lab page's
    ledger."""
    return Plan.create(
        ANCHOR, gpus=32, tp=2, pp=pp, zero=1, recompute="selective", global_batch=global_batch, uneven_stages=True
    )


def pp_bottleneck() -> Exercise:
    return bottleneck_exercise(
        "ch5-bottleneck",
        pp_plan,
        {"pp": [2, 4, 8], "global_batch": [32, 64, 256]},
        defaults={"pp": 4, "global_batch": 64},
        labels={"pp": "stages p", "global_batch": "global batch B"},
    )


EP_MODEL = "qwen3-30b-a3b"


def ep_plan(ep: int) -> Plan:
    """Chapter 7's lever: Qwen3-30B-A3B on 64 GPUs (eight nodes), DP 64 with EP ``ep`` folded inside it, ZeRO-1,
    selective recomputation, a global batch of 256 sequences, lab page's ledger."""
    return Plan.create(EP_MODEL, gpus=64, ep=ep, zero=1, recompute="selective", global_batch=256)


def ep_bottleneck() -> Exercise:
    return bottleneck_exercise(
        "ch7-bottleneck", ep_plan, {"ep": [1, 2, 4, 8, 16, 32, 64]}, defaults={"ep": 4}, labels={"ep": "EP size"}
    )
