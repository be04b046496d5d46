"""A search with ``top`` (the command line's) prices only the plans that can rank among the ``top`` fastest or within
the model's uncertainty of the fastest, and what it ranks is exactly the head of the full search's ranking: every
plan that fits with a step time up to its bound, with the same reports and step times, in the same order. Its
rejections are the full search's, in enumeration order, less those of the plans it never priced. The bound it prunes
with (``steptime.step_time_floors``) is at most the step time of every plan, in every ledger, execution and layout
the cases cover: DualPipe, TP overlap hiding what the GEMMs cover, torchtitan's op-level recomputation, uneven and
interleaved stages, MoE with EP across nodes."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from typing import Any

import pytest
from commands import run
from test_search_pruning import CASES, HEAVY

from meshplan.core.validation import MeshplanError
from meshplan.plan.evaluation import time_inputs, time_report
from meshplan.search import COARSE_FLOOR, SearchResult, search
from meshplan.steptime import execution_for, step_time, step_time_floors

H100 = "h100-sxm-80gb"


def _is_subsequence(part, whole) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


def _check_head(bounded: SearchResult, full: SearchResult, top: int) -> None:
    head = [c for c in full.ranked if c.step.total_s <= bounded.bound_s]
    assert [(c.plan, c.step, c.memory_total) for c in bounded.ranked] == [
        (c.plan, c.step, c.memory_total) for c in head
    ]
    assert len(bounded.ranked) >= min(top, len(full.ranked))
    if full.ranked:  # every plan the model cannot tell from the fastest is ranked
        best = full.ranked[0].step.total_s
        assert all(c.step.total_s <= bounded.bound_s for c in full.ranked if c.step.total_s <= best * 1.1)
    assert bounded.enumerated == full.enumerated
    assert bounded.unranked == bounded.enumerated - len(bounded.ranked) - len(bounded.rejected)
    assert bounded.unranked >= len(full.ranked) - len(head)
    assert _is_subsequence(bounded.rejected, full.rejected)
    assert bounded.tied_ranks() == full.tied_ranks()[: len(bounded.ranked)]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in CASES])
def test_a_bounded_search_ranks_the_head_of_the_full_ranking(name):
    kw = CASES[name]
    full = search(**kw)
    for top in (1, 10):
        _check_head(search(**kw, top=top), full, top)


BOUND_CASES: dict[str, dict[str, Any]] = {
    "megatron, DeepSeek-V3 under DualPipe": {
        "model": "deepseek-v3",
        "gpus": 256,
        "seq": 4096,
        "global_batch": 512,
        "hardware": H100,
        "accounting": "megatron",
        "execution": replace(execution_for("megatron"), pipeline="dualpipe"),
        "zero_stages": (1,),
        "micro_batch_sizes": (1,),
    },
    "megatron, DeepSeek-V3 under DualPipe, few micro-batches (its idle time weighs the forward apart)": {
        "model": "deepseek-v3",
        "gpus": 256,
        "seq": 4096,
        "global_batch": 32,
        "hardware": H100,
        "accounting": "megatron",
        "execution": replace(execution_for("megatron"), pipeline="dualpipe"),
        "zero_stages": (1,),
        "micro_batch_sizes": (1,),
    },
    "fsdp2, op-level recomputation, TP overlap hiding what the GEMMs cover": {
        "model": "llama-3.1-8b",
        "gpus": 32,
        "seq": 8192,
        "global_batch": 64,
        "hardware": H100,
        "accounting": "fsdp2",
        "execution": replace(execution_for("fsdp2"), tp_overlap="full"),
        "recompute": ("none", "selective", "full", "op"),
    },
    "megatron, MoE with EP across nodes, fp8": {
        "model": "qwen3-30b-a3b",
        "gpus": 64,
        "seq": 8192,
        "global_batch": 128,
        "hardware": H100,
        "accounting": "megatron",
        "precision": "fp8",
        "micro_batch_sizes": (1, 2),
    },
}


@pytest.mark.parametrize("name", list(BOUND_CASES))
def test_the_floor_is_at_most_every_plans_step_time(name):
    kw = BOUND_CASES[name]
    full = search(**kw)
    assert full.ranked
    for c in full.ranked:
        v = c.plan.virtual_stages
        floor = step_time_floors([time_inputs(c.plan)], (v,), c.execution)[v, c.plan.recompute]
        assert 0 < floor <= c.step.total_s, c.label()
        # the step time less the optimizer's term: every other term the step time's, to the bit
        less = step_time(time_report(c.plan), c.execution)
        assert less.optimizer_s == 0.0 and less.total_s <= c.step.total_s
        assert {k: x for k, x in less.terms().items() if k != "optimizer_s"} == {
            k: x for k, x in c.step.terms().items() if k != "optimizer_s"
        }
        if c.execution.pipeline != "dualpipe":  # the coarse floor: the same plan without recomputation
            plain = copy.copy(c.plan)
            object.__setattr__(plain, "recompute", COARSE_FLOOR)
            coarse = step_time_floors([time_inputs(plain)], (v,), c.execution)[v, COARSE_FLOOR]
            assert coarse <= floor, c.label()
    _check_head(search(**kw, top=10), full, 10)


def test_a_bounded_search_of_sixteen_thousand_gpus_ranks_what_the_full_one_ranks_first():
    kw: dict[str, Any] = {
        "model": "llama-3.1-405b",
        "gpus": 16384,
        "seq": 8192,
        "global_batch": 2048,
        "hardware": H100,
        "accounting": "megatron",
    }
    bounded = search(**kw, top=10)
    assert len(bounded.ranked) >= 10 and math.isfinite(bounded.bound_s)
    assert bounded.unranked > 10 * len(bounded.ranked)  # most plans are never priced
    _check_head(bounded, search(**kw), 10)


def test_top_is_checked():
    with pytest.raises(MeshplanError) as err:
        search("qwen3.8-27b", gpus=8, seq=4096, global_batch=8, top=0)
    assert err.value.factor == "top"


def test_the_band_regime_is_that_of_the_pairs_it_is_measured_on():
    from meshplan.search import BAND_REGIME, band_regime_gaps, format_search
    from meshplan.steptime import fitting

    held = [r for r in fitting.validate() if r.scored and r.group.startswith("held out")]
    pairs = [
        (a, b)
        for i, a in enumerate(held)
        for b in held[i + 1 :]
        if (a.plan.model.name, a.plan.hardware.name) == (b.plan.model.name, b.plan.hardware.name)
    ]
    assert len(pairs) == len(fitting.ratio_errors(fitting.validate()))
    plans = [r.plan for pair in pairs for r in pair]
    assert {p.model.is_moe for p in plans} == {BAND_REGIME["moe"]}
    assert {p.precision for p in plans} == set(BAND_REGIME["precision"])
    assert {p.hardware.name for p in plans} == set(BAND_REGIME["hardware"])
    moe = search("qwen3-30b-a3b", gpus=16, seq=4096, global_batch=32, hardware=H100, accounting="megatron", top=5)
    assert band_regime_gaps(moe.model, moe.precision, moe.hardware) == ["a mixture of experts"]
    assert "this search is outside them (a mixture of experts)" in format_search(moe, 5)
    dense = search("llama-3.1-8b", gpus=8, seq=4096, global_batch=16, hardware=H100, accounting="megatron", top=5)
    assert "outside them" not in format_search(dense, 5)


def test_a_bounded_dualpipe_search_with_the_chunk_counts_in_any_order():
    # the block's plan is built at the first count given; DualPipe runs (and hides the EP all-to-alls) at v = 1 only
    few = "megatron, DeepSeek-V3 under DualPipe, few micro-batches (its idle time weighs the forward apart)"
    kw: dict[str, Any] = {**BOUND_CASES[few], "virtual_stages": (2, 1)}
    _check_head(search(**kw, top=3), search(**kw), 3)


@pytest.mark.parametrize("top", ["1001", "1000000", "99999999999999999"])
def test_a_top_larger_than_the_command_reports_is_one_line_naming_top(top):
    """``--top`` beyond ``search.MAX_TOP`` (the plans the command reports in full) is refused before the search
    runs, with exit 2 and one line naming ``top`` and the limit, instead of a 25-second wait for 108 MB of JSON."""
    from meshplan.search import MAX_TOP

    out = run(["search", "--model", "deepseek-v3", "--gpus", "2048", "--seq", "131072", "--global-batch", "2048",
               "--top", top, "--json"])  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("meshplan: error: argument --top: top=")
    assert f"more than the {MAX_TOP:,} plans a search reports" in out.stderr and "Traceback" not in out.stderr


def test_the_largest_top_is_reported_in_full():
    """``--top MAX_TOP`` lists that many plans when the search has them, each a full report."""
    from meshplan.search import MAX_TOP

    out = run(["search", "--model", "qwen3.8-27b", "--gpus", "64", "--seq", "4096", "--global-batch", "256",
               "--hardware", "h100-sxm-80gb", "--top", str(MAX_TOP), "--json"])  # fmt: skip
    assert out.returncode == 0, out.stderr
    plans = json.loads(out.stdout)
    assert len(plans) == MAX_TOP and plans[0]["rank"] == 1
    assert all(p["rank"] <= i for i, p in enumerate(plans, 1)) and all(p["step_time_s"] > 0 for p in plans)
