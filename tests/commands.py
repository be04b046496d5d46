"""Run the ``meshplan`` command line in tests: in this process (``meshplan.cli.main``, milliseconds) or as real
``python -m meshplan`` processes (start-up and imports: a quarter of a second of CPU each, and the CLI tests make
dozens of calls).

The CLI modules run their cases in process; ``test_cli.test_real_processes_print_what_the_tests_read`` runs a
sample of every command as real processes, all at once, and checks that each prints, to the byte, what the same
argv prints in process, so the entry point (``meshplan/__main__.py``, exit codes, the two streams) stays covered.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from meshplan import cli

REPO = Path(__file__).resolve().parents[1]


class Output(NamedTuple):
    """What one run of the command line returned and printed (the fields of ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def run(argv: Sequence[str]) -> Output:
    """``meshplan ARGV`` in this process: its exit code and what it printed on stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(list(argv))
        except SystemExit as exc:  # argparse's --help; never for bad input
            rc = int(exc.code or 0)
    return Output(rc, out.getvalue(), err.getvalue())


def run_processes(argvs: Mapping[str, Sequence[str]], cwd: Path = REPO, timeout_s: float = 60) -> dict[str, Output]:
    """``python -m meshplan ARGV`` for every argv at once, as real processes in ``cwd``: name -> Output."""
    env = dict(os.environ)  # the repository's library first, installed or not
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "lib"), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "meshplan", *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        for name, argv in argvs.items()
    }
    results = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout_s)
        results[name] = Output(proc.returncode, stdout, stderr)
    return results
