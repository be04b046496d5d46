"""``meshplan.parallel.compute`` (FLOP with attention), ``meshplan.steptime`` (the step-time model, term by term,
against hand computations) and ``meshplan.steptime.fitting`` (the fit on the declared set, the validation targets on
the held-out runs, the tie band)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from meshplan.parallel import compute
from meshplan.parallel.activations import activation_bytes_per_layer
from meshplan.parallel.compute import narayanan_eq3_flop
from meshplan.plan import Plan, evaluate
from meshplan.spec.hardware import load_hardware
from meshplan.spec.model import load_model, model_from_config
from meshplan.spec.models.spec import LayerSpec
from meshplan.steptime import (
    PHYSICAL_RANGES,
    TERMS,
    Calibration,
    Execution,
    calibration,
    collective_latency_s,
    execution_for,
    fit_data,
    hardware_flop_per_step,
    hfu,
    mfu,
    micro_batch,
    model_flop_per_step,
    step_report,
    step_time,
)
from meshplan.steptime import fitting as C
from meshplan.steptime.model import NCCL_BASE_LATENCY_S, NCCL_HOP_LATENCY_S, dualpipe

A100 = load_hardware("a100-sxm-80gb")
PEAK_A100, HBM_A100, NVLINK_A100 = 312e12, 2.039e12, 300e9
NO_HBM = Calibration(matmul_efficiency=0.5, hbm_passes=0.0, link_efficiency=0.8)
DENSE = Execution(attention="dense")


# ---------------------------------------------------------------- compute: attention FLOP
def test_attention_flop_of_a_gpt3_layer_by_hand():
    layer = LayerSpec(num_heads=96, num_kv_heads=96, head_dim=128, v_head_dim=128)  # a·d = h = 12,288
    s = 2048
    # QKᵀ: 2·s²·a·d, A·V: 2·s²·a·d -> 4·s²·h (Narayanan Eq. 3's per-layer attention term, forward)
    assert compute.attention_forward_flop(layer, s, causal=False) == 4 * s * s * 12288 == 206_158_430_208
    assert compute.attention_forward_flop(layer, s) == 103_079_215_104  # causal: half the pairs


def test_attention_pairs_conventions():
    assert compute.attention_pairs(8192, causal=False) == 8192**2
    assert compute.attention_pairs(8192) == 8192**2 / 2
    # a 4,096-token window on an 8,192-token sequence: s·w unmasked, s·w − w²/2 with causal skipping
    assert compute.attention_pairs(8192, 4096, causal=False) == 33_554_432
    assert compute.attention_pairs(8192, 4096) == 25_165_824
    assert compute.attention_pairs(1024, 4096) == compute.attention_pairs(1024)  # window ≥ s: plain causal
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="seq="):
            compute.attention_pairs(bad)  # type: ignore[arg-type]  # a bool and a float, on purpose
    with pytest.raises(ValueError, match="window=0"):
        compute.attention_pairs(8, 0)


def test_attention_flop_of_mla_window_and_linear_layers():
    mla = LayerSpec(mixer="mla", num_heads=128, num_kv_heads=128, head_dim=192, v_head_dim=128)
    assert compute.attention_forward_flop(mla, 4096) == 2 * (4096**2 / 2) * 128 * (192 + 128)
    window = LayerSpec(num_heads=16, num_kv_heads=8, head_dim=256, v_head_dim=256, sliding_window=4096)
    assert compute.attention_forward_flop(window, 8192) == 2 * 25_165_824 * 16 * 512
    # Gated DeltaNet: S·k, the rank-one update and S·q, 2·d_k·d_v each per value head and token, whatever s is
    linear = LayerSpec(
        mixer="linear_attention",
        linear_num_key_heads=16,
        linear_num_value_heads=48,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
    )
    assert compute.attention_forward_flop(linear, 4096) == 4096 * 48 * 3 * 2 * 128 * 128 == 19_327_352_832
    assert compute.attention_forward_flop(linear, 8192) == 2 * compute.attention_forward_flop(linear, 4096)


def test_model_flop_is_palm_6n_plus_12lhs_for_llama():
    m = load_model("llama-3.1-405b")
    s = 8192
    per_token = compute.training_flop_per_sequence(m, s, "none", causal=False) / s
    assert per_token == 6 * m.flop_params + 12 * m.num_layers * m.hidden_size * s


def test_full_recompute_flop_is_narayanan_eq3_for_every_table1_gpt():
    for r in C.published_runs():
        if not r["id"].startswith(C.FIT_SET):
            continue
        cfg = r["model"]["config"]
        m = model_from_config(cfg, r["model"]["name"])
        ours = compute.training_flop_per_sequence(m, r["seq"], "full", causal=False)
        eq3 = narayanan_eq3_flop(1, r["seq"], cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"])
        assert ours / eq3 - 1 == pytest.approx(0, abs=4e-4), r["id"]  # Eq. 3 leaves out biases and norms


def test_recompute_flop():
    m = load_model("qwen3.8-27b")  # 48 linear-attention + 16 full layers
    s = 4096
    assert compute.recompute_flop_per_sequence(m, s, "none") == 0
    softmax = sum(compute.attention_forward_flop(x, s) for x in m.layers if x.mixer == "attention")
    assert compute.recompute_flop_per_sequence(m, s, "selective") == softmax
    head = compute.head_params(m)
    assert head == m.vocab_size * m.hidden_size + m.hidden_size  # V·h (untied) + final RMSNorm
    assert compute.recompute_flop_per_sequence(m, s, "full") == pytest.approx(
        compute.forward_flop_per_sequence(m, s) - 2 * head * s, rel=1e-12
    )
    with pytest.raises(ValueError, match="recompute='some'"):
        compute.recompute_flop_per_sequence(m, s, "some")


# ---------------------------------------------------------------- step time, term by term
def test_single_gpu_compute_and_optimizer_by_hand():
    m = load_model("llama-3.1-8b")
    s, b, mb = 4096, 2, 4
    r = evaluate(Plan.create(m, gpus=1, seq=s, micro_batch_size=b, micro_batches=mb, hardware=A100))
    st = step_time(r, DENSE, NO_HBM)
    # dense attention runs every pair; the backward is two forwards: model FLOP without recompute, at 0.5 × peak
    flop = compute.training_flop_per_sequence(m, s, "none", causal=False) * b * mb
    assert st.compute_s == pytest.approx(flop / (0.5 * PEAK_A100), rel=1e-12)
    # Adam reads every model-state byte (16 per parameter) and writes the optimizer's 12 again
    assert st.optimizer_s == pytest.approx(28 * m.params.total / HBM_A100, rel=1e-12)
    assert {k: v for k, v in st.terms().items() if k not in ("compute_s", "optimizer_s")} == dict.fromkeys(
        ("tp_s", "cp_s", "ep_s", "pp_s", "dp_exposed_s", "bubble_s"), 0.0
    )
    assert list(st.terms()) == list(TERMS) and st.total_s == pytest.approx(sum(st.terms().values()))


def test_element_wise_work_is_hbm_passes_times_stored_activations():
    m = load_model("llama-3.1-8b")
    r = evaluate(Plan.create(m, gpus=1, seq=4096, micro_batch_size=2, micro_batches=4, hardware=A100))
    with_hbm = dataclasses.replace(NO_HBM, hbm_passes=4.0)
    # the dense kernel stores the s² scores too: Korthikanti's sbh(34 + 5as/h) per layer
    stored = activation_bytes_per_layer(4096, 2, 4096, 32, 1, "none", False) * 32
    extra = step_time(r, DENSE, with_hbm).compute_s - step_time(r, DENSE, NO_HBM).compute_s
    assert extra == pytest.approx(4 * 4.0 * stored / HBM_A100, rel=1e-9)
    flash_stored = activation_bytes_per_layer(4096, 2, 4096, 32, 1, "selective", False) * 32
    flash_extra = step_time(r, Execution(), with_hbm).compute_s - step_time(r, Execution(), NO_HBM).compute_s
    assert flash_extra == pytest.approx(4 * 4.0 * flash_stored / HBM_A100, rel=1e-9)


def test_flash_attention_runs_half_the_pairs_at_its_documented_rate_and_recomputes_in_its_backward():
    m = load_model("llama-3.1-8b")
    r = evaluate(Plan.create(m, gpus=1, seq=8192, micro_batches=1, hardware=A100))
    gemm = 6 * m.flop_params * 8192 / (0.5 * PEAK_A100)
    attention = sum(compute.attention_forward_flop(x, 8192) for x in m.layers)  # causal: half the pairs
    assert fit_data()["documented"]["flash_attention_utilisation"]["a100-sxm-80gb"]["value"] == 0.5
    assert step_time(r, Execution(), NO_HBM).compute_s == pytest.approx(
        gemm + 3.5 * attention / (0.5 * PEAK_A100), rel=1e-12
    )


def test_tp_exposure_by_engine():
    r = evaluate(Plan.create("llama-3.1-70b", gpus=8, tp=8, seq=4096, micro_batches=1, hardware=A100))
    unit = 7 / 8 * 4096 * 8192 * 2 / (NVLINK_A100 * 0.8) + NCCL_BASE_LATENCY_S + 7 * NCCL_HOP_LATENCY_S["nvlink"]
    assert step_time(r, Execution(tp_overlap="none"), NO_HBM).tp_s == pytest.approx(8 * unit * 80, rel=1e-12)
    # Megatron-Core overlaps the column-parallel layers' input-gradient reduction with the weight-gradient GEMM
    assert step_time(r, Execution(tp_overlap="backward"), NO_HBM).tp_s == pytest.approx(6 * unit * 80, rel=1e-12)
    mb = micro_batch(r, 0, Execution(tp_overlap="full"), NO_HBM)
    assert mb.tp_s == pytest.approx(max(0.0, 8 * unit * 80 - mb.gemm_s), abs=1e-12) and mb.tp_s == 0.0
    # full recompute runs the forward's collectives again (4 units); Megatron's SP re-gather adds 2 more (one
    # all-gather per column-parallel linear, as the bytes ledger counts it), hidden by "backward"
    full = evaluate(
        Plan.create(
            "llama-3.1-70b",
            gpus=8,
            tp=8,
            seq=4096,
            micro_batches=1,
            hardware=A100,
            recompute="full",
            accounting="megatron",
        )
    )
    assert step_time(full, Execution(tp_overlap="none"), NO_HBM).tp_s == pytest.approx(14 * unit * 80, rel=1e-12)
    assert step_time(full, Execution(tp_overlap="backward"), NO_HBM).tp_s == pytest.approx(10 * unit * 80, rel=1e-12)
    assert execution_for("megatron").tp_overlap == "backward" and execution_for("fsdp2").tp_overlap == "none"


def test_dp_sync_hides_under_the_last_backward_but_one_bucket():
    r = evaluate(Plan.create("llama-3.1-8b", gpus=8, dp=8, seq=4096, micro_batches=2, hardware=A100))
    busy = r.grad_sync_bytes["dp"] / (NVLINK_A100 * 0.8) + 32 * collective_latency_s("all-reduce", 8, "nvlink")
    backward = micro_batch(r, 0, Execution(), NO_HBM).backward_s
    assert busy < backward
    assert step_time(r, Execution(), NO_HBM).dp_exposed_s == pytest.approx(busy / 32, rel=1e-12)  # the last bucket
    assert step_time(r, Execution(dp_overlap=False), NO_HBM).dp_exposed_s == pytest.approx(busy, rel=1e-12)


def test_zero3_gathers_every_micro_batch_under_each_forward_and_backward():
    r = evaluate(
        Plan.create("llama-3.1-8b", gpus=8, dp=8, zero=3, seq=4096, micro_batches=4, hardware=A100, accounting="fsdp2")
    )
    total = r.grad_sync_bytes["dp"] / (NVLINK_A100 * 0.8)
    # fsdp2 ZeRO-3: bf16 gathers forward (2) and backward (2), fp32 reduce-scatter (4), each every micro-batch
    lat = 32 * collective_latency_s("all-gather", 8, "nvlink")
    fwd, bwd = total * 2 / 8 / 4 + lat, total * 6 / 8 / 4 + 2 * lat
    mb = micro_batch(r, 0, Execution(), NO_HBM)
    expected = 4 * (min(fwd, max(0, fwd - mb.forward_s) + fwd / 32) + min(bwd, max(0, bwd - mb.backward_s) + bwd / 32))
    assert step_time(r, Execution(), NO_HBM).dp_exposed_s == pytest.approx(expected, rel=1e-12)


def test_pipeline_bubble_sends_and_scatter_gather():
    r = evaluate(
        Plan.create(
            "llama-3.1-70b", gpus=32, tp=8, pp=4, seq=4096, micro_batches=8, virtual_stages=2, hardware=A100, sp=False
        )
    )
    ex = Execution(tp_overlap="backward")
    st = step_time(r, ex, NO_HBM)
    sent = r.comm_bytes_per_step["pp"] / 8  # lab ledger: s·b·h per send, × 2v
    per_mb = sent / (25e9 * 0.8) + 4 * collective_latency_s("send", 2, "infiniband")
    assert st.pp_s == pytest.approx(8 * per_mb, rel=1e-12)
    slowest = max((micro_batch(r, k, ex, NO_HBM) for k in range(4)), key=lambda x: x.total_s)
    assert st.bubble_s == pytest.approx(3 / 2 * (slowest.total_s + per_mb), rel=1e-12)  # (p−1)/v slots
    gathered = step_time(r, dataclasses.replace(ex, pp_scatter_gather=True), NO_HBM)
    assert gathered.pp_s == pytest.approx(
        8 * (sent / 8 / (25e9 * 0.8) + 4 * collective_latency_s("send", 2, "infiniband"))
    )


def test_cp_ring_hides_under_attention_unless_all_gathered():
    r = evaluate(
        Plan.create(
            "llama-3.1-70b",
            gpus=32,
            tp=8,
            cp=4,
            seq=131072,
            micro_batches=1,
            hardware="h100-sxm-80gb",
            recompute="full",
        )
    )
    kv = 3 / 4 * 131072 * 256 * 2  # K+V of one KV head of 128 per TP rank, (c−1)/c of the sequence
    per_pass = kv / (50e9 * 0.8) + 3 * collective_latency_s("send", 2, "infiniband")
    passes = 4  # forward, backward twice (K/V and their gradients), recompute
    assert step_time(r, Execution(cp_overlap=False), NO_HBM).cp_s == pytest.approx(passes * 80 * per_pass, rel=1e-12)
    assert step_time(r, Execution(), NO_HBM).cp_s == 0.0  # 131K tokens: attention outlasts the ring


def test_dualpipe_hides_the_all_to_all_behind_compute():
    r = evaluate(
        Plan.create(
            "deepseek-v3",
            gpus=2048,
            pp=16,
            ep=64,
            zero=1,
            seq=4096,
            micro_batches=120,
            uneven_stages=True,
            hardware="h800-sxm-80gb",
            recompute="selective",
        )
    )
    one = step_time(r, Execution())
    two = step_time(r, Execution(pipeline="dualpipe"))
    k = max(range(16), key=lambda i: micro_batch(r, i, Execution()).total_s)
    mb = micro_batch(r, k, Execution())
    assert one.ep_s == pytest.approx(120 * mb.ep_s)
    assert two.ep_s == pytest.approx(120 * max(0.0, mb.ep_s - mb.compute_s)) and two.pp_s == 0.0
    assert two.bubble_s == pytest.approx(7 * (mb.forward_s + mb.backward_s / 2))  # (p/2 − 1)(F + B/2)
    assert dualpipe(r.plan, Execution(pipeline="dualpipe"))
    for other in (r.plan.replace(micro_batches=119), r.plan.replace(virtual_stages=2)):  # DualPipe needs even m,
        assert not dualpipe(other, Execution(pipeline="dualpipe"))  # and runs its own chunks
    assert not dualpipe(r.plan, Execution())


def test_collective_latency_is_nccl_ring_simple():
    assert collective_latency_s("all-reduce", 8, "nvlink") == pytest.approx(8.4e-6 + 14 * 3.4e-6)
    assert collective_latency_s("reduce-scatter", 128, "infiniband") == pytest.approx(8.4e-6 + 127 * 14e-6)
    assert collective_latency_s("all-gather", 1, "nvlink") == collective_latency_s("send", 2, None) == 0.0


# ---------------------------------------------------------------- MFU, HFU, the report's keys
def test_step_report_mfu_hfu_and_tokens():
    r = evaluate(
        Plan.create(
            "llama-3.1-70b",
            gpus=64,
            tp=8,
            pp=2,
            dp=4,
            seq=8192,
            global_batch=64,
            recompute="full",
            hardware="h100-sxm-80gb",
            accounting="megatron",
        )
    )
    d = step_report(r)
    st = step_time(r)
    assert d["step_time_s"] == st.total_s and d["step_time_terms_s"] == st.terms()
    assert d["tokens_per_step"] == 64 * 8192 and d["peak_flop_per_s"] == 989.5e12
    assert d["mfu"] == pytest.approx(model_flop_per_step(r) / (st.total_s * 64 * 989.5e12), rel=1e-12)
    assert d["hfu"] / d["mfu"] == pytest.approx(hardware_flop_per_step(r) / model_flop_per_step(r), rel=1e-12)
    m = r.plan.model
    assert hardware_flop_per_step(r) - model_flop_per_step(r) == pytest.approx(
        64 * compute.recompute_flop_per_sequence(m, 8192, "full", causal=False), rel=1e-12
    )
    assert d["execution"] == {
        "attention": "flash",
        "tp_overlap": "backward",
        "cp_overlap": True,
        "dp_overlap": True,
        "pipeline": "1f1b",
        "pp_scatter_gather": False,
    }
    assert mfu(r, 2.0, 1e15) == pytest.approx(model_flop_per_step(r) / (2.0 * 64 * 1e15))
    none = evaluate(r.plan.replace(recompute="none"))
    assert hfu(none, 1.0) == mfu(none, 1.0)


def test_bad_inputs_name_the_factor():
    with pytest.raises(ValueError, match="attention='triton' must be one of flash, dense"):
        Execution(attention="triton")
    with pytest.raises(ValueError, match="pipeline='gpipe'"):
        Execution(pipeline="gpipe")
    with pytest.raises(ValueError, match="dp_overlap=1 must be True or False"):
        Execution(dp_overlap=1)  # type: ignore[arg-type]  # an int, on purpose
    with pytest.raises(ValueError, match=r"matmul_efficiency=1.5 must lie in \[0.05, 1.0\]"):
        Calibration(1.5, 4.0, 0.8)
    hw = dataclasses.replace(A100, peak_bf16_flop_per_s=None)
    r = evaluate(Plan.create("llama-3.1-8b", gpus=1, hardware=hw))
    with pytest.raises(ValueError, match="hardware 'a100-sxm-80gb' has no peak_bf16_flop_per_s"):
        step_time(r)
    with pytest.raises(ValueError, match="step_s=0"):
        mfu(r, 0, 1e15)


# ---------------------------------------------------------------- calibration and validation
@pytest.fixture(scope="module")
def rows():
    return C.validate()


def test_stored_constants_are_physical_and_reproduced_by_the_fit():
    stored = calibration()
    for name, (lo, hi) in PHYSICAL_RANGES.items():
        assert lo < getattr(stored, name) < hi
    assert 0.5 < stored.matmul_efficiency < 0.85  # cuBLAS on A100 sustains 60-80 % of peak on large GEMMs
    assert 0.6 < stored.link_efficiency < 0.95  # NCCL bus bandwidth over line rate
    refit = C.fit()
    for name in PHYSICAL_RANGES:
        assert getattr(refit, name) == pytest.approx(getattr(stored, name), rel=2e-3), name
    assert fit_data()["fit_set"]["runs"] == [r["id"] for r in C.published_runs() if r["id"].startswith(C.FIT_SET)]


def test_validation_meets_the_targets_on_the_held_out_runs(rows):
    s = C.summary(rows)
    assert s["held out"]["n"] == 18 and s["fit set"]["n"] == 10
    assert s["held out"]["median"] <= C.TARGET_MEDIAN and s["held out"]["max"] <= C.TARGET_MAX
    assert s["fit set"]["median"] <= C.TARGET_MEDIAN and s["fit set"]["max"] <= C.TARGET_MAX
    stored = fit_data()["validation"]
    for group, e in s.items():
        # stored by scripts/validate_steptime.py --write-fit; rerun it when the model or the plans change
        assert stored[group]["n"] == e["n"], group
        assert stored[group]["median"] == pytest.approx(e["median"], abs=5e-4), group
        assert stored[group]["max"] == pytest.approx(e["max"], abs=5e-4), group


def test_every_plannable_run_is_scored_or_says_why(rows):
    assert {r.group for r in rows} == {
        "fit: Narayanan 2021",
        "held out: Korthikanti 2022",
        "held out: Llama 3",
        "held out: other runs",
        "not scored",
    }
    assert [r.id for r in rows if not r.scored] == ["deepseek-v3-pretraining"]
    planned = {r["id"] for r in C.plannable_runs()}
    for r in C.published_runs():
        assert r["id"] in planned or C._lookup(C.UNSCORED, r["id"]), r["id"]


def test_published_step_times_follow_each_papers_flop_count(rows):
    by = {r.id: r for r in rows}
    one_t = by["narayanan2021-t1-1008.0b"]
    assert one_t.published.step_s == pytest.approx(narayanan_eq3_flop(3072, 2048, 128, 25600, 51200) / (163e12 * 3072))
    assert by["korthikanti2022-175b-full-recompute"].published.step_s == 18.13
    llama = by["llama3-405b-8k-16384gpu"]
    assert llama.published.step_s == pytest.approx(model_flop_per_step(evaluate(llama.plan)) / (400e12 * 16384))
    assert by["torchtitan-a100-llama3-70b-full"].published.step_s == pytest.approx(8192 / 331)
    k = by["korthikanti2022-175b"]
    assert (k.mfu[0], k.hfu[0]) == (0.514, 0.528)
    assert k.mfu[1] == pytest.approx(model_flop_per_step(evaluate(k.plan)) / (k.predicted_s * 64 * 312e12))
    assert by["korthikanti2022-175b-full-recompute"].mfu[0] is None


def test_tie_band_is_the_median_ratio_error(rows):
    errs = C.ratio_errors(rows)
    assert len(errs) == 11
    band = fit_data()["tie_band"]["value"]
    assert band == C.tie_band(rows) == math.ceil(100 * sorted(errs)[5]) / 100 == 0.03
    # the plan checker's search line: the largest of the same errors (Llama 3 405B at 8K and 128K on 16,384 GPUs)
    from meshplan.search import ratio_uncertainty

    assert ratio_uncertainty() == fit_data()["tie_band"]["worst"] == C.ratio_uncertainty(rows) == 0.10
    assert max(errs) == pytest.approx(0.0951, abs=1e-4)
    # the stored validation figures are the stored constants' (fit_record, which the fit script writes)
    record = C.fit_record(C.Calibration(**{k: v["value"] for k, v in fit_data()["constants"].items()}), rows)
    assert (record["tie_band"], record["validation"]) == (fit_data()["tie_band"], fit_data()["validation"])


@pytest.mark.parametrize("rate", ["hbm_bytes_per_s", "peak_bf16_flop_per_s", "nvlink_bytes_per_s"])
def test_a_rate_too_small_for_a_finite_step_time_is_named(rate):
    """Issue 29: a near-zero rate in a hardware file gave Infinity (not JSON) or an error naming the wrong factor."""
    from dataclasses import replace

    from meshplan.spec.hardware import load_hardware

    tiny: dict[str, Any] = {rate: 1e-300}
    hw = replace(load_hardware("h100-sxm-80gb"), **tiny)
    report = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, hardware=hw))
    with pytest.raises(ValueError, match=rf"^hardware 'h100-sxm-80gb' has {rate}=1e-300, too small for a finite step"):
        step_time(report)


def test_the_rate_named_is_the_failing_terms_own():
    """A single-node TP 8 plan whose NVLink is too slow names NVLink, even when InfiniBand (which this plan does
    not use) is slower still."""
    from dataclasses import replace

    from meshplan.spec.hardware import load_hardware

    tiny: dict[str, Any] = {"nvlink_bytes_per_s": 1e-300, "infiniband_bytes_per_s": 1e-301}
    hw = replace(load_hardware("h100-sxm-80gb"), **tiny)
    report = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, hardware=hw))
    with pytest.raises(ValueError, match=r"has nvlink_bytes_per_s=1e-300, too small for a finite step time \(tp_s"):
        step_time(report)
