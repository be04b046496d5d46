"""The page's JavaScript reads predictions and writes feedback exactly as ``meshplan.widgets`` does (headless
Chromium, a page written from ``Exercise.to_html()`` alone, network blocked).

Every case of ``widget_cases`` runs through the page's ``read`` and ``compare`` (``window.__meshplan``) and
must give Python's result; a subset is also typed into the exercise and checked with the button and Enter.
"""

from __future__ import annotations

import pytest
from browser import offline_browser, open_standalone, standalone_page
from widget_cases import COMPARE_CASES, READ_CASES

from meshplan.widgets import Exercise, Result, compare, fmt_fixed, fmt_sig, read_prediction, reveal

UI_CASES = [c for c in COMPARE_CASES if (c[4], c[5], c[6]) == ("GB", 1, 0.05)]


def _answer(case: int):
    value, error = UI_CASES[case][1], UI_CASES[case][3]
    if error:
        raise ValueError(error)
    return value


EX = Exercise("js-mirror", "Mirror test", _answer, sliders={"case": list(range(len(UI_CASES)))}, unit="GB", digits=1)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = standalone_page(tmp_path_factory.mktemp("widget") / "exercise.html", EX.to_html())
    with offline_browser() as browser:
        pg = open_standalone(browser, path)
        yield pg
        assert browser.blocked == [] and browser.page_errors == []


def test_read_mirrors_python(page):
    got = page.evaluate(
        "cs => cs.map(c => { const r = window.__meshplan.read(c[0], c[1]); "
        "return [r.value, r.echo, r.note, r.error]; })",
        [[c[0], c[1]] for c in READ_CASES],
    )
    for case, js in zip(READ_CASES, got):
        r = read_prediction(case[0], case[1])
        assert tuple(js) == (r.value, r.echo, r.note, r.error) == case[2:], case


def test_compare_and_reveal_mirror_python(page):
    args = [[c[0], {"value": c[1], "text": c[2], "error": c[3]}, c[4], c[5], c[6]] for c in COMPARE_CASES]
    got = page.evaluate(
        "cs => cs.map(c => [window.__meshplan.compare(c[0], c[1], c[2], c[3], c[4]), window.__meshplan.reveal(c[1])])",
        args,
    )
    for case, (js_compare, js_reveal) in zip(COMPARE_CASES, got):
        r = Result(case[1], case[2], "", case[3])
        assert js_compare == compare(case[0], r, *case[4:7]) == case[7], case
        assert js_reveal == reveal(r)


def test_number_formats_mirror_python(page):
    xs = [
        2.25,
        0.125,
        2.675,
        -0.04,
        -1.25,
        1234567.891,
        999.5,
        55.834574848,
        1e308 / 55.56,
        1.234e-7,
        9.9996,
        -1234.5,
        1e15,
        999_999_999_999_999.9,
        5e-324,
        123456789012345.67,
        0.1 + 0.2,
        1 / 3,
    ]
    got = page.evaluate(
        "xs => xs.map(x => [window.__meshplan.fmtFixed(x, 1), window.__meshplan.fmtFixed(x, 3), "
        "window.__meshplan.fmtSig(x, 2), window.__meshplan.fmtSig(x, 4)])",
        xs,
    )
    for x, js in zip(xs, got):
        assert js == [fmt_fixed(x, 1), fmt_fixed(x, 3), fmt_sig(x, 2), fmt_sig(x, 4)], x


@pytest.mark.parametrize("case", range(len(UI_CASES)))
def test_typed_prediction_shows_pythons_line(page, case):
    root = page.locator("#mp-ex-js-mirror")
    root.locator("input.mp-slider").evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", str(case)
    )
    typed = UI_CASES[case][0]
    box = root.locator(".mp-prediction")
    box.fill(typed)
    if UI_CASES[case][3]:  # an invalid combination: flagged, nothing to check
        assert root.locator(".mp-check").is_disabled()
        assert root.locator(".mp-answer").inner_text() == f"Not a valid combination: {UI_CASES[case][3]}"
        return
    if case % 2:
        box.press("Enter")
    else:
        root.locator(".mp-check").click(force=True)  # disabled for an empty box: the click does nothing
    shown = root.locator(".mp-answer").inner_text().splitlines()
    expected = compare(typed, EX.result(case=case), "GB", 1, 0.05)
    if not typed.strip() and case % 2 == 0:
        assert shown == []  # Check is disabled: nothing revealed
    else:
        assert shown[0] == expected
