"""The device grid: one box per GPU, grouped by node; pick a GPU and see its TP group, CP group, pipeline and
DP group, each in its own colour, with the link each uses (NVLink inside a node, InfiniBand across).

Three views of the same ``Mesh``:

* ``DeviceGrid`` (a ``widgets.StaticWidget``): sliders for TP, CP, PP (DP follows), radio buttons for the
  axis order and GPUs per node. In the built book (static HTML, no kernel) the page carries, for every
  combination of the controls, what the library computed:
  the sizes, the **strides** (``Mesh.strides``), the link of every axis (``Mesh.link``) and, if a model is
  given, the plan's memory and bytes per dimension. Clicking a GPU runs ``group_from_strides`` in
  JavaScript, the same stride arithmetic as ``Mesh.group`` (tested against it for every combination):
  coordinate = ⌊rank ÷ stride⌋ mod size, base = rank − coordinate × stride, members = base + i × stride.
  Nothing else is derived in the page. A combination the library rejects is flagged with its message as
  soon as a control moves there. In Jupyter ``DeviceGrid`` is a live ipywidget: the groups come from
  ``Mesh.group`` on every click (``MESHPLAN_STATIC=1`` leaves the live view out, as for exercises).
* ``grid_html(mesh, rank)``: the same picture as plain HTML, groups computed here (the live view's body).
* ``plot_grid(mesh, rank)``: a matplotlib figure of the same grid (a static picture for the page).

Groups along different axes meet only at the chosen GPU, so every other GPU has at most one colour.

    >>> m = Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 8}, gpus_per_node=8)
    >>> group_from_strides(11, m.sizes["pp"], m.strides["pp"]) == m.group(11, "pp")
    True
    >>> group_from_strides(11, 4, 2), nodes_spanned(m, 11, "dp")
    ((9, 11, 13, 15), 8)
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from meshplan.plan import Plan, evaluate
from meshplan.plan.reporting import summary_line
from meshplan.spec.dims import ParallelDims
from meshplan.spec.mesh import AXES, DEFAULT_ORDER, Mesh, check_nodes
from meshplan.widgets.base import LiveControls, StaticWidget, text_on

AXIS_COLOURS = {"tp": "#1f77b4", "cp": "#2ca02c", "pp": "#ff7f0e", "dp": "#9467bd"}
AXIS_NAMES = {"tp": "TP group", "cp": "CP group", "pp": "pipeline (PP)", "dp": "DP group"}
LINK_NAMES = {"nvlink": "NVLink", "infiniband": "InfiniBand", None: "none"}
ORDERS = ("tp-cp-pp-dp", "tp-cp-dp-pp", "dp-pp-cp-tp")
MAX_COMBINATIONS = 400


AXIS_TEXT = {a: text_on(c) for a, c in AXIS_COLOURS.items()}


def group_from_strides(rank: int, size: int, stride: int) -> tuple[int, ...]:
    """The ranks of ``rank``'s group along an axis of ``size`` with ``stride`` (what the page's JavaScript does):
    c = ⌊rank/stride⌋ mod size; base = rank − c·stride; members base + i·stride, i < size."""
    c = (rank // stride) % size
    base = rank - c * stride
    return tuple(base + i * stride for i in range(size))


def nodes_spanned(mesh: Mesh, rank: int, axis: str) -> int:
    """How many nodes the group of ``rank`` along ``axis`` (or ``"ep"``) touches."""
    return len({mesh.node(r) for r in mesh.group(rank, axis)})


def combination(
    gpus: int, tp: int, cp: int, pp: int, order: str = DEFAULT_ORDER, gpus_per_node: int = 8, ep: int = 1
) -> dict:
    """What the page carries for one slider combination: sizes, strides and links (ValueError if the mesh
    is invalid: tp × cp × pp must divide gpus, gpus_per_node must divide gpus beyond one node)."""
    dims = ParallelDims.from_gpus(gpus, tp=tp, cp=cp, pp=pp, ep=ep, order=order)  # the one validation of a shape
    check_nodes(gpus, gpus_per_node)
    mesh = Mesh.from_dims(dims, gpus_per_node)
    return {
        "sizes": {a: mesh.sizes[a] for a in AXES},
        "strides": dict(mesh.strides),
        "links": {a: mesh.link(a) for a in AXES},
        "gpn": gpus_per_node,
    }


def _plan_summary(model, gpus, tp, cp, pp, order, gpn, plan_kw) -> str:
    """One line: the plan's memory per GPU and bytes per GPU per step by dimension, with links
    (``reporting.summary_line``, the formatter the command line and the book use)."""

    return summary_line(
        evaluate(Plan.create(model, gpus=gpus, tp=tp, cp=cp, pp=pp, order=order, gpus_per_node=gpn, **plan_kw))
    )


class DeviceGrid(StaticWidget):
    """A clickable grid of ``gpus`` GPUs with controls for TP, CP, PP, the axis order and GPUs per node.

    Args:
        id: a short unique id for the page.
        gpus: world size (up to a few thousand; drawn readably up to at least 1,024).
        tp, cp, pp, orders, gpus_per_node: the values each control offers.
        defaults: control name → starting value; ``rank``: the GPU selected at first.
        model: optional model name; each combination then shows that plan's memory and traffic,
            evaluated with ``plan_kw`` (e.g. ``zero=1, recompute="full"``).

    An invalid combination (tp × cp × pp does not divide the GPUs, or the model rejects the plan) is flagged
    with the library's message as soon as a control moves there; the last valid drawing stays, dimmed.
    """

    kind = "grid"
    what = "grid"
    id_prefix = "mp-grid-"
    max_combinations = MAX_COMBINATIONS
    LABELS: ClassVar[dict[str, str]] = {
        "tp": "TP",
        "cp": "CP",
        "pp": "PP",
        "order": "axis order (inner → outer)",
        "gpus_per_node": "GPUs per node",
    }

    def __init__(
        self,
        id: str,
        gpus: int,
        tp: Sequence[int] = (1, 2, 4, 8),
        cp: Sequence[int] = (1, 2, 4, 8),
        pp: Sequence[int] = (1, 2, 4, 8),
        orders: Sequence[str] = ORDERS,
        gpus_per_node: Sequence[int] = (8, 4),
        defaults: Mapping | None = None,
        rank: int = 0,
        model: str | None = None,
        plan_kw: Mapping | None = None,
    ):
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"gpus={gpus!r} must be a positive integer")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < gpus:
            raise ValueError(f"rank={rank} is not in 0..{gpus - 1}")
        self.gpus, self.rank, self.model, self.plan_kw = gpus, rank, model, dict(plan_kw or {})
        super().__init__(
            id,
            {"tp": tp, "cp": cp, "pp": pp, "order": orders, "gpus_per_node": gpus_per_node},
            labels=self.LABELS,
            defaults=defaults,
        )

    # ------------------------------------------------------------------ the library's values
    def entry(self, tp, cp, pp, order, gpus_per_node) -> dict:
        """One combination: ``combination(...)`` plus the plan summary, or ``{"error": message}``."""
        try:
            out = combination(self.gpus, tp, cp, pp, order, gpus_per_node)
        except ValueError as exc:
            return {"error": str(exc)}
        if self.model is not None:
            try:
                out["summary"] = _plan_summary(self.model, self.gpus, tp, cp, pp, order, gpus_per_node, self.plan_kw)
            except ValueError as exc:
                out["summary"] = f"Not a valid plan for {self.model}: {exc}"
        return out

    def mesh(self, tp, cp, pp, order, gpus_per_node) -> Mesh:
        c = combination(self.gpus, tp, cp, pp, order, gpus_per_node)
        return Mesh(c["sizes"], order, gpus_per_node)

    # ------------------------------------------------------------------ static HTML
    def payload(self) -> dict[str, Any]:
        return {
            **super().payload(),
            "gpus": self.gpus,
            "rank": self.rank,
            "colours": AXIS_COLOURS,
            "textColours": AXIS_TEXT,
            "axisNames": AXIS_NAMES,
            "linkNames": {k: v for k, v in LINK_NAMES.items() if k is not None},
        }

    def header_html(self) -> str:
        return (
            f"<p><strong>Device grid, {self.gpus:,} GPUs.</strong> Click a GPU: its TP group, CP group, "
            f"pipeline and DP group light up, each in its own colour. DP = GPUs ÷ (TP × CP × PP).</p>"
        )

    def body_html(self) -> str:
        legend = "".join(
            f'<div class="mp-legend-row" data-axis="{a}"><span class="mp-swatch" style="background:'
            f'{AXIS_COLOURS[a]}"></span><b>{AXIS_NAMES[a]}</b> <span class="mp-size"></span> · '
            f'<span class="mp-link"></span> · <span class="mp-members"></span></div>'
            for a in AXES
        )
        return (
            '<div class="mp-status" aria-live="polite"></div>'
            '<div class="mp-grid-summary"></div><div class="mp-grid-selected"></div>'
            f'<div class="mp-grid-legend">{legend}</div><div class="mp-grid-nodes"></div>'
        )

    def text_plain(self) -> str:
        return f"DeviceGrid {self.id!r}: {self.gpus} GPUs"

    # ------------------------------------------------------------------ live widget
    def live_view(self, controls: LiveControls):
        """The controls, a GPU selector (clickable buttons up to 128 GPUs) and the grid drawn by ``grid_html``
        with groups from ``Mesh.group``."""
        import ipywidgets as w

        gpu = w.BoundedIntText(value=self.rank, min=0, max=self.gpus - 1, description="GPU")
        out = w.HTML()

        def redraw() -> None:
            values = controls.values()
            e = self.entry(**values)
            if "error" in e:
                out.value = f"<div class='mp-invalid'>Not a valid mesh: {html.escape(e['error'])}</div>"
                return
            body = grid_html(self.mesh(**values), gpu.value)
            out.value = (f"<div>{html.escape(e['summary'])}</div>" if "summary" in e else "") + body

        controls.observe(redraw)
        gpu.observe(lambda _: redraw(), names="value")
        extra = []
        if self.gpus <= 128:
            buttons = []
            for r in range(self.gpus):
                b = w.Button(description=str(r), layout=w.Layout(width="42px", height="24px", padding="0"))
                b.on_click(lambda _b, r=r: setattr(gpu, "value", r))
                buttons.append(b)
            extra = [
                w.HTML("click a GPU:"),
                w.GridBox(buttons, layout=w.Layout(grid_template_columns=f"repeat({min(self.gpus, 16)}, 44px)")),
            ]
        redraw()
        return w.VBox([*controls.widgets.values(), gpu, *extra, out])

    css = (
        ".mp-grid .mp-grid-nodes{display:flex;flex-wrap:wrap;gap:4px;margin-top:.5em}"
        ".mp-grid .mp-node{display:flex;gap:1px;border:1px solid var(--mp-border);padding:1px;border-radius:3px}"
        ".mp-grid .mp-gpu{padding:0;border:0;border-radius:2px;margin:0;text-align:center;cursor:pointer;"
        "font:inherit;font-variant-numeric:tabular-nums;background:var(--mp-surface);color:var(--mp-fg)}"
        ".mp-grid .mp-gpu[data-selected]{outline:2px solid var(--mp-fg);outline-offset:-2px}"
        ".mp-grid .mp-grid-summary,.mp-grid .mp-grid-selected{margin:.3em 0}"
        ".mp-grid .mp-status{min-height:1.5em}@media (max-width:560px){.mp-grid .mp-status{min-height:3em}}"
    )

    # The page renderer (meshplan/widgets/static/grid.js): draws the nodes and, on a click, the groups from the
    # library's strides (the arithmetic of group_from_strides).
    script_file = "grid.js"


def grid_html(mesh: Mesh, rank: int) -> str:
    """The grid as plain HTML (no script): the groups of ``rank`` from ``Mesh.group``, coloured by axis."""
    colour = {}
    for a in AXES:
        for r in mesh.group(rank, a):
            if r != rank:
                colour[r] = AXIS_COLOURS[a]
    n, g = mesh.world_size, mesh.gpus_per_node
    cell, font = (32, 12) if n <= 64 else ((26, 11) if n <= 256 else (10, 11))
    text = {r: AXIS_TEXT[a] for a in AXES for r in mesh.group(rank, a) if r != rank}
    nodes = []
    for start in range(0, n, g):
        cells = "".join(
            f'<div title="GPU {r}" style="width:{cell}px;height:{cell}px;font-size:{font}px;'
            f"line-height:{cell}px;text-align:center;background:{colour.get(r, '#eceef1')};"
            f'{"outline:2px solid #111;outline-offset:-2px;" if r == rank else ""}color:{text.get(r, "#222")}">'
            f"{r if n <= 256 else ''}</div>"
            for r in range(start, min(start + g, n))
        )
        nodes.append(f'<div style="display:flex;gap:1px;border:1px solid #888;padding:1px">{cells}</div>')
    legend = "".join(
        f'<div><span style="color:{AXIS_COLOURS[a]}">■</span> {AXIS_NAMES[a]} (size {mesh.size(a)}, '
        f"{LINK_NAMES[mesh.link(a)]}): {_members(mesh.group(rank, a))}</div>"
        for a in AXES
    )
    return (
        f"<div><b>GPU {rank}</b> on node {mesh.node(rank)}</div>{legend}"
        f'<div style="display:flex;flex-wrap:wrap;gap:4px;margin-top:0.4em">{"".join(nodes)}</div>'
    )


def _members(group: Sequence[int], limit: int = 16) -> str:
    """'0, 1, 2, 3' or '0, 8, 16, … (128 GPUs)' (the page's JavaScript writes the same text)."""
    if len(group) <= limit:
        return ", ".join(map(str, group))
    return ", ".join(map(str, group[:limit])) + f", … ({len(group)} GPUs)"


def plot_grid(
    mesh: Mesh,
    rank: int = 0,
    ax=None,
    title: str | None = None,
    axes: Sequence[str] = AXES,
    highlight: Mapping[str, Sequence[int]] | None = None,
):
    """A matplotlib picture of the grid: one square per GPU, nodes as framed rows, the groups of ``rank``
    along ``axes`` coloured (``highlight`` adds named groups, e.g. an EP group, in cyan), the legend below.
    At most 7.2 inches wide (shown unscaled in the book's column) with text of at least 9 pt; GPU numbers up
    to 64 GPUs (32 to a row), 64 GPUs to a row beyond. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle

    n, g = mesh.world_size, mesh.gpus_per_node
    n_nodes = -(-n // g)
    numbers = n <= 64
    per_row = max(1, min(n_nodes, (32 if numbers else 64) // g))
    rows = -(-n_nodes // per_row)
    handles = [
        Patch(color=AXIS_COLOURS[a], label=f"{AXIS_NAMES[a]} ({mesh.size(a)}, {LINK_NAMES[mesh.link(a)]})")
        for a in axes
        if mesh.size(a) > 1
    ]
    extra = {"ep": "#17becf"}
    handles += [
        Patch(color=extra.get(k, "#17becf"), label=f"{k.upper()} group ({len(v)})")
        for k, v in (highlight or {}).items()
    ]
    if ax is None:
        width_units = per_row * (g + 0.6)
        scale = min(6.8 / width_units, 0.35)
        fig, ax = plt.subplots(figsize=(width_units * scale + 0.4, rows * 1.5 * scale + 0.8 + 0.25 * len(handles)))
    fig = ax.figure
    colour, text = {}, {}
    for name, members in (highlight or {}).items():
        for r in members:
            colour[r] = extra.get(name, "#17becf")
            text[r] = text_on(colour[r])
    for a in axes:
        for r in mesh.group(rank, a):
            if r != rank:
                colour[r], text[r] = AXIS_COLOURS[a], AXIS_TEXT[a]
    frames, squares, faces, edges, widths = [], [], [], [], []
    for node in range(n_nodes):
        row, col = divmod(node, per_row)
        x0, y0 = col * (g + 0.6), -row * 1.5
        frames.append(Rectangle((x0 - 0.15, y0 - 0.15), min(g, n) + 0.3, 1.3))
        for i in range(min(g, n - node * g)):
            r = node * g + i
            squares.append(Rectangle((x0 + i, y0), 0.9, 1.0))
            faces.append(colour.get(r, "#e6e6e6"))
            edges.append("black" if r == rank else "none")
            widths.append(1.5 if r == rank else 0.0)
            if numbers:
                ax.text(
                    x0 + i + 0.45, y0 + 0.5, str(r), ha="center", va="center", fontsize=9, color=text.get(r, "#222")
                )
    # two artists, not one per GPU: a 2,048-GPU grid is drawn in milliseconds
    ax.add_collection(PatchCollection(frames, facecolors="none", edgecolors="#666", linewidths=0.8), autolim=False)
    gpus = PatchCollection(squares, facecolors=faces, edgecolors=edges, linewidths=widths)
    gpus.set_gid("gpus")  # one square per GPU, in rank order
    ax.add_collection(gpus, autolim=False)
    ax.set_xlim(-0.5, per_row * (g + 0.6))
    ax.set_ylim(-(rows - 1) * 1.5 - 0.5, 1.5)
    ax.set_aspect("equal")
    ax.axis("off")
    if handles:
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(0.0, 0.0),
            fontsize=10,
            frameon=False,
            ncol=1 if len(handles) > 2 or per_row * g < 16 else 2,
            borderaxespad=0.2,
        )
    ax.set_title(
        title or f"{n:,} GPUs, {g} per node, order {mesh.order}: the groups of GPU {rank}", fontsize=11, loc="left"
    )
    fig.tight_layout()
    return fig
