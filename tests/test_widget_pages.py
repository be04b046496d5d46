"""The widgets as a learner uses them, on standalone pages written from ``to_html()`` (no book build), in
headless Chromium at a 1366-px desktop and a 390-px phone, light and dark (``data-theme="dark"``, as the book's
theme sets it), with every request that is not ``file://`` blocked.

Checked: an empty prediction reveals nothing; Enter submits; "Show me" says the prediction was skipped; an
invalid combination is flagged as the control moves, with the library's message, and nothing above the answer
moves; dependent ranges (rank < N) are enforced; named choices are visible options; the explorer draws every
schedule to one scale (drawn widths proportional to the makespans, DualPipe shorter than GPipe), with a legend,
micro-batch numbers and a time axis, and a message in place of a schedule that cannot run; the device grid
highlights ``Mesh.group``; the checklist prints Python's report; no text under 11 px; nothing scrolls the page
sideways. Set ``MESHPLAN_SCREENSHOTS=dir`` to keep screenshots of every page.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import (
    DESKTOP,
    PHONE,
    check_grid_rank,
    horizontal_overflow,
    offline_browser,
    open_standalone,
    standalone_page,
)

from meshplan import Mesh, schedule
from meshplan.course.grid import DeviceGrid
from meshplan.course.plotting import TimelineExplorer
from meshplan.parallel import zero
from meshplan.spec.mesh import check_nodes
from meshplan.widgets import Check, Checklist, Exercise, reveal

PSI = 27_781_427_952


def floor_gb(gpus: int) -> float:
    check_nodes(gpus, 8)  # whole nodes of 8, as the device grid demands: the library rejects 12
    return zero.model_states_bytes(PSI, 3, gpus) / 1e9


def states_line(tp: int, pp: int) -> tuple[bool, str]:
    """Model states per GPU with the weights split over TP x PP and ZeRO-1 over the rest of 8 GPUs."""
    gb = zero.model_states_bytes(PSI / (tp * pp), 1, 8 // (tp * pp)) / 1e9
    return gb <= 80, f"{gb:,.1f} GB per GPU"


def owned(n: int, rank: int) -> float:
    return 100.0 * n + rank


FLOOR = Exercise(
    "floor",
    "Model states per GPU with ZeRO-3 on N GPUs, in GB?",
    floor_gb,
    sliders={"gpus": [1, 2, 4, 8, 12, 16]},
    defaults={"gpus": 8},
    unit="GB",
    labels={"gpus": "N GPUs"},
    explain=lambda gpus: f"{zero.model_states_bytes(PSI) / 1e9:,.1f} GB ÷ {gpus}",
)
RANK = Exercise(
    "rank",
    "What does this rank own?",
    owned,
    sliders={"n": [2, 4, 8], "rank": list(range(8))},
    defaults={"n": 8, "rank": 5},
    unit="MB",
    depends={"rank": lambda n: range(n)},
    labels={"n": "N ranks"},
)
WORD = Exercise(
    "word",
    "Which link does this group use?",
    lambda link, size: link if size <= 8 else "InfiniBand",
    sliders={"link": ["NVLink", "InfiniBand"], "size": [4, 8, 16]},
    explain=lambda link, size: f"{size} GPUs",
)
EXPLORER = TimelineExplorer(
    "explore",
    kinds=schedule.KINDS,
    pps=[2, 4, 8],
    mbs=[8, 16],
    vs=[1, 2],
    defaults={"schedule": "1f1b", "p": 4, "m": 8, "v": 1},
)
GRID = DeviceGrid("grid8", 8, tp=(1, 2, 4, 8), cp=(1, 2), pp=(1, 2, 4, 8))
BIG = DeviceGrid("grid1024", 1024, tp=(1, 2, 4, 8), cp=(1, 2, 4), pp=(1, 4, 16), defaults={"tp": 8, "pp": 16}, rank=5)
CHECKS = Checklist(
    "plan",
    "Pick a plan for the anchor model on 8 GPUs.",
    {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "m": [4, 8, 16]},
    [
        Check("model states fit", states_line),
        Check("bubble under 20 %", lambda pp, m: ((pp - 1) / m < 0.2, f"(p−1)/m = {100 * (pp - 1) / m:.1f} %")),
    ],
    defaults={"m": 8},
)
WIDGETS = [FLOOR, RANK, WORD, EXPLORER, GRID, CHECKS, BIG]
VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("widgets")
    body = "".join(w.to_html() + "<p>Text after the widget.</p>" for w in WIDGETS)
    light = standalone_page(folder / "light.html", body)
    dark = standalone_page(folder / "dark.html", body, dark=True)
    with offline_browser() as browser:
        opened = {
            (name, theme): open_standalone(browser, path, vp)
            for name, vp in VIEWPORTS.items()
            for theme, path in (("light", light), ("dark", dark))
        }
        yield opened
        shots = os.environ.get("MESHPLAN_SCREENSHOTS")
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            for (name, theme), page in opened.items():
                page.screenshot(path=str(Path(shots) / f"widgets-{name}-{theme}.png"), full_page=True)
        assert browser.blocked == [], browser.blocked
        assert browser.page_errors == [], browser.page_errors


@pytest.fixture(params=list(VIEWPORTS))
def page(request, pages):
    page = pages[(request.param, "light")]
    page.bring_to_front()  # a page in the background gets one animation frame a second: slow clicks
    return page


def _set(root, name: str, position: int) -> None:
    """Move a slider to a position, as dragging it does (an input event)."""
    root.locator(f'input.mp-slider[data-name="{name}"]').evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", str(position)
    )


def _answer(root) -> list[str]:
    return root.locator(".mp-answer").inner_text().splitlines()


# ---------------------------------------------------------------- exercises
def test_empty_prediction_reveals_nothing(page):
    root = page.locator("#mp-ex-floor")
    _set(root, "gpus", 3)
    box, check = root.locator(".mp-prediction"), root.locator(".mp-check")
    box.fill("")
    assert check.is_disabled()
    check.click(force=True)
    assert _answer(root) == []
    box.fill("   ")
    assert check.is_disabled()
    box.press("Enter")
    assert _answer(root) == ["Type a prediction first, or press Show me."]
    assert "55.6" not in root.inner_text()


def test_enter_submits_and_the_worked_answer_follows(page):
    root = page.locator("#mp-ex-floor")
    _set(root, "gpus", 3)  # 8 GPUs
    root.locator(".mp-prediction").fill("55,6")
    assert not root.locator(".mp-check").is_disabled()
    root.locator(".mp-prediction").press("Enter")
    text, explanation = FLOOR.feedback("55,6", {"gpus": 8})
    assert _answer(root) == [text, explanation]
    assert text.startswith("Read as 55.6 GB. The library says 55.6 GB.") and text.endswith("✓ within 5 %.")


def test_show_me_says_the_prediction_was_skipped(page):
    root = page.locator("#mp-ex-floor")
    _set(root, "gpus", 5)  # 16 GPUs
    root.locator(".mp-show").click()
    r = FLOOR.result(gpus=16)
    assert (
        _answer(root)
        == [reveal(r), r.explanation]
        == [f"You skipped the prediction. The library says {r.text}.", r.explanation]
    )


def test_invalid_combination_is_flagged_as_the_control_moves(page):
    root = page.locator("#mp-ex-floor")
    _set(root, "gpus", 3)
    root.locator(".mp-prediction").fill("40")
    before = {k: root.locator(k).bounding_box() for k in (".mp-prediction", ".mp-answer", "input.mp-slider")}
    height = root.bounding_box()["height"]
    slider = root.locator('input.mp-slider[data-name="gpus"]')
    slider.focus()
    page.keyboard.press("ArrowRight")  # 8 -> 12 GPUs: no Check pressed
    with pytest.raises(ValueError) as err:
        check_nodes(12, 8)
    assert _answer(root) == [f"Not a valid combination: {err.value}"]
    assert "mp-invalid" in root.locator(".mp-answer").get_attribute("class")
    assert root.locator(".mp-check").is_disabled() and root.locator(".mp-show").is_disabled()
    assert {k: root.locator(k).bounding_box() for k in before} == before  # nothing moved ...
    assert root.bounding_box()["height"] == height  # ... not even the box below
    page.keyboard.press("ArrowRight")  # 16: valid again, the flag goes
    assert _answer(root) == [] and not root.locator(".mp-check").is_disabled()


def test_dependent_range_rank_below_n(page):
    root = page.locator("#mp-ex-rank")
    _set(root, "n", 2)
    _set(root, "rank", 5)  # set n = 8, rank = 5 first
    rank = root.locator('input.mp-slider[data-name="rank"]')
    assert rank.get_attribute("max") == "7"
    n = root.locator('input.mp-slider[data-name="n"]')
    n.focus()
    page.keyboard.press("Home")  # N = 2: rank 5 does not exist
    assert root.locator('input[data-name="n"] + output').inner_text() == "2"
    assert rank.get_attribute("max") == "1"
    assert root.locator('input[data-name="rank"] + output').inner_text() == "1"  # the nearest allowed rank
    rank.focus()
    page.keyboard.press("End")
    assert root.locator('input[data-name="rank"] + output').inner_text() == "1"
    root.locator(".mp-show").click()
    assert (
        _answer(root)[0] == reveal(RANK.result(n=2, rank=1)) == "You skipped the prediction. The library says 201.0 MB."
    )
    n.focus()
    page.keyboard.press("End")  # N = 8: rank 1 stays, 0..7 offered again
    assert rank.get_attribute("max") == "7" and root.locator('input[data-name="rank"] + output').inner_text() == "1"


def test_named_choices_are_visible_options(page):
    root = page.locator("#mp-ex-word")
    options = root.locator(".mp-radio .mp-option")
    assert options.all_inner_texts() == ["NVLink", "InfiniBand"]
    assert all(o.is_visible() for o in options.all())
    root.locator(".mp-option", has_text="InfiniBand").click()
    assert _answer(root) == []
    root.locator(".mp-prediction").fill("infiniband")
    root.locator(".mp-check").click()
    assert _answer(root) == [
        "You predicted “infiniband”. The library says InfiniBand. ✓ Your prediction matches.",
        "4 GPUs",
    ]


# ---------------------------------------------------------------- the pipeline explorer
def _rows(root) -> dict[str, dict]:
    return {
        r["kind"]: r
        for r in root.locator(".mp-tl-row").evaluate_all("""rows => rows.map(r => {
        const svg = r.querySelector('svg'), rects = svg ? [...svg.querySelectorAll('rect[data-kind]')] : [];
        const x0 = Math.min(...rects.map(e => +e.getAttribute('x')));
        const x1 = Math.max(...rects.map(e => +e.getAttribute('x') + +e.getAttribute('width')));
        return {kind: r.dataset.kind, text: r.innerText, current: r.classList.contains('mp-current'),
                width: svg ? x1 - x0 : null, svgWidth: svg ? +svg.getAttribute('width') : null,
                makespan: svg ? +svg.dataset.makespan : null,
                labels: svg ? [...svg.querySelectorAll('text.mp-gpu-label')].map(t => t.textContent) : [],
                numbers: svg ? [...svg.querySelectorAll('text.mp-mb')].map(t => t.textContent) : [],
                ticks: svg ? [...svg.querySelectorAll('text.mp-tick')].map(t => t.textContent) : []};
    })""")
    }


def _setting(root, p: int, m: int, v: int = 0) -> None:
    root.locator("select.mp-select").select_option(label="1F1B")
    _set(root, "p", p)
    _set(root, "m", m)


def test_explorer_draws_every_schedule_to_one_scale(page):
    root = page.locator("#mp-tl-explore")
    _setting(root, 1, 0)  # p = 4, m = 8
    rows = _rows(root)
    assert list(rows) == list(schedule.KINDS)
    for kind, row in rows.items():
        t = schedule.simulate(kind, 4, 8)
        assert row["makespan"] == t.makespan
    scale = (rows["gpipe"]["width"] + 1) / rows["gpipe"]["makespan"]
    for row in rows.values():  # each box is 1 px short of its slot: drawn width = makespan × scale − 1
        assert abs(row["width"] + 1 - row["makespan"] * scale) < 0.15, row["kind"]
    assert rows["dualpipe"]["width"] < rows["zb-h1"]["width"] < rows["1f1b"]["width"] <= rows["gpipe"]["width"]
    view = root.locator(".mp-tl-view")
    assert max(r["svgWidth"] for r in rows.values()) <= view.evaluate("v => v.clientWidth")  # fits its box
    assert rows["1f1b"]["current"] and not rows["gpipe"]["current"]
    assert root.locator(".mp-caption").inner_text() == EXPLORER.entry("1f1b", 4, 8, 1)["caption"]
    # the legend, micro-batch numbers in the boxes, a time axis
    assert root.locator(".mp-legend").inner_text().split("\n")[:2] == ["F (forward)", "B (backward, inputs)"]
    step = next(s for s in (1, 2, 5, 10, 20, 50) if s * scale >= 40)  # ticks at least 40 px apart
    assert rows["gpipe"]["labels"] == [f"GPU {g}" for g in range(4)]
    assert rows["gpipe"]["ticks"] == [str(x) for x in range(0, 34, step)]
    if page.viewport_size["width"] > 500:  # every box wide enough for its number
        assert sorted(rows["gpipe"]["numbers"]) == sorted([str(mb) for mb in range(8)] * 8)  # F and BW, 4 GPUs


def test_explorer_scrolls_inside_its_box_and_flags_what_cannot_run(page):
    root = page.locator("#mp-tl-explore")
    _setting(root, 2, 1)  # p = 8, m = 16
    rows = _rows(root)
    for kind, row in rows.items():
        assert row["makespan"] == schedule.simulate(kind, 8, 16).makespan
    view = root.locator(".mp-tl-view")
    wide = view.evaluate("v => v.scrollWidth > v.clientWidth")
    assert wide == (page.viewport_size["width"] < 500)  # on the phone the drawing scrolls in its box
    assert horizontal_overflow(page) == 0  # ... and never the page
    _set(root, "m", 0)  # p = 8, m = 8: DualPipe needs m >= 2p
    rows = _rows(root)
    with pytest.raises(ValueError) as err:
        schedule.simulate("dualpipe", 8, 8)
    assert rows["dualpipe"]["text"] == f"DualPipe\nNot valid here: {err.value}" and rows["dualpipe"]["width"] is None
    assert rows["gpipe"]["width"] is not None
    root.locator("select.mp-select").select_option(label="DualPipe")  # describe DualPipe
    assert root.locator(".mp-caption").inner_text() == f"Not a valid schedule: {err.value}"
    assert "mp-invalid" in root.locator(".mp-caption").get_attribute("class")
    _set(root, "p", 1)
    _set(root, "m", 0)  # back to p = 4, m = 8


def test_explorer_chunks_only_for_the_interleaved_schedule(page):
    root = page.locator("#mp-tl-explore")
    _setting(root, 1, 0)
    v = root.locator('input.mp-slider[data-name="v"]')
    select = root.locator("select.mp-select")
    select.select_option(label="1F1B")
    assert v.is_disabled()  # 1F1B has no chunks: v stays 1
    select.select_option(label="interleaved 1F1B")
    assert not v.is_disabled()
    _set(root, "v", 1)
    rows = _rows(root)
    assert rows["interleaved"]["makespan"] == schedule.simulate("interleaved", 4, 8, 2).makespan
    assert rows["1f1b"]["makespan"] == schedule.simulate("1f1b", 4, 8).makespan
    select.select_option(label="1F1B")  # v snaps back to 1
    assert root.locator('input[data-name="v"] + output').inner_text() == "1"


# ---------------------------------------------------------------- the device grid
def test_grid_highlights_the_mesh_groups_and_flags_invalid_meshes(page):
    grid = page.locator("#mp-grid-grid8")
    _set(grid, "tp", 1)
    _set(grid, "pp", 2)  # TP 2 x PP 4, DP 1
    check_grid_rank(grid, Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 1}, "tp-cp-pp-dp", 8), 3)
    grid.locator(".mp-option", has_text="dp-pp-cp-tp").click()  # the axis order: a visible option
    check_grid_rank(grid, Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 1}, "dp-pp-cp-tp", 8), 3)
    top = grid.locator(".mp-grid-nodes").bounding_box()["y"]
    _set(grid, "tp", 3)  # TP 8 x PP 4 = 32 > 8 GPUs
    assert grid.locator(".mp-status").inner_text() == "Not a valid mesh: tp×cp×pp = 8×1×4 = 32 does not divide gpus=8"
    assert "mp-stale" in grid.locator(".mp-grid-nodes").get_attribute("class")
    assert grid.locator(".mp-grid-nodes").bounding_box()["y"] == top  # the drawing stays where it was
    _set(grid, "tp", 1)
    assert grid.locator(".mp-status").inner_text() == ""
    grid.locator(".mp-option", has_text="tp-cp-pp-dp").click()


def test_grid_of_1024_gpus(page):
    big = page.locator("#mp-grid-grid1024")
    assert big.locator(".mp-gpu").count() == 1024
    check_grid_rank(big, Mesh({"tp": 8, "cp": 1, "pp": 16, "dp": 8}, "tp-cp-pp-dp", 8), 517)


# ---------------------------------------------------------------- the checklist
def test_checklist_prints_pythons_report(page):
    root = page.locator("#mp-ck-plan")
    _set(root, "tp", 1)
    _set(root, "pp", 2)  # TP 2 x PP 4, m = 8
    root.locator(".mp-check").click()
    assert root.locator(".mp-answer").inner_text() == CHECKS.report(tp=2, pp=4, m=8)
    assert root.locator("li.mp-fail").all_inner_texts() == ["✗ bubble under 20 %: (p−1)/m = 37.5 %"]
    _set(root, "tp", 3)
    assert root.locator(".mp-answer").inner_text() == ""  # moving a control clears it


# ---------------------------------------------------------------- the page as a whole
def test_nothing_scrolls_the_page_sideways_and_no_text_is_small(page):
    assert horizontal_overflow(page) == 0
    for w in WIDGETS:
        box = page.locator(f"#{w.dom_id}").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"], w.dom_id
    small = page.evaluate("""() => [...document.querySelectorAll('.mp-widget *')].filter(e =>
        [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()) && e.getClientRects().length
        && parseFloat(getComputedStyle(e).fontSize) < 11).map(e => e.tagName + ' ' + e.textContent.slice(0, 20))""")
    assert small == []


def test_dark_theme_colours(pages):
    for name in VIEWPORTS:
        light, dark = pages[(name, "light")], pages[(name, "dark")]
        for page, text, field in (
            (light, "rgb(34, 40, 50)", "rgb(255, 255, 255)"),
            (dark, "rgb(206, 214, 221)", "rgb(20, 24, 30)"),
        ):
            root = page.locator("#mp-ex-floor")
            assert root.evaluate("e => getComputedStyle(e).color") == text
            assert root.locator(".mp-prediction").evaluate("e => getComputedStyle(e).backgroundColor") == field
            assert page.locator("#mp-tl-explore svg").first.evaluate("e => getComputedStyle(e).color") == text
        cell = dark.locator("#mp-grid-grid1024 .mp-gpu:not([data-group]):not([data-selected])").first
        assert cell.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(41, 49, 61)"  # the theme's surface
