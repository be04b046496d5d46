"""Predict, then check: the course's interactive widgets, static in the book and live in Jupyter.

Every widget is a set of controls whose every combination the library computes when the book is built: the
page carries the answers as JSON and a small JavaScript runtime that looks them up (no kernel, no network);
in Jupyter the same object is a live ipywidget that calls the library. The parts:

* ``base``: ``StaticWidget`` (controls, dependent ranges, tables, payload, HTML, MIME bundle, live controls)
  and ``static_and_live_bundle``;
* ``predict``: reading a typed prediction (decimal comma, separators, units) and grading it (``compare``),
  mirrored by the page's JavaScript;
* ``exercise``: ``Exercise`` (predict a number or a word) and ``Checklist`` (pick a setting, see which lines
  pass and why);
* ``runtime``: the page's stylesheet and JavaScript;
* ``meshplan.course.grid.DeviceGrid`` and ``meshplan.course.plotting.TimelineExplorer`` are widgets on the same base.

    >>> from meshplan.parallel import zero
    >>> ex = Exercise("floor", "Model states per GPU on N GPUs with ZeRO-3?",
    ...               lambda n: zero.model_states_bytes(27_781_427_952, 3, n) / 1e9,
    ...               sliders={"n": [1, 8, 64]}, unit="GB")
    >>> ex.result(n=8).text
    '55.6 GB'
    >>> compare("55,6", ex.result(n=8), "GB")
    'Read as 55.6 GB. The library says 55.6 GB. Your prediction is off by +0.0 GB (+0 %): ✓ within 5 %.'
"""

from meshplan.widgets.base import STATIC_ENV, Control, LiveControls, StaticWidget, static_and_live_bundle
from meshplan.widgets.exercise import Check, Checklist, Exercise, Line
from meshplan.widgets.predict import Reading, Result, compare, fmt_fixed, fmt_sig, grade, read_prediction, reveal

__all__ = [
    "STATIC_ENV",
    "Check",
    "Checklist",
    "Control",
    "Exercise",
    "Line",
    "LiveControls",
    "Reading",
    "Result",
    "StaticWidget",
    "compare",
    "fmt_fixed",
    "fmt_sig",
    "grade",
    "read_prediction",
    "reveal",
    "static_and_live_bundle",
]
