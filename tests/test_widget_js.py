"""The page's JavaScript reads predictions and writes feedback exactly as ``meshplan.widgets`` does, and its own unit
tests pass.

* Python against JavaScript, case by case: every case of ``widget_cases``, and the generated cases below (typed
  predictions built from signs, digit groups, separators, digit scripts, exponents and units; feedback over answers,
  units, decimals and tolerances; numbers of every magnitude), runs through the runtime's ``read``, ``compare``,
  ``reveal``, ``fmtFixed`` and ``fmtSig`` (``window.__meshplan``) in two engines and must give Python's result:
  headless Chromium (a page written from ``Exercise.to_html()`` alone, network blocked) and Node
  (``tests/js/call_runtime.mjs``, on the runtime ``core_js()`` writes into every page). A subset is also typed
  into the exercise in Chromium and checked with the button and Enter.
* ``node --test`` over ``tests/js/*.test.mjs``: the unit tests of the page scripts in ``meshplan/widgets/static/``
  (the reader, the grader, the number formats, the controls and their dependent ranges, mount, and the four
  renderers on a stand-in DOM).

Node comes from ``make node`` (``make test`` depends on it): without it the Node tests are skipped, except in CI,
where they fail.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import offline_browser, open_standalone, standalone_page
from widget_cases import COMPARE_CASES, READ_CASES

from meshplan.widgets import Exercise, Result, compare, fmt_fixed, fmt_sig, read_prediction, reveal
from meshplan.widgets.runtime import core_js

ROOT = Path(__file__).resolve().parents[1]
JS_TESTS = ROOT / "tests" / "js"

UI_CASES = [c for c in COMPARE_CASES if (c[4], c[5], c[6]) == ("GB", 1, 0.05)]


def _answer(case: int):
    value, error = UI_CASES[case][1], UI_CASES[case][3]
    if error:
        raise ValueError(error)
    return value


EX = Exercise("js-mirror", "Mirror test", _answer, sliders={"case": list(range(len(UI_CASES)))}, unit="GB", digits=1)

# ---------------------------------------------------------------------------------------------- generated cases

_DIGIT_SCRIPTS = [ord("0"), 0x0660, 0x0966, 0x0E50, 0xFF10]  # ASCII, Arabic-Indic, Devanagari, Thai, full-width


def _generated_predictions(n: int, seed: int) -> Iterator[str]:
    """Typed predictions: a sign, digit groups joined by a separator, a fraction, an exponent and a unit, from the
    forms the reader accepts, four in ten with pieces it refuses mixed in; a fifth in another digit script."""
    rng = random.Random(seed)
    good = {
        "sign": ["", "", "", "-", "+", "\u2212", "- "],
        "alone": ["0", "1", "7", "12", "123", "999", "1000", "00"],
        "lead": ["1", "7", "12", "123", "999"],
        "group": ["000", "123", "999", "045"],
        "separator": [",", ".", " ", "_", "'", "\u202f", "\xa0", "\u2009", "  "],
        "fraction": ["", "", ".5", ",5", ".25", ",125", ".000"],
        "exponent": ["", "", "", "", "e3", "E-2", "e\u22125", "e+07", "e-320"],
        "unit": ["", "", "", " GB", "gb", " GiB", " TB", " ms", " s", "%", " %", " x", " ×", " GPU", " h"],
    }
    bad = {
        "sign": ["--", "+-"],
        "alone": ["05", "0x1F", "inf", "lots"],
        "lead": ["05", "1234"],
        "group": ["5", "1234", "45"],
        "separator": [",,", "._"],
        "fraction": [".", "..5", ",5e"],
        "exponent": ["e", "e400", "e-400"],
        "unit": [" parsecs", " m", "."],
    }

    def pick(part: str, noisy: bool) -> str:
        return rng.choice(bad[part] if noisy and rng.random() < 0.25 else good[part])

    for _ in range(n):
        noisy = rng.random() < 0.4
        count, separator = rng.choice([0, 0, 0, 1, 2, 3]), pick("separator", noisy)
        text = pick("lead" if count else "alone", noisy) + "".join(
            separator + pick("group", noisy) for _ in range(count)
        )
        text = pick("sign", noisy) + text + "".join(pick(part, noisy) for part in ("fraction", "exponent", "unit"))
        zero = rng.choice(_DIGIT_SCRIPTS) if rng.random() < 0.2 else ord("0")
        yield "".join(chr(zero + int(ch)) if ch.isdigit() else ch for ch in text)


_UNITS = ["", "GB", "GiB", "s", "ms", "%", "×", "GPUs"]
_SAME = {"": "", "gb": "GB", "gib": "GB", "tb": "GB", "ms": "s", "s": "s", "h": "s", "%": "%", "x": "×", "×": "×"}


def _exercise_unit(typed: str, rng: random.Random) -> str:
    """The exercise's unit: most often one the typed unit converts to, else any."""
    unit = typed.rsplit(" ", 1)[-1].lstrip("0123456789.,e+-").lower() if " " in typed else ""
    return _SAME.get(unit, "GPUs") if rng.random() < 0.6 else rng.choice(_UNITS)


_rng = random.Random(1)
GENERATED_READS = [[t, _exercise_unit(t, _rng)] for t in _generated_predictions(600, 1)]


def _generated_comparisons(n: int, seed: int) -> list[list[Any]]:
    """(typed, the library's result, unit, digits, tolerance): generated predictions and numbers near and far from
    the answer, against answers of every size and sign, a word and an invalid combination."""
    rng = random.Random(seed)
    typed = list(_generated_predictions(n, seed))
    values: list[Any] = [55.56, 0.0, -3.25, 1e-3, 1234.5, 1e300, 2.5e-310, 0.375, 7.0, "NVLink", None]
    out = []
    for i in range(n):
        unit, digits, tolerance = rng.choice(_UNITS), rng.randrange(4), rng.choice([0.05, 0.1, 0.25])
        value = rng.choice(values)
        if isinstance(value, float) and rng.random() < 0.5:  # a prediction near the answer: the grades' edges
            typed[i] = repr(value * rng.choice([1, 1.04, 1.05, 1.06, 0.75, 0.25, 10, 10.5, -1, 0.099]))
        if value is None:
            result = {"value": None, "text": "", "error": "tp must divide 32 heads"}
        elif isinstance(value, str):
            result = {"value": value, "text": value, "error": None}
            typed[i] = rng.choice([typed[i], " nvlink ", "NVLINK", "PCIe"])
        else:
            result = {"value": value, "text": f"{fmt_fixed(value, digits)} {unit}".strip(), "error": None}
        out.append([typed[i], result, unit, digits, tolerance])
    return out


GENERATED_COMPARISONS = _generated_comparisons(400, 2)


def _generated_numbers(n: int, seed: int) -> list[float]:
    """Numbers of every magnitude from 1e-12 to 1e22, both signs, with few and many digits, and exact halves at the
    rounding digit (where rounding half away from zero matters)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            x = rng.randrange(1, 10**6) / 2 ** rng.randrange(1, 5)  # 0.5, 0.25, 0.125, 0.0625: exact in binary
        else:
            x = round(rng.uniform(1, 10), rng.randrange(1, 17)) * 10.0 ** rng.randrange(-12, 23)
        out.append(-x if rng.random() < 0.3 else x)
    return out


GENERATED_NUMBERS = _generated_numbers(500, 3)

# ---------------------------------------------------------------------------------------------- the two engines


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = standalone_page(tmp_path_factory.mktemp("widget") / "exercise.html", EX.to_html())
    with offline_browser() as browser:
        pg = open_standalone(browser, path)
        yield pg
        assert browser.blocked == [] and browser.page_errors == []


@pytest.fixture(scope="module")
def node() -> str:
    """Node's executable (``make node`` installs Debian's)."""
    path = shutil.which("node")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("node not found: `make node` installs it (make test depends on it)")
        pytest.skip("node not found: run `make node`")
    return path


Engine = Callable[[str, list[list[Any]]], list[Any]]


@pytest.fixture(params=["chromium", "node"])
def engine(request) -> Engine:
    """``call(name, calls)``: ``window.__meshplan[name](*args)`` for each ``args`` of ``calls``, in the engine."""
    if request.param == "chromium":
        pg = request.getfixturevalue("page")
        return lambda name, calls: pg.evaluate(
            "([name, calls]) => calls.map(args => window.__meshplan[name](...args))", [name, calls]
        )
    node = request.getfixturevalue("node")
    runtime = core_js()

    def call(name: str, calls: list[list[Any]]) -> list[Any]:
        stdin = json.dumps({"runtime": runtime, "name": name, "calls": calls}, allow_nan=False)
        done = subprocess.run(
            [node, str(JS_TESTS / "call_runtime.mjs")], input=stdin, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return call


def _reading(js: dict) -> tuple:
    """A reading from JavaScript as a tuple; a whole-number value comes back as an int (JSON writes 1e19 as
    10000000000000000000), compared as the double it is."""
    value = float(js["value"]) if isinstance(js["value"], int) else js["value"]
    return (value, js["echo"], js["note"], js["error"])


# ---------------------------------------------------------------------------------------------- parity


def test_read_mirrors_python(engine):
    got = engine("read", [[c[0], c[1]] for c in READ_CASES])
    for case, js in zip(READ_CASES, got):
        r = read_prediction(case[0], case[1])
        assert _reading(js) == (r.value, r.echo, r.note, r.error) == case[2:], case


def test_compare_and_reveal_mirror_python(engine):
    args = [[c[0], {"value": c[1], "text": c[2], "error": c[3]}, c[4], c[5], c[6]] for c in COMPARE_CASES]
    js_compare = engine("compare", args)
    js_reveal = engine("reveal", [[a[1]] for a in args])
    for case, got, shown in zip(COMPARE_CASES, js_compare, js_reveal):
        r = Result(case[1], case[2], "", case[3])
        assert got == compare(case[0], r, *case[4:7]) == case[7], case
        assert shown == reveal(r)


FORMAT_CASES = [
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


def _formats(engine: Engine, xs: list[float]) -> None:
    fixed = {d: engine("fmtFixed", [[x, d] for x in xs]) for d in (0, 1, 3)}
    sig = {s: engine("fmtSig", [[x, s] for x in xs]) for s in (1, 2, 4, 6)}
    for i, x in enumerate(xs):
        assert [fixed[d][i] for d in fixed] == [fmt_fixed(x, d) for d in fixed], x
        assert [sig[s][i] for s in sig] == [fmt_sig(x, s) for s in sig], x


def test_number_formats_mirror_python(engine):
    _formats(engine, FORMAT_CASES)


def test_generated_readings_mirror_python(engine):
    got = engine("read", GENERATED_READS)
    refused = 0
    for (typed, unit), js in zip(GENERATED_READS, got):
        r = read_prediction(typed, unit)
        assert _reading(js) == (r.value, r.echo, r.note, r.error), (typed, unit)
        refused += r.error is not None
    assert 0.2 < refused / len(GENERATED_READS) < 0.8  # both readings and refusals, in numbers


def test_generated_feedback_mirrors_python(engine):
    js_compare = engine("compare", GENERATED_COMPARISONS)
    js_reveal = engine("reveal", [[c[1]] for c in GENERATED_COMPARISONS])
    verdicts = set()
    for (typed, result, unit, digits, tolerance), got, shown in zip(GENERATED_COMPARISONS, js_compare, js_reveal):
        r = Result(result["value"], result["text"], "", result["error"])
        assert got == compare(typed, r, unit, digits, tolerance), (typed, result, unit, digits, tolerance)
        assert shown == reveal(r)
        verdicts.add(re.sub(r"\d+", "N", got.rsplit(": ", 1)[-1]) if got.startswith("Read as") else got[:12])
    assert {"✓ within N %.", "≈ within N %.", "✗ off by more than a factor of N."} <= verdicts


def test_generated_number_formats_mirror_python(engine):
    _formats(engine, GENERATED_NUMBERS)


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


# ---------------------------------------------------------------------------------------------- node --test


def test_the_page_scripts_unit_tests_pass(node):
    """``node --test`` over every ``tests/js/*.test.mjs`` (named one by one: Node 18 and 20 take a folder, later
    versions a glob), with this Python for the scripts' text (``tests/js/page.mjs``)."""
    files = sorted(JS_TESTS.glob("*.test.mjs"))
    assert {f.name for f in files} >= {"predict.test.mjs", "format.test.mjs", "runtime.test.mjs", "renderers.test.mjs"}
    done = subprocess.run(
        [node, "--test", "--test-reporter=tap", *map(str, files)],
        cwd=ROOT,
        env={**os.environ, "MESHPLAN_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = done.stdout[-8000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    counts = dict(re.findall(r"^# (pass|fail) (\d+)$", done.stdout, re.MULTILINE))
    assert counts.get("fail") == "0" and int(counts.get("pass", 0)) >= 80, report
