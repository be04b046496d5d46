"""A parallel plan and its report (imports ``core``, ``spec`` and ``parallel``).

* ``construct``: ``Plan`` and ``Workload``, built from validated parts, and ``Plan.create``, the front door;
* ``evaluate``: ``evaluate(plan)`` → ``Report`` (memory per GPU, bytes per dimension with link and time, bubble);
* ``notes``: the report's notes, in the reader's words;
* ``contract``: the JSON object ``meshplan plan --json`` prints, built in one place for ``plan`` and ``search``;
* ``reporting``: a report as text.
"""

from meshplan.plan.evaluate import (
    DIMS,
    MAX_MICRO_BATCH_SIZE,
    MAX_MICRO_BATCHES,
    MAX_SEQ,
    MAX_VIRTUAL_STAGES,
    MESH_KEYS,
    TRAFFIC,
    Plan,
    Report,
    Workload,
    evaluate,
)

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
