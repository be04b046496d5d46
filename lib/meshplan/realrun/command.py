"""``python -m meshplan validate [--quick] [--json] [--output FILE]``: run the checks, print the table.

``validate(quick, output)`` is the library function: it checks the output path (a regular file or nothing: see
``check_output``) and that torch and transformers are installed before any run, then returns the rows and the
results document (and writes it when asked). The command is argparse wiring around it. Exit code 1 if an exact
row differs; 2 for bad input (the CLI's convention); torch is imported only when the command runs, so
``python -m meshplan plan`` never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshplan.core.output import check_output
from meshplan.core.output import write_json as _write
from meshplan.realrun import checks
from meshplan.realrun.activations import QUICK_FAMILIES, TINY_CONFIGS, activation_rows
from meshplan.realrun.rows import Row, results_document


@dataclass(frozen=True)
class RunSet:
    """Which runs ``run_checks`` makes."""

    dp: tuple[int, ...]  # ranks for DDP, FSDP2 and ZeRO-1
    tp: tuple[int, ...]  # TP sizes
    pp: tuple[tuple[str, int, int], ...]  # real pipeline runs: (torch schedule, v, p)
    pp_m: int  # micro-batches of the real pipeline runs
    replay: tuple[tuple[int, int], ...]  # (p, m) of the pipeline_order replays
    wire: tuple[int, ...]  # ranks for gloo's wire bytes
    accum_n: tuple[int, ...]  # ranks for FSDP2 with gradient accumulation
    accum_m: tuple[int, ...]  # its micro-batches per step
    activations: tuple[str, ...]  # families whose activation ledger is measured (``activations.TINY_CONFIGS``)


QUICK = RunSet(
    dp=(2, 4),
    tp=(2,),
    pp=(("GPipe", 1, 2), ("ZBVZeroBubble", 2, 2)),
    pp_m=4,
    replay=((2, 8), (4, 8)),
    wire=(2,),
    accum_n=(2,),
    accum_m=(2,),
    activations=QUICK_FAMILIES,
)
FULL = RunSet(
    dp=(2, 4, 8),
    tp=(2, 4),
    pp=(("GPipe", 1, 2), ("GPipe", 1, 4), ("1F1B", 1, 4), ("Interleaved1F1B", 2, 2), ("ZBVZeroBubble", 2, 2)),
    pp_m=4,
    replay=((2, 8), (4, 8), (8, 16)),
    wire=(2, 4, 8),
    accum_n=(2, 4),
    accum_m=(1, 2, 4),
    activations=tuple(TINY_CONFIGS),
)


def run_checks(quick: bool = True) -> list[Row]:
    """Every row of the chosen set, in a stable order (see ``QUICK`` and ``FULL``)."""

    cfg = QUICK if quick else FULL
    rows: list[Row] = []
    for n in cfg.dp:
        rows += checks.ddp_rows(n)
    for n in cfg.dp:
        rows += checks.fsdp_rows(n)
    for n in cfg.accum_n:
        rows += checks.fsdp_accum_rows(n, cfg.accum_m)
    for n in cfg.dp:
        rows += checks.zero1_rows(n)
    for t in cfg.tp:
        rows += checks.tp_rows(t)
    rows += checks.pp_rows(list(cfg.pp), cfg.pp_m, list(cfg.replay))
    for n in cfg.wire:
        rows += checks.wire_rows(n)
    # last: the activation rows import transformers, and no rank is forked after them
    rows += activation_rows(cfg.activations)
    return rows


def validate(quick: bool = True, output: Path | str | None = None) -> tuple[list[Row], dict]:
    """Run the checks (``run_checks``) and return ``(rows, results document)``; with ``output``, also write
    the document there. ValueError before any run if torch or transformers is missing or ``output`` cannot be
    written."""
    import importlib.util

    path = check_output(output) if output is not None else None
    for name, pin in (("torch", "torch==2.13.0; a CPU build is enough"), ("transformers", "transformers==5.23.0")):
        if importlib.util.find_spec(name) is None:
            raise ValueError(
                f"validate needs {name}: install the pinned version, the one data/realrun_results.json was recorded "
                f"with (pip install {pin})"
            )
    import torch

    rows = run_checks(quick=quick)
    import transformers  # the activation rows have imported it

    doc = results_document(rows, quick, torch.__version__, transformers.__version__)
    if path is not None:
        _write(path, doc)
    return rows, doc
