"""The lab page's plans for the anchor (Qwen3.8-27B), as data the book and the tests evaluate.

Every row is a set of ``Plan.create`` arguments; the lab page's numbers come from ``evaluate`` on them
(s = 4,096, b = 1, m = 8 unless stated, 80 GB GPUs, 8 per node, GB = 10⁹ B).

    >>> [row["label"] for row in LAB_8_GPUS][:2]
    ['DP 8 · ZeRO-3 · full recompute', 'DP 8 · ZeRO-3 · selective recompute']
"""

from __future__ import annotations

from .plan import Plan, Report, evaluate

ANCHOR = "qwen3.8-27b"

LAB_8_GPUS = (
    {"label": "DP 8 · ZeRO-3 · full recompute", "gpus": 8, "dp": 8, "zero": 3, "recompute": "full"},
    {"label": "DP 8 · ZeRO-3 · selective recompute", "gpus": 8, "dp": 8, "zero": 3, "recompute": "selective"},
    {"label": "TP 8 · selective recompute", "gpus": 8, "tp": 8, "recompute": "selective"},
    {"label": "TP 2 × PP 4 · full recompute", "gpus": 8, "tp": 2, "pp": 4, "recompute": "full"},
)

LAB_64_GPUS = (
    {"label": "TP 8 × PP 8 · full recompute", "gpus": 64, "tp": 8, "pp": 8, "recompute": "full"},
    {"label": "TP 8 × PP 8 · full recompute · m = 32", "gpus": 64, "tp": 8, "pp": 8, "recompute": "full",
     "micro_batches": 32},
    {"label": "TP 8 × PP 2 × DP 4 · ZeRO-1", "gpus": 64, "tp": 8, "pp": 2, "dp": 4, "zero": 1, "recompute": "full"},
)


def lab_plan(row: dict, model: str = ANCHOR) -> Plan:
    """The ``Plan`` of one lab row."""
    kw = {k: v for k, v in row.items() if k != "label"}
    return Plan.create(model, **kw)


def lab_reports(rows=LAB_8_GPUS, model: str = ANCHOR) -> list[tuple[str, Report]]:
    """(label, report) for each row."""
    return [(row["label"], evaluate(lab_plan(row, model))) for row in rows]
