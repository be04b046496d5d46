"""Units. The library computes in base units (bytes, FLOP, seconds); formatting happens only here.

GB = 10**9 bytes (the lab page's and the GPU vendors' unit); GiB = 2**30 bytes (what PyTorch and
``nvidia-smi`` print). Every display helper says which it uses.

    >>> fmt_gb(444_502_847_232)
    '444.5 GB'
    >>> fmt_gib(2_684_354_560)
    '2.5 GiB'
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Iterable
from typing import Any

GB = 10**9
GiB = 2**30
MB = 10**6
MiB = 2**20
TB = 10**12

HOURS_PER_YEAR = 8766  # 365.25 days x 24 h


def add_up(values: Iterable[Any]) -> Any:
    """The sum of ``values`` added left to right, from the integer 0: ``sum()`` as CPython 3.11 computes it, on every
    CPython. Since 3.12, ``sum()`` of floats compensates its rounding (Neumaier's algorithm, gh-100425), so the same
    terms can differ in the last bit between a reader's Python and another: the planning path adds its floats here,
    and ``meshplan plan --json`` prints the same bytes on 3.11, on 3.14 and in the live planner's Pyodide
    (``tests/test_units.py``). Integers stay integers (exact either way).

        >>> add_up([0.1] * 10), add_up(range(4)), add_up([])
        (0.9999999999999999, 6, 0)
    """
    return _ADD_UP(values)


def _in_order(values: Iterable[Any]) -> Any:
    return functools.reduce(operator.add, values, 0)


# CPython 3.11's sum() already adds in order, and four times faster than reduce (a search adds 300,000 times)
_ADD_UP: Any = sum if sys.version_info < (3, 12) else _in_order


def fmt_gb(n_bytes: float, digits: int = 1) -> str:
    """Bytes as decimal gigabytes (10**9 B) with ``digits`` decimals and thousands separators."""
    return f"{n_bytes / GB:,.{digits}f} GB"


def fmt_gib(n_bytes: float, digits: int = 1) -> str:
    """Bytes as binary gibibytes (2**30 B)."""
    return f"{n_bytes / GiB:,.{digits}f} GiB"


def fmt_mb(n_bytes: float, digits: int = 1) -> str:
    """Bytes as decimal megabytes (10**6 B)."""
    return f"{n_bytes / MB:,.{digits}f} MB"


def fmt_mib(n_bytes: float, digits: int = 1) -> str:
    """Bytes as binary mebibytes (2**20 B)."""
    return f"{n_bytes / MiB:,.{digits}f} MiB"


def fmt_pct(fraction: float, digits: int = 1) -> str:
    """A fraction as a percentage: 0.21875 -> '21.9 %'."""
    return f"{100 * fraction:.{digits}f} %"


def fmt_int(n: int) -> str:
    """An integer with thousands separators: 27781427952 -> '27,781,427,952'."""
    return f"{n:,}"


def fmt_tflops(flop_per_s: float, digits: int = 0) -> str:
    """FLOP/s as TFLOP/s (10**12): 4e14 -> '400 TFLOP/s'."""
    return f"{flop_per_s / 1e12:,.{digits}f} TFLOP/s"
