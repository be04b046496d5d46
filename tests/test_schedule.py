"""The pipeline-schedule simulator: measured bubbles against the published formulas, peak activations,
dependencies on the timeline, bad input, and the ``schedule`` command line."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from meshplan import activations, pp
from meshplan import schedule as S

REPO = Path(__file__).resolve().parents[1]
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


@pytest.mark.parametrize("p, m, v", [(p, m, v) for p in (2, 4, 8) for m in (8, 16, 32) for v in (2, 3, 4)
                                     if m % p == 0])
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
    assert t.peak_activations == (p,) * p                      # as 1F1B's first stage


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
    fb, B, W = f + b + w, b + w, w                           # F&B read as F + B; Table 2's B is the full backward
    expected = (Fraction(p, 2) - 1) * Fraction(fb + B - 3 * W) / (m * Fraction(f + b + w))
    assert t.bubble == float(expected)
    assert t.bubble == S.formula_bubble("dualpipe", p, m, f=f, b=b, w=w)
    assert t.peak_activations == (p + 1,) * p                # PP + 1
    assert t.chunks_per_device == 2                           # 2x parameters
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


@pytest.mark.parametrize("kind", S.KINDS)
def test_timeline_respects_dependencies_and_devices(kind):
    p, m, v = 4, 8, 2 if kind == "interleaved" else 1
    t = S.simulate(kind, p, m, v, f=1, b=2, w=1)
    done = {}
    for e in sorted(t.events, key=lambda e: e.start):
        pos = e.chunk * p + e.stage if kind == "interleaved" else (
            e.stage if e.chunk == 0 else p - 1 - e.stage)
        if e.kind in ("F", "F&B"):
            if pos > 0:
                assert done[("F", e.micro_batch, pos - 1)] <= e.start
            done[("F", e.micro_batch, pos)] = e.end
        if e.kind in ("B", "BW", "F&B"):
            mb, ch = (e.bw_micro_batch, e.bw_chunk) if e.kind == "F&B" else (e.micro_batch, e.chunk)
            pos_b = ch * p + e.stage if kind == "interleaved" else (e.stage if ch == 0 else p - 1 - e.stage)
            assert done[("F", mb, pos_b)] <= e.start
            if pos_b < (p * v if kind == "interleaved" else p) - 1:
                assert done[("B", mb, pos_b + 1)] <= e.start
            done[("B", mb, pos_b)] = e.end
        if e.kind == "W":
            assert done[("B", e.micro_batch, pos)] <= e.start
    # one device runs one operation at a time, and every device computes m(f + b + w)
    for s in range(p):
        evs = t.stage_events(s)
        assert all(a.end <= b.start for a, b in zip(evs, evs[1:]))
        assert sum(e.end - e.start for e in evs) == pytest.approx(m * 4)
    # every micro-batch is computed once forward on every position
    assert sum(1 for e in t.events if e.kind in ("F", "F&B")) == m * p * (v if kind == "interleaved" else 1)


@pytest.mark.parametrize("kind, p, m, v, words", [
    ("interleaved", 4, 6, 2, ["pp=4", "micro_batches=6"]),
    ("interleaved", 8, 4, 2, ["micro_batches=4", "pp=8"]),
    ("zb-h1", 8, 4, 1, ["micro_batches=4", "pp=8"]),
    ("zb-h2", 4, 3, 1, ["micro_batches=3", "pp=4"]),
    ("dualpipe", 5, 10, 1, ["pp=5", "odd"]),
    ("dualpipe", 4, 9, 1, ["micro_batches=9", "odd"]),
    ("dualpipe", 8, 8, 1, ["micro_batches=8", "2 × pp = 16"]),
    ("1f1b", 4, 8, 2, ["virtual_stages=2", "1f1b"]),
    ("1f1b", 0, 8, 1, ["pp=0"]),
    ("gpipe", 4, 0, 1, ["micro_batches=0"]),
    ("pipedream", 4, 8, 1, ["kind='pipedream'"]),
])
def test_bad_input_names_the_factor(kind, p, m, v, words):
    with pytest.raises(ValueError) as err:
        S.simulate(kind, p, m, v)
    for word in words:
        assert word in str(err.value)


def test_bad_times():
    with pytest.raises(ValueError, match="f=-1"):
        S.simulate("1f1b", 4, 8, f=-1)
    with pytest.raises(ValueError, match="w=nan"):
        S.simulate("1f1b", 4, 8, w=float("nan"))
    with pytest.raises(ValueError, match="f \\+ b \\+ w = 0"):
        S.simulate("1f1b", 4, 8, f=0, b=0, w=0)


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
}


@pytest.fixture(scope="module")
def cli_results():
    procs = {name: subprocess.Popen([sys.executable, "-m", "meshplan", "schedule", *argv.split()], cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, argv in {**CLI_OK, **{k: v[0] for k, v in CLI_BAD.items()}}.items()}
    return {name: (p.wait(timeout=60), *p.communicate()) for name, p in procs.items()}


def test_cli_json_contract(cli_results):
    keys = ["kind", "pp", "micro_batches", "virtual_stages", "bubble", "makespan", "peak_activations"]
    for name in ("1f1b", "interleaved", "dualpipe", "zb-h2"):
        rc, out, err = cli_results[name]
        assert rc == 0 and err == ""
        assert out.count("\n") == 1
        obj = json.loads(out)
        assert list(obj)[:len(keys)] == keys
        argv = CLI_OK[name].split()
        t = S.simulate(obj["kind"], obj["pp"], obj["micro_batches"], obj["virtual_stages"])
        assert (obj["bubble"], obj["makespan"], obj["peak_activations"]) == (t.bubble, t.makespan,
                                                                            list(t.peak_activations))
        assert obj["kind"] == argv[argv.index("--kind") + 1]
    one = json.loads(cli_results["1f1b"][1])
    assert (one["pp"], one["micro_batches"], one["virtual_stages"], one["bubble"]) == (8, 32, 1, 0.21875)
    assert one["peak_activations"] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert json.loads(cli_results["interleaved"][1])["bubble"] == 7 / 128
    assert json.loads(cli_results["dualpipe"][1])["peak_activations"] == [9] * 8
    assert json.loads(cli_results["zb-h2"][1])["bubble"] == 0.0


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
