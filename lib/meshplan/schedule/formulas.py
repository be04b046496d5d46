"""The published bubbles in closed form, to compare with the simulation; they answer for any size.

Each is the idle time of the busiest device over the ideal compute m(f + b + w), with f, b, w the times of
one micro-batch through one stage (1/p of the layers) and 1F1B's full backward b + w:

* GPipe, 1F1B: (p−1)/m (Narayanan et al. 2021 §2.2.1); interleaved: (p−1)/(m·v) (§2.2.2): ``pp.bubble_fraction``.
* ZB-H1: (p−1)(f + b − w) / (m(f + b + w)); ZB-H2: (p−1)(f + b − 2w) / (m(f + b + w)) (Qi et al. 2024,
  Table 2; ZB-H2's assumes m ≥ 2p − 1).
* DualPipe: (PP/2 − 1)(F&B + B − 3W) (DeepSeek-V3 report, Table 2) with PP = p, B the full backward b + w and
  F&B read as f + b + w: (p/2 − 1)(f + 2b − w). The simulated order idles exactly that when f = b, and a
  different amount otherwise (the report does not state the times its closed form assumes).
* DualPipeV: the same expression with PP = 2p stages of half the size (deepseek-ai/DualPipe README at
  commit 3da1bbea53606543d7f5f232338fc58096db30e3: "based on the same number of PP stages"), so
  F, B, W are f/2, (b + w)/2, w/2: (p − 1)(f + 2b − w)/2.

Where a closed form would go negative (W longer than the rest), it is 0: idle time cannot be negative.

``README_TABLE`` is the comparison table of the DualPipe repository (the DeepSeek-V3 report's Table 2 plus a
DualPipeV row), as printed, with its source ``README_SOURCE``.

    >>> formula_bubble("interleaved", 8, 32, 4)
    0.0546875
    >>> from meshplan.schedule import simulate
    >>> formula_bubble("dualpipev", 4, 8) == simulate("dualpipev", 4, 8).bubble
    True
    >>> formula_bubble("1f1b", 10**400, 10**401)
    0.1
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from meshplan.parallel.pp import bubble_fraction
from meshplan.schedule.inputs import Time, check, check_times, count

README_SOURCE = (
    "deepseek-ai/DualPipe README.md#L24-L36 at commit 3da1bbea53606543d7f5f232338fc58096db30e3, 'Pipeline Bubbles "
    "and Memory Usage Comparison (based on the same number of PP stages)': PP is the number of pipeline stages "
    "(even); F a forward chunk, B a full backward chunk, W a backward-for-weights chunk, F&B two mutually "
    "overlapped chunks"
)
# As printed (ASCII for the symbols): schedule → bubble, parameters per device, activations per device, devices.
# The first three rows are the DeepSeek-V3 report's Table 2 (published.json, deepseek_v3_dualpipe_table2).
README_TABLE: dict[str, dict[str, str]] = {
    "1F1B": {"bubble": "(PP-1)(F+B)", "parameters": "1x", "activations": "PP", "devices": "PP"},
    "ZB1P": {"bubble": "(PP-1)(F+B-2W)", "parameters": "1x", "activations": "PP", "devices": "PP"},
    "DualPipe": {"bubble": "(PP/2-1)(F&B+B-3W)", "parameters": "2x", "activations": "PP+1", "devices": "PP"},
    "DualPipeV": {"bubble": "(PP/2-1)(F&B+B-3W)", "parameters": "2x", "activations": "PP+1", "devices": "PP/2"},
}


def _float(x: Fraction, what: str) -> float:
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"the bubble {what} = {count(int(x))} is too large for a float") from None


def dualpipe_idle(pp: int, f: Any, b: Any, w: Any) -> Any:
    """DualPipe's idle time on its busiest device, (PP/2 − 1)(F&B + B − 3W) (DeepSeek-V3 report, Table 2), with
    F&B = f + b + w, B = b + w and W = w, 0 where it would go negative; exact for ints and Fractions, and the one
    expression ``formula_bubble`` and the step-time model (``steptime.model``) both use.

        >>> dualpipe_idle(8, 1, 1, 1), dualpipe_idle(8, 2.0, 1.5, 1.5)
        (6.0, 10.5)
    """
    return max(0 * f, (pp - 2) * ((f + b + w) + (b + w) - 3 * w) / 2)


def formula_bubble(
    kind: str, pp: int, micro_batches: int, virtual_stages: int = 1, f: Time = 1, b: Time = 1, w: Time = 1
) -> float:
    """The published bubble over the ideal compute m(f + b + w) (see the module docstring for each).

    ValueError, naming the factor, for sizes the schedule cannot run and for times that are negative, not
    finite or all zero (the ideal compute would be 0); no bound on the sizes.
    """
    check(kind, pp, micro_batches, virtual_stages)
    tf, tb, tw = check_times(f, b, w)
    p, m, v = pp, micro_batches, virtual_stages
    ideal = m * (tf + tb + tw)
    if kind in ("gpipe", "1f1b", "interleaved"):
        v = v if kind == "interleaved" else 1
        try:
            return bubble_fraction(p, m, v)  # Python's int ÷ int is correctly rounded, at any size
        except OverflowError:
            raise ValueError(
                f"the bubble {'(p−1)/m' if v == 1 else '(p−1)/(m·v)'} = {count((p - 1) // (m * v))} is too large "
                "for a float"
            ) from None
    if kind == "zb-h2" and m < 2 * p - 1:
        raise ValueError(
            f"micro_batches={count(m)} is fewer than 2 × pp − 1 = {count(2 * p - 1)}, which ZB-H2's formula assumes"
        )
    idle = {
        "zb-h1": (p - 1) * (tf + tb - tw),
        "zb-h2": (p - 1) * (tf + tb - 2 * tw),
        "dualpipe": dualpipe_idle(p, tf, tb, tw),
        "dualpipev": (p - 1) * ((tf + tb + tw) + (tb + tw) - 3 * tw) / 2,
    }[kind]
    return _float(max(Fraction(0), idle) / ideal, "idle/ideal")
