"""Fuzzing the command line (issue 10): random command lines of ``plan``, ``export`` and ``schedule``, built from the
real options with values both valid and hostile (zero, negative, huge, non-finite, non-ASCII digits, text, empty),
run in-process through ``cli.main``. Every one must end with exit 0 and exactly one JSON object (``--json``) or a
table, or exit 2 with one line ``meshplan: error: ...`` and no traceback; hypothesis' deadline bounds the time of
each (a hang fails the test).

Issue 29 added three kinds: the output channels (the same command lines with stdout or stderr closed, a full disk
and a reader that leaves, in process: ``sys.stdout`` None is what Python sets for a closed descriptor), schedules
of every kind with operations of zero time (each operation printed once, in order), and ``validate --output`` on a
path of every file type (refused unless a regular file or nothing, the path left as it was).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import stat
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from commands import run
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplan import cli
from meshplan.realrun import command
from meshplan.schedule import KINDS, simulate

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


# ---------------------------------------------------------------- issue 29: output channels
CHANNELS = ["stdout_closed", "stderr_closed", "both_closed", "disk_full", "broken_pipe"]


class _Failing(io.StringIO):
    """A stdout whose every write fails with ``exc``."""

    def __init__(self, exc: OSError):
        super().__init__()
        self.exc = exc

    def write(self, text):
        raise self.exc


def _in_channel(argv: list[str], channel: str) -> tuple[int, str]:
    """``cli.main(argv)`` with stdout and stderr as ``channel`` makes them: its code and what reached stderr."""
    err = None if channel in ("stderr_closed", "both_closed") else io.StringIO()
    out: io.StringIO | None = {
        "stdout_closed": None,
        "both_closed": None,
        "stderr_closed": io.StringIO(),
        "disk_full": _Failing(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))),
        "broken_pipe": _Failing(BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))),
    }[channel]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    if channel == "stderr_closed":  # what stdout got is what it gets with stderr open: the error never goes there
        assert out is not None and out.getvalue() == run(argv).stdout, argv
    return rc, "" if err is None else err.getvalue()


@FUZZ
@given(st.one_of(plan_argv(), schedule_argv()), st.sampled_from(CHANNELS))
def test_output_channels(argv, channel):
    rc, err = _in_channel(argv, channel)
    normal = run(argv)
    assert "Traceback" not in err, (argv, channel)
    if channel == "stdout_closed":  # refused before anything runs, bad input or not
        assert rc == 2 and err.startswith("meshplan: error: stdout is closed") and err.count("\n") == 1, err
    elif channel == "both_closed":
        assert (rc, err) == (2, ""), argv
    elif channel == "stderr_closed":
        assert (rc, err) == (normal.returncode, ""), argv
    elif normal.returncode == 2:  # bad input is found before anything is printed
        assert (rc, err) == (2, normal.stderr), argv
    elif channel == "disk_full":
        assert rc == 1 and err == "meshplan: error: cannot write the output: No space left on device\n", (argv, err)
    else:
        assert (rc, err) == (141, ""), (argv, err)


# ---------------------------------------------------------------- issue 29: operations of zero time
TIMES = ["0", "1", "2", "0.5", "3"]


@st.composite
def zero_time_schedule(draw):
    kind = draw(st.sampled_from(KINDS))
    times = [draw(st.sampled_from(TIMES)) for _ in "fbw"]
    times[draw(st.integers(0, 2))] = "0"  # at least one operation of zero time
    argv = ["schedule", "--kind", kind, "--pp", draw(st.sampled_from(["1", "2", "3", "4", "8"]))]
    argv += ["--micro-batches", draw(st.sampled_from(["1", "2", "4", "8", "16"]))]
    argv += ["--virtual-stages", draw(st.sampled_from(["1", "2", "3"]))]
    argv += [a for name, t in zip("fbw", times) for a in (f"--{name}", t)]
    return argv + (["--json"] if draw(st.booleans()) else [])


@FUZZ
@given(zero_time_schedule())
def test_schedules_with_operations_of_zero_time(argv):
    check(argv)
    rc, out, _ = run(argv)
    if rc != 0 or "--json" in argv:
        return
    opt = dict(zip(argv[1::2], argv[2::2]))
    t = simulate(
        opt["--kind"],
        int(opt["--pp"]),
        int(opt["--micro-batches"]),
        int(opt["--virtual-stages"]),
        *(float(opt[f"--{name}"]) for name in "fbw"),
    )
    rows = [line for line in out.splitlines() if line.startswith("stage ")]
    assert len(rows) == t.pp, argv
    for s, row in enumerate(rows):  # every operation once, in time order: a grid's labels or the list's label@start
        tokens = row.split("|", 1)[1].split()
        assert [tok.split("@")[0] for tok in tokens if not set(tok) <= {"=", "."}] == [
            e.label for e in t.stage_events(s)
        ], (argv, s)


# ---------------------------------------------------------------- issue 29: output paths of every file type
FILE_TYPES = {  # kind -> None (accepted) or the words of its refusal
    "absent": None,
    "regular": None,
    "folder": "is a directory",
    "fifo": "is a FIFO (named pipe)",
    "link-to-regular": "is a symbolic link",
    "dangling-link": "is a symbolic link",
    "link-to-folder": "is a symbolic link",
    "device": "is a character device",
    "trailing-slash": "names a directory",
    "missing-parent": "does not exist",
    "parent-is-file": "is not a directory",
}
NAMES = ["r.json", "résultats.json", "a b.json", ".hidden", "x" * 200]


def _make(tmp: Path, kind: str, name: str) -> str:
    """A path of file type ``kind`` under ``tmp`` (``device`` is /dev/null: only ever looked at)."""
    target = tmp / name
    (tmp / "other.json").write_text("{}")
    (tmp / "folder").mkdir()
    if kind == "regular":
        target.write_text("old")
    elif kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind.startswith("link") or kind == "dangling-link":
        dest = {"link-to-regular": "other.json", "dangling-link": "nowhere.json", "link-to-folder": "folder"}[kind]
        target.symlink_to(tmp / dest)
    elif kind == "device":
        return os.devnull
    elif kind == "trailing-slash":
        return f"{target}/"
    elif kind == "missing-parent":
        return str(tmp / "missing" / name)
    elif kind == "parent-is-file":
        return str(tmp / "other.json" / name)
    return str(target)


def _snapshot(tmp: Path) -> dict:
    def one(p: Path):
        st_ = os.lstat(p)
        return stat.S_IFMT(st_.st_mode), st_.st_ino, os.readlink(p) if p.is_symlink() else None

    return {p.name: one(p) for p in tmp.iterdir()}


@pytest.mark.parametrize("kind", sorted(FILE_TYPES))
@settings(FUZZ, max_examples=examples(10))
@given(name=st.sampled_from(NAMES))
def test_output_paths_of_every_file_type(kind, name):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = _make(tmp, kind, name)
        before, device = _snapshot(tmp), os.lstat(os.devnull)
        refusal = FILE_TYPES[kind]
        with mock.patch.object(command, "run_checks", side_effect=AssertionError("ran before checking --output")):
            if refusal is None:  # accepted: written through a temporary file renamed over the path, nothing else left
                assert command.check_output(path) == Path(path)
                command._write(Path(path), {"rows": []})
                assert json.loads(Path(path).read_text()) == {"rows": []} and Path(path).is_file()
                assert sorted(p.name for p in tmp.iterdir()) == sorted({*before, name})
            else:
                rc, out, err = run(["validate", "--quick", "--output", path])
                assert (rc, out) == (2, ""), (kind, err)
                assert err.startswith(f"meshplan: error: --output {path}") and refusal in err, (kind, err)
                assert err.count("\n") == 1 and _snapshot(tmp) == before, kind
        assert os.lstat(os.devnull).st_rdev == device.st_rdev and stat.S_ISCHR(os.lstat(os.devnull).st_mode)
