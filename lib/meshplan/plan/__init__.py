"""A parallel plan and its report (imports ``core``, ``spec`` and ``parallel``).

* ``construct``: ``Plan`` and ``Workload``, built from validated parts, and ``Plan.create``, the front door;
* ``report``: the ``Report`` (memory per GPU, bytes per dimension with link and time, bubble) and its keys;
* ``evaluation``: ``evaluate(plan)`` → ``Report``;
* ``notes``: the report's notes, in the reader's words;
* ``contract``: the report's part of the JSON object ``meshplan plan --json`` prints, built once;
* ``reporting``: a report as text.
"""

from meshplan.plan.construct import (
    MAX_MICRO_BATCH_SIZE,
    MAX_MICRO_BATCHES,
    MAX_SEQ,
    MAX_VIRTUAL_STAGES,
    Plan,
    Workload,
)
from meshplan.plan.evaluation import evaluate
from meshplan.plan.report import DIMS, MESH_KEYS, TRAFFIC, Report

__all__ = [
    "DIMS",
    "MAX_MICRO_BATCHES",
    "MAX_MICRO_BATCH_SIZE",
    "MAX_SEQ",
    "MAX_VIRTUAL_STAGES",
    "MESH_KEYS",
    "TRAFFIC",
    "Plan",
    "Report",
    "Workload",
    "evaluate",
]
