"""The device grid: one box per GPU, grouped by node; pick a GPU and see its TP group, CP group, pipeline and
DP group, each in its own colour, with the link each uses (NVLink inside a node, InfiniBand across).

Three views of the same ``Mesh``:

* ``DeviceGrid``: sliders for TP, CP, PP (DP follows), the axis order and GPUs per node. In the built book
  (static HTML, no kernel) the page carries, for every slider combination, what the library computed:
  the sizes, the **strides** (``Mesh.strides``), the link of every axis (``Mesh.link``) and, if a model is
  given, the plan's memory and bytes per dimension. Clicking a GPU runs ``group_from_strides`` in
  JavaScript, the same stride arithmetic as ``Mesh.group`` (tested against it for every combination):
  coordinate = ⌊rank ÷ stride⌋ mod size, base = rank − coordinate × stride, members = base + i × stride.
  Nothing else is derived in the page. In Jupyter ``DeviceGrid`` is a live ipywidget: the groups come
  from ``Mesh.group`` on every click (``MESHPLAN_STATIC=1`` leaves the live view out, as for exercises).
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
import json
from itertools import product
from typing import Mapping, Sequence

from .mesh import AXES, DEFAULT_ORDER, Mesh
from .widgets import static_and_live_bundle

AXIS_COLOURS = {"tp": "#1f77b4", "cp": "#2ca02c", "pp": "#ff7f0e", "dp": "#9467bd"}
AXIS_NAMES = {"tp": "TP group", "cp": "CP group", "pp": "pipeline (PP)", "dp": "DP group"}
LINK_NAMES = {"nvlink": "NVLink", "infiniband": "InfiniBand", None: "none"}
ORDERS = ("tp-cp-pp-dp", "tp-cp-dp-pp", "dp-pp-cp-tp")
MAX_COMBINATIONS = 400


def group_from_strides(rank: int, size: int, stride: int) -> tuple[int, ...]:
    """The ranks of ``rank``'s group along an axis of ``size`` with ``stride`` (what the page's JavaScript does):
    c = ⌊rank/stride⌋ mod size; base = rank − c·stride; members base + i·stride, i < size."""
    c = (rank // stride) % size
    base = rank - c * stride
    return tuple(base + i * stride for i in range(size))


def nodes_spanned(mesh: Mesh, rank: int, axis: str) -> int:
    """How many nodes the group of ``rank`` along ``axis`` (or ``"ep"``) touches."""
    return len({mesh.node(r) for r in mesh.group(rank, axis)})


def combination(gpus: int, tp: int, cp: int, pp: int, order: str = DEFAULT_ORDER, gpus_per_node: int = 8,
                ep: int = 1) -> dict:
    """What the page carries for one slider combination: sizes, strides and links (ValueError if the mesh
    is invalid: tp × cp × pp must divide gpus, gpus_per_node must divide gpus beyond one node)."""
    inner = tp * cp * pp
    if gpus % inner:
        raise ValueError(f"tp×cp×pp = {tp}×{cp}×{pp} = {inner} does not divide gpus={gpus}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise ValueError(f"gpus_per_node={gpus_per_node} does not divide gpus={gpus}")
    mesh = Mesh({"tp": tp, "cp": cp, "pp": pp, "dp": gpus // inner}, order, gpus_per_node, ep)
    return {"sizes": {a: mesh.sizes[a] for a in AXES}, "strides": dict(mesh.strides),
            "links": {a: mesh.link(a) for a in AXES}, "gpn": gpus_per_node}


def _plan_summary(model, gpus, tp, cp, pp, order, gpn, plan_kw) -> str:
    from .plan import DIMS, Plan, evaluate
    from .units import fmt_gb, fmt_pct
    r = evaluate(Plan.create(model, gpus=gpus, tp=tp, cp=cp, pp=pp, order=order, gpus_per_node=gpn, **plan_kw))
    mem = r.memory_bytes
    comm = " · ".join(f"{d.upper()} {fmt_gb(r.comm_bytes_per_step[d])} ({LINK_NAMES[r.link[d]]})"
                      for d in DIMS if r.link[d]) or "none"
    bubble = f"; bubble (p−1)/(m·v) {fmt_pct(r.bubble)}" if r.plan.pp > 1 else ""
    return (f"{r.plan.model.name}: per GPU {fmt_gb(mem['model_states'])} model states + "
            f"{fmt_gb(mem['activations'])} activations = {fmt_gb(mem['total'])} "
            f"({'fits' if r.fits else 'does not fit'} in {fmt_gb(r.plan.gpu_memory_bytes, 0)}); "
            f"bytes per GPU per step: {comm}{bubble}")


class DeviceGrid:
    """A clickable grid of ``gpus`` GPUs with sliders for TP, CP, PP, the axis order and GPUs per node.

    Args:
        id: a short unique id for the page.
        gpus: world size (up to a few thousand; drawn readably up to at least 1,024).
        tp, cp, pp, orders, gpus_per_node: the values each slider offers.
        defaults: slider name → starting value; ``rank``: the GPU selected at first.
        model: optional model name; each combination then shows that plan's memory and traffic,
            evaluated with ``plan_kw`` (e.g. ``zero=1, recompute="full"``).
    """

    def __init__(self, id: str, gpus: int, tp: Sequence[int] = (1, 2, 4, 8), cp: Sequence[int] = (1, 2, 4, 8),
                 pp: Sequence[int] = (1, 2, 4, 8), orders: Sequence[str] = ORDERS,
                 gpus_per_node: Sequence[int] = (8, 4), defaults: Mapping | None = None, rank: int = 0,
                 model: str | None = None, plan_kw: Mapping | None = None):
        if not id.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"grid id={id!r} must use letters, digits, '-' or '_'")
        self.id, self.gpus, self.model, self.plan_kw = id, gpus, model, dict(plan_kw or {})
        self.sliders = {"tp": list(tp), "cp": list(cp), "pp": list(pp), "order": list(orders),
                        "gpus_per_node": list(gpus_per_node)}
        n = 1
        for vals in self.sliders.values():
            n *= len(vals)
        if n > MAX_COMBINATIONS:
            raise ValueError(f"{n} slider combinations; keep the page small (at most {MAX_COMBINATIONS})")
        self.defaults = {k: (defaults or {}).get(k, v[0]) for k, v in self.sliders.items()}
        for k, v in self.defaults.items():
            if v not in self.sliders[k]:
                raise ValueError(f"default {k}={v!r} is not one of the slider's values")
        if not 0 <= rank < gpus:
            raise ValueError(f"rank={rank} is not in 0..{gpus - 1}")
        self.rank = rank

    # ------------------------------------------------------------------ the library's values
    def entry(self, tp, cp, pp, order, gpus_per_node) -> dict:
        """One combination: ``combination(...)`` plus the plan summary, or ``{"error": message}``."""
        try:
            out = combination(self.gpus, tp, cp, pp, order, gpus_per_node)
        except ValueError as exc:
            return {"error": str(exc)}
        if self.model is not None:
            try:
                out["summary"] = _plan_summary(self.model, self.gpus, tp, cp, pp, order, gpus_per_node,
                                               self.plan_kw)
            except ValueError as exc:
                out["summary"] = f"Not a valid plan for {self.model}: {exc}"
        return out

    def table(self) -> dict[str, dict]:
        """Every combination, keyed by slider indices joined with commas (as ``widgets.Exercise``)."""
        names = list(self.sliders)
        return {",".join(map(str, idx)): self.entry(**{n: self.sliders[n][i] for n, i in zip(names, idx)})
                for idx in product(*(range(len(self.sliders[n])) for n in names))}

    def mesh(self, tp, cp, pp, order, gpus_per_node) -> Mesh:
        c = combination(self.gpus, tp, cp, pp, order, gpus_per_node)
        return Mesh(c["sizes"], order, gpus_per_node)

    # ------------------------------------------------------------------ static HTML
    def to_html(self) -> str:
        esc = html.escape
        names = list(self.sliders)
        labels = {"tp": "TP", "cp": "CP", "pp": "PP", "order": "axis order (inner → outer)",
                  "gpus_per_node": "GPUs per node"}
        data = {"gpus": self.gpus, "rank": self.rank, "names": names,
                "values": {n: [str(v) for v in self.sliders[n]] for n in names}, "table": self.table(),
                "colours": AXIS_COLOURS, "axisNames": AXIS_NAMES, "linkNames": {"nvlink": "NVLink",
                                                                                 "infiniband": "InfiniBand"}}
        rows = []
        for n in names:
            vals = self.sliders[n]
            i = vals.index(self.defaults[n])
            rows.append(f'<label class="mp-slider-row">{esc(labels[n])} <input type="range" class="mp-slider" '
                        f'data-name="{n}" min="0" max="{len(vals) - 1}" step="1" value="{i}" '
                        f'aria-label="{esc(labels[n])}"> <output class="mp-value">{esc(str(vals[i]))}</output>'
                        f'</label>')
        payload = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")
        legend = "".join(
            f'<div class="mp-legend-row" data-axis="{a}"><span style="display:inline-block;width:0.9em;'
            f'height:0.9em;background:{AXIS_COLOURS[a]};margin-right:0.3em"></span><b>{AXIS_NAMES[a]}</b> '
            f'<span class="mp-size"></span> · <span class="mp-link"></span> · '
            f'<span class="mp-members"></span></div>' for a in AXES)
        return (f'<div class="mp-grid" id="mp-grid-{self.id}" style="border:1px solid #ccc;border-radius:6px;'
                f'padding:0.6em 1em;margin:0.8em 0">\n'
                f'<p><strong>Device grid, {self.gpus:,} GPUs.</strong> Click a GPU: its TP group, CP group, '
                f'pipeline and DP group light up, each in its own colour. DP = GPUs ÷ (TP × CP × PP).</p>\n'
                + "".join(r + "<br>\n" for r in rows)
                + '<div class="mp-grid-error" style="color:#b00"></div>\n'
                  '<div class="mp-grid-summary" style="margin:0.3em 0"></div>\n'
                  '<div class="mp-grid-selected" style="margin:0.3em 0"></div>\n'
                  f'<div class="mp-grid-legend">{legend}</div>\n'
                  '<div class="mp-grid-nodes" style="display:flex;flex-wrap:wrap;gap:4px;margin-top:0.5em"></div>\n'
                  f'<script type="application/json" class="mp-grid-data">{payload}</script>\n'
                  f'<script>{_JS.replace("__ID__", "mp-grid-" + self.id)}</script>\n</div>')

    def _repr_mimebundle_(self, include=None, exclude=None):
        return static_and_live_bundle(f"DeviceGrid {self.id!r}: {self.gpus} GPUs", self.to_html(), self.live)

    # ------------------------------------------------------------------ live widget
    def live(self):
        """The live ipywidget: sliders, a GPU selector (clickable buttons up to 128 GPUs) and the grid
        drawn by ``grid_html`` with groups from ``Mesh.group`` (None without ipywidgets)."""
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover
            return None
        sl = {n: w.SelectionSlider(options=[(str(v), v) for v in vals], value=self.defaults[n], description=n,
                                   continuous_update=False, style={"description_width": "initial"})
              for n, vals in self.sliders.items()}
        gpu = w.BoundedIntText(value=self.rank, min=0, max=self.gpus - 1, description="GPU")
        out = w.HTML()

        def redraw(_=None):
            values = {n: s.value for n, s in sl.items()}
            e = self.entry(**values)
            if "error" in e:
                out.value = f"<div class='mp-grid-error'>{html.escape(e['error'])}</div>"
                return
            body = grid_html(self.mesh(**values), gpu.value)
            if "summary" in e:
                body = f"<div>{html.escape(e['summary'])}</div>" + body
            out.value = body

        for s in sl.values():
            s.observe(redraw, names="value")
        gpu.observe(redraw, names="value")
        extra = []
        if self.gpus <= 128:
            buttons = []
            for r in range(self.gpus):
                b = w.Button(description=str(r), layout=w.Layout(width="42px", height="24px", padding="0"))
                b.on_click(lambda _b, r=r: setattr(gpu, "value", r))
                buttons.append(b)
            extra = [w.HTML("click a GPU:"), w.GridBox(buttons, layout=w.Layout(
                grid_template_columns=f"repeat({min(self.gpus, 16)}, 44px)"))]
        redraw()
        return w.VBox([*sl.values(), gpu, *extra, out])


def grid_html(mesh: Mesh, rank: int) -> str:
    """The grid as plain HTML (no script): the groups of ``rank`` from ``Mesh.group``, coloured by axis."""
    colour = {}
    for a in AXES:
        for r in mesh.group(rank, a):
            if r != rank:
                colour[r] = AXIS_COLOURS[a]
    n, g = mesh.world_size, mesh.gpus_per_node
    cell = 30 if n <= 64 else (18 if n <= 256 else 9)
    nodes = []
    for start in range(0, n, g):
        cells = "".join(
            f'<div title="GPU {r}" style="width:{cell}px;height:{cell}px;font-size:{max(cell // 3, 6)}px;'
            f'line-height:{cell}px;text-align:center;background:{colour.get(r, "#eee")};'
            f'{"outline:2px solid #000;" if r == rank else ""}color:{"#fff" if r in colour else "#333"}">'
            f'{r if n <= 256 else ""}</div>' for r in range(start, min(start + g, n)))
        nodes.append(f'<div style="display:flex;gap:1px;border:1px solid #888;padding:1px">{cells}</div>')
    legend = "".join(
        f'<div><span style="color:{AXIS_COLOURS[a]}">■</span> {AXIS_NAMES[a]} (size {mesh.size(a)}, '
        f'{LINK_NAMES[mesh.link(a)]}): {_members(mesh.group(rank, a))}</div>' for a in AXES)
    return (f"<div><b>GPU {rank}</b> on node {mesh.node(rank)}</div>{legend}"
            f'<div style="display:flex;flex-wrap:wrap;gap:4px;margin-top:0.4em">{"".join(nodes)}</div>')


def _members(group: Sequence[int], limit: int = 16) -> str:
    """'0, 1, 2, 3' or '0, 8, 16, … (128 GPUs)' (the page's JavaScript writes the same text)."""
    if len(group) <= limit:
        return ", ".join(map(str, group))
    return ", ".join(map(str, group[:limit])) + f", … ({len(group)} GPUs)"


def plot_grid(mesh: Mesh, rank: int = 0, ax=None, title: str | None = None, axes: Sequence[str] = AXES,
              highlight: Mapping[str, Sequence[int]] | None = None):
    """A matplotlib picture of the grid: one square per GPU, nodes as framed rows, the groups of ``rank``
    along ``axes`` coloured (``highlight`` adds named groups, e.g. an EP group, in grey-blue). Returns the
    figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    n, g = mesh.world_size, mesh.gpus_per_node
    n_nodes = -(-n // g)
    per_row = max(1, min(n_nodes, 64 // g))
    rows = -(-n_nodes // per_row)
    if ax is None:
        width_units = per_row * (g + 0.6)
        scale = min(9.0 / width_units, 0.35)
        fig, ax = plt.subplots(figsize=(width_units * scale + 3.2, rows * 1.5 * scale + 1.0))
    fig = ax.figure
    colour = {}
    extra = {"ep": "#17becf"}
    for name, members in (highlight or {}).items():
        for r in members:
            colour[r] = extra.get(name, "#17becf")
    for a in axes:
        for r in mesh.group(rank, a):
            if r != rank:
                colour[r] = AXIS_COLOURS[a]
    for node in range(n_nodes):
        row, col = divmod(node, per_row)
        x0, y0 = col * (g + 0.6), -row * 1.5
        ax.add_patch(Rectangle((x0 - 0.15, y0 - 0.15), min(g, n) + 0.3, 1.3, fill=False, lw=0.8, ec="#666"))
        for i in range(min(g, n - node * g)):
            r = node * g + i
            ax.add_patch(Rectangle((x0 + i, y0), 0.9, 1.0, color=colour.get(r, "#e6e6e6"),
                                   ec="black" if r == rank else None, lw=1.5 if r == rank else 0))
            if n <= 64:
                ax.text(x0 + i + 0.45, y0 + 0.5, str(r), ha="center", va="center", fontsize=7,
                        color="white" if r in colour else "#333")
    ax.set_xlim(-0.5, per_row * (g + 0.6))
    ax.set_ylim(-(rows - 1) * 1.5 - 0.5, 1.5)
    ax.set_aspect("equal")
    ax.axis("off")
    handles = [Patch(color=AXIS_COLOURS[a], label=f"{AXIS_NAMES[a]} ({mesh.size(a)}, {LINK_NAMES[mesh.link(a)]})")
               for a in axes if mesh.size(a) > 1]
    handles += [Patch(color=extra.get(k, "#17becf"), label=f"{k.upper()} group ({len(v)})")
                for k, v in (highlight or {}).items()]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(title or f"{n:,} GPUs, {g} per node, order {mesh.order}: the groups of GPU {rank}", fontsize=10)
    fig.tight_layout()
    return fig


# The page's script: draws the nodes, applies the library's strides (group_from_strides) on click.
_JS = r"""
(function(){
var root=document.getElementById("__ID__");if(!root)return;
var D=JSON.parse(root.querySelector(".mp-grid-data").textContent),AX=["tp","cp","pp","dp"];
var sliders=root.querySelectorAll(".mp-slider"),box=root.querySelector(".mp-grid-nodes"),rank=D.rank,cells=[];
function key(){var k=[];for(var i=0;i<sliders.length;i++)k.push(sliders[i].value);return k.join(",");}
function group(r,size,stride){var c=Math.floor(r/stride)%size,b=r-c*stride,o=[];for(var i=0;i<size;i++)o.push(b+i*stride);return o;}
function members(g){return g.length<=16?g.join(", "):g.slice(0,16).join(", ")+", \u2026 ("+g.length+" GPUs)";}
function draw(){
  var e=D.table[key()];box.innerHTML="";cells=[];
  root.querySelector(".mp-grid-error").textContent=e.error?("Not a valid mesh: "+e.error):"";
  root.querySelector(".mp-grid-summary").textContent=e.summary||"";
  root.querySelector(".mp-grid-legend").style.display=e.error?"none":"";
  if(e.error){root.querySelector(".mp-grid-selected").textContent="";return;}
  var n=D.gpus,g=e.gpn,cs=n<=64?30:(n<=256?18:9);
  for(var s=0;s<n;s+=g){var nd=document.createElement("div");nd.className="mp-node";
    nd.style.cssText="display:flex;gap:1px;border:1px solid #888;padding:1px";
    for(var r=s;r<Math.min(s+g,n);r++){var c=document.createElement("div");c.className="mp-gpu";c.dataset.rank=r;
      c.title="GPU "+r+", node "+Math.floor(r/g);c.textContent=n<=256?r:"";
      c.style.cssText="width:"+cs+"px;height:"+cs+"px;font-size:"+Math.max(Math.floor(cs/3),6)+"px;line-height:"+cs+"px;text-align:center;cursor:pointer;background:#eee;color:#333";
      c.addEventListener("click",function(ev){rank=+ev.currentTarget.dataset.rank;paint();});nd.appendChild(c);cells.push(c);}
    box.appendChild(nd);}
  if(rank>=n)rank=0;paint();}
function paint(){
  var e=D.table[key()];if(e.error)return;
  cells.forEach(function(c){c.style.background="#eee";c.style.color="#333";c.style.outline="";delete c.dataset.group;c.removeAttribute("data-selected");});
  AX.forEach(function(a){var gr=group(rank,e.sizes[a],e.strides[a]);
    gr.forEach(function(r){if(r!==rank){cells[r].style.background=D.colours[a];cells[r].style.color="#fff";cells[r].dataset.group=a;}});
    var row=root.querySelector('.mp-legend-row[data-axis="'+a+'"]');
    row.querySelector(".mp-size").textContent="size "+e.sizes[a];
    row.querySelector(".mp-link").textContent=e.links[a]?D.linkNames[e.links[a]]:"no traffic";
    row.querySelector(".mp-members").textContent=members(gr);});
  cells[rank].style.outline="2px solid #000";cells[rank].dataset.selected="1";
  root.querySelector(".mp-grid-selected").textContent="GPU "+rank+" on node "+Math.floor(rank/e.gpn);}
sliders.forEach(function(s){s.addEventListener("input",function(){
  s.parentNode.querySelector(".mp-value").textContent=D.values[s.dataset.name][+s.value];draw();});});
draw();
})();
"""
