"""``meshplan.search``: the step-time terms, the first failing constraint, the ranking, Llama 3 405B's published
plan among the ranked ones, and ``python -m meshplan search`` (its speed is a benchmark in scripts/benchmark.py,
never a timed test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from meshplan import Plan, evaluate, published
from meshplan.lab import LAB_64_GPUS, lab_plan
from meshplan.plan import spread_layers
from meshplan.search import TERMS, mfu, search, step_time

REPO = Path(__file__).resolve().parents[1]
PEAK = 989.5e12


def test_step_time_terms_of_a_lab_row():
    r = evaluate(lab_plan(LAB_64_GPUS[2]))        # TP 8 x PP 2 x DP 4, ZeRO-1, full recompute, m = 8
    st = step_time(r)
    # compute: 8 FLOP x 25,624,600,064 x (4 x 8 x 4,096 tokens) / (64 x 400e12)
    assert f"{st.compute_s:.4f}" == f"{8 * 25_624_600_064 * 4 * 8 * 4096 / (64 * 400e12):.4f}" == "1.0496"
    assert st.tp_s == r.comm_time_s["tp"] and st.pp_s == r.comm_time_s["pp"]
    # DP: 5.2 GB over IB minus the backward of one micro-batch on the 16 GPUs of a replica
    window = 4 * 25_624_600_064 * 4096 / (16 * 400e12)
    assert st.dp_exposed_s == pytest.approx(r.comm_time_s["dp"] - window)
    assert st.bubble_s == pytest.approx(r.bubble * (st.compute_s + st.tp_s + st.pp_s))
    assert [f"{x:.3f}" for x in st.terms().values()] == ["1.050", "0.470", "0.000", "0.000", "0.013", "0.039",
                                                         "0.192"]
    assert f"{st.total_s:.2f}" == "1.76"
    assert list(st.terms()) == list(TERMS) and st.total_s == pytest.approx(sum(st.terms().values()))


def test_cp_kv_is_blocking_and_the_gradient_part_overlaps():
    r = evaluate(Plan.create("qwen3.8-27b", gpus=64, tp=8, cp=8, seq=131072, zero=1, recompute="selective"))
    st = step_time(r)
    kv = r.comm_bytes_per_step["cp"] - r.grad_sync_bytes["cp"]
    assert kv > 0 and r.grad_sync_bytes["cp"] > 0
    assert st.cp_s == pytest.approx(kv / 50e9)


@pytest.fixture(scope="module")
def llama():
    return search("llama-3.1-405b", gpus=16384, seq=8192, global_batch=2048)


def test_llama3_search_counts_and_top(llama):
    assert (llama.enumerated, len(llama.ranked), len(llama.rejected)) == (20412, 634, 19778)
    assert llama.rejections_by_constraint() == {"global batch": 1284, "memory": 1130, "plan": 2424,
                                                "cp chunk": 10944, "tp inside a node": 3996}
    best = llama.ranked[0]
    assert best.label() == "TP 8 × CP 2 × PP 4 × DP 256 · ZeRO-2 · selective · b 1 · m 8 · v 4"
    assert (f"{best.step.total_s:.2f}", f"{100 * best.mfu(PEAK):.1f}") == ("9.14", "27.4")
    assert all(c.plan.tp == 8 for c in llama.ranked[:12])


def test_llama3_published_plan_rank(llama):
    rank, pub = llama.rank_of(tp=8, cp=1, pp=16, dp=128)
    assert rank == 89 and llama.shape_rank_of(tp=8, cp=1, pp=16, dp=128) == 17
    assert pub.label() == "TP 8 × PP 16 × DP 128 · ZeRO-2 · full · b 1 · m 16 · v 4"
    assert pub.plan.layers_per_stage == spread_layers(126, 16)
    assert (f"{pub.step.total_s:.2f}", f"{pub.step.bubble_s:.2f}", f"{100 * pub.report.bubble:.1f}") == \
        ("12.91", "2.45", "23.4")
    assert f"{100 * pub.mfu(PEAK):.1f}" == "19.4"
    # with selective recomputation the interleaved published plan does not fit in this accounting
    sel = evaluate(Plan.create("llama-3.1-405b", gpus=16384, tp=8, pp=16, zero=2, recompute="selective", seq=8192,
                               micro_batches=16, virtual_stages=4, layers_per_stage=spread_layers(126, 16)))
    assert not sel.fits
    assert llama.rank_of(tp=8, pp=16, dp=128, recompute="selective", virtual_stages=4) is None
    rank_sel, sel_best = llama.rank_of(tp=8, pp=16, dp=128, recompute="selective")
    assert (rank_sel, sel_best.plan.virtual_stages, f"{100 * sel_best.report.bubble:.1f}") == (164, 1, "93.8")


def test_mfu_against_llama3():
    rows = published.value("llama3_table4")
    assert [r["mfu"] for r in rows] == [0.43, 0.41, 0.38]
    assert f"{100 * 400e12 / published.value('h100_sxm_bf16_dense_peak_flop_per_s'):.1f}" == "40.4"


def test_kept_plans_are_valid_sorted_and_distinct(llama):
    times = [c.step.total_s for c in llama.ranked]
    assert times == sorted(times)
    seen = set()
    for c in llama.ranked[:200]:
        p = c.plan
        assert c.report.fits and p.dp * p.micro_batch_size * p.micro_batches == 2048
        assert p.tp <= 8 and 8192 // p.cp >= 4096
        assert step_time(evaluate(p)).total_s == c.step.total_s
        key = (p.tp, p.cp, p.pp, p.dp, p.ep, p.zero, p.recompute, p.micro_batch_size, p.virtual_stages)
        assert key not in seen
        seen.add(key)


def test_each_rejection_names_its_first_failing_constraint(llama):
    ex = llama.rejection_examples()
    assert ex["tp inside a node"].message == "tp=16 > 8 GPUs per node: a TP group would cross nodes"
    assert ex["cp chunk"].message == "cp=4 leaves 2,048 tokens per CP rank, fewer than 4,096"
    assert ex["global batch"].message.startswith("global batch 2048 is not divisible by dp × micro-batch size")
    assert ex["memory"].message.endswith("GB per GPU > 80 GB")
    for r in llama.rejected[:3000]:
        s = r.settings
        if r.constraint == "plan":
            with pytest.raises(ValueError) as err:
                Plan.create(llama.model, gpus=16384, tp=s["tp"], cp=s["cp"], pp=s["pp"], dp=s["dp"], zero=s["zero"],
                     recompute=s["recompute"], seq=8192, micro_batch_size=s["micro_batch_size"],
                     micro_batches=2048 // (s["dp"] * s["micro_batch_size"]), virtual_stages=s["virtual_stages"],
                     layers_per_stage=None if 126 % s["pp"] == 0 else spread_layers(126, s["pp"]))
            assert str(err.value) == r.message


def test_moe_search_enumerates_expert_parallel():
    r = search("deepseek-v3", gpus=2048, seq=4096, global_batch=15360, zero_stages=(1,), recompute=("full",),
               micro_batch_sizes=(1,), virtual_stages=(1,))
    assert {c.plan.ep for c in r.ranked} > {1}
    pub = r.rank_of(tp=1, pp=16, ep=64)
    assert pub is not None and pub[1].report.fits


def test_search_validation():
    with pytest.raises(ValueError, match="gpus_per_node=8 does not divide gpus=12"):
        search("qwen3.8-27b", gpus=12, seq=4096, global_batch=8)
    with pytest.raises(ValueError, match="global_batch=0"):
        search("qwen3.8-27b", gpus=8, seq=4096, global_batch=0)
    with pytest.raises(ValueError, match="peak_flop_per_s"):
        mfu(evaluate(lab_plan(LAB_64_GPUS[0])), 1.0, 0)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "meshplan", *args], cwd=REPO, capture_output=True, text=True)


def test_cli_search_json_and_table():
    out = _cli("search", "--model", "qwen3.8-27b", "--gpus", "8", "--seq", "4096", "--global-batch", "8",
               "--top", "3", "--json")
    assert out.returncode == 0, out.stderr
    plans = json.loads(out.stdout)
    assert len(plans) == 3 and [p["rank"] for p in plans] == [1, 2, 3]
    for key in ["model", "params", "gpus", "mesh", "memory_bytes", "fits", "comm_bytes_per_step", "link", "bubble",
                "step_time_s", "step_time_terms_s"]:
        assert key in plans[0]
    assert plans[0]["step_time_s"] == pytest.approx(sum(plans[0]["step_time_terms_s"].values()))
    best = search("qwen3.8-27b", gpus=8, seq=4096, global_batch=8).ranked[0]
    assert plans[0]["mesh"] == {"tp": best.plan.tp, "cp": 1, "ep": 1, "dp": best.plan.dp, "pp": best.plan.pp}
    table = _cli("search", "--model", "qwen3.8-27b", "--gpus", "8", "--global-batch", "8")
    assert table.returncode == 0 and "first constraint they fail" in table.stdout
    bad = _cli("search", "--model", "qwen3.8-27b", "--gpus", "12", "--global-batch", "8")
    assert bad.returncode == 2 and bad.stderr.strip() == "meshplan: error: gpus_per_node=8 does not divide gpus=12"
