"""What a screen reader gets from each kind of widget, read from Chromium's accessibility tree with Playwright's
accessibility snapshot (``locator.aria_snapshot()``): every control has a role and a name, sliders announce the value
they show (``aria-valuetext``, not the option's index), predictions are a named text box or a named group of
choices, the answer arrives in a live region, the schedule explorer's timelines are named pictures, the device grid
is one named group of toggle buttons, and the planner's form labels every field. One widget of each kind: a numeric
exercise, a word-answer exercise, an exercise with a drop-down, a plan checklist, the schedule explorer, the device
grid, and the live planner's form."""

from __future__ import annotations

import re

import pytest
from browser import DESKTOP, PHONE, predict, site_page

# the roles a reader operates or is told about; each must carry a name in the snapshot ('- role "name"')
NAMED = ("slider", "radio", "radiogroup", "textbox", "combobox", "button", "spinbutton", "checkbox", "group", "img")
LINE = re.compile(r'^\s*- \'?(?P<role>[a-z]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?')  # YAML quotes a line with a colon


def _roles(snapshot: str) -> list[tuple[str, str | None]]:
    out = []
    for line in snapshot.splitlines():
        m = LINE.match(line)
        if m and m["role"] in NAMED:
            out.append((m["role"], m["name"]))
    return out


def _every_control_named(snapshot: str) -> None:
    unnamed = [role for role, name in _roles(snapshot) if not name]
    assert not unnamed, (unnamed, snapshot)


def _sliders_say_their_value(widget) -> None:
    pairs = widget.locator("input.mp-slider").evaluate_all(
        "ss => ss.map(s => [s.getAttribute('aria-valuetext'), s.parentNode.querySelector('.mp-value').textContent])"
    )
    assert pairs and all(said == shown for said, shown in pairs), pairs


VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])


@VIEWPORTS
def test_a_numeric_exercise_reads_as_named_controls_and_a_live_answer(viewport):
    with site_page("notebooks/04_tensor_parallel.html", viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch4-kv")
        ex.scroll_into_view_if_needed()
        snap = ex.aria_snapshot()
        for line in ('slider "t GPUs"', 'radiogroup "ledger"', 'radio "Megatron-LM"', 'textbox "Your prediction"'):
            assert line in snap, snap
        assert 'button "Check" [disabled]' in snap and 'button "Show me"' in snap
        _every_control_named(snap)
        _sliders_say_their_value(ex)
        answer = ex.locator(".mp-answer")
        assert answer.get_attribute("aria-live") == "polite"
        assert ex.locator(".mp-prediction").get_attribute("aria-describedby") == answer.get_attribute("id")
        predict(ex, "2")
        assert answer.inner_text() and answer.inner_text().splitlines()[0] in ex.aria_snapshot()


@VIEWPORTS
def test_a_word_answer_is_a_named_group_of_choices(viewport):
    with site_page("notebooks/04_tensor_parallel.html", viewport=viewport) as page:
        ex = page.locator("#mp-ex-ch4-bench")
        ex.scroll_into_view_if_needed()
        snap = ex.aria_snapshot()
        assert 'radiogroup "Your prediction"' in snap, snap
        assert 'radio "exactly zero"' in snap and 'radio "nonzero"' in snap
        assert "textbox" not in snap  # nothing to type: the choices are the answers it accepts
        _every_control_named(snap)
        _sliders_say_their_value(ex)


def test_a_drop_down_is_a_named_combobox_with_its_options():
    with site_page("notebooks/01_one_gpu.html", viewport=DESKTOP) as page:
        ex = page.locator("#mp-ex-ch1-fewest-gpus")
        ex.scroll_into_view_if_needed()
        snap = ex.aria_snapshot()
        combos = [name for role, name in _roles(snap) if role == "combobox"]
        assert combos, snap
        assert re.search(r'- option "[^"]+" \[selected\]', snap), snap
        _every_control_named(snap)


@VIEWPORTS
def test_a_plan_checklist_reads_its_lines_after_check(viewport):
    with site_page("notebooks/04_tensor_parallel.html", viewport=viewport) as page:
        ck = page.locator("#mp-ck-ch4-plan")
        ck.scroll_into_view_if_needed()
        snap = ck.aria_snapshot()
        assert 'button "Check my plan"' in snap and 'slider "TP size t"' in snap, snap
        _every_control_named(snap)
        _sliders_say_their_value(ck)
        ck.locator(".mp-check").click()
        after = ck.aria_snapshot()
        assert "checks pass" in after and "- list" in after, after
        assert "memory fits" in after


@VIEWPORTS
def test_the_explorer_names_each_timeline_and_its_scroller(viewport):
    with site_page("notebooks/05_pipeline_parallel.html", viewport=viewport) as page:
        tl = page.locator("#mp-tl-ch5-explore")
        tl.scroll_into_view_if_needed()
        snap = tl.aria_snapshot()
        assert 'combobox "schedule described"' in snap and 'slider "stages p"' in snap, snap
        pictures = [name for role, name in _roles(snap) if role == "img"]
        assert pictures[:2] == [
            "GPipe timeline of 8 GPUs, makespan 69, bubble 43.8 %",
            "1F1B timeline of 8 GPUs, makespan 69, bubble 43.8 %",
        ], pictures
        assert len(pictures) == 7
        _every_control_named(snap)
        _sliders_say_their_value(tl)
        region = 'region "Pipeline schedules, scroll sideways"' in snap
        assert region == (viewport == PHONE), snap


def test_the_device_grid_is_one_named_group_of_toggle_buttons():
    with site_page("notebooks/08_4d_lab.html", viewport=DESKTOP) as page:
        grid = page.locator("#mp-grid-ch8-grid-8")
        grid.scroll_into_view_if_needed()
        snap = grid.aria_snapshot()
        groups = [name for role, name in _roles(snap) if role == "group"]
        assert any((name or "").startswith("GPUs: arrow keys move and select") for name in groups), snap
        buttons = re.findall(r'- button "(\d+)"( \[pressed\])?', snap)
        assert [b for b, _ in buttons] == [str(g) for g in range(8)]
        assert [b for b, pressed in buttons if pressed] == ["0"]
        _every_control_named(snap)
        _sliders_say_their_value(grid)


def test_the_planner_labels_every_field():
    with site_page("book/planner.html", viewport=DESKTOP) as page:
        form = page.locator("form").filter(has=page.locator("#planner-gpus")).first
        snap = form.aria_snapshot()
        for line in ('spinbutton "GPUs"', 'combobox "Hardware"', 'combobox "Ledger"'):
            assert line in snap, snap
        _every_control_named(snap)
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('[id^="planner-"]')]
              .filter(e => ['INPUT', 'SELECT', 'TEXTAREA'].includes(e.tagName) && e.type !== 'hidden')
              .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                           && !e.getAttribute('aria-labelledby'))
              .map(e => e.id)"""
        )
        assert unlabelled == []
