"""Real PyTorch runs that check the formulas: the course's small model on 2, 4 and 8 forked gloo ranks.

Importing this package does not import torch; the runs do (``pip install torch==2.13.0``, a CPU build).

* ``model``: the 3,688,704-parameter small model in PyTorch.
* ``logger``: a ``TorchDispatchMode`` that counts every collective and its payload where it is issued.
* ``launch``: forked ranks over gloo with a deadline and no leftover processes.
* ``runs``: DDP, FSDP2 (ZeRO-3 and ZeRO-2 mode), ZeroRedundancyOptimizer, DTensor TP (± sequence
  parallel), ``torch.distributed.pipelining``, and gloo's wire bytes.
* ``predict``: torch-free predictions (DDP's bucket walk, ZeRO-1's partition, schedule replay).
* ``checks``: predicted (the library) against measured, as ``rows.Row``.
* ``command``: ``python -m meshplan validate [--quick] [--json] [--output FILE]``.

    >>> from meshplan.realrun.predict import zero1_partition
    >>> zero1_partition([524_288, 262_144, 262_144, 16_384], 2)
    [540672, 524288]
"""

from __future__ import annotations

from .command import add_command, run_checks
from .rows import RESULTS_PATH, Row, format_table, load_results, rows_from_results

__all__ = ["add_command", "run_checks", "Row", "RESULTS_PATH", "format_table", "load_results", "rows_from_results"]
