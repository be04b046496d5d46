"""Every Megatron-LM export of tests/export_plans.py obeys the start-up rules of the pinned Megatron-LM
(``data/engines/megatron-lm.json``: ``startup_rules``, each with its file and lines) and says what its price
assumes (``priced_defaults``): the overlap flags, the MoE dispatcher and grouped GEMMs, the environment, the
checkpoint format. scripts/check_megatron_export.py proves the same exports with Megatron-LM's own parser,
``validate_args`` and ``TransformerConfig`` on a checkout of that release (not in CI: ``megatron.training`` is not on
PyPI)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from check_megatron_export import split_command
from export_plans import megatron_plans

from meshplan.export import engine_file, engine_options, export_text

PLANS = megatron_plans()
RULES = {r["rule"] for r in engine_file("megatron-lm")["startup_rules"]}


def _parsed(plan):
    env, run, argv = split_command(export_text(plan, "megatron"))
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        key = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        flags[key] = value
        i += 2 if value is not None else 1
    return env, run, flags


@pytest.mark.parametrize(("name", "plan"), PLANS, ids=[n for n, _ in PLANS])
def test_the_export_obeys_megatrons_startup_rules(name, plan):
    env, run, flags = _parsed(plan)
    assert set(flags) <= engine_options("megatron-lm")
    fsdp = "--use-megatron-fsdp" in flags
    assert fsdp == (plan.zero in (2, 3))
    # cuda_device_max_connections_1 / fsdp_connections_not_1
    if fsdp:
        assert "CUDA_DEVICE_MAX_CONNECTIONS" in env and env["CUDA_DEVICE_MAX_CONNECTIONS"] is None  # env -u
    elif plan.tp > 1 or plan.cp > 1:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    # fsdp_dtensor_checkpoints / fsdp_dtensor_needs_fsdp
    assert (flags.get("--ckpt-format") == "fsdp_dtensor") == fsdp
    # the fp32 main gradients the ledger counts (Megatron-FSDP's default follows the bf16 model)
    assert (flags.get("--megatron-fsdp-main-grads-dtype") == "fp32") == fsdp
    # param_gather_needs_sharding, and the price's overlapped data-parallel sync
    sharded = fsdp or "--use-distributed-optimizer" in flags
    assert ("--overlap-grad-reduce" in flags) == (plan.dp * plan.cp > 1)
    assert ("--overlap-param-gather" in flags) == (plan.dp * plan.cp > 1 and sharded)
    # expert_tp_default
    assert flags.get("--expert-tensor-parallel-size", str(plan.tp)) == str(plan.etp)
    # the dispatch the EP traffic prices, and grouped GEMMs (grouped_gemm_capability: H100 is 9.0)
    if plan.model.is_moe:
        assert "--moe-grouped-gemm" in flags
        assert flags.get("--moe-token-dispatcher-type") == ("alltoall" if plan.ep > 1 else None)
    # gated_delta_net_heads
    if "--experimental-attention-variant" in flags:
        keys, values = int(flags["--linear-num-key-heads"]), int(flags["--linear-num-value-heads"])
        assert values % keys == 0 and keys % (plan.tp * plan.cp) == 0 and values % (plan.tp * plan.cp) == 0
    # the sequence within the positions Megatron asserts (arguments.py L1314)
    assert int(flags["--max-position-embeddings"]) >= plan.seq
    assert int(run[1].split("=")[1]) * int(run[2].split("=")[1]) == plan.gpus


def test_the_rules_checked_are_the_data_files():
    assert {
        "cuda_device_max_connections_1",
        "fsdp_connections_not_1",
        "fsdp_dtensor_checkpoints",
        "fsdp_dtensor_needs_fsdp",
        "param_gather_needs_sharding",
        "expert_tp_default",
        "gated_delta_net_heads",
        "grouped_gemm_capability",
    } == RULES
    assert "core_v0.19.0" in engine_file("megatron-lm")["version"]


def test_gated_deltanet_heads_tp_cp_does_not_divide_is_refused():
    from meshplan import Plan

    plan = Plan.create("qwen3.8-27b", gpus=64, tp=2, cp=32, zero=1, seq=262144, hardware="h100-sxm-80gb")
    with pytest.raises(ValueError, match=r"tp × cp = 2 × 32 does not divide qwen3.8-27b's 16 Gated DeltaNet key"):
        export_text(plan, "megatron")


def test_a_sequence_beyond_learned_positions_is_refused_and_rotary_ones_are_raised_with_a_note():
    from meshplan import Plan

    with pytest.raises(ValueError, match=r"longer than small-3\.7m.s 64 learned positions"):
        export_text(Plan.create("small-3.7m", gpus=1, seq=128), "megatron")
    text = export_text(Plan.create("qwen3-8b", gpus=8, zero=1, seq=65536, hardware="h100-sxm-80gb"), "megatron")
    assert "--max-position-embeddings 65536" in text and "raised from the config's 40,960" in text
