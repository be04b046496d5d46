"""Where the search puts published runs' shapes (issue 26), and the terms that put a shape below the top 5."""

from __future__ import annotations

from meshplan.course import shapes
from meshplan.steptime import fitting, precision_fit


def _rank(run_id: str) -> shapes.ShapeRank:
    plans = shapes.published_plans()
    return shapes.shape_rank(plans[run_id], run_id)


def test_every_published_run_with_a_full_mesh_is_ranked():
    plans = shapes.published_plans()
    full = [
        r
        for r in fitting.published_runs()
        if r["gpus"] and None not in [r["mesh"][k] for k in ("tp", "cp", "pp", "dp")]
    ]
    # the runs left out say why they cannot be planned: torchtitan's H100 tables ran on GPUs no preset describes
    left = {r["id"] for r in full} - set(plans)
    assert left == {r["id"] for r in full if r["id"].startswith("torchtitan-h100-")}
    assert "no preset fits" in fitting.UNSCORED["torchtitan-h100-"]
    assert {r["id"] for r in precision_fit.runs()} <= set(plans)
    assert plans["deepseek-v3-pretraining"].ep == 64 and shapes.PIPELINE["deepseek-v3-pretraining"] == "dualpipe"


def test_a_shape_in_the_top_5():
    r = _rank("korthikanti2022-530b")
    assert (r.rank, r.tied_rank, r.in_top, r.as_run_fits) == (1, 1, True, True)
    assert r.explanation() == "in the top 5: its best plan is 0.0 % slower than the fastest"


def test_a_shape_below_the_top_5_says_which_terms_and_why():
    """NVIDIA's FP8 Llama 3.1 405B recipe on 1,024 H100s (Megatron-Bridge 25.11: TP 8, CP 2, PP 8, VP 8, no
    recomputation, gradients reduced in bf16) does not fit Megatron-LM's ledger as published: the ledger prices the
    activations transformers' layers save, more than Transformer Engine's fused kernels keep, and bf16 weights beside
    FP8 copies where the recipe keeps FP8 parameters. So its shape is priced with full recomputation, whose extra
    forward is most of the gap. The search prices every candidate with the recipe's bf16 gradients, which rules out
    Megatron-FSDP's ZeRO-2/3 (20 shapes kept)."""
    r = _rank("bridge-25.11-h100-fp8-llama3.1-405b")
    assert r.plan.grad_dtype == "bf16" and {c.plan.grad_dtype for c in (r.best, r.shape_best) if c} == {"bf16"}
    assert (r.rank, r.tied_rank, r.shapes, r.in_top, r.as_run_fits) == (8, 7, 20, False, False)
    assert r.shape_best is not None and r.shape_best.plan.recompute == "full"
    d = r.deltas()
    assert max(d, key=lambda k: d[k]) == "compute_s" and f"{d['compute_s']:.2f}" == "3.66"
    text = r.explanation()
    assert text.startswith("28.9 % slower than the fastest (TP 8 × CP 2 × PP 16 × DP 4 · ZeRO-1 · none · b 1 · m 128 ")
    assert "+3.66 s compute, +1.57 s tp, +0.20 s dp exposed" in text
    assert text.endswith(
        "as published (no recomputation, ZeRO-1) it does not fit the ledger (97.3 GB allocated at its peak "
        "(backward of the last layer, stage 2 of 8): does not fit: 15.7 GB over before the allocator's reserve), so "
        "its shape is priced with full recomputation"
    )
    assert shapes.unpriced_settings(r) == ("FP8 parameters", "TE cross-entropy")


def test_deepseek_v3_is_searched_with_its_schedule():
    r = _rank("deepseek-v3-pretraining")
    assert r.best.execution.pipeline == "dualpipe" and r.shape_best is not None
    d = r.deltas()
    assert max(d, key=lambda k: d[k]) == "ep_s"  # the all-to-all over 8 nodes (EP 64) is what puts it lower
