"""Writing an output file the command line was asked for (``validate --output``, ``calibrate --output``): checked
before the work that fills it, then written atomically, never through a link or onto a device.

The messages name the option, ``--output``, as the command line takes it.

    >>> try:
    ...     check_output("/dev/null")
    ... except ValueError as exc:
    ...     print(str(exc)[:52])
    --output /dev/null: is a character device, not a reg
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

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


def write_json(path: Path, doc: dict) -> None:
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


__all__ = ["check_output", "write_json"]
