"""The pipeline-schedule simulator: measured bubbles against the published formulas, peak activations,
dependencies on the timeline, bad input, and the ``schedule`` command line."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import pairwise

import pytest
from commands import run

from meshplan import schedule as S
from meshplan.parallel import activations, pp

PS = (2, 3, 4, 6, 8)
MS = (8, 12, 16, 24, 32)


def _cases(kinds, ps=PS, ms=MS):
    return [(k, p, m) for k in kinds for p in ps for m in ms if m >= p]


@pytest.mark.parametrize("kind, p, m", _cases(("gpipe", "1f1b")))
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m(kind, p, m):
    t = S.simulate(kind, p, m)
    assert t.bubble == (p - 1) / m == pp.bubble_fraction(p, m)
    assert t.sync_bubble == t.bubble
    assert t.bubble_share == pytest.approx(pp.bubble_share_of_time(p, m), abs=1e-15)
    assert t.makespan == (m + p - 1) * 3


@pytest.mark.parametrize(
    "p, m, v", [(p, m, v) for p in (2, 4, 8) for m in (8, 16, 32) for v in (2, 3, 4) if m % p == 0]
)
def test_interleaved_bubble_is_divided_by_v(p, m, v):
    t = S.simulate("interleaved", p, m, v)
    assert t.bubble == (p - 1) / (m * v) == pp.bubble_fraction(p, m, v)
    assert t.sync_bubble == t.bubble
    # memory: Korthikanti 2022's p(1 + (p-1)/(p v)) stages on the first device once the warm-up,
    # 2(p-1) + (v-1)p forwards, does not already run every micro-batch; else all m
    if m * v > 2 * (p - 1) + (v - 1) * p:
        assert t.peak_stages[0] == activations.pipeline_inflight_layers(p, p, m, v)
    else:
        assert t.peak_stages[0] == m


@pytest.mark.parametrize("times", [(1, 1, 1), (1, 2, 1), (2, 3, 1), (1, 1, 0.5)])
@pytest.mark.parametrize("kind, p, m", _cases(("zb-h1",), ps=(2, 4, 6, 8), ms=(8, 16, 32)))
def test_zb_h1_matches_table_2(kind, p, m, times):
    f, b, w = times
    t = S.simulate(kind, p, m, f=f, b=b, w=w)
    assert t.bubble == float(Fraction(p - 1) * Fraction(f + b - w) / (m * Fraction(f + b + w)))
    assert t.peak_activations == (p,) * p  # as 1F1B's first stage


@pytest.mark.parametrize("p, m", [(p, m) for p in PS for m in MS if m >= p])
def test_zb_h1_bubble_is_a_third_of_1f1b(p, m):
    assert S.simulate("zb-h1", p, m).bubble * 3 == S.simulate("1f1b", p, m).bubble


@pytest.mark.parametrize("p, m", [(p, m) for p in PS for m in MS if m >= 2 * p - 1])
def test_zb_h2_zero_bubble_with_2p_minus_1_in_flight(p, m):
    t = S.simulate("zb-h2", p, m)
    assert t.bubble == 0.0 and max(t.idle) == 0.0
    assert t.peak_activations == (2 * p - 1,) * p
    # the zero needs steps back to back: with an optimizer step that waits for everyone, the skew shows
    assert t.sync_bubble == (p - 1) / (3 * m)


@pytest.mark.parametrize("times", [(1, 1, 1), (2, 2, 1), (1, 1, 0.5), (3, 3, 2)])
@pytest.mark.parametrize("p, m", [(p, m) for p in (2, 4, 6, 8) for m in (16, 24, 32) if m >= 2 * p])
def test_dualpipe_matches_deepseek_table_2(p, m, times):
    f, b, w = times
    t = S.simulate("dualpipe", p, m, f=f, b=b, w=w)
    fb, B, W = f + b + w, b + w, w  # F&B read as F + B; Table 2's B is the full backward
    expected = (Fraction(p, 2) - 1) * Fraction(fb + B - 3 * W) / (m * Fraction(f + b + w))
    assert t.bubble == float(expected)
    assert t.bubble == S.formula_bubble("dualpipe", p, m, f=f, b=b, w=w)
    assert t.peak_activations == (p + 1,) * p  # PP + 1
    assert t.chunks_per_device == 2  # 2x parameters
    one_f_one_b = S.simulate("1f1b", p, m, f=f, b=b, w=w)
    assert t.bubble < one_f_one_b.bubble


@pytest.mark.parametrize("times", [(1, 2, 1), (3, 4, 2), (2, 1, 1), (1, 3, 0.5)])
def test_dualpipe_with_unequal_forward_and_backward(times):
    # the simulated order idles Table 2's closed form when f = b; with f != b it idles a different amount
    # (the docstring says so), and still less than 1F1B
    f, b, w = times
    for p, m in ((4, 8), (8, 16), (6, 24)):
        t = S.simulate("dualpipe", p, m, f=f, b=b, w=w)
        assert t.bubble != S.formula_bubble("dualpipe", p, m, f=f, b=b, w=w)
        assert t.bubble < S.simulate("1f1b", p, m, f=f, b=b, w=w).bubble
        assert t.peak_activations == (p + 1,) * p


# ---------------------------------------------------------------------------------------------- DualPipeV
# deepseek-ai/DualPipe README (commit 3da1bbea53606543d7f5f232338fc58096db30e3), "based on the same number of PP
# stages": DualPipeV's bubble (PP/2 − 1)(F&B + B − 3W), parameters per device 2×, activations per device PP + 1,
# on PP/2 devices. Here p devices hold PP = 2p stages, each 1/(2p) of the model: F, B, W = f/2, (b + w)/2, w/2.


@pytest.mark.parametrize("times", [(1, 1, 1), (2, 2, 1), (1, 1, 0.5), (3, 3, 2), (1, 1, 0)])
@pytest.mark.parametrize(
    "p, m", [(p, m) for p in (1, 2, 3, 4, 5, 8) for m in (2 * p, 2 * p + 1, 3 * p, 24) if m >= 2 * p]
)
def test_dualpipev_matches_the_readme_table(p, m, times):
    f, b, w = times
    t = S.simulate("dualpipev", p, m, f=f, b=b, w=w)
    PP = 2 * p
    F, B, W = Fraction(f) / 2, Fraction(b + w) / 2, Fraction(w) / 2
    FB = F + B  # the overlapped pair computes both
    idle = (Fraction(PP, 2) - 1) * (FB + B - 3 * W)
    assert t.bubble == float(idle / (m * Fraction(f + b + w))) == S.formula_bubble("dualpipev", p, m, f=f, b=b, w=w)
    assert max(t.idle) == float(idle)
    assert t.peak_activations == (PP + 1,) * p  # "Activation Per Device: PP + 1" (chunks)
    assert t.peak_stages == (p + 0.5,) * p  # in stages of 1/p: half a stage more than 1F1B
    assert (t.model_stages, t.chunks_per_device, t.parameter_copies) == (PP, 2, 1)


def test_dualpipev_known_values():
    t = S.simulate("dualpipev", 4, 10)
    assert (t.bubble, t.sync_bubble, t.makespan, t.idle) == (0.1, 0.1, 33.0, (3.0, 2.5, 2.0, 1.5))
    # device 3 (the turn of the V) runs the repository's steps: 0 × F0, then 4 × (F0, F1), no step 3,
    # then step 4 starts with the un-overlapped F0, B1 on the last rank
    ops = S.orders("dualpipev", 4, 10)
    assert [(o.kind, o.micro_batch, o.chunk) for o in ops[3][:10]] == [
        ("F", 0, 0),
        ("F", 0, 1),
        ("F", 1, 0),
        ("F", 1, 1),
        ("F", 2, 0),
        ("F", 2, 1),
        ("F", 3, 0),
        ("F", 3, 1),
        ("F", 4, 0),
        ("BW", 0, 1),
    ]
    # device 0 first runs (p − 1) × 2 = 6 forwards of chunk 0
    assert [o.kind + str(o.chunk) for o in ops[0][:8]] == ["F0"] * 7 + ["F1"]
    for d, dev in enumerate(ops):  # each device: m forwards and backwards per chunk
        for c in (0, 1):
            fwd = [o.micro_batch for o in dev if o.kind in ("F", "F&B") and o.chunk == c]
            bwd = [o.micro_batch for o in dev if o.kind in ("B", "BW") and o.chunk == c] + [
                o.bw_micro_batch for o in dev if o.kind == "F&B" and o.bw_chunk == c and o.bw_micro_batch is not None
            ]
            assert sorted(fwd) == sorted(bwd) == list(range(10)), (d, c)


@pytest.mark.parametrize("times", [(1, 2, 1), (3, 4, 2), (2, 1, 1), (1, 3, 0.5)])
def test_dualpipev_with_unequal_forward_and_backward(times):
    # like DualPipe, the order idles the README's closed form only when f = b (the README does not state the
    # times it assumes); it still idles less than 1F1B on the same devices
    f, b, w = times
    for p, m in ((4, 8), (8, 16), (6, 24), (3, 7)):
        t = S.simulate("dualpipev", p, m, f=f, b=b, w=w)
        assert t.bubble != S.formula_bubble("dualpipev", p, m, f=f, b=b, w=w)
        assert t.bubble < S.simulate("1f1b", p, m, f=f, b=b, w=w).bubble
        assert t.peak_activations == (2 * p + 1,) * p


def test_dualpipev_against_dualpipe_and_zb_h1_on_the_same_devices():
    # f = b = w: DualPipeV idles p − 1 units (a third of 1F1B's 3(p − 1), as ZB-H1) with one copy of the
    # parameters; DualPipe idles p − 2 with two copies
    for p, m in ((4, 8), (8, 16), (16, 32)):
        v, d, z, one = (S.simulate(k, p, m) for k in ("dualpipev", "dualpipe", "zb-h1", "1f1b"))
        assert (max(v.idle), max(d.idle), max(z.idle), max(one.idle)) == (p - 1, p - 2, p - 1, 3 * (p - 1))
        assert (v.parameter_copies, d.parameter_copies) == (1, 2)


def test_1f1b_holds_p_micro_batches_gpipe_holds_m():
    for p, m in ((4, 8), (8, 32), (6, 24)):
        assert S.simulate("1f1b", p, m).peak_activations[0] == p
        assert S.simulate("1f1b", p, m).peak_activations == tuple(range(p, 0, -1))
        assert S.simulate("gpipe", p, m).peak_activations == (m,) * p


def test_lab_numbers_p8_m32_and_interleaved():
    t = S.simulate("1f1b", 8, 32)
    assert f"{100 * t.bubble:.1f}" == "21.9" and f"{100 * t.bubble_share:.1f}" == "17.9"
    assert f"{100 * S.simulate('interleaved', 8, 32, 4).bubble:.1f}" == "5.5"
    assert f"{100 * S.simulate('1f1b', 4, 8).bubble:.1f}" == "37.5"


def _path_position(kind, p, stage, chunk):
    """Where (device, chunk) sits on a micro-batch's path, written out here independently of the library."""
    if kind == "interleaved":
        return chunk * p + stage
    if chunk == 0:
        return stage
    return p - 1 - stage if kind == "dualpipe" else 2 * p - 1 - stage


def _runs(kind, p, m, v):
    try:
        S.check(kind, p, m, v)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "kind, p, m",
    [
        (k, p, m)
        for k in S.KINDS
        for p, m in ((4, 8), (3, 9), (2, 5), (3, 6))
        if _runs(k, p, m, 2 if k == "interleaved" else 1)
    ],
)
def test_timeline_respects_dependencies_and_devices(kind, p, m):
    v = 2 if kind == "interleaved" else 1
    t = S.simulate(kind, p, m, v, f=1, b=2, w=1)
    n_pos = {"interleaved": p * v, "dualpipev": 2 * p}.get(kind, p)
    done: dict[tuple[str, int | None, int], float] = {}
    for e in sorted(t.events, key=lambda e: e.start):
        pos = _path_position(kind, p, e.stage, e.chunk)
        if e.kind in ("F", "F&B"):
            if pos > 0:
                assert done[("F", e.micro_batch, pos - 1)] <= e.start
            done[("F", e.micro_batch, pos)] = e.end
        if e.kind in ("B", "BW", "F&B"):
            mb, ch = (e.bw_micro_batch, e.bw_chunk) if e.kind == "F&B" else (e.micro_batch, e.chunk)
            pos_b = _path_position(kind, p, e.stage, ch)
            assert done[("F", mb, pos_b)] <= e.start
            if pos_b < n_pos - 1:
                assert done[("B", mb, pos_b + 1)] <= e.start
            done[("B", mb, pos_b)] = e.end
        if e.kind == "W":
            assert done[("B", e.micro_batch, pos)] <= e.start
    # one device runs one operation at a time, and every device computes m(f + b + w)
    for s in range(p):
        evs = t.stage_events(s)
        assert all(a.end <= b.start for a, b in pairwise(evs))
        assert sum(e.end - e.start for e in evs) == pytest.approx(m * 4) == t.ideal
    # every micro-batch passes every position forward once and backward once
    assert sorted(k for k in done if k[0] == "F") == [("F", j, k) for j in range(m) for k in range(n_pos)]
    assert sorted(k for k in done if k[0] == "B") == [("B", j, k) for j in range(m) for k in range(n_pos)]
    assert t.model_stages == n_pos and t.events == tuple(e for s in range(p) for e in t.stage_events(s))


@pytest.mark.parametrize(
    "kind, p, m, v, words",
    [
        ("interleaved", 4, 6, 2, ["pp=4", "micro_batches=6"]),
        ("interleaved", 8, 4, 2, ["micro_batches=4", "pp=8"]),
        ("zb-h1", 8, 4, 1, ["micro_batches=4", "pp=8"]),
        ("zb-h2", 4, 3, 1, ["micro_batches=3", "pp=4"]),
        ("dualpipe", 5, 10, 1, ["pp=5", "odd"]),
        ("dualpipe", 4, 9, 1, ["micro_batches=9", "odd"]),
        ("dualpipe", 8, 8, 1, ["micro_batches=8", "2 × pp = 16"]),
        ("dualpipev", 4, 7, 1, ["micro_batches=7", "2 × pp = 8", "DualPipeV", "num_chunks >= num_ranks * 2"]),
        ("dualpipev", 4, 8, 2, ["virtual_stages=2", "dualpipev", "two chunks"]),
        ("1f1b", 4, 8, 2, ["virtual_stages=2", "1f1b"]),
        ("1f1b", 0, 8, 1, ["pp=0"]),
        ("gpipe", 4, 0, 1, ["micro_batches=0"]),
        ("pipedream", 4, 8, 1, ["kind='pipedream'"]),
    ],
)
def test_bad_input_names_the_factor(kind, p, m, v, words):
    with pytest.raises(ValueError) as err:
        S.simulate(kind, p, m, v)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(
    "times, words",
    [
        ({"f": -1}, ["f=-1"]),
        ({"w": float("nan")}, ["w=nan"]),
        ({"b": float("inf")}, ["b=inf"]),
        ({"f": "1"}, ["f='1'"]),
        ({"f": True}, ["f=True"]),
        ({"f": 0, "b": 0, "w": 0}, ["f + b + w = 0"]),
        ({"f": 0.0, "b": 0.0, "w": 0.0}, ["f + b + w = 0"]),
    ],
)
def test_bad_times_are_refused_by_the_simulator_and_the_formula(times, words):
    for kind in S.KINDS:
        p, m, v = 4, 8, 2 if kind == "interleaved" else 1
        for fn in (S.simulate, S.formula_bubble):
            with pytest.raises(ValueError) as err:
                fn(kind, p, m, v, **times)
            assert all(w in str(err.value) for w in words), (kind, str(err.value))


def test_times_whose_total_overflows_a_float():
    # every reported time is at most p·m·(f + b + w): refused when that passes the largest float
    for f in (1e308, 10**400):
        with pytest.raises(ValueError, match="passes the largest float"):
            S.simulate("1f1b", 4, 8, f=f)
    # the closed form is a ratio and still answers
    assert S.formula_bubble("zb-h1", 4, 8, f=1e308) == 3 / 8
    assert S.formula_bubble("zb-h1", 4, 8, f=10**400, b=10**400, w=10**400) == 1 / 8
    # the largest times that fit still give exact results
    t = S.simulate("1f1b", 4, 8, f=1e300, b=1e300, w=1e300)
    assert t.bubble == 3 / 8 and t.makespan == 33e300


def test_tiny_and_unround_times_are_exact():
    t = S.simulate("zb-h1", 4, 8, f=0.1, b=0.2, w=0.1)
    assert t.bubble == S.formula_bubble("zb-h1", 4, 8, f=0.1, b=0.2, w=0.1)
    assert S.simulate("1f1b", 4, 8, f=5e-324, b=5e-324, w=5e-324).bubble == 3 / 8


# ---------------------------------------------------------------------------------------------- bounds


def _at(kind, n):
    """(p, m, v) for ``kind`` with exactly n forward chunk computations, or None."""
    for p in (1, 2, 4, 8, 16, 32, 64, 128, 250, 500):
        c = 2 if kind == "dualpipev" else 4 if kind == "interleaved" else 1
        if n % (p * c) == 0:
            m, v = n // (p * c), (4 if kind == "interleaved" else 1)
            if _runs(kind, p, m, v):
                return p, m, v
    return None


@pytest.mark.parametrize("kind", S.KINDS)
def test_sizes_are_bounded_with_a_message(kind):
    # exactly MAX_FORWARDS forward chunk computations is accepted (its timings are in the report, not here)
    # and one more micro-batch's worth is refused, naming the factors, the product and the bound
    p, m, v = _at(kind, S.MAX_FORWARDS)
    S.check_size(kind, p, m, v)
    step = 2 if kind == "dualpipe" else p if kind == "interleaved" else 1
    with pytest.raises(ValueError) as err:
        S.simulate(kind, p, m + step, v)
    msg = str(err.value)
    assert f"{S.MAX_FORWARDS:,} forward passes" in msg and "formula_bubble" in msg
    assert f"pp={p:,}" in msg and f"micro_batches={m + step:,}" in msg
    n = p * (m + step) * {"interleaved": v, "dualpipev": 2}.get(kind, 1)
    assert f"= {n:,} is more than" in msg
    # the closed form answers for any size
    assert S.formula_bubble(kind, p, m + step, v) >= 0


def test_the_issue_10_sizes_are_answered_at_once():
    with pytest.raises(ValueError, match="pp × micro_batches = 9,000,000 is more than the 200,000"):
        S.simulate("gpipe", 3000, 3000)
    assert S.formula_bubble("gpipe", 3000, 3000) == 2999 / 3000
    with pytest.raises(ValueError, match=r"virtual_stages = about 10\^401 is more .*virtual_stages=about 10\^400\)"):
        S.simulate("interleaved", 4, 8, 10**400)
    assert S.formula_bubble("interleaved", 4, 8, 10**400) == 0.0  # (p−1)/(m·v) underflows to 0
    with pytest.raises(ValueError, match=r"virtual_stages=about 10\^400 needs the interleaved schedule"):
        S.simulate("1f1b", 4, 8, 10**400)
    assert S.formula_bubble("1f1b", 10**400, 10**401) == 0.1
    with pytest.raises(ValueError, match=r"the bubble \(p−1\)/m = about 10\^399 is too large for a float"):
        S.formula_bubble("gpipe", 10**400 + 1, 10)
    with pytest.raises(ValueError, match=r"pp=-about 10\^5000 must be a positive integer"):
        S.simulate("gpipe", -(10**5000), 8)


# ---------------------------------------------------------------------------------------------- replay


def _as_actions(kind, p, m, v):
    """``orders`` written as explicit actions with model stage indices (what torch's pipeline_order holds)."""
    out = {}
    for d, ops in enumerate(S.orders(kind, p, m, v)):
        row: list[tuple] = []
        for o in ops:
            stage = S.position(kind, p, d, o.chunk)
            if o.kind != "F&B":
                row.append((o.kind, stage, o.micro_batch))
            else:
                assert o.bw_chunk is not None
                row.append((o.kind, stage, o.micro_batch, S.position(kind, p, d, o.bw_chunk), o.bw_micro_batch))
        out[d] = row
    return out


@pytest.mark.parametrize("kind", S.KINDS)
def test_replay_of_an_explicit_order_reproduces_the_simulation(kind):
    p, m, v = (4, 8, 2) if kind == "interleaved" else (4, 8, 1)
    t = S.simulate(kind, p, m, v, f=1, b=2, w=1)
    c = {"interleaved": v, "dualpipev": 2}.get(kind, 1)
    r = S.replay(_as_actions(kind, p, m, v), f=Fraction(1, c), b=Fraction(2, c), w=Fraction(1, c))
    assert (r.kind, r.pp, r.micro_batches, r.model_stages) == ("replay", p, m, t.model_stages)
    assert (r.bubble, r.sync_bubble, r.makespan, r.idle, r.peak_activations) == (
        t.bubble,
        t.sync_bubble,
        t.makespan,
        t.idle,
        t.peak_activations,
    )
    assert [(e.start, e.end) for e in r.events] == [(e.start, e.end) for e in t.events]


@pytest.mark.parametrize(
    "order, words",
    [
        ({0: [("B", 0, 0), ("F", 0, 0)]}, ["deadlock", "device"]),
        ({0: [("F", 0, 0), ("BW", 0, 0)], 1: [("F", 1, 0)]}, ["deadlock", "('BW', 0, 0"]),
        (
            {0: [("F", 0, 0), ("F", 1, 0), ("BW", 1, 0), ("BW", 0, 0)], 1: [("F", 2, 0), ("BW", 2, 0)]},
            ["unequally loaded"],
        ),
        ({0: [("F", 0, 0), ("F", 0, 0), ("BW", 0, 0)]}, ["already ran"]),
        ({0: [("X", 0, 0)]}, ["kind='X'"]),
        ({0: [("F", -1, 0)]}, ["non-negative"]),
        ({0: [("F", 0)]}, ["(kind, stage, micro_batch"]),
        ({1: [("F", 0, 0)]}, ["numbered 0"]),
        ({0: []}, ["empty"]),
    ],
)
def test_replay_refuses_bad_orders(order, words):
    with pytest.raises(ValueError) as err:
        S.replay(order)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("module", ["inputs", "order", "simulation", "formulas", "text"])
def test_submodule_doctests(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"meshplan.schedule.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted >= 1


def test_text_timeline_shows_each_operation():
    text = S.format_timeline(S.simulate("1f1b", 2, 2))
    lines = text.splitlines()
    assert lines[1].startswith("bubble 50.0 % of ideal compute (33.3 % of the step); makespan 9;")
    assert lines[-2] == "stage  0 | F0  F1  ... ... BW0 === ... BW1 ==="
    assert lines[-1] == "stage  1 | ... F0  BW0 === F1  BW1 === ... ..."


# ---------------------------------------------------------------------------------------------- CLI

CLI_OK = {
    "1f1b": "--kind 1f1b --pp 8 --micro-batches 32 --json",
    "interleaved": "--kind interleaved --pp 8 --micro-batches 32 --virtual-stages 4 --json",
    "dualpipe": "--kind dualpipe --pp 8 --micro-batches 16 --f 1 --b 1 --w 1 --json",
    "zb-h2": "--kind zb-h2 --pp 4 --micro-batches 8 --json",
    "dualpipev": "--kind dualpipev --pp 4 --micro-batches 10 --json",
    "text": "--kind zb-h1 --pp 4 --micro-batches 8",
}
CLI_BAD = {
    "interleaved_m": ("--kind interleaved --pp 4 --micro-batches 6 --virtual-stages 2", ["pp=4", "micro_batches=6"]),
    "dualpipe_odd": ("--kind dualpipe --pp 3 --micro-batches 12", ["pp=3", "odd"]),
    "zb_m": ("--kind zb-h1 --pp 8 --micro-batches 4", ["micro_batches=4", "pp=8"]),
    "kind": ("--kind pipedream --pp 4 --micro-batches 8", ["--kind", "pipedream"]),
    "pp_zero": ("--kind 1f1b --pp 0 --micro-batches 8", ["pp=0"]),
    "f_negative": ("--kind 1f1b --pp 4 --micro-batches 8 --f -1", ["f=-1"]),
    "b_word": ("--kind 1f1b --pp 4 --micro-batches 8 --b x", ["b='x'"]),
    "missing_pp": ("--kind 1f1b --micro-batches 8", ["--pp"]),
    "f_huge": ("--kind 1f1b --pp 4 --micro-batches 8 --f 1e308", ["largest float"]),
    "f_nan": ("--kind 1f1b --pp 4 --micro-batches 8 --f nan", ["f=nan"]),
    "too_large": ("--kind gpipe --pp 3000 --micro-batches 3000", ["9,000,000", "200,000", "formula_bubble"]),
    "v_huge": ("--kind interleaved --pp 4 --micro-batches 8 --virtual-stages 1" + "0" * 400, ["virtual-stages"]),
    "dualpipev_m": ("--kind dualpipev --pp 4 --micro-batches 6", ["micro_batches=6", "2 × pp = 8"]),
}


@pytest.fixture(scope="module")
def cli_results():
    """Every case in process (``commands.run``; test_cli runs a sample of them as real processes)."""
    return {
        name: run(["schedule", *argv.split()])
        for name, argv in {**CLI_OK, **{k: v[0] for k, v in CLI_BAD.items()}}.items()
    }


def test_cli_json_contract(cli_results):
    keys = ["kind", "pp", "micro_batches", "virtual_stages", "bubble", "makespan", "peak_activations"]
    for name in ("1f1b", "interleaved", "dualpipe", "zb-h2", "dualpipev"):
        rc, out, err = cli_results[name]
        assert rc == 0 and err == ""
        assert out.count("\n") == 1
        obj = json.loads(out)
        assert list(obj)[: len(keys)] == keys
        argv = CLI_OK[name].split()
        t = S.simulate(obj["kind"], obj["pp"], obj["micro_batches"], obj["virtual_stages"])
        assert (obj["bubble"], obj["makespan"], obj["peak_activations"]) == (
            t.bubble,
            t.makespan,
            list(t.peak_activations),
        )
        assert obj["kind"] == argv[argv.index("--kind") + 1]
    one = json.loads(cli_results["1f1b"][1])
    assert (one["pp"], one["micro_batches"], one["virtual_stages"], one["bubble"]) == (8, 32, 1, 0.21875)
    assert one["peak_activations"] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert json.loads(cli_results["interleaved"][1])["bubble"] == 7 / 128
    assert json.loads(cli_results["dualpipe"][1])["peak_activations"] == [9] * 8
    assert json.loads(cli_results["zb-h2"][1])["bubble"] == 0.0
    v = json.loads(cli_results["dualpipev"][1])
    assert (v["bubble"], v["peak_activations"], v["chunks_per_device"], v["parameter_copies"], v["model_stages"]) == (
        0.1,
        [9] * 4,
        2,
        1,
        8,
    )


def test_cli_text_timeline(cli_results):
    rc, out, err = cli_results["text"]
    assert rc == 0 and err == ""
    assert out == S.format_timeline(S.simulate("zb-h1", 4, 8)) + "\n"
    assert "bubble 12.5 % of ideal compute" in out


@pytest.mark.parametrize("name", list(CLI_BAD))
def test_cli_bad_input_one_line_exit_2(cli_results, name):
    rc, out, err = cli_results[name]
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("meshplan: error: ") and "Traceback" not in err
    for word in CLI_BAD[name][1]:
        assert word in err
