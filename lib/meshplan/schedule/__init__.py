"""Pipeline schedules as simulated timelines: GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, DualPipe and
DualPipeV.

A schedule is, for each device (pipeline rank), the ordered list of the operations it runs. The package:

* ``inputs``: ``KINDS``, ``NAMES`` and the checks every entry point runs first (``check``, the size bound
  ``MAX_FORWARDS``, the times);
* ``order``: each schedule's per-device order, with its source (``orders``, ``Op``);
* ``simulation``: the event simulation and what it measures (``simulate``, ``replay`` of an explicit order,
  ``Timeline``, ``Event``, ``compare_kinds``);
* ``formulas``: the published bubbles in closed form (``formula_bubble``), for any size, and the DualPipe
  repository's comparison table (``README_TABLE``);
* ``text``: a timeline as text (``format_timeline``);

    >>> t = simulate("dualpipev", 4, 8)
    >>> t.bubble == formula_bubble("dualpipev", 4, 8), t.chunks_per_device, t.parameter_copies
    (True, 2, 1)
    >>> simulate("gpipe", 3000, 3000)
    Traceback (most recent call last):
    ...
    ValueError: pp × micro_batches = 9,000,000 is more than the 200,000 forward passes the simulator accepts ...
    >>> formula_bubble("gpipe", 3000, 3000)
    0.9996666666666667
"""

from __future__ import annotations

from meshplan.schedule.formulas import README_SOURCE, README_TABLE, formula_bubble
from meshplan.schedule.inputs import KINDS, MAX_FORWARDS, NAMES, OP_KINDS, check, check_size, check_times
from meshplan.schedule.order import Op, model_stages, orders, position
from meshplan.schedule.simulation import Action, Event, Timeline, compare_kinds, replay, simulate
from meshplan.schedule.text import format_timeline

__all__ = [
    "KINDS",
    "MAX_FORWARDS",
    "NAMES",
    "OP_KINDS",
    "README_SOURCE",
    "README_TABLE",
    "Action",
    "Event",
    "Op",
    "Timeline",
    "check",
    "check_size",
    "check_times",
    "compare_kinds",
    "format_timeline",
    "formula_bubble",
    "model_stages",
    "orders",
    "position",
    "replay",
    "simulate",
]
