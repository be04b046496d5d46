"""Chapter 8's numbers (notebooks/08_4d_lab.ipynb), each asserted to the digit the chapter prints; GB = 1e9 B.

The lab tables themselves are asserted in test_lab_numbers.py; the search in test_search.py; the export in
test_export.py."""

from __future__ import annotations

import pytest

from meshplan import Plan, evaluate, load_model, pp, published, zero
from meshplan.grid import nodes_spanned
from meshplan.lab import LAB_8_GPUS, LAB_64_GPUS, lab_plan, lab_reports
from meshplan.plan import spread_layers, stage_inflight_layers
from meshplan.search import step_time
from meshplan.units import fmt_gb, fmt_mb, fmt_mib, fmt_pct

ANCHOR = "qwen3.8-27b"


def gb(x: float) -> str:
    return fmt_gb(x)


# ---------------------------------------------------------------- one machine: the three things to try
def test_three_things_to_try_on_one_machine():
    r = dict(lab_reports(LAB_8_GPUS))
    dp_full, dp_sel, tp8, tp2pp4 = (r[row["label"]] for row in LAB_8_GPUS)
    floor = zero.model_states_bytes(27_781_427_952, 3, 8)
    # 1. ZeRO-3 full -> selective no longer fits
    assert (gb(dp_full.memory_bytes["total"]), gb(dp_sel.memory_bytes["total"])) == ("58.2 GB", "101.2 GB")
    assert (gb(dp_full.memory_bytes["activations"]), gb(dp_sel.memory_bytes["activations"])) == ("2.7 GB", "45.6 GB")
    assert dp_full.fits and not dp_sel.fits
    assert (gb(floor), gb(80e9 - floor)) == ("55.6 GB", "24.4 GB")
    # 2. TP 8 selective fits; the heaviest dimension moves from DP to TP
    assert (gb(tp8.memory_bytes["activations"]), gb(tp8.memory_bytes["total"]), tp8.fits) == ("5.7 GB", "61.3 GB", True)
    assert (dp_sel.heaviest_dim, tp8.heaviest_dim) == ("dp", "tp")
    assert (gb(dp_full.comm_bytes_per_step["dp"]), gb(tp8.comm_bytes_per_step["tp"])) == ("145.9 GB", "150.3 GB")
    # 150.3 GB at 160 GB/s × the fitted link efficiency, plus NCCL's latency per collective step (steptime)
    assert f"{step_time(tp8).tp_s:.2f}" == "1.39"
    # 3. TP 2 x PP 4: the bubble as m goes 8 -> 32
    m32 = evaluate(lab_plan({**LAB_8_GPUS[3], "micro_batches": 32}))
    assert (fmt_pct(tp2pp4.bubble), fmt_pct(m32.bubble)) == ("37.5 %", "9.4 %")
    assert (gb(tp2pp4.comm_bytes_per_step["pp"]), fmt_mb(pp.boundary_bytes(4096, 1, 5120))) == ("0.7 GB", "41.9 MB")
    # every plan lands on the same model-state floor
    assert {gb(x.memory_bytes["model_states"]) for x in r.values()} == {"55.6 GB"}
    # full recompute: one more forward, 8 instead of 6 FLOP per parameter per token
    from meshplan.compute import step_flop
    assert f"{step_flop(1, 1, 'full') / step_flop(1, 1):.2f}" == "1.33"


def test_sixty_four_gpus_and_long_context():
    r64 = [r for _, r in lab_reports(LAB_64_GPUS)]
    z1 = r64[2]
    assert (gb(z1.comm_bytes_per_step["tp"]), gb(z1.comm_bytes_per_step["dp"]), gb(z1.comm_bytes_per_step["pp"])) == \
        ("75.2 GB", "5.2 GB", "0.7 GB")
    assert (z1.link["tp"], z1.link["dp"], z1.link["pp"]) == ("nvlink", "infiniband", "infiniband")
    assert f"{z1.comm_bytes_per_step['tp'] / z1.comm_bytes_per_step['dp']:.0f}" == "14"
    assert [fmt_pct(r.bubble) for r in r64] == ["87.5 %", "21.9 %", "12.5 %"]
    assert fmt_pct(r64[1].bubble_share) == "17.9 %"
    cp8 = evaluate(Plan.create(ANCHOR, gpus=64, tp=8, cp=8, seq=131072, zero=1, recompute="selective"))
    nocp = evaluate(Plan.create(ANCHOR, gpus=64, tp=8, pp=8, seq=131072, recompute="selective"))
    assert (gb(nocp.memory_bytes["activations"]), gb(nocp.memory_bytes["total"]), nocp.fits) == \
        ("182.5 GB", "189.5 GB", False)
    assert (gb(cp8.memory_bytes["activations"]), gb(cp8.memory_bytes["total"]), cp8.fits) == ("22.8 GB", "41.9 GB", True)
    kv = cp8.comm_bytes_per_step["cp"] - cp8.grad_sync_bytes["cp"]
    assert (gb(kv), cp8.link["cp"]) == ("15.0 GB", "infiniband")


# ---------------------------------------------------------------- real configurations
def test_uneven_stages_of_the_published_plans():
    assert spread_layers(126, 16) == (7,) + (8,) * 14 + (7,)
    assert spread_layers(61, 16) == (3, 3) + (4,) * 13 + (3,)
    with pytest.raises(ValueError, match="pp=16 does not divide 126 layers"):
        Plan.create("llama-3.1-405b", gpus=16384, tp=8, pp=16)
    with pytest.raises(ValueError, match="layers_per_stage adds up to 125, not 126 layers"):
        Plan.create("llama-3.1-405b", gpus=16384, tp=8, pp=16, layers_per_stage=(7,) * 3 + (8,) * 13)
    with pytest.raises(ValueError, match="layers_per_stage has 15 entries but pp=16"):
        Plan.create("llama-3.1-405b", gpus=16384, tp=8, pp=16, layers_per_stage=(8,) * 15)
    with pytest.raises(ValueError, match="virtual_stages=8 needs at least 8 layers"):
        Plan.create("llama-3.1-405b", gpus=16384, tp=8, pp=16, virtual_stages=8, micro_batches=16,
                    layers_per_stage=spread_layers(126, 16))
    # the most-loaded stage for activations: rank 1 holds 8 layers x 15 in-flight micro-batches
    assert stage_inflight_layers(spread_layers(126, 16), 16) == 120.0


def llama_report(row):
    return evaluate(Plan.create("llama-3.1-405b", gpus=row["gpus"], tp=row["tp"], cp=row["cp"], pp=row["pp"], zero=2,
                                recompute="selective", seq=row["seq"], micro_batches=row["batch_per_dp"],
                                layers_per_stage=spread_layers(126, 16)))


def test_llama3_table4_evaluated():
    rows = published.value("llama3_table4")
    reports = [llama_report(r) for r in rows]
    assert [gb(r.memory_bytes["total"]) for r in reports] == ["75.6 GB", "75.2 GB", "75.2 GB"]
    assert all(r.fits for r in reports)
    assert [gb(r.comm_bytes_per_step["tp"]) for r in reports] == ["481.0 GB", "240.5 GB", "240.5 GB"]
    assert [r.link["tp"] for r in reports] == ["nvlink"] * 3
    assert (gb(reports[2].comm_bytes_per_step["cp"]), reports[2].link["cp"]) == ("20.1 GB", "infiniband")
    # of the CP column, K/V is 8.1 GB; the other 12.1 GB is the CP part of the ZeRO-2 gradient ring
    kv = reports[2].comm_bytes_per_step["cp"] - reports[2].grad_sync_bytes["cp"]
    assert (gb(kv), gb(reports[2].grad_sync_bytes["cp"])) == ("8.1 GB", "12.1 GB")
    assert fmt_pct(reports[1].bubble) == "93.8 %"
    for r in rows:
        assert published.tokens_per_step(r["seq"], r["batch_per_dp"], r["dp"]) == 16_777_216
    v1 = published.value("llama3_table4_row3_dp_v1")
    assert (v1, published.tokens_per_step(131072, 16, v1)) == (4, 8_388_608)


def deepseek(order="tp-cp-ep-dp-pp", gpus_per_node=8):
    pub, shape = published.value("deepseek_v3_parallelism"), published.value("deepseek_v3_pretraining_shape")
    dp = pub["gpus"] // pub["pp"]
    return Plan.create("deepseek-v3", gpus=pub["gpus"], tp=pub["tp"], pp=pub["pp"], ep=pub["ep"], zero=pub["zero"],
                       recompute="selective", seq=shape["seq"], micro_batches=shape["batch_sequences"] // dp,
                       layers_per_stage=spread_layers(61, 16), stage_balance="max", order=order,
                       gpus_per_node=gpus_per_node)


def test_deepseek_v3_evaluated():
    plan = deepseek()
    assert (plan.dp, plan.micro_batches) == (128, 120)
    r = evaluate(plan)
    # the most-loaded stage's own states plus its own activations (stage 2: four MoE layers, 14 micro-batches in
    # flight); before the per-stage maximum this read 66.9 GB, the heaviest stage's states plus stage 2's activations
    assert (gb(r.memory_bytes["total"]), r.fits, r.stage) == ("66.8 GB", True, 2)
    assert (gb(r.comm_bytes_per_step["ep"]), r.link["ep"], r.heaviest_dim) == ("887.9 GB", "infiniband", "ep")
    st = step_time(r)
    # the lab ledger sends every token's hidden state to all 8 experts in bf16 (DeepSeek-V3 dispatches FP8 to at most
    # 4 nodes), so its all-to-all outweighs the compute: 1.55, against the report's "approximately 1:1"
    assert (f"{st.ep_s:.1f}", f"{st.compute_s:.1f}", f"{st.ep_s / st.compute_s:.2f}") == ("23.9", "15.4", "1.55")


def test_deepseek_ep_spans_eight_nodes_only_in_megatron_order():
    assert nodes_spanned(deepseek("tp-cp-pp-dp").mesh, 0, "ep") == 64
    assert nodes_spanned(deepseek("tp-cp-ep-dp-pp").mesh, 0, "ep") == 8
    assert nodes_spanned(deepseek("tp-cp-ep-dp-pp", 4).mesh, 0, "ep") == 16
    assert nodes_spanned(deepseek("tp-cp-pp-dp").mesh, 0, "pp") == 2
    assert nodes_spanned(deepseek("tp-cp-ep-dp-pp").mesh, 0, "pp") == 16
    assert deepseek("tp-cp-ep-dp-pp").mesh.group(0, "ep") == tuple(range(64))


# ---------------------------------------------------------------- the tuning procedure: seed 004's 70B example
def guide(recompute="none", zero_stage=0):
    ex = published.value("megatron_guide_llama3_70b_64_gpus")
    return evaluate(Plan.create(ex["model"], gpus=64, tp=ex["tp"], pp=ex["pp"], cp=ex["cp"], seq=ex["seq"],
                                micro_batch_size=1, micro_batches=ex["global_batch_size"] // 2, recompute=recompute,
                                zero=zero_stage, order="tp-cp-ep-dp-pp"))


def test_seed_004_example_numbers():
    ex = published.value("megatron_guide_llama3_70b_64_gpus")
    assert ex["gpus"] // (ex["tp"] * ex["pp"] * ex["cp"]) == 2
    assert ex["global_batch_size"] % (2 * ex["micro_batch_size"]) == 0 and ex["global_batch_size"] // 2 == 256
    m = load_model(ex["model"])
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (80, 8192, 64)
    r = {rc: guide(rc) for rc in ("none", "selective", "full")}
    assert [gb(x.memory_bytes["total"]) for x in r.values()] == ["308.1 GB", "93.4 GB", "71.9 GB"]
    assert [x.fits for x in r.values()] == [False, False, True]
    assert gb(r["none"].memory_bytes["model_states"]) == "70.6 GB"
    assert fmt_pct(r["none"].bubble) == "1.2 %"
    z1 = guide("selective", 1)
    assert (gb(z1.memory_bytes["model_states"]), gb(z1.memory_bytes["total"]), z1.fits) == ("30.9 GB", "53.7 GB", True)


# ---------------------------------------------------------------- the exercises' default answers
def test_exercise_defaults():
    r8 = evaluate(Plan.create(ANCHOR, gpus=8, zero=3, recompute="full"))
    assert f"{r8.memory_bytes['total'] / 1e9:,.1f}" == "58.2"
    r64 = evaluate(Plan.create(ANCHOR, gpus=64, tp=8, pp=2, zero=1, recompute="full", micro_batches=8))
    assert (r64.heaviest_dim, f"{r64.comm_bytes_per_step['tp'] / 1e9:,.1f}") == ("tp", "75.2")
    assert f"{100 * pp.bubble_fraction(8, 8):.1f}" == "87.5"
    assert f"{100 * pp.bubble_fraction(8, 64, 2):.1f}" == "5.5"
    small = evaluate(Plan.create("small-3.7m", gpus=1)).memory_bytes["model_states"]
    assert fmt_mib(small) == "56.3 MiB"
    with pytest.raises(ValueError, match="tp×cp×pp = 8×1×4 = 32 does not divide gpus=8"):
        Plan.create(ANCHOR, gpus=8, tp=8, pp=4)   # one of exercise 1's combinations: shown as the message
