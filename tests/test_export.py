"""``meshplan.export``: seed 004's Llama 3 70B example flag for flag, every emitted flag and option present in the
named engine version's argument list (data/engines/), the mappings, and ``python -m meshplan export``."""

from __future__ import annotations

import pytest
from commands import run

from meshplan import Plan
from meshplan.course import published
from meshplan.export import (
    TORCHTITAN_VERSION_NOTE,
    engine_file,
    engine_options,
    engine_plan,
    export_text,
    megatron,
    price_note,
    toml,
    torchtitan,
)
from meshplan.spec.stages import spread_layers

# Seed 004 (the TP x PP x DP tuning article), step 5, quoting Megatron-LM's guide: LLaMA-3 70B on 64 GPUs.
SEED_004_TORCHRUN = ["torchrun", "--nproc_per_node=8"]
SEED_004_FLAGS = {
    "--tensor-model-parallel-size": "4",
    "--pipeline-model-parallel-size": "4",
    "--context-parallel-size": "2",
    "--num-layers": "80",
    "--hidden-size": "8192",
    "--num-attention-heads": "64",
    "--seq-length": "8192",
    "--sequence-parallel": None,
    "--micro-batch-size": "1",
    "--global-batch-size": "512",
    "--bf16": None,
}
PARALLEL = {
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--expert-model-parallel-size",
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--num-layers-per-virtual-pipeline-stage",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-granularity",
    "--use-tp-pp-dp-mapping",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
}


def guide_plan(**kw):
    """The seed article's Llama 3 70B example on 64 GPUs as the library plans it (``published.megatron_guide_plan``)."""
    return published.megatron_guide_plan(**kw)


def test_seed_004_example_flag_for_flag():
    out = megatron(guide_plan())
    flags = dict(out.flags)
    assert len(flags) == len(out.flags)  # no flag twice
    for f, v in SEED_004_FLAGS.items():
        assert flags[f] == v, f
    # its parallel flags exactly: nothing added, nothing missing
    assert {f for f in flags if f in PARALLEL} == {f for f in SEED_004_FLAGS if f in PARALLEL}
    assert out.torchrun[0] == SEED_004_TORCHRUN[0] and SEED_004_TORCHRUN[1] in out.torchrun
    assert "--nnodes=8" in out.torchrun
    # the rest are the model's shape flags, from its config
    assert {f: v for f, v in flags.items() if f not in SEED_004_FLAGS} == {
        "--ffn-hidden-size": "28672",
        "--group-query-attention": None,
        "--num-query-groups": "8",
        "--position-embedding-type": "rope",
        "--rotary-base": "500000",
        "--norm-epsilon": "1e-05",
        "--normalization": "RMSNorm",
        "--swiglu": None,
        "--disable-bias-linear": None,
        "--untie-embeddings-and-output-weights": None,
        "--max-position-embeddings": "131072",
        # the data-parallel sync overlapped, as the step time prices it (ZeRO-0 here: no parameter gather)
        "--overlap-grad-reduce": None,
        # dropout off, as priced (Megatron's default is 0.1 for both)
        "--attention-dropout": "0",
        "--hidden-dropout": "0",
    }
    assert out.env == ("CUDA_DEVICE_MAX_CONNECTIONS=1",)  # TP and CP before Blackwell (arguments.py L1413-L1439)


PLANS = {
    "guide": lambda: guide_plan(),
    "guide_llama_order_zero1_selective": lambda: guide_plan(order="tp-cp-pp-dp", zero=1, recompute="selective"),
    "llama405b_uneven_zero2_full_v1": lambda: Plan.create(
        "llama-3.1-405b",
        gpus=16384,
        tp=8,
        pp=16,
        zero=2,
        recompute="full",
        seq=8192,
        micro_batches=16,
        layers_per_stage=spread_layers(126, 16),
    ),
    "anchor_interleaved_zero3": lambda: Plan.create(
        "qwen3.8-27b", gpus=64, tp=8, pp=4, zero=3, micro_batches=8, virtual_stages=2
    ),
    "deepseek_ep": lambda: Plan.create(
        "deepseek-v3",
        gpus=2048,
        pp=16,
        ep=64,
        zero=1,
        recompute="selective",
        seq=4096,
        micro_batches=120,
        layers_per_stage=spread_layers(61, 16),
        order="tp-cp-ep-dp-pp",
    ),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_every_emitted_megatron_flag_exists_in_the_named_version(name):
    plan = PLANS[name]()
    if name == "deepseek_ep":
        with pytest.raises(ValueError, match="first and last stage only"):
            megatron(plan)
        plan = Plan.create(
            "deepseek-v3",
            gpus=2048,
            pp=16,
            ep=64,
            zero=1,
            seq=4096,
            micro_batches=120,
            layers_per_stage=(3,) + (4,) * 14 + (2,),
            order="tp-cp-ep-dp-pp",
        )
    out = megatron(plan)
    known = engine_options("megatron-lm")
    for f, _ in out.flags:
        assert f in known, f
    for token in out.torchrun[1:]:
        assert token.split("=")[0] in engine_options("torchrun"), token


def test_megatron_mappings():
    f = dict(megatron(PLANS["guide_llama_order_zero1_selective"]()).flags)
    assert "--use-tp-pp-dp-mapping" in f and "--use-distributed-optimizer" in f
    assert f["--recompute-granularity"] == "selective"
    f = dict(megatron(PLANS["llama405b_uneven_zero2_full_v1"]()).flags)
    assert (f["--decoder-first-pipeline-num-layers"], f["--decoder-last-pipeline-num-layers"]) == ("7", "7")
    assert (f["--use-megatron-fsdp"], f["--data-parallel-sharding-strategy"]) == (None, "optim_grads")
    assert (f["--recompute-granularity"], f["--recompute-method"], f["--recompute-num-layers"]) == (
        "full",
        "uniform",
        "1",
    )
    assert f["--global-batch-size"] == "2048"
    f = dict(megatron(PLANS["anchor_interleaved_zero3"]()).flags)
    assert f["--num-layers-per-virtual-pipeline-stage"] == "8"  # 64 layers / (4 x 2)
    assert f["--data-parallel-sharding-strategy"] == "optim_grads_params"
    f = dict(megatron(Plan.create("deepseek-v3", gpus=128, ep=64, zero=1, order="tp-cp-ep-dp-pp")).flags)
    assert (f["--expert-model-parallel-size"], f["--num-experts"], f["--moe-router-topk"]) == ("64", "256", "8")
    with pytest.raises(ValueError, match="Megatron-LM ranks are tp-cp-ep-dp-pp"):
        megatron(Plan.create("qwen3.8-27b", gpus=8, order="dp-pp-cp-tp"))


@pytest.mark.parametrize("name", list(PLANS)[:4])
def test_every_torchtitan_option_exists_in_the_named_version(name):
    settings, _ = torchtitan(PLANS[name]())
    known = engine_options("torchtitan")
    allowed = engine_file("torchtitan")["values"]
    for sec, opts in settings.items():
        for k, v in opts.items():
            assert f"{sec}.{k}" in known, (sec, k)
            if f"{sec}.{k}" in allowed:
                assert v in allowed[f"{sec}.{k}"], (sec, k, v)


def test_torchtitan_settings():
    s, notes = torchtitan(guide_plan(zero=3))
    assert s["parallelism"] == {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": 2,
        "fsdp_reshard_after_forward": "always",
        "tensor_parallel_degree": 4,
        "pipeline_parallel_degree": 4,
        "pipeline_parallel_schedule": "1F1B",
        "pipeline_parallel_microbatch_size": 1,
        # torchtitan's defaults (1, 1) would count the embedding and the head as a layer each: 81, 80, 80, 79
        "pipeline_parallel_first_stage_less_layers": 0,
        "pipeline_parallel_last_stage_less_layers": 0,
        "context_parallel_degree": 2,
        "expert_parallel_degree": 1,
    }
    # with PP one forward-backward call runs all m = 256 micro-batches of b = 1 (one accumulation step)
    assert s["training"] == {"local_batch_size": 256, "global_batch_size": 512, "seq_len": 8192}
    assert s["activation_checkpoint"] == {"mode": "none"} and notes == ()
    # ZeRO-0 with CP: torchtitan shards over the CP ranks anyway (FSDP on dp_shard_cp), exported as ZeRO-2
    s, notes = torchtitan(guide_plan())
    assert (s["parallelism"]["data_parallel_shard_degree"], s["parallelism"]["fsdp_reshard_after_forward"]) == (
        2,
        "never",
    )
    assert len(notes) == 1 and "whenever cp > 1" in notes[0]
    assert engine_plan(guide_plan(), "torchtitan").zero == 2
    s, notes = torchtitan(PLANS["guide_llama_order_zero1_selective"]())
    assert s["parallelism"]["fsdp_reshard_after_forward"] == "never" and "no ZeRO-1" in notes[0]
    assert s["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert "mesh is pp, dp, cp, tp" in notes[1]  # Llama 3's order: torchtitan's pp is outermost
    s, _ = torchtitan(PLANS["anchor_interleaved_zero3"]())
    assert s["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert s["parallelism"]["pipeline_parallel_layers_per_stage"] == 8  # 64 layers / (4 x 2)
    assert s["parallelism"]["fsdp_reshard_after_forward"] == "always"
    s, _ = torchtitan(PLANS["llama405b_uneven_zero2_full_v1"]())  # 7, 8, ..., 8, 7: torchtitan's (1, 1) exactly
    assert (
        s["parallelism"]["pipeline_parallel_first_stage_less_layers"],
        s["parallelism"]["pipeline_parallel_last_stage_less_layers"],
    ) == (1, 1)
    with pytest.raises(ValueError, match="lighter than equal middle stages"):
        torchtitan(guide_plan(layers_per_stage=(20, 19, 21, 20)))
    text = toml(*torchtitan(guide_plan(zero=0, order="tp-cp-dp-pp", seq=8192).replace(cp=1, dp=4)))
    assert text.startswith("[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 1\n")
    assert 'mode = "none"' in text


def test_torchtitan_local_batch_without_pp():
    """torchtitan accumulates global ÷ (local × dp) forward-backward calls of ``local_batch_size`` rows per DP
    rank: without PP that is b, and m the accumulation steps (issue 29: local = b × m ran 16 sequences a call)."""
    plan = Plan.create("llama-3.1-8b", gpus=8, zero=3, micro_batches=16)
    s, _ = torchtitan(plan)
    assert s["training"] == {"local_batch_size": 1, "global_batch_size": 128, "seq_len": 4096}
    assert s["training"]["global_batch_size"] // (s["training"]["local_batch_size"] * 8) == 16


def test_torchtitan_refusals_and_engine_plan():
    # EP borrows all of CP and part of the FSDP shard degree; DDP has none to lend
    with pytest.raises(ValueError, match="torchtitan's expert parallelism borrows"):
        torchtitan(Plan.create("deepseek-v3", gpus=64, ep=8))
    runs = engine_plan(Plan.create("qwen3-30b-a3b", gpus=32, tp=4, expert_tp=1, ep=8, zero=3, sp=False), "torchtitan")
    assert (runs.etp, runs.sequence_parallel) == (4, True)  # experts over TP, TP always sequence parallel
    assert engine_plan(guide_plan(), "megatron", "megatron") == guide_plan().replace(accounting="megatron")


def test_engine_files_name_their_versions_and_sources():
    for name in ("megatron-lm", "torchtitan", "torchrun"):
        d = engine_file(name)
        assert d["version"] and d["source"].startswith("https://")
    assert "5be9626709af2722333bf54797c954c09edeada3" in engine_file("megatron-lm")["version"]
    assert "6404b932421f5ce382e7dac5ad381b2c17b1373c" in engine_file("torchtitan")["version"]
    with pytest.raises(ValueError, match="unknown engine"):
        engine_file("nemo")
    with pytest.raises(ValueError, match="format='x'"):
        export_text(guide_plan(), "x")


def _cli(*args):
    return run(["export", *args])  # in process; test_cli runs a sample as real processes


def test_cli_export():
    out = _cli(
        "--format",
        "megatron",
        "--model",
        "llama-3.1-70b",
        "--gpus",
        "64",
        "--tp",
        "4",
        "--pp",
        "4",
        "--cp",
        "2",
        "--seq",
        "8192",
        "--global-batch",
        "512",
        "--order",
        "tp-cp-ep-dp-pp",
    )
    assert out.returncode == 0, out.stderr
    # headed by the plan's price in Megatron's own ledger (18 B/param, what autograd saves) and Megatron's stage
    # layout (the embedding on the first stage, the head on the last): the guide's 70B plan without recompute does not
    # fit in 80 GB
    price = price_note(guide_plan().replace(accounting="megatron", stage_balance="max"))
    assert price.startswith("peak memory per GPU in the megatron ledger: ") and "does not fit" in price
    assert out.stdout.strip() == f"# {price}\n" + megatron(guide_plan()).command()
    out = _cli(
        "--format",
        "torchtitan",
        "--model",
        "llama-3.1-405b",
        "--gpus",
        "16384",
        "--tp",
        "8",
        "--pp",
        "16",
        "--seq",
        "8192",
        "--global-batch",
        "2048",
        "--zero",
        "2",
        "--recompute",
        "full",
        "--uneven-stages",
    )
    assert out.returncode == 0, out.stderr
    # torchtitan's stage layout and rank order (the command line's defaults for its ledger: no mesh-order note)
    plan = PLANS["llama405b_uneven_zero2_full_v1"]().replace(stage_balance="max", order="tp-cp-ep-dp-pp")
    assert "mesh" not in out.stdout.split("[")[0]
    assert out.stdout == (
        f"# {price_note(engine_plan(plan, 'torchtitan', 'fsdp2'))}\n# {TORCHTITAN_VERSION_NOTE}\n"
        + toml(*torchtitan(plan))
    )
    bad = _cli("--format", "megatron", "--model", "llama-3.1-405b", "--gpus", "16384", "--tp", "8", "--pp", "16")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "meshplan: error: pp=16 does not divide 126 layers (uneven stages give the first and last stages fewer: "
        "uneven_stages=True, or --uneven-stages on the command line)"
    )
    bad = _cli("--format", "megatron", "--model", "qwen3.8-27b", "--gpus", "64", "--tp", "8", "--global-batch", "12")
    assert bad.returncode == 2 and "global batch 12 is not divisible by dp × micro-batch size = 8 × 1" in bad.stderr
    # a mesh that does not divide the GPUs is reported as such, not as a batch of a DP size that does not exist
    bad = _cli("--format", "megatron", "--model", "qwen3.8-27b", "--gpus", "8", "--tp", "3", "--global-batch", "5")
    assert (bad.returncode, bad.stderr) == (2, "meshplan: error: tp×cp×pp = 3×1×1 = 3 does not divide gpus=8\n")
