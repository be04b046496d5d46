"""Predict, then check: one exercise helper for every chapter.

The reader sets a few discrete sliders, types a prediction and presses Check; the library's answer
appears with how far the prediction was off. The same object works two ways:

* in Jupyter, a live ipywidget that calls the library when Check is pressed;
* in the built (static) book, a ``text/html`` fallback that carries the library's answer for **every**
  slider combination, computed when the book is built, and a few lines of plain JavaScript that look it
  up. No kernel, no network.

An invalid combination (the library raises ``ValueError``) shows the library's message instead of a
result, never a traceback.

    >>> from meshplan import zero
    >>> ex = Exercise("floor", "Model states per GPU on N GPUs with ZeRO-3?",
    ...               lambda n: zero.model_states_bytes(27_781_427_952, 3, n) / 1e9,
    ...               sliders={"n": [1, 8, 64]}, unit="GB")
    >>> ex.result(n=8).text
    '55.6 GB'
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from dataclasses import dataclass
from itertools import product
from typing import Any, Callable, Mapping, Sequence

STATIC_ENV = "MESHPLAN_STATIC"  # set to 1 by the book build: emit only the static HTML, no live widget

_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def static_and_live_bundle(text_plain: str, html_text: str, live) -> dict:
    """The MIME bundle shared by every interactive display of the course: ``text/html`` (the static version,
    which the book renders) plus, unless ``MESHPLAN_STATIC=1`` (the book build), the live ipywidget's view
    (``live()`` returns the widget or None), which Jupyter renders."""
    bundle = {}
    if os.environ.get(STATIC_ENV) != "1":
        view = live()
        if view is not None and hasattr(view, "_repr_mimebundle_"):
            bundle.update(view._repr_mimebundle_())
    bundle.update({"text/plain": text_plain, "text/html": html_text})
    return bundle


@dataclass(frozen=True)
class Result:
    """The library's answer for one slider combination: a number (or a word), its text, or an error."""

    value: float | str | None
    text: str
    explanation: str = ""
    error: str | None = None


def _round_half_up(x: float) -> int:
    """Math.round for non-negative x, so the live widget and the static page print the same percentage."""
    return math.floor(x + 0.5)


def compare(prediction: str, result: Result, unit: str = "", digits: int = 1, tolerance: float = 0.05) -> str:
    """The feedback line for a typed prediction against a result (plain text; used by the live widget;
    the static page's JavaScript mirrors it)."""
    if result.error:
        return f"Not a valid plan: {result.error}"
    pred = (prediction or "").strip().replace(",", "")
    if not pred:
        return f"The library says {result.text}."
    if isinstance(result.value, str):
        ok = pred.lower() == result.value.lower()
        return f"The library says {result.text}. " + ("✓ Your prediction matches." if ok
                                                      else f"✗ You predicted {prediction.strip()}.")
    try:
        x = float(pred)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        return f"The library says {result.text}. (Type a number to see how far off you were.)"
    diff = x - result.value
    sign = "+" if diff >= 0 else "−"
    # relative error; an exact answer of 0 is matched only by a prediction of exactly 0
    rel = abs(diff) / abs(result.value) if result.value else (0.0 if diff == 0 else float("inf"))
    off = f"{sign}{abs(diff):,.{digits}f}{(' ' + unit) if unit else ''}"
    pct = f" ({sign}{_round_half_up(100 * rel)} %)" if result.value else ""
    verdict = f"✓ within {_round_half_up(100 * tolerance)} %" if rel <= tolerance else "✗ off"
    return f"The library says {result.text}. Your prediction is off by {off}{pct}: {verdict}."


class Exercise:
    """A predict-then-check exercise.

    Args:
        id: a short unique id for the page (letters, digits, ``-``, ``_``).
        question: the question, plain text.
        answer: ``answer(**slider_values)`` → a number in ``unit`` (or a word); it calls the library and
            may raise ``ValueError`` for an invalid combination.
        sliders: name → the discrete values the reader can choose (the first is the default unless
            ``defaults`` says otherwise). Every combination is computed for the static page.
        unit: shown after numbers (``"GB"``, ``"%"``, ``"s"``).
        digits: decimals shown.
        explain: ``explain(**slider_values)`` → a worked answer (plain text), shown with the result.
        tolerance: relative error counted as a match.
        labels: name → the label shown beside the slider.
        defaults: name → the starting value.
    """

    def __init__(self, id: str, question: str, answer: Callable[..., Any],
                 sliders: Mapping[str, Sequence[Any]] | None = None, unit: str = "", digits: int = 1,
                 explain: Callable[..., str] | None = None, tolerance: float = 0.05,
                 labels: Mapping[str, str] | None = None, defaults: Mapping[str, Any] | None = None):
        if not _ID_RE.match(id):
            raise ValueError(f"exercise id={id!r} must use letters, digits, '-' or '_'")
        self.id, self.question, self.answer = id, question, answer
        self.sliders = {k: list(v) for k, v in (sliders or {}).items()}
        for k, vals in self.sliders.items():
            if not vals:
                raise ValueError(f"slider {k!r} has no values")
        self.unit, self.digits, self.explain, self.tolerance = unit, digits, explain, tolerance
        self.labels = dict(labels or {})
        self.defaults = {k: (defaults or {}).get(k, vals[0]) for k, vals in self.sliders.items()}
        for k, val in self.defaults.items():
            if val not in self.sliders[k]:
                raise ValueError(f"default {k}={val!r} is not one of the slider's values")

    # ------------------------------------------------------------------ the library's answers
    def format_value(self, value) -> str:
        if isinstance(value, str):
            return value
        return f"{value:,.{self.digits}f}" + (f" {self.unit}" if self.unit else "")

    def result(self, **values) -> Result:
        """The library's answer for one combination (errors become a Result with ``error`` set)."""
        try:
            value = self.answer(**values)
            if not isinstance(value, str):
                value = float(value)
            expl = self.explain(**values) if self.explain else ""
        except ValueError as exc:
            return Result(None, "", "", str(exc))
        return Result(value, self.format_value(value), expl)

    def table(self) -> dict[str, Result]:
        """Every slider combination, keyed by the slider indices joined with commas ('' without sliders)."""
        names = list(self.sliders)
        out = {}
        for idx in product(*(range(len(self.sliders[n])) for n in names)):
            values = {n: self.sliders[n][i] for n, i in zip(names, idx)}
            out[",".join(map(str, idx))] = self.result(**values)
        return out

    # ------------------------------------------------------------------ static HTML
    def to_html(self) -> str:
        """The self-contained static exercise: sliders, prediction box, Check button, answers for every
        combination, and plain JavaScript (no external scripts)."""
        esc = html.escape
        names = list(self.sliders)
        data = {
            "digits": self.digits, "unit": self.unit, "tolerance": self.tolerance,
            "values": {n: [str(v) for v in self.sliders[n]] for n in names}, "names": names,
            "table": {k: {"value": r.value, "text": r.text, "explanation": r.explanation, "error": r.error}
                      for k, r in self.table().items()},
        }
        rows = []
        for n in names:
            vals = self.sliders[n]
            i = vals.index(self.defaults[n])
            rows.append(
                f'<label class="mp-slider-row">{esc(self.labels.get(n, n))} '
                f'<input type="range" class="mp-slider" data-name="{esc(n)}" min="0" max="{len(vals) - 1}" '
                f'step="1" value="{i}" aria-label="{esc(self.labels.get(n, n))}"> '
                f'<output class="mp-value">{esc(str(vals[i]))}</output></label>')
        unit = f" {esc(self.unit)}" if self.unit else ""
        payload = json.dumps(data, sort_keys=True, ensure_ascii=True).replace("</", "<\\/")
        return (
            f'<div class="mp-exercise" id="mp-ex-{self.id}" style="border:1px solid #ccc;border-radius:6px;'
            f'padding:0.6em 1em;margin:0.8em 0">\n'
            f'<p class="mp-question"><strong>Predict, then check.</strong> {esc(self.question)}</p>\n'
            + "".join(r + "<br>\n" for r in rows)
            + f'<label>Your prediction <input class="mp-prediction" type="text" size="10" '
              f'aria-label="your prediction">{unit}</label> '
              f'<button class="mp-check" type="button">Check</button>\n'
              f'<div class="mp-answer" aria-live="polite" style="margin-top:0.5em"></div>\n'
              f'<script type="application/json" class="mp-data">{payload}</script>\n'
              f'<script>{_JS.replace("__ID__", "mp-ex-" + self.id)}</script>\n</div>'
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return static_and_live_bundle(f"Exercise {self.id!r}: {self.question}", self.to_html(), self.live)

    # ------------------------------------------------------------------ live widget
    def live(self):
        """The live ipywidget (None if ipywidgets is not installed)."""
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover
            return None
        sliders = {n: w.SelectionSlider(options=[(str(v), v) for v in vals], value=self.defaults[n],
                                        description=self.labels.get(n, n), continuous_update=False,
                                        style={"description_width": "initial"})
                   for n, vals in self.sliders.items()}
        pred = w.Text(description="Your prediction", placeholder=self.unit, style={"description_width": "initial"})
        button = w.Button(description="Check")
        out = w.HTML()

        def check(_=None):
            r = self.result(**{n: s.value for n, s in sliders.items()})
            text = compare(pred.value, r, self.unit, self.digits, self.tolerance)
            extra = f"<br>{html.escape(r.explanation)}" if (r.explanation and not r.error) else ""
            out.value = f"<div class='mp-answer'>{html.escape(text)}{extra}</div>"

        def reset(_=None):
            out.value = ""

        button.on_click(check)
        for s in sliders.values():
            s.observe(reset, names="value")
        return w.VBox([w.HTML(f"<b>Predict, then check.</b> {html.escape(self.question)}"), *sliders.values(),
                       w.HBox([pred, button]), out])


# The static page's script: mirrors ``compare``. __ID__ is replaced by the exercise's element id.
_JS = r"""
(function(){
var root=document.getElementById("__ID__");if(!root)return;
var data=JSON.parse(root.querySelector(".mp-data").textContent);
var sliders=root.querySelectorAll(".mp-slider"),ans=root.querySelector(".mp-answer");
function fmt(x){return x.toLocaleString("en-US",{minimumFractionDigits:data.digits,maximumFractionDigits:data.digits});}
function key(){var k=[];for(var i=0;i<sliders.length;i++)k.push(sliders[i].value);return k.join(",");}
sliders.forEach(function(s){s.addEventListener("input",function(){
  s.parentNode.querySelector(".mp-value").textContent=data.values[s.dataset.name][+s.value];ans.textContent="";});});
root.querySelector(".mp-check").addEventListener("click",function(){
  var r=data.table[key()],p=root.querySelector(".mp-prediction").value.trim().replace(/,/g,""),msg;
  if(r.error){msg="Not a valid plan: "+r.error;}
  else if(!p){msg="The library says "+r.text+".";}
  else if(typeof r.value==="string"){msg="The library says "+r.text+". "+(p.toLowerCase()===r.value.toLowerCase()?
    "\u2713 Your prediction matches.":"\u2717 You predicted "+p+".");}
  else if(!isFinite(Number(p))){msg="The library says "+r.text+". (Type a number to see how far off you were.)";}
  else{var d=Number(p)-r.value,sg=d>=0?"+":"\u2212",rel=r.value?Math.abs(d)/Math.abs(r.value):(d===0?0:Infinity);
    msg="The library says "+r.text+". Your prediction is off by "+sg+fmt(Math.abs(d))+(data.unit?" "+data.unit:"")+
    (r.value?" ("+sg+Math.round(100*rel)+" %)":"")+": "+(rel<=data.tolerance?"\u2713 within "+Math.round(100*data.tolerance)+" %":"\u2717 off")+".";}
  ans.textContent=msg;
  if(r.explanation&&!r.error){var e=document.createElement("div");e.className="mp-explanation";e.textContent=r.explanation;ans.appendChild(e);}
});
})();
"""
