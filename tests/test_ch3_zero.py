"""Chapter 3 (ZeRO and FSDP): the ladder, the communication, the conventions and the estimators.

Every key number the chapter prints is asserted to its printed digit (GB = 1e9 B, GiB = 2^30 B).
"""

from __future__ import annotations

import pytest

from meshplan import FSDP2_BPP, Plan, evaluate, MEGATRON_BPP, DEFAULT_BPP, activations, derive, dp, estimators, load_model, zero
from meshplan.units import GB, GiB

P = 27_781_427_952
LL = 248_320 * 5_120      # the anchor's largest module: embedding (= untied head), V·h
S, B, H, A, L = 4_096, 1, 5_120, 24, 64


def gb(x: float, digits: int = 1) -> str:
    return f"{x / GB:,.{digits}f}"


def test_ladder_on_8_gpus():
    assert [gb(zero.model_states_bytes(P, st, 8)) for st in range(4)] == ["444.5", "152.8", "104.2", "55.6"]
    assert [gb(zero.model_states_bytes(P, st, 8), 2) for st in range(4)] == ["444.50", "152.80", "104.18", "55.56"]
    assert [gb(zero.model_states_bytes(P, st, 64), 2) for st in range(4)] == ["444.50", "116.33", "61.64", "6.95"]


def test_ladder_symbolic_matches_numeric():
    lad = derive.zero_ladder()
    for stage, expr in lad.items():
        for n in (1, 2, 8, 64, 1000):
            assert float(expr.subs({derive.Psi: P, derive.N: n})) == pytest.approx(zero.model_states_bytes(P, stage, n), rel=1e-12)


def test_zero3_comm_is_one_and_a_half_dp():
    assert gb(zero.zero_sync_bytes(8, 2 * P, 3)) == "145.9"
    assert gb(dp.dp_bytes_per_step(P, 8)) == "97.2"
    assert derive.zero3_over_dp() == derive.sp.Rational(3, 2)
    vols = derive.zero_stage_volume()
    for stage in range(4):
        terms = zero.zero_sync_terms(8, 2 * P, stage)
        assert sum(terms.values()) == pytest.approx(zero.zero_sync_bytes(8, 2 * P, stage), rel=1e-12)
        assert float(vols[stage].subs({derive.Psi: 2 * P, derive.N: 8})) == pytest.approx(sum(terms.values()), rel=1e-12)
    assert [gb(x) for x in zero.zero_sync_terms(8, 2 * P, 1).values()] == ["48.6", "48.6"]
    assert list(zero.zero_sync_terms(8, 2 * P, 3)) == ["all-gather (weights, forward)", "all-gather (weights, backward)",
                                                        "reduce-scatter (gradients)"]


def test_conventions_16_18_and_fsdp2():
    assert DEFAULT_BPP.total == 16 and MEGATRON_BPP.total == 18 and FSDP2_BPP.total == 16
    assert (FSDP2_BPP.weights, FSDP2_BPP.grads, FSDP2_BPP.adam_m + FSDP2_BPP.adam_v, FSDP2_BPP.master) == (4, 4, 8, 0)
    assert gb(zero.model_states_bytes(P, 3, 8, MEGATRON_BPP)) == "62.5"
    assert gb(zero.model_states_bytes(P, 3, 8, FSDP2_BPP)) == "55.6"


def test_deepspeed_estimators_worked_numbers():
    """estimators.md §2.3: no offload, 8 GPUs per node, N = 8 and 64."""
    z2 = {n: estimators.zero2_model_states(P, 8, n // 8, cpu_offload=False)[1] for n in (8, 64)}
    z2_old = {n: estimators.zero2_model_states(P, 8, n // 8, cpu_offload=False, legacy=True)[1] for n in (8, 64)}
    z3 = {n: estimators.zero3_model_states(P, LL, 8, n // 8, cpu_offload=False)[1] for n in (8, 64)}
    assert z2 == {8: 118_071_068_796, 64: 63_376_382_515}
    assert z2_old == {8: 166_688_567_712, 64: 118_071_068_796}
    assert z3 == {8: 67_593_806_492, 64: 12_899_120_211}
    assert [f"{z2[8] / GiB:.2f}", f"{z2[64] / GiB:.2f}"] == ["109.96", "59.02"]
    assert [f"{z2_old[8] / GiB:.2f}", f"{z2_old[64] / GiB:.2f}"] == ["155.24", "109.96"]
    assert [f"{z3[8] / GiB:.2f}", f"{z3[64] / GiB:.2f}"] == ["62.95", "12.01"]
    # always above the course's 16-byte accounting (the point of the comparison)
    assert z2[8] > zero.model_states_bytes(P, 2, 8) and z3[8] > zero.model_states_bytes(P, 3, 8)
    assert estimators.zero3_model_states(P, LL, 8, 1, cpu_offload=False)[2] == 4 * LL


def test_deepspeed_offload_branches():
    assert estimators.zero2_model_states(100, 8) == (int(100 * 32 * 1.5), 200)
    assert estimators.zero3_model_states(100, 10, 8) == (int(100 * 18 * 1.5), 40, 40)
    assert estimators.zero3_model_states(800, 10, 8, cpu_offload_params=False) == (int(800 * 16 * 1.5), 40 + 200, 40)
    assert estimators.zero3_model_states(800, 10, 8, cpu_offload=False, zero_init=False) == (int(800 * 32 * 1.5), 40 + 1800, 40)
    with pytest.raises(ValueError, match="num_gpus_per_node=0"):
        estimators.zero2_model_states(100, 0)


def test_megatron_worked_numbers():
    """estimators.md §1.5: Llama-3.1-70B, t = 8, p = 8, DP = 1."""
    args = estimators.MegatronArgs(8192, 80, 64, 128, 28672, 129_024, num_query_groups=8,
                                   tensor_model_parallel_size=8, pipeline_model_parallel_size=8)
    assert estimators.megatron_layer_params(args)[0] == 855_654_400
    assert estimators.megatron_layer_params(args)[0] == load_model("llama-3.1-70b").layer_params[0]
    got = estimators.megatron_weight_and_optimizer_bytes(args)
    assert got == 21_630_396_672 == 1_201_688_704 * 18
    assert f"{estimators.megatron_mib(got):,.2f}" == "20,628.35"
    same = estimators.MegatronArgs(**{**args.__dict__, "use_distributed_optimizer": True})
    assert estimators.megatron_weight_and_optimizer_bytes(same) == got          # 6 + 12/1 = 18


def test_megatron_mla_matches_the_hf_count():
    ds = load_model("deepseek-v3")
    args = estimators.MegatronArgs(7168, 61, 128, 128, 18432, 129_280, multi_latent_attention=True,
                                   q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
                                   v_head_dim=128, swiglu=True)
    dense, _ = estimators.megatron_layer_params(args)
    attn = dense - 2 * 7168 * (18432 * 1.5 + 1)
    assert attn == 187_107_328
    assert dense == ds.layer_params[0]


def test_where_it_gets_stuck_activations():
    activ = activations.activation_bytes(S, B, H, A, L, recompute="selective")
    left = 80e9 - zero.model_states_bytes(P, 3, 8)
    assert (gb(activ), gb(left)) == ("45.6", "24.4")
    # ZeRO does not touch activations: a whole plan gives the same activations at every stage and N
    for stage in range(4):
        for n in (8, 64):
            r = evaluate(Plan.create("qwen3.8-27b", gpus=n, zero=stage, recompute="selective"))
            assert r.memory_bytes["activations"] == activ
    r = evaluate(Plan.create("qwen3.8-27b", gpus=8, zero=3, recompute="selective"))
    assert (gb(r.memory_bytes["total"]), r.fits) == ("101.2", False)
