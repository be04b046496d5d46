"""The live planner runs the library in the browser under Pyodide, where no compiled package is installed (issue 27):
planning (``plan``, ``search``, ``export`` on dense and MoE models, every ledger) imports nothing but the standard
library, and the mesh's expert groups built without numpy equal numpy's."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import pytest

from meshplan.spec.dims import ParallelDims
from meshplan.spec.mesh import Mesh

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
        [(1, 1, 1, 8, 8, 1), (2, 1, 2, 8, 8, 1), (2, 2, 1, 4, 4, 2), (4, 1, 2, 4, 8, 1), (1, 2, 4, 4, 8, 1),
         (2, 1, 1, 8, 16, 1), (8, 1, 2, 4, 32, 8)],  # fmt: skip
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
