"""``python -m meshplan validate [--quick] [--json] [--output FILE]``: run the checks, print the table.

``validate(quick, output)`` is the library function: it checks the output path (a regular file or nothing: see
``check_output``) and that torch and transformers are installed before any run, then returns the rows and the
results document (and writes it when asked). The command is argparse wiring around it. Exit code 1 if an exact
row differs; 2 for bad input (the CLI's convention); torch is imported only when the command runs, so
``python -m meshplan plan`` never loads it.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from meshplan.realrun import checks
from meshplan.realrun.activations import QUICK_FAMILIES, TINY_CONFIGS, activation_rows
from meshplan.realrun.rows import Row, results_document


@dataclass(frozen=True)
class RunSet:
    """Which runs ``run_checks`` makes."""

    dp: tuple[int, ...]  # ranks for DDP, FSDP2 and ZeRO-1
    tp: tuple[int, ...]  # TP sizes
    pp: tuple[tuple[str, int, int], ...]  # real pipeline runs: (torch schedule, v, p)
    pp_m: int  # micro-batches of the real pipeline runs
    replay: tuple[tuple[int, int], ...]  # (p, m) of the pipeline_order replays
    wire: tuple[int, ...]  # ranks for gloo's wire bytes
    accum_n: tuple[int, ...]  # ranks for FSDP2 with gradient accumulation
    accum_m: tuple[int, ...]  # its micro-batches per step
    activations: tuple[str, ...]  # families whose activation ledger is measured (``activations.TINY_CONFIGS``)


QUICK = RunSet(
    dp=(2, 4),
    tp=(2,),
    pp=(("GPipe", 1, 2), ("ZBVZeroBubble", 2, 2)),
    pp_m=4,
    replay=((2, 8), (4, 8)),
    wire=(2,),
    accum_n=(2,),
    accum_m=(2,),
    activations=QUICK_FAMILIES,
)
FULL = RunSet(
    dp=(2, 4, 8),
    tp=(2, 4),
    pp=(("GPipe", 1, 2), ("GPipe", 1, 4), ("1F1B", 1, 4), ("Interleaved1F1B", 2, 2), ("ZBVZeroBubble", 2, 2)),
    pp_m=4,
    replay=((2, 8), (4, 8), (8, 16)),
    wire=(2, 4, 8),
    accum_n=(2, 4),
    accum_m=(1, 2, 4),
    activations=tuple(TINY_CONFIGS),
)


def run_checks(quick: bool = True) -> list[Row]:
    """Every row of the chosen set, in a stable order (see ``QUICK`` and ``FULL``)."""

    cfg = QUICK if quick else FULL
    rows: list[Row] = []
    for n in cfg.dp:
        rows += checks.ddp_rows(n)
    for n in cfg.dp:
        rows += checks.fsdp_rows(n)
    for n in cfg.accum_n:
        rows += checks.fsdp_accum_rows(n, cfg.accum_m)
    for n in cfg.dp:
        rows += checks.zero1_rows(n)
    for t in cfg.tp:
        rows += checks.tp_rows(t)
    rows += checks.pp_rows(list(cfg.pp), cfg.pp_m, list(cfg.replay))
    for n in cfg.wire:
        rows += checks.wire_rows(n)
    # last: the activation rows import transformers, and no rank is forked after them
    rows += activation_rows(cfg.activations)
    return rows


_NOT_REGULAR = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _existing(path: Path, output: Path | str) -> os.stat_result | None:
    """``path``'s own status (a link's, not its target's), None if nothing is there; ValueError naming what is
    there if it is not a regular file (see ``check_output``)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ValueError(f"--output {output}: cannot be examined ({exc.strerror or exc})") from None
    if stat.S_ISREG(st.st_mode):
        return st
    what = next((name for test, name in _NOT_REGULAR if test(st.st_mode)), "not a regular file")
    if what == "a directory":
        raise ValueError(f"--output {output}: is a directory; give a file name")
    raise ValueError(
        f"--output {output}: is {what}, not a regular file (the results are renamed into place, which would "
        "replace it); give the path of a regular file"
    )


def check_output(output: Path | str) -> Path:
    """The output path, or ValueError if the results could not be written there: a missing or non-directory
    parent, no permission to write, or an existing path that is not a regular file. Checked before any run (the
    runs take minutes), and again just before the write.

    The document is written to a temporary file in the same folder, then renamed over the path (a reader never sees
    half a file). A rename replaces what it lands on instead of writing into it, so only a regular file (or nothing)
    is accepted there: a directory, a symbolic link (even to a regular file: the link would be replaced, not its
    target written), a device (``/dev/null``, ``/dev/full``), a FIFO or a socket is refused by name."""
    if str(output).endswith(("/", os.sep)) and str(output).strip("/" + os.sep):
        raise ValueError(f"--output {output}: names a directory (the trailing /); give a file name")
    path = Path(output)
    parent = path.parent if str(path.parent) else Path(".")
    _existing(path, output)
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ValueError(f"--output {output}: the directory {parent} {what}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--output {output}: no permission to write there")
    return path


def _write(path: Path, doc: dict) -> None:
    """Write atomically (a temporary file in the same directory, then a rename over ``path``, which must still be a
    regular file or absent: ``check_output``); ValueError on failure, or for a non-finite number (not JSON)."""
    try:
        text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:
        raise ValueError(f"--output {path}: the results hold a non-finite number, which JSON cannot hold") from None
    existing = _existing(path, path)  # the runs took minutes: look again
    umask = os.umask(0)
    os.umask(umask)
    mode = existing.st_mode & 0o777 if existing is not None else 0o666 & ~umask
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, mode)  # mkstemp makes 0600; keep the file's usual mode
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        raise ValueError(f"--output {path}: cannot write: {exc.strerror or exc}") from None


def validate(quick: bool = True, output: Path | str | None = None) -> tuple[list[Row], dict]:
    """Run the checks (``run_checks``) and return ``(rows, results document)``; with ``output``, also write
    the document there. ValueError before any run if torch or transformers is missing or ``output`` cannot be
    written."""
    import importlib.util

    path = check_output(output) if output is not None else None
    for name, pin in (("torch", "torch==2.13.0; a CPU build is enough"), ("transformers", "transformers==5.23.0")):
        if importlib.util.find_spec(name) is None:
            raise ValueError(
                f"validate needs {name}: install the pinned version, the one data/realrun_results.json was recorded "
                f"with (pip install {pin})"
            )
    import torch

    rows = run_checks(quick=quick)
    import transformers  # the activation rows have imported it

    doc = results_document(rows, quick, torch.__version__, transformers.__version__)
    if path is not None:
        _write(path, doc)
    return rows, doc
