"""Published figures the course quotes, each with its source, read from ``data/published.json``.

    >>> round(gpu_years(value("deepseek_v3_pretraining_gpu_hours")))
    304
"""

from __future__ import annotations

import json
from functools import lru_cache

from .resources import DATA_DIR
from .units import HOURS_PER_YEAR


@lru_cache(maxsize=None)
def _table() -> dict:
    return json.loads((DATA_DIR / "published.json").read_text())


def value(key: str):
    """The published value for ``key`` (ValueError for an unknown key)."""
    try:
        return _table()[key]["value"]
    except KeyError:
        raise ValueError(f"unknown published figure {key!r}; known: {', '.join(sorted(_table()))}") from None


def source(key: str) -> str:
    """Where the figure comes from."""
    value(key)
    return _table()[key]["source"]


def gpu_years(gpu_hours: float) -> float:
    """GPU-hours as years on one GPU (8,766 h per year)."""
    return gpu_hours / HOURS_PER_YEAR


def tokens_per_step(seq: int, batch_per_dp: int, dp: int) -> int:
    """Tokens per optimizer step: sequence length × sequences per DP rank × DP ranks.

        >>> tokens_per_step(131072, 16, 8)
        16777216
    """
    return seq * batch_per_dp * dp
