"""``meshplan.widgets``: the prediction reader and the feedback line (exact strings), the static-and-live base
(controls, dependent ranges, tables, payload, HTML, MIME bundle, live controls), the exercise and the
checklist. The page's JavaScript is checked against the same cases in ``test_widget_js.py``."""

from __future__ import annotations

import doctest
import importlib
import json
import re
import unicodedata
from itertools import product

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from widget_cases import COMPARE_CASES, READ_CASES

from meshplan import Plan, evaluate
from meshplan.parallel import zero
from meshplan.widgets import (
    STATIC_ENV,
    Check,
    Checklist,
    Exercise,
    Result,
    StaticWidget,
    compare,
    fmt_fixed,
    fmt_sig,
    read_prediction,
    reveal,
)
from meshplan.widgets.base import auto_input, text_on
from meshplan.widgets.predict import DIGIT_ZEROS

P = 27_781_427_952


def _total_gb(tp: int, pp: int) -> float:
    return evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=tp, pp=pp, recompute="full")).memory_bytes["total"] / 1e9


@pytest.fixture
def plan_ex():
    """Total memory per GPU for TP × PP on 8 GPUs; tp = 3, and tp = 8 with pp > 1, are invalid plans."""
    return Exercise(
        "plan-mem",
        "Memory per GPU for TP x PP on 8 GPUs?",
        _total_gb,
        sliders={"tp": [1, 2, 3, 8], "pp": [1, 2, 4]},
        unit="GB",
        digits=1,
        explain=lambda tp, pp: f"TP {tp} x PP {pp}",
        labels={"tp": "TP size"},
        defaults={"pp": 4},
    )


@pytest.fixture
def floor_ex():
    return Exercise(
        "floor",
        "Model states per GPU with ZeRO-3?",
        lambda n: zero.model_states_bytes(P, 3, n) / 1e9,
        sliders={"n": [1, 8, 64]},
        unit="GB",
        explain=lambda n: f"444.5 GB / {n}",
    )


def _rank_mb(n: int, rank: int) -> float:
    return 10.0 * n + rank


@pytest.fixture
def rank_ex():
    """rank ≤ N − 1: a dependent range."""
    return Exercise(
        "owner",
        "MB on this rank?",
        _rank_mb,
        sliders={"n": [2, 4, 8], "rank": list(range(8))},
        defaults={"n": 8, "rank": 5},
        unit="MB",
        depends={"rank": lambda n: range(n)},
    )


def _payload(html: str) -> dict:
    found = re.findall(r'<script type="application/json" class="mp-data">(.*?)</script>', html, re.DOTALL)
    assert len(found) == 1
    return json.loads(found[0])


def test_submodule_examples_pass():
    for name in ("predict", "base", "exercise", "runtime"):
        result = doctest.testmod(importlib.import_module(f"meshplan.widgets.{name}"), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, name


# ---------------------------------------------------------------- reading a prediction
@pytest.mark.parametrize("typed,unit,value,echo,note,error", READ_CASES)
def test_read_prediction(typed, unit, value, echo, note, error):
    r = read_prediction(typed, unit)
    assert (r.value, r.echo, r.note, r.error) == (value, echo, note, error)


def test_read_rules_in_words():
    """The rules the module states, one line each (the table above holds the exact texts)."""
    assert read_prediction("1,5").value == 1.5  # a lone comma is a decimal comma ...
    assert read_prediction("1,500").value == 1500  # ... unless 1-3 digits, comma, 3 digits
    assert read_prediction("1,500").note == "the comma read as a thousands separator"
    assert read_prediction("1.500").value == 1.5  # a lone point is always decimal
    assert read_prediction("1.234,5").value == read_prediction("1,234.5").value == 1234.5  # the later mark
    assert read_prediction("1 234,567").value == 1234.567  # other separators present: decimal comma
    assert read_prediction("52 GiB", "GB").value == 52 * 2**30 / 1e9
    assert read_prediction("37.5%").value == 0.375 and read_prediction("0.375", "%").value == 0.375
    assert read_prediction("\u22123").value == read_prediction("-3").value == -3


def test_digit_scripts_are_ten_consecutive_digits():
    for z in DIGIT_ZEROS:
        assert [unicodedata.decimal(chr(z + k)) for k in range(10)] == list(range(10)), hex(z)
        assert read_prediction(chr(z + 4) + chr(z + 2)).value == 42


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_read_or_refused_with_one_line(text):
    r = read_prediction(text, "GB")
    assert (r.value is None) == (r.error is not None)
    msg = compare(text, Result(55.56, "55.6 GB"), "GB")
    assert "\n" not in msg and len(msg) < 400
    if r.error:
        assert msg == r.error and "55.6" not in msg  # a refusal never gives the answer away


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False))
def test_any_number_is_graded_without_a_long_line(x, v):
    msg = compare(repr(x), Result(v, f"{v:g}"), "GB")
    assert len(msg) < 260 and "inf" not in msg and "nan" not in msg
    assert compare("1e300", Result(1e-300, "0")).endswith(
        "more than 1e308 × the answer: ✗ off by more than a factor of 10."
    )


# ---------------------------------------------------------------- numbers as text
@pytest.mark.parametrize(
    "x,digits,text",
    [
        (2.25, 1, "2.3"),
        (0.125, 2, "0.13"),
        (2.675, 2, "2.67"),
        (-0.04, 1, "0.0"),
        (-1.25, 1, "−1.3"),
        (1234567.891, 2, "1,234,567.89"),
        (0.0, 0, "0"),
        (999.5, 0, "1,000"),
    ],
)
def test_fmt_fixed_rounds_half_away_from_zero_on_the_exact_value(x, digits, text):
    assert fmt_fixed(x, digits) == text


@pytest.mark.parametrize(
    "x,sig,text",
    [
        (55.834574848, 4, "55.83"),
        (1e308 / 55.56, 2, "1.8e306"),
        (0.0001234, 3, "0.000123"),
        (1.234e-7, 3, "1.23e−7"),
        (9.9996, 4, "10"),
        (-1234.5, 2, "−1,200"),
        (1e15, 3, "1e15"),
        (999_999_999_999_999.9, 3, "1e15"),
        (0.0, 3, "0"),
        (5400.0, 4, "5,400"),
        (0.3, 4, "0.3"),
    ],
)
def test_fmt_sig(x, sig, text):
    assert fmt_sig(x, sig) == text


# ---------------------------------------------------------------- the feedback line
@pytest.mark.parametrize("typed,value,text,error,unit,digits,tolerance,expected", COMPARE_CASES)
def test_compare(typed, value, text, error, unit, digits, tolerance, expected):
    assert compare(typed, Result(value, text, "", error), unit, digits, tolerance) == expected


def test_grades_in_order():
    r = Result(100.0, "100.0 GB")
    verdicts = [re.split(r"(?:\)|answer): ", compare(x, r, "GB"))[1] for x in ("103", "120", "500", "2000", "-100")]
    assert verdicts == [
        "✓ within 5 %.",
        "≈ within 25 %.",
        "~ right order of magnitude (within a factor of 10).",
        "✗ off by more than a factor of 10.",
        "✗ off: the sign is wrong.",
    ]


def test_reveal_says_the_prediction_was_skipped():
    assert reveal(Result(55.56, "55.6 GB")) == "You skipped the prediction. The library says 55.6 GB."
    assert (
        reveal(Result(None, "", "", "tp=3 does not divide 4 KV heads"))
        == "Not a valid combination: tp=3 does not divide 4 KV heads"
    )


# ---------------------------------------------------------------- the base: controls
def test_auto_inputs():
    assert auto_input([1, 2, 4], ["1", "2", "4"]) == "slider"
    assert auto_input([8, 4], ["8", "4"]) == "radio"  # numbers, not increasing
    assert auto_input(["ring", "naive"], ["ring", "naive"]) == "radio"
    names = ["qwen3.8-27b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-v3", "llama-3.1-8b", "small-3.7m"]
    assert auto_input(names, names) == "select"  # 6 options but 70 characters
    assert auto_input([True, False], ["True", "False"]) == "radio"  # booleans are not numbers
    assert auto_input([5], ["5"]) == "radio"


def test_controls_texts_labels_and_overrides():
    w = StaticWidget(
        "w",
        {"link": ["nvlink", "ib"], "n": [1, 2]},
        labels={"n": "N GPUs"},
        texts={"link": {"nvlink": "NVLink", "ib": "InfiniBand"}},
        inputs={"n": "select"},
    )
    link, n = w.controls
    assert (link.texts, link.label, link.input) == (("NVLink", "InfiniBand"), "link", "radio")
    assert (n.label, n.input, n.default) == ("N GPUs", "select", 1)
    page = w.controls_html()
    assert '<label class="mp-option"><input type="radio" name="mp-w-w-link" value="0" checked>NVLink</label>' in page
    assert '<option value="0" selected>1</option><option value="1">2</option>' in page


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"controls": {"n": []}}, "control 'n' has no values"),
        ({"controls": {"n": [1, 2, 1]}}, "control 'n' repeats a value: [1, 2, 1]"),
        ({"controls": {"n": [1, 2]}, "defaults": {"n": 5}}, "default n=5 is not one of n's values"),
        ({"controls": {"n": [1, 2]}, "defaults": {"m": 1}}, "defaults names 'm', which is not a control (n)"),
        ({"controls": {"n": [1, 2]}, "labels": {"x": "X"}}, "labels names 'x', which is not a control (n)"),
        (
            {"controls": {"n": [1, 2]}, "inputs": {"n": "knob"}},
            "inputs['n']='knob' must be one of slider, radio, select",
        ),
        (
            {"controls": {"n": [1, 2]}, "depends": {"n": lambda m: [1]}},
            "depends['n'] reads 'm', which is not another control",
        ),
        ({"controls": {"n": [1, 2], "r": [0, 1]}, "depends": {"r": lambda **kw: [0]}}, "name the controls it reads"),
        ({"controls": {"n": [1, 2], "r": [0, 1]}, "depends": {"r": lambda n: n}}, "must return the allowed values"),
        (
            {"controls": {"n": [1, 2], "r": [5, 6]}, "depends": {"r": lambda n: range(n)}},
            "no value of r is allowed when n=1",
        ),
        (
            {"controls": {"a": [1, 2], "b": [1, 2]}, "depends": {"a": lambda b: [1], "b": lambda a: [1]}},
            "depends has a cycle",
        ),
        (
            {"controls": {"n": [2, 4], "r": [0, 3]}, "defaults": {"r": 3}, "depends": {"r": lambda n: range(n)}},
            "default r=3 is not allowed when n=2",
        ),
        (
            {"controls": {"a": range(50), "b": range(50)}},
            "2,500 control combinations; keep the page small (at most 2,000)",
        ),
    ],
)
def test_base_validation(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        StaticWidget("w", **kwargs)


@pytest.mark.parametrize("bad", ["bad id!", "", "a/b", "x y"])
def test_ids(bad):
    with pytest.raises(ValueError, match=re.escape(f"widget id={bad!r} must use letters, digits, '-' or '_'")):
        StaticWidget(bad, {})


def test_dependent_range_tables_and_keys(rank_ex):
    assert rank_ex.allowed("rank", {"n": 2}) == (0, 1)
    assert rank_ex.allowed("rank", {"n": 8}) == tuple(range(8))
    table = rank_ex.table()
    assert len(table) == 2 + 4 + 8  # rank < n only
    assert "0,2" not in table and table["0,1"].value == 21.0 and table["2,7"].value == 87.0
    assert rank_ex.key({"n": 4, "rank": 3}) == "1,3"
    data = _payload(rank_ex.to_html())
    rank = data["controls"][1]
    assert rank["parents"] == ["n"] and rank["allow"] == {"0": [0, 1], "1": [0, 1, 2, 3], "2": list(range(8))}
    assert data["order"] == ["n", "rank"]


def test_dependent_slider_html_offers_only_allowed_positions():
    w = StaticWidget(
        "w",
        {"n": [2, 4, 8], "rank": list(range(8))},
        defaults={"n": 4, "rank": 3},
        depends={"rank": lambda n: range(n)},
    )
    page = w.controls_html()
    assert 'data-name="rank" min="0" max="3" step="1" value="3" aria-valuetext="3">' in page
    v = StaticWidget(
        "v",
        {"schedule": ["1f1b", "interleaved"], "v": [1, 2, 4]},
        inputs={"v": "radio"},
        depends={"v": lambda schedule: [1, 2, 4] if schedule == "interleaved" else [1]},
    )
    assert 'value="1" disabled>2</label>' in v.controls_html() and "mp-option mp-disabled" in v.controls_html()


def test_chained_dependencies_are_enumerated_in_order():
    w = StaticWidget(
        "w",
        {"a": [1, 2], "b": [1, 2, 3], "c": [1, 2, 3, 4]},
        depends={"c": lambda b: range(1, b + 2), "b": lambda a: range(1, a + 2)},
    )
    assert w.order == ("a", "b", "c")
    assert [tuple(x.values()) for x in w.combinations()] == [
        (1, 1, 1),
        (1, 1, 2),
        (1, 2, 1),
        (1, 2, 2),
        (1, 2, 3),
        (2, 1, 1),
        (2, 1, 2),
        (2, 2, 1),
        (2, 2, 2),
        (2, 2, 3),
        (2, 3, 1),
        (2, 3, 2),
        (2, 3, 3),
        (2, 3, 4),
    ]
    with pytest.raises(ValueError, match="a table over c needs b"):
        w.combinations(["c"])


def test_text_on_picks_the_higher_contrast():
    assert (text_on("#1f77b4"), text_on("#ff7f0e"), text_on("#000000"), text_on("#ffffff")) == (
        "#fff",
        "#111",
        "#fff",
        "#111",
    )


# ---------------------------------------------------------------- the exercise: answers
def test_table_has_every_combination(plan_ex):
    table = plan_ex.table()
    assert set(table) == {f"{i},{j}" for i, j in product(range(4), range(3))}
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
        assert (r.error, r.value, r.text, r.explanation) == (None, want, f"{want:,.1f} GB", f"TP {tp} x PP {pp}")
    assert valid == 3 + 3 + 1  # tp 1 and 2 with every pp; tp 8 only with pp 1


def test_invalid_combination_carries_the_library_message(plan_ex):
    with pytest.raises(ValueError) as exc:
        Plan.create("qwen3.8-27b", gpus=8, tp=3, pp=2, recompute="full")
    assert plan_ex.table()["2,1"].error == str(exc.value)
    assert compare("5", plan_ex.table()["2,1"], "GB") == f"Not a valid combination: {exc.value}"


def test_known_values(floor_ex, plan_ex):
    assert [floor_ex.result(n=n).text for n in (8, 1, 64)] == ["55.6 GB", "444.5 GB", "6.9 GB"]
    assert plan_ex.result(tp=2, pp=4).text == "56.9 GB"  # the lab's TP 2 x PP 4 row


def test_non_finite_answer_is_an_error():
    r = Exercise("inf", "q", lambda: float("inf")).result()
    assert (r.value, r.error) == (None, "the answer is not a finite number (inf)")


def test_no_controls_and_word_answers():
    ex = Exercise("word", "Which link?", lambda: "NVLink")
    assert list(ex.table()) == [""]
    assert ex.table()[""] == Result("NVLink", "NVLink", "", None)


def test_word_answers_as_choices():
    """A word answer is chosen, not typed: radio buttons in one labelled group, the choice's value sent as the
    prediction (so "non-zero" is never graded against "nonzero"); an answer outside the choices is the exercise's
    bug, raised when the table is built; the payload carries the choices to the page."""
    ex = Exercise("w", "Zero?", lambda t: "exactly zero" if t < 3 else "nonzero", sliders={"t": [2, 3]},
                  choices=("exactly zero", "nonzero"))  # fmt: skip
    html = ex.to_html()
    assert 'role="radiogroup" aria-labelledby="mp-ex-w-prediction-label"' in html
    assert html.count('type="radio" name="mp-ex-w-prediction"') == 2
    assert 'type="text" class="mp-prediction"' not in html
    assert ex.payload()["choices"] == ["exactly zero", "nonzero"]
    assert ex.feedback("nonzero", {"t": 3})[0].endswith("✓ Your prediction matches.")
    assert ex.feedback("exactly zero", {"t": 3})[0].endswith("✗ No match.")
    with pytest.raises(TypeError, match="the answer 'maybe' is not one of its choices"):
        Exercise("x", "q", lambda: "maybe", choices=("yes", "no")).table()
    with pytest.raises(ValueError, match="must be two or more different words"):
        Exercise("x", "q", lambda: "yes", choices=("yes", "yes"))


def test_exercise_validation():
    with pytest.raises(ValueError, match=re.escape("exercise id='bad id!' must use")):
        Exercise("bad id!", "q", lambda: 1)
    with pytest.raises(ValueError, match="digits=-1 must be an integer from 0 to 12"):
        Exercise("x", "q", lambda: 1, digits=-1)
    with pytest.raises(ValueError, match="tolerance=0 must be a fraction between 0 and 1"):
        Exercise("x", "q", lambda: 1, tolerance=0)


def test_feedback_shows_the_worked_answer_only_for_a_read_prediction(floor_ex):
    assert floor_ex.feedback("", {"n": 8}) == ("Type a prediction first, or press Show me.", "")
    assert floor_ex.feedback("lots", {"n": 8}) == ("Could not read “lots”: not a number.", "")
    text, explanation = floor_ex.feedback("50", {"n": 8})
    assert text == (
        "Read as 50 GB. The library says 55.6 GB. Your prediction is off by −5.6 GB (−10 %): ≈ within 25 %."
    )
    assert explanation == "444.5 GB / 8"


# ---------------------------------------------------------------- the exercise: static HTML
def test_html_structure(plan_ex):
    html = plan_ex.to_html()
    assert html.startswith('<div class="mp-widget mp-exercise" id="mp-ex-plan-mem" data-kind="exercise">')
    for cls in ("mp-slider", "mp-prediction", "mp-answer", "mp-question", "mp-show"):
        assert re.search(rf'class="([^"]* )?{cls}[ "]', html), cls
    assert '<button type="button" class="mp-check mp-primary" disabled>Check</button>' in html
    assert html.count('class="mp-control mp-slider"') == 2
    # the slider's position is an index; screen readers announce aria-valuetext, the value the reader chose
    assert re.search(r'data-name="tp" min="0" max="3" step="1" value="0" aria-valuetext="1">', html)
    assert re.search(r'data-name="pp" min="0" max="2" step="1" value="2" aria-valuetext="4">', html)  # pp=4
    assert '<label class="mp-label" for="mp-ex-plan-mem-tp">TP size</label>' in html
    assert 'window.__meshplan.mount("mp-ex-plan-mem");' in html
    assert html.count("<script") == 2 and html.count("<style>") == 1


def test_html_is_offline(plan_ex, floor_ex):
    for ex in (plan_ex, floor_ex):
        html = ex.to_html()
        assert "http" not in html and "<script src" not in html and "<link" not in html


def test_html_payload_holds_the_library_answers(plan_ex):
    data = _payload(plan_ex.to_html())
    assert [c["name"] for c in data["controls"]] == ["tp", "pp"]
    assert [c["texts"] for c in data["controls"]] == [["1", "2", "3", "8"], ["1", "2", "4"]]
    assert (data["digits"], data["unit"], data["tolerance"]) == (1, "GB", 0.05)
    table = plan_ex.table()
    assert data["table"] == {
        k: {"value": r.value, "text": r.text, "explanation": r.explanation, "error": r.error} for k, r in table.items()
    }
    assert data["table"]["1,2"]["text"] == "56.9 GB"


def test_html_escapes_question_and_script_breakouts():
    ex = Exercise("esc", "Is <b>a</b> & b?", lambda s: s, sliders={"s": ["</script><x>", "ok"]})
    html = ex.to_html()
    assert "Is &lt;b&gt;a&lt;/b&gt; &amp; b?" in html
    assert "</script><x>" not in html
    data = _payload(html)
    assert data["controls"][0]["texts"] == ["</script><x>", "ok"]
    assert data["table"]["0"]["text"] == "</script><x>"


# ---------------------------------------------------------------- mime bundle and live widget
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
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert bundle["text/html"] == floor_ex.to_html()


def test_live_exercise_check_show_and_enter(floor_ex):
    w = pytest.importorskip("ipywidgets")
    box = floor_ex.live()
    assert isinstance(box, w.VBox)
    _, slider, row, out = box.children
    pred, check, show = row.children
    assert isinstance(slider, w.SelectionSlider) and [o for o, _ in slider.options] == ["1", "8", "64"]
    check.click()
    assert out.value == "<div class='mp-answer'>Type a prediction first, or press Show me.</div>"
    slider.value = 8
    pred.value = "50"  # Enter (or leaving the box) submits
    text, explanation = floor_ex.feedback("50", {"n": 8})
    assert out.value == f"<div class='mp-answer'>{text}<br><span class='mp-explanation'>{explanation}</span></div>"
    slider.value = 64  # moving a control clears the answer
    assert out.value == ""
    show.click()
    assert out.value.startswith("<div class='mp-answer'>You skipped the prediction. The library says 6.9 GB.")


def test_live_invalid_combination_is_flagged_on_move(plan_ex):
    pytest.importorskip("ipywidgets")
    _, tp, _pp, row, out = plan_ex.live().children
    _, check, show = row.children
    tp.value = 3
    assert out.value.startswith("<div class='mp-answer mp-invalid'>Not a valid combination: tp×cp×pp")
    assert check.disabled and show.disabled
    tp.value = 2
    assert out.value == "" and not check.disabled


def test_live_dependent_range_follows_its_parent(rank_ex):
    pytest.importorskip("ipywidgets")
    _, n, rank, _, _ = rank_ex.live().children
    assert rank.value == 5 and [v for _, v in rank.options] == list(range(8))
    n.value = 2
    assert [v for _, v in rank.options] == [0, 1] and rank.value == 1  # the nearest allowed rank
    n.value = 8
    assert [v for _, v in rank.options] == list(range(8)) and rank.value == 1


# ---------------------------------------------------------------- the checklist
def _plan_lines(tp, pp, zero_stage, m):
    """A small plan-design checklist on 8 GPUs of the anchor (40 heads, 64 layers)."""

    def memory(tp, pp, zero_stage):
        r = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=tp, pp=pp, zero=zero_stage, recompute="full"))
        gb = r.memory_bytes["total"] / 1e9
        return r.fits, f"{gb:,.1f} GB per GPU" + (" fits in 80 GB" if r.fits else " is more than 80 GB")

    return [
        Check("memory fits", memory),
        Check("bubble under 20 %", lambda pp, m: ((pp - 1) / m < 0.2, f"(p−1)/m = {(pp - 1) / m:.1%}")),
        Check("TP inside one node", lambda tp: (tp <= 8, f"TP {tp} of 8 GPUs per node")),
    ]


@pytest.fixture
def plan_ck():
    return Checklist(
        "plan8",
        "Pick a plan for the anchor on 8 GPUs",
        {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "zero_stage": [0, 1, 3], "m": [4, 8, 16]},
        _plan_lines(0, 0, 0, 0),
        labels={"zero_stage": "ZeRO stage"},
        defaults={"zero_stage": 1},
    )


def test_checklist_tables_are_per_line(plan_ck):
    assert [plan_ck.uses(c) for c in plan_ck.checks] == [("tp", "pp", "zero_stage"), ("pp", "m"), ("tp",)]
    table = plan_ck.table()
    assert [len(table[c.name]) for c in plan_ck.checks] == [4 * 4 * 3, 4 * 3, 4]


def test_checklist_passing_is_every_setting_whose_every_line_passes():
    ck = Checklist(
        "sums",
        "q",
        {"a": [1, 2, 3], "b": [1, 2, 3]},
        [Check("sum at most 4", lambda a, b: (a + b <= 4, "")), Check("a odd", lambda a: (a % 2 == 1, ""))],
        depends={"b": lambda a: [b for b in (1, 2, 3) if b >= a]},  # b = 1 is not offered with a = 2 or 3
    )
    assert ck.passing() == [{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 3}]
    assert [v for v in ck.combinations() if v["a"] == 3] == [{"a": 3, "b": 3}]  # fails "sum at most 4"


def test_checklist_report(plan_ck):
    r = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=2, pp=4, zero=1, recompute="full"))
    assert plan_ck.report(tp=2, pp=4, zero_stage=1, m=8) == (
        "2 of 3 checks pass; failing: bubble under 20 %.\n"
        f"✓ memory fits: {r.memory_bytes['total'] / 1e9:,.1f} GB per GPU fits in 80 GB\n"
        "✗ bubble under 20 %: (p−1)/m = 37.5%\n✓ TP inside one node: TP 2 of 8 GPUs per node"
    )
    line = plan_ck.line(plan_ck.checks[0], tp=8, pp=8, zero_stage=0, m=4)
    with pytest.raises(ValueError) as exc:
        Plan.create("qwen3.8-27b", gpus=8, tp=8, pp=8, zero=0, recompute="full")
    assert (line.ok, line.reason) == (False, str(exc.value))  # the library's reason


def test_checklist_payload_and_validation(plan_ck):
    data = _payload(plan_ck.to_html())
    assert [c["uses"] for c in data["checks"]] == [["tp", "pp", "zero_stage"], ["pp", "m"], ["tp"]]
    assert data["checks"][1]["table"]["2,1"] == [False, "(p−1)/m = 37.5%"]
    with pytest.raises(ValueError, match="check 'x' reads 'dp', which is not a control"):
        Checklist("c", "q", {"tp": [1]}, [Check("x", lambda dp: (True, ""))])
    with pytest.raises(ValueError, match="a checklist needs at least one Check"):
        Checklist("c", "q", {"tp": [1]}, [])


def test_checklist_live(plan_ck):
    pytest.importorskip("ipywidgets")
    _, tp, pp, _zero_stage, m, button, out = plan_ck.live().children
    tp.value, pp.value, m.value = 2, 4, 8
    button.click()
    assert out.value.startswith("<div>2 of 3 checks pass; failing: bubble under 20 %.</div>")
    m.value = 16
    assert out.value == ""


def test_a_locked_choice_says_why():
    """``why`` gives a disabled choice its reason (issue 28: ZeRO locked at 0 without a word when DP is 1): in the
    payload for each parents' setting where something is disabled, and in the static HTML at the defaults."""
    ck = Checklist(
        "why",
        "q",
        {"tp": [1, 8], "zero": [0, 1, 3]},
        [Check("zero", lambda zero: (True, f"ZeRO-{zero}"))],
        depends={"zero": lambda tp: [0, 1, 3] if tp < 8 else [0]},
        why={"zero": lambda tp: f"TP {tp} uses all 8 GPUs: nothing to shard"},
        defaults={"tp": 8},
    )
    zero = next(c for c in ck.payload()["controls"] if c["name"] == "zero")
    assert zero["why"] == {"1": "TP 8 uses all 8 GPUs: nothing to shard"}  # only where a choice is disabled
    html = ck.controls_html()
    assert (
        '<span class="mp-why" data-for="zero" aria-live="polite">TP 8 uses all 8 GPUs: nothing to shard</span>' in html
    )
    assert '<span class="mp-why" data-for="zero" aria-live="polite"></span>' in ck.controls_html({"tp": 1, "zero": 3})
    with pytest.raises(ValueError, match="why names 'tp', which has no depends"):
        Checklist("w2", "q", {"tp": [1, 8]}, [Check("t", lambda tp: (True, ""))], why={"tp": lambda: ""})
    with pytest.raises(ValueError, match=r"why\['zero'\] must read the controls its depends reads"):
        Checklist("w3", "q", {"tp": [1, 8], "zero": [0, 1]}, [Check("z", lambda zero: (True, ""))],
                  depends={"zero": lambda tp: [0]}, why={"zero": lambda: ""})  # fmt: skip


def test_a_live_note_beside_a_control():
    """``notes`` shows a derived value beside a control (issue 28: DP, which the plan checklist never showed before
    Check), for every combination of the controls it reads, and at the defaults in the static HTML."""
    ck = Checklist(
        "note",
        "q",
        {"tp": [1, 2, 4], "pp": [1, 2]},
        [Check("t", lambda tp: (True, ""))],
        notes={"pp": lambda tp, pp: f"DP = 8 ÷ (TP {tp} × PP {pp}) = {8 // (tp * pp)}"},
        defaults={"tp": 2, "pp": 2},
    )
    pp = next(c for c in ck.payload()["controls"] if c["name"] == "pp")
    assert pp["note"]["reads"] == ["tp", "pp"]
    assert pp["note"]["texts"]["2,0"] == "DP = 8 ÷ (TP 4 × PP 1) = 2" and len(pp["note"]["texts"]) == 6
    assert '<span class="mp-note" data-for="pp" aria-live="polite">DP = 8 ÷ (TP 2 × PP 2) = 2</span>' in (
        ck.controls_html()
    )
    with pytest.raises(ValueError, match="notes\\['pp'\\] reads 'dp', which is not a control"):
        Checklist("n2", "q", {"pp": [1]}, [Check("t", lambda pp: (True, ""))], notes={"pp": lambda dp: ""})
