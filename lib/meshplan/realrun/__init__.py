"""Real PyTorch runs that check the formulas: the course's small model on 2, 4 and 8 forked gloo ranks.

Importing this package does not import torch; the runs do (``pip install torch==2.13.0``, a CPU build), and the
activation rows import ``transformers`` (5.23.0).

* ``model``: the 3,688,704-parameter small model in PyTorch.
* ``logger``: a ``TorchDispatchMode`` that counts every collective and its payload where it is issued.
* ``launch``: forked ranks over gloo with a deadline and no leftover processes.
* ``runs``: DDP, FSDP2 (ZeRO-3 and ZeRO-2 mode, and gradient accumulation over m micro-batches),
  ZeroRedundancyOptimizer, DTensor TP (± sequence parallel), ``torch.distributed.pipelining``, and gloo's
  wire bytes.
* ``predict``: torch-free predictions, made by the library (``meshplan.parallel.buckets`` for DDP's buckets,
  ``meshplan.schedule`` for the replay of torch's schedules) once the small model is described in its terms;
  ZeRO-1's partition; FSDP2's collectives per step with m micro-batches.
* ``checks``: predicted (the library) against measured, as ``rows.Row``.
* ``activations``: the ``fsdp2`` activation ledger (``meshplan.parallel.engine_activations``) against what autograd
  saves (``meshplan.realrun.measure``) for a tiny ``transformers`` model of every family, at two sequence lengths and
  two micro-batch sizes (``TINY_CONFIGS``, ``SHAPES``).
* ``command``: ``validate(quick, output) -> (rows, document)``, which ``meshplan validate [--quick]
  [--json] [--output FILE]``.

Nothing happens at import: no model is loaded, no environment variable is set.

    >>> from meshplan.realrun.predict import zero1_partition
    >>> zero1_partition([524_288, 262_144, 262_144, 16_384], 2)
    [540672, 524288]
"""

from __future__ import annotations

from meshplan.realrun.command import run_checks, validate
from meshplan.realrun.rows import RESULTS_PATH, Row, format_table, load_results, rows_from_results

__all__ = ["RESULTS_PATH", "Row", "format_table", "load_results", "rows_from_results", "run_checks", "validate"]
