"""Deterministic checks of ``Plan``/``evaluate`` beyond the lab rows: the most-loaded pipeline stage, the
bytes-per-parameter variants, notes, the report's dict, and the validation of the smaller modules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meshplan import (
    FSDP2_BPP,
    MEGATRON_BPP,
    Mesh,
    ParallelDims,
    Plan,
    evaluate,
    load_hardware,
    load_model,
    model_from_config,
)
from meshplan.core import collectives
from meshplan.core.resources import read_json
from meshplan.course import published
from meshplan.course.lab import LAB_8_GPUS, lab_plan
from meshplan.parallel import activations, cp, ep, pp, zero
from meshplan.plan.contract import report_json
from meshplan.spec import stages as stages_mod
from meshplan.spec.mesh import parse_order
from meshplan.spec.model import MODELS_DIR

P = 27_781_427_952


def stages(spec, n_stages: int) -> list[int]:
    """Parameters of every pipeline stage: its layers; stage 0 also the input embedding (with learned
    positions) and the vision tower; the last stage the output head, the final norm and the MTP module."""
    per = spec.num_layers // n_stages
    comps = spec.params.components
    final_norm = {name: count * size for name, count, size in spec.params.groups}["final_norm"]
    out = []
    for k in range(n_stages):
        x = sum(spec.layer_params[k * per : (k + 1) * per])
        if k == 0:
            x += comps["embedding"] + comps["vision"]
        if k == n_stages - 1:
            x += comps["head"] + final_norm + comps["mtp"] + spec.params.extra.get("mtp", 0)
        out.append(x)
    assert sum(out) == spec.params.total + spec.params.extra.get("mtp", 0)
    return out


def stage_memory(spec, n_stages: int, r) -> list[float]:
    """Memory of every pipeline stage, written out here: 16 B per parameter of its own (``stages``) plus
    Korthikanti's per-layer activations × its layers × its in-flight micro-batches min(m, p − k)."""
    p = r.plan
    per_layer = activations.activation_bytes_per_layer(
        p.seq, p.micro_batch_size, spec.hidden_size, spec.num_attention_heads, 1, p.recompute
    )
    layers = spec.num_layers // n_stages
    return [
        16 * x + per_layer * layers * min(p.micro_batches, n_stages - k) for k, x in enumerate(stages(spec, n_stages))
    ]


@pytest.mark.parametrize("name", ["qwen3.8-27b", "llama-3.1-8b", "llama-3.1-405b", "small-3.7m", "deepseek-v3"])
def test_stage_balance_max_reports_the_most_loaded_stage(name):
    """Memory is the maximum over every stage of its own model states plus its own activations (not the
    heaviest stage's states plus another stage's activations)."""
    spec = load_model(name)
    for n in [d for d in range(2, 65) if spec.num_layers % d == 0]:
        r = evaluate(Plan.create(spec, gpus=n, pp=n, stage_balance="max", gpus_per_node=1))
        per_stage = stage_memory(spec, n, r)
        assert r.memory_bytes["total"] == pytest.approx(max(per_stage), rel=1e-12), (name, n)
        assert r.stage == per_stage.index(max(per_stage))
        assert r.params_per_gpu == stages(spec, n)[r.stage]
        even = evaluate(Plan.create(spec, gpus=n, pp=n, gpus_per_node=1))
        assert even.params_per_gpu == spec.params.total / n and even.stage == 0


def test_stage_balance_max_anchor_pp4():
    spec = load_model("qwen3.8-27b")
    r = evaluate(Plan.create(spec, gpus=4, pp=4, stage_balance="max"))
    # stage 0: 12 linear + 4 full layers + embedding + vision tower
    assert r.params_per_gpu == 12 * 383_273_184 + 4 * 372_255_232 + 1_271_398_400 + 460_730_096 == 7_820_427_632


def test_stage_balance_max_counts_a_layernorm_final_norm():
    """The last stage's final norm is a GPT-2 LayerNorm with bias: 2h parameters, not h. With an untied head and a
    single learned position the last stage is the heaviest, and with full recompute its states dominate."""
    cfg = {
        "model_type": "gpt2",
        "vocab_size": 1000,
        "n_positions": 1,
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "tie_word_embeddings": False,
    }
    spec = model_from_config(cfg, name="gpt2-untied")
    first, last = stages(spec, 2)
    assert last - first == 64  # the final norm's bias
    r = evaluate(Plan.create(spec, gpus=2, pp=2, stage_balance="max", recompute="full", micro_batches=1))
    assert r.stage == 1 and r.params_per_gpu == last


def test_bytes_per_param_variants():
    assert (zero.DEFAULT_BPP.total, MEGATRON_BPP.total, FSDP2_BPP.total) == (16, 18, 16)
    assert (zero.DEFAULT_BPP.optimizer, MEGATRON_BPP.optimizer, FSDP2_BPP.optimizer) == (12, 12, 8)
    for n in (1, 2, 8, 64):
        # Megatron's distributed optimizer: 6 + 12/dp bytes per parameter
        assert zero.model_states_bytes(P, 1, n, MEGATRON_BPP) == pytest.approx((6 + 12 / n) * P, rel=1e-12)
        assert zero.model_states_bytes(P, 3, n, FSDP2_BPP) == pytest.approx(16 * P / n, rel=1e-12)
    r = evaluate(Plan.create("qwen3.8-27b", gpus=8, bytes_per_param=MEGATRON_BPP))
    assert r.memory_bytes["model_states"] == 18 * P
    assert r.model_states_terms["grads"] == 4 * P


def test_zero_validation():
    with pytest.raises(ValueError, match="zero=4 must be 0, 1, 2 or 3"):
        zero.model_states_bytes(P, 4, 8)
    with pytest.raises(ValueError, match="dp=0 must be a positive integer"):
        zero.model_states_bytes(P, 1, 0)
    assert [zero.zero_comm_factor(s) for s in range(4)] == [2, 2, 2, 3]


def test_report_notes_and_heaviest_dim():
    tp8 = evaluate(lab_plan(LAB_8_GPUS[2]))
    assert tp8.heaviest_dim == "tp"
    assert tp8.notes == (
        "tp=8 > 4 KV heads: each KV head is replicated on 2 GPUs (the extra k/v weights are not counted)",
    )
    tp2pp4 = evaluate(lab_plan(LAB_8_GPUS[3]))
    assert tp2pp4.notes == (
        "full recompute re-runs the forward's 2 TP collectives per layer; not counted (lab convention)",
    )
    assert evaluate(lab_plan(LAB_8_GPUS[0])).heaviest_dim == "dp"
    single = evaluate(Plan.create("small-3.7m", gpus=1, seq=64))
    assert single.heaviest_dim is None and single.notes == ()
    assert all(v == 0 for v in single.comm_bytes_per_step.values())


def test_to_dict_round_trips_through_json():
    r = evaluate(lab_plan(LAB_8_GPUS[3]))
    d = json.loads(json.dumps(report_json(r)))
    assert d["mesh"] == {"tp": 2, "cp": 1, "ep": 1, "dp": 1, "pp": 4}
    assert d["settings"]["recompute"] == "full" and d["settings"]["sequence_parallel"] is True
    assert d["bubble"] == 0.375 and d["bubble_share_of_time"] == 3 / 11
    assert {k: v for k, v in d["memory_bytes"].items() if k != "by_stage"} == dict(r.memory_bytes)
    assert [x["total"] for x in d["memory_bytes"]["by_stage"]] == list(r.stage_totals)


def test_plan_create_defaults_dp():
    assert Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=2).dp == 4
    assert Plan.create("qwen3.8-27b", gpus=64, tp=4, cp=2, pp=2).dp == 4
    with pytest.raises(ValueError, match=r"tp×cp×pp = 8×1×3 = 24 does not divide gpus=64"):
        Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=3)
    with pytest.raises(ValueError, match=r"model=.* must be a ModelSpec"):
        Plan(model="qwen3.8-27b", dims=ParallelDims())  # type: ignore[arg-type]  # a name, on purpose


def test_kv_replication_switch():
    spec = load_model("qwen3.8-27b")  # 4 KV heads
    assert Plan.create(spec, gpus=8, tp=8).tp == 8
    with pytest.raises(ValueError, match=r"^tp=8 does not divide 4 KV heads$"):
        Plan.create(spec, gpus=8, tp=8, kv_replication=False)
    with pytest.raises(ValueError, match=r"^tp=3 does not divide 4 KV heads \(and 4 KV heads do not divide tp=3"):
        Plan.create(spec, gpus=3, tp=3)
    with pytest.raises(ValueError, match=r"^tp=12 does not divide 16 linear-attention key heads$"):
        Plan.create(spec, gpus=12, tp=12, gpus_per_node=12)


def test_context_parallel_split_of_the_gradient_ring():
    """dp·cp ranks sync gradients as a two-level ring: 2(c−1)/c·G under cp, 2(d−1)/d·G/c under dp."""
    spec = load_model("llama-3.1-8b")
    r = evaluate(Plan.create(spec, gpus=16, cp=4, dp=4, seq=8192))
    g = 2 * spec.params.total
    kv = (4 - 1) / 4 * 8192 * spec.kv_width * 2 * 32 * 8  # K/V all-gather: 32 layers, m = 8
    assert r.comm_bytes_per_step["cp"] == pytest.approx(2 * 3 / 4 * g + kv, rel=1e-12)
    assert r.comm_bytes_per_step["dp"] == pytest.approx(2 * 3 / 4 * g / 4, rel=1e-12)
    # the two levels together send exactly what a flat ring over the 16 dp·cp ranks sends: 2·15/16·G
    flat = collectives.ring_all_reduce_bytes(16, g)
    assert r.comm_bytes_per_step["cp"] - kv + r.comm_bytes_per_step["dp"] == pytest.approx(flat, rel=1e-12)
    assert (r.link["cp"], r.link["dp"]) == ("nvlink", "infiniband")


def test_expert_parallel_deepseek():
    spec = load_model("deepseek-v3")
    r = evaluate(Plan.create(spec, gpus=64, dp=64, ep=64, zero=1))
    experts = spec.routed_expert_params
    dense = spec.params.total - experts
    assert r.params_per_gpu == dense + experts / 64
    # experts are sharded over dp/ep = 1 rank: their optimizer states stay whole
    assert r.model_states_terms["master"] == pytest.approx(4 * dense / 64 + 4 * experts / 64, rel=1e-12)
    a2a = 4 * 63 / 64 * 4096 * 8 * 7168 * 2 * 58 * 8
    assert r.comm_bytes_per_step["ep"] == pytest.approx(a2a, rel=1e-12)
    assert r.link["ep"] == "infiniband"
    assert ep.experts_per_gpu(256, 64) == 4
    with pytest.raises(ValueError, match="ep=3 does not divide 256 experts"):
        ep.experts_per_gpu(256, 3)


def test_expert_parallel_with_tp_dispatches_the_sequence_shard():
    """With TP and sequence parallelism each TP rank holds s/t tokens and dispatches only those (Megatron
    requires SP for MoE with TP and all-gathers over TP after the all-to-all): half the bytes at t = 2."""
    spec = load_model("deepseek-v3")
    sp_on = evaluate(Plan.create(spec, gpus=128, tp=2, dp=64, ep=64, zero=1))
    sp_off = evaluate(Plan.create(spec, gpus=128, tp=2, dp=64, ep=64, zero=1, sp=False))
    a2a = 4 * 63 / 64 * 4096 * 8 * 7168 * 2 * 58 * 8
    assert sp_on.comm_bytes_per_step["ep"] == pytest.approx(a2a / 2, rel=1e-12)
    assert sp_off.comm_bytes_per_step["ep"] == pytest.approx(a2a, rel=1e-12)


def test_small_module_validation():
    with pytest.raises(ValueError, match="recompute='some'"):
        activations.activation_bytes_per_layer(4096, 1, 5120, 24, recompute="some")
    with pytest.raises(ValueError, match="group size n=0"):
        collectives.ring_factor(0)
    with pytest.raises(ValueError, match="bandwidth"):
        collectives.transfer_time_s(1.0, 0)
    with pytest.raises(ValueError, match="micro_batches=0"):
        pp.bubble_fraction(4, 0)
    with pytest.raises(ValueError, match="2 × ranks = 8 does not divide tokens=12"):
        cp.causal_load(12, 4, zigzag=True)
    assert cp.causal_load(12, 4) == (6, 15, 24, 33)
    with pytest.raises(ValueError, match="unknown published figure 'nope'"):
        published.value("nope")
    assert "arXiv:2412.19437" in published.source("deepseek_v3_pretraining_gpu_hours")
    assert activations.pipeline_inflight_layers(64, 8, 4) == 32  # m < p: m micro-batches of L/p layers
    assert activations.pipeline_inflight_layers(64, 8, 32, 4) == 64 * (1 + 7 / 32) == 78


def test_mesh_validation():
    assert parse_order("tp-cp-ep-dp-pp") == ("tp", "cp", "dp", "pp")
    for bad in ("tp-cp-pp", "tp-cp-pp-dp-dp", "tp-cp-ep-ep-pp-dp"):
        with pytest.raises(ValueError, match="must name tp, cp, pp and dp once each"):
            parse_order(bad)
    with pytest.raises(ValueError, match="ep=3 does not divide dp×cp = 4×1 = 4"):
        Mesh({"tp": 1, "cp": 1, "pp": 1, "dp": 4}, ep=3)
    m = Mesh({"tp": 2, "cp": 1, "pp": 1, "dp": 2})
    with pytest.raises(ValueError, match=r"rank=4 is not in 0\.\.3"):
        m.coords(4)
    with pytest.raises(ValueError, match="axis='xp'"):
        m.group(0, "xp")


def test_hardware():
    hw = load_hardware()
    assert (
        hw.gpu_memory_bytes,
        hw.gpus_per_node,
        hw.nvlink_bytes_per_s,
        hw.infiniband_bytes_per_s,
        hw.effective_flop_per_s,
    ) == (80e9, 8, 160e9, 50e9, 400e12)
    assert hw.nvlink_bytes_per_s / hw.infiniband_bytes_per_s == 3.2
    assert dict(hw.sources)["nvlink_bytes_per_s"].startswith("DeepSeek-V3")


def test_hardware_malformed(tmp_path):
    path = tmp_path / "hw.json"
    path.write_text(json.dumps({"gpu_memory_bytes": {"value": 1}}))
    with pytest.raises(ValueError, match="malformed hardware file"):
        load_hardware(str(path))


def test_min_gpus_for_states():
    from meshplan.parallel.zero import min_gpus_for_states

    assert min_gpus_for_states(P, 80e9) == 6  # 444.5 GB / 80 GB = 5.6 -> 6
    assert min_gpus_for_states(P, 80e9, MEGATRON_BPP) == 7  # 500.1 GB
    assert min_gpus_for_states(5e9, 80e9) == 1  # exactly 80 GB
    assert min_gpus_for_states(load_model("llama-3.1-405b").params.total, 80e9) == 82
    with pytest.raises(ValueError, match="gpu_memory_bytes=0 must be positive"):
        min_gpus_for_states(P, 0)


def test_step_time_and_tflops():
    from meshplan.core.units import fmt_tflops
    from meshplan.parallel import compute

    fp = load_model("qwen3.8-27b").flop_params
    assert compute.step_flop(fp, 4096) == 6 * fp * 4096
    assert compute.step_flop(fp, 4096, "full") == 8 * fp * 4096
    assert f"{compute.step_time_s(fp, 4096, 400e12):.2f}" == "1.57"
    assert compute.step_time_s(fp, 4096, 400e12, "full") == pytest.approx(2 * compute.backward_time_s(fp, 4096, 400e12))
    with pytest.raises(ValueError, match="must be positive"):
        compute.step_time_s(fp, 4096, 0)
    assert fmt_tflops(4e14) == "400 TFLOP/s"
    assert fmt_tflops(380e12, 1) == "380.0 TFLOP/s"


def test_most_loaded_stage_weighs_experts_by_their_split():
    # a 60-layer DeepSeek-V3 variant on PP 4 (15 layers a stage): stage 0 holds the 3 dense layers and the
    # embedding, the last stage the head, final norm and MTP module (whose MoE layer's experts are experts).
    import json

    from meshplan import model_from_config
    from meshplan.spec.model import MODELS_DIR

    cfg = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    cfg["num_hidden_layers"] = 60
    m = model_from_config(cfg, "dsv3-60")
    comps, lexp = m.params.components, m.layer_expert_params
    final_norm = m.hidden_size
    mtp = m.params.extra["mtp"]
    for tp, ep_size, etp in ((1, 8, 1), (2, 8, 2), (2, 8, 1), (8, 2, 8)):
        # ZeRO-1 shards the dense states over the 16 DP ranks and the experts' over their own expert-DP ranks,
        # so a stage's bytes are not proportional to its parameters; full recompute with m = 1 gives every
        # stage the same activations, so the most-loaded stage is the one with the most model-state bytes.
        plan = Plan.create(
            m,
            gpus=tp * 4 * 16,
            tp=tp,
            pp=4,
            dp=16,
            ep=ep_size,
            expert_tp=etp,
            stage_balance="max",
            zero=1,
            recompute="full",
            micro_batches=1,
        )
        edp = tp * 16 // (etp * ep_size)
        loads, states = [], []
        for k in range(4):
            layers = range(15 * k, 15 * (k + 1))
            dense = sum(m.layer_params[i] - lexp[i] for i in layers)
            exp = sum(lexp[i] for i in layers)
            if k == 0:
                dense += comps["embedding"]
            if k == 3:
                dense += comps["head"] + final_norm + mtp - max(lexp)
                exp += max(lexp)
            loads.append(dense / tp + exp / (etp * ep_size))
            states.append(dense / tp * (4 + 12 / 16) + exp / (etp * ep_size) * (4 + 12 / edp))
        r = evaluate(plan)
        k = states.index(max(states))
        assert r.stage == k and r.params_per_gpu == pytest.approx(loads[k], rel=1e-12)
        assert r.memory_bytes["model_states"] == pytest.approx(max(states), rel=1e-12)


SHIPPED = sorted(str(p.relative_to(MODELS_DIR).with_suffix("")) for p in MODELS_DIR.rglob("*.json"))


@pytest.mark.parametrize("name", SHIPPED)
def test_stages_count_their_own_layers(name):
    """``stages.stages`` sums each stage's layers from running totals; here the sums are taken layer by layer from
    the model's own description, for every shipped model on 2 to 16 ranks, in both balances: the layers with softmax
    attention (whose K and V context parallelism exchanges) and with routed experts, and each stage's own parameters
    (``max``: only the decoder layers' on a middle stage)."""
    model = load_model(name)
    L = model.num_layers
    lexp = model.layer_expert_params or (0,) * L
    for p in range(2, min(L, 16) + 1):
        for balance in ("even", "max"):
            got = stages_mod.stages(model, p, stages_mod.spread_layers(L, p), balance)
            start = 0
            for st in got:
                layers = range(start, start + st.num_layers)
                start += st.num_layers
                if model.layers:
                    # softmax attention, sliding windows included: CP exchanges their whole K and V
                    full = sum(1 for i in layers if model.layers[i].mixer in ("attention", "mla"))
                    assert st.full_attention_layers == full, (p, balance, st.index)
                assert st.moe_layers == sum(1 for i in layers if lexp[i]), (p, balance, st.index)
                if balance == "max" and 0 < st.index < p - 1:
                    assert st.dense_params == sum(model.layer_params[i] - lexp[i] for i in layers)
                    assert st.expert_params == sum(lexp[i] for i in layers)
            assert start == L


def test_cp_exchanges_the_kv_of_sliding_window_layers():
    """Issue 29: a sliding-window layer's K and V go round the CP ring like a full-attention layer's (the ring and
    all-gather implementations move the whole sequence's K and V whatever the window; ``ModelSpec`` says so), so a
    model whose every layer is windowed still sends K/V under CP, as much per layer as the same layer unwindowed."""
    windowed = load_model("public/mistral-7b-v0.1")
    assert all(layer.sliding_window for layer in windowed.layers)
    report = evaluate(Plan.create(windowed, gpus=4, cp=4, seq=32768, micro_batches=1))
    stage = report.plan.stages[0]
    assert stage.full_attention_layers == windowed.num_full_attention_layers == windowed.num_layers
    kv = report.collectives["cp"][0].sent_bytes
    kv_traffic = report.comm_bytes_per_step["cp"] - report.grad_sync_bytes["cp"]  # less CP's share of the grad sync
    assert kv > 0 and kv_traffic == pytest.approx(kv * windowed.num_layers, rel=1e-12)


def _windowed_qwen2():
    """The shipped Qwen2.5-7B config with Qwen2's sliding window switched on from layer 14."""
    cfg = {k: v for k, v in read_json("models", "public", "qwen2.5-7b.json").items() if k != "source"}
    cfg.update(use_sliding_window=True, sliding_window=4096, max_window_layers=14)
    return model_from_config(cfg, "qwen2.5-7b with sliding windows")


@pytest.mark.parametrize("name", ["public/qwen2.5-7b", "public/gemma-3-1b-it", "public/mistral-7b-v0.1", "windowed"])
def test_selective_recompute_never_keeps_more_than_none(name):
    """Issue 29: in the engine ledgers selective recompute keeps no more activations than none on any stage (the
    first stage was charged the sliding-window mask of layers it does not hold)."""
    model = _windowed_qwen2() if name == "windowed" else load_model(name)
    for ledger in ("fsdp2", "megatron"):
        for stages in (1, 2, 4):
            if stages > 1 and ledger == "fsdp2" and model.tie_word_embeddings:
                continue  # torchtitan refuses a tied head with pipeline parallelism
            for seq in (4096, 8192):
                kw: dict[str, Any] = {
                    "gpus": stages,
                    "pp": stages,
                    "seq": seq,
                    "micro_batches": 4,
                    "accounting": ledger,
                }
                none, selective = (
                    evaluate(Plan.create(model, recompute=r, uneven_stages=True, **kw)) for r in ("none", "selective")
                )
                assert selective.memory_bytes["activations"] <= none.memory_bytes["activations"], (ledger, stages, seq)


def test_refused_where_an_engine_refuses():
    """Issue 29: sequence parallelism needs TP to divide each CP rank's tokens (a half-byte of activations before);
    an expert TP on a model without experts is an error, not ignored."""
    with pytest.raises(ValueError, match=r"^tp=8 does not divide the 2,049 tokens of a CP rank's sequence"):
        Plan.create("qwen3.8-27b", gpus=16, tp=8, cp=2, seq=4098)
    assert Plan.create("qwen3.8-27b", gpus=16, tp=8, cp=2, seq=4098, sp=False).seq == 4098
    with pytest.raises(ValueError, match=r"^expert_tp=1 but qwen3.8-27b has no experts$"):
        Plan.create("qwen3.8-27b", gpus=8, tp=4, expert_tp=1)
    assert Plan.create("qwen3.8-27b", gpus=8, tp=4, expert_tp=4).etp == 4


def test_a_partly_filled_last_nvlink_domain_is_planned_and_stated():
    """GB200 NVL72 (issue 25): 72 GPUs to an NVLink domain rarely divide a job's GPUs. The plan lays the ranks out in
    order, the last domain holding the rest; groups inside a domain use NVLink, groups that reach the last one
    InfiniBand; the note says so; an export, whose launcher needs equal processes per host, refuses in one line."""
    from meshplan.export import export_text
    from meshplan.spec.mesh import partial_node

    plan = Plan.create("llama-3.1-70b", gpus=200, tp=8, zero=1, hardware="b200-sxm-180gb", gpus_per_node=72)
    report = evaluate(plan)
    assert partial_node(200, 72) == 56
    assert any("holds only 56" in n for n in report.notes)
    assert report.link["tp"] == "nvlink"  # 72 = 9 TP groups per domain; the last domain's 56 = 7 groups
    assert report.link["dp"] == "infiniband"
    assert {plan.mesh.node(r) for r in plan.mesh.group(199, "tp")} == {2}
    with pytest.raises(ValueError, match=r"gpus=200 fill 2 node\(s\) of 72 and 56 GPUs of another"):
        export_text(plan, "megatron")
    whole = Plan.create("llama-3.1-70b", gpus=144, tp=8, zero=1, hardware="b200-sxm-180gb", gpus_per_node=72)
    assert not any("holds only" in n for n in evaluate(whole).notes)
