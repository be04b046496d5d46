"""Figures for reading: the text of ``gantt``, ``gantt_grid`` and ``plot_grid`` is at least 11 px as the book
shows them at a 1366-px desktop window, and the explorer's SVG draws every schedule to one scale.

How the book shows a figure: the notebook's inline backend saves a PNG at the figure's 100 dpi with a tight
bounding box, and the page scales it down to the content column if it is wider. The column is 757 px at a
1366-px window with the book's theme (sphinx-book-theme 1.3 / pydata-sphinx-theme 0.17, measured in Chromium
with both sidebars); 740 px leaves the output area its padding.
"""

from __future__ import annotations

import io
import re
import struct

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from meshplan import Mesh, schedule
from meshplan.course.grid import plot_grid
from meshplan.course.plotting import COLORS, FIG_WIDTH, gantt, gantt_grid, timeline_svg

COLUMN_PX = 740
DPI = 100


def _shown(fig) -> tuple[int, float]:
    """(PNG width in px, the smallest text in px as the page shows it)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=DPI)
    width = struct.unpack(">I", buf.getvalue()[16:20])[0]
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip() and t.get_visible()]
    plt.close(fig)
    return width, min(sizes) * DPI / 72 * min(1.0, COLUMN_PX / width)


def _deepseek_grid():
    mesh = Mesh({"tp": 1, "cp": 1, "pp": 16, "dp": 128}, "tp-cp-ep-dp-pp", 8, ep=64)
    return plot_grid(
        mesh,
        0,
        axes=("pp",),
        highlight={"ep": mesh.group(0, "ep")},
        title="DeepSeek-V3: 2,048 GPUs in Megatron's order; GPU 0's EP group spans 8 nodes",
    )


FIGURES = {
    "gantt 1f1b p4 m8": lambda: gantt(schedule.simulate("1f1b", 4, 8)),
    "gantt interleaved p4 m8 v2": lambda: gantt(schedule.simulate("interleaved", 4, 8, 2)),
    "gantt dualpipe p8 m16": lambda: gantt(schedule.simulate("dualpipe", 8, 16)),
    "grid of every kind p4 m8 v2": lambda: gantt_grid(list(schedule.compare_kinds(schedule.KINDS, 4, 8, 2).values())),
    "grid 1f1b dualpipe p8 m16": lambda: gantt_grid(list(schedule.compare_kinds(["1f1b", "dualpipe"], 8, 16).values())),
    "plot_grid 8": lambda: plot_grid(Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 1}, gpus_per_node=8), rank=3),
    "plot_grid 64": lambda: plot_grid(Mesh({"tp": 2, "cp": 2, "pp": 4, "dp": 4}, gpus_per_node=8), rank=3),
    "plot_grid 64 on 4-GPU nodes": lambda: plot_grid(Mesh({"tp": 4, "cp": 1, "pp": 4, "dp": 4}, gpus_per_node=4)),
    "plot_grid 1024": lambda: plot_grid(Mesh({"tp": 8, "cp": 1, "pp": 16, "dp": 8}, gpus_per_node=8), rank=5),
    "plot_grid 2048 with EP": lambda: _deepseek_grid(),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_text_is_at_least_11_px_on_the_desktop_page(name):
    fig = FIGURES[name]()
    assert fig.get_figwidth() <= FIG_WIDTH
    width, smallest = _shown(fig)
    assert width <= COLUMN_PX, width  # shown unscaled
    assert smallest >= 11, smallest


def test_gantt_labels_micro_batches_where_they_fit_and_has_one_legend():
    fig = gantt(schedule.simulate("1f1b", 4, 8))
    ax = fig.axes[0]
    numbers = [t.get_text() for t in ax.texts]
    assert sorted(numbers) == sorted(str(mb) for mb in range(8) for _ in range(8))  # F and BW of 8 on 4 GPUs
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["F (forward)", "BW (full backward)"]
    assert ax.get_title(loc="left") == "1F1B: p = 4, m = 8; bubble 37.5 %\npeak activations on GPU 0: 4"
    plt.close(fig)
    fig = gantt_grid(list(schedule.compare_kinds(["gpipe", "zb-h1", "interleaved"], 4, 8, 2).values()))
    assert [ax.get_legend() is not None for ax in fig.axes] == [True, False, False]
    assert fig.axes[2].get_title(loc="left") == (
        "interleaved 1F1B (v = 2); bubble 18.8 %, peak activations on GPU 0: 11"
    )
    assert {ax.get_xlim() for ax in fig.axes} == {(0.0, 33.0)}  # one time axis: GPipe's
    plt.close(fig)


def test_timeline_svg_to_a_common_scale():
    a, b = schedule.simulate("gpipe", 4, 8), schedule.simulate("dualpipe", 4, 8)
    sa, sb = timeline_svg(a, scale=20), timeline_svg(b, scale=20)
    found = [re.search(r'<svg [^>]*width="(\d+)"', s) for s in (sa, sb)]
    width = [int(m.group(1)) for m in found if m is not None]
    assert width == [(52 + 33 * 20 + 10), (52 + 26 * 20 + 10)]
    assert sa.count(f'fill="{COLORS["F"]}"') == 32 and sa.count('class="mp-mb"') == 64
    assert re.findall(r'class="mp-tick"[^>]*>([^<]*)<', sa) == [str(x) for x in range(0, 34, 2)]
    assert timeline_svg(a) == timeline_svg(schedule.simulate("gpipe", 4, 8))  # deterministic
