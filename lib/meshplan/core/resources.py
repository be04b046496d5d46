"""Where the library's data files live: inside the package, ``meshplan/data/`` (the repository's root ``data/``
is a link to it), read through ``importlib.resources`` so that an installed package finds them too.

    >>> sorted(p.name for p in data_path("models").iterdir())[:2]
    ['deepseek-v3.json', 'llama-3.1-405b.json']
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

DATA_DIR = Path(str(files("meshplan").joinpath("data")))


def data_path(*parts: str) -> Path:
    """The path of a file or folder under the package's ``data/``."""
    return DATA_DIR.joinpath(*parts)


def read_json(*parts: str) -> Any:
    """Parse a JSON file under the package's ``data/`` (ValueError naming the file if it cannot be read)."""
    path = data_path(*parts)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read data file {str(path)!r}: {exc}") from None
