"""Chapter 8 in the built site (headless Chromium, file://, network blocked): click GPUs in the device grid and
compare the highlighted groups with ``meshplan.Mesh``; pick another axis order; move a control to a mesh that does
not fit and see it flagged; move an exercise control and check the shown answer; write a whole plan in the
plan-design checklists and read the same lines ``meshplan.course.design`` prints, on a desktop and on a phone."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, check_grid_rank, choose, chosen, horizontal_overflow, predict, site_page, slide

from meshplan import Mesh, Plan, evaluate
from meshplan.course.lab import design_checklist_8, design_checklist_64, heaviest_exercise
from meshplan.widgets import compare

CH8 = "notebooks/08_4d_lab.html"


def test_chapter8_grid_click_highlights_the_mesh_groups():
    with site_page(CH8) as page:
        grid = page.locator("#mp-grid-ch8-grid-64")
        grid.scroll_into_view_if_needed()
        assert grid.locator(".mp-gpu").count() == 64
        # defaults: TP 8, CP 1, PP 8, order tp-cp-pp-dp, 8 GPUs per node
        mesh = Mesh({"tp": 8, "cp": 1, "pp": 8, "dp": 1}, "tp-cp-pp-dp", 8)
        for rank in (0, 19, 63):
            check_grid_rank(grid, mesh, rank)
        r = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=8, zero=1, recompute="full"))
        assert f"= {r.memory_bytes['total'] / 1e9:,.1f} GB" in grid.locator(".mp-grid-summary").inner_text()

        slider = grid.locator('input.mp-slider[data-name="pp"]')
        slider.focus()
        page.keyboard.press("ArrowLeft")  # PP 8 -> 4 (DP becomes 2), then click again
        assert chosen(grid, "pp") == "4"
        check_grid_rank(grid, Mesh({"tp": 8, "cp": 1, "pp": 4, "dp": 2}, "tp-cp-pp-dp", 8), 42)
        choose(grid, "order", "dp-pp-cp-tp")  # the axis order: a visible option
        check_grid_rank(grid, Mesh({"tp": 8, "cp": 1, "pp": 4, "dp": 2}, "dp-pp-cp-tp", 8), 42)

        cp = grid.locator('input.mp-slider[data-name="cp"]')
        cp.focus()
        page.keyboard.press("End")  # CP 8: 8 x 8 x 4 = 256 GPUs > 64, flagged at once
        assert (
            grid.locator(".mp-status").inner_text()
            == "Not a valid mesh: tp×cp×pp = 8×8×4 = 256 does not divide gpus=64"
        )
        assert "mp-stale" in grid.locator(".mp-grid-nodes").get_attribute("class")


def test_chapter8_exercise_control_and_check():
    with site_page(CH8) as page:
        ex = page.locator("#mp-ex-ch8-plan64")
        ex.scroll_into_view_if_needed()
        assert (chosen(ex, "tp"), chosen(ex, "pp"), chosen(ex, "m")) == ("4", "2", "32")
        ex.locator('input.mp-slider[data-name="tp"]').focus()
        page.keyboard.press("ArrowRight")  # TP 4 -> 8 (PP 2, m 32)
        assert chosen(ex, "tp") == "8"
        expected = heaviest_exercise().result(tp=8, pp=2, m=32)
        answer = predict(ex, "100 GB")
        assert answer[0] == compare("100", expected, unit="GB", digits=1)
        assert ex.locator(".mp-explanation").inner_text() == expected.explanation


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_chapter8_plan_design_checklist_prints_the_library_lines(viewport):
    ck = design_checklist_8()
    with site_page(CH8, viewport=viewport) as page:
        root = page.locator(f"#{ck.dom_id}")
        root.scroll_into_view_if_needed()
        assert [chosen(root, n) for n in ("tp", "cp", "pp", "zero", "recompute", "b", "m", "ledger")] == [
            "1",
            "1",
            "1",
            "0",
            "none",
            "1",
            "8",
            "lab",
        ]
        root.locator(".mp-check").click()
        assert root.locator(".mp-answer").inner_text() == ck.report(**ck.defaults)
        # TP 2 x DP 4, ZeRO-3, selective, m = 16: the lab ledger's fastest plan
        slide(root, "tp", "ArrowRight")
        slide(root, "zero", "End")
        choose(root, "recompute", "selective")
        slide(root, "m", "ArrowRight")
        assert root.locator(".mp-answer").inner_text() == ""  # moving a control clears the lines
        root.locator(".mp-check").click()
        plan = {"tp": 2, "cp": 1, "pp": 1, "zero": 3, "recompute": "selective", "b": 1, "m": 16, "ledger": "lab"}
        assert root.locator(".mp-answer").inner_text() == ck.report(**plan)
        assert root.locator("li.mp-fail").count() == 0
        # the same plan in FSDP2's ledger no longer fits
        choose(root, "ledger", "fsdp2")
        root.locator(".mp-check").click()
        assert root.locator(".mp-answer").inner_text() == ck.report(**{**plan, "ledger": "fsdp2"})
        assert root.locator("li.mp-fail").first.inner_text().startswith("✗ memory fits:")
        # TP 8 leaves no room for CP or PP: their sliders offer one value and are disabled
        slide(root, "tp", "End")
        assert chosen(root, "tp") == "8"
        assert root.locator('input.mp-slider[data-name="cp"]').is_disabled()
        assert root.locator('input.mp-slider[data-name="pp"]').is_disabled()
        root.locator(".mp-check").click()
        assert "✗ memory fits: tp=8 does not divide 4 KV heads" in root.locator(".mp-answer").inner_text()
        assert horizontal_overflow(page) == 0


def test_chapter8_second_checklist_flags_tp_across_nodes():
    ck = design_checklist_64()
    with site_page(CH8) as page:
        root = page.locator(f"#{ck.dom_id}")
        root.scroll_into_view_if_needed()
        slide(root, "tp", "End")  # TP 16 on nodes of 8 GPUs
        assert chosen(root, "tp") == "16"
        root.locator(".mp-check").click()
        values = {c.name: c.default for c in ck.controls} | {"tp": 16, "pp": 2}
        assert root.locator(".mp-answer").inner_text() == ck.report(**values)
        fails = root.locator("li.mp-fail").all_inner_texts()
        assert (
            "✗ TP inside a node: tp = 16 > 8 GPUs per node: TP's per-layer collectives would cross InfiniBand" in fails
        )


def test_chapter8_grid_is_one_tab_stop_moved_by_the_arrow_keys():
    """64 GPUs are one Tab stop, not 64 (issue 28): Tab lands on the selected GPU, the arrow keys move the selection
    (right: the next rank; down: the same position in the next node of 8), and the next Tab leaves the grid."""
    with site_page(CH8) as page:
        page.reload()  # the page is shared with the module's other tests: start from the grid's defaults
        grid = page.locator("#mp-grid-ch8-grid-64")
        grid.scroll_into_view_if_needed()
        mesh = Mesh({"tp": 8, "cp": 1, "pp": 8, "dp": 1}, "tp-cp-pp-dp", 8)
        assert grid.locator('.mp-gpu[tabindex="0"]').count() == 1
        assert grid.locator('.mp-gpu[tabindex="-1"]').count() == 63
        grid.locator('.mp-gpu[tabindex="0"]').focus()
        start = int(page.evaluate("document.activeElement.dataset.rank"))
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowDown")
        rank = start + 1 + 8
        assert page.evaluate("document.activeElement.dataset.rank") == str(rank)
        assert grid.locator(".mp-gpu[data-selected]").get_attribute("data-rank") == str(rank)
        assert grid.locator(f'.mp-gpu[data-rank="{rank}"]').get_attribute("aria-pressed") == "true"
        check_grid_rank(grid, mesh, rank)  # the groups are painted for the GPU the keys moved to
        page.keyboard.press("End")
        assert page.evaluate("document.activeElement.dataset.rank") == "63"
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.classList.contains('mp-gpu')") is False


def test_chapter8_a_locked_zero_stage_says_why():
    """Filling all 8 GPUs with TP and PP leaves DP × CP = 1: ZeRO 1-3 are disabled and the checklist says why beside
    them (issue 28), and the note goes when a split is back."""
    ck = design_checklist_8()
    with site_page(CH8) as page:
        page.reload()
        root = page.locator(f"#{ck.dom_id}")
        root.scroll_into_view_if_needed()
        why = root.locator('.mp-why[data-for="zero"]')
        assert why.inner_text() == "" and not why.is_visible()  # the defaults leave DP > 1
        slide(root, "tp", "End")  # TP 8 fills the node: PP 1 and CP 1 are all that is left
        assert (chosen(root, "tp"), chosen(root, "pp"), chosen(root, "zero")) == ("8", "1", "0")
        assert root.locator('input.mp-slider[data-name="zero"]').is_disabled()
        assert why.is_visible()
        assert why.inner_text() == ck.why("zero", {"tp": 8, "cp": 1, "pp": 1}) != ""
        assert "DP × CP = 1 leaves nothing to shard" in why.inner_text()
        slide(root, "tp", "Home")
        assert why.inner_text() == "" and not why.is_visible()
        # DP is shown live beside PP, before any Check: the size the other choices leave
        note = root.locator('.mp-note[data-for="pp"]')
        assert note.inner_text() == "DP = 8 ÷ (TP 1 × CP 1 × PP 1) = 8"
        slide(root, "pp", "End")
        assert note.inner_text() == f"DP = 8 ÷ (TP 1 × CP 1 × PP {chosen(root, 'pp')}) = {8 // int(chosen(root, 'pp'))}"
