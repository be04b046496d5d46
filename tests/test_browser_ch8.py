"""Chapter 8 in the built site (headless Chromium, file://, network blocked): click GPUs in the device grid and
compare the highlighted groups with ``meshplan.Mesh``; move an exercise slider and check the shown answer."""

from __future__ import annotations

from browser import offline_browser, require_site
from meshplan import Mesh, Plan, evaluate
from meshplan.grid import _members
from meshplan.mesh import AXES
from meshplan.widgets import Result, compare

CH8 = "notebooks/08_4d_lab.html"



def _highlighted(grid) -> dict[str, set[int]]:
    cells = grid.locator(".mp-gpu")
    data = cells.evaluate_all("cs => cs.map(c => [+c.dataset.rank, c.dataset.group || '', c.dataset.selected || ''])")
    out = {a: set() for a in AXES}
    out["selected"] = set()
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
        want = set(mesh.group(rank, a)) - {rank}
        assert got[a] == want, (a, rank)
        row = grid.locator(f'.mp-legend-row[data-axis="{a}"]')
        assert row.locator(".mp-members").inner_text() == _members(mesh.group(rank, a))
        link = mesh.link(a)
        assert row.locator(".mp-link").inner_text() == {"nvlink": "NVLink", "infiniband": "InfiniBand",
                                                         None: "no traffic"}[link]


def test_chapter8_grid_click_highlights_the_mesh_groups():
    require_site(CH8)
    with offline_browser() as browser:
        page = browser.open(CH8)
        grid = page.locator("#mp-grid-ch8-grid-64")
        grid.scroll_into_view_if_needed()
        assert grid.locator(".mp-gpu").count() == 64
        # defaults: TP 8, CP 1, PP 8, order tp-cp-pp-dp, 8 GPUs per node
        mesh = Mesh({"tp": 8, "cp": 1, "pp": 8, "dp": 1}, "tp-cp-pp-dp", 8)
        for rank in (0, 19, 63):
            _check_rank(grid, mesh, rank)
        summary = grid.locator(".mp-grid-summary").inner_text()
        r = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=8, zero=1, recompute="full"))
        assert f"= {r.memory_bytes['total'] / 1e9:,.1f} GB" in summary

        # PP 8 -> 4 with the keyboard (DP becomes 2), then click again
        slider = grid.locator('input.mp-slider[data-name="pp"]')
        slider.focus()
        page.keyboard.press("ArrowLeft")
        assert slider.locator("xpath=following-sibling::output[1]").inner_text() == "4"
        mesh = Mesh({"tp": 8, "cp": 1, "pp": 4, "dp": 2}, "tp-cp-pp-dp", 8)
        _check_rank(grid, mesh, 42)

        # the 1,024-GPU grid
        big = page.locator("#mp-grid-ch8-grid-1024")
        big.scroll_into_view_if_needed()
        assert big.locator(".mp-gpu").count() == 1024
        _check_rank(big, Mesh({"tp": 8, "cp": 1, "pp": 16, "dp": 8}, "tp-cp-pp-dp", 8), 517)

        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors


def _heaviest_gb(tp: int, pp: int, m: int) -> float:
    r = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=tp, pp=pp, zero=1, recompute="full", micro_batches=m))
    return r.comm_bytes_per_step[r.heaviest_dim] / 1e9


def test_chapter8_exercise_slider_and_check():
    require_site(CH8)
    with offline_browser() as browser:
        page = browser.open(CH8)
        ex = page.locator("#mp-ex-ch8-plan64")
        ex.scroll_into_view_if_needed()
        slider = ex.locator('input.mp-slider[data-name="m"]')
        slider.focus()
        page.keyboard.press("ArrowRight")                       # m 8 -> 32 (TP 8, PP 2)
        assert slider.locator("xpath=following-sibling::output[1]").inner_text() == "32"
        ex.locator(".mp-prediction").fill("100")
        ex.locator(".mp-check").click()
        value = _heaviest_gb(8, 2, 32)
        expected = compare("100", Result(value, f"{value:,.1f} GB"), unit="GB", digits=1)
        answer = ex.locator(".mp-answer").inner_text()
        assert answer.splitlines()[0] == expected
        assert "the heaviest dimension is TP" in ex.locator(".mp-explanation").inner_text()
        assert browser.blocked == [], f"external requests: {browser.blocked}"
        assert browser.page_errors == [], browser.page_errors
