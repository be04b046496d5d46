"""Chapter 7 (expert parallel): the numbers it prints, each asserted to its printed digit from the library
(GB = 1e9 B), and the new EP functions (capacity, bias balancing, bytes per token, the all-to-all against the
compute) against independent computations."""

from __future__ import annotations

import math
from typing import Any

import pytest

from meshplan import evaluate, load_hardware, load_model, steptime
from meshplan.core.collectives import all_to_all_bytes
from meshplan.core.units import fmt_gb, fmt_int, fmt_pct
from meshplan.course import published
from meshplan.parallel import ep, tp
from meshplan.spec.mesh import Mesh
from meshplan.steptime import breakdowns
from meshplan.steptime import fitting as calibration


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def run_report():
    """The course's plan of DeepSeek-V3's pre-training run, as chapter 7 prices it."""
    return evaluate(calibration.run_plan(calibration.run("deepseek-v3-pretraining")))


def test_the_opening_parameters_against_compute(v3):
    anchor = load_model("qwen3.8-27b")
    assert fmt_gb(tp.tp_bytes_per_step(4096, 1, anchor.hidden_size, anchor.num_layers, 8, 1)) == "18.8 GB"
    assert (f"{v3.params.total / 1e9:,.0f}B", f"{v3.flop_params / 1e9:,.1f}B") == ("671B", "36.6B")
    assert fmt_pct(v3.flop_params / v3.params.total) == "5.5 %"
    # TP 8 inside a node x PP 16 leaves the routed experts' 16 B per parameter at 81.7 GB per GPU
    assert fmt_gb(16 * v3.routed_expert_params / (8 * 16)) == "81.7 GB"


def test_activated_parameters_come_from_the_layer_spec(v3):
    moe = next(layer for layer in v3.layers if layer.is_moe)
    per_expert = moe.expert_params // moe.num_experts
    assert per_expert == 3 * 7168 * 2048 == 44_040_192
    assert moe.activated_params == moe.params - moe.expert_params + 8 * per_expert == 585_318_656
    assert v3.flop_params == sum(layer.activated_params for layer in v3.layers) + 7168 + v3.vocab_size * 7168
    dense = next(layer for layer in v3.layers if not layer.is_moe)
    assert dense.activated_params == dense.params


def test_654b_routed_expert_parameters_4_per_gpu(v3):
    assert fmt_int(v3.routed_expert_params) == "653,908,770,816"
    assert f"{v3.routed_expert_params / 1e9:,.0f}B" == "654B"
    assert ep.experts_per_gpu(v3.num_experts, published.value("deepseek_v3_parallelism")["ep"]) == 4
    assert f"{v3.routed_expert_params / 64 / 1e9:,.1f}B" == "10.2B"
    assert f"{16 * v3.routed_expert_params / 1e12:,.1f} TB" == "10.5 TB"
    with pytest.raises(ValueError, match="ep=48 does not divide 256 experts"):
        ep.experts_per_gpu(256, 48)


def test_all_to_all_per_layer_and_per_step(v3):
    a2a = ep.ep_bytes_per_step(4096, 8, v3.hidden_size, 64, 1, 1)
    assert (fmt_gb(a2a / 4, 2), fmt_gb(a2a, 2)) == ("0.46 GB", "1.85 GB")
    assert f"{1e3 * a2a / load_hardware().infiniband_bytes_per_s:,.1f} ms" == "37.0 ms"
    shape = published.value("deepseek_v3_pretraining_shape")
    pipelines = published.value("deepseek_v3_cluster_gpus") // published.value("deepseek_v3_parallelism")["pp"]
    seqs = shape["batch_sequences"] // pipelines
    moe_per_stage = -(-v3.num_moe_layers // 16)
    assert (shape["seq"], seqs, moe_per_stage) == (4096, 120, 4)
    per_step = ep.ep_bytes_per_step(4096, 8, v3.hidden_size, 64, moe_per_stage, seqs)
    assert fmt_gb(per_step, 0) == "888 GB"
    assert f"{per_step / load_hardware().infiniband_bytes_per_s:,.0f} s" == "18 s"
    # the exercise's default (EP 16, 8,192 tokens) prints a number the page has not printed before it
    assert f"{ep.ep_bytes_per_step(8192, 8, v3.hidden_size, 16, 1, 1) / 1e9:,.2f}" == "3.52"


def test_nvlink_3_2_times_ib_and_node_limited_routing():
    hw = load_hardware()
    assert (hw.nvlink_bytes_per_s, hw.infiniband_bytes_per_s) == (160e9, 50e9)
    r = ep.node_limited_routing(
        256, 8, 64, 8, published.value("deepseek_v3_max_nodes_per_token"), hw.nvlink_bytes_per_s, 50e9
    )
    assert (r.nodes, r.experts_per_node, r.max_nodes_per_token) == (8, 32, 4)
    # IB transfers: one per remote node; the token's own node (one of the 8) is reached over NVLink
    assert (r.ib_copies_unlimited, r.ib_copies_limited) == (7, 4)
    for e, expected in ((16, (1, 1)), (8, (0, 0)), (128, (8, 4))):
        r2 = ep.node_limited_routing(256, 8, e, 8, 4, 160e9, 50e9)
        assert (r2.ib_copies_unlimited, r2.ib_copies_limited) == expected
    assert (f"{r.nvlink_over_ib:.1f}", f"{r.expert_budget:.1f}") == ("3.2", "12.8")
    assert round(r.expert_budget) == published.value("deepseek_v3_max_experts_node_limited") == 13


def test_bytes_per_token_on_the_ep_link():
    h = 7168
    # the library's convention: (e-1)/e of k copies, 4 all-to-alls of 2 B, equal to ep_bytes_per_step per token
    assert ep.all_to_all_bytes_per_token(h, 8, 64) == 63 / 64 * 8 * h * 4 * 2 == ep.ep_bytes_per_step(1, 8, h, 64, 1, 1)
    assert ep.all_to_all_bytes_per_token(h, 8, 64) / h == 63.0
    # DeepSeek-V3: FP8 dispatch (1 B + an fp32 scale per 128 channels) in both dispatches, bf16 combines, at most
    # 4 IB copies (4 remote nodes): 4 x h x 2 x (1.03125 + 2)
    assert ep.FP8_DISPATCH_BYTES == 1 + 4 / 128 == 1.03125
    fp8_nl = ep.all_to_all_bytes_per_token(h, 8, 64, dispatch_bytes=ep.FP8_DISPATCH_BYTES, max_nodes=4)
    assert fp8_nl == 4 * h * 2 * (1.03125 + 2) and f"{fp8_nl / h:.2f}" == "24.25"
    # one node (EP 8): NVLink carries every copy, the node limit changes nothing; EP 1: nothing to send
    assert ep.all_to_all_bytes_per_token(h, 8, 8, max_nodes=4) == ep.all_to_all_bytes_per_token(h, 8, 8)
    assert ep.all_to_all_bytes_per_token(h, 8, 8) == 7 / 8 * 8 * h * 8
    assert ep.all_to_all_bytes_per_token(h, 8, 1) == 0
    assert (ep.remote_copies_per_token(8, 8), ep.remote_copies_per_token(8, 8, max_nodes=4)) == (7, 4)
    assert ep.remote_copies_per_token(8, 1) == 0 and ep.remote_copies_per_token(2, 8, max_nodes=4) == 2
    # a strided EP group of 8 GPUs on 8 nodes: node-limited to 4 remote nodes
    assert ep.all_to_all_bytes_per_token(h, 8, 8, max_nodes=4, nodes=8) == 4 * h * 8
    # node-limited over more nodes than M: still at most M transfers; fewer remote nodes than M: nodes - 1
    assert ep.all_to_all_bytes_per_token(h, 8, 256, max_nodes=4) == 4 * h * 8
    assert ep.all_to_all_bytes_per_token(h, 8, 24, max_nodes=4) == 2 * h * 8
    with pytest.raises(ValueError, match="gpus_per_node=8 does not divide ep=12"):
        ep.all_to_all_bytes_per_token(h, 8, 12, max_nodes=4)
    with pytest.raises(ValueError, match="dispatch_bytes=0 must be a positive number of bytes"):
        ep.all_to_all_bytes_per_token(h, 8, 64, dispatch_bytes=0)


def test_the_step_time_model_gives_1_55_and_deepseeks_choices_bring_it_to_1_to_1(run_report, v3):
    base = breakdowns.all_to_all_balance(run_report)
    mb = steptime.micro_batch(run_report, base.stage, steptime.Execution())
    assert base.stage == run_report.traffic_stage == 2 and run_report.plan.stages[2].moe_layers == 4
    assert (base.compute_s, base.gemm_s, base.all_to_all_s) == (mb.compute_s, mb.gemm_s, mb.ep_s)
    # independently: 4 all-to-alls x 4 MoE layers of (63/64) x 4,096 x 8 x h x 2 B at 50 GB/s x link efficiency,
    # plus NCCL's all-to-all latency per collective
    cal = steptime.calibration()
    wire = 4 * 4 * all_to_all_bytes(64, 4096 * 8 * v3.hidden_size * 2) / (50e9 * cal.link_efficiency)
    latency = 16 * steptime.collective_latency_s("all-to-all", 64, "infiniband")
    assert base.all_to_all_s == pytest.approx(wire + latency, rel=1e-12)
    settings: dict[str, dict[str, Any]] = {  # bytes per element, a node count, a speedup
        "base": {},
        "fp8": {"dispatch_bytes": ep.FP8_DISPATCH_BYTES},
        "nodes": {"dispatch_bytes": ep.FP8_DISPATCH_BYTES, "max_nodes": 4},
        "gemm": {"dispatch_bytes": ep.FP8_DISPATCH_BYTES, "max_nodes": 4, "gemm_speedup": 2.0},
    }
    got = {name: breakdowns.all_to_all_balance(run_report, **kw) for name, kw in settings.items()}
    ratios = {k: f"{b.ratio:.2f}" for k, b in got.items()}
    assert ratios == {"base": "1.55", "fp8": "1.17", "nodes": "0.60", "gemm": "0.89"}
    assert [f"{1e3 * b.all_to_all_s:,.0f} ms" for b in got.values()] == ["199 ms", "151 ms", "77 ms", "77 ms"]
    assert [f"{1e3 * b.compute_s:,.0f} ms" for b in got.values()] == ["129 ms", "129 ms", "129 ms", "87 ms"]
    assert f"{1 / got['gemm'].ratio:.2f} : 1" == "1.13 : 1"
    # the wire part scales with the bytes per token, the latency does not; FP8 GEMMs halve only the GEMMs
    scale = 24.25 / 63
    assert got["nodes"].all_to_all_s == pytest.approx((base.all_to_all_s - latency) * scale + latency, rel=1e-12)
    assert got["gemm"].compute_s == pytest.approx(base.compute_s - base.gemm_s / 2, rel=1e-12)
    # the GEMMs are FLOP-bound (the docstring's assumption): reading the stage's weights takes far less
    st = run_report.plan.stages[2]
    hbm = run_report.plan.hardware.hbm_bytes_per_s
    assert (st.dense_params + st.expert_params / 64) * 8 / hbm < base.gemm_s / 10
    assert published.value("deepseek_v3_comp_comm_ratio") == "1:1"


def test_all_to_all_balance_reads_the_nodes_from_the_mesh(run_report):
    # the course's plan of the run puts DP outermost: an EP group of 64 is strided over 64 nodes (DeepSeek-V3's own
    # layout, DP innermost, spans 8); node-limited routing sends a token to at most 4 of them either way
    mesh = run_report.plan.mesh
    assert len({mesh.node(r) for r in mesh.group(0, "ep")}) == 64
    v3_layout = evaluate(run_report.plan.replace(order="tp-cp-dp-pp"))
    mesh = v3_layout.plan.mesh
    assert len({mesh.node(r) for r in mesh.group(0, "ep")}) == 8
    kw: dict[str, Any] = {"dispatch_bytes": ep.FP8_DISPATCH_BYTES, "max_nodes": 4}
    assert breakdowns.all_to_all_balance(v3_layout, **kw) == breakdowns.all_to_all_balance(run_report, **kw)
    # EP 8 inside one node (DP innermost): NVLink, and the node limit changes nothing
    one_node = evaluate(run_report.plan.replace(order="tp-cp-dp-pp", ep=8))
    assert one_node.link["ep"] == "nvlink"
    assert breakdowns.all_to_all_balance(one_node, max_nodes=4) == breakdowns.all_to_all_balance(one_node)


def test_all_to_all_balance_refuses_plans_without_experts():
    from meshplan import Plan

    with pytest.raises(ValueError, match="ep=1: the plan has no expert-parallel all-to-all"):
        breakdowns.all_to_all_balance(evaluate(Plan.create("llama-3.1-8b", gpus=8, dp=8)))
    with pytest.raises(ValueError, match=r"gemm_speedup=0.5 must be a number >= 1"):
        breakdowns.all_to_all_balance(
            evaluate(calibration.run_plan(calibration.run("deepseek-v3-pretraining"))), gemm_speedup=0.5
        )


def test_world_size_1024_vs_2048():
    recipe = published.value("megatron_bridge_deepseek_v3_recipe")
    assert recipe == {"gpus": 1024, "tp": 2, "pp": 16, "ep": 64}
    assert ep.plain_product(2, 16, 64) == 2048
    assert ep.moe_world_size(2, 16, 64, expert_tp=1) == recipe["gpus"] == 1024
    assert ep.moe_world_size(2, 16, 64) == 2048
    with pytest.raises(ValueError) as err:
        Mesh({"tp": 2, "cp": 1, "pp": 16, "dp": 32}, ep=64)
    assert str(err.value) == "ep=64 does not divide dp×cp = 32×1 = 32"
    folded = Mesh({"tp": 2, "cp": 1, "pp": 16, "dp": 32}, order="tp-cp-ep-dp-pp", ep=64, etp=1)
    g = folded.group(0, "ep")
    assert folded.world_size == 1024 and g == tuple(range(64))
    assert (
        len({folded.coords(r)["tp"] for r in g}),
        len({folded.coords(r)["dp"] for r in g}),
        len({folded.node(r) for r in g}),
    ) == (2, 32, 8)
    for tp_, pp, e, etp in ((1, 16, 64, 1), (8, 8, 8, 1), (4, 1, 32, None), (2, 4, 8, 2)):
        n = ep.moe_world_size(tp_, pp, e, expert_tp=etp)
        per_stage = n // pp
        assert per_stage % tp_ == 0 and per_stage % ((etp or tp_) * e) == 0
    m = Mesh({"tp": 1, "cp": 1, "pp": 16, "dp": 128}, order="tp-cp-dp-pp", ep=64)
    assert m.world_size == published.value("deepseek_v3_cluster_gpus") == 2048
    assert len({m.node(r) for r in m.group(0, "ep")}) == 8
    # the world-size exercise's default (TP 2, PP 8, EP 32, expert TP = TP): lcm(2, 64) x 8
    assert ep.moe_world_size(2, 8, 32) == 512


def test_straggler_simulation_is_seeded():
    got = {s: ep.skewed_routing(4096, 256, 8, 64, s, seed=0) for s in (0.0, 0.25, 0.5, 1.0)}
    assert [f"{got[s].straggler:.2f}" for s in got] == ["1.10", "2.54", "5.59", "16.38"]
    assert [got[s].expert_tokens[0] for s in got] == [116, 384, 1005, 3238]
    assert fmt_pct(got[0.5].expert_tokens[0] / 4096) == "24.5 %"
    for r in got.values():
        assert sum(r.gpu_tokens) == sum(r.expert_tokens) == 4096 * 8 and r.mean == 512.0
    assert got[0.5].busiest_gpu == 0
    assert ep.skewed_routing(4096, 256, 8, 64, 0.5, seed=0) == got[0.5]
    # the draw does not depend on the EP size: the same experts, grouped differently
    r8 = ep.skewed_routing(4096, 256, 8, 8, 0.5, seed=0)
    assert r8.expert_tokens == got[0.5].expert_tokens
    assert r8.gpu_tokens == tuple(sum(got[0.5].expert_tokens[32 * g : 32 * g + 32]) for g in range(8))
    with pytest.raises(ValueError, match="skew=-1"):
        ep.skewed_routing(4096, 256, 8, 64, -1)


def test_capacity_and_dropped_tokens():
    assert ep.expert_capacity(4096, 256, 8, 1.0) == 128
    assert ep.expert_capacity(4096, 256, 8, 1.25) == 160
    assert ep.expert_capacity(8192, 256, 8, 1.5) == 384  # the exercise's default
    assert ep.expert_capacity(100, 3, 1, 1.0) == math.ceil(100 / 3) == 34  # Megatron's ceil(tokens·k/E·f)
    load = ep.skewed_routing(4096, 256, 8, 64, 0.5, seed=0)
    for factor in (1.0, 1.25, 1.5, 2.0):
        d = ep.capacity_drops(load, 8, factor)
        cap = ep.expert_capacity(4096, 256, 8, factor)
        over = [n - cap for n in load.expert_tokens if n > cap]  # an independent count
        assert (d.capacity, d.dropped, d.full_experts) == (cap, sum(over), len(over))
        assert d.dropped_fraction == sum(over) / (4096 * 8) and d.padded_compute == 256 * cap / (4096 * 8)
    assert [fmt_pct(ep.capacity_drops(load, 8, f).dropped_fraction) for f in (1.25, 2.0)] == ["16.9 %", "8.8 %"]
    uniform = ep.skewed_routing(4096, 256, 8, 64, 0.0, seed=0)
    assert fmt_pct(ep.capacity_drops(uniform, 8, 1.0).dropped_fraction) == "3.5 %"
    assert ep.capacity_drops(uniform, 8, 1.25).dropped == 0
    assert not ep.DEEPSEEK_V3_DROPS_TOKENS
    with pytest.raises(ValueError, match="capacity_factor=0 must be a positive number"):
        ep.expert_capacity(4096, 256, 8, 0)
    with pytest.raises(ValueError, match="experts_per_token=3 does not divide 32768 assignments"):
        ep.capacity_drops(load, 3, 1.0)


def test_bias_balancing_evens_the_load(v3):
    r = ep.bias_balancing(4096, 256, 8, 64, 0.5, 40, 0.1, seed=0)
    assert len(r.straggler) == len(r.hottest_share) == 41 and len(r.bias) == 256
    assert [f"{r.straggler[0]:.2f}", f"{r.straggler[-1]:.2f}"] == ["5.52", "1.10"]
    assert [fmt_pct(r.hottest_share[0]), fmt_pct(r.hottest_share[-1])] == ["23.1 %", "3.3 %"]
    assert r.bias[0] < 0 < r.bias[-1]  # the hottest expert pushed down, the coldest pulled up
    assert all(abs(b / 0.1 - round(b / 0.1)) < 1e-9 for b in r.bias)  # sign updates of exactly 0.1
    assert r == ep.bias_balancing(4096, 256, 8, 64, 0.5, 40, 0.1, seed=0)
    # no update speed: the bias stays 0 and the load stays skewed
    still = ep.bias_balancing(1024, 16, 2, 4, 1.0, 5, 0.0, seed=1)
    assert set(still.bias) == {0.0} and min(still.straggler) > 1.5
    # the constants the chapter quotes, and the router bias the library counts (DeepSeek-V3 section 2.1.2, 4.2)
    assert (ep.DEEPSEEK_V3_BIAS_UPDATE_SPEED, ep.DEEPSEEK_V3_SEQUENCE_BALANCE_WEIGHT) == (0.001, 0.0001)
    assert sum(layer.num_experts for layer in v3.layers if layer.router_bias) == 58 * 256 == 14_848
    with pytest.raises(ValueError, match=r"update_speed=-0\.1 must be a non-negative number"):
        ep.bias_balancing(1024, 16, 2, 4, 1.0, 5, -0.1)
    with pytest.raises(ValueError, match="steps=0 must be a positive integer"):
        ep.bias_balancing(1024, 16, 2, 4, 1.0, 0, 0.1)


def test_expert_data_parallel_sync_of_the_deepseek_plans(run_report, v3):
    # DeepSeek-V3's run: each expert on 2 of 128 DP ranks; ZeRO-1 sync of its 4 MoE layers x 4 experts per GPU
    experts_gpu = 4 * 4 * 44_040_192
    assert run_report.plan.expert_dp == 2 and run_report.plan.dp == 128
    assert run_report.comm_bytes_per_step["edp"] == experts_gpu * 2 * 2 * (2 - 1) / 2 == 1_409_286_144
    assert fmt_gb(run_report.comm_bytes_per_step["edp"], 2) == "1.41 GB"
    assert fmt_gb(run_report.comm_bytes_per_step["dp"], 2) == "3.70 GB"
    assert run_report.link["edp"] == "infiniband"
    assert run_report.notes[0] == (
        "routed-expert gradients sync over 2 expert-data-parallel ranks (edp), apart from the dense gradients' "
        "128 data-parallel ranks"
    )
    # Megatron-LM: fp32 reduce-scatter (4 B) + bf16 all-gather (2 B) over the expert-DP group
    megatron = evaluate(run_report.plan.replace(accounting="megatron"))
    assert megatron.comm_bytes_per_step["edp"] == experts_gpu * 6 * (2 - 1) / 2
    assert fmt_gb(megatron.comm_bytes_per_step["edp"], 2) == "2.11 GB"


@pytest.mark.parametrize(
    "gpus, expert_tp, expert_dp, edp_gb",
    [(1024, 1, 1, "0.00 GB"), (2048, 1, 2, "1.41 GB"), (2048, None, 1, "0.00 GB")],
)
def test_expert_data_parallel_sync_of_the_recipe(gpus, expert_tp, expert_dp, edp_gb):
    from meshplan import Plan
    from meshplan.spec.mesh import MEGATRON_ORDER
    from meshplan.spec.stages import spread_layers

    plan = Plan.create(
        "deepseek-v3",
        gpus=gpus,
        tp=2,
        pp=16,
        ep=64,
        expert_tp=expert_tp,
        zero=1,
        recompute="full",
        order=MEGATRON_ORDER,
        global_batch=15360,
        layers_per_stage=spread_layers(61, 16),
    )
    r = evaluate(plan)
    assert plan.expert_dp == expert_dp == 2 * (gpus // 32) // ((expert_tp or 2) * 64)
    assert fmt_gb(r.comm_bytes_per_step["edp"], 2) == edp_gb
    assert (r.link["edp"] is None) == (expert_dp == 1)


def test_expert_dp_exercise_default():
    from meshplan.spec.dims import ParallelDims

    assert ParallelDims(tp=2, pp=1, dp=48, ep=8, expert_tp=1).expert_dp == 12
    with pytest.raises(ValueError, match="does not divide"):
        ParallelDims(tp=1, pp=1, dp=24, ep=64, expert_tp=1)
