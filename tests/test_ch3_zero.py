"""Chapter 3 (ZeRO and FSDP): the ladder, the communication, the two ledgers per micro-batch, FSDP2's units, prefetch
and HSDP, the conventions and the estimators.

Every key number the chapter prints is asserted to its printed digit (GB = 1e9 B, GiB = 2^30 B), from the library calls
the chapter makes.
"""

from __future__ import annotations

from typing import Any

import pytest

from meshplan import DEFAULT_BPP, FSDP2_BPP, MEGATRON_BPP, Plan, evaluate, load_hardware, load_model
from meshplan.core import collectives
from meshplan.core.resources import read_json
from meshplan.core.units import GB, GiB
from meshplan.course import derive, estimators
from meshplan.parallel import activations, dp, zero
from meshplan.steptime import breakdowns

P = 27_781_427_952
LL = 248_320 * 5_120  # the anchor's largest module: embedding (= untied head), V·h
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
            assert float(expr.subs({derive.Psi: P, derive.N: n})) == pytest.approx(
                zero.model_states_bytes(P, stage, n), rel=1e-12
            )


def test_zero3_comm_is_one_and_a_half_dp():
    assert gb(zero.zero_sync_bytes(8, 2 * P, 3)) == "145.9"
    assert gb(dp.dp_bytes_per_step(P, 8)) == "97.2"
    assert derive.zero3_over_dp() == derive.sp.Rational(3, 2)
    vols = derive.zero_stage_volume()
    for stage in range(4):
        terms = zero.zero_sync_terms(8, 2 * P, stage)
        assert sum(terms.values()) == pytest.approx(zero.zero_sync_bytes(8, 2 * P, stage), rel=1e-12)
        assert float(vols[stage].subs({derive.Psi: 2 * P, derive.N: 8})) == pytest.approx(
            sum(terms.values()), rel=1e-12
        )
    assert [gb(x) for x in zero.zero_sync_terms(8, 2 * P, 1).values()] == ["48.6", "48.6"]
    assert list(zero.zero_sync_terms(8, 2 * P, 3)) == [
        "all-gather (weights, forward)",
        "all-gather (weights, backward)",
        "reduce-scatter (gradients)",
    ]


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
    assert estimators.zero3_model_states(800, 10, 8, cpu_offload=False, zero_init=False) == (
        int(800 * 32 * 1.5),
        40 + 1800,
        40,
    )
    with pytest.raises(ValueError, match="num_gpus_per_node=0"):
        estimators.zero2_model_states(100, 0)


def test_megatron_worked_numbers():
    """estimators.md §1.5: Llama-3.1-70B, t = 8, p = 8, DP = 1."""
    args = estimators.MegatronArgs(
        8192,
        80,
        64,
        128,
        28672,
        129_024,
        num_query_groups=8,
        tensor_model_parallel_size=8,
        pipeline_model_parallel_size=8,
    )
    assert estimators.megatron_layer_params(args)[0] == 855_654_400
    assert estimators.megatron_layer_params(args)[0] == load_model("llama-3.1-70b").layer_params[0]
    got = estimators.megatron_weight_and_optimizer_bytes(args)
    assert got == 21_630_396_672 == 1_201_688_704 * 18
    assert f"{estimators.megatron_mib(got):,.2f}" == "20,628.35"
    same = estimators.MegatronArgs(**{**args.__dict__, "use_distributed_optimizer": True})
    assert estimators.megatron_weight_and_optimizer_bytes(same) == got  # 6 + 12/1 = 18


def test_megatron_mla_matches_the_hf_count():
    ds = load_model("deepseek-v3")
    args = estimators.MegatronArgs(
        7168,
        61,
        128,
        128,
        18432,
        129_280,
        multi_latent_attention=True,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        swiglu=True,
    )
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


# ---------------------------------------------------------------- the opening: chapter 2's stuck point
def test_opening_every_gpu_holds_the_whole_state():
    assert gb(zero.model_states_bytes(P)) == "444.5"
    assert f"{zero.model_states_bytes(P) / 80e9:.1f}" == "5.6"


# ---------------------------------------------------------------- two ledgers: bytes per micro-batch
def _dp_bytes(ledger: str, stage: int, m: int) -> float:
    return evaluate(
        Plan.create("qwen3.8-27b", gpus=8, zero=stage, micro_batches=m, accounting=ledger)
    ).comm_bytes_per_step["dp"]


def test_ledgers_side_by_side_for_m_1_8_32():
    table = {
        ("lab", 3): ["145.9", "145.9", "145.9"],
        ("deepspeed", 3): ["145.9", "1,166.8", "4,667.3"],  # bf16 throughout, every micro-batch
        ("fsdp2", 3): ["194.5", "1,555.8", "6,223.0"],  # 2 bf16 gathers + fp32 reduce-scatter, every micro-batch
        ("megatron", 1): ["145.9", "145.9", "145.9"],  # distributed optimizer: fp32 RS + bf16 AG, once per step
    }
    for (ledger, stage), want in table.items():
        assert [f"{_dp_bytes(ledger, stage, m) / GB:,.1f}" for m in (1, 8, 32)] == want, ledger
    # the chapter's deepspeed-ZeRO-2 exercise default (m = 4): 4 bf16 all-reduces + one all-gather
    assert f"{_dp_bytes('deepspeed', 2, 4) / GB:,.1f}" == "437.6"
    assert f"{_dp_bytes('fsdp2', 3, 8) / zero.zero_sync_bytes(8, 2 * P, 3):.1f}" == "10.7"
    with pytest.raises(ValueError, match="FSDP2 has no ZeRO-1"):
        Plan.create("qwen3.8-27b", gpus=8, zero=1, accounting="fsdp2")


def test_ledger_model_states():
    states = {
        ledger: evaluate(Plan.create("qwen3.8-27b", gpus=8, zero=stage, accounting=ledger)).memory_bytes["model_states"]
        for ledger, stage in (("lab", 3), ("deepspeed", 3), ("fsdp2", 3), ("megatron", 1))
    }
    assert {k: gb(v) for k, v in states.items()} == {
        "lab": "55.6",
        "deepspeed": "55.6",
        "fsdp2": "55.6",
        "megatron": "208.4",
    }
    assert states["megatron"] == pytest.approx((6 + 12 / 8) * P, rel=1e-12)  # Megatron's 6 + 12/d


def test_fsdp2_units_reproduce_the_ledger_and_sync_on_the_last_micro_batch():
    units = zero.fsdp_unit_params(load_model("qwen3.8-27b"))
    every = zero.fsdp2_resharded(len(units), True)
    for m in (1, 8, 32):  # unit by unit, every unit resharded = the fsdp2 ledger's ZeRO-3
        assert sum(zero.fsdp2_sync_bytes(units, every, 8, m).values()) == pytest.approx(
            _dp_bytes("fsdp2", 3, m), rel=1e-12
        )
    last = {
        m: sum(zero.fsdp2_sync_bytes(units, every, 8, m, sync_every_micro_batch=False).values()) for m in (1, 8, 32)
    }
    assert [f"{last[m] / GB:,.1f}" for m in (1, 8, 32)] == ["194.5", "875.1", "3,208.8"]
    held = zero.fsdp2_unsharded_bytes(units, every, sync_every_micro_batch=False)
    assert gb(held["accumulated gradients"]) == "111.1" and held["accumulated gradients"] == 4 * P


# ---------------------------------------------------------------- FSDP2's units, resharding, prefetch
def test_the_anchors_units():
    anchor = load_model("qwen3.8-27b")
    units = zero.fsdp_unit_params(anchor)
    assert len(units) == 65 and sum(units) == P
    assert units[0] == 3_428_231_408
    comp = anchor.params.components
    assert units[0] == comp["embedding"] + comp["head"] + comp["vision"] + comp["mtp"] + anchor.hidden_size
    kinds = {(layer.mixer, n) for layer, n in zip(anchor.layers, units[1:])}
    assert kinds == {("linear_attention", 383_273_184), ("attention", 372_255_232)}
    assert sum(layer.mixer == "linear_attention" for layer in anchor.layers) == 48


def test_resharding_rule_and_its_errors():
    assert zero.fsdp2_resharded(4, None) == [False, True, True, True]
    assert zero.fsdp2_resharded(2, True) == [True, True] and zero.fsdp2_resharded(2, False) == [False, False]
    for bad in ("yes", 1, 0):
        with pytest.raises(ValueError, match="reshard_after_forward="):
            zero.fsdp2_resharded(3, bad)  # type: ignore[arg-type]  # a str and ints where a bool is due, on purpose
    with pytest.raises(ValueError, match="units=0"):
        zero.fsdp2_resharded(0, True)
    with pytest.raises(ValueError, match="2 entries for 3 units"):
        zero.fsdp2_unsharded_bytes([1, 2, 3], [True, True])
    with pytest.raises(ValueError, match="prefetch=-1"):
        zero.fsdp2_unsharded_bytes([1, 2], [True, True], prefetch=-1)
    with pytest.raises(ValueError, match="n=0"):
        zero.fsdp2_sync_bytes([1, 2], [True, True], 0, 1)


def test_gathers_bytes_and_memory_per_reshard_setting():
    units = zero.fsdp_unit_params(load_model("qwen3.8-27b"))
    got = {}
    for setting in (True, False, None):
        resharded = zero.fsdp2_resharded(len(units), setting)
        wire = zero.fsdp2_sync_bytes(units, resharded, 8, 1)
        held = zero.fsdp2_unsharded_bytes(units, resharded)
        got[setting] = (
            zero.fsdp2_collectives_per_step(units, resharded, 1)["all_gathers"],
            gb(wire["all-gather (bf16 weights)"]),
            gb(wire["reduce-scatter (fp32 gradients)"]),
            gb(held["root"]),
            gb(held["kept after forward"]),
            gb(held["in flight"]),
        )
    assert got == {
        True: (130, "97.2", "97.2", "6.9", "0.0", "1.5"),
        False: (65, "48.6", "97.2", "6.9", "48.7", "0.0"),
        None: (129, "91.2", "97.2", "6.9", "0.0", "1.5"),
    }
    # the exercise's default: m = 2 at torch's default
    assert zero.fsdp2_collectives_per_step(units, zero.fsdp2_resharded(65, None), 2)["all_gathers"] == 258
    # holding every layer at the turn does not fit beside the sharded states
    held = zero.fsdp2_unsharded_bytes(units, zero.fsdp2_resharded(65, False))
    assert gb(zero.model_states_bytes(P, 3, 8) + held["root"] + held["kept after forward"]) == "111.1"


def test_prefetch_one_layer_gather_against_its_compute():
    hw = load_hardware()
    units = zero.fsdp_unit_params(load_model("qwen3.8-27b"))
    gather = collectives.all_gather_bytes(8, max(units[1:]) * 2)
    assert f"{gather / GB:.2f}" == "0.67"
    nv = collectives.transfer_time_s(gather, hw.nvlink_bytes_per_s)
    ib = collectives.transfer_time_s(gather, hw.infiniband_bytes_per_s)
    lt = breakdowns.layer_time(evaluate(Plan.create("qwen3.8-27b", gpus=8, zero=3, recompute="selective")))
    assert (f"{nv * 1e3:.1f}", f"{ib * 1e3:.1f}") == ("4.2", "13.4")
    assert (f"{lt.forward_s * 1e3:.1f}", f"{lt.backward_s * 1e3:.1f}", lt.tp_s, lt.link) == ("5.5", "11.2", 0.0, None)
    assert nv < lt.forward_s < ib  # hidden inside a node, not across


def test_hsdp_against_fsdp_on_64_gpus():
    hsdp = zero.hsdp_sync_bytes(P, shard=8, replicate=8)
    assert [gb(v) for v in hsdp.values()] == ["97.2", "97.2", "24.3"]
    fsdp = zero.hsdp_sync_bytes(P, shard=64, replicate=1)
    assert fsdp["all-reduce (replicate group)"] == 0 and gb(sum(fsdp.values())) == "218.8"
    hw = load_hardware()
    t_fsdp = collectives.transfer_time_s(sum(fsdp.values()), hw.infiniband_bytes_per_s)
    t_hsdp = collectives.transfer_time_s(
        hsdp["all-gather (shard group)"] + hsdp["reduce-scatter (shard group)"], hw.nvlink_bytes_per_s
    ) + collectives.transfer_time_s(hsdp["all-reduce (replicate group)"], hw.infiniband_bytes_per_s)
    assert (f"{t_fsdp:.2f}", f"{t_hsdp:.2f}") == ("4.38", "1.70")
    # FSDP is HSDP with one replica: the same bytes as FSDP2 unit by unit with every unit resharded
    units = [P // 2, P - P // 2]
    for m in (1, 3):
        assert sum(zero.hsdp_sync_bytes(P, 8, 1, micro_batches=m).values()) == pytest.approx(
            sum(zero.fsdp2_sync_bytes(units, [True, True], 8, m).values()), rel=1e-12
        )
    # the replicas' all-reduce postponed to the last micro-batch
    once = zero.hsdp_sync_bytes(P, 8, 8, micro_batches=4, all_reduce_every_micro_batch=False)
    assert once["all-reduce (replicate group)"] == hsdp["all-reduce (replicate group)"]
    assert once["reduce-scatter (shard group)"] == 4 * hsdp["reduce-scatter (shard group)"]
    for kw, msg in (
        ({"shard": 0}, "shard=0"),
        ({"replicate": 1.5}, "replicate=1.5"),
        ({"micro_batches": 0}, "micro_batches=0"),
    ):
        with pytest.raises(ValueError, match=msg):
            args: dict[str, Any] = {"shard": 8, "replicate": 8, **kw}  # one bad value each, 1.5 a float on purpose
            zero.hsdp_sync_bytes(P, **args)
    with pytest.raises(ValueError, match="params=0"):
        zero.hsdp_sync_bytes(0, 8, 8)


def test_real_fsdp2_runs_of_chapter_9_match_the_unit_formula():
    """Every fsdp_accum row of the stored real runs: the measured counts and payloads equal what
    fsdp2_collectives_per_step predicts now (chapter 9's model, its units, torch's resharding rule)."""
    data = read_json("realrun_results.json")
    rows = [r for r in data["rows"] if r["dimension"] == "fsdp_accum"]
    assert len(rows) == 96 and all(r["exact"] for r in rows)
    units = zero.fsdp_unit_params(load_model(data["provenance"]["model"]))
    keys = {
        "all-gathers": "all_gathers",
        "reduce-scatters": "reduce_scatters",
        "all-gather payload": "all_gather_bytes",
        "reduce-scatter payload": "reduce_scatter_bytes",
    }
    settings = {
        "reshard_after_forward=True": True,
        "reshard_after_forward=False": False,
        "reshard_after_forward default": None,
    }
    checked = 0
    for r in rows:
        head, what = r["check"].split(": ")
        parts = head.removeprefix("FSDP2 ").split(", ")
        m = int(parts[-1].removeprefix("m="))
        last_only = "sync on the last micro-batch only" in head
        resharded = zero.fsdp2_resharded(len(units), settings[parts[1]])
        want = zero.fsdp2_collectives_per_step(units, resharded, m, not last_only, param_bytes=4, grad_bytes=4)
        assert want[keys[what.removesuffix(" per step")]] == r["measured"], r["check"]
        checked += 1
    assert checked == 96
