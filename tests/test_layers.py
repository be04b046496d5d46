"""The library's layering, as ``make lint`` checks it with import-linter (``.importlinter``), plus what a layers
contract does not see: no module takes part in an import cycle, counting every import statement (inside functions
and under ``TYPE_CHECKING`` too, as grimp reads them), and the only imports of the library inside functions are the
ones that load an optional dependency (torch, through ``realrun.runs``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import meshplan

grimp = pytest.importorskip("grimp")

PACKAGE = Path(meshplan.__file__).parent
# importer -> imported: the library's own imports that stay inside a function, each because the imported module
# loads an optional dependency at import time
LAZY = {("meshplan.realrun.checks", "meshplan.realrun.runs")}


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_no_import_cycle():
    graph = grimp.build_graph("meshplan", exclude_type_checking_imports=False)
    assert len(graph.modules) > 50
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.build_graph("meshplan")
    graph.add_import(importer="meshplan.spec.dims", imported="meshplan.plan.evaluation")
    assert any("meshplan.spec.dims" in c and "meshplan.plan.evaluation" in c for c in _cycles(graph))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_library_imports_inside_functions_only_for_optional_dependencies():
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("meshplan")):
                        found.add((_module_name(path), node.module))
                    if isinstance(node, ast.Import) and any(a.name.startswith("meshplan") for a in node.names):
                        found.add((_module_name(path), node.names[0].name))
    assert found == LAZY


def test_the_library_has_no_relative_or_type_checking_imports():
    # absolute imports name the layer they reach into; TYPE_CHECKING blocks hid the old cycle
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.ImportFrom) and node.level), f"{path}: relative import"
            assert not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)), f"{path}"
