"""Figures of the library's results: matplotlib charts for the page, SVG and a static explorer for the
pipeline schedules. Every function returns its figure (or text) and prints nothing; the same input gives the
same picture (no randomness, fixed colours and sizes).

``gantt`` draws a simulated pipeline step (``schedule.Timeline``): one row per device, one box per operation,
coloured by kind (F forward, B backward for inputs, W backward for weights, BW full backward, F&B DualPipe's
overlapped pair drawn as a split box), labelled with the micro-batch number where the box is wide enough.
Later chunks of a device (interleaved, DualPipe's second copy) are hatched. ``gantt_grid`` stacks several on
one time axis. Sizes: the figures are at most ``FIG_WIDTH`` inches wide at the notebook's 100 dpi (720 px,
narrower than the book's 757-px column at a 1366-px desktop window, so they are shown unscaled) and their
smallest text is 9 pt, 12.5 px on the page.

``TimelineExplorer`` shows every schedule of the same p and m drawn on one time axis in the static book: the
longest makespan sets the scale, so 1F1B, ZB-H1 and DualPipe are visibly shorter than GPipe.

    >>> from meshplan.schedule import simulate
    >>> fig = gantt(simulate("1f1b", 4, 8))
    >>> len(fig.axes), float(fig.get_figwidth()) <= FIG_WIDTH
    (1, True)
"""

from __future__ import annotations

import html
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from meshplan.schedule import KINDS, NAMES, simulate
from meshplan.widgets.base import LiveControls, StaticWidget, text_on

COLORS = {"F": "#4C72B0", "B": "#55A868", "W": "#CCB974", "BW": "#2E8B57", "F&B": "#8172B2"}
KIND_LABELS = {
    "F": "F (forward)",
    "B": "B (backward, inputs)",
    "W": "W (backward, weights)",
    "BW": "BW (full backward)",
    "F&B": "F&B (overlapped pair)",
}
TEXT_ON = {k: text_on(c) for k, c in COLORS.items()}
FIG_WIDTH = 7.2  # inches: 720 px at 100 dpi, shown unscaled in the book's 757-px column
FONT = {"box": 9, "tick": 10, "legend": 10, "label": 10, "title": 11}  # points; 9 pt = 12.5 px at 100 dpi


def _title(t, with_sizes: bool = True) -> str:
    """'1F1B: p = 4, m = 8; bubble 37.5 %' and the peak on GPU 0 below; without the sizes, only v shows."""

    v = t.virtual_stages if t.kind == "interleaved" or t.virtual_stages > 1 else None
    if with_sizes:
        sizes = f": p = {t.pp}, m = {t.micro_batches}" + (f", v = {v}" if v else "")
    else:
        sizes = f" (v = {v})" if v else ""
    return f"{NAMES[t.kind]}{sizes}; bubble {100 * t.bubble:.1f} %\npeak activations on GPU 0: {t.peak_activations[0]}"


def _parts(t, e) -> list[tuple[float, float, str, int, int]]:
    """An event as boxes (start, end, kind, micro-batch, chunk): F&B splits into its F and BW parts."""
    if e.kind == "F&B":
        mid = e.start + (e.end - e.start) * t.f / (t.f + t.b + t.w)
        return [(e.start, mid, "F", e.micro_batch, e.chunk), (mid, e.end, "BW", e.bw_micro_batch, e.bw_chunk)]
    return [(e.start, e.end, e.kind, e.micro_batch, e.chunk)]


def _handles(kinds_seen: Collection[str], chunked: bool) -> list:
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=COLORS[k] if k != "F&B" else "none", edgecolor=COLORS[k], label=KIND_LABELS[k])
        for k in ("F", "B", "W", "BW", "F&B")
        if k in kinds_seen
    ]
    if chunked:
        handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="second chunk"))
    return handles


def _draw(ax, t, title: str | None, end: float, px_per_unit: float) -> None:
    """The boxes of one timeline, one ``PolyCollection`` per colour and hatch (drawn as one artist each: a chart
    of 700 boxes is built in milliseconds, not the second that one ``barh`` per box takes), F&B outlines first."""
    from matplotlib.collections import PolyCollection

    def box(a: float, z: float, y: int, height: float) -> list[tuple[float, float]]:
        lo, hi = y - height / 2, y + height / 2
        return [(a, lo), (z, lo), (z, hi), (a, hi)]

    outlines: list[list[tuple[float, float]]] = []
    boxes: dict[tuple[str, bool], list[list[tuple[float, float]]]] = {}
    for e in t.events:
        y = e.stage
        if e.kind == "F&B":
            outlines.append(box(e.start, e.end, y, 0.86))
        for a, z, kind, mb, chunk in _parts(t, e):
            boxes.setdefault((kind, bool(chunk % 2)), []).append(box(a, z, y, 0.8))
            if (z - a) * px_per_unit >= len(str(mb)) * FONT["box"] * 100 / 72 * 0.62 + 3:
                ax.text(
                    (a + z) / 2,
                    y,
                    str(mb),
                    ha="center",
                    va="center",
                    fontsize=FONT["box"],
                    color=TEXT_ON[kind],
                    in_layout=False,  # inside the axes: tight_layout need not measure 500 labels
                )
    if outlines:
        ax.add_collection(
            PolyCollection(outlines, facecolors="none", edgecolors=COLORS["F&B"], linewidths=1.6), autolim=False
        )
    for (kind, hatched), verts in boxes.items():
        ax.add_collection(
            PolyCollection(
                verts, facecolors=COLORS[kind], edgecolors="white", linewidths=0.5, hatch="//" if hatched else None
            ),
            autolim=False,
        )
    ax.set_ylim(t.pp - 0.5, -0.5)
    ax.set_yticks(range(t.pp), [f"GPU {s}" for s in range(t.pp)])
    ax.set_xlim(0, end)
    ax.tick_params(labelsize=FONT["tick"])
    ax.set_title(_title(t) if title is None else title, fontsize=FONT["title"], loc="left")


def _px_per_unit(fig, end: float) -> float:
    return fig.get_figwidth() * fig.dpi * 0.8 / max(end, 1e-9)


def _legend_above(ax, handles) -> None:
    """The legend in rows of three above the axes, the axes' left title lifted clear of it."""
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=min(len(handles), 3),
        fontsize=FONT["legend"],
        frameon=False,
        borderaxespad=0.2,
    )
    ax.set_title(ax.get_title(loc="left"), fontsize=FONT["title"], loc="left", pad=8 + 16 * -(-len(handles) // 3))


def gantt(timeline, title: str | None = None, width: float = FIG_WIDTH):
    """A Gantt chart of one ``Timeline``, with its legend above the chart; returns the Figure."""
    import matplotlib.pyplot as plt

    t = timeline
    fig, ax = plt.subplots(figsize=(width, 0.32 * t.pp + 2.1))
    _draw(ax, t, title, t.makespan, _px_per_unit(fig, t.makespan))
    ax.set_xlabel("time (units of f, one forward of one stage)", fontsize=FONT["label"])
    _legend_above(ax, _handles({e.kind for e in t.events}, t.chunks_per_device > 1))
    fig.tight_layout()
    return fig


def gantt_grid(timelines: Sequence, titles: Sequence[str] | None = None, width: float = FIG_WIDTH):
    """Several timelines stacked on one shared time axis (the longest makespan sets it), one legend on top;
    returns the Figure."""
    import matplotlib.pyplot as plt

    n = len(timelines)
    same = len({(t.pp, t.micro_batches) for t in timelines}) == 1
    heights = [0.3 * t.pp + 0.75 for t in timelines]
    fig, axes = plt.subplots(
        n, 1, figsize=(width, sum(heights) + 1.2), sharex=True, gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    end = max(t.makespan for t in timelines)
    for i, (ax, t) in enumerate(zip(axes[:, 0], timelines)):
        title = titles[i] if titles is not None else _title(t, with_sizes=not same).replace("\n", ", ")
        _draw(ax, t, title, end, _px_per_unit(fig, end))
    axes[-1, 0].set_xlabel("time (units of f, one forward of one stage)", fontsize=FONT["label"])
    handles = _handles({e.kind for t in timelines for e in t.events}, any(t.chunks_per_device > 1 for t in timelines))
    head = axes[0, 0]
    if same:
        t0 = timelines[0]
        fig.suptitle(
            f"p = {t0.pp} stages, m = {t0.micro_batches} micro-batches", fontsize=FONT["title"], x=0.02, ha="left"
        )
    _legend_above(head, handles)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- SVG and explorer
SVG_LEFT, SVG_RIGHT, SVG_ROW, SVG_AXIS = 52, 10, 18, 22  # px: label column, right margin, row height, time axis
MIN_PX_PER_UNIT = 7.0  # below this the drawing scrolls inside its box instead of shrinking further


def _tick_step(px_per_unit: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, ... units whose ticks are at least 40 px apart."""
    step = 1.0
    while step * px_per_unit < 40:
        for k in (2, 2.5, 2):
            step *= k
            if step * px_per_unit >= 40:
                break
    return step


def timeline_svg(timeline, width: int = 760, row: int = SVG_ROW, scale: float | None = None) -> str:
    """A self-contained SVG Gantt chart of one ``Timeline`` (no fonts beyond the page's): the colours of
    ``gantt``, micro-batch numbers where they fit, later chunks hatched, and a time axis. ``scale`` (px per
    time unit) draws several timelines to one scale; by default the makespan fills ``width``. Text is 11 px."""
    t = timeline
    scale = (width - SVG_LEFT - SVG_RIGHT) / t.makespan if scale is None else scale
    w = round(SVG_LEFT + t.makespan * scale + SVG_RIGHT)
    h = row * t.pp + SVG_AXIS
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
            f'aria-label="pipeline timeline" font-size="11" fill="currentColor">'
            '<defs><pattern id="mp-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="2.5" height="6" fill="#fff" fill-opacity="0.45"/>'
            "</pattern></defs>"
        )
    ]
    for s in range(t.pp):
        out.append(f'<text class="mp-gpu-label" x="0" y="{row * s + row * 0.72:.1f}">GPU {s}</text>')
    for e in t.events:
        y = row * e.stage + 1
        for a, z, kind, mb, chunk in _parts(t, e):
            x, bw = SVG_LEFT + a * scale, max((z - a) * scale - 1, 0.5)
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{bw:.1f}" height="{row - 3}" fill="{COLORS[kind]}" '
                f'data-kind="{kind}"/>'
            )
            if chunk % 2:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{bw:.1f}" height="{row - 3}" fill="url(#mp-hatch)"/>')
            if bw >= 7 * len(str(mb)) + 4:
                out.append(
                    f'<text class="mp-mb" x="{x + bw / 2:.1f}" y="{y + row * 0.62:.1f}" text-anchor="middle" '
                    f'fill="{TEXT_ON[kind]}">{mb}</text>'
                )
        if e.kind == "F&B":
            out.append(
                f'<rect x="{SVG_LEFT + e.start * scale:.1f}" y="{y - 0.5}" '
                f'width="{max((e.end - e.start) * scale - 1, 0.5):.1f}" height="{row - 2}" fill="none" '
                f'stroke="{COLORS["F&B"]}" stroke-width="1.5"/>'
            )
    base = row * t.pp
    out.append(
        f'<line x1="{SVG_LEFT}" x2="{SVG_LEFT + t.makespan * scale:.1f}" y1="{base + 1}" y2="{base + 1}" '
        'stroke="currentColor" stroke-width="1"/>'
    )
    step, k = _tick_step(scale), 0
    while k * step <= t.makespan + 1e-9:
        x = SVG_LEFT + k * step * scale
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base + 1}" y2="{base + 5}" stroke="currentColor"/>'
            f'<text class="mp-tick" x="{x:.1f}" y="{base + 17}" text-anchor="middle">{k * step:g}</text>'
        )
        k += 1
    out.append("</svg>")
    return "".join(out)


def _takes_chunks(kind: str) -> bool:
    """Whether ``simulate`` accepts v > 1 chunks per GPU for ``kind`` (asked of the library at small sizes)."""

    try:
        simulate(kind, 2, 4, 2)
    except ValueError:
        return False
    return True


def _encode(t) -> list[str]:
    """A timeline's events for the page, one string per GPU: 'F3@1.5-2', 'B0.1@7-7.5' (chunk 1),
    'F&B3|5.1@7-10' (F of micro-batch 3, chunk 0, overlapped with BW of micro-batch 5, chunk 1)."""

    def num(x: float) -> str:
        return repr(float(x)).removesuffix(".0")

    rows: list[list[str]] = [[] for _ in range(t.pp)]
    for e in t.events:
        text = f"{e.kind}{e.micro_batch}" + (f".{e.chunk}" if e.chunk else "")
        if e.kind == "F&B":
            text += f"|{e.bw_micro_batch}" + (f".{e.bw_chunk}" if e.bw_chunk else "")
        rows[e.stage].append(f"{text}@{num(e.start)}-{num(e.end)}")
    return [" ".join(r) for r in rows]


class TimelineExplorer(StaticWidget):
    """Every schedule in ``kinds`` for the chosen p, m (and v for the interleaved schedule), simulated by
    ``schedule.simulate`` when the page is built and drawn on one time axis: the longest makespan fills the
    box and the others are drawn to the same scale. The chosen ``schedule`` is highlighted and described
    below; a schedule that cannot run at this setting shows the library's message in place of its drawing.

        >>> ex = TimelineExplorer("demo", kinds=["1f1b"], pps=[2], mbs=[4], vs=[1])
        >>> ex.table()["0,0,0,0"]["caption"][:34]
        '1F1B: p = 2, m = 4, v = 1; bubble '
    """

    kind = "explorer"
    what = "explorer"
    id_prefix = "mp-tl-"
    max_combinations = 400

    def __init__(
        self,
        id: str,
        kinds: Sequence[str],
        pps: Sequence[int],
        mbs: Sequence[int],
        vs: Sequence[int] = (1,),
        f: float = 1,
        b: float = 1,
        w: float = 1,
        defaults: Mapping[str, Any] | None = None,
    ):

        kinds = list(kinds)
        for k in kinds:
            if k not in KINDS:
                raise ValueError(f"kind={k!r} must be one of {', '.join(KINDS)}")
        self.times = (f, b, w)
        self.vs = list(vs)
        self._chunked = {k: _takes_chunks(k) for k in kinds}
        self._timelines: dict[tuple, Any] = {}
        super().__init__(
            id,
            {"schedule": kinds, "p": pps, "m": mbs, "v": self.vs},
            defaults=defaults,
            labels={"schedule": "schedule described", "p": "stages p", "m": "micro-batches m", "v": "chunks per GPU v"},
            texts={"schedule": {k: NAMES[k] for k in kinds}},
            inputs={"schedule": "radio" if len(kinds) <= 6 else "select"},
            depends={"v": lambda schedule: self.vs if self._chunked[schedule] else [1]},
        )

    def __repr__(self) -> str:
        return f"TimelineExplorer({self.id!r}: {', '.join(f'{k} {v}' for k, v in self.sliders.items())})"

    # ------------------------------------------------------------------ the library's values
    def timeline(self, kind: str, p: int, m: int, v: int):
        """The simulated timeline (v applies to schedules with chunks only); ValueError if it cannot run."""

        key = (kind, p, m, v if self._chunked[kind] else 1)
        if key not in self._timelines:
            try:
                self._timelines[key] = simulate(*key, *self.times)
            except ValueError as exc:
                self._timelines[key] = exc
        t = self._timelines[key]
        if isinstance(t, ValueError):
            raise t
        return t

    def entry(self, schedule: str, p: int, m: int, v: int) -> dict:
        """The chosen schedule's description, or ``{"error": message}``."""

        try:
            t = self.timeline(schedule, p, m, v)
        except ValueError as exc:
            return {"error": str(exc)}
        return {
            "error": None,
            "caption": (
                f"{NAMES[schedule]}: p = {p}, m = {m}, v = {t.virtual_stages}; bubble {100 * t.bubble:.1f} % of the "
                f"ideal compute ({100 * t.bubble_share:.1f} % of the step); makespan {t.makespan:g}; "
                f"peak activations per GPU {' '.join(map(str, t.peak_activations))}"
            ),
        }

    def rows(self, p: int, m: int, v: int) -> list[dict]:
        """One row per schedule for the drawing at (p, m, v): its timeline id and label, or its error."""

        out = []
        for kind in self.control("schedule").values:
            try:
                t = self.timeline(kind, p, m, v)
            except ValueError as exc:
                out.append({"kind": kind, "name": NAMES[kind], "error": str(exc)})
                continue
            out.append(
                {
                    "kind": kind,
                    "name": NAMES[kind],
                    "t": f"{kind}|{p}|{m}|{t.virtual_stages}",
                    "label": f"makespan {t.makespan:g}, bubble {100 * t.bubble:.1f} %"
                    + (f", v = {t.virtual_stages}" if self._chunked[kind] else ""),
                }
            )
        return out

    def payload(self) -> dict[str, Any]:
        names = ("p", "m", "v")
        rows: dict[str, list[dict]] = {}
        timelines: dict[str, dict] = {}
        seen: set[str] = set()
        chunked = False
        for values in self._grid():
            rs = self.rows(**values)
            rows[self.key(values, names)] = rs
            for r in rs:
                if "t" in r and r["t"] not in timelines:
                    t = self.timeline(r["kind"], values["p"], values["m"], values["v"])
                    timelines[r["t"]] = {"pp": t.pp, "makespan": t.makespan, "ev": _encode(t)}
                    seen.update(e.kind for e in t.events)
                    chunked = chunked or t.chunks_per_device > 1
        legend = [[k, KIND_LABELS[k], COLORS[k]] for k in ("F", "B", "W", "BW", "F&B") if k in seen]
        return {
            **super().payload(),
            "rows": rows,
            "timelines": timelines,
            "legend": legend,
            "chunked": chunked,
            "colours": COLORS,
            "textColours": TEXT_ON,
            "minScale": MIN_PX_PER_UNIT,
            "times": list(self.times),
            "layout": {"left": SVG_LEFT, "right": SVG_RIGHT, "row": SVG_ROW, "axis": SVG_AXIS},
        }

    def _grid(self) -> list[dict]:
        c = {n: self.control(n).values for n in ("p", "m", "v")}
        return [{"p": p, "m": m, "v": v} for p in c["p"] for m in c["m"] for v in c["v"]]

    # ------------------------------------------------------------------ static HTML
    def header_html(self) -> str:
        return (
            "<p><strong>Pipeline schedules on one time axis.</strong> Every schedule runs the same p stages "
            "and m micro-batches; a shorter bar is a shorter step. Numbers in the boxes are micro-batches.</p>"
        )

    def body_html(self) -> str:
        return (
            '<div class="mp-legend"></div><p class="mp-tl-hint" hidden>Scroll sideways for the rest of each '
            "schedule \u2192</p>"
            '<div class="mp-tl-view mp-view mp-scroll"></div>'
            '<div class="mp-caption" aria-live="polite"></div>'
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def text_plain(self) -> str:
        return repr(self)

    # ------------------------------------------------------------------ live widget
    def live_view(self, controls: LiveControls):
        import ipywidgets as w

        out = w.HTML()

        def redraw() -> None:
            values = controls.values()
            rows = self.rows(values["p"], values["m"], values["v"])
            ends = [self.timeline(r["kind"], values["p"], values["m"], values["v"]).makespan for r in rows if "t" in r]
            scale = max((720 - SVG_LEFT - SVG_RIGHT) / max(ends), MIN_PX_PER_UNIT) if ends else 1.0
            parts = []
            for r in rows:
                strong = "font-weight:bold;" if r["kind"] == values["schedule"] else ""
                parts.append(
                    f"<div style='{strong}margin-top:6px'>{html.escape(r['name'])}"
                    + (f" — {html.escape(r['label'])}" if "label" in r else "")
                    + "</div>"
                )
                if "error" in r:
                    parts.append(f"<div class='mp-invalid'>Not valid here: {html.escape(r['error'])}</div>")
                else:
                    parts.append(
                        timeline_svg(self.timeline(r["kind"], values["p"], values["m"], values["v"]), scale=scale)
                    )
            e = self.entry(**values)
            parts.append(
                f"<div>{html.escape(e['caption'] if not e['error'] else 'Not a valid schedule: ' + e['error'])}</div>"
            )
            out.value = "<div style='overflow-x:auto'>" + "".join(parts) + "</div>"

        controls.observe(redraw)
        redraw()
        return w.VBox([*controls.widgets.values(), out])

    css = (
        ".mp-explorer .mp-tl-row{margin:.5em 0 .2em;padding-left:.5em;border-left:3px solid transparent}"
        ".mp-explorer .mp-tl-row.mp-current{border-left-color:var(--mp-accent)}"
        ".mp-explorer .mp-tl-title{font-weight:600}.mp-explorer .mp-tl-label{color:var(--mp-muted)}"
        ".mp-explorer .mp-tl-track{display:flex;width:max-content;margin-top:.2em}"
        ".mp-explorer .mp-tl-track svg{display:block;overflow:visible}"
        ".mp-explorer .mp-tl-gpus{position:sticky;left:0;z-index:1;flex:0 0 auto;font-size:11px;"
        "background:var(--mp-bg)}"
        ".mp-explorer .mp-tl-hint{margin:.2em 0;font-size:.85em;color:var(--mp-muted);text-align:right}"
        ".mp-explorer .mp-tl-view.mp-overflows{border-right:1px dashed var(--mp-border)}"
        ".mp-explorer .mp-caption{min-height:3em;margin-top:.4em}"
    )

    script_file = "timeline.js"  # the page renderer (meshplan/widgets/static/)


# ---------------------------------------------------------------- memory through one training step
TERM_COLORS = {
    "parameters": "#4C72B0",
    "gradients": "#DD8452",
    "optimizer states": "#8172B2",
    "unsharded parameters": "#64B5CD",
    "all-gather buffers": "#8C8C8C",
    "reduce-scatter buffers": "#CCB974",
    "activations": "#55A868",
    "temporaries": "#C44E52",
}
MOMENT_LABELS = {
    "loss forward": "loss\nforward",
    "loss backward": "loss\nbackward",
    "backward of the last layer": "last layer's\nbackward",
    "backward of the first layer": "first layer's\nbackward",
    "optimizer step": "optimizer\nstep",
    "model states + activations": "states +\nactivations",
}
# the tracker's phases (``realrun.peak``) that each ledger moment stands for (its largest point)
MEASURED_PHASE = {
    "loss forward": "loss forward",
    "loss backward": "loss backward",
    "optimizer step": "optimizer",
}


def measured_moments(measurement, layers: int) -> dict[str, float]:
    """A ``realrun.peak.PeakMeasurement``'s phase maxima (bytes) under the ledger moments' names: the loss's
    forward and backward, the last and the first decoder layer's backward, the optimizer step (the last micro-batch
    when there are several)."""
    out: dict[str, float] = {}
    m = measurement.micro_batches
    names = {**MEASURED_PHASE, "backward of the last layer": f"backward of layer {layers - 1}",
             "backward of the first layer": "backward of layer 0"}  # fmt: skip
    for moment, phase in names.items():
        key = phase if (m == 1 or phase == "optimizer") else f"{phase} (micro-batch {m})"
        if key in measurement.phases:
            out[moment] = float(measurement.phases[key]["total"])
    return out


def memory_moments(
    moments: Sequence,
    measured: Mapping[str, float] | None = None,
    budget: float | None = None,
    title: str = "",
    width: float = FIG_WIDTH,
):
    """One stacked bar per moment of a step (``parallel.peak.Moment``, in step order), by term, in GB; ``measured``
    (moment name → bytes, e.g. ``measured_moments``) draws the tracker's measured total of each as a black
    diamond, ``budget`` (bytes) the device's room as a dashed line. Text at least 9 pt.

        >>> from meshplan.plan import Plan, evaluate
        >>> r = evaluate(Plan.create("llama-3.1-8b", gpus=8, dp=8, zero=3, accounting="fsdp2"))
        >>> fig = memory_moments(r.by_stage[0].moments)
        >>> len(fig.axes[0].patches) >= len(r.by_stage[0].moments)
        True
    """
    import matplotlib.pyplot as plt

    if not moments:
        raise ValueError("memory_moments needs at least one moment")
    fig, ax = plt.subplots(figsize=(width, 3.6), dpi=100)
    xs = range(len(moments))
    bottom = [0.0] * len(moments)
    for term, colour in TERM_COLORS.items():
        heights = [m.terms.get(term, 0.0) / 1e9 for m in moments]
        if any(heights):
            ax.bar(xs, heights, 0.62, bottom=bottom, color=colour, label=term, edgecolor="white", linewidth=0.5)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if measured:
        pts = [(i, measured[m.name] / 1e9) for i, m in enumerate(moments) if m.name in measured]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="D", s=36, color="black", zorder=3,
                       label="measured (FSDPMemTracker)")  # fmt: skip
    if budget is not None:
        ax.axhline(budget / 1e9, color="black", linestyle="--", linewidth=1, label="room on the device")
    ax.set_xticks(list(xs), [MOMENT_LABELS.get(m.name, m.name) for m in moments])
    ax.tick_params(labelsize=9)
    ax.set_ylabel("GB allocated per GPU", fontsize=9)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- alt text
def describe(fig: Any) -> str:
    """A figure's text alternative, from the texts it draws: its title, then each panel's title, axes and legend
    ("Figure: Step time ... Panel 1, "..." : x axis GB, y axis s; legend: a, b."). Written by the figure's own
    strings, so it cannot drift from what the image shows; the book puts it in the image's ``alt``
    (``scripts/save_notebooks.sh`` copies it into the cell's ``mystnb.image.alt``; ``tests/test_figure_alt.py``)."""
    parts = []
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    axes = [ax for ax in fig.get_axes() if ax.get_visible() and (ax.get_title() or ax.get_xlabel() or ax.has_data())]
    if not title and len(axes) == 1:
        title = axes[0].get_title()
    parts.append(f"Figure: {title.strip() or 'a chart'}" + ("." if not title.rstrip().endswith(".") else ""))
    for i, ax in enumerate(axes, 1):
        bits = []
        if len(axes) > 1 and ax.get_title():
            bits.append(f"“{ax.get_title().strip()}”")
        if ax.get_xlabel():
            bits.append(f"x axis {ax.get_xlabel().strip()}")
        if ax.get_ylabel():
            bits.append(f"y axis {ax.get_ylabel().strip()}")
        legend = ax.get_legend()
        if legend is not None:
            names = [t.get_text().strip() for t in legend.get_texts() if t.get_text().strip()]
            if names:
                bits.append("legend: " + ", ".join(names))
        if bits:
            parts.append((f"Panel {i}: " if len(axes) > 1 else "") + "; ".join(bits) + ".")
    legends = [lg for lg in getattr(fig, "legends", []) if lg is not None]
    for lg in legends:
        names = [t.get_text().strip() for t in lg.get_texts() if t.get_text().strip()]
        if names:
            parts.append("Legend: " + ", ".join(names) + ".")
    return " ".join(" ".join(parts).split())


def describe_figures() -> None:
    """Make every matplotlib figure this kernel displays carry ``describe(fig)`` as its text/plain (instead of
    ``<Figure size 720x440 with 1 Axes>``): what a text-only reader sees, and the book's alt text. It sets the
    ``_repr_pretty_`` hook IPython's plain-text formatter calls (a type printer registered with ``for_type`` is not
    consulted for figures under IPython 9.18's inline backend: measured), so it is meant for the notebooks' setup
    cells, not for library code."""
    from matplotlib.figure import Figure

    Figure._repr_pretty_ = lambda self, p, cycle: p.text(describe(self))  # type: ignore[attr-defined]
