"""The live planner runs the library in the browser under Pyodide, where no compiled package is installed (issue 27):
planning (``plan``, ``search``, ``export`` on dense and MoE models, every ledger) imports nothing but the standard
library, and the mesh's expert groups built without numpy equal numpy's. The planner page's
selects offer exactly the command line's choices."""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from meshplan.cli import build_parser
from meshplan.spec.dims import ParallelDims
from meshplan.spec.hardware import available_hardware
from meshplan.spec.mesh import Mesh
from meshplan.spec.model import available_models

BLOCKED = ("numpy", "scipy", "jsonschema", "torch", "transformers", "matplotlib", "pandas", "sympy")

SCRIPT = textwrap.dedent(
    f"""
    import sys, io, contextlib, json
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ImportError(f"{{name}} is blocked: the planner has no compiled packages")
    sys.meta_path.insert(0, Block())
    from meshplan.cli import main
    runs = [
        ["plan", "--model", "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--json"],
        ["plan", "--model", "qwen3-30b-a3b", "--gpus", "32", "--ep", "8", "--tp", "2", "--zero", "1",
         "--hardware", "h100-sxm-80gb", "--accounting", "megatron", "--json"],
        ["plan", "--model", "deepseek-v3", "--gpus", "256", "--pp", "8", "--ep", "32", "--zero", "1",
         "--hardware", "h800-sxm-80gb", "--accounting", "megatron", "--precision", "fp8", "--uneven-stages"],
        ["search", "--model", "qwen3-30b-a3b", "--gpus", "16", "--seq", "4096", "--global-batch", "64",
         "--hardware", "h100-sxm-80gb", "--top", "3"],
        ["export", "--format", "megatron", "--model", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8",
         "--hardware", "h100-sxm-80gb", "--zero", "1"],
        ["export", "--format", "torchtitan", "--model", "llama-3.1-8b", "--gpus", "8", "--zero", "3"],
        ["export", "--format", "deepspeed", "--model", "llama-3.1-8b", "--gpus", "8", "--zero", "2"],
        ["plan", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "3"],
    ]
    codes = []
    for argv in runs:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            codes.append(main(argv))
    print(json.dumps({{"codes": codes, "loaded": sorted({{m.split(".")[0] for m in sys.modules}} & set({BLOCKED!r}))}}))
    """
)


def test_planning_imports_no_compiled_package():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"codes": [0, 0, 0, 0, 0, 0, 0, 2], "loaded": []}


MESHES = [
    (dims, order, g)
    for dims, order, g in itertools.product(
        [
            (1, 1, 1, 8, 8, 1),
            (2, 1, 2, 8, 8, 1),
            (2, 2, 1, 4, 4, 2),
            (4, 1, 2, 4, 8, 1),
            (1, 2, 4, 4, 8, 1),
            (2, 1, 1, 8, 16, 1),
            (8, 1, 2, 4, 32, 8),
        ],
        ["tp-cp-dp-pp", "tp-dp-cp-pp", "tp-cp-ep-dp-pp"],
        [4, 8],
    )
]


@pytest.mark.parametrize(("dims", "order", "gpn"), MESHES)
def test_expert_groups_without_numpy_equal_numpys(dims, order, gpn):
    tp, cp, pp, dp, ep, etp = dims
    try:
        d = ParallelDims(tp, cp, pp, dp, ep, expert_tp=etp, order=order)
    except ValueError:
        pytest.skip("not a mesh")
    mesh = Mesh.from_dims(d, gpn)
    for axis in ("ep", "edp"):
        rows = mesh._expert_rows(axis)
        assert [tuple(int(x) for x in r) for r in mesh._expert_array(axis)] == [tuple(r) for r in rows]


def test_the_page_choices_are_the_parsers():
    """Every select offers exactly the command line's choices (the blank one is the option's default)."""
    text = (Path(__file__).resolve().parents[1] / "book" / "planner.md").read_text(encoding="utf-8")

    def options(name: str) -> list[str]:
        block = re.search(rf'<select id="planner-{name}".*?</select>', text, re.S)
        assert block, name
        return re.findall(r'<option value="([^"]*)"', block.group(0))

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    plan = {a.dest: a for a in sub.choices["plan"]._actions}
    export = {a.dest: a for a in sub.choices["export"]._actions}
    assert options("accounting") == ["", *[c for c in plan["accounting"].choices if c != "lab"]]
    assert options("precision") == list(plan["precision"].choices)
    assert options("recompute") == list(plan["recompute"].choices)
    assert options("zero") == ["0", "1", "2", "3"]
    assert options("format") == list(export["format"].choices)
    assert options("hardware") == ["", *[h for h in available_hardware() if h != "lab"]]
    assert options("model") == ["", *available_models()]


# The planning path's modules: what plan, search and export import (the live planner runs them under Pyodide's
# CPython 3.14, the CLI under the reader's own; sum() of floats differs from 3.12 on).
PLANNING = [
    "steptime/model.py",
    "steptime/breakdowns.py",
    "plan",
    "parallel",
    "spec",
    "search.py",
    "core",
    "export.py",
    "export_deepspeed.py",
    "cli.py",
]


def test_planning_adds_floats_in_order():
    """No bare ``sum()`` on the planning path: ``add_up`` adds left to right on every CPython, so the JSON is the same
    bytes in the browser as on the command line (3.12's compensated ``sum`` once moved a step time by one ulp)."""
    import ast

    from meshplan.core.units import add_up

    assert add_up([1e16, 1.0, -1e16]) == 0.0  # sum() says 1.0 on 3.12+, 0.0 on 3.11
    assert add_up([0.1, 0.2, 0.3]) == (0.1 + 0.2) + 0.3
    lib = Path(__file__).resolve().parents[1] / "lib" / "meshplan"
    found = []
    for entry in PLANNING:
        for path in [lib / entry] if entry.endswith(".py") else sorted((lib / entry).rglob("*.py")):
            if not path.exists():
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sum":
                    counted = isinstance(node.args[0], ast.GeneratorExp) and isinstance(node.args[0].elt, ast.Constant)
                    if not counted:  # sum(1 for ...) counts: integers, exact on every version
                        found.append(f"{path.relative_to(lib)}:{node.lineno}")
    assert found == []


def test_add_up_in_order_equals_311_sum():
    """``add_up`` is the builtin ``sum`` on 3.11 (which adds in order) and a left-to-right reduce from 3.12 on: the
    two agree bit for bit on every list (checked here against the reduce on whichever Python runs the tests)."""
    import random

    from meshplan.core.units import _in_order, add_up

    rnd = random.Random(7)
    for _ in range(500):
        xs = [rnd.choice([1e16, -1e16, 1.0, 0.1, 3.0e-8]) * rnd.random() for _ in range(rnd.randrange(0, 12))]
        assert add_up(xs) == _in_order(xs) and type(add_up(xs)) is type(_in_order(xs))
    assert add_up(range(5)) == 10 and isinstance(add_up(range(5)), int)
