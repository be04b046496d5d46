"""A simulated step as text: two header lines, then one row per device.

>>> from meshplan.schedule import simulate
>>> print(format_timeline(simulate("1f1b", 2, 2)).splitlines()[-1])
stage  1 | ... F0  BW0 === F1  BW1 === ... ...
"""

from __future__ import annotations

import math

from meshplan.schedule.inputs import NAMES
from meshplan.schedule.simulation import Timeline


def _grid(t: Timeline, max_cells: int) -> tuple[int, int] | None:
    """(unit, cells): the largest time unit (in the trace's integer units) that every start and duration is
    a whole multiple of, and the step's length in such units, if that is at most ``max_cells``; else None.
    Exact: the trace's times are integers, so no float rounding can put an operation outside the grid. None too when
    an operation that runs takes no time (``--w 0`` with ZB-H1's W): it has no cell to hold its label."""
    tr = t.trace
    if any(not tr.durations[op.kind] for ops in tr.orders for op in ops):
        return None
    durations = [d for d in tr.durations.values() if d]
    end = max((st[-1] + tr.durations[ops[-1].kind] for ops, st in zip(tr.orders, tr.starts) if st), default=0)
    if not durations or end > max_cells * max(durations):  # cells >= end / longest: cannot fit
        return None
    unit = math.gcd(*durations, *(s for st in tr.starts for s in st))
    return (unit, end // unit) if end // unit <= max_cells else None


def format_timeline(t: Timeline, max_cells: int = 240) -> str:
    """A text timeline: a header, then one row per device. When every operation is a whole number (at least one)
    of slots of a common unit and the step fits in ``max_cells`` slots, each slot is a cell (``.`` idle, an
    operation's label in its first slot, ``=`` in the rest); otherwise each row lists ``label@start``, so that an
    operation of zero time is listed too.

    >>> from meshplan.schedule import simulate
    >>> print(format_timeline(simulate("zb-h1", 2, 2, w=0)).splitlines()[-1])
    stage  1 | F0@1 B0@2 F1@3 B1@4 W0@5 W1@5
    """
    head = [
        (
            f"{NAMES.get(t.kind, t.kind)}: p = {t.pp}, m = {t.micro_batches}, v = {t.virtual_stages}, "
            f"chunks per device = {t.chunks_per_device}; "
            f"F = {t.f:g}, B = {t.b:g}, W = {t.w:g} (communication takes no time)"
        ),
        (
            f"bubble {100 * t.bubble:.1f} % of ideal compute ({100 * t.bubble_share:.1f} % of the step); "
            f"makespan {t.makespan:g}; peak activations per stage: {' '.join(map(str, t.peak_activations))}"
        ),
    ]
    grid = _grid(t, max_cells)
    rows = []
    if grid:
        tr, (unit, cells) = t.trace, grid
        width = max(len(e.label) for e in t.events) + 1
        for s, starts in enumerate(tr.starts):
            line = ["." * (width - 1)] * cells
            for e, start in zip(t.stage_events(s), starts):
                a, z = start // unit, (start + tr.durations[e.kind]) // unit
                line[a] = e.label.ljust(width - 1)
                for c in range(a + 1, z):
                    line[c] = "=" * (width - 1)
            rows.append(f"stage {s:>2} | " + " ".join(line).rstrip())
        head.append(f"one cell = {unit / tr.scale:g} time unit(s)")
    else:
        for s in range(t.pp):
            rows.append(f"stage {s:>2} | " + " ".join(f"{e.label}@{e.start:g}" for e in t.stage_events(s)))
    return "\n".join(head + rows)
