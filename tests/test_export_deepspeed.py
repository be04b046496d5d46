"""The DeepSpeed export (``meshplan.export_deepspeed``) read back by DeepSpeed's own config class.

``deepspeed.runtime.config.DeepSpeedConfig(config, mpu)`` parses the dict, applies the ZeRO section's defaults and
validators (pydantic, unknown ZeRO keys refused) and asserts the batch triple against the data-parallel world size.
It reads that size in a ``try`` that first calls ``deepspeed.comm.get_rank()``, which fails without an initialised
process group and falls back to world size 1 (``deepspeed/runtime/config.py`` L456-L475 at v0.19.8). The tests
patch ``deepspeed.comm.get_rank`` and ``deepspeed.comm.get_world_size`` (``config.py`` calls them through the module,
so the patch is seen) and check both ways DeepSpeed can learn the size: from ``torch.distributed``'s world size (no
``mpu``, as ``deepspeed.initialize`` runs a transformers model) and from an ``mpu``'s
``get_data_parallel_world_size``. Skipped without deepspeed.
"""

from __future__ import annotations

import json
import logging

import pytest

from meshplan import Plan
from meshplan.export_deepspeed import (
    buffer_bytes,
    config_keys,
    deepspeed_config,
    deepspeed_file,
    deepspeed_options,
    deepspeed_text,
)
from meshplan.plan.evaluation import DEEPSPEED_BUCKET_BYTES, DEEPSPEED_Z3_REDUCE_BYTES

deepspeed = pytest.importorskip("deepspeed")
DeepSpeedConfig = pytest.importorskip("deepspeed.runtime.config").DeepSpeedConfig

logging.getLogger("DeepSpeed").setLevel(logging.WARNING)  # the config prints itself at INFO

PLANS = [  # (model, gpus, zero, micro_batch_size, micro_batches, recompute)
    ("llama-3.1-8b", 8, 0, 1, 8, "none"),
    ("llama-3.1-8b", 8, 2, 1, 8, "none"),
    ("llama-3.1-8b", 64, 3, 2, 4, "full"),
    ("qwen3-8b", 16, 1, 4, 2, "full"),
    ("qwen3-8b", 32, 3, 1, 16, "none"),
    ("small-3.7m", 1, 0, 8, 1, "none"),
    ("small-3.7m", 4, 1, 16, 3, "full"),
    ("small-3.7m", 2, 2, 2, 5, "none"),
    ("qwen3-30b-a3b", 16, 3, 1, 8, "full"),  # MoE, experts replicated (ep = 1)
]


class _Mpu:
    """What DeepSpeedConfig asks of an ``mpu``: the data-parallel world size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.fixture
def world(monkeypatch):
    """Set the world size DeepSpeed's config reads from ``deepspeed.comm`` (rank 0)."""

    def set_world(n: int) -> None:
        monkeypatch.setattr(deepspeed.comm, "get_rank", lambda group=None: 0)
        monkeypatch.setattr(deepspeed.comm, "get_world_size", lambda group=None: n)

    return set_world


def _plan(model, gpus, zero, b, m, recompute):
    return Plan.create(model, gpus=gpus, zero=zero, micro_batch_size=b, micro_batches=m, recompute=recompute,
                       accounting="deepspeed", hardware="h100-sxm-80gb")  # fmt: skip


@pytest.mark.parametrize("case", PLANS, ids=lambda c: f"{c[0]}-{c[1]}gpu-zero{c[2]}-b{c[3]}-m{c[4]}-{c[5]}")
def test_deepspeed_parses_the_export_and_its_batch_checks_pass(case, world):
    plan = _plan(*case)
    cfg, notes = deepspeed_config(plan)
    world(plan.gpus)
    for parsed in (DeepSpeedConfig(cfg), DeepSpeedConfig(cfg, mpu=_Mpu(plan.dp))):
        assert parsed.world_size == plan.dp == plan.gpus
        assert (parsed.train_batch_size, parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (
            plan.global_batch,
            plan.micro_batch_size,
            plan.micro_batches,
        )
        z, emitted = parsed.zero_config, cfg["zero_optimization"]
        assert int(z.stage) == plan.zero == emitted["stage"]
        assert parsed.bfloat16_config.enabled is True
        assert str(parsed.communication_data_type) == "torch.bfloat16" and parsed.grad_accum_dtype == "bf16"
        # what the export writes is what DeepSpeed holds (its pydantic aliases for the ZeRO-3 keys)
        held = {
            "contiguous_gradients": z.contiguous_gradients,
            "overlap_comm": z.overlap_comm,
            "reduce_bucket_size": z.reduce_bucket_size,
            "allgather_bucket_size": z.allgather_bucket_size,
            "stage3_max_live_parameters": z.max_live_parameters,
            "stage3_max_reuse_distance": z.max_reuse_distance,
            "stage3_prefetch_bucket_size": z.prefetch_bucket_size,
            "stage3_param_persistence_threshold": z.param_persistence_threshold,
        }
        for key, value in emitted.items():
            if key != "stage":
                assert held[key] == value, key
        if plan.zero >= 1:
            assert z.overlap_comm is True  # the step time's dp_overlap
            assert z.allgather_bucket_size % 2 == 0  # stage_1_and_2.py L389-L391
    assert any("launch" in n for n in notes)
    assert any(f"recompute='{plan.recompute}'" in n for n in notes)


def test_a_wrong_world_size_fails_deepspeeds_batch_check(world):
    cfg, _ = deepspeed_config(_plan("llama-3.1-8b", 8, 2, 1, 8, "none"))
    world(16)
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        DeepSpeedConfig(cfg)


def test_deepspeeds_overlap_comm_default_is_what_the_ledger_assumed(world):
    """overlap_comm: DeepSpeed's default is off for ZeRO-1/2 and on for ZeRO-3 (zero/config.py L383-L387), so the
    export writes it for ZeRO-1/2 to match the step time."""
    world(1)
    base = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    defaults = {
        s: DeepSpeedConfig({**base, "zero_optimization": {"stage": s}}).zero_config.overlap_comm for s in range(4)
    }
    assert defaults == {0: False, 1: False, 2: False, 3: True}


def test_a_header_of_comment_lines_still_loads(tmp_path, world):
    """deepspeed.initialize reads a config file with hjson (config.py L443-L444): '#' lines are comments."""
    plan = _plan("qwen3-8b", 16, 1, 4, 2, "full")
    cfg, notes = deepspeed_config(plan)
    path = tmp_path / "ds.json"
    path.write_text("".join(f"# {n}\n" for n in ("a header", *notes)) + deepspeed_text(plan))
    world(plan.gpus)
    assert DeepSpeedConfig(str(path)).train_batch_size == plan.global_batch
    assert json.loads(deepspeed_text(plan)) == cfg


def test_every_written_key_is_listed_in_the_engine_file():
    listed = deepspeed_options()
    for case in PLANS:
        cfg, _ = deepspeed_config(_plan(*case))
        assert config_keys(cfg) <= listed
    assert "v0.19.8" in deepspeed_file()["version"] and deepspeed_file()["source"].startswith("https://")
    assert all("L" in why for why in deepspeed_file()["options"].values())  # each with its line


@pytest.mark.parametrize(
    ("settings", "factor"),
    [
        ({"gpus": 8, "tp": 2}, "tp=2"),
        ({"gpus": 8, "pp": 2}, "pp=2"),
        ({"gpus": 8, "cp": 2}, "cp=2"),
        ({"gpus": 8, "zero": 1, "recompute": "selective"}, "recompute='selective'"),
    ],
)
def test_refusals_name_their_factor(settings, factor):
    with pytest.raises(ValueError, match=f"^{factor}"):
        deepspeed_config(Plan.create("llama-3.1-8b", **settings))


def test_expert_parallelism_is_refused():
    with pytest.raises(ValueError, match=r"^ep=8: DeepSpeed's expert parallelism is model code"):
        deepspeed_config(Plan.create("qwen3-30b-a3b", gpus=16, ep=8, zero=1))


def test_zero0_says_its_all_reduce_is_not_overlapped():
    _, notes = deepspeed_config(_plan("llama-3.1-8b", 8, 0, 1, 8, "none"))
    assert any(n.startswith("ZeRO-0:") for n in notes)
    _, one_gpu = deepspeed_config(_plan("small-3.7m", 1, 0, 8, 1, "none"))
    assert not any(n.startswith("ZeRO-0:") for n in one_gpu)


def test_buffer_bytes_and_the_ledger():
    """ZeRO-3's gathered-parameter term and reduce bucket agree with the ledger, so nothing is noted."""
    cfg3, notes3 = deepspeed_config(_plan("qwen3-8b", 32, 3, 1, 16, "none"))
    assert buffer_bytes(cfg3) == {"gradient bucket": 1_000_000_000, "live parameters": 2_000_000_000}
    assert buffer_bytes(cfg3)["live parameters"] == DEEPSPEED_BUCKET_BYTES[3]
    assert buffer_bytes(cfg3)["gradient bucket"] == DEEPSPEED_Z3_REDUCE_BYTES
    assert not any(n.startswith("memory:") for n in notes3)
    for zero in (1, 2):
        cfg, _ = deepspeed_config(_plan("llama-3.1-8b", 8, zero, 1, 8, "none"))
        assert buffer_bytes(cfg) == {"gradient buckets": 2_000_000_000}  # two 5e8-element bf16 buffers


@pytest.mark.parametrize("zero", [1, 2])
def test_the_ledger_counts_the_exported_gradient_buckets(zero):
    cfg, notes = deepspeed_config(_plan("llama-3.1-8b", 8, zero, 1, 8, "none"))
    assert not any(n.startswith("memory:") for n in notes)
    assert buffer_bytes(cfg)["gradient buckets"] == DEEPSPEED_BUCKET_BYTES[zero]
