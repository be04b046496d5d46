"""The machine: GPU memory, link bandwidths and effective compute, read from ``data/hardware.json``.

Each value in the file carries its source. Units: bytes, bytes per second, FLOP per second.

    >>> hw = load_hardware()
    >>> hw.nvlink_bytes_per_s / hw.infiniband_bytes_per_s
    3.2
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .resources import DATA_DIR


@dataclass(frozen=True)
class Hardware:
    """GPU memory (B), GPUs per node, NVLink and InfiniBand bandwidth per GPU (B/s), effective FLOP/s."""

    gpu_memory_bytes: float = 80e9
    gpus_per_node: int = 8
    nvlink_bytes_per_s: float = 160e9
    infiniband_bytes_per_s: float = 50e9
    effective_flop_per_s: float = 400e12
    sources: tuple[tuple[str, str], ...] = ()


@lru_cache(maxsize=None)
def load_hardware(path: str | None = None) -> Hardware:
    """Read ``data/hardware.json`` (or ``path``); every field is ``{"value": ..., "source": ...}``."""
    p = Path(path) if path else DATA_DIR / "hardware.json"
    try:
        raw = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read hardware file {str(p)!r}: {exc}") from None
    keys = ("gpu_memory_bytes", "gpus_per_node", "nvlink_bytes_per_s", "infiniband_bytes_per_s",
            "effective_flop_per_s")
    try:
        values = {k: raw[k]["value"] for k in keys}
        sources = tuple((k, raw[k]["source"]) for k in keys)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed hardware file {str(p)!r}: missing {exc}") from None
    return Hardware(**values, sources=sources)
