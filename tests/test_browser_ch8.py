"""Chapter 8 in the built site (headless Chromium, file://, network blocked): click GPUs in the device grids and
compare the highlighted groups with ``meshplan.Mesh``; pick another axis order; move a control to a mesh that
does not fit and see it flagged; move an exercise control and check the shown answer."""

from __future__ import annotations

from browser import choose, chosen, predict, site_page
from meshplan import Mesh, Plan, evaluate
from meshplan.grid import _members
from meshplan.mesh import AXES
from meshplan.widgets import Result, compare

CH8 = "notebooks/08_4d_lab.html"


def _highlighted(grid) -> dict[str, set[int]]:
    cells = grid.locator(".mp-gpu")
    data = cells.evaluate_all("cs => cs.map(c => [+c.dataset.rank, c.dataset.group || '', c.dataset.selected || ''])")
    out: dict[str, set[int]] = {a: set() for a in (*AXES, "selected")}
    for rank, group, selected in data:
        if group:
            out[group].add(rank)
        if selected:
            out["selected"].add(rank)
    return out


def _check_rank(grid, mesh: Mesh, rank: int) -> None:
    grid.locator(f'.mp-gpu[data-rank="{rank}"]').click()
    got = _highlighted(grid)
    assert got["selected"] == {rank}
    for a in AXES:
        assert got[a] == set(mesh.group(rank, a)) - {rank}, (a, rank)
        row = grid.locator(f'.mp-legend-row[data-axis="{a}"]')
        assert row.locator(".mp-members").inner_text() == _members(mesh.group(rank, a))
        assert row.locator(".mp-link").inner_text() == {"nvlink": "NVLink", "infiniband": "InfiniBand",
                                                         None: "no traffic"}[mesh.link(a)]


def test_chapter8_grid_click_highlights_the_mesh_groups():
    with site_page(CH8) as page:
        grid = page.locator("#mp-grid-ch8-grid-64")
        grid.scroll_into_view_if_needed()
        assert grid.locator(".mp-gpu").count() == 64
        # defaults: TP 8, CP 1, PP 8, order tp-cp-pp-dp, 8 GPUs per node
        mesh = Mesh({"tp": 8, "cp": 1, "pp": 8, "dp": 1}, "tp-cp-pp-dp", 8)
        for rank in (0, 19, 63):
            _check_rank(grid, mesh, rank)
        r = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=8, zero=1, recompute="full"))
        assert f"= {r.memory_bytes['total'] / 1e9:,.1f} GB" in grid.locator(".mp-grid-summary").inner_text()

        slider = grid.locator('input.mp-slider[data-name="pp"]')
        slider.focus()
        page.keyboard.press("ArrowLeft")                         # PP 8 -> 4 (DP becomes 2), then click again
        assert chosen(grid, "pp") == "4"
        _check_rank(grid, Mesh({"tp": 8, "cp": 1, "pp": 4, "dp": 2}, "tp-cp-pp-dp", 8), 42)
        choose(grid, "order", "dp-pp-cp-tp")                     # the axis order: a visible option
        _check_rank(grid, Mesh({"tp": 8, "cp": 1, "pp": 4, "dp": 2}, "dp-pp-cp-tp", 8), 42)

        cp = grid.locator('input.mp-slider[data-name="cp"]')
        cp.focus()
        page.keyboard.press("End")                               # CP 8: 8 x 8 x 4 = 256 GPUs > 64, flagged at once
        assert grid.locator(".mp-status").inner_text() == \
            "Not a valid mesh: tp×cp×pp = 8×8×4 = 256 does not divide gpus=64"
        assert "mp-stale" in grid.locator(".mp-grid-nodes").get_attribute("class")

        big = page.locator("#mp-grid-ch8-grid-1024")
        big.scroll_into_view_if_needed()
        assert big.locator(".mp-gpu").count() == 1024
        _check_rank(big, Mesh({"tp": 8, "cp": 1, "pp": 16, "dp": 8}, "tp-cp-pp-dp", 8), 517)


def _heaviest_gb(tp: int, pp: int, m: int) -> float:
    r = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=tp, pp=pp, zero=1, recompute="full", micro_batches=m))
    return r.comm_bytes_per_step[r.heaviest_dim] / 1e9


def test_chapter8_exercise_control_and_check():
    with site_page(CH8) as page:
        ex = page.locator("#mp-ex-ch8-plan64")
        ex.scroll_into_view_if_needed()
        ex.locator('input.mp-slider[data-name="m"]').focus()
        page.keyboard.press("ArrowRight")                        # m 8 -> 32 (TP 8, PP 2)
        assert chosen(ex, "m") == "32"
        value = _heaviest_gb(8, 2, 32)
        answer = predict(ex, "100 GB")
        assert answer[0] == compare("100", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        assert "the heaviest dimension is TP" in ex.locator(".mp-explanation").inner_text()
