"""Fuzzing the command line (issue 10): random command lines of ``plan``, ``export`` and ``schedule``, built from the
real options with values both valid and hostile (zero, negative, huge, non-finite, non-ASCII digits, text, empty),
run in-process through ``cli.main``. Every one must end with exit 0 and exactly one JSON object (``--json``) or a
table, or exit 2 with one line ``meshplan: error: ...`` and no traceback; hypothesis' deadline bounds the time of
each (a hang fails the test).
"""

from __future__ import annotations

import json

from commands import run
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VALUES = [
    "1",
    "2",
    "3",
    "4",
    "8",
    "16",
    "64",
    "0",
    "-1",
    "-8",
    "+8",
    "1_000",
    "9" * 40,
    "1e308",
    "nan",
    "inf",
    "",
    "abc",
    "٣",
    "8.0",
    "0x10",
    " 8 ",
    "1048577",
]
PLAN_OPTIONS = [
    "--gpus",
    "--tp",
    "--cp",
    "--ep",
    "--pp",
    "--dp",
    "--expert-tp",
    "--seq",
    "--micro-batch-size",
    "--micro-batches",
    "--global-batch",
    "--virtual-stages",
    "--gpus-per-node",
    "--gpu-memory-gb",
]
CHOICES = {
    "--zero": ["0", "1", "2", "3", "4", "-1", "1.0"],
    "--recompute": ["none", "selective", "full", "x"],
    "--order": ["tp-cp-pp-dp", "tp-cp-ep-dp-pp", "bogus", "", "tp-tp-pp-dp"],
    "--hardware": ["lab", "h100-sxm-80gb", "b200-sxm-180gb", "nope", "/dev/null", "x" * 300],
    "--accounting": ["lab", "megatron", "fsdp2", "deepspeed", "dummy"],
    "--model": [
        "qwen3.8-27b",
        "deepseek-v3",
        "small-3.7m",
        "public/mixtral-8x7b-v0.1",
        "nope",
        "",
        "/etc/passwd",
        "x" * 5000,
    ],
}
FLAGS = ["--no-sp", "--uneven-stages", "--json"]
SCHEDULE = {
    "--kind": ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipev", "bogus"],
    "--pp": ["1", "2", "4", "8", "3000", "0", "-2", "9" * 30],
    "--micro-batches": ["1", "4", "8", "16", "3000"],
    "--virtual-stages": ["1", "2", "9" * 400],
    "--f": ["1", "0", "2.5", "1e308", "nan", "-1"],
    "--b": ["1", "0", "2"],
    "--w": ["1", "0", "inf"],
}


@st.composite
def plan_argv(draw):
    cmd = draw(st.sampled_from(["plan", "export"]))
    argv = [cmd, "--model", draw(st.sampled_from(CHOICES["--model"])), "--gpus", draw(st.sampled_from(VALUES))]
    for opt in draw(st.lists(st.sampled_from(PLAN_OPTIONS[1:]), max_size=5, unique=True)):
        argv += [opt, draw(st.sampled_from(VALUES))]
    for opt in draw(st.lists(st.sampled_from([k for k in CHOICES if k != "--model"]), max_size=3, unique=True)):
        argv += [opt, draw(st.sampled_from(CHOICES[opt]))]
    if cmd == "plan":
        argv += draw(st.lists(st.sampled_from(FLAGS), max_size=3, unique=True))
    else:
        argv += ["--format", draw(st.sampled_from(["megatron", "torchtitan", "other"]))]
    return argv


@st.composite
def schedule_argv(draw):
    argv = ["schedule"]
    for opt, values in SCHEDULE.items():
        if opt in ("--kind", "--pp", "--micro-batches") or draw(st.booleans()):
            argv += [opt, draw(st.sampled_from(values))]
    if draw(st.booleans()):
        argv.append("--json")
    return argv


def check(argv: list[str]) -> None:
    rc, out, err = run(argv)
    assert "Traceback" not in out + err, argv
    if rc == 0:
        assert err == "", (argv, err)
        if "--json" in argv:
            assert out.endswith("\n") and out.count("\n") == 1, argv
            assert isinstance(json.loads(out), dict), argv
        else:
            assert out.strip(), argv
    else:
        assert rc == 2, (argv, rc, err)
        assert out == "", (argv, out)
        assert err.startswith("meshplan: error: ") and err.count("\n") == 1, (argv, err)
        assert len(err) < 700, (argv, err)


FUZZ = settings(
    max_examples=examples(250),
    derandomize=True,
    deadline=5000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FUZZ
@given(plan_argv())
def test_plan_and_export_command_lines(argv):
    check(argv)


@FUZZ
@given(schedule_argv())
def test_schedule_command_lines(argv):
    check(argv)


def test_known_hostile_lines():
    """The cases issue 10 listed, each a clear one-line error (or a correct answer)."""
    cases = {
        ("plan", "--model", "qwen3.8-27b", "--gpus", "8", "--seq", "9" * 400): "seq=",
        ("plan", "--model", "qwen3.8-27b", "--gpus", "8", "--global-batch", "9" * 400): "global-batch=",
        ("plan", "--model", "qwen3.8-27b", "--gpus", "8", "--virtual-stages", "9" * 400): "virtual-stages=",
        ("plan", "--model", "x" * 5000, "--gpus", "8"): "is longer than the file system allows",
        ("plan", "--model", "qwen3.8-27b", "--gpus", "8", "--order", "bogus"): "order='bogus'",
        ("plan", "--model", "qwen3.8-27b", "--gpus", "8", "--gpu-memory-gb", "1e308"): "gpu-memory-gb=",
        ("schedule", "--kind", "gpipe", "--pp", "3000", "--micro-batches", "3000"): "formula_bubble",
        ("schedule", "--kind", "1f1b", "--pp", "4", "--micro-batches", "8", "--f", "1e308"): "f=",
        ("search", "--model", "qwen3.8-27b", "--gpus", "8", "--global-batch", "8", "--order", ""): "order=''",
        (
            "search",
            "--model",
            "qwen3.8-27b",
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--gpu-memory-gb",
            "1e308",
        ): "gpu-memory-gb=",
    }
    for argv, needle in cases.items():
        rc, out, err = run(list(argv))
        assert (rc, out) == (2, ""), (argv, rc, err)
        assert err.startswith("meshplan: error: ") and needle in err and err.count("\n") == 1, (argv, err)
    # a valid plan whose expert gradients sync over the TP ranks: booked under edp, never under a size-1 CP
    rc, out, _ = run(["plan", "--model", "deepseek-v3", "--gpus", "8", "--tp", "8", "--expert-tp", "1", "--json"])
    report = json.loads(out)
    assert rc == 0 and report["comm_bytes_per_step"]["cp"] == 0 and report["link"]["cp"] is None
    assert report["comm_bytes_per_step"]["edp"] > 0 and report["link"]["edp"] == "nvlink"
