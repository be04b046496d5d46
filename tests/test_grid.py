"""``meshplan.course.grid``: the stride arithmetic the page applies equals ``Mesh.group`` and an independent brute force
(numpy reshape, torch DeviceMesh's convention); every page combination carries the library's links; the
static HTML, the MIME bundle and the matplotlib picture."""

from __future__ import annotations

import json
import re
from itertools import product

import numpy as np
import pytest

from meshplan import Mesh, Plan, evaluate
from meshplan.course.grid import (
    AXIS_COLOURS,
    MAX_COMBINATIONS,
    DeviceGrid,
    _members,
    combination,
    grid_html,
    group_from_strides,
    nodes_spanned,
    plot_grid,
)
from meshplan.spec.mesh import AXES, parse_order
from meshplan.widgets import STATIC_ENV


def brute_groups(sizes: dict, order: str, rank: int) -> dict:
    """Groups from an array of ranks shaped outer→inner (DeviceMesh: arange(n).reshape(shape))."""
    axes = parse_order(order)[::-1]  # outer first
    grid = np.arange(int(np.prod([sizes[a] for a in axes]))).reshape([sizes[a] for a in axes])
    where = tuple(int(i[0]) for i in np.nonzero(grid == rank))
    out = {}
    for k, a in enumerate(axes):
        idx: list[int | slice] = list(where)
        idx[k] = slice(None)
        out[a] = tuple(int(r) for r in grid[tuple(idx)])
    return out


@pytest.mark.parametrize("gpus", [8, 64])
def test_page_strides_match_mesh_and_brute_force_for_every_rank(gpus):
    grid = DeviceGrid("t", gpus, cp=(1, 2, 4), pp=(1, 2, 8))
    checked = 0
    for key, e in grid.table().items():
        if "error" in e:
            continue
        idx = [int(i) for i in key.split(",")]
        order = grid.sliders["order"][idx[3]]
        mesh = Mesh(e["sizes"], order, e["gpn"])
        for r in range(gpus):
            brute = brute_groups(e["sizes"], order, r)
            for a in AXES:
                js = group_from_strides(r, e["sizes"][a], e["strides"][a])
                assert js == mesh.group(r, a) == brute[a], (key, r, a)
        checked += 1
    assert checked > 20


def test_1024_gpus_sampled_ranks():
    grid = DeviceGrid("t", 1024, cp=(1, 2, 4), pp=(1, 4, 16))
    table = grid.table()
    assert len(table) <= MAX_COMBINATIONS
    for key, e in table.items():
        if "error" in e:
            continue
        order = grid.sliders["order"][int(key.split(",")[3])]
        mesh = Mesh(e["sizes"], order, e["gpn"])
        for r in range(0, 1024, 97):
            for a in AXES:
                assert group_from_strides(r, e["sizes"][a], e["strides"][a]) == mesh.group(r, a)


def test_every_combination_carries_the_library_links_or_its_error():
    grid = DeviceGrid("t", 64, model="qwen3.8-27b", plan_kw={"zero": 1, "recompute": "full"})
    names = list(grid.sliders)
    table = grid.table()
    assert len(table) == 4 * 4 * 4 * 3 * 2
    for idx in product(*(range(len(grid.sliders[n])) for n in names)):
        v = {n: grid.sliders[n][i] for n, i in zip(names, idx)}
        e = table[",".join(map(str, idx))]
        if v["tp"] * v["cp"] * v["pp"] > 64:
            assert e == {
                "error": f"tp×cp×pp = {v['tp']}×{v['cp']}×{v['pp']} = {v['tp'] * v['cp'] * v['pp']} "
                f"does not divide gpus=64"
            }
            continue
        mesh = Mesh(
            {"tp": v["tp"], "cp": v["cp"], "pp": v["pp"], "dp": 64 // (v["tp"] * v["cp"] * v["pp"])},
            v["order"],
            v["gpus_per_node"],
        )
        assert e["links"] == {a: mesh.link(a) for a in AXES}
        assert e["strides"] == dict(mesh.strides)
        r = evaluate(
            Plan.create(
                "qwen3.8-27b",
                gpus=64,
                tp=v["tp"],
                cp=v["cp"],
                pp=v["pp"],
                order=v["order"],
                gpus_per_node=v["gpus_per_node"],
                zero=1,
                recompute="full",
            )
        )
        assert f"= {r.memory_bytes['total'] / 1e9:,.1f} GB" in e["summary"]


def test_lab_64_summary_line():
    e = DeviceGrid("t", 64, model="qwen3.8-27b", plan_kw={"zero": 1, "recompute": "full"}).entry(
        tp=8, cp=1, pp=2, order="tp-cp-pp-dp", gpus_per_node=8
    )
    assert e["summary"] == (
        "qwen3.8-27b: per GPU 12.2 GB model states + 0.3 GB activations = 12.5 GB (fits in 80 GB); "
        "bytes per GPU per step: DP 5.2 GB (InfiniBand) · TP 75.2 GB (NVLink) · "
        "PP 0.7 GB (InfiniBand); bubble (p−1)/(m·v) 12.5 %"
    )
    assert e["links"] == {"tp": "nvlink", "cp": None, "pp": "infiniband", "dp": "infiniband"}


def test_invalid_plan_for_the_model_keeps_the_mesh():
    e = DeviceGrid("t", 8, model="small-3.7m").entry(tp=8, cp=1, pp=1, order="tp-cp-pp-dp", gpus_per_node=8)
    assert e["summary"] == "Not a valid plan for small-3.7m: tp=8 does not divide 4 attention heads"
    assert e["sizes"]["tp"] == 8


def test_combination_errors():
    with pytest.raises(ValueError, match="gpus_per_node=8 does not divide gpus=12"):
        combination(12, 1, 1, 1)
    with pytest.raises(ValueError, match="tp×cp×pp = 4×1×4 = 16 does not divide gpus=8"):
        combination(8, 4, 1, 4)


def test_grid_validation():
    with pytest.raises(ValueError, match="1,536 control combinations; keep the page small \\(at most 400\\)"):
        DeviceGrid("t", 64, tp=range(1, 9), cp=range(1, 9))
    with pytest.raises(ValueError, match="default tp=3 is not one of tp's values"):
        DeviceGrid("t", 8, defaults={"tp": 3})
    with pytest.raises(ValueError, match="rank=8"):
        DeviceGrid("t", 8, rank=8)
    with pytest.raises(ValueError, match="grid id='a b' must use letters"):
        DeviceGrid("a b", 8)
    with pytest.raises(ValueError, match="gpus=0 must be a positive integer"):
        DeviceGrid("t", 0)


def test_nodes_spanned_deepseek_ep():
    sizes = {"tp": 1, "cp": 1, "pp": 16, "dp": 128}
    assert nodes_spanned(Mesh(sizes, "tp-cp-ep-dp-pp", 8, ep=64), 0, "ep") == 8
    assert nodes_spanned(Mesh(sizes, "tp-cp-pp-dp", 8, ep=64), 0, "ep") == 64
    assert nodes_spanned(Mesh(sizes, "tp-cp-ep-dp-pp", 4, ep=64), 0, "ep") == 16


def test_members_text():
    assert _members(tuple(range(8))) == "0, 1, 2, 3, 4, 5, 6, 7"
    assert _members(tuple(range(0, 1024, 8))) == ", ".join(str(8 * i) for i in range(16)) + ", … (128 GPUs)"


def test_static_html_is_self_contained():
    grid = DeviceGrid("ch8-x", 64, defaults={"tp": 8})
    html = grid.to_html()
    data = re.search(r'class="mp-data">(.*?)</script>', html, re.DOTALL)
    assert data is not None
    payload = json.loads(data.group(1))
    assert payload["gpus"] == 64 and payload["rank"] == 0 and payload["colours"] == AXIS_COLOURS
    assert [(c["name"], c["input"], c["texts"]) for c in payload["controls"]] == [
        ("tp", "slider", ["1", "2", "4", "8"]),
        ("cp", "slider", ["1", "2", "4", "8"]),
        ("pp", "slider", ["1", "2", "4", "8"]),
        ("order", "radio", ["tp-cp-pp-dp", "tp-cp-dp-pp", "dp-pp-cp-tp"]),
        ("gpus_per_node", "radio", ["8", "4"]),
    ]
    assert payload["table"] == grid.table()
    assert "src=" not in html and "http" not in html
    assert 'id="mp-grid-ch8-x"' in html and html.count("<script") == 2
    # the axis order's options are visible: radio buttons, the default checked
    assert '<input type="radio" name="mp-grid-ch8-x-order" value="0" checked>tp-cp-pp-dp</label>' in html


def test_mime_bundle_static_and_live(monkeypatch):
    grid = DeviceGrid("t", 8)
    monkeypatch.setenv(STATIC_ENV, "1")
    assert set(grid._repr_mimebundle_()) == {"text/plain", "text/html"}
    monkeypatch.setenv(STATIC_ENV, "0")
    bundle = grid._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "text/html" in bundle


def test_grid_html_colours_the_groups_of_the_rank():
    mesh = Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 1})
    page = grid_html(mesh, 3)
    assert "GPU 3</b> on node 0" in page
    assert "pipeline (PP) (size 4, NVLink): 1, 3, 5, 7" in page
    assert page.count(AXIS_COLOURS["pp"]) == 1 + 3  # legend + three other stages


def test_plot_grid_draws_every_gpu():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mesh = Mesh({"tp": 8, "cp": 1, "pp": 16, "dp": 8})
    fig = plot_grid(mesh, 5)
    ax = fig.axes[0]
    frames, gpus = ax.collections
    faces = [matplotlib.colors.to_hex(c) for c in gpus.get_facecolors()]
    # 1024 GPUs + 128 node frames; the 7 + 15 + 7 other members of GPU 5's groups are coloured, GPU 5 is framed
    assert gpus.get_gid() == "gpus" and len(gpus.get_paths()) == len(faces) == 1024 and len(frames.get_paths()) == 128
    coloured = {r for r, c in enumerate(faces) if c != "#e6e6e6"}
    assert coloured == {r for a in ("tp", "pp", "dp") for r in mesh.group(5, a)} - {5}
    assert len(coloured) == 7 + 15 + 7
    assert [r for r, w in enumerate(gpus.get_linewidths()) if w > 0] == [5]
    plt.close(fig)
