"""The static page's JavaScript gives the same feedback as ``meshplan.widgets.compare`` (headless Chromium).

A page is written from ``Exercise.to_html()`` alone (no book build needed), the prediction is typed and Check
pressed for each case, and the shown line is compared with the Python function's.
"""

from __future__ import annotations

import pytest

from browser import offline_browser
from meshplan.widgets import Exercise, compare


def _answer(case):
    if case == "bad":
        raise ValueError("tp=3 does not divide 4 KV heads")
    return {"zero": 0.0, "neg": -2.5, "big": 12345.678, "word": "nvlink"}[case]


EX = Exercise("js-mirror", "Mirror test", _answer, sliders={"case": ["zero", "neg", "big", "word", "bad"]},
              unit="GB", digits=1)

CASES = [("zero", "0"), ("zero", "1"), ("zero", ""), ("neg", "-2.4"), ("neg", "3"), ("big", "12,000"),
         ("big", "abc"), ("big", "inf"), ("big", "12345.678"), ("word", "NVLink"), ("word", "infiniband"),
         ("bad", "1")]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("widget") / "exercise.html"
    path.write_text(f"<!doctype html><meta charset='utf-8'><body>{EX.to_html()}</body>")
    with offline_browser() as browser:
        pg = browser.context.new_page()
        pg.goto(path.as_uri())
        yield pg
        assert browser.blocked == []


@pytest.mark.parametrize("case,prediction", CASES)
def test_javascript_mirrors_python(page, case, prediction):
    root = page.locator("#mp-ex-js-mirror")
    slider = root.locator("input.mp-slider")
    slider.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }",
                    str(EX.sliders["case"].index(case)))
    root.locator(".mp-prediction").fill(prediction)
    root.locator(".mp-check").click()
    shown = root.locator(".mp-answer").inner_text().splitlines()[0]
    assert shown == compare(prediction, EX.result(case=case), EX.unit, EX.digits, EX.tolerance)
