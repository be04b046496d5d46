"""The page side of every static widget: one stylesheet and the page scripts, written into each widget's HTML
(no external script, no network); the runtime is defined once per page (``window.__meshplan``, keyed by version).

The scripts are JavaScript files in ``meshplan/widgets/static/`` (package data, read with ``importlib.resources``;
ESLint checks them and Node's test runner tests them: ``make lint``, ``tests/js``):

* ``runtime.js``, the runtime every widget needs: ``read``, ``compare``, ``reveal``, ``fmtSig``, ``fmtFixed``,
  the transcription of ``predict.py`` (tested against it case by case, in Chromium and in Node);
  ``controls(root, data)``, the controls' state (an index into each control's values), dependent ranges (a
  control's allowed values for the current values of its parents, computed by the library at build time) and
  ``key(names)``, the lookup key of a table over those controls ("2,0,1": indices joined by commas); and
  ``mount(id)``, which parses the widget's JSON payload and hands it to the renderer of its kind
  (``window.__meshplan.kinds[kind]``);
* one renderer per kind, which registers itself under its kind once per page: ``exercise.js``, ``checklist.js``
  (``exercise``), ``grid.js`` (``course.grid``), ``timeline.js`` (``course.plotting``), named by each widget
  class's ``script_file``;
* ``mount.js``, the statement that mounts one widget.

A page carries each file as it is, less the comments before its code (the file's documentation, which would
otherwise be repeated in every widget) and the whitespace around it, with the runtime's placeholders filled in
from ``predict`` (``core_js``).

Colours come from the book theme's CSS variables (pydata-sphinx-theme: ``--pst-color-*``, switched by
``data-theme="dark"`` on ``<html>``), then JupyterLab's (``--jp-*``), with light fallbacks.

    >>> "window.__meshplan" in core_js() and "--pst-color-background" in CSS
    True
    >>> mount_js("mp-ex-floor")
    'window.__meshplan.mount("mp-ex-floor");'
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files

from meshplan.widgets.predict import DIGIT_ZEROS, MAX_CHARS, UNITS

VERSION = "3"

CSS = """
.mp-widget{--mp-fg:var(--pst-color-text-base,var(--jp-content-font-color1,#222832));
--mp-muted:var(--pst-color-text-muted,var(--jp-content-font-color2,#5a6270));
--mp-bg:var(--pst-color-background,var(--jp-layout-color0,#fff));
--mp-surface:var(--pst-color-surface,var(--jp-layout-color2,#eceef1));
--mp-border:var(--pst-color-border,var(--jp-border-color1,#c9ced6));
--mp-accent:var(--pst-color-primary,var(--jp-brand-color1,#0a7d91));
--mp-bad:var(--pst-color-danger,var(--jp-error-color1,#c0233a));
--mp-good:var(--pst-color-success,var(--jp-success-color1,#1f7a45));
color:var(--mp-fg);border:1px solid var(--mp-border);border-radius:6px;padding:.6em .9em;margin:.8em 0;
max-width:100%;box-sizing:border-box;overflow-wrap:anywhere;font-size:1rem;line-height:1.45}
.mp-widget *{box-sizing:border-box}
.mp-widget p{margin:.2em 0 .5em}
.mp-widget .mp-row{display:flex;flex-wrap:wrap;align-items:center;gap:.2em .6em;margin:.3em 0;border:0;padding:0;
min-width:0}
.mp-widget .mp-label{flex:0 0 11em;max-width:100%;font-weight:600;padding:0;margin:0;float:none;font-size:1em}
.mp-widget input[type=range]{flex:1 1 9em;min-width:7em;max-width:24em;accent-color:var(--mp-accent);margin:0}
.mp-widget output.mp-value{min-width:3.5em;font-variant-numeric:tabular-nums}
.mp-widget .mp-options{display:flex;flex-wrap:wrap;gap:.1em .9em;flex:1 1 14em;min-width:0}
.mp-widget .mp-option{white-space:nowrap;cursor:pointer}
.mp-widget .mp-option input{accent-color:var(--mp-accent);margin:0 .3em 0 0;vertical-align:-1px}
.mp-widget .mp-option.mp-disabled{color:var(--mp-muted);text-decoration:line-through;cursor:not-allowed}
.mp-widget .mp-why,.mp-widget .mp-note{flex:1 1 100%;color:var(--mp-muted);font-size:.9em}
.mp-widget .mp-why:empty,.mp-widget .mp-note:empty{display:none}
.mp-widget select,.mp-widget input[type=text]{font:inherit;color:var(--mp-fg);background:var(--mp-bg);
border:1px solid var(--mp-border);border-radius:4px;padding:.2em .4em;max-width:100%}
.mp-widget select{flex:0 1 auto;min-width:0}
.mp-widget input[type=text]{width:9em}
.mp-widget button{font:inherit;color:var(--mp-fg);background:var(--mp-surface);border:1px solid var(--mp-border);
border-radius:4px;padding:.2em .8em;cursor:pointer}
.mp-widget .mp-buttons{display:inline-flex;gap:.5em;flex-wrap:nowrap}
.mp-widget button.mp-primary{background:var(--mp-accent);border-color:var(--mp-accent);color:var(--mp-bg)}
.mp-widget button:disabled{opacity:.45;cursor:not-allowed}
.mp-widget .mp-answer,.mp-widget .mp-status{min-height:3em;margin-top:.4em}
.mp-widget .mp-invalid{color:var(--mp-bad)}
.mp-widget .mp-invalid::before{content:"\\26A0\\FE0E  "}
.mp-widget .mp-explanation{color:var(--mp-muted);margin-top:.3em}
.mp-widget .mp-stale{opacity:.3}
.mp-widget .mp-scroll{overflow-x:auto;max-width:100%}
.mp-widget .mp-legend{display:flex;flex-wrap:wrap;gap:.2em 1em;margin:.3em 0}
.mp-widget .mp-swatch{display:inline-block;width:.9em;height:.9em;border-radius:2px;margin-right:.3em;
vertical-align:-1px}
.mp-widget .mp-pass{color:var(--mp-good)}
.mp-widget .mp-fail{color:var(--mp-bad)}
.mp-widget ul.mp-lines{list-style:none;padding-left:0;margin:.3em 0}
.mp-widget ul.mp-lines li{margin:.15em 0}
@media (max-width:560px){.mp-widget{padding:.5em .6em}.mp-widget .mp-label{flex-basis:100%}}
""".replace("\n", "")

# The comments (and whitespace) before a script's code: its documentation, left out of the pages.
_LEADING_COMMENTS = re.compile(r"\s*(?:/\*.*?\*/\s*)*", re.DOTALL)


@cache
def script_js(name: str) -> str:
    """The page script ``static/<name>`` as the pages carry it: the file's text (UTF-8) without the comments
    before its code and without the whitespace around it. Read once per process."""
    text = files("meshplan.widgets").joinpath(f"static/{name}").read_text(encoding="utf-8")
    match = _LEADING_COMMENTS.match(text)
    return text[match.end() if match else 0 :].strip()


def core_js() -> str:
    """The runtime (``static/runtime.js``) with the reader's tables (units, digit scripts, the longest
    prediction) and the runtime's version written in from ``predict``."""
    units = {k: list(v) for k, v in UNITS.items()}
    return (
        script_js("runtime.js")
        .replace("__VERSION__", VERSION)
        .replace("__UNITS__", json.dumps(units, ensure_ascii=True))
        .replace("__ZEROS__", json.dumps(list(DIGIT_ZEROS)))
        .replace("__MAX__", str(MAX_CHARS))
    )


def mount_js(dom_id: str) -> str:
    """The statement that mounts the widget whose element is ``dom_id`` (``static/mount.js``); the id is one
    ``StaticWidget`` has checked (letters, digits, ``-`` and ``_``), so it needs no escaping."""
    return script_js("mount.js").replace("__ID__", dom_id)
