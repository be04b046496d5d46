"""The JSON object ``meshplan plan --json`` prints, whole: the report's keys (``plan.contract.report_json``) followed
by the step-time keys (``steptime.model.step_report``). Built here once for the command line's ``plan``, each entry of
``search --json`` and the live planner, so that they cannot disagree.

    >>> from meshplan.plan import Plan, evaluate
    >>> d = plan_json(evaluate(Plan.create("qwen3.8-27b", gpus=8, dp=8, zero=3, hardware="h100-sxm-80gb")))
    >>> list(d)[:3], "step_time_s" in d and "mfu" in d
    (['model', 'params', 'gpus'], True)
"""

from __future__ import annotations

from meshplan.plan.contract import report_json
from meshplan.plan.report import Report
from meshplan.steptime.model import Execution, StepTime, step_report

__all__ = ["plan_json"]


def plan_json(
    report: Report, execution: Execution | None = None, step: StepTime | None = None, rank: int | None = None
) -> dict:
    """``report``'s ``plan --json`` object: its keys, then the step-time keys under ``execution`` (default: the
    ledger's engine), from ``step`` when given (no second computation), then ``rank`` when given (``search``)."""
    out = {**report_json(report), **step_report(report, execution, step)}
    if rank is not None:
        out["rank"] = rank
    return out
