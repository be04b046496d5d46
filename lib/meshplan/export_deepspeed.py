"""Export a plan to DeepSpeed: the JSON config ``deepspeed.initialize`` reads (``deepspeed_config``, as a dict, and
``deepspeed_text``, that dict pretty-printed), with notes returned beside it (JSON has no comments).

The keys follow DeepSpeed v0.19.8 as PyPI ships it (``deepspeed==0.19.8``; ``data/engines/deepspeed.json`` lists
every key written here with its file and line in that release). The config is for DeepSpeed alone running a
transformers model: no Megatron-DeepSpeed, no model code of DeepSpeed's (``PipelineModule``, ``deepspeed.moe``,
Ulysses attention).

Mapping (the plan's terms → DeepSpeed's):

* batch: ``train_micro_batch_size_per_gpu`` = b, ``gradient_accumulation_steps`` = m, ``train_batch_size`` = B =
  dp × b × m. DeepSpeed asserts ``train_batch_size == micro × accumulation × world_size``
  (``deepspeed/runtime/config.py`` L602-L605), with the world size read from ``torch.distributed`` when no ``mpu`` is
  passed (L457-L471): every rank is a data-parallel rank, so the export needs tp = cp = pp = 1 (then dp = the GPUs)
  and refuses the others (ValueError naming the factor): DeepSpeed's pipeline needs the model written as a
  ``PipelineModule``, its sequence parallelism (Ulysses) attention code and an ``mpu``, and its config-only AutoTP
  (``tensor_parallel.autotp_size``) is not the tensor parallelism the ledgers price. Expert parallelism (ep > 1)
  is refused too: DeepSpeed-MoE is model code, and v0.19.8's config-only AutoEP (``expert_parallel``) is not what
  the deepspeed ledger prices (its expert groups, buffers and dispatch are unchecked against it).
* precision: ``bf16.enabled``; gradients accumulated (``data_types.grad_accum_dtype``) and reduced
  (``communication_data_type``) in bf16, as the deepspeed ledger counts them (both DeepSpeed's defaults under bf16,
  written because an fp32 choice changes the bytes and, for ZeRO-1, the optimizer class).
* ZeRO: ``zero_optimization.stage`` = the plan's stage, with the ledger's bucket sizes written out:
  ``reduce_bucket_size`` and ``allgather_bucket_size`` 5e8 elements (ZeRO-1/2), ``stage3_max_live_parameters`` 1e9,
  ``stage3_max_reuse_distance`` 1e9, ``stage3_prefetch_bucket_size`` 5e7 and
  ``stage3_param_persistence_threshold`` 1e5 (ZeRO-3), ``contiguous_gradients`` true (the preallocated bucket the
  ledger counts).
* ``overlap_comm``: true for ZeRO-1, 2 and 3, because the step time overlaps the data-parallel sync
  (``steptime.ENGINE_EXECUTION["deepspeed"]``, ``dp_overlap=True``). DeepSpeed's default is true for ZeRO-3 only
  (``deepspeed/runtime/zero/config.py`` L138 and L383-L387); for ZeRO-1/2 overlap_comm double-buffers the gradient
  bucket (``stage_1_and_2.py`` L3256-L3280): 2 × ``reduce_bucket_size`` bf16 elements = 2 GB per GPU, which the
  deepspeed ledger counts (``evaluation.DEEPSPEED_BUCKET_BYTES``), as it counts ZeRO-3's reduce buffer
  (``DEEPSPEED_Z3_REDUCE_BYTES``). ``buffer_bytes`` gives what a config allocates; a note says where the ledger
  would count other bytes (none for the configs written here). ZeRO-0 has no overlap option: the engine all-reduces
  the gradients after the accumulation boundary's backward (``engine.py`` L3073-L3095), noted.
* recompute: applied by the model, not the config. ``full`` is transformers' ``model.gradient_checkpointing_enable()``
  (each decoder layer a ``GradientCheckpointingLayer``, recomputed whole in the backward); DeepSpeed's
  ``activation_checkpointing`` section configures ``deepspeed.checkpointing.checkpoint``, which a transformers model
  never calls, so it is not written. ``selective`` (the attention core recomputed) and ``op`` have no switch in
  DeepSpeed or transformers: ValueError.

    >>> from meshplan import Plan
    >>> cfg, notes = deepspeed_config(Plan.create("llama-3.1-8b", gpus=8, zero=2, micro_batches=4))
    >>> cfg["train_batch_size"], cfg["gradient_accumulation_steps"], cfg["zero_optimization"]["overlap_comm"]
    (32, 4, True)
    >>> buffer_bytes(cfg)
    {'gradient buckets': 2000000000}
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from meshplan.core.resources import DATA_DIR
from meshplan.core.units import fmt_gb
from meshplan.plan import Plan
from meshplan.plan.evaluation import DEEPSPEED_BUCKET_BYTES, DEEPSPEED_Z3_REDUCE_BYTES
from meshplan.spec.mesh import launch_hosts

DEEPSPEED_VERSION = "0.19.8"
# The ledger's assumptions, in elements (DeepSpeed's defaults at v0.19.8, deepspeed/runtime/zero/config.py)
REDUCE_BUCKET_SIZE = 500_000_000  # L113
ALLGATHER_BUCKET_SIZE = 500_000_000  # L132 (a multiple of 2: stage_1_and_2.py L389-L391 asserts it)
STAGE3_PREFETCH_BUCKET_SIZE = 50_000_000  # L222
STAGE3_PARAM_PERSISTENCE_THRESHOLD = 100_000  # L228
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000  # L245
STAGE3_MAX_REUSE_DISTANCE = 1_000_000_000  # L251
BF16_BYTES = 2


@cache
def deepspeed_file() -> dict:
    """``data/engines/deepspeed.json``: the version, the source, and every config key the export writes."""
    return json.loads((DATA_DIR / "engines" / "deepspeed.json").read_text())


def deepspeed_options() -> frozenset[str]:
    """Every key the export may write, as a dotted path (``zero_optimization.stage``), from the data file."""
    return frozenset(deepspeed_file()["options"])


def config_keys(config: dict, prefix: str = "") -> frozenset[str]:
    """The dotted paths of a config's leaves: ``{"bf16": {"enabled": True}}`` → ``{"bf16.enabled"}``."""
    out: set[str] = set()
    for k, v in config.items():
        path = f"{prefix}{k}"
        out |= config_keys(v, f"{path}.") if isinstance(v, dict) else {path}
    return frozenset(out)


def deepspeed_refusal(plan: Plan) -> str | None:
    """Why DeepSpeed alone cannot run ``plan`` from a config (the first factor that stops it), or None."""
    if plan.tp > 1:
        return (
            f"tp={plan.tp}: DeepSpeed's config has no tensor parallelism of the kind the plan prices (the model's "
            "own, as Megatron-DeepSpeed's); its AutoTP (tensor_parallel.autotp_size) shards a transformers model "
            "without sequence parallelism and is not priced here: export tp=1, or use the Megatron-LM export"
        )
    if plan.pp > 1:
        return (
            f"pp={plan.pp}: DeepSpeed's pipeline engine runs a model written as a PipelineModule "
            "(deepspeed/runtime/pipe/module.py); a config cannot split a transformers model into stages: export pp=1"
        )
    if plan.cp > 1:
        return (
            f"cp={plan.cp}: DeepSpeed's config has no context parallelism; its Ulysses sequence parallelism needs "
            "attention code and an mpu from the training script (UlyssesSPAttentionHF.register_with_transformers, "
            "deepspeed/runtime/sequence_parallel/ulysses_sp.py): export cp=1"
        )
    if plan.ep > 1:
        return (
            f"ep={plan.ep}: DeepSpeed's expert parallelism is model code (deepspeed.moe.layer.MoE); "
            f"v{DEEPSPEED_VERSION}'s config-only AutoEP (expert_parallel.autoep_size) replaces a transformers "
            "model's MoE blocks, but its groups, buffers and dispatch are not what the deepspeed ledger prices: "
            "export ep=1 (experts replicated)"
        )
    if plan.recompute == "selective":
        return (
            "recompute='selective' (the attention core recomputed): neither DeepSpeed's config nor transformers "
            "can checkpoint only the attention core (gradient_checkpointing_enable() recomputes whole decoder "
            "layers; DeepSpeed's activation_checkpointing section only configures deepspeed.checkpointing, which a "
            "transformers model does not call): export recompute='full' or 'none'"
        )
    if plan.recompute not in ("none", "full"):
        return (
            f"recompute={plan.recompute!r}: a transformers model under DeepSpeed recomputes whole decoder layers "
            "(gradient_checkpointing_enable()) or nothing: export recompute='full' or 'none'"
        )
    return None


def _zero_section(zero: int) -> dict[str, Any]:
    section: dict[str, Any] = {"stage": zero}
    if zero in (1, 2):
        section.update(
            contiguous_gradients=True,
            overlap_comm=True,
            reduce_bucket_size=REDUCE_BUCKET_SIZE,
            allgather_bucket_size=ALLGATHER_BUCKET_SIZE,
        )
    elif zero == 3:
        section.update(
            contiguous_gradients=True,
            overlap_comm=True,
            reduce_bucket_size=REDUCE_BUCKET_SIZE,
            stage3_max_live_parameters=STAGE3_MAX_LIVE_PARAMETERS,
            stage3_max_reuse_distance=STAGE3_MAX_REUSE_DISTANCE,
            stage3_prefetch_bucket_size=STAGE3_PREFETCH_BUCKET_SIZE,
            stage3_param_persistence_threshold=STAGE3_PARAM_PERSISTENCE_THRESHOLD,
        )
    return section


def buffer_bytes(config: dict) -> dict[str, int]:
    """The bytes per GPU that DeepSpeed v0.19.8 sets aside for ``config``'s ZeRO buffers (bf16 gradients and
    parameters, ``contiguous_gradients`` on), by name:

    * ZeRO-1/2, ``gradient buckets``: ``reduce_bucket_size`` elements in the gradients' dtype, a second buffer with
      ``overlap_comm`` (``stage_1_and_2.py`` L3256-L3280, ``setup_buckets``; the dtype is the model's unless fp32
      accumulation with ZeRO-1, L1253-L1254 and L395-L404);
    * ZeRO-3, ``gradient bucket``: one ``reduce_bucket_size`` buffer in the communication dtype, allocated at start
      with or without ``overlap_comm`` (``stage3.py`` L780-L784), and ``live parameters``: at most
      ``stage3_max_live_parameters`` gathered bf16 parameters (the deepspeed ledger's ZeRO-3 term);
    * ZeRO-0: none (the engine's all-reduce flattens 5e8-element buckets after the backward, ``engine.py``
      L3073-L3095, a transient the ledger does not count).

        >>> buffer_bytes({"zero_optimization": {"stage": 1, "reduce_bucket_size": 500000000, "overlap_comm": False}})
        {'gradient buckets': 1000000000}
    """
    z = config.get("zero_optimization", {})
    stage = z.get("stage", 0)
    bucket = int(z.get("reduce_bucket_size", REDUCE_BUCKET_SIZE)) * BF16_BYTES
    if stage in (1, 2):
        return {"gradient buckets": bucket * (2 if z.get("overlap_comm", False) else 1)}
    if stage == 3:
        live = int(z.get("stage3_max_live_parameters", STAGE3_MAX_LIVE_PARAMETERS)) * BF16_BYTES
        return {"gradient bucket": bucket, "live parameters": live}
    return {}


def _buffer_notes(zero: int, config: dict) -> list[str]:
    """Where the deepspeed ledger's buffer bytes (``evaluation.DEEPSPEED_BUCKET_BYTES``) differ from ``config``'s."""
    have = buffer_bytes(config)
    ledger = DEEPSPEED_BUCKET_BYTES.get(zero, 0.0)
    if zero in (1, 2) and have["gradient buckets"] != ledger:
        return [
            f"memory: overlap_comm=true double-buffers ZeRO-{zero}'s gradient bucket, 2 × reduce_bucket_size "
            f"bf16 = {fmt_gb(have['gradient buckets'])} per GPU (deepspeed/runtime/zero/stage_1_and_2.py "
            f"L3256-L3280); the deepspeed ledger counts {fmt_gb(ledger)} (one bucket, overlap_comm=false), so "
            f"the header's memory is {fmt_gb(have['gradient buckets'] - ledger)} short"
        ]
    if zero == 3:
        out = []
        if have["live parameters"] != ledger:
            out.append(
                f"memory: stage3_max_live_parameters allows {fmt_gb(have['live parameters'])} of gathered bf16 "
                f"parameters; the deepspeed ledger counts {fmt_gb(ledger)}"
            )
        if have["gradient bucket"] != DEEPSPEED_Z3_REDUCE_BYTES:
            out.append(
                f"memory: ZeRO-3 keeps a gradient bucket of {fmt_gb(have['gradient bucket'])} per GPU "
                f"(deepspeed/runtime/zero/stage3.py L780-L784); the deepspeed ledger counts "
                f"{fmt_gb(DEEPSPEED_Z3_REDUCE_BYTES)}"
            )
        return out
    return []


def deepspeed_config(plan: Plan) -> tuple[dict, tuple[str, ...]]:
    """The DeepSpeed v0.19.8 config for ``plan`` as a dict, and notes (how to launch it, how the recompute mode is
    applied, where DeepSpeed runs otherwise than the header prices). ValueError when DeepSpeed alone cannot run the
    plan from a config (``deepspeed_refusal``)."""
    why = deepspeed_refusal(plan)
    if why:
        raise ValueError(why)
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.micro_batches,
        "bf16": {"enabled": True},
        "communication_data_type": "bf16",
        "data_types": {"grad_accum_dtype": "bf16"},
        "zero_optimization": _zero_section(plan.zero),
    }
    nodes, per_host = launch_hosts(plan.gpus, plan.gpus_per_host, plan.gpus_per_node)
    notes = [
        f"launch {plan.gpus} processes, one per GPU ({nodes} host(s) of {per_host}: slots={per_host} in DeepSpeed's "
        "hostfile): DeepSpeed takes the "
        "data-parallel size from the torch.distributed world size and asserts train_batch_size = "
        f"{plan.micro_batch_size} × {plan.micro_batches} × {plan.dp} (deepspeed/runtime/config.py L457-L471, "
        "L602-L605); seq_len "
        f"{plan.seq} is the data loader's (DeepSpeed's config has no sequence length)",
        "the ledger prices Adam(W) with fp32 master weights and moments: give deepspeed.initialize an Adam-type "
        "optimizer (the script's, or the config's optimizer section)",
    ]
    if plan.recompute == "full":
        notes.append(
            "recompute='full': call model.gradient_checkpointing_enable() in the training script (transformers "
            "checkpoints every decoder layer, a GradientCheckpointingLayer, with torch.utils.checkpoint); "
            "DeepSpeed's activation_checkpointing section is not written: it configures deepspeed.checkpointing, "
            "which a transformers model does not call"
        )
    else:
        notes.append("recompute='none': leave transformers' gradient checkpointing off (its default)")
    if plan.zero == 0 and plan.dp > 1:
        notes.append(
            "ZeRO-0: DeepSpeed all-reduces the gradients after the backward of the accumulation boundary "
            "(deepspeed/runtime/engine.py L3073-L3095) and has no option to overlap it; the step time overlaps the "
            "data-parallel sync, so the header's step time hides an all-reduce that DeepSpeed runs exposed"
        )
    notes += _buffer_notes(plan.zero, config)
    return config, tuple(notes)


def deepspeed_text(plan: Plan) -> str:
    """The config of ``plan`` as pretty-printed JSON (two-space indent, a final newline), headed by nothing: the
    caller adds the header (``deepspeed.initialize`` reads a config file with hjson, which skips ``#`` lines,
    ``deepspeed/runtime/config.py`` L443-L444)."""
    return json.dumps(deepspeed_config(plan)[0], indent=2) + "\n"
