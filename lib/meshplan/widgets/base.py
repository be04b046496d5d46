"""The static-and-live widget base: controls whose every combination the library computes when the book is
built, so that the page works with no kernel and no network, and the same object is a live ipywidget in
Jupyter.

A widget is a set of named **controls** (each a finite list of values) and a function of their values. The
base owns what every widget needs and no subclass repeats: the id check; the controls (values, labels,
defaults, the input that shows them, ranges that depend on other controls); the enumeration of every allowed
combination and the table of the library's answers; the JSON payload; the controls' HTML; the shared
stylesheet and JavaScript runtime (``runtime``); ``_repr_mimebundle_`` (static HTML for the book, plus the
live view in Jupyter unless ``MESHPLAN_STATIC=1``); and the live ipywidget controls (``LiveControls``).

A subclass says what one combination means (``entry``) and how to show it (``body_html``; a renderer, registered
under ``kind`` by the page script ``script_file``; ``live_view``). ``Exercise``, ``Checklist``, ``grid.DeviceGrid``
and ``plotting.TimelineExplorer`` are the four.

Inputs: strictly increasing numbers get a slider that shows its value; anything else (names, or numbers
that are not ordered) gets radio buttons when the options are few and short, else a drop-down; ``inputs``
overrides. A dependent range is declared as ``depends={"rank": lambda n: range(n)}``: the function's
parameter names are the controls it reads, and it returns the values allowed for those (values that are not
among the control's own are ignored). The page and the live widget offer only allowed values and move a
control to the nearest allowed value when its range shrinks; the tables hold only allowed combinations.

    >>> w = StaticWidget("demo", {"n": [2, 4, 8], "rank": list(range(8))}, depends={"rank": lambda n: range(n)})
    >>> [c.input for c in w.controls], w.allowed("rank", {"n": 2})
    (['slider', 'slider'], (0, 1))
    >>> len(w.combinations()), w.key({"n": 4, "rank": 3})
    (14, '1,3')
"""

from __future__ import annotations

import html
import inspect
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise, product
from typing import Any, ClassVar

from meshplan.widgets.runtime import CSS, core_js, mount_js, script_js

STATIC_ENV = "MESHPLAN_STATIC"  # set to 1 by the book build: emit only the static HTML, no live widget
INPUTS = ("slider", "radio", "select")
_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_MAX_PRODUCT = 200_000  # combinations enumerated before dependent ranges filter them


def static_and_live_bundle(text_plain: str, html_text: str, live: Callable[[], Any]) -> dict:
    """The MIME bundle shared by every interactive display of the course: ``text/html`` (the static version,
    which the book renders) plus, unless ``MESHPLAN_STATIC=1`` (the book build), the live ipywidget's view
    (``live()`` returns the widget or None), which Jupyter renders."""
    bundle: dict = {}
    if os.environ.get(STATIC_ENV) != "1":
        view = live()
        if view is not None and hasattr(view, "_repr_mimebundle_"):
            bundle.update(view._repr_mimebundle_())
    bundle.update({"text/plain": text_plain, "text/html": html_text})
    return bundle


def check_id(id: str, what: str = "widget") -> str:
    """A widget id is used in element ids: letters, digits, ``-`` and ``_`` only."""
    if not isinstance(id, str) or not _ID_RE.match(id):
        raise ValueError(f"{what} id={id!r} must use letters, digits, '-' or '_'")
    return id


def parameters(fn: Callable, what: str) -> tuple[str, ...]:
    """The names of ``fn``'s parameters (what it reads, for ``depends`` and ``Check``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise ValueError(f"{what}: cannot read the parameters of {fn!r}") from None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise ValueError(f"{what}: name the controls it reads as parameters, not *args or **kwargs")
    return tuple(p.name for p in params)


def text_on(colour: str) -> str:
    """Black or white text, whichever contrasts more with the ``#rrggbb`` background (WCAG luminance)."""

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#fff" if 1.05 / (lum + 0.05) > (lum + 0.05) / 0.05 else "#111"


def auto_input(values: Sequence[Any], texts: Sequence[str]) -> str:
    """slider for strictly increasing numbers; radio for at most 6 short options; else select."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric and len(values) > 1 and all(a < b for a, b in pairwise(values)):
        return "slider"
    return "radio" if len(values) <= 6 and sum(len(t) for t in texts) <= 60 else "select"


def _parents(name: str, fn: Callable, values_of: Mapping[str, Any]) -> tuple[str, ...]:
    """The controls a ``depends`` function reads (its parameters), each another control."""
    parents = parameters(fn, f"depends[{name!r}]")
    for p in parents:
        if p not in values_of or p == name:
            raise ValueError(f"depends[{name!r}] reads {p!r}, which is not another control")
    return parents


def _control(
    name: str,
    values: list[Any],
    label: str,
    default: Any,
    input: str | None,
    texts: Mapping[Any, str],
    parents: tuple[str, ...],
) -> Control:
    """One validated control."""
    if not values:
        raise ValueError(f"control {name!r} has no values")
    if len(values) != len({repr(v) for v in values}):
        raise ValueError(f"control {name!r} repeats a value: {values!r}")
    shown = tuple(str(texts.get(v, v)) for v in values)
    kind = input or auto_input(values, shown)
    if kind not in INPUTS:
        raise ValueError(f"inputs[{name!r}]={kind!r} must be one of {', '.join(INPUTS)}")
    if default not in values:
        raise ValueError(f"default {name}={default!r} is not one of {name}'s values")
    return Control(name, tuple(values), shown, str(label), default, kind, parents)


@dataclass(frozen=True)
class Control:
    """One control: its ``values``, the ``texts`` shown for them, its ``label``, its ``default``, the
    ``input`` that shows it (slider, radio or select), and the controls its allowed values depend on."""

    name: str
    values: tuple[Any, ...]
    texts: tuple[str, ...]
    label: str
    default: Any
    input: str
    parents: tuple[str, ...] = ()


class StaticWidget:
    """Controls with every allowed combination computed by the library at build time; see the module.

    Args:
        id: unique on the page; letters, digits, ``-`` and ``_``.
        controls: name → the values it offers (the first is the default unless ``defaults`` says otherwise).
        labels: name → the label shown (default: the name).
        defaults: name → the starting value.
        inputs: name → ``"slider"``, ``"radio"`` or ``"select"`` (default: ``auto_input``).
        texts: name → {value: text shown} (default: ``str(value)``).
        depends: name → a function of other controls (by parameter name) returning the allowed values.
        why: name → a function of the same controls as its ``depends`` returning, in the reader's words, why some
            values are not allowed there ('' when all are): shown beside the control whenever a choice is disabled,
            so a locked control is never silent.
        notes: name → a function of any controls (by parameter name) returning a live line shown beside control
            ``name``, such as the size a setting leaves to another dimension ("DP = 8 ÷ (TP 2 × PP 2) = 2"), or ''.

    Subclasses set ``kind`` (the page renderer), ``script_file`` (the file in ``meshplan/widgets/static/`` that
    registers the renderer of ``kind``: a function of the widget's element, its payload and the runtime's controls
    object), ``css`` (its own style rules), ``what`` (for messages) and ``id_prefix``, and implement ``entry``,
    ``body_html`` and ``live_view``.
    """

    kind: ClassVar[str] = "none"
    script_file: ClassVar[str] = ""  # e.g. "exercise.js"; the base has no renderer
    css: ClassVar[str] = ""  # the kind's own style rules, added to the shared stylesheet
    what: ClassVar[str] = "widget"
    id_prefix: ClassVar[str] = "mp-w-"
    max_combinations: ClassVar[int] = 2000

    def __init__(
        self,
        id: str,
        controls: Mapping[str, Iterable[Any]] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        inputs: Mapping[str, str] | None = None,
        texts: Mapping[str, Mapping[Any, str]] | None = None,
        depends: Mapping[str, Callable[..., Iterable[Any]]] | None = None,
        why: Mapping[str, Callable[..., str]] | None = None,
        notes: Mapping[str, Callable[..., str]] | None = None,
    ):
        self.id = check_id(id, self.what)
        values_of: dict[str, list[Any]] = {name: list(values) for name, values in (controls or {}).items()}
        labels, defaults, inputs, texts = (
            dict(labels or {}),
            dict(defaults or {}),
            dict(inputs or {}),
            dict(texts or {}),
        )
        for arg, given in (
            ("labels", labels),
            ("defaults", defaults),
            ("inputs", inputs),
            ("texts", texts),
            ("depends", depends or {}),
        ):
            for name in given:
                if name not in values_of:
                    raise ValueError(f"{arg} names {name!r}, which is not a control ({', '.join(values_of) or 'none'})")
        self._depends = {name: (fn, _parents(name, fn, values_of)) for name, fn in (depends or {}).items()}
        for name, fn in (why or {}).items():
            if name not in self._depends:
                raise ValueError(f"why names {name!r}, which has no depends (a reason needs a dependent range)")
            if parameters(fn, f"why[{name!r}]") != self._depends[name][1]:
                raise ValueError(f"why[{name!r}] must read the controls its depends reads: {self._depends[name][1]}")
        self._why = dict(why or {})
        self._notes: dict[str, tuple[Callable[..., str], tuple[str, ...]]] = {}
        for name, fn in (notes or {}).items():
            if name not in values_of:
                raise ValueError(f"notes names {name!r}, which is not a control ({', '.join(values_of)})")
            reads = parameters(fn, f"notes[{name!r}]")
            for r in reads:
                if r not in values_of:
                    raise ValueError(f"notes[{name!r}] reads {r!r}, which is not a control")
            self._notes[name] = (fn, reads)
        built = [
            _control(
                name,
                values,
                labels.get(name, name),
                defaults.get(name, values[0] if values else None),
                inputs.get(name),
                texts.get(name) or {},
                self._depends.get(name, (None, ()))[1],
            )
            for name, values in values_of.items()
        ]
        self.controls: tuple[Control, ...] = tuple(built)
        self._by_name = {c.name: c for c in self.controls}
        self.order = self._topological_order()
        self._allowed_cache: dict[tuple, tuple] = {}
        start = self.defaults
        for name in self.order:
            if name in self._depends and start[name] not in self.allowed(name, start):
                raise ValueError(
                    f"default {name}={start[name]!r} is not allowed when "
                    + ", ".join(f"{p}={start[p]!r}" for p in self._depends[name][1])
                )
        for names in self.tables():
            self._check_size(names)

    # ------------------------------------------------------------------ controls
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.controls)

    @property
    def defaults(self) -> dict[str, Any]:
        return {c.name: c.default for c in self.controls}

    @property
    def sliders(self) -> dict[str, list[Any]]:
        """Every control's values (name kept from the time every control was a slider)."""
        return {c.name: list(c.values) for c in self.controls}

    def control(self, name: str) -> Control:
        return self._by_name[name]

    def _topological_order(self) -> tuple[str, ...]:
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str, path: tuple[str, ...]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                raise ValueError("depends has a cycle: " + " → ".join((*path, name)))
            state[name] = 1
            for p in self._by_name[name].parents:
                visit(p, (*path, name))
            state[name] = 2
            order.append(name)

        for c in self.controls:
            visit(c.name, ())
        return tuple(order)

    def allowed(self, name: str, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values of control ``name`` allowed for the given values of the controls it depends on."""
        c = self._by_name[name]
        if name not in self._depends:
            return c.values
        fn, parents = self._depends[name]
        args = tuple(values[p] for p in parents)
        if (name, args) not in self._allowed_cache:
            try:
                ok = set(fn(**dict(zip(parents, args))))
            except TypeError:
                raise ValueError(f"depends[{name!r}] must return the allowed values (an iterable)") from None
            allowed = tuple(v for v in c.values if v in ok)
            if not allowed:
                raise ValueError(
                    f"no value of {name} is allowed when " + ", ".join(f"{p}={a!r}" for p, a in zip(parents, args))
                )
            self._allowed_cache[(name, args)] = allowed
        return self._allowed_cache[(name, args)]

    def why(self, name: str, values: Mapping[str, Any]) -> str:
        """Why some values of ``name`` are not allowed at ``values`` ('' when it has no reason, or all are)."""
        if name not in self._why or len(self.allowed(name, values)) == len(self._by_name[name].values):
            return ""
        fn = self._why[name]
        parents = self._depends[name][1]
        return str(fn(**{p: values[p] for p in parents}))

    def note(self, name: str, values: Mapping[str, Any]) -> str:
        """The live line beside control ``name`` at ``values`` ('' without one)."""
        if name not in self._notes:
            return ""
        fn, reads = self._notes[name]
        return str(fn(**{r: values[r] for r in reads}))

    def combinations(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Every allowed combination of the controls ``names`` (all by default), in the controls' order.
        A subset must include the controls its members depend on."""
        names = tuple(self.names if names is None else names)
        for n in names:
            missing = [p for p in self._by_name[n].parents if p not in names]
            if missing:
                raise ValueError(f"a table over {', '.join(names)} needs {', '.join(missing)} ({n} depends on it)")
        out = []
        for values in product(*(self._by_name[n].values for n in names)):
            combo = dict(zip(names, values))
            if all(combo[n] in self.allowed(n, combo) for n in names if n in self._depends):
                out.append(combo)
        return out

    def key(self, values: Mapping[str, Any], names: Sequence[str] | None = None) -> str:
        """The table key of a combination: each control's value index, joined by commas ('' without controls)."""
        return ",".join(str(self._by_name[n].values.index(values[n])) for n in (self.names if names is None else names))

    def tables(self) -> list[tuple[str, ...]]:
        """The control sets the widget tabulates (the base: one table over all controls)."""
        return [self.names]

    def _check_size(self, names: Sequence[str]) -> None:
        size = 1
        for n in names:
            size *= len(self._by_name[n].values)
        if size > _MAX_PRODUCT:
            raise ValueError(
                f"{size:,} combinations of {', '.join(names)}; keep the page small (at most {self.max_combinations:,})"
            )
        count = len(self.combinations(names))
        if count > self.max_combinations:
            raise ValueError(f"{count:,} control combinations; keep the page small (at most {self.max_combinations:,})")

    # ------------------------------------------------------------------ the library's answers
    def entry(self, *args: Any, **values: Any) -> Any:
        """The library's answer for one combination, called with the controls' values by name (JSON-able after
        ``encode``)."""
        raise NotImplementedError

    def encode(self, entry: Any) -> Any:
        """``entry`` as JSON data for the page."""
        return entry

    def table(self) -> dict[str, Any]:
        """Every allowed combination, keyed by ``key``: ``entry(**values)``."""
        return {self.key(v): self.entry(**v) for v in self.combinations()}

    def payload(self) -> dict[str, Any]:
        """What the page receives: the controls and the table (subclasses add to it)."""
        return {
            "controls": self.controls_payload(),
            "order": list(self.order),
            "table": {k: self.encode(e) for k, e in self.table().items()},
        }

    def controls_payload(self) -> list[dict[str, Any]]:
        out = []
        for c in self.controls:
            item: dict[str, Any] = {
                "name": c.name,
                "input": c.input,
                "texts": list(c.texts),
                "parents": list(c.parents),
            }
            if c.parents:  # parents' key -> the allowed value indices
                item["allow"] = {
                    self.key(p, c.parents): [c.values.index(v) for v in self.allowed(c.name, p)]
                    for p in self.combinations(self._ancestors(c.name))
                }
            if c.name in self._notes:  # the read controls' key -> the line shown beside this control
                reads = self._notes[c.name][1]
                closure = tuple(n for n in self.names if n in {*reads, *(a for r in reads for a in self._ancestors(r))})
                item["note"] = {
                    "reads": list(reads),
                    "texts": {self.key(v, reads): self.note(c.name, v) for v in self.combinations(closure)},
                }
            if c.name in self._why:  # parents' key -> why some values are not allowed there (only where some are not)
                item["why"] = {
                    k: text
                    for p in self.combinations(self._ancestors(c.name))
                    if (text := self.why(c.name, p)) and (k := self.key(p, c.parents))
                }
            out.append(item)
        return out

    def _ancestors(self, name: str) -> tuple[str, ...]:
        """The controls ``name`` depends on, directly or not, in the controls' order."""
        seen: set[str] = set()
        todo = list(self._by_name[name].parents)
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo.extend(self._by_name[p].parents)
        return tuple(n for n in self.names if n in seen)

    # ------------------------------------------------------------------ static HTML
    @property
    def dom_id(self) -> str:
        return self.id_prefix + self.id

    def controls_html(self, values: Mapping[str, Any] | None = None) -> str:
        """The controls at ``values`` (the defaults), with dependent ranges applied."""
        values = dict(self.defaults if values is None else values)
        rows = []
        for c in self.controls:
            rows.append(
                control_html(
                    c,
                    self.dom_id,
                    values[c.name],
                    self.allowed(c.name, values) if c.parents else None,
                    self.why(c.name, values) if c.name in self._why else None,
                    self.note(c.name, values) if c.name in self._notes else None,
                )
            )
        return f'<div class="mp-controls">{"".join(rows)}</div>'

    def header_html(self) -> str:
        return ""

    def body_html(self) -> str:
        return ""

    def to_html(self) -> str:
        """The self-contained static widget: controls, body, the library's table as JSON and the runtime."""
        # ensure_ascii=False: × ≤ ÷ and the like stay one character (escaped they cost six bytes each); the page is
        # UTF-8. "</" is escaped so that no string can close the script element, nor can U+2028/U+2029 end a line.
        data = (
            json.dumps(self.payload(), sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            .replace("</", "<\\/")
            .replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029")
        )
        if not self.script_file:
            raise NotImplementedError(
                f"{type(self).__name__} names no page script (script_file) for kind {self.kind!r}"
            )
        script = core_js() + "\n" + script_js(self.script_file) + "\n" + mount_js(self.dom_id)
        return (
            f'<div class="mp-widget mp-{self.kind}" id="{self.dom_id}" data-kind="{self.kind}">'
            f"<style>{CSS}{self.css}</style>\n{self.header_html()}\n{self.controls_html()}\n{self.body_html()}\n"
            f'<script type="application/json" class="mp-data">{data}</script>\n'
            f"<script>{script}</script>\n</div>"
        )

    def text_plain(self) -> str:
        return f"{type(self).__name__} {self.id!r}"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return static_and_live_bundle(self.text_plain(), self.to_html(), self.live)

    # ------------------------------------------------------------------ live widget
    def live(self):
        """The live ipywidget (None if ipywidgets is not installed)."""
        try:
            import ipywidgets  # noqa: F401
        except ImportError:  # pragma: no cover
            return None
        return self.live_view(LiveControls(self))

    def live_view(self, controls: LiveControls):
        """The live view around the controls (subclasses)."""
        import ipywidgets as w

        return w.VBox(list(controls.widgets.values()))


def control_html(
    c: Control,
    dom_id: str,
    value: Any,
    allowed: Sequence[Any] | None,
    why: str | None = None,
    live: str | None = None,
) -> str:
    """One control's HTML at ``value``; ``allowed`` (a dependent range) limits the slider's positions and
    disables the other options; ``why`` (a control with reasons: '' when nothing is disabled) is said beside it, and
    ``live`` (a control with a note) too."""
    esc = html.escape
    el_id = f"{dom_id}-{c.name}"
    note = "" if why is None else f'<span class="mp-why" data-for="{esc(c.name)}" aria-live="polite">{esc(why)}</span>'
    if live is not None:
        note += f'<span class="mp-note" data-for="{esc(c.name)}" aria-live="polite">{esc(live)}</span>'
    i = c.values.index(value)
    if c.input == "slider":
        positions = [c.values.index(v) for v in allowed] if allowed is not None else list(range(len(c.values)))
        return (
            f'<div class="mp-row"><label class="mp-label" for="{esc(el_id)}">{esc(c.label)}</label>'
            f'<input type="range" class="mp-control mp-slider" id="{esc(el_id)}" data-name="{esc(c.name)}" '
            f'min="0" max="{len(positions) - 1}" step="1" value="{positions.index(i)}" '
            f'aria-valuetext="{esc(c.texts[i])}"{" disabled" if len(positions) < 2 else ""}>'
            f'<output class="mp-value" for="{esc(el_id)}">{esc(c.texts[i])}</output>{note}</div>'
        )
    off = set(range(len(c.values))) - (
        {c.values.index(v) for v in allowed} if allowed is not None else set(range(len(c.values)))
    )
    if c.input == "select":
        options = "".join(
            f'<option value="{j}"{" selected" if j == i else ""}{" disabled" if j in off else ""}>{esc(t)}</option>'
            for j, t in enumerate(c.texts)
        )
        return (
            f'<div class="mp-row"><label class="mp-label" for="{esc(el_id)}">{esc(c.label)}</label>'
            f'<select class="mp-control mp-select" id="{esc(el_id)}" data-name="{esc(c.name)}">{options}'
            f"</select>{note}</div>"
        )
    options = "".join(
        f'<label class="mp-option{" mp-disabled" if j in off else ""}"><input type="radio" name="{esc(el_id)}" '
        f'value="{j}"{" checked" if j == i else ""}{" disabled" if j in off else ""}>{esc(t)}</label>'
        for j, t in enumerate(c.texts)
    )
    return (
        f'<div class="mp-row mp-control mp-radio" role="radiogroup" aria-labelledby="{esc(el_id)}-label" '
        f'data-name="{esc(c.name)}"><span class="mp-label" id="{esc(el_id)}-label">{esc(c.label)}</span>'
        f'<div class="mp-options">{options}</div>{note}</div>'
    )


class LiveControls:
    """The controls as ipywidgets: SelectionSlider (slider), ToggleButtons (radio), Dropdown (select); a
    dependent control's options follow its parents. ``values()`` is the current combination; ``observe(fn)``
    calls ``fn()`` after any change."""

    def __init__(self, widget: StaticWidget):
        import ipywidgets as w

        self.widget = widget
        self._fns: list[Callable[[], None]] = []
        self._busy = False
        values = widget.defaults
        self.widgets: dict[str, Any] = {}
        style = {"description_width": "initial"}
        for c in widget.controls:
            options = self._options(c, values)
            if c.input == "slider":
                el = w.SelectionSlider(
                    options=options, value=values[c.name], description=c.label, continuous_update=False, style=style
                )
            elif c.input == "radio":
                el = w.ToggleButtons(options=options, value=values[c.name], description=c.label, style=style)
            else:
                el = w.Dropdown(options=options, value=values[c.name], description=c.label, style=style)
            el.observe(self._changed, names="value")
            self.widgets[c.name] = el

    def _options(self, c: Control, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
        allowed = self.widget.allowed(c.name, values) if c.parents else c.values
        return [(t, v) for t, v in zip(c.texts, c.values) if v in allowed]

    def values(self) -> dict[str, Any]:
        return {n: el.value for n, el in self.widgets.items()}

    def observe(self, fn: Callable[[], None]) -> None:
        self._fns.append(fn)

    def _changed(self, _change=None) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            values = self.values()
            for name in self.widget.order:
                c = self.widget.control(name)
                if not c.parents:
                    continue
                options = self._options(c, values)
                allowed = [v for _, v in options]
                el = self.widgets[name]
                keep = (
                    values[name]
                    if values[name] in allowed
                    else min(allowed, key=lambda v: abs(c.values.index(v) - c.values.index(values[name])))
                )
                if [v for _, v in el.options] != allowed:
                    el.options = options
                el.value = keep
                values[name] = keep
        finally:
            self._busy = False
        for fn in self._fns:
            fn()
