"""The command line's output channels and inputs hardened by issue 29, each case at its cause:

* ``validate --output`` refuses what is not a regular file (a symbolic link, a device, a FIFO, a directory) before any
  run and again before the rename, instead of renaming a temporary file over it;
* a model written as a path (``./qwen3-8b``) is that folder, and a bare name that is both a shipped stem and a
  local file or folder is refused as ambiguous;
* schedules with an operation of zero time print as text; a closed stdout is refused with exit 2, a closed stderr
  never sends the error to stdout, a broken pipe or a full disk ends without a traceback;
* ``--json`` is strict JSON: a non-finite number is one line naming the key and the hardware figure behind it;
* third-party warnings (transformers' logging, ``warnings``) are silenced while a model is read.

In process (``cli.main``, with stdout or stderr set to None as Python sets them for a closed descriptor), and a few
real processes run together (about 0.1 s each) for the descriptors themselves.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from commands import REPO, run

from meshplan import cli
from meshplan.realrun import command
from meshplan.schedule import KINDS, simulate
from meshplan.spec.model import MODELS_DIR, load_model

TINY = {  # a local model of 197,408,256 parameters, nothing like the shipped qwen3-8b
    "model_type": "llama",
    "hidden_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 24,
    "num_key_value_heads": 6,
    "intermediate_size": 4096,
    "vocab_size": 32000,
}


def run_streams(argv, stdout=None, stderr=None) -> tuple[int, object, object]:
    """``cli.main(argv)`` with ``sys.stdout`` and ``sys.stderr`` set to the given objects (None: closed)."""
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = cli.main(list(argv))
    return rc, stdout, stderr


def one_error(err: str, *needles: str) -> None:
    assert err.startswith("meshplan: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


# ---------------------------------------------------------------- 1. output files
def _kinds(tmp: Path) -> dict[str, Path]:
    """One path of every kind that is not a regular file (and is safe to refuse: nothing is written)."""
    (tmp / "regular.json").write_text("{}")
    (tmp / "folder").mkdir()
    os.mkfifo(tmp / "fifo")
    (tmp / "link").symlink_to(tmp / "regular.json")
    (tmp / "dangling").symlink_to(tmp / "nowhere.json")
    (tmp / "link-to-folder").symlink_to(tmp / "folder")
    return {
        "fifo": tmp / "fifo",
        "link": tmp / "link",
        "dangling": tmp / "dangling",
        "link-to-folder": tmp / "link-to-folder",
        "folder": tmp / "folder",
        "device": Path(os.devnull),
    }


WHAT = {
    "fifo": "is a FIFO (named pipe)",
    "link": "is a symbolic link",
    "dangling": "is a symbolic link",
    "link-to-folder": "is a symbolic link",
    "folder": "is a directory",
    "device": "is a character device",
}


def _state(path: Path) -> tuple:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), os.readlink(path) if stat.S_ISLNK(st.st_mode) else None, st.st_ino


def test_validate_refuses_an_output_that_is_not_a_regular_file(tmp_path, monkeypatch):
    monkeypatch.setattr(command, "run_checks", lambda quick=True: pytest.fail("ran the checks before --output"))
    for name, path in _kinds(tmp_path).items():
        before = _state(path)
        rc, out, err = run(["validate", "--quick", "--output", str(path)])
        assert (rc, out) == (2, ""), (name, err)
        one_error(err, f"--output {path}: {WHAT[name]}")
        assert _state(path) == before, name  # the same file, untouched
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["regular.json", "folder", "fifo", "link", "dangling", "link-to-folder"]
    )  # no temporary file


def test_a_trailing_slash_names_a_directory(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    for target in (tmp_path / "r.json", tmp_path / "new.json"):
        with pytest.raises(ValueError, match="names a directory"):
            command.check_output(f"{target}/")


def test_the_write_looks_again_and_keeps_a_regular_file_s_mode(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o640)
    assert command.check_output(path) == path
    command._write(path, {"rows": [1]})
    assert json.loads(path.read_text()) == {"rows": [1]} and stat.S_IMODE(path.stat().st_mode) == 0o640
    # the runs take minutes: a link put there meanwhile is refused at the write, not replaced
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ValueError, match="is a symbolic link"):
        command._write(path, {"rows": [2]})
    assert path.is_symlink() and not (tmp_path / "elsewhere.json").exists()
    with pytest.raises(ValueError, match="non-finite number"):
        command._write(tmp_path / "nan.json", {"x": float("nan")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


# ---------------------------------------------------------------- 2. a local model folder and a shipped stem
@pytest.fixture
def local_qwen3_8b(tmp_path, monkeypatch):
    """The working directory of a `huggingface-cli download --local-dir qwen3-8b`: ./qwen3-8b/config.json."""
    (tmp_path / "qwen3-8b").mkdir()
    (tmp_path / "qwen3-8b" / "config.json").write_text(json.dumps(TINY))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_local_folder_written_as_a_path_wins_over_the_shipped_stem(local_qwen3_8b):
    shipped = load_model(MODELS_DIR / "qwen3-8b.json").params.total
    local = 197_408_256
    assert shipped != local
    for spelling in ("./qwen3-8b", str(local_qwen3_8b / "qwen3-8b"), "./qwen3-8b/config.json"):
        assert load_model(spelling).params.total == local, spelling
        rc, out, err = run(["plan", "--model", spelling, "--gpus", "1", "--json"])
        assert rc == 0 and json.loads(out)["params"] == local, (spelling, err)


def test_a_bare_name_that_is_both_is_ambiguous(local_qwen3_8b):
    rc, out, err = run(["plan", "--model", "qwen3-8b", "--gpus", "1"])
    assert (rc, out) == (2, "")
    one_error(err, "'qwen3-8b' is ambiguous", "folder qwen3-8b", "./qwen3-8b", str(MODELS_DIR / "qwen3-8b.json"))
    # the shipped model by its path
    rc, out, _ = run(["plan", "--model", str(MODELS_DIR / "qwen3-8b.json"), "--gpus", "8", "--json"])
    assert rc == 0 and json.loads(out)["params"] == load_model(MODELS_DIR / "qwen3-8b.json").params.total
    # a file of that name is ambiguous too
    (local_qwen3_8b / "llama-3.1-8b").write_text(json.dumps(TINY))
    with pytest.raises(ValueError, match=r"'llama-3.1-8b' is ambiguous: both a shipped model and the file"):
        load_model("llama-3.1-8b")


def test_a_shipped_stem_alone_is_still_the_shipped_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_model("qwen3-8b") is load_model(MODELS_DIR / "qwen3-8b.json")
    with pytest.raises(ValueError, match=r"unknown model '\./qwen3-8b'"):
        load_model("./qwen3-8b")  # written as a path: never the shipped stem


# ---------------------------------------------------------------- 3. tracebacks
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("zero", ["f", "b", "w"])
def test_schedules_with_an_operation_of_zero_time_print_every_operation(kind, zero):
    times = {"f": 1, "b": 1, "w": 1, zero: 0}
    v = 2 if kind == "interleaved" else 1
    rc, out, err = run(
        ["schedule", "--kind", kind, "--pp", "4", "--micro-batches", "8", "--virtual-stages", str(v)]
        + [a for k, t in times.items() for a in (f"--{k}", str(t))]
    )
    assert rc == 0 and err == "", err
    t = simulate(kind, 4, 8, v, **times)
    rows = [line for line in out.splitlines() if line.startswith("stage ")]
    for s, row in enumerate(rows):
        tokens = row.split("|", 1)[1].split()
        labels = [tok.split("@")[0] for tok in tokens if not set(tok) <= {"=", "."}]
        assert labels == [e.label for e in t.stage_events(s)], (kind, zero, s)


def test_closed_stdout_is_refused_before_anything_runs():
    for argv in (["plan", "--model", "qwen3.8-27b", "--gpus", "8"], ["schedule", "--kind", "x"], ["--version"]):
        err = io.StringIO()
        rc, _, _ = run_streams(argv, stdout=None, stderr=err)
        assert rc == 2, argv
        one_error(err.getvalue(), "stdout is closed")


def test_closed_stderr_never_puts_the_error_on_stdout():
    out = io.StringIO()
    rc, _, _ = run_streams(["plan", "--model", "nope", "--gpus", "8", "--json"], stdout=out, stderr=None)
    assert (rc, out.getvalue()) == (2, "")
    out = io.StringIO()
    rc, _, _ = run_streams(["plan", "--model", "small-3.7m", "--gpus", "1", "--json"], stdout=out, stderr=None)
    assert rc == 0 and isinstance(json.loads(out.getvalue()), dict)
    rc, _, _ = run_streams(["plan", "--model", "nope", "--gpus", "8"], stdout=None, stderr=None)
    assert rc == 2


class _Failing(io.StringIO):
    def __init__(self, exc: OSError):
        super().__init__()
        self.exc = exc

    def write(self, text):
        raise self.exc


def test_a_failed_write_is_one_line_and_a_broken_pipe_is_quiet():
    err = io.StringIO()
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    rc, _, _ = run_streams(["schedule", "--kind", "1f1b", "--pp", "2", "--micro-batches", "2"], _Failing(full), err)
    assert rc == 1
    one_error(err.getvalue(), "cannot write the output: No space left on device")
    err = io.StringIO()
    pipe = BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
    rc, _, _ = run_streams(["schedule", "--kind", "1f1b", "--pp", "2", "--micro-batches", "2"], _Failing(pipe), err)
    assert (rc, err.getvalue()) == (141, "")


def _env() -> dict[str, str]:
    """The environment of ``commands.run_processes``: the repository's library first."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "lib"), os.environ.get("PYTHONPATH")])))


def test_real_processes_with_closed_descriptors():
    """The descriptors themselves, in real processes run together: ``>&-`` and ``2>&-``."""
    me = f"'{sys.executable}' -m meshplan"
    scripts = {
        "stdout_closed": f"{me} plan --model small-3.7m --gpus 1 --json >&-; echo rc=$? >&2",
        "stderr_closed_bad": f"{me} plan --model nope --gpus 1 --json 2>&-; echo rc=$?",
        "stderr_closed_ok": f"{me} plan --model small-3.7m --gpus 1 --json 2>&-",
    }
    procs = {
        name: subprocess.Popen(
            ["sh", "-c", script], cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, script in scripts.items()
    }
    got = {name: p.communicate(timeout=60) for name, p in procs.items()}
    out, err = got["stdout_closed"]
    *lines, status = err.splitlines()
    assert out == "" and status == "rc=2" and len(lines) == 1, err
    one_error(lines[0] + "\n", "stdout is closed")
    assert got["stderr_closed_bad"] == ("rc=2\n", "")  # the error is not mixed into stdout
    out, err = got["stderr_closed_ok"]
    assert err == "" and isinstance(json.loads(out), dict)


def test_a_reader_that_leaves_ends_a_real_process_quietly():
    """``| head -c1``: the timeline of 65,536 operations is far more than a pipe holds, so the write fails."""
    p = subprocess.Popen(
        [sys.executable, "-m", "meshplan", "schedule", "--kind", "gpipe", "--pp", "64", "--micro-batches", "512"],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.read(1)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141 and err == b"", err


# ---------------------------------------------------------------- 4. strict JSON
def _hardware_file(tmp: Path, **values) -> Path:
    """The lab preset with ``values``, named 'tiny', in a file of its own (``load_hardware`` caches by path)."""
    raw = json.loads((REPO / "lib/meshplan/data/hardware/lab.json").read_text())
    raw["name"] = "tiny"
    for k, v in values.items():
        raw[k]["value"] = v
    path = tmp / f"tiny-{'-'.join(f'{k}={v!r}' for k, v in values.items())}.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(
    "field, argv",
    [
        ("infiniband_bytes_per_s", ["--gpus", "16", "--tp", "8", "--pp", "2"]),
        ("nvlink_bytes_per_s", ["--gpus", "8", "--tp", "8"]),
        ("hbm_bytes_per_s", ["--gpus", "8"]),
        ("peak_bf16_flop_per_s", ["--gpus", "8"]),
    ],
)
def test_a_tiny_hardware_rate_is_an_error_naming_it_not_infinity(tmp_path, field, argv):
    hw = _hardware_file(tmp_path, **{field: 1e-300})
    for command_line in (
        ["plan", "--model", "qwen3.8-27b", *argv, "--hardware", str(hw), "--json"],
        [
            "search",
            "--model",
            "qwen3.8-27b",
            "--gpus",
            argv[1],
            "--global-batch",
            "16",
            "--hardware",
            str(hw),
            "--json",
        ],
    ):
        rc, out, err = run(command_line)
        assert (rc, out) == (2, ""), command_line
        one_error(err, f"{field}=1e-300", "too small for a finite")


def test_strict_json_on_a_sweep_of_tiny_bandwidths(tmp_path):
    """InfiniBand from 1e-299 down to 4e-300 B/s (PP over it), 13 values: every answer is strict JSON or one line
    naming the field. Near 5.5e-300 every term of the step time is finite but their sum is not: the step-time model
    names the rate of its largest term (the JSON guard would name it too)."""
    named = []
    for i in range(13):
        v = float(f"{10 ** (-299 - i / 30):.2g}")
        hw = _hardware_file(tmp_path, infiniband_bytes_per_s=v)
        argv = ["plan", "--model", "qwen3.8-27b", "--gpus", "16", "--tp", "8", "--pp", "2", "--hardware", str(hw)]
        rc, out, err = run([*argv, "--json"])
        if rc == 0:
            assert "Infinity" not in out and "NaN" not in out and isinstance(json.loads(out), dict), v
        else:
            assert (rc, out) == (2, ""), v
            one_error(err, f"infiniband_bytes_per_s={v:g}", "too small for a finite")
            named.append(err)
    assert len(named) >= 4 and any("(their sum overflows)" in e for e in named), named


def test_strict_json_names_the_key_and_the_hardware_figure():
    with pytest.raises(ValueError, match=r"^\[1\]\.x would be nan, which JSON cannot hold$"):
        cli._json([{"x": 1.0}, {"x": float("nan")}])
    hw = cli.load_hardware()
    plan = {"link": {"pp": "infiniband"}, "comm_time_s": {"pp": float("inf")}}
    with pytest.raises(ValueError, match=r"^comm_time_s\.pp would be inf.*'lab' has infiniband_bytes_per_s=5e\+10"):
        cli._json(plan, hw)
    # a sum that overflows though every term is finite: the largest term's figures
    entry = {"link": {"pp": "infiniband"}, "step_time_s": float("inf"), "step_time_terms_s": {"pp_s": 1e308}}
    with pytest.raises(ValueError, match=r"^plan 1: step_time_s would be inf.*infiniband_bytes_per_s=5e\+10"):
        cli._json([entry], hw)
    entry = {"step_time_s": float("inf"), "step_time_terms_s": {"compute_s": 1e308, "pp_s": 1.0}}
    with pytest.raises(ValueError, match=r"peak_bf16_flop_per_s=9\.895e\+14, too small"):
        cli._json(entry, hw.__class__(peak_bf16_flop_per_s=989.5e12))
    assert cli._json({"x": 1.5}) == '{"x": 1.5}'


# ---------------------------------------------------------------- 5. third-party warnings
def test_third_party_warnings_are_silenced_while_a_model_is_read(monkeypatch):
    def noisy(args):
        logging.getLogger("transformers.configuration_utils").warning("bos_token_id must be None or ...")
        logging.getLogger("transformers").error("an error the exception repeats")
        warnings.warn("torch: a future warning", FutureWarning, stacklevel=1)
        raise ValueError("transformers cannot build 'x.json'")

    monkeypatch.setattr(cli, "plan_from_args", noisy)
    before = (logging.root.manager.disable, list(warnings.filters))
    rc, out, err = run(["plan", "--model", "x.json", "--gpus", "1"])
    assert (rc, out) == (2, "")
    one_error(err, "transformers cannot build 'x.json'")
    assert (logging.root.manager.disable, list(warnings.filters)) == before  # restored


@pytest.mark.slow
def test_transformers_logging_never_reaches_stderr(tmp_path):
    """A real meta-device build whose config transformers logs about (a rope type it has no check for, token ids
    outside the vocabulary): stderr is the library's one line."""
    cfg = {**TINY, "model_type": "starcoder2", "vocab_size": 100, "rope_scaling": {"type": "bogus"}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "meshplan", "plan", "--model", str(tmp_path / "c.json"), "--gpus", "1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=_env(),
    )
    assert (out.returncode, out.stdout) == (2, "")
    one_error(out.stderr, "transformers cannot build")
