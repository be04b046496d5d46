"""Expert tensor parallelism (MoE parallel folding): EP groups over TP × CP × DP when expert_tp < tp.

The published DeepSeek-V3 recipe of NVIDIA Megatron Bridge, TP 2 × PP 16 × EP 64 on 1,024 GPUs, is valid only
when the experts are not split by TP (expert TP 1); with expert TP = TP it needs 2,048 GPUs.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from commands import run

from meshplan import Mesh, Plan, evaluate, load_model
from meshplan.course import published
from meshplan.export import megatron
from meshplan.spec.stages import spread_layers

DSV3 = load_model("deepseek-v3")


def _recipe_plan(expert_tp):
    r = published.value("megatron_bridge_deepseek_v3_recipe")
    return Plan.create(
        "deepseek-v3",
        gpus=r["gpus"],
        tp=r["tp"],
        pp=r["pp"],
        ep=r["ep"],
        zero=1,
        recompute="full",
        expert_tp=expert_tp,
        layers_per_stage=spread_layers(DSV3.num_layers, r["pp"]),
    )


def test_recipe_needs_expert_tp_1_on_1024_gpus():
    plan = _recipe_plan(1)
    assert plan.gpus == 1024 and plan.dp == 32 and plan.expert_dp == 1
    with pytest.raises(ValueError, match=r"^ep=64 does not divide dp×cp = 32×1 = 32$"):
        _recipe_plan(None)


def test_expert_states_are_split_over_expert_tp_times_ep():
    # stages of 3, 3, 4, ..., 4, 3 layers; stage 0 holds the three dense layers, the busiest MoE stages four
    # MoE layers; with stage_balance="even" the embedding, head and norms are spread over the 16 stages. Full
    # recompute with one micro-batch keeps the activations small and equal per layer, so the stage with the most
    # model-state bytes is the most loaded one.
    moe_layer, dense_layer = max(DSV3.layer_params), min(DSV3.layer_params)
    experts_per_layer = max(DSV3.layer_expert_params)
    outside = (DSV3.params.total - sum(DSV3.layer_params)) / 16
    stage0 = (3 * dense_layer + outside) / 2  # dense: split over TP 2 only
    for etp in (1, 2):
        moe_stage = (4 * (moe_layer - experts_per_layer) + outside) / 2 + 4 * experts_per_layer / (etp * 64)
        plan = Plan.create(
            "deepseek-v3",
            gpus=2048,
            tp=2,
            pp=16,
            ep=64,
            expert_tp=etp,
            recompute="full",
            micro_batches=1,
            layers_per_stage=spread_layers(DSV3.num_layers, 16),
        )
        assert plan.expert_dp == 2048 // 16 // (etp * 64)
        per_layer = 2 * 4096 * DSV3.hidden_size / 2  # full recompute, SP over TP 2: 2sbh/t
        mem0, mem_moe = 16 * stage0 + 3 * per_layer, 16 * moe_stage + 4 * per_layer
        r = evaluate(plan)
        assert r.memory_bytes["total"] == pytest.approx(max(mem0, mem_moe), rel=1e-12)
        assert r.params_per_gpu == pytest.approx(stage0 if mem0 > mem_moe else moe_stage, rel=1e-12)
    # expert TP 1 keeps whole experts: its MoE stage is the busiest; with expert TP 2 the dense stage 0 is
    assert (4 * (moe_layer - experts_per_layer) + outside) / 2 + 4 * experts_per_layer / 64 > stage0
    assert (4 * (moe_layer - experts_per_layer) + outside) / 2 + 4 * experts_per_layer / 128 < stage0


def _numpy_ep_groups(tp, cp, pp, dp, ep, etp, order):
    """Independent construction: the stage's ranks as an array [outer, inner, tp], flattened with tp fastest,
    reshaped to (blocks, ep, etp); a group is one [block, :, offset] column."""
    mesh = Mesh({"tp": tp, "cp": cp, "pp": pp, "dp": dp}, order)
    inner, outer = sorted(("cp", "dp"), key=mesh.axes.index)
    sizes = {"tp": tp, "cp": cp, "pp": pp, "dp": dp}
    out = []
    for s in range(pp):
        grid = np.zeros((sizes[outer], sizes[inner], tp), dtype=int)
        for o, i, t in itertools.product(range(sizes[outer]), range(sizes[inner]), range(tp)):
            grid[o, i, t] = mesh.rank(tp=t, pp=s, **{inner: i, outer: o})
        blocks = grid.reshape(-1, ep, etp)
        out += [tuple(int(x) for x in blocks[b, :, k]) for b in range(blocks.shape[0]) for k in range(etp)]
    return sorted(out)


@pytest.mark.parametrize("order", ["tp-cp-pp-dp", "tp-cp-ep-dp-pp", "dp-pp-cp-tp"])
@pytest.mark.parametrize(
    "tp,cp,pp,dp,ep,etp",
    [
        (2, 1, 2, 4, 8, 1),
        (4, 1, 1, 2, 4, 2),
        (4, 2, 2, 2, 8, 1),
        (2, 2, 1, 2, 2, 1),
        (8, 1, 1, 1, 8, 1),
        (2, 1, 1, 4, 4, 2),
        (4, 1, 2, 4, 2, 4),
    ],
)
def test_ep_groups_match_an_independent_construction(order, tp, cp, pp, dp, ep, etp):
    mesh = Mesh({"tp": tp, "cp": cp, "pp": pp, "dp": dp}, order, gpus_per_node=4, ep=ep, etp=etp)
    groups = mesh.groups("ep")
    assert groups == _numpy_ep_groups(tp, cp, pp, dp, ep, etp, order)
    assert sorted(r for g in groups for r in g) == list(range(mesh.world_size))
    for r in range(mesh.world_size):
        g = mesh.group(r, "ep")
        assert r in g and len(g) == ep and g in groups
        assert len({mesh.coords(x)["pp"] for x in g}) == 1  # experts never cross pipeline stages
    brute = "infiniband" if any(len({x // 4 for x in g}) > 1 for g in groups) else "nvlink"
    assert mesh.link("ep") == brute


def test_expert_tp_errors_name_the_factor():
    with pytest.raises(ValueError, match=r"^expert_tp=3 does not divide tp=2$"):
        Plan.create("deepseek-v3", gpus=2048, tp=2, pp=16, ep=64, expert_tp=3, layers_per_stage=spread_layers(61, 16))
    with pytest.raises(ValueError, match=r"^ep×expert_tp = 64×1 = 64 does not divide tp×cp×dp = 2×1×16 = 32$"):
        Plan.create("deepseek-v3", gpus=512, tp=2, pp=16, ep=64, expert_tp=1, layers_per_stage=spread_layers(61, 16))


def test_cli_and_export_carry_expert_tp():
    args = [
        "--model",
        "deepseek-v3",
        "--gpus",
        "1024",
        "--tp",
        "2",
        "--pp",
        "16",
        "--ep",
        "64",
        "--expert-tp",
        "1",
        "--uneven-stages",
        "--zero",
        "1",
        "--recompute",
        "full",
    ]
    out = run(["plan", *args, "--json"])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["mesh"] == {"tp": 2, "cp": 1, "ep": 64, "dp": 32, "pp": 16}
    assert report["settings"]["expert_tp"] == 1 and report["link"]["ep"] == "infiniband"
    i = args.index("--expert-tp")
    without = args[:i] + args[i + 2 :]
    bad = run(["plan", *without])
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["meshplan: error: ep=64 does not divide dp×cp = 32×1 = 32"]
    layout = (3,) + (4,) * 14 + (2,)  # Megatron's flags set the first and last stage only
    flags = dict(
        megatron(Plan.create("deepseek-v3", gpus=1024, tp=2, pp=16, ep=64, expert_tp=1, layers_per_stage=layout)).flags
    )
    assert flags["--expert-model-parallel-size"] == "64" and flags["--expert-tensor-parallel-size"] == "1"
    assert "--expert-tensor-parallel-size" not in dict(
        megatron(Plan.create("deepseek-v3", gpus=2048, tp=2, pp=16, ep=64, layers_per_stage=layout)).flags
    )


@pytest.mark.parametrize("gpn", [1, 3, 4, 6, 8, 12, 72])
@pytest.mark.parametrize("order", ["tp-cp-pp-dp", "tp-cp-ep-dp-pp", "dp-pp-cp-tp", "cp-tp-dp-pp"])
def test_expert_links_match_their_groups_on_any_node_size(gpn, order):
    """The expert links are worked out on the first list's groups shifted by each list's residue mod the node size
    (``Mesh._shifted_rows_cross``): equal to reading every group, on node sizes that do and do not divide the TP and
    stage offsets, with expert-TP equal to TP and below it."""
    shapes = [(2, 1, 2, 4, 8, 1), (4, 1, 3, 2, 4, 2), (4, 2, 2, 2, 8, 1), (3, 2, 2, 3, 3, 1), (2, 3, 3, 4, 6, 2)]
    shapes += [(3, 1, 2, 4, 4, 3), (6, 1, 2, 2, 4, 3), (2, 2, 3, 6, 4, 2), (1, 3, 2, 8, 12, 1), (4, 1, 2, 6, 6, 4)]
    for tp, cp, pp, dp, ep, etp in shapes:
        mesh = Mesh({"tp": tp, "cp": cp, "pp": pp, "dp": dp}, order, gpus_per_node=gpn, ep=ep, etp=etp)
        for axis in ("ep", "edp"):
            groups = mesh.groups(axis)
            assert sorted(r for g in groups for r in g) == list(range(mesh.world_size))
            if len(groups[0]) == 1:
                assert mesh.link(axis) is None
                continue
            brute = "infiniband" if any(len({x // gpn for x in g}) > 1 for g in groups) else "nvlink"
            assert mesh.link(axis) == brute, (tp, cp, pp, dp, ep, etp, axis)
