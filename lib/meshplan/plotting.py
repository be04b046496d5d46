"""Figures of the library's results (matplotlib). Each function returns the ``Figure`` and prints nothing;
the same input gives the same picture (no randomness, fixed colours and sizes).

``gantt`` draws a simulated pipeline step (``schedule.Timeline``): one row per device, one box per
operation, coloured by kind (F forward, B backward for inputs, W backward for weights, BW full backward,
F&B DualPipe's overlapped pair drawn as a split box), labelled with the micro-batch number when the box
is wide enough. Later chunks of a device (interleaved, DualPipe's second copy) are drawn hatched.

    >>> from meshplan.schedule import simulate
    >>> fig = gantt(simulate("1f1b", 4, 8))
    >>> len(fig.axes)
    1
"""

from __future__ import annotations

from typing import Sequence

COLORS = {"F": "#4C72B0", "B": "#55A868", "W": "#CCB974", "BW": "#2E8B57", "F&B": "#8172B2"}
KIND_LABELS = {"F": "F (forward)", "B": "B (backward, inputs)", "W": "W (backward, weights)",
               "BW": "BW (full backward)", "F&B": "F&B (overlapped pair)"}


def _draw(ax, t, title: str | None = None, labels: bool = True) -> None:
    from matplotlib.patches import Patch

    from .schedule import NAMES

    kinds_seen = []
    for e in t.events:
        y = e.stage
        if e.kind == "F&B":
            mid = e.start + (e.end - e.start) * t.f / (t.f + t.b + t.w)
            parts = [(e.start, mid, "F", e.micro_batch, e.chunk), (mid, e.end, "BW", e.bw_micro_batch, e.bw_chunk)]
            ax.barh(y, e.end - e.start, left=e.start, height=0.86, color="none", edgecolor=COLORS["F&B"],
                    linewidth=1.6)
        else:
            parts = [(e.start, e.end, e.kind, e.micro_batch, e.chunk)]
        for a, z, kind, mb, chunk in parts:
            ax.barh(y, z - a, left=a, height=0.8, color=COLORS[kind], edgecolor="white", linewidth=0.5,
                    hatch="//" if chunk % 2 else None)
            if labels and (z - a) >= 0.6 * max(t.f, t.b, t.w, 0.5) / t.virtual_stages:
                ax.text((a + z) / 2, y, str(mb), ha="center", va="center", fontsize=7, color="white")
        if e.kind not in kinds_seen:
            kinds_seen.append(e.kind)
    ax.set_ylim(t.pp - 0.5, -0.5)
    ax.set_yticks(range(t.pp), [f"GPU {s}" for s in range(t.pp)])
    ax.set_xlim(0, t.makespan)
    ax.set_xlabel("time (units of f)")
    handles = [Patch(facecolor=COLORS[k] if k != "F&B" else "none", edgecolor=COLORS[k], label=KIND_LABELS[k])
               for k in ("F", "B", "W", "BW", "F&B") if k in kinds_seen]
    if t.chunks_per_device > 1:
        handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="second chunk"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if title is None:
        v = f", v = {t.virtual_stages}" if t.kind == "interleaved" else ""
        title = (f"{NAMES[t.kind]}: p = {t.pp}, m = {t.micro_batches}{v}; bubble {100 * t.bubble:.1f} %, "
                 f"peak activations on GPU 0: {t.peak_activations[0]}")
    ax.set_title(title, fontsize=10, loc="left")


def gantt(timeline, title: str | None = None, width: float = 10.0):
    """A Gantt chart of one ``Timeline``; returns the Figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, 0.45 * timeline.pp + 1.3))
    _draw(ax, timeline, title)
    fig.tight_layout()
    return fig


def gantt_grid(timelines: Sequence, titles: Sequence[str] | None = None, width: float = 10.0):
    """Several timelines stacked on one shared time axis (side by side in time); returns the Figure."""
    import matplotlib.pyplot as plt

    n = len(timelines)
    heights = [0.45 * t.pp + 0.9 for t in timelines]
    fig, axes = plt.subplots(n, 1, figsize=(width, sum(heights) + 0.6), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    end = max(t.makespan for t in timelines)
    for i, (ax, t) in enumerate(zip(axes[:, 0], timelines)):
        _draw(ax, t, None if titles is None else titles[i])
        ax.set_xlim(0, end)
        if i < n - 1:
            ax.set_xlabel("")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------- static explorer


def timeline_svg(timeline, width: int = 760, row: int = 18) -> str:
    """A small, self-contained SVG Gantt chart of one ``Timeline`` (no matplotlib, no fonts beyond the
    page's): same colours as ``gantt``, later chunks lighter. Deterministic text."""
    t = timeline
    left, top = 52, 4
    scale = (width - left - 6) / t.makespan
    h = top + row * t.pp + 18
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'viewBox="0 0 {width} {h}" role="img" aria-label="pipeline timeline">']
    for s in range(t.pp):
        out.append(f'<text x="0" y="{top + row * s + row * 0.7:.0f}" font-size="11">GPU {s}</text>')
    for e in t.events:
        y = top + row * e.stage + 1
        parts = [(e.start, e.end, e.kind, e.chunk)]
        if e.kind == "F&B":
            mid = e.start + (e.end - e.start) * t.f / (t.f + t.b + t.w)
            parts = [(e.start, mid, "F", e.chunk), (mid, e.end, "BW", e.bw_chunk)]
        for a, z, kind, chunk in parts:
            op = ' fill-opacity="0.55"' if chunk % 2 else ""
            out.append(f'<rect x="{left + a * scale:.1f}" y="{y}" width="{max((z - a) * scale - 0.6, 0.4):.1f}" '
                       f'height="{row - 3}" fill="{COLORS[kind]}"{op}/>')
    out.append(f'<text x="{left}" y="{h - 3}" font-size="11">0</text>')
    out.append(f'<text x="{width - 6}" y="{h - 3}" font-size="11" text-anchor="end">{t.makespan:g}</text>')
    out.append("</svg>")
    return "".join(out)


_EXPLORER_JS = r"""
(function(){
var root=document.getElementById("__ID__");if(!root)return;
var data=JSON.parse(root.querySelector(".mp-data").textContent);
var sliders=root.querySelectorAll(".mp-slider"),view=root.querySelector(".mp-view"),cap=root.querySelector(".mp-caption");
function show(){var k=[];for(var i=0;i<sliders.length;i++){k.push(sliders[i].value);
  sliders[i].parentNode.querySelector(".mp-value").textContent=data.values[sliders[i].dataset.name][+sliders[i].value];}
  var r=data.table[k.join(",")];
  if(r.error){view.innerHTML="";cap.textContent="Not a valid schedule: "+r.error;}
  else{view.innerHTML=r.svg;cap.textContent=r.caption;}}
sliders.forEach(function(s){s.addEventListener("input",show);});
show();
})();
"""


class TimelineExplorer:
    """Sliders for schedule, p, m and v over a simulated timeline, working in the static book: every
    combination is simulated when the page is built and drawn as SVG (``timeline_svg``); a few lines of
    plain JavaScript show the chosen one. An invalid combination shows the library's message.

        >>> ex = TimelineExplorer("demo", kinds=["1f1b"], pps=[2], mbs=[4], vs=[1])
        >>> ex.table()["0,0,0,0"]["caption"][:34]
        '1F1B: p = 2, m = 4, v = 1; bubble '
    """

    def __init__(self, id: str, kinds, pps, mbs, vs, f: float = 1, b: float = 1, w: float = 1,
                 defaults: dict | None = None):
        import re

        if not re.match(r"^[A-Za-z0-9_-]+$", id):
            raise ValueError(f"explorer id={id!r} must use letters, digits, '-' or '_'")
        self.id = id
        self.sliders = {"schedule": list(kinds), "p": list(pps), "m": list(mbs), "v": list(vs)}
        self.times = (f, b, w)
        self.defaults = {k: (defaults or {}).get(k, vals[0]) for k, vals in self.sliders.items()}

    def __repr__(self) -> str:
        return f"TimelineExplorer({self.id!r}: {', '.join(f'{k} {v}' for k, v in self.sliders.items())})"

    def table(self) -> dict[str, dict]:
        from itertools import product

        from .schedule import NAMES, simulate

        out = {}
        names = list(self.sliders)
        for idx in product(*(range(len(self.sliders[n])) for n in names)):
            kind, p, m, v = (self.sliders[n][i] for n, i in zip(names, idx))
            try:
                t = simulate(kind, p, m, v, *self.times)
            except ValueError as exc:
                out[",".join(map(str, idx))] = {"error": str(exc)}
                continue
            out[",".join(map(str, idx))] = {
                "svg": timeline_svg(t), "error": None,
                "caption": (f"{NAMES[kind]}: p = {p}, m = {m}, v = {v}; bubble {100 * t.bubble:.1f} % of the "
                            f"ideal compute ({100 * t.bubble_share:.1f} % of the step); makespan {t.makespan:g}; "
                            f"peak activations per GPU {' '.join(map(str, t.peak_activations))}"),
            }
        return out

    def _repr_html_(self) -> str:
        import html
        import json

        esc = html.escape
        rows = []
        for n, vals in self.sliders.items():
            i = vals.index(self.defaults[n])
            rows.append(f'<label class="mp-slider-row">{esc(n)} <input type="range" class="mp-slider" '
                        f'data-name="{esc(n)}" min="0" max="{len(vals) - 1}" step="1" value="{i}" '
                        f'aria-label="{esc(n)}"> <output class="mp-value">{esc(str(vals[i]))}</output></label>')
        data = {"values": {n: [str(v) for v in vals] for n, vals in self.sliders.items()}, "table": self.table()}
        payload = json.dumps(data, sort_keys=True, ensure_ascii=True).replace("</", "<\\/")
        return (f'<div class="mp-explorer" id="mp-tl-{self.id}" style="border:1px solid #ccc;border-radius:6px;'
                f'padding:0.6em 1em;margin:0.8em 0">\n' + "<br>\n".join(rows)
                + '\n<div class="mp-view" style="margin-top:0.5em;overflow-x:auto"></div>\n'
                  '<div class="mp-caption" aria-live="polite"></div>\n'
                  f'<script type="application/json" class="mp-data">{payload}</script>\n'
                  f'<script>{_EXPLORER_JS.replace("__ID__", "mp-tl-" + self.id)}</script>\n</div>')
