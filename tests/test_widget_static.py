"""The widgets' JavaScript lives in ``meshplan/widgets/static/*.js``, where ESLint and Node's test runner see it, and
nowhere in the library's Python: no string literal of ``lib/meshplan`` holds JavaScript (docstrings, which may name
the runtime's functions, aside). Each widget class names the page script that registers its kind, and the pages
carry each script without the comments before its code, with every placeholder filled in.
"""

from __future__ import annotations

import ast
import re
from importlib.resources import files
from pathlib import Path

import pytest

import meshplan
from meshplan.course.grid import DeviceGrid
from meshplan.course.plotting import TimelineExplorer
from meshplan.widgets import Checklist, Exercise, StaticWidget
from meshplan.widgets.runtime import core_js, mount_js, script_js

PACKAGE = Path(meshplan.__file__).resolve().parent
STATIC = PACKAGE / "widgets" / "static"
WIDGETS = (Exercise, Checklist, DeviceGrid, TimelineExplorer)

# What JavaScript looks like and prose does not: a function expression or an arrow, the DOM and the runtime's globals,
# a declaration, an object returned.
JAVASCRIPT = re.compile(
    r"\bfunction\s*\(|=>|\bdocument\.|\bwindow\.|addEventListener|querySelector|\.textContent\b|\bMP\.kinds\b"
    r"|\b(?:var|let|const)\s+[A-Za-z_$][\w$]*\s*=|\breturn\s*\{|\bconsole\.log"
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (of the module, a class or a function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def javascript_in_strings(source: str) -> list[tuple[int, str]]:
    """(line, excerpt) for each string literal of ``source`` (f-strings' parts included, docstrings not) that
    looks like JavaScript."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = JAVASCRIPT.search(node.value)
            if m:
                found.append((node.lineno, node.value[max(0, m.start() - 30) : m.end() + 30]))
    return found


def test_no_python_string_in_the_library_holds_javascript():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50
    found = {
        str(p.relative_to(PACKAGE)): hits for p in modules if (hits := javascript_in_strings(p.read_text("utf-8")))
    }
    assert found == {}, "JavaScript in Python strings: move it to meshplan/widgets/static/*.js"


@pytest.mark.parametrize(
    "source",
    [
        'S = r"""\nfunction(root,data,ui){\n  var x=1;\n}\n"""',
        "script = f'\\nwindow.__meshplan.mount(\"{dom_id}\");'",
        "js = 'cs => cs.map(c => c + 1)'",
        "body = \"el.addEventListener('click', go)\"",
    ],
)
def test_the_scan_sees_javascript(source):
    assert javascript_in_strings(source)


def test_the_scan_leaves_prose_and_css_alone():
    source = (
        '"""A function (``f``) of the controls; ``window.__meshplan`` is the runtime."""\n'
        'CSS = ".mp-widget{color:var(--mp-fg);border:1px solid var(--mp-border)}"\n'
        'MESSAGE = f"tp must divide {heads} heads; the function returns bytes"\n'
    )
    assert javascript_in_strings(source) == []


def test_every_widget_names_the_script_that_registers_its_kind():
    named = set()
    for cls in WIDGETS:
        assert (STATIC / cls.script_file).is_file(), cls
        script = script_js(cls.script_file)
        kinds = re.findall(r'MP\.kinds\["([\w-]+)"\]=', script)
        assert kinds == [cls.kind], (cls, kinds)
        assert script.startswith(f'(function(MP){{if(!MP||MP.kinds["{cls.kind}"])return;'), cls
        named.add(cls.script_file)
    assert {p.name for p in STATIC.glob("*.js")} == named | {"runtime.js", "mount.js"}
    library = {c for c in StaticWidget.__subclasses__() if c.__module__.startswith("meshplan.")}
    assert library == set(WIDGETS)


def test_pages_carry_each_script_without_the_comments_before_its_code():
    for path in sorted(STATIC.glob("*.js")):
        text = path.read_text("utf-8")
        assert text.startswith("/*"), f"{path.name}: begins with its documentation comment"
        carried = script_js(path.name)
        assert not carried.startswith(("/*", "//")) and carried == carried.strip()
        assert text.rstrip().endswith(carried), path.name  # the code itself, to its last byte
        assert "\r" not in text, path.name
    assert files("meshplan.widgets").joinpath("static/runtime.js").read_text(encoding="utf-8").startswith("/*")


def test_the_runtime_has_every_placeholder_filled_in():
    raw = script_js("runtime.js")
    assert {"__VERSION__", "__UNITS__", "__ZEROS__", "__MAX__"} <= set(re.findall(r"__[A-Z]+__", raw))
    assert re.findall(r"__[A-Z]+__", core_js()) == []
    assert mount_js("mp-ex-a_1") == 'window.__meshplan.mount("mp-ex-a_1");'


def test_a_widget_without_a_page_script_says_so():
    class Bare(StaticWidget):
        def entry(self, n):
            return n

    with pytest.raises(NotImplementedError, match="names no page script"):
        Bare("bare", {"n": [1, 2]}).to_html()
