"""The schedules this package knows and the checks every entry point runs before any work.

``check`` refuses sizes a schedule cannot run, ``check_times`` times that are not finite and
non-negative (or all zero), ``check_total`` times whose sum over the step overflows a float, and
``check_size`` timelines too large to simulate quickly. Each raises ValueError with one message naming the
factor and its value, and none does work proportional to the sizes: ``virtual_stages=10**400`` is
answered at once.

    >>> check("dualpipev", 4, 6)
    Traceback (most recent call last):
    ...
    ValueError: micro_batches=6 is fewer than 2 × pp = 8, which DualPipeV needs (DualPipeV.step asserts ...)
    >>> check_times(1, 2, 0.5)
    (Fraction(1, 1), Fraction(2, 1), Fraction(1, 2))
"""

from __future__ import annotations

import math
import numbers
import sys
from fractions import Fraction

KINDS = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipev")
NAMES = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved": "interleaved 1F1B",
    "zb-h1": "ZB-H1",
    "zb-h2": "ZB-H2",
    "dualpipe": "DualPipe",
    "dualpipev": "DualPipeV",
}
OP_KINDS = ("F", "B", "W", "BW", "F&B")
Time = float | Fraction  # an operation's time in any unit; a Fraction (or an int) stays exact

# The largest p × m × (chunks a micro-batch passes per device) that ``simulate`` accepts: the forward chunk
# computations on the timeline (each comes with one or two backward operations, so 1.4 to 3 times as many
# operations). Measured on the course's 2-core machine, shared (load 3 to 6): at 200,000 every kind takes
# 0.65 s (GPipe, 400,000 operations) to 1.65 s (ZB-H2, 600,000 operations, its order found slot by slot),
# 320,000 to 610,000 operations per second; the time grows linearly with the size.
MAX_FORWARDS = 200_000
MAX_FORWARDS_NOTE = "about 2 s or less"


def count(n: int) -> str:
    """An integer for a message: with thousands separators, or its order of magnitude when huge."""
    if abs(n) < 10**15:
        return f"{n:,}"
    e = math.floor((abs(n).bit_length() - 1) * math.log10(2))  # 10^e <= |n| < 10^(e + 2)
    e += abs(n) >= 10 ** (e + 1)
    return f"{'-' if n < 0 else ''}about 10^{e}"


def _pos_int(name: str, x) -> None:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1:
        shown = count(int(x)) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else repr(x)
        raise ValueError(f"{name}={shown} must be a positive integer")


def path_chunks(kind: str, virtual_stages: int = 1) -> int:
    """Model chunks one micro-batch passes on each device: v for the interleaved schedule, 2 for DualPipeV
    (down through stage i, back up through stage 2p−1−i), else 1. DualPipe's devices also hold two chunks,
    but each micro-batch passes only one of them: half go down, half go up."""
    return virtual_stages if kind == "interleaved" else 2 if kind == "dualpipev" else 1


def check(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> None:
    """Raise ValueError naming the factor when ``kind`` cannot run with these sizes."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} must be one of {', '.join(KINDS)}")
    _pos_int("pp", pp)
    _pos_int("micro_batches", micro_batches)
    _pos_int("virtual_stages", virtual_stages)
    p, m, v = count(pp), count(micro_batches), count(virtual_stages)
    if kind != "interleaved" and virtual_stages != 1:
        extra = " (DualPipeV always holds two chunks per device)" if kind == "dualpipev" else ""
        raise ValueError(f"virtual_stages={v} needs the interleaved schedule, not {kind}{extra}")
    if kind in ("interleaved", "zb-h1", "zb-h2") and micro_batches < pp:
        raise ValueError(f"micro_batches={m} is fewer than pp={p} stages, which {kind} needs")
    if kind == "interleaved" and micro_batches % pp:
        raise ValueError(f"pp={p} does not divide micro_batches={m} (the interleaved schedule needs a multiple)")
    if kind == "dualpipe":
        if pp % 2:
            raise ValueError(f"pp={p} is odd; DualPipe needs an even number of stages")
        if micro_batches % 2:
            raise ValueError(f"micro_batches={m} is odd; DualPipe feeds half from each end")
    if kind in ("dualpipe", "dualpipev") and micro_batches < 2 * pp:
        source = " (DualPipeV.step asserts num_chunks >= num_ranks * 2)" if kind == "dualpipev" else ""
        raise ValueError(f"micro_batches={m} is fewer than 2 × pp = {count(2 * pp)}, which {NAMES[kind]} needs{source}")


def check_size(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> None:
    """Raise ValueError when the timeline would hold more than ``MAX_FORWARDS`` forward chunk
    computations (p × m × ``path_chunks``); ``formula_bubble`` still answers for any size."""
    n = pp * micro_batches * path_chunks(kind, virtual_stages)
    if n > MAX_FORWARDS:
        what = "pp × micro_batches" + (
            " × virtual_stages" if kind == "interleaved" else " × 2 chunks" if kind == "dualpipev" else ""
        )
        raise ValueError(
            f"{what} = {count(n)} is more than the {MAX_FORWARDS:,} forward passes the simulator "
            f"accepts (they take {MAX_FORWARDS_NOTE}); formula_bubble gives the closed form for any size "
            f"(pp={count(pp)}, micro_batches={count(micro_batches)}, "
            f"virtual_stages={count(virtual_stages)})"
        )


def _time(name: str, x) -> Fraction:
    t = None
    if not isinstance(x, bool) and isinstance(x, numbers.Real):
        try:
            t = Fraction(x) if isinstance(x, numbers.Rational) else Fraction(float(x))
        except (ValueError, OverflowError, TypeError):  # nan, inf
            t = None
    if t is None or t < 0:
        shown = count(int(x)) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else repr(x)
        raise ValueError(f"{name}={shown} must be a non-negative finite time")
    return t


def check_times(f: Time = 1, b: Time = 1, w: Time = 1) -> tuple[Fraction, Fraction, Fraction]:
    """The times as exact fractions; ValueError if one is negative, not finite or not a number, or if all
    three are zero (the ideal compute m(f + b + w) would be 0 and every bubble a division by zero)."""
    tf, tb, tw = _time("f", f), _time("b", b), _time("w", w)
    if tf + tb + tw == 0:
        raise ValueError("f + b + w = 0: at least one operation must take time")
    return tf, tb, tw


def _show(x: Fraction) -> str:
    try:
        return f"{float(x):g}"
    except OverflowError:
        return count(int(x))


def check_total(f: Fraction, b: Fraction, w: Fraction, devices: int, micro_batches: int) -> None:
    """ValueError if the step's total compute, devices × m × (f + b + w), passes the largest float: every
    time a simulated timeline reports (makespan, idle, ideal) is at most that."""
    if devices * micro_batches * (f + b + w) > Fraction(sys.float_info.max):
        raise ValueError(
            f"f={_show(f)}, b={_show(b)}, w={_show(w)}: the step's total compute p·m·(f + b + w) "
            f"with pp={count(devices)}, micro_batches={count(micro_batches)} passes the largest "
            f"float ({sys.float_info.max:.3g}); give the times in a larger unit"
        )
