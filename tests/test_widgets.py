"""``meshplan.widgets``: the predict-then-check exercise (answer tables, static HTML, feedback, mime bundle)."""

from __future__ import annotations

import json
import re
from itertools import product

import pytest

from meshplan import Plan, evaluate, zero
from meshplan.widgets import STATIC_ENV, Exercise, Result, compare

P = 27_781_427_952


def _total_gb(tp: int, pp: int) -> float:
    return evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=tp, pp=pp, recompute="full")).memory_bytes["total"] / 1e9


@pytest.fixture
def plan_ex():
    """Total memory per GPU for TP × PP on 8 GPUs; tp = 3, and tp = 8 with pp > 1, are invalid plans."""
    return Exercise("plan-mem", "Memory per GPU for TP x PP on 8 GPUs?", _total_gb,
                    sliders={"tp": [1, 2, 3, 8], "pp": [1, 2, 4]}, unit="GB", digits=1,
                    explain=lambda tp, pp: f"TP {tp} x PP {pp}", labels={"tp": "TP size"}, defaults={"pp": 4})


@pytest.fixture
def floor_ex():
    return Exercise("floor", "Model states per GPU with ZeRO-3?",
                    lambda n: zero.model_states_bytes(P, 3, n) / 1e9, sliders={"n": [1, 8, 64]}, unit="GB")


def _payload(html: str) -> dict:
    found = re.findall(r'<script type="application/json" class="mp-data">(.*?)</script>', html, re.S)
    assert len(found) == 1
    return json.loads(found[0])


# ---------------------------------------------------------------- the answer table
def test_table_has_every_combination(plan_ex):
    table = plan_ex.table()
    assert set(table) == {f"{i},{j}" for i, j in product(range(4), range(3))}
    assert len(table) == 12
    valid = 0
    for (i, tp), (j, pp) in product(enumerate([1, 2, 3, 8]), enumerate([1, 2, 4])):
        r = table[f"{i},{j}"]
        assert isinstance(r, Result)
        try:
            want = _total_gb(tp, pp)
        except ValueError as exc:
            assert (r.value, r.text, r.explanation, r.error) == (None, "", "", str(exc)), (tp, pp)
            continue
        valid += 1
        assert r.error is None
        assert r.value == want
        assert r.text == f"{want:,.1f} GB"
        assert r.explanation == f"TP {tp} x PP {pp}"
    assert valid == 3 + 3 + 1  # tp 1 and 2 with every pp; tp 8 only with pp 1


def test_invalid_combination_carries_the_library_message(plan_ex):
    with pytest.raises(ValueError) as exc:
        Plan.create("qwen3.8-27b", gpus=8, tp=3, pp=2, recompute="full")
    for j in range(3):
        r = plan_ex.table()[f"2,{j}"]
        assert r.value is None and r.text == "" and r.explanation == ""
        assert r.error is not None and "tp×cp×pp" in r.error
    assert plan_ex.table()["2,1"].error == str(exc.value)


def test_known_values(floor_ex, plan_ex):
    assert floor_ex.result(n=8).text == "55.6 GB"
    assert floor_ex.result(n=1).text == "444.5 GB"
    assert floor_ex.result(n=64).text == "6.9 GB"
    assert plan_ex.result(tp=2, pp=4).text == "56.9 GB"  # the lab's TP 2 x PP 4 row


def test_no_sliders_and_word_answers():
    ex = Exercise("word", "Which link?", lambda: "NVLink")
    assert list(ex.table()) == [""]
    r = ex.table()[""]
    assert (r.value, r.text, r.error) == ("NVLink", "NVLink", None)


def test_constructor_validation():
    with pytest.raises(ValueError, match="exercise id"):
        Exercise("bad id!", "q", lambda: 1)
    with pytest.raises(ValueError, match="slider 'n' has no values"):
        Exercise("x", "q", lambda n: n, sliders={"n": []})
    with pytest.raises(ValueError, match="default n=5"):
        Exercise("x", "q", lambda n: n, sliders={"n": [1, 2]}, defaults={"n": 5})


# ---------------------------------------------------------------- the static HTML
def test_html_structure(plan_ex):
    html = plan_ex.to_html()
    assert html.startswith('<div class="mp-exercise" id="mp-ex-plan-mem"')
    for cls in ("mp-exercise", "mp-slider", "mp-prediction", "mp-check", "mp-answer", "mp-data", "mp-question"):
        assert f'class="{cls}"' in html, cls
    assert html.count('class="mp-slider"') == 2
    assert 'data-name="tp"' in html and 'data-name="pp"' in html
    # the defaults: tp -> index 0 (first value), pp -> index 2 (defaults={"pp": 4})
    assert re.search(r'data-name="tp" min="0" max="3" step="1" value="0"', html)
    assert re.search(r'data-name="pp" min="0" max="2" step="1" value="2"', html)
    assert "TP size" in html
    assert 'document.getElementById("mp-ex-plan-mem")' in html
    assert "__ID__" not in html


def test_html_is_offline(plan_ex, floor_ex):
    for ex in (plan_ex, floor_ex):
        html = ex.to_html()
        assert not re.search(r"https?://", html)
        assert "http" not in html
        assert "<script src" not in html and "<link" not in html


def test_html_payload_holds_the_library_answers(plan_ex):
    data = _payload(plan_ex.to_html())
    assert data["names"] == ["tp", "pp"]
    assert data["values"] == {"tp": ["1", "2", "3", "8"], "pp": ["1", "2", "4"]}
    assert (data["digits"], data["unit"], data["tolerance"]) == (1, "GB", 0.05)
    table = plan_ex.table()
    assert set(data["table"]) == set(table)
    for key, r in table.items():
        assert data["table"][key] == {"value": r.value, "text": r.text, "explanation": r.explanation,
                                      "error": r.error}
    assert data["table"]["1,2"]["text"] == "56.9 GB"
    assert "tp×cp×pp" in data["table"]["2,0"]["error"]


def test_html_escapes_question_and_script_breakouts():
    ex = Exercise("esc", "Is <b>a</b> & b?", lambda s: s, sliders={"s": ["</script><x>", "ok"]})
    html = ex.to_html()
    assert "Is &lt;b&gt;a&lt;/b&gt; &amp; b?" in html
    assert "</script><x>" not in html  # neither in the output tag nor in the JSON payload
    data = _payload(html)
    assert data["values"]["s"] == ["</script><x>", "ok"]
    assert data["table"]["0"]["text"] == "</script><x>"


# ---------------------------------------------------------------- compare()
def _r(value, text=None, error=None):
    return Result(value, text if text is not None else ("" if value is None else f"{value:,.1f} GB"), "", error)


def test_compare_no_prediction():
    assert compare("", _r(55.56), "GB") == "The library says 55.6 GB."
    assert compare("   ", _r(55.56), "GB") == "The library says 55.6 GB."


def test_compare_match_within_tolerance():
    msg = compare("55.6", _r(55.56), "GB")
    assert msg == "The library says 55.6 GB. Your prediction is off by +0.0 GB (+0 %): ✓ within 5 %."
    assert compare("58", _r(55.56), "GB") == \
        "The library says 55.6 GB. Your prediction is off by +2.4 GB (+4 %): ✓ within 5 %."


def test_compare_off_by_minus_ten_percent():
    msg = compare("90", _r(100.0), "GB")
    assert msg == "The library says 100.0 GB. Your prediction is off by −10.0 GB (−10 %): ✗ off."
    assert "−" in msg and "-" not in msg  # the minus sign, not a hyphen
    assert "%" in msg


def test_compare_thousands_separators_and_units():
    assert compare("3,500", _r(3500.4), "GB") == \
        "The library says 3,500.4 GB. Your prediction is off by −0.4 GB (−0 %): ✓ within 5 %."
    assert compare("1200", _r(1000.0), "") == "The library says 1,000.0 GB. Your prediction is off by +200.0 (+20 %): ✗ off."


def test_compare_not_a_number():
    assert compare("lots", _r(55.56), "GB") == \
        "The library says 55.6 GB. (Type a number to see how far off you were.)"


def test_compare_word_answer():
    r = Result("nvlink", "NVLink")
    assert compare("NVLINK", r) == "The library says NVLink. ✓ Your prediction matches."
    assert compare(" infiniband ", r) == "The library says NVLink. ✗ You predicted infiniband."


def test_compare_error():
    r = Result(None, "", "", "tp=3 does not divide 24 attention heads")
    assert compare("5", r) == "Not a valid plan: tp=3 does not divide 24 attention heads"
    assert compare("", r) == "Not a valid plan: tp=3 does not divide 24 attention heads"


@pytest.mark.parametrize("word", ["nan", "NaN", "inf"])
def test_compare_non_finite_is_not_a_number(word):
    """BUG: float() accepts nan/inf, so the live widget prints 'off by −nan GB (−nan %)'; the static page's
    JavaScript (Number("nan") is NaN) says 'Type a number'. The two must agree."""
    assert compare(word, _r(55.56), "GB") == \
        "The library says 55.6 GB. (Type a number to see how far off you were.)"


# ---------------------------------------------------------------- mime bundle
def test_static_bundle_has_no_widget(monkeypatch, floor_ex):
    monkeypatch.setenv(STATIC_ENV, "1")
    bundle = floor_ex._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/html"] == floor_ex.to_html()
    assert bundle["text/plain"] == "Exercise 'floor': Model states per GPU with ZeRO-3?"


def test_live_bundle_has_widget_and_html(monkeypatch, floor_ex):
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv(STATIC_ENV, raising=False)
    bundle = floor_ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"]
    assert bundle["text/html"] == floor_ex.to_html()
    assert bundle["text/plain"] == "Exercise 'floor': Model states per GPU with ZeRO-3?"


def test_live_widget_check_uses_compare(monkeypatch, floor_ex):
    w = pytest.importorskip("ipywidgets")
    box = floor_ex.live()
    assert isinstance(box, w.VBox)
    _, slider, row, out = box.children
    pred, button = row.children
    slider.value = 8
    pred.value = "50"
    button.click()
    expected = compare("50", floor_ex.result(n=8), "GB")
    assert "off by −5.6 GB (−10 %): ✗ off." in expected
    assert out.value == f"<div class='mp-answer'>{expected}</div>"
    slider.value = 64  # moving a slider clears the answer
    assert out.value == ""


def test_compare_zero_answer_matched_only_by_zero():
    zero = Result(0.0, "0.0 %")
    assert compare("0", zero, "%").endswith(": ✓ within 5 %.")
    assert compare("1", zero, "%").endswith(": ✗ off.")
