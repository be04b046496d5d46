"""The sympy derivations in ``meshplan.course.derive`` equal the library's numeric functions.

Each expression is lambdified (pure-Python ``math`` backend) and compared with the numeric code at many
points with ``math.isclose(rel_tol=1e-12)``. Units: derive counts **elements** (Ψ parameters); the numeric
DP/ZeRO functions return **bytes** of bf16 gradients, 2 B per element, hence the factor 2.
"""

from __future__ import annotations

import math

import pytest

sp = pytest.importorskip("sympy")

from meshplan.core import collectives  # noqa: E402
from meshplan.course import derive  # noqa: E402
from meshplan.parallel import dp, pp, zero  # noqa: E402

PSIS = [1.0, 3_688_704.0, 7.5e9, 27_781_427_952.0, 671_026_419_200.0, 1.3e13]
NS = list(range(1, 129))
PS = list(range(1, 17))
MS = list(range(1, 65))
VS = [1, 2, 3, 4]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) if b != 0 else a == 0


def lam(args, expr):
    return sp.lambdify(args, expr, modules="math")


# ---------------------------------------------------------------- the expressions themselves
def test_expressions_are_the_documented_formulas():
    Psi, N, p, m, v = derive.Psi, derive.N, derive.p, derive.m, derive.v
    assert derive.sixteen_psi() == 16 * Psi
    ladder = derive.zero_ladder()
    assert sorted(ladder) == [0, 1, 2, 3]
    expected = {0: 16 * Psi, 1: 4 * Psi + 12 * Psi / N, 2: 2 * Psi + 14 * Psi / N, 3: 16 * Psi / N}
    for stage, e in expected.items():
        assert sp.simplify(ladder[stage] - e) == 0, stage
    assert sp.simplify(derive.ring_steps_all_reduce() - 2 * (N - 1) / N) == 0
    assert derive.ring_factor_limit() == 2
    assert sp.simplify(derive.zero3_volume() - 3 * (N - 1) / N * Psi) == 0
    assert sp.simplify(derive.dp_volume() - 2 * (N - 1) / N * Psi) == 0
    assert derive.zero3_over_dp() == sp.Rational(3, 2)
    assert sp.simplify(derive.bubble() - (p - 1) / (m * v)) == 0
    assert sp.simplify(derive.bubble_share() - (p - 1) / (m * v + p - 1)) == 0
    assert {k: int(b) for k, b in derive.bytes_per_param_terms().items()} == zero.DEFAULT_BPP.terms()


# ---------------------------------------------------------------- numeric agreement
def test_sixteen_psi_matches_model_states_stage_0():
    f = lam([derive.Psi], derive.sixteen_psi())
    for psi in PSIS:
        assert close(f(psi), zero.model_states_bytes(psi)), psi
        assert close(f(psi), zero.model_states_bytes(psi, 0, 8)), psi


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_ladder_matches_model_states(stage):
    f = lam([derive.Psi, derive.N], derive.zero_ladder()[stage])
    checked = 0
    for psi in PSIS:
        for n in NS:
            assert close(f(psi, n), zero.model_states_bytes(psi, stage, n)), (stage, psi, n)
            checked += 1
    assert checked == len(PSIS) * 128


def test_ring_factor_matches():
    f = lam([derive.N], derive.ring_steps_all_reduce())
    for n in NS:
        assert close(f(n), collectives.ring_factor(n)), n
        assert close(f(n) * 1e9, collectives.ring_all_reduce_bytes(n, 1e9)), n
    assert collectives.ring_factor(1) == 0
    assert f(10**9) < 2 == derive.ring_factor_limit()


def test_dp_volume_matches_dp_bytes_in_bytes():
    """derive.dp_volume is in elements; dp.dp_bytes_per_step sends bf16 bytes: 2 B per element."""
    f = lam([derive.Psi, derive.N], derive.dp_volume())
    for psi in PSIS:
        for n in NS:
            elements = f(psi, n)
            for stage in (0, 1, 2):
                assert close(2 * elements, dp.dp_bytes_per_step(psi, n, stage)), (psi, n, stage)
                assert close(2 * elements, zero.zero_sync_bytes(n, 2 * psi, stage)), (psi, n, stage)


def test_zero3_volume_matches_zero_sync_bytes():
    f = lam([derive.Psi, derive.N], derive.zero3_volume())
    for psi in PSIS:
        for n in NS:
            elements = f(psi, n)
            assert close(2 * elements, zero.zero_sync_bytes(n, 2 * psi, 3)), (psi, n)
            assert close(2 * elements, dp.dp_bytes_per_step(psi, n, 3)), (psi, n)


def test_zero3_over_dp_ratio():
    ratio = float(derive.zero3_over_dp())
    assert ratio == 1.5
    for psi in PSIS:
        for n in NS[1:]:  # n = 1 sends nothing
            assert close(dp.dp_bytes_per_step(psi, n, 3) / dp.dp_bytes_per_step(psi, n, 0), ratio), (psi, n)


def test_bubble_matches():
    f = lam([derive.p, derive.m, derive.v], derive.bubble())
    g = lam([derive.p, derive.m, derive.v], derive.bubble_share())
    count = 0
    for p_ in PS:
        for m_ in MS:
            for v_ in VS:
                assert close(f(p_, m_, v_), pp.bubble_fraction(p_, m_, v_)), (p_, m_, v_)
                assert close(g(p_, m_, v_), pp.bubble_share_of_time(p_, m_, v_)), (p_, m_, v_)
                count += 1
    assert count == 16 * 64 * 4
    # default v = 1
    assert close(f(8, 32, 1), pp.bubble_fraction(8, 32)) and pp.bubble_fraction(8, 32) == 0.21875


def test_pretty():
    ladder = derive.zero_ladder()
    assert derive.pretty(derive.sixteen_psi()) == "16Ψ"
    assert derive.pretty(ladder[1]) == "4Ψ + 12Ψ/N"
    assert derive.pretty(ladder[2]) == "2Ψ + 14Ψ/N"
    assert derive.pretty(ladder[3]) == "16Ψ/N"
