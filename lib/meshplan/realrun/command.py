"""``python -m meshplan validate [--quick] [--json] [--output FILE]``: run the checks, print the table.

Exit code 1 if an exact row differs; 2 for bad input (the CLI's convention); torch is imported only here,
when the command runs, so ``python -m meshplan plan`` never loads it.
"""

from __future__ import annotations

import json
import sys

# (ranks for DDP, FSDP2 and ZeRO-1), (TP sizes), (real pipeline runs), (replay p, m), (wire sizes)
QUICK = dict(dp=(2, 4), tp=(2,), pp=[("GPipe", 1, 2), ("ZBVZeroBubble", 2, 2)], pp_m=4,
             replay=((2, 8), (4, 8)), wire=(2,))
FULL = dict(dp=(2, 4, 8), tp=(2, 4),
            pp=[("GPipe", 1, 2), ("GPipe", 1, 4), ("1F1B", 1, 4), ("Interleaved1F1B", 2, 2), ("ZBVZeroBubble", 2, 2)],
            pp_m=4, replay=((2, 8), (4, 8), (8, 16)), wire=(2, 4, 8))


def run_checks(quick: bool = True) -> list:
    """Every row of the chosen set, in a stable order (see ``QUICK`` and ``FULL``)."""
    from . import checks

    cfg = QUICK if quick else FULL
    rows = []
    for n in cfg["dp"]:
        rows += checks.ddp_rows(n)
    for n in cfg["dp"]:
        rows += checks.fsdp_rows(n)
    for n in cfg["dp"]:
        rows += checks.zero1_rows(n)
    for t in cfg["tp"]:
        rows += checks.tp_rows(t)
    rows += checks.pp_rows(cfg["pp"], cfg["pp_m"], list(cfg["replay"]))
    for n in cfg["wire"]:
        rows += checks.wire_rows(n)
    return rows


def _validate(args) -> int:
    try:
        import torch
    except ImportError:
        raise ValueError("validate needs torch: install the pinned CPU build (torch==2.13.0, requirements.txt)") from None
    from .rows import format_table, results_document

    rows = run_checks(quick=args.quick)
    if args.output:
        doc = results_document(rows, args.quick, torch.__version__)
        with open(args.output, "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], ensure_ascii=False))
    else:
        print(format_table(rows))
        failed = [r for r in rows if r.failed]
        print(f"\n{len(rows)} rows: {sum(r.agrees for r in rows)} agree, "
              f"{sum(not r.agrees and not r.exact for r in rows)} depart as explained, {len(failed)} exact rows differ")
    for r in rows:
        if r.failed:
            print(f"meshplan: exact row differs: {r.check}: predicted {r.predicted}, measured {r.measured}",
                  file=sys.stderr)
    return 1 if any(r.failed for r in rows) else 0


def add_command(subparsers) -> None:
    p = subparsers.add_parser("validate", help="check the formulas against real PyTorch runs (gloo, CPU, forked ranks)")
    p.add_argument("--quick", action="store_true", help="ranks ≤ 4 only (the CI subset)")
    p.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    p.add_argument("--output", default=None, help="also write the results document (rows + provenance) here")
    p.set_defaults(run=_validate)
