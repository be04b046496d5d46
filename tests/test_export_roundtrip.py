"""The round trip of ``meshplan.export`` (issue 29): every export, read back into a plan by a small parser of the
engine's own flags or settings, prices the same memory and step time as its header, over random plans of every
shipped model, ledger and format; the Megatron-LM command passes ``bash -n``.

The parsers below read an export as the engine would, with the engine's defaults, and know nothing of
``meshplan.export``:

* Megatron-LM core_v0.19.0 (``megatron/training/arguments.py`` at 5be9626, and ``common_config.py``,
  ``transformer_config.py`` whose fields its parser turns into flags): ``shlex.split`` of the command, the
  environment it sets before ``torchrun`` left aside (tests/test_export_megatron_rules.py checks it); the world is
  ``--nnodes`` × ``--nproc_per_node``; dp = world ÷ (tp × pp × cp); ``--expert-tensor-parallel-size`` defaults to
  the TP size (L569-L570); m = ``--global-batch-size`` ÷ (``--micro-batch-size`` × dp); v = layers ÷ (pp ×
  ``--num-layers-per-virtual-pipeline-stage``); ``--sequence-parallel`` is dropped at TP 1 (L1393-L1399); ZeRO from
  ``--use-distributed-optimizer`` or ``--use-megatron-fsdp --data-parallel-sharding-strategy`` (default
  ``optim_grads_params``, L3023); the ranks' order tp-cp-ep-dp-pp unless ``--use-tp-pp-dp-mapping``
  (``common_config.py`` L105); ``--moe-layer-freq`` evaluated as a Python list expression (``moe_freq_type``,
  L326-L349) and ``--window-size`` as ``tuple_type`` reads it (L376).
* torchtitan at 6404b93 (``tomllib``): dp = replicate × shard degree; FSDP reshards after forward unless
  ``never`` (``default``: not with PP, ``models/llama3/infra/parallelize.py`` L388-L396); gradient accumulation
  = global ÷ (local × dp) steps of ``local_batch_size`` rows (``train.py`` L200-L217), each split into
  local ÷ ``pipeline_parallel_microbatch_size`` pipeline micro-batches with PP (``distributed/pipeline.py``
  L64-L72); the layers of each stage by ``generate_llm_fqn_per_model_part`` (L126-L234, re-written here); an
  interleaved schedule's stages per rank from ``pipeline_parallel_layers_per_stage``, or 2
  (``models/llama3/infra/pipeline.py`` L65-L111); its mesh pp, dp, cp, tp from outer to inner
  (``parallel_dims.py`` L136-L139); TP always sequence parallel; experts split over TP like the dense layers.

What no engine setting says is taken from the exported plan as context: the model, the machine (GPU memory,
GPUs per node, bandwidths), the ledger the header names, and the library's own conventions (``stage_balance``,
``kv_replication``).
"""

from __future__ import annotations

import json
import math
import random
import shlex
import subprocess
from typing import Any

import pytest
import tomllib
from conftest import examples
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from meshplan import Plan, available_models, evaluate, load_model
from meshplan.core.validation import MeshplanError
from meshplan.export import ENGINE_LEDGER, engine_plan, export_text, price_note
from meshplan.spec.model import MODELS_DIR
from meshplan.spec.stages import spread_layers
from meshplan.steptime import step_time

# the shipped models and one real config of each other family (data/models/public/)
NAMES = sorted(available_models() + [f"public/{p.stem}" for p in (MODELS_DIR / "public").glob("*.json")])
SPECS = {name: load_model(name) for name in NAMES}
KEYS = {spec.name: name for name, spec in SPECS.items()}  # ModelSpec.name → its file stem
MEGATRON_ORDERS = ["tp-cp-pp-dp", "tp-cp-ep-dp-pp", "tp-cp-dp-pp"]  # Megatron-LM's two rank orders
ORDERS = [*MEGATRON_ORDERS, "tp-dp-cp-pp", "dp-pp-cp-tp", "tp-pp-cp-dp"]  # torchtitan's export runs its own
# What an export may refuse: a layout or order the engine's settings cannot say (the library's own PlanError and
# LedgerError, e.g. a ledger refusing a ZeRO stage, are refusals too)
REFUSALS = (
    "Megatron-LM ranks are",
    "first and last stage only",
    "virtual_stages > 1 with uneven stages",
    "torchtitan's expert parallelism borrows",
    "torchtitan's options make the first and last",
    "learned positions: Megatron-LM refuses it",
    "Gated DeltaNet key heads, which Megatron-Core splits",
    "Gated DeltaNet value heads, which Megatron-Core splits",
)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def mtp_depths(name: str) -> int:
    """The MTP depths the model's config.json declares (DeepSeek-V3's ``num_nextn_predict_layers``, Qwen3.5's
    ``mtp_num_hidden_layers``)."""
    cfg = json.loads((MODELS_DIR / f"{name}.json").read_text())
    cfg = cfg.get("text_config", cfg)
    return cfg.get("num_nextn_predict_layers", 0) or cfg.get("mtp_num_hidden_layers", 0)


# ---------------------------------------------------------------- Megatron-LM
def megatron_args(text: str) -> tuple[dict[str, str], dict[str, str | None]]:
    """The torchrun options and the pretrain_gpt.py flags of an exported command (a flag without a value: None)."""
    argv = shlex.split(text.replace("\\\n", " "), comments=True)
    script = argv.index("pretrain_gpt.py")
    start = argv.index("torchrun")  # after the environment: VAR=value, or env -u VAR
    assert all("=" in a or a in ("env", "-u") or argv[i - 1] == "-u" for i, a in enumerate(argv[:start])), argv
    run = dict(a.removeprefix("--").split("=", 1) for a in argv[start + 1 : script])
    flags: dict[str, str | None] = {}
    rest = argv[script + 1 :]
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--") and flag not in flags, flag
        value = rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("--") else None
        flags[flag] = value
        i += 1 if value is None else 2
    return run, flags


def megatron_plan_kwargs(text: str, model: str) -> dict:
    """``Plan.create`` keywords of what Megatron-LM runs from the command ``text`` (see the module docstring)."""
    run, f = megatron_args(text)
    spec = SPECS[model]

    def num(flag: str, default: int | None = None) -> int:
        value = f.get(flag)
        if value is None:
            assert default is not None, f"no {flag}"
            return default
        return int(value)

    gpus = int(run["nnodes"]) * int(run["nproc_per_node"])
    tp, pp = num("--tensor-model-parallel-size", 1), num("--pipeline-model-parallel-size", 1)
    cp = num("--context-parallel-size", 1)
    dp = gpus // (tp * pp * cp)
    b = num("--micro-batch-size", 1)
    L = num("--num-layers")
    assert (L, num("--hidden-size")) == (spec.num_layers, spec.hidden_size)
    assert num("--mtp-num-layers", 0) == mtp_depths(model)
    if "--moe-layer-freq" in f:  # Megatron's moe_freq_type: a Python list expression, one entry per layer
        assert eval(str(f["--moe-layer-freq"])) == [int(x.is_moe) for x in spec.layers]
    if "--window-size" in f:  # Megatron's tuple_type
        window = tuple(int(i) for i in str(f["--window-size"]).strip("()").split(","))
        assert window == (spec.layers[0].sliding_window, 0)
    v = L // (pp * num("--num-layers-per-virtual-pipeline-stage", L // pp))
    lps = None
    if "--decoder-first-pipeline-num-layers" in f:
        first, last = num("--decoder-first-pipeline-num-layers"), num("--decoder-last-pipeline-num-layers")
        middle = (L - first - last) // (pp - 2) if pp > 2 else 0
        lps = (first, *(middle,) * (pp - 2), last)
        assert sum(lps) == L
    if "--use-megatron-fsdp" in f:
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[
            f.get("--data-parallel-sharding-strategy") or "optim_grads_params"
        ]
    else:
        zero = 1 if "--use-distributed-optimizer" in f else 0
    return {
        "gpus": gpus,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": num("--expert-model-parallel-size", 1),
        "expert_tp": num("--expert-tensor-parallel-size", tp),
        "order": "tp-cp-pp-dp" if "--use-tp-pp-dp-mapping" in f else "tp-cp-ep-dp-pp",
        "seq": num("--seq-length"),
        "micro_batch_size": b,
        "global_batch": num("--global-batch-size", b * dp),
        "virtual_stages": v,
        "layers_per_stage": lps,
        "recompute": f.get("--recompute-granularity") or "none",
        "sp": "--sequence-parallel" in f and tp > 1,
        "zero": zero,
        # TransformerConfig.fp8 (--fp8-format) switches FP8 on; fp8_recipe defaults to 'delayed' (L566-L578)
        "precision": "bf16"
        if f.get("--fp8-format") is None
        else ("mxfp8" if f.get("--fp8-recipe") == "mxfp8" else "fp8"),
        # Megatron's defaults: dropout 0.1 for both (transformer_config.py L181-L184), its own attention choice
        "dropout": _same_dropout(f),
        "attention_backend": "unfused" if f.get("--attention-backend") == "unfused" else "flash",
        # --bf16 accumulates and reduces gradients in fp32 unless --grad-reduce-in-bf16 (arguments.py L1190-L1193)
        **({"grad_dtype": "bf16"} if "--grad-reduce-in-bf16" in f else {}),
    }


def _same_dropout(f: dict) -> float:
    """The one dropout probability the export gives both of Megatron's dropouts (0.1 each when absent)."""
    attention, hidden = (float(f.get(k, 0.1)) for k in ("--attention-dropout", "--hidden-dropout"))
    assert attention == hidden, (attention, hidden)
    return attention


# ---------------------------------------------------------------- torchtitan
def torchtitan_stage_layers(num_stages: int, num_layers: int, input_weight: int, output_weight: int) -> list[int]:
    """Layers of each stage as torchtitan's ``generate_llm_fqn_per_model_part`` assigns them (6404b93,
    ``torchtitan/distributed/pipeline.py`` L126-L234), counted instead of named."""
    if num_stages == 1:
        return [num_layers]
    effective = num_layers + input_weight + output_weight
    per, extra = divmod(effective, num_stages)
    assert per > 0 and input_weight <= per and output_weight <= per
    out, current = [], 0
    for k in range(num_stages):
        n = per + (1 if k < extra else 0)
        n -= input_weight if k == 0 else output_weight if k == num_stages - 1 else 0
        n = max(0, min(n, num_layers - current))
        out.append(n)
        current += n
    return out


PRECISION_OF_CONVERTERS = {(): "bf16", ("float8",): "fp8", ("mx",): "mxfp8"}  # torchtitan's [model] converters


def torchtitan_plan_kwargs(text: str, model: str) -> dict:
    """``Plan.create`` keywords of what torchtitan runs from the TOML ``text`` (see the module docstring)."""
    cfg = tomllib.loads(text)
    par, train, ac = cfg["parallelism"], cfg["training"], cfg.get("activation_checkpoint", {})
    replicate, shard = par.get("data_parallel_replicate_degree", 1), par["data_parallel_shard_degree"]
    tp, pp, cp = (par.get(f"{d}_parallel_degree", 1) for d in ("tensor", "pipeline", "context"))
    dp = replicate * shard
    reshard = par.get("fsdp_reshard_after_forward", "default")
    zero = 0  # DDP over the replicas, or nothing
    if shard * cp > 1:  # FSDP over its dp_shard_cp mesh (parallel_dims.py L207-L208, parallelize.py L99-L114)
        assert replicate == 1, "HSDP: sharded over part of the DP ranks only, not a ZeRO stage of the plan"
        zero = 3 if reshard == "always" or (reshard == "default" and pp == 1) else 2
    local, global_batch = train["local_batch_size"], train["global_batch_size"]
    accumulation, left = divmod(global_batch, local * dp)
    assert accumulation >= 1 and left == 0
    L = SPECS[model].num_layers
    lps, v = None, 1
    if pp > 1:
        b = par.get("pipeline_parallel_microbatch_size", 1)
        assert local % b == 0
        assert accumulation == 1, "PP calls repeated per step: not one pipeline of m micro-batches"
        a = par.get("pipeline_parallel_first_stage_less_layers", 1)
        z = par.get("pipeline_parallel_last_stage_less_layers", 1)
        if par.get("pipeline_parallel_schedule", "1F1B") in ("1F1B", "GPipe"):
            stages = pp
        elif "pipeline_parallel_layers_per_stage" in par:
            stages = math.ceil((L + a + z) / par["pipeline_parallel_layers_per_stage"])
        else:
            stages = 2 * pp
        v = stages // pp
        counts = torchtitan_stage_layers(stages, L, a, z)
        per_rank = tuple(sum(counts[r::pp]) for r in range(pp))  # looped schedules: rank r holds r, r + pp, ...
        if len(set(counts)) > 1:
            lps = per_rank
    else:
        b = local
    mode = ac.get("mode", "selective")
    if mode == "selective":
        assert ac.get("selective_ac_option", "2") == "op", "every-nth-block full recompute is not a plan's mode"

    return {
        "gpus": dp * tp * pp * cp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": par.get("expert_parallel_degree", 1),
        "expert_tp": None,
        "order": "tp-cp-dp-pp",
        "seq": train["seq_len"],
        "micro_batch_size": b,
        "global_batch": global_batch,
        "virtual_stages": v,
        "layers_per_stage": lps,
        "recompute": mode,
        "sp": tp > 1,
        "zero": zero,
        "precision": {(): "bf16", ("float8",): "fp8", ("mx",): "mxfp8"}[
            tuple(cfg.get("model", {}).get("converters", []))
        ],
    }


def _op_priced(model) -> bool:
    from meshplan.parallel.engine_activations import op_projections, spec_implementation

    try:
        for L in model.layers:
            op_projections(L, model.hidden_size, spec_implementation(model))
    except ValueError:
        return False
    return True


def read_back(text: str, fmt: str, plan: Plan, ledger: str | None) -> Plan:
    """The plan an export ``text`` describes, with what no engine setting says taken from ``plan``."""
    body = text.split("\n", 1)[1]
    kw = (megatron_plan_kwargs if fmt == "megatron" else torchtitan_plan_kwargs)(body, KEYS[plan.model.name])
    if fmt == "torchtitan" and kw["recompute"] == "selective" and _op_priced(plan.model):
        # torchtitan's selective is op-level: the ledger prices it so where it can (dense attention layers), and as
        # Megatron's core-attention recompute where it cannot (the export's note says which)
        kw["recompute"] = "op"
    return Plan.create(
        plan.model,
        hardware=plan.hardware,
        accounting=plan.accounting.name if ledger is None else ledger,  # the ledger the header names
        stage_balance=plan.stage_balance,
        kv_replication=plan.kv_replication,
        **kw,
    )


# ---------------------------------------------------------------- random plans
@st.composite
def exported(draw):
    """``Plan.create`` keywords of a random plan of a shipped model (some the library refuses), a format and a
    ledger (None: the plan's own). Hypothesis draws the model, the format and one seed; the rest comes from
    ``random.Random(seed)`` (one draw per plan instead of twenty keeps the examples cheap)."""
    name = draw(st.sampled_from(NAMES))
    fmt = draw(st.sampled_from(["megatron", "torchtitan"]))
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    spec = SPECS[name]
    kv = spec.num_key_value_heads
    tps = [
        t
        for t in divisors(spec.num_attention_heads)
        if t <= 16
        and (kv % t == 0 or (fmt == "megatron" and t % kv == 0))  # Megatron-Core also runs TP beyond the KV heads
        and all(h % t == 0 for h in (spec.linear_num_key_heads, spec.linear_num_value_heads) if h)
    ]
    tp = rnd.choice(tps)
    L = spec.num_layers
    uneven = rnd.random() < 0.25
    pp = rnd.choice([d for d in range(1, min(L, 16) + 1) if uneven or L % d == 0])
    lps = spread_layers(L, pp) if uneven and L % pp else None
    v = rnd.choice([v for v in (1, 2, 3, 4) if v == 1 or (pp > 1 and lps is None and L % (pp * v) == 0)])
    seq = rnd.choice([1024, 4096, 8192, 32768])
    cp = rnd.choice([c for c in (1, 2, 4) if tp * pp * c <= 256])
    dp = rnd.randint(1, max(1, min(16, 512 // (tp * pp * cp))))
    ep, etp = 1, None
    if spec.is_moe:
        if rnd.random() < 0.4:
            etp = rnd.choice(divisors(tp))
        room = dp * cp if etp in (None, tp) else tp * cp * dp // etp
        ep = rnd.choice([e for e in divisors(spec.num_experts) if room % e == 0])
    gpus = tp * pp * cp * dp
    kw = {
        "model": name,
        "gpus": gpus,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "expert_tp": etp,
        "order": rnd.choice(ORDERS if fmt == "torchtitan" or rnd.random() < 0.1 else MEGATRON_ORDERS),
        "seq": seq,
        "micro_batch_size": rnd.randint(1, 4),
        "micro_batches": rnd.randint(pp if v > 1 else 1, 48),
        "gpus_per_node": math.gcd(gpus, rnd.choice([1, 2, 4, 8, 16])),
        "gpu_memory_bytes": rnd.choice([24e9, 80e9, 141e9]),
        "accounting": rnd.choice(["lab", "megatron", "fsdp2", "deepspeed"]),
        "zero": rnd.choice([0, 1, 2, 3]),
        "recompute": rnd.choice(["none", "selective", "full"]),
        "sp": rnd.choice([None, True, False]),
        "virtual_stages": v,
        "layers_per_stage": lps,
        "stage_balance": rnd.choice(["even", "max"]),
    }
    ledger = rnd.choice([None, "megatron", "fsdp2", "deepspeed", ENGINE_LEDGER[fmt], ENGINE_LEDGER[fmt]])
    if kw["accounting"] == "megatron" and kw["zero"] < 2 and rnd.random() < 0.3:
        kw["grad_dtype"] = "bf16"  # Megatron-LM's --grad-reduce-in-bf16
    return kw, fmt, ledger


def refused(exc: ValueError) -> bool:
    return isinstance(exc, MeshplanError) or any(r in str(exc) for r in REFUSALS)


ROUNDTRIP = settings(
    max_examples=examples(750),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def check_round_trip(plan: Plan, fmt: str, ledger: str | None) -> bool:
    """The property for one export; False when the export (or the ledger) refuses the plan."""
    try:
        text = export_text(plan, fmt, ledger)
    except ValueError as exc:
        if not refused(exc):
            raise
        if currently_in_test_context():
            event(f"{fmt}: refused ({type(exc).__name__})")
        return False
    back = read_back(text, fmt, plan, ledger)
    header = text.split("\n", 1)[0]
    assert header == f"# {price_note(back)}"  # memory per GPU, its parts and the verdict, as printed
    priced = evaluate(engine_plan(plan, fmt, ledger))
    again = evaluate(back)
    assert again.memory_bytes == pytest.approx(priced.memory_bytes, rel=1e-12)
    assert step_time(again).total_s == pytest.approx(step_time(priced).total_s, rel=1e-12)
    if fmt == "megatron":
        body = text.split("\n", 1)[1]
        bash = subprocess.run(["bash", "-n", "-c", body], capture_output=True, text=True, check=False)
        assert bash.returncode == 0, bash.stderr
    return True


@ROUNDTRIP
@given(exported())
def test_every_export_reads_back_to_its_header(case):
    kw, fmt, ledger = case
    try:
        plan = Plan.create(**kw)
    except MeshplanError:
        reject()
    if check_round_trip(plan, fmt, ledger):
        event(f"{fmt}: read back")


# ---------------------------------------------------------------- the cases issue 29 reported
def test_torchtitan_local_batch_is_one_forward_pass():
    """Without PP torchtitan accumulates global ÷ (local × dp) steps of ``local_batch_size`` rows: local = b, not
    b × m (the header's 44.6 GB would otherwise run 16 sequences per forward)."""
    plan = Plan.create("llama-3.1-8b", 8, zero=3, micro_batches=16)
    text = export_text(plan, "torchtitan", "fsdp2")
    train = tomllib.loads(text)["training"]
    assert (train["local_batch_size"], train["global_batch_size"]) == (1, 128)
    assert check_round_trip(plan, "torchtitan", "fsdp2")
    piped = plan.replace(pp=2, dp=4, micro_batches=32)  # with PP one call runs the m micro-batches
    train = tomllib.loads(export_text(piped, "torchtitan", "fsdp2"))["training"]
    assert (train["local_batch_size"], train["global_batch_size"]) == (32, 128)
    assert check_round_trip(piped, "torchtitan", "fsdp2")


def test_megatron_expert_tp_without_ep():
    """Megatron's expert TP defaults to TP: an expert TP of 1 under TP 4 needs the flag even with EP 1."""
    plan = Plan.create("qwen3-30b-a3b", 32, tp=4, expert_tp=1, zero=1)
    _, flags = megatron_args(export_text(plan, "megatron", "megatron").split("\n", 1)[1])
    assert flags["--expert-tensor-parallel-size"] == "1" and "--expert-model-parallel-size" not in flags
    assert check_round_trip(plan, "megatron", "megatron")


def test_megatron_values_are_quoted_for_bash():
    """A pattern or a tuple in parentheses is a syntax error to bash unless quoted."""
    deepseek = Plan.create("deepseek-v3", 64, ep=8, zero=1)
    text = export_text(deepseek, "megatron", "megatron")
    assert "--moe-layer-freq '([0]*3+[1]*58)'" in text and check_round_trip(deepseek, "megatron", "megatron")
    mistral = Plan.create("public/mistral-7b-v0.1", 8, tp=2)
    text = export_text(mistral, "megatron", "megatron")
    assert "--window-size '(4096,0)'" in text and check_round_trip(mistral, "megatron", "megatron")


def test_megatron_mtp_layers():
    _, flags = megatron_args(export_text(Plan.create("deepseek-v3", 64, ep=8), "megatron").split("\n", 1)[1])
    assert flags["--mtp-num-layers"] == "1"
    _, flags = megatron_args(export_text(Plan.create("qwen3.8-27b", 8), "megatron").split("\n", 1)[1])
    assert flags["--mtp-num-layers"] == "1"
    _, flags = megatron_args(export_text(Plan.create("llama-3.1-8b", 8), "megatron").split("\n", 1)[1])
    assert "--mtp-num-layers" not in flags


@pytest.mark.parametrize(
    ("precision", "hardware", "fmt", "ledger"),
    [
        ("fp8", "h100-sxm-80gb", "megatron", "megatron"),
        ("fp8", "h100-sxm-80gb", "torchtitan", "fsdp2"),
        ("mxfp8", "b200-sxm-180gb", "megatron", "megatron"),
        ("mxfp8", "b200-sxm-180gb", "torchtitan", "fsdp2"),
        ("fp8", "h200-sxm-141gb", "megatron", "megatron"),
    ],
)
def test_low_precision_exports_read_back(precision, hardware, fmt, ledger):
    """An FP8 or MXFP8 plan's export says so in the engine's words (--fp8-format hybrid --fp8-recipe tensorwise|mxfp8;
    torchtitan's float8 or mx converter), and reads back to the same precision, memory and step time."""
    cases: tuple[tuple[str, dict[str, Any]], ...] = (
        ("llama-3.1-8b", {"gpus": 8, "zero": 3, "seq": 8192}),
        ("qwen3-30b-a3b", {"gpus": 16, "ep": 8, "zero": 2, "seq": 4096}),
        ("llama-3.1-70b", {"gpus": 64, "tp": 4, "pp": 4, "zero": 2, "seq": 8192, "global_batch": 256}),
    )
    for name, kw in cases:
        plan = Plan.create(name, hardware=hardware, accounting=ledger, precision=precision, **kw)
        text = export_text(plan, fmt, ledger)
        if fmt == "megatron":
            recipe = "tensorwise" if precision == "fp8" else "mxfp8"
            assert "--fp8-format hybrid" in text and f"--fp8-recipe {recipe}" in text, name
        back = read_back(text, fmt, plan, ledger)
        assert back.precision == precision, name
        assert check_round_trip(plan, fmt, ledger), name
