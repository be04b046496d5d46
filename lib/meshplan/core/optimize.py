"""One-dimensional minimisation for the library's fits (the FP8 efficiency, ``meshplan calibrate``'s constants).

>>> round(golden_section(lambda x: (x - 0.3) ** 2, 0.0, 1.0), 6)
0.3
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["golden_section"]


def golden_section(f: Callable[[float], float], lo: float, hi: float, steps: int = 40) -> float:
    """The x in [lo, hi] minimising a unimodal ``f``, by golden-section search: each step keeps 0.618 of the
    bracket, so 40 steps narrow a bracket of width 1 below 1e-8. Returns the final bracket's midpoint."""
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(steps):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
    return (lo + hi) / 2
