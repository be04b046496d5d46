"""Predict, then check: the exercise and the checklist, two widgets on the static-and-live base.

``Exercise``: the reader sets the controls, types a prediction and presses Check (or Enter); the feedback
starts with what was read and grades it (within the tolerance, within 25 %, the right order of magnitude,
off), then shows the worked answer. Check stays disabled until something is typed; "Show me" reveals the
answer and says the prediction was skipped. A combination the library rejects is flagged, with its message,
as soon as a control moves there, in the place the answer takes, so nothing above it moves.

``Checklist``: the reader picks a whole setting (say a plan: TP, CP, PP, ZeRO stage, micro-batches ...) and
presses the button; every line (``Check``) says whether it passes and why. Each line reads only the controls
its test names, so each line's table is over those controls alone, and eight controls stay a small page.

    >>> ex = Exercise("demo", "Twice n?", lambda n: 2 * n, sliders={"n": [1, 2, 3]}, unit="GB")
    >>> ex.result(n=3).text, ex.feedback("5,5", {"n": 3})[0]
    ('6.0 GB', 'Read as 5.5 GB. The library says 6.0 GB. Your prediction is off by −0.5 GB (−8 %): ≈ within 25 %.')
    >>> ck = Checklist("plan", "Pick a plan", {"tp": [1, 2, 3]}, [Check("TP divides 4 heads",
    ...                lambda tp: (4 % tp == 0, f"4 heads ÷ {tp}"))])
    >>> ck.report(tp=3)
    '0 of 1 checks pass; failing: TP divides 4 heads.\\n✗ TP divides 4 heads: 4 heads ÷ 3'
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshplan.widgets.base import Control, LiveControls, StaticWidget, parameters
from meshplan.widgets.predict import Result, compare, read_prediction, reveal, squash


class Exercise(StaticWidget):
    """A predict-then-check exercise.

    Args:
        id: a short unique id for the page (letters, digits, ``-``, ``_``).
        question: the question, plain text.
        answer: ``answer(**control_values)`` → a number in ``unit`` (or a word); it calls the library and may
            raise ``ValueError`` for an invalid combination.
        sliders: name → the values the reader can choose (the first is the default unless ``defaults`` says
            otherwise); numbers in increasing order get a slider, names get radio buttons or a drop-down.
        unit: shown after numbers (``"GB"``, ``"%"``, ``"s"``); a prediction may carry a compatible unit.
        digits: decimals shown.
        explain: ``explain(**control_values)`` → the worked answer (plain text), shown with the result.
        tolerance: the relative error counted as right (the first grade).
        labels, defaults, inputs, texts, depends: as ``StaticWidget`` (``depends={"rank": lambda n: range(n)}``).
        choices: for an answer that is a word, the words the reader chooses from (radio buttons, not a text box:
            "non-zero", "not zero" and "0" are never graded "No match" against "nonzero"); every answer must be
            one of them.
    """

    kind = "exercise"
    what = "exercise"
    id_prefix = "mp-ex-"
    script_file = "exercise.js"  # the page renderer (meshplan/widgets/static/)

    def __init__(
        self,
        id: str,
        question: str,
        answer: Callable[..., Any],
        sliders: Mapping[str, Sequence[Any]] | None = None,
        unit: str = "",
        digits: int = 1,
        explain: Callable[..., str] | None = None,
        tolerance: float = 0.05,
        labels: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        *,
        inputs: Mapping[str, str] | None = None,
        texts: Mapping[str, Mapping[Any, str]] | None = None,
        depends: Mapping[str, Callable[..., Iterable[Any]]] | None = None,
        choices: Sequence[str] | None = None,
    ):
        super().__init__(id, sliders, labels=labels, defaults=defaults, inputs=inputs, texts=texts, depends=depends)
        if choices is not None:
            choices = tuple(choices)
            if len(choices) < 2 or len(set(choices)) != len(choices):
                raise ValueError(f"choices={choices!r} must be two or more different words")
            if any(not isinstance(c, str) or not squash(c) for c in choices):
                raise ValueError(f"choices={choices!r} must be non-empty words")
        self.choices: tuple[str, ...] | None = choices
        if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= 12:
            raise ValueError(f"digits={digits!r} must be an integer from 0 to 12")
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
            raise ValueError(f"tolerance={tolerance!r} must be a fraction between 0 and 1")
        self.question, self.answer, self.unit, self.digits = question, answer, unit, digits
        self.explain, self.tolerance = explain, float(tolerance)

    # ------------------------------------------------------------------ the library's answers
    def format_value(self, value: float | str) -> str:
        if isinstance(value, str):
            return value
        return f"{value:,.{self.digits}f}" + (f" {self.unit}" if self.unit else "")

    def result(self, **values: Any) -> Result:
        """The library's answer for one combination (a ValueError becomes a Result with ``error`` set)."""
        try:
            value = self.answer(**values)
            if not isinstance(value, str):
                value = float(value)
                if not math.isfinite(value):
                    return Result(None, "", "", f"the answer is not a finite number ({value})")
            expl = self.explain(**values) if self.explain else ""
        except ValueError as exc:
            return Result(None, "", "", str(exc))
        if self.choices is not None and value not in self.choices:  # the exercise's own bug, not the reader's input
            raise TypeError(f"exercise {self.id!r}: the answer {value!r} is not one of its choices {self.choices!r}")
        return Result(value, self.format_value(value), expl)

    def entry(self, **values: Any) -> Result:
        return self.result(**values)

    def encode(self, entry: Result) -> dict[str, Any]:
        return {"value": entry.value, "text": entry.text, "explanation": entry.explanation, "error": entry.error}

    def table(self) -> dict[str, Result]:
        """Every allowed combination, keyed by the control indices joined with commas ('' without controls)."""
        return super().table()

    def feedback(self, prediction: str, values: Mapping[str, Any]) -> tuple[str, str]:
        """What Check prints for ``prediction`` at ``values``: the line, and the worked answer if the
        prediction was read (an empty or unreadable one reveals nothing)."""
        r = self.result(**values)
        text = compare(prediction, r, self.unit, self.digits, self.tolerance)
        shown = (
            not r.error
            and bool(squash(prediction))
            and (isinstance(r.value, str) or read_prediction(prediction, self.unit).error is None)
        )
        return text, (r.explanation if shown else "")

    # ------------------------------------------------------------------ static HTML
    def payload(self) -> dict[str, Any]:
        out = {**super().payload(), "unit": self.unit, "digits": self.digits, "tolerance": self.tolerance}
        return {**out, "choices": list(self.choices)} if self.choices is not None else out

    def header_html(self) -> str:
        return f'<p class="mp-question"><strong>Predict, then check.</strong> {html.escape(self.question)}</p>'

    def body_html(self) -> str:
        esc, dom = html.escape, self.dom_id
        unit = f'<span class="mp-unit">{esc(self.unit)}</span>' if self.unit else ""
        buttons = (
            f'<span class="mp-buttons"><button type="button" class="mp-check mp-primary" disabled>Check</button>'
            f'<button type="button" class="mp-show">Show me</button></span></div>'
            f'<div class="mp-answer" id="{dom}-answer" aria-live="polite"></div>'
        )
        if self.choices is not None:  # a word answer: one of the choices, never a string to match
            options = "".join(
                f'<label class="mp-option"><input type="radio" name="{dom}-prediction" value="{esc(c)}">'
                f"{esc(c)}</label>"
                for c in self.choices
            )
            return (
                f'<div class="mp-row mp-predict"><span class="mp-label" id="{dom}-prediction-label">Your prediction'
                f'</span><div class="mp-options mp-prediction mp-choices" role="radiogroup" '
                f'aria-labelledby="{dom}-prediction-label" aria-describedby="{dom}-answer">{options}</div>' + buttons
            )
        return (
            f'<div class="mp-row mp-predict"><label class="mp-label" for="{dom}-prediction">Your prediction'
            f'</label><span><input type="text" class="mp-prediction" id="{dom}-prediction" autocomplete="off" '
            f'spellcheck="false" aria-describedby="{dom}-answer"> {unit}</span>'
            f'<span class="mp-buttons"><button type="button" class="mp-check mp-primary" disabled>Check</button>'
            f'<button type="button" class="mp-show">Show me</button></span></div>'
            f'<div class="mp-answer" id="{dom}-answer" aria-live="polite"></div>'
        )

    def text_plain(self) -> str:
        return f"Exercise {self.id!r}: {self.question}"

    # ------------------------------------------------------------------ live widget
    def live_view(self, controls: LiveControls):
        import ipywidgets as w

        style = {"description_width": "initial"}
        pred: Any
        if self.choices is not None:
            pred = w.RadioButtons(options=list(self.choices), value=None, description="Your prediction", style=style)
        else:
            pred = w.Text(description="Your prediction", placeholder=self.unit, continuous_update=False, style=style)
        check = w.Button(description="Check", button_style="primary")
        show = w.Button(description="Show me")
        out = w.HTML()

        def say(text: str, explanation: str = "", invalid: bool = False) -> None:
            cls = "mp-answer mp-invalid" if invalid else "mp-answer"
            extra = f"<br><span class='mp-explanation'>{html.escape(explanation)}</span>" if explanation else ""
            out.value = f"<div class='{cls}'>{html.escape(text)}{extra}</div>" if text else ""

        def moved() -> None:
            r = self.result(**controls.values())
            check.disabled = show.disabled = bool(r.error)
            say(f"Not a valid combination: {r.error}" if r.error else "", invalid=bool(r.error))

        def do_check(_=None) -> None:
            if not check.disabled:
                say(*self.feedback(pred.value, controls.values()))

        def do_show(_=None) -> None:
            r = self.result(**controls.values())
            if not r.error:
                say(reveal(r), r.explanation)

        pred.observe(lambda change: do_check() if squash(change["new"] or "") else None, names="value")  # Enter
        check.on_click(do_check)
        show.on_click(do_show)
        controls.observe(moved)
        moved()
        return w.VBox(
            [
                w.HTML(f"<b>Predict, then check.</b> {html.escape(self.question)}"),
                *controls.widgets.values(),
                w.HBox([pred, check, show]),
                out,
            ]
        )


@dataclass(frozen=True)
class Check:
    """One line of a checklist: ``test(**values)`` reads the controls its parameters name and returns
    ``(passes, reason)``; a ValueError (the library rejecting the setting) fails the line with its message."""

    name: str
    test: Callable[..., tuple[bool, str]]


@dataclass(frozen=True)
class Line:
    """One checked line: its name, whether it passes, and why."""

    name: str
    ok: bool
    reason: str

    @property
    def text(self) -> str:
        return f"{'✓' if self.ok else '✗'} {self.name}: {self.reason}"


class Checklist(StaticWidget):
    """Pick a whole setting, press the button, and read which lines pass and why (see the module).

    Args:
        id, question: as ``Exercise``.
        controls: name → values (as ``StaticWidget``).
        checks: the lines, in the order shown.
        button: the button's text.
        labels, defaults, inputs, texts, depends: as ``StaticWidget``.
    """

    kind = "checklist"
    what = "checklist"
    id_prefix = "mp-ck-"
    script_file = "checklist.js"

    def __init__(
        self,
        id: str,
        question: str,
        controls: Mapping[str, Sequence[Any]],
        checks: Sequence[Check],
        *,
        button: str = "Check my plan",
        labels: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        inputs: Mapping[str, str] | None = None,
        texts: Mapping[str, Mapping[Any, str]] | None = None,
        depends: Mapping[str, Callable[..., Iterable[Any]]] | None = None,
        why: Mapping[str, Callable[..., str]] | None = None,
        notes: Mapping[str, Callable[..., str]] | None = None,
    ):
        self.checks = tuple(checks)
        if not self.checks:
            raise ValueError("a checklist needs at least one Check")
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ValueError(f"check names must be unique: {names}")
        self._reads = {c.name: parameters(c.test, f"check {c.name!r}") for c in self.checks}
        for name, reads in self._reads.items():
            for r in reads:
                if r not in controls:
                    raise ValueError(f"check {name!r} reads {r!r}, which is not a control")
        self.question, self.button = question, button
        super().__init__(
            id,
            controls,
            labels=labels,
            defaults=defaults,
            inputs=inputs,
            texts=texts,
            depends=depends,
            why=why,
            notes=notes,
        )

    def uses(self, check: Check) -> tuple[str, ...]:
        """The controls a line's table is over: those its test reads and what they depend on, in order."""
        reads = set(self._reads[check.name])
        for r in list(reads):
            reads.update(self._ancestors(r))
        return tuple(n for n in self.names if n in reads)

    def tables(self) -> list[tuple[str, ...]]:
        return [self.uses(c) for c in self.checks]

    def line(self, check: Check, **values: Any) -> Line:
        """One line at ``values`` (only the controls it reads are used)."""
        try:
            ok, reason = check.test(**{n: values[n] for n in self._reads[check.name]})
        except ValueError as exc:
            return Line(check.name, False, str(exc))
        return Line(check.name, bool(ok), str(reason))

    def lines(self, **values: Any) -> list[Line]:
        return [self.line(c, **values) for c in self.checks]

    def entry(self, **values: Any) -> list[Line]:
        return self.lines(**values)

    def passing(self) -> list[dict[str, Any]]:
        """Every allowed setting (in the controls' order) whose every line passes: the exercise's answers."""
        return [v for v in self.combinations() if all(ln.ok for ln in self.lines(**v))]

    def report(self, **values: Any) -> str:
        """The text the page shows after the button: a summary, then one line per check."""
        lines = self.lines(**values)
        fails = [ln.name for ln in lines if not ln.ok]
        head = (
            f"{len(lines) - len(fails)} of {len(lines)} checks pass"
            + (f"; failing: {', '.join(fails)}" if fails else "")
            + "."
        )
        return "\n".join([head] + [ln.text for ln in lines])

    def table(self) -> dict[str, Any]:
        """Each line's table: check name → {key over ``uses(check)``: Line}."""
        return {
            c.name: {self.key(v, self.uses(c)): self.line(c, **v) for v in self.combinations(self.uses(c))}
            for c in self.checks
        }

    def payload(self) -> dict[str, Any]:
        tables = self.table()
        return {
            "controls": self.controls_payload(),
            "order": list(self.order),
            "checks": [
                {
                    "name": c.name,
                    "uses": list(self.uses(c)),
                    "table": {k: [ln.ok, ln.reason] for k, ln in tables[c.name].items()},
                }
                for c in self.checks
            ],
        }

    def header_html(self) -> str:
        return f'<p class="mp-question"><strong>Pick, then check.</strong> {html.escape(self.question)}</p>'

    def body_html(self) -> str:
        return (
            f'<div class="mp-row"><button type="button" class="mp-check mp-primary">{html.escape(self.button)}'
            f'</button></div><div class="mp-answer" aria-live="polite"></div>'
        )

    def text_plain(self) -> str:
        return f"Checklist {self.id!r}: {self.question}"

    def live_view(self, controls: LiveControls):
        import ipywidgets as w

        button = w.Button(description=self.button, button_style="primary")
        out = w.HTML()

        def show(_=None) -> None:
            head, *rest = self.report(**controls.values()).split("\n")
            out.value = f"<div>{html.escape(head)}</div>" + "".join(f"<div>{html.escape(t)}</div>" for t in rest)

        button.on_click(show)
        controls.observe(lambda: setattr(out, "value", ""))
        return w.VBox(
            [w.HTML(f"<b>Pick, then check.</b> {html.escape(self.question)}"), *controls.widgets.values(), button, out]
        )


__all__ = ["Check", "Checklist", "Control", "Exercise", "Line", "Result"]
