"""``export --format torchtitan-0.3.0`` checked by torchtitan 0.3.0's own code: every exported command is parsed by
tyro with torchtitan's configuration rules (``ConfigManager``'s registry) into torchtitan's own ``TrainingConfig``,
``ParallelismConfig`` and activation-checkpointing subcommands, and its degrees by torchtitan's ``ParallelDims``
(which asserts that they multiply to the world size), in a subprocess that imports the 0.3.0 wheel from
``.venv/engines/torchtitan-0.3.0`` (``make venv`` installs it there without torchtitan's training dependencies:
``requirements-torchtitan.txt``). What it parsed is read back into a plan, as torchtitan runs it, and must price
the memory and step time the export's header says, over plans of every model with a registry entry and one
without. The two batch rules of ``Trainer`` (trainer.py L118-L140 and L415-L432 in the wheel), which need the whole
trainer to import, are checked here on the parsed values; the registry entries the export names are looked up in
the wheel's source."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_export_roundtrip import _op_priced, torchtitan_stage_layers

from meshplan import Plan, evaluate
from meshplan.core.validation import MeshplanError, PlanError
from meshplan.export import TORCHTITAN_030, engine_file, engine_plan, export_text, price_note, torchtitan_030
from meshplan.steptime import step_time

ENGINE = Path(sys.prefix) / "engines" / "torchtitan-0.3.0"
H100 = "h100-sxm-80gb"

PARSER = r"""
import json, sys
from dataclasses import dataclass, field
import tyro
from torchtitan.config.configs import ParallelismConfig, TrainingConfig
from torchtitan.config.manager import ConfigManager, custom_registry
from torchtitan.distributed.activation_checkpoint import ActivationCheckpointingConfig, SelectiveAC
from torchtitan.distributed.parallel_dims import ParallelDims

ConfigManager()  # registers torchtitan's tyro rules, as its parse_args does


@dataclass(kw_only=True)
class Job:  # the Trainer.Config sections the export sets, with their types and defaults (trainer.py L103-L110)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    activation_checkpoint: ActivationCheckpointingConfig = field(default_factory=SelectiveAC.Config)


out = []
for case in json.load(sys.stdin):
    argv, rest, i = case["argv"], [], 0
    entry = {}
    while i < len(argv):  # --module and --config are ConfigManager's own (manager.py L47-L92)
        if argv[i] in ("--module", "--config"):
            entry[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    try:
        cfg = tyro.cli(Job, args=rest, default=Job(), registry=custom_registry)
    except SystemExit as exc:
        out.append({"error": f"tyro exited {exc.code}"})
        continue
    p, t, ac = cfg.parallelism, cfg.training, cfg.activation_checkpoint
    dims = ParallelDims.from_config(p, case["world"])  # its _validate asserts the product is the world size
    out.append({
        **entry,
        "replicate": dims.dp_replicate, "shard": dims.dp_shard, "tp": dims.tp, "pp": dims.pp, "cp": dims.cp,
        "ep": dims.ep, "reshard": p.fsdp_reshard_after_forward, "sp": p.enable_sequence_parallel,
        "schedule": p.pipeline_parallel_schedule, "microbatch": p.pipeline_parallel_microbatch_size,
        "first_less": p.pipeline_parallel_first_stage_less_layers,
        "last_less": p.pipeline_parallel_last_stage_less_layers,
        "layers_per_stage": p.pipeline_parallel_layers_per_stage,
        "local": t.local_batch_size, "global": t.global_batch_size, "seq": t.seq_len,
        "reduce": t.mixed_precision_reduce,
        "ac": None if ac is None else type(ac).__qualname__.split(".")[0],
    })
json.dump(out, sys.stdout)
"""


def parse(cases: list[dict]) -> list[dict]:
    """torchtitan 0.3.0's reading of each exported argv (``PARSER``, one subprocess for all)."""
    if not (ENGINE / "torchtitan" / "config" / "manager.py").exists():
        pytest.fail(f"torchtitan 0.3.0 is not installed in {ENGINE}: run make venv (requirements-torchtitan.txt)")
    done = subprocess.run(
        [sys.executable, "-c", PARSER],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ENGINE), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def plan_kwargs(got: dict, plan: Plan) -> dict[str, Any]:
    """``Plan.create`` keywords of what torchtitan 0.3.0 runs from its parsed configuration ``got``: dp = replicate ×
    shard; FSDP over shard × cp, resharding after forward unless ``never`` (``default``: not with PP,
    distributed/fsdp.py L54-L79); m = global ÷ (dp × micro-batch); the layers of each stage as
    ``generate_llm_fqn_per_model_part`` assigns them (distributed/pipeline_parallel.py L200-L260, the same rule as
    at 6404b93); the routed experts over EP alone when ep > 1; SelectiveAC is op-level."""
    tp, pp, cp, ep = got["tp"], got["pp"], got["cp"], got["ep"]
    replicate, shard = got["replicate"], got["shard"]
    dp = replicate * shard
    zero = 0
    if shard * cp > 1:
        assert replicate == 1, "HSDP is not a ZeRO stage of the plan"
        zero = 3 if got["reshard"] == "always" or (got["reshard"] == "default" and pp == 1) else 2
    local, global_batch = got["local"], got["global"]
    accumulation, left = divmod(global_batch, local * dp)
    assert accumulation >= 1 and left == 0  # Trainer's global-batch rule (trainer.py L415-L432)
    L = plan.model.num_layers
    lps, v = None, 1
    if pp > 1:
        b = got["microbatch"]
        assert local % b == 0  # Trainer.Config.__post_init__ (trainer.py L118-L140)
        assert accumulation == 1, "PP calls repeated per step: not one pipeline of m micro-batches"
        a, z = got["first_less"], got["last_less"]
        if got["schedule"] in ("1F1B", "GPipe"):
            stages = pp
        elif got["layers_per_stage"] is not None:
            stages = -(-(L + a + z) // got["layers_per_stage"])
        else:
            stages = 2 * pp
        v = stages // pp
        counts = torchtitan_stage_layers(stages, L, a, z)
        if len(set(counts)) > 1:
            lps = tuple(sum(counts[r::pp]) for r in range(pp))
    else:
        b = local
    recompute = {"FullAC": "full", None: "none"}.get(got["ac"], "op" if _op_priced(plan.model) else "selective")
    assert got["reduce"] == "float32"
    return {
        "gpus": dp * tp * pp * cp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "expert_tp": 1 if ep > 1 else None,
        "order": "tp-cp-dp-pp",
        "seq": got["seq"],
        "micro_batch_size": b,
        "global_batch": global_batch,
        "virtual_stages": v,
        "layers_per_stage": lps,
        "recompute": recompute,
        "sp": got["sp"] and tp > 1,
        "zero": zero,
    }


MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-30b-a3b", "deepseek-v3", "qwen3-8b"]


def random_plans(n: int, seed: int = 0) -> list[Plan]:
    """``n`` plans of ``MODELS`` that the library and the export take, drawn from ``random.Random(seed)``."""
    rng, tries = random.Random(seed), 0
    out: list[Plan] = []
    while len(out) < n and tries < 50 * n:
        tries += 1
        name = rng.choice(MODELS)
        tp, pp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 2])
        dp = rng.choice([1, 2, 4, 8])
        moe = name in ("qwen3-30b-a3b", "deepseek-v3")
        kw: dict[str, Any] = {
            "gpus": tp * pp * cp * dp,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "ep": rng.choice([1, 2, 4, 8]) if moe else 1,
            "zero": rng.choice([0, 1, 2, 3]),
            "recompute": rng.choice(["none", "selective", "full"]),
            "seq": rng.choice([4096, 8192]),
            "micro_batch_size": rng.choice([1, 2]),
            "virtual_stages": rng.choice([1, 1, 2]) if pp > 1 else 1,
            "sp": rng.choice([None, None, False]),
            "accounting": "fsdp2",
            "hardware": H100,
        }
        kw["global_batch"] = dp * kw["micro_batch_size"] * rng.choice([1, 2, 4, 8]) * max(pp, 1)
        try:
            plan = Plan.create(name, **kw, uneven_stages=True)
            export_text(plan, TORCHTITAN_030)
        except (MeshplanError, ValueError):
            continue
        out.append(plan)
    return out


def test_every_torchtitan_030_export_parses_in_torchtitan_and_reads_back_to_its_header():
    plans = random_plans(60)
    assert len(plans) == 60
    commands = [torchtitan_030(p) for p in plans]
    got = parse([{"argv": c.argv(), "world": p.gpus} for c, p in zip(commands, plans, strict=True)])
    seen = set()
    for plan, parsed, text in zip(plans, got, (export_text(p, TORCHTITAN_030) for p in plans), strict=True):
        assert "error" not in parsed, (plan, parsed)
        kw = plan_kwargs(parsed, plan)
        back = Plan.create(
            plan.model, hardware=plan.hardware, accounting="fsdp2", stage_balance=plan.stage_balance,
            kv_replication=plan.kv_replication, **kw,
        )  # fmt: skip
        assert text.split("\n", 1)[0] == f"# {price_note(back)}"
        priced, again = evaluate(engine_plan(plan, TORCHTITAN_030)), evaluate(back)
        assert again.memory_bytes == pytest.approx(priced.memory_bytes, rel=1e-12)
        assert step_time(again).total_s == pytest.approx(step_time(priced).total_s, rel=1e-12)
        seen.add((plan.model.name, kw["zero"], kw["recompute"], plan.pp > 1, plan.ep > 1, kw["sp"]))
    # the draw covers every model, ZeRO stage and checkpointing mode, pipelines, EP and sequence parallelism off
    assert {s[0] for s in seen} == set(MODELS)
    assert {s[1] for s in seen} == {0, 2, 3} and {s[2] for s in seen} >= {"none", "full", "op"}
    assert any(s[3] for s in seen) and any(s[4] for s in seen) and any(not s[5] for s in seen if s)


def test_torchtitan_rejects_what_it_does_not_know():
    (got,) = parse([{"argv": ["--parallelism.tensor_parallel_degre", "2"], "world": 8}])
    assert got == {"error": "tyro exited 2"}


def test_the_registry_entries_are_the_wheels():
    for r in engine_file(TORCHTITAN_030)["registry"]:
        source = (ENGINE / "torchtitan" / "models" / r["module"] / "config_registry.py").read_text()
        for config in r["precision"].values():
            assert f"\ndef {config}() -> Trainer.Config:" in source, config


def test_the_command_names_the_models_entry_and_every_setting_the_price_reads():
    plan = Plan.create(
        "qwen3-30b-a3b", gpus=64, tp=2, ep=8, zero=3, recompute="full", seq=4096, global_batch=64,
        accounting="fsdp2", hardware=H100,
    )  # fmt: skip
    c = torchtitan_030(plan)
    argv = c.argv()
    assert argv[:4] == ["--module", "qwen3", "--config", "qwen3_30b_a3b"]
    assert argv[-1] == "activation_checkpoint:full"  # a subcommand: the entry's own mode would apply otherwise
    assert "--parallelism.expert_parallel_degree" in argv and "--training.global_batch_size" in argv
    assert any("expert TP 1" in n for n in c.notes)  # experts over EP alone, priced so
    assert engine_plan(plan, TORCHTITAN_030).etp == 1


def test_what_torchtitan_030_cannot_run_is_an_error_naming_the_factor():
    with pytest.raises(PlanError) as err:  # fp8 is a registry entry's converters, and Llama 3 70B has none
        export_text(
            Plan.create("llama-3.1-70b", gpus=64, tp=8, zero=3, precision="fp8", accounting="fsdp2", hardware=H100),
            TORCHTITAN_030,
        )
    assert err.value.factor == "precision" and "config_registry" in str(err.value)
    with pytest.raises(ValueError, match="ep must divide"):
        export_text(
            Plan.create("qwen3-30b-a3b", gpus=8, ep=8, zero=0, accounting="fsdp2", hardware=H100), TORCHTITAN_030
        )


def test_a_model_without_an_entry_says_what_to_write():
    c = torchtitan_030(Plan.create("qwen3-8b", gpus=8, zero=3, accounting="fsdp2", hardware=H100))
    assert c.argv()[:4] == ["--module", "my_registry", "--config", "qwen3_8b_config"]
    assert any("no config_registry entry for qwen3-8b" in n for n in c.notes)


def test_the_plan_to_export_is_the_fastest_that_fits_as_the_release_runs_it():
    from meshplan.export import first_that_runs
    from meshplan.search import search

    found = search("qwen3-30b-a3b", gpus=64, seq=4096, global_batch=256, hardware=H100, accounting="fsdp2", top=10)
    winner = evaluate(engine_plan(found.ranked[0].plan, TORCHTITAN_030))
    assert found.ranked[0].report.fits and not winner.fits  # its experts no longer split over TP in 0.3.0
    rank, c, report = first_that_runs(found.ranked, TORCHTITAN_030)
    assert rank > 1 and report.fits and c is found.ranked[rank - 1]
    assert all(not evaluate(engine_plan(x.plan, TORCHTITAN_030)).fits for x in found.ranked[: rank - 1])
    with pytest.raises(ValueError, match="none of the 0 ranked plans"):
        first_that_runs([], TORCHTITAN_030)
