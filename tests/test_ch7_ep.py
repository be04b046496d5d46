"""Chapter 7 (expert parallel): the key numbers it prints, each asserted to its printed digit (GB = 1e9 B)."""

from __future__ import annotations

import pytest

from meshplan import compute, ep, load_hardware, load_model, published
from meshplan.mesh import Mesh
from meshplan.units import fmt_gb, fmt_int


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


def test_654b_routed_expert_parameters_4_per_gpu(v3):
    assert fmt_int(v3.routed_expert_params) == "653,908,770,816"
    assert f"{v3.routed_expert_params / 1e9:,.0f}B" == "654B"
    assert ep.experts_per_gpu(v3.num_experts, published.value("deepseek_v3_parallelism")["ep"]) == 4
    assert f"{v3.routed_expert_params / 64 / 1e9:,.1f}B" == "10.2B"
    with pytest.raises(ValueError, match="ep=48 does not divide 256 experts"):
        ep.experts_per_gpu(256, 48)


def test_all_to_all_and_the_one_to_one_ratio(v3):
    hw = load_hardware()
    a2a = ep.ep_bytes_per_step(4096, 8, v3.hidden_size, 64, 1, 1)
    assert (fmt_gb(a2a / 4, 2), fmt_gb(a2a, 2)) == ("0.46 GB", "1.85 GB")
    i = next(i for i, x in enumerate(v3.layer_expert_params) if x)
    active = v3.layer_params[i] - v3.layer_expert_params[i] + v3.layer_expert_params[i] * 8 // 256
    assert fmt_int(active) == "585,318,656"
    t_comm, t_comp = a2a / hw.infiniband_bytes_per_s, compute.step_time_s(active, 4096, hw.effective_flop_per_s)
    assert (f"{1e3 * t_comm:.1f}", f"{1e3 * t_comp:.1f}", f"{t_comp / t_comm:.2f}") == ("37.0", "36.0", "0.97")
    assert published.value("deepseek_v3_comp_comm_ratio") == "1:1"


def test_nvlink_3_2_times_ib_and_node_limited_routing():
    hw = load_hardware()
    assert (hw.nvlink_bytes_per_s, hw.infiniband_bytes_per_s) == (160e9, 50e9)
    r = ep.node_limited_routing(256, 8, 64, 8, published.value("deepseek_v3_max_nodes_per_token"),
                                hw.nvlink_bytes_per_s, hw.infiniband_bytes_per_s)
    assert (r.nodes, r.experts_per_node, r.max_nodes_per_token) == (8, 32, 4)
    # IB transfers: one per remote node; the token's own node (one of the 8) is reached over NVLink
    assert (r.ib_copies_unlimited, r.ib_copies_limited) == (7, 4)
    for e, expected in ((16, (1, 1)), (8, (0, 0)), (128, (8, 4))):
        r2 = ep.node_limited_routing(256, 8, e, 8, 4, 160e9, 50e9)
        assert (r2.ib_copies_unlimited, r2.ib_copies_limited) == expected
    assert (f"{r.nvlink_over_ib:.1f}", f"{r.expert_budget:.1f}") == ("3.2", "12.8")
    assert round(r.expert_budget) == published.value("deepseek_v3_max_experts_node_limited") == 13


def test_world_size_1024_vs_2048():
    recipe = published.value("megatron_bridge_deepseek_v3_recipe")
    assert recipe == {"gpus": 1024, "tp": 2, "pp": 16, "ep": 64}
    assert ep.plain_product(2, 16, 64) == 2048
    assert ep.moe_world_size(2, 16, 64, expert_tp=1) == recipe["gpus"] == 1024
    assert ep.moe_world_size(2, 16, 64) == 2048
    with pytest.raises(ValueError) as err:
        Mesh({"tp": 2, "cp": 1, "pp": 16, "dp": 32}, ep=64)
    assert str(err.value) == "ep=64 does not divide dp×cp = 32×1 = 32"
    assert Mesh({"tp": 2, "cp": 1, "pp": 16, "dp": 64}, ep=64).world_size == 2048
    # the recipe with expert-TP 1 in Megatron-Core's rank order (pipeline outermost): an EP group is one
    # stage's 64 consecutive GPUs, 2 TP x 32 DP positions on 8 nodes, as DeepSeek-V3's EP spans 8 nodes
    folded = Mesh({"tp": 2, "cp": 1, "pp": 16, "dp": 32}, order="tp-cp-ep-dp-pp", ep=64, etp=1)
    g = folded.group(0, "ep")
    assert folded.world_size == 1024 and g == tuple(range(64))
    assert (len({folded.coords(r)["tp"] for r in g}), len({folded.coords(r)["dp"] for r in g}),
            len({folded.node(r) for r in g})) == (2, 32, 8)
    # EP never multiplies the world size: it must divide the ranks a stage already has
    for tp, pp, e, etp in ((1, 16, 64, 1), (8, 8, 8, 1), (4, 1, 32, None), (2, 4, 8, 2)):
        n = ep.moe_world_size(tp, pp, e, expert_tp=etp)
        per_stage = n // pp
        assert per_stage % tp == 0 and per_stage % ((etp or tp) * e) == 0
    # DeepSeek-V3's own run: PP 16 x DP 128 = 2,048, EP 64 on 8 consecutive nodes with DP innermost
    m = Mesh({"tp": 1, "cp": 1, "pp": 16, "dp": 128}, order="tp-cp-dp-pp", ep=64)
    assert m.world_size == published.value("deepseek_v3_cluster_gpus") == 2048
    assert len({m.node(r) for r in m.group(0, "ep")}) == 8


def test_straggler_simulation_is_seeded():
    got = {s: ep.skewed_routing(4096, 256, 8, 64, s, seed=0) for s in (0.0, 0.25, 0.5, 1.0)}
    assert [f"{got[s].straggler:.2f}" for s in got] == ["1.10", "2.54", "5.59", "16.38"]
    assert [got[s].expert_tokens[0] for s in got] == [116, 384, 1005, 3238]
    for r in got.values():
        assert sum(r.gpu_tokens) == sum(r.expert_tokens) == 4096 * 8 and r.mean == 512.0
    assert got[0.5].busiest_gpu == 0
    assert ep.skewed_routing(4096, 256, 8, 64, 0.5, seed=0) == got[0.5]
    with pytest.raises(ValueError, match="skew=-1"):
        ep.skewed_routing(4096, 256, 8, 64, -1)


def test_all_to_all_bytes_per_gpu_per_step(v3):
    shape = published.value("deepseek_v3_pretraining_shape")
    pipelines = published.value("deepseek_v3_cluster_gpus") // published.value("deepseek_v3_parallelism")["pp"]
    seqs = shape["batch_sequences"] // pipelines
    moe_per_stage = -(-v3.num_moe_layers // 16)
    assert (shape["seq"], seqs, moe_per_stage) == (4096, 120, 4)
    per_step = ep.ep_bytes_per_step(4096, 8, v3.hidden_size, 64, moe_per_stage, seqs)
    assert fmt_gb(per_step, 0) == "888 GB"
    assert f"{per_step / load_hardware().infiniband_bytes_per_s:.0f}" == "18"
