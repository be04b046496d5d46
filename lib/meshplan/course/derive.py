"""Symbolic derivations (sympy) of the course's formulas.

Each function derives an expression from its parts rather than typing the result, so that the book can
show the derivation and the tests can turn the expression into a function (``sympy.lambdify``) and
compare it with the library's numeric code at many points.

    >>> sixteen_psi()
    16*Psi
    >>> zero_ladder()[1]
    4*Psi + 12*Psi/N
"""

from __future__ import annotations

import sympy as sp

from meshplan.parallel.zero import STAGE_SHARDS
from meshplan.spec.accounting import DEFAULT_BPP

Psi, N = sp.symbols("Psi N", positive=True)
p, m, v = sp.symbols("p m v", positive=True)


def bytes_per_param_terms() -> dict[str, sp.Integer]:
    """The named bytes per parameter of mixed-precision Adam (ZeRO §3.1), as sympy integers."""
    return {k: sp.Integer(b) for k, b in DEFAULT_BPP.terms().items()}


def sixteen_psi() -> sp.Expr:
    """Model states of Ψ parameters: (2 + 2 + 4 + 4 + 4)Ψ = 16Ψ."""
    return sp.Add(*(b * Psi for b in bytes_per_param_terms().values()))


def zero_ladder() -> dict[int, sp.Expr]:
    """Model states per GPU for ZeRO stages 0–3 over N ranks: each sharded term is divided by N.

    {0: 16Ψ, 1: 4Ψ + 12Ψ/N, 2: 2Ψ + 14Ψ/N, 3: 16Ψ/N}
    """
    terms = bytes_per_param_terms()
    out = {}
    for stage, shards in STAGE_SHARDS.items():
        kept = sum((b for k, b in terms.items() if k not in shards), sp.Integer(0))
        sharded = sum((b for k, b in terms.items() if k in shards), sp.Integer(0))
        out[stage] = sp.expand(kept * Psi + sharded * Psi / N)
    return out


def ring_steps_all_reduce() -> sp.Expr:
    """Ring all-reduce of a buffer of size 1: N−1 reduce-scatter steps then N−1 all-gather steps, each
    sending one chunk of size 1/N: 2(N−1)/N."""
    k = sp.symbols("k", integer=True, positive=True)
    chunk = 1 / N
    reduce_scatter = sp.summation(chunk, (k, 1, N - 1))
    all_gather = sp.summation(chunk, (k, 1, N - 1))
    return sp.simplify(reduce_scatter + all_gather)


def ring_factor_limit() -> sp.Expr:
    """lim_{N→∞} 2(N−1)/N = 2: a ring all-reduce never costs more than twice the buffer per rank."""
    return sp.limit(ring_steps_all_reduce(), N, sp.oo)


def zero3_volume() -> sp.Expr:
    """ZeRO-3 per-step volume in units of Ψ elements (ZeRO §7.2.2): parameter all-gather in forward,
    again in backward, and the gradient reduce-scatter: 3 × (N−1)/N Ψ → 3Ψ for large N."""
    one = (N - 1) / N * Psi
    return sp.simplify(one + one + one)


def dp_volume() -> sp.Expr:
    """Plain DP: one all-reduce = reduce-scatter + all-gather of Ψ elements: 2(N−1)/N Ψ."""
    return sp.simplify(ring_steps_all_reduce() * Psi)


def zero3_over_dp() -> sp.Expr:
    """ZeRO-3's volume over DP's: 3/2."""
    return sp.simplify(zero3_volume() / dp_volume())


def bubble() -> sp.Expr:
    """GPipe/1F1B bubble over ideal time. Per micro-batch forward + backward takes time T on each stage;
    the last micro-batch enters stage p after (p−1) stage-times and the schedule ends (p−1) stage-times
    after the ideal m·T on each stage: (p−1)T / (mT) = (p−1)/m. Interleaving with v chunks makes each
    stage-time T/v: (p−1)/(m·v)."""
    T = sp.symbols("T", positive=True)
    idle = (p - 1) * T / v
    ideal = m * T
    return sp.simplify(idle / ideal)


def bubble_share() -> sp.Expr:
    """Bubble as a share of total time: idle / (ideal + idle) = (p−1)/(m·v + p − 1)."""
    b = bubble()
    return sp.simplify(b / (1 + b))


def pretty(expr: sp.Expr) -> str:
    """A plain-text rendering with Ψ and no ``*``: ``4*Psi + 12*Psi/N`` → ``4Ψ + 12Ψ/N``."""
    return str(expr).replace("*", "").replace("Psi", "Ψ")


# ---------------------------------------------------------------- chapters 2-4
t = sp.symbols("t", positive=True)
s, b, h = sp.symbols("s b h", positive=True)


def ring_step_table(n: int) -> list[tuple[int, str, sp.Expr, sp.Expr]]:
    """The ring all-reduce of a buffer of size 1 over ``n`` ranks, step by step: (step, phase, chunk each
    rank sends, running total sent per rank). The last total is 2(n−1)/n.

        >>> ring_step_table(4)[-1]
        (6, 'all-gather', 1/4, 3/2)
    """
    chunk = sp.Rational(1, n)
    rows, total = [], sp.Integer(0)
    for k in range(1, 2 * (n - 1) + 1):
        total += chunk
        rows.append((k, "reduce-scatter" if k <= n - 1 else "all-gather", chunk, total))
    return rows


def naive_gather_volume() -> sp.Expr:
    """Gathering to one rank: the other N−1 ranks each send it all Ψ elements: (N−1)Ψ arrive there."""
    return sp.expand((N - 1) * Psi)


def naive_over_ring() -> sp.Expr:
    """What reaches rank 0 in the naive gather over what each rank sends in the ring: N/2."""
    return sp.simplify(naive_gather_volume() / dp_volume())


def zero_stage_volume() -> dict[int, sp.Expr]:
    """Elements each rank sends per step for ZeRO stages 0–3 over N ranks, built from the collectives:
    stage 0 an all-reduce (reduce-scatter + all-gather); stages 1–2 a gradient reduce-scatter and a weight
    all-gather; stage 3 two weight all-gathers (forward, backward) and a gradient reduce-scatter.

        >>> zero_stage_volume()[3]
        3*Psi - 3*Psi/N
    """
    one = (N - 1) / N * Psi  # one reduce-scatter or all-gather of Ψ elements
    parts = {0: [one, one], 1: [one, one], 2: [one, one], 3: [one, one, one]}
    return {stage: sp.expand(sp.Add(*p)) for stage, p in parts.items()}


def sp_equals_all_reduce() -> sp.Expr:
    """Sequence parallel: all-gather + reduce-scatter − all-reduce over t ranks = 0 (per element)."""
    return sp.simplify((t - 1) / t + (t - 1) / t - 2 * (t - 1) / t)


def tp_layer_volume() -> sp.Expr:
    """Elements one rank sends per layer per micro-batch under TP: 4 all-reduces of s·b·h, each 2(t−1)/t:
    8sbh(t−1)/t (Narayanan et al. 2021 §3.2)."""
    return sp.factor(4 * 2 * (t - 1) / t * s * b * h)
