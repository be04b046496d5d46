"""``python -m meshplan schedule``: argparse wiring only; the work is ``simulate`` and ``format_timeline``.

The times are parsed as numbers here and validated by the library (``inputs.check_times``), so the command
line and the library refuse the same values with the same message.
"""

from __future__ import annotations

import argparse
import json

from .inputs import KINDS
from .simulation import simulate
from .text import format_timeline


def _number(name: str):
    def conv(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be a non-negative number") from None
        return int(value) if value.is_integer() else value
    return conv


def _run(args: argparse.Namespace) -> int:
    t = simulate(args.kind, args.pp, args.micro_batches, args.virtual_stages, args.f, args.b, args.w)
    print(json.dumps(t.to_dict()) if args.json else format_timeline(t))
    return 0


def add_command(subparsers) -> None:
    """Register ``python -m meshplan schedule``."""
    from ..cli import _int

    p = subparsers.add_parser("schedule", help="simulate a pipeline schedule: timeline, bubble, peak activations")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--pp", required=True, type=_int("pp"))
    p.add_argument("--micro-batches", required=True, type=_int("micro-batches"))
    p.add_argument("--virtual-stages", type=_int("virtual-stages"), default=1)
    p.add_argument("--f", type=_number("f"), default=1, help="forward time of one micro-batch through one stage")
    p.add_argument("--b", type=_number("b"), default=1, help="backward-for-inputs time")
    p.add_argument("--w", type=_number("w"), default=1, help="backward-for-weights time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_run)
