"""Export a plan to the engines readers run: Megatron-LM's ``pretrain_gpt.py`` flags with a ``torchrun`` line,
and torchtitan's parallelism settings (TOML).

The flag and option names follow the versions named in ``data/engines/*.json`` (each file lists the
options read from that version's source, with the source): Megatron-LM at commit 000c4ac (after
Megatron-Core v0.14, ``megatron/training/arguments.py``), torchtitan at commit 6404b93
(``torchtitan/config/job_config.py``), PyTorch's ``torchrun``. ``engine_options(name)`` returns that list;
the tests check every emitted flag against it.

Mapping (the plan's terms → the engine's):

* ZeRO: 1 → ``--use-distributed-optimizer`` (Megatron's "6 + 12/dp" bytes per parameter: optimizer states
  sharded); 2 → ``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads``; 3 → the same with
  ``optim_grads_params``. torchtitan shards with FSDP (``data_parallel_shard_degree``): ZeRO-3 by default,
  ZeRO-2-like with ``fsdp_reshard_after_forward = "never"`` (Llama 3's choice), ZeRO-0 as DDP
  (``data_parallel_replicate_degree``); it has no ZeRO-1, exported as ZeRO-2 with a note.
* recompute: ``selective`` / ``full`` → ``--recompute-granularity`` (full adds ``--recompute-method
  uniform --recompute-num-layers 1``); torchtitan ``[activation_checkpoint] mode``.
* mesh order: Megatron's default is tp-cp-ep-dp-pp; the course's default tp-cp-pp-dp (Llama 3) is
  ``--use-tp-pp-dp-mapping``; other orders raise ValueError.
* uneven stages: ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` when
  the middle stages are equal (Llama 3's 7, 8, …, 8, 7); anything else raises ValueError.
* global batch: B sequences = dp × b × m.

    >>> from meshplan import Plan
    >>> p = Plan.create("llama-3.1-70b", gpus=64, tp=4, pp=4, cp=2, seq=8192, micro_batches=256,
    ...                 order="tp-cp-ep-dp-pp")
    >>> ex = megatron(p)
    >>> ex.value("--tensor-model-parallel-size"), ex.value("--global-batch-size"), ex.torchrun[:3]
    ('4', '512', ['torchrun', '--nnodes=8', '--nproc_per_node=8'])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from meshplan.core.resources import DATA_DIR
from meshplan.core.units import fmt_gb
from meshplan.plan import Plan, evaluate
from meshplan.spec.dims import parse_order

ENGINES_DIR = DATA_DIR / "engines"
FORMATS = ("megatron", "torchtitan")
TORCHTITAN_COMMIT = "6404b93"
TORCHTITAN_MODELS = {"llama": "Llama 3", "deepseek_v3": "DeepSeek-V3"}  # torchtitan/models/ at that commit
ENGINE_LEDGER = {"megatron": "megatron", "torchtitan": "fsdp2"}  # the ledger each export is priced in


@cache
def engine_file(name: str) -> dict:
    """The data file of an engine (``megatron-lm``, ``torchtitan``, ``torchrun``): version, source, options."""
    path = ENGINES_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"unknown engine {name!r}: no {path.name} in data/engines/")
    return json.loads(path.read_text())


def engine_options(name: str) -> frozenset[str]:
    """Every flag (``--x``) or ``section.option`` the named engine version accepts, as listed in its data file."""
    d = engine_file(name)
    if "flags" in d:
        return frozenset(d["flags"])
    return frozenset(f"{sec}.{opt}" for sec, opts in d["options"].items() for opt in opts)


@dataclass(frozen=True)
class MegatronExport:
    """``torchrun`` argv (up to the script), then ``pretrain_gpt.py`` flags as (flag, value or None)."""

    torchrun: list
    flags: list
    notes: tuple = ()

    def value(self, flag: str) -> str | None:
        for f, v in self.flags:
            if f == flag:
                return v
        raise KeyError(flag)

    def command(self) -> str:
        """The shell command, one flag per line."""
        lines = [" ".join([*self.torchrun, engine_file("megatron-lm")["script"]])]
        lines += [f"    {f}" + (f" {v}" if v is not None else "") for f, v in self.flags]
        out = " \\\n".join(lines)
        return "\n".join([f"# note: {n}" for n in self.notes] + [out])


def _freq_pattern(flags: list[int]) -> str:
    """Megatron's --moe-layer-freq pattern as run-length Python: [0, 0, 1, 1, 1] → '([0]*2+[1]*3)'."""
    runs: list[list[int]] = []
    for x in flags:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"


def _shape_flags(plan: Plan) -> tuple[list, list]:
    """The model's shape as Megatron-LM flags, read from the per-layer description (``ModelSpec.layers``), with a
    note for every feature the pinned Megatron-LM cannot express."""
    m, notes = plan.model, []
    layers = m.layers
    f: list = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size)]
    if not layers:
        raise ValueError(f"{m.name}: no per-layer description to export (ModelSpec.layers is empty)")
    attn = [L for L in layers if L.mixer in ("attention", "mla")]
    first = attn[0] if attn else layers[0]
    if first.mixer == "mla":
        f += [("--multi-latent-attention", None), ("--num-attention-heads", first.num_heads)]
        if first.q_lora_rank:
            f.append(("--q-lora-rank", first.q_lora_rank))
        f += [
            ("--kv-lora-rank", first.kv_lora_rank),
            ("--qk-head-dim", first.qk_nope_head_dim),
            ("--qk-pos-emb-head-dim", first.qk_rope_head_dim),
            ("--v-head-dim", first.v_head_dim),
        ]
    else:
        f.append(("--num-attention-heads", first.num_heads))
        if first.head_dim * first.num_heads != m.hidden_size:
            f.append(("--kv-channels", first.head_dim))
        if first.num_kv_heads != first.num_heads:
            f += [("--group-query-attention", None), ("--num-query-groups", first.num_kv_heads)]
    if any(L.mixer == "linear_attention" for L in layers):
        notes.append(
            f"{m.name}'s linear-attention (Gated DeltaNet) layers have no pretrain_gpt.py flag at this "
            "Megatron-LM commit: the flags describe softmax attention in every layer"
        )
    if any(L.output_gate for L in attn):
        notes.append("the gated attention output (q also yields a sigmoid gate) has no flag at this commit")
    if any(L.qk_norm for L in attn):
        f.append(("--qk-layernorm", None))
        if any(getattr(L, "qk_norm_scope", "head") == "projection" for L in attn):
            notes.append("Megatron's --qk-layernorm norms each head; this model norms the whole q/k projection")
    windows = {L.sliding_window for L in attn}
    if windows - {None}:
        if len(windows) == 1:
            f.append(("--window-size", f"({windows.pop()},0)"))
        else:
            notes.append(
                "sliding-window and full-attention layers alternate: --window-size applies one window to "
                "every layer; set the pattern by hand"
            )
    biases = {(L.qkv_bias, L.o_bias, L.mlp_bias) for L in layers}
    if biases == {(False, False, False)}:
        f.append(("--disable-bias-linear", None))
    elif biases == {(True, False, False)}:
        f += [("--disable-bias-linear", None), ("--add-qkv-bias", None)]
    gated = {L.mlp for L in layers}
    if gated == {"gated"}:
        f.append(("--swiglu", None))
        if {L.activation for L in layers} - {"silu", "swish"}:
            notes.append(f"gated MLP with {sorted({L.activation for L in layers})}: Megatron's --swiglu is SiLU")
    norms = {L.norm for L in layers}
    f.append(("--normalization", "RMSNorm" if norms == {"rmsnorm"} else "LayerNorm"))
    if {getattr(L, "norm_position", "pre") for L in layers} != {"pre"}:
        notes.append("post-block or sandwich norms have no flag at this commit: Megatron norms before each block")
    f.append(("--position-embedding-type", "learned_absolute" if m.position_embedding == "learned" else "rope"))
    if m.position_embedding != "learned" and m.rope_theta is not None:
        if m.rope_theta != int(m.rope_theta):
            notes.append(f"rope_theta={m.rope_theta} is not an integer; Megatron's --rotary-base takes one")
        f.append(("--rotary-base", int(m.rope_theta)))
        if m.rotary_fraction != 1.0:
            f.append(("--rotary-percent", m.rotary_fraction))
    if m.norm_eps is not None:
        f.append(("--norm-epsilon", m.norm_eps))
    dense = [L for L in layers if not L.is_moe]
    if dense:
        f.append(("--ffn-hidden-size", dense[0].intermediate_size))
    moe = [L for L in layers if L.is_moe]
    if moe:
        e = moe[0]
        f += [
            ("--num-experts", e.num_experts),
            ("--moe-router-topk", e.experts_per_token),
            ("--moe-ffn-hidden-size", e.intermediate_size),
        ]
        if e.num_shared_experts or e.shared_intermediate_size:
            f.append(("--moe-shared-expert-intermediate-size", e.shared_intermediate_size))
        if e.router_bias:
            f += [("--moe-router-score-function", "sigmoid"), ("--moe-router-enable-expert-bias", None)]
        if dense:
            f.append(("--moe-layer-freq", _freq_pattern([int(L.is_moe) for L in layers])))
    if m.params.components["head"]:
        f.append(("--untie-embeddings-and-output-weights", None))
    if m.final_logit_softcapping is not None or any(L.attn_logit_softcapping for L in attn):
        notes.append("logit softcapping has no flag at this commit")
    if m.num_mtp_layers:
        f.append(("--mtp-num-layers", m.num_mtp_layers))
    if m.params.components["vision"]:
        notes.append(f"{m.name}'s vision tower is not part of pretrain_gpt.py")
    if m.max_position_embeddings:
        f.append(("--max-position-embeddings", m.max_position_embeddings))
    return f, notes


def megatron(plan: Plan, master: str = "$MASTER_ADDR:29500") -> MegatronExport:
    """Megatron-LM flags and the ``torchrun`` line for ``plan`` (ValueError when Megatron cannot express it)."""
    axes = parse_order(plan.order)
    mapping: list[tuple[str, object]] = []
    if axes == ("tp", "cp", "pp", "dp"):
        mapping = [("--use-tp-pp-dp-mapping", None)]
    elif axes != ("tp", "cp", "dp", "pp"):
        raise ValueError(
            f"order={plan.order!r}: Megatron-LM ranks are tp-cp-ep-dp-pp (default) or tp-cp-ep-pp-dp "
            "(--use-tp-pp-dp-mapping)"
        )
    nodes = max(1, plan.gpus // plan.gpus_per_node)
    per_node = min(plan.gpus, plan.gpus_per_node)
    run = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={per_node}"]
    if nodes > 1:
        run += ["--rdzv_id=$JOB_ID", "--rdzv_backend=c10d", f"--rdzv_endpoint={master}"]
    flags: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", plan.tp),
        ("--pipeline-model-parallel-size", plan.pp),
    ]
    if plan.layers_per_stage is not None and len(set(plan.layers_per_stage)) > 1:
        lps = plan.layers_per_stage
        if len(set(lps[1:-1])) > 1:
            raise ValueError(
                f"layers_per_stage={list(lps)}: Megatron-LM's flags set the first and last stage only; "
                "the middle stages must be equal"
            )
        flags += [("--decoder-first-pipeline-num-layers", lps[0]), ("--decoder-last-pipeline-num-layers", lps[-1])]
    if plan.virtual_stages > 1:
        if plan.layers_per_stage is not None and len(set(plan.layers_per_stage)) > 1:
            raise ValueError(
                "virtual_stages > 1 with uneven stages: export the layout by hand (--pipeline-model-parallel-layout)"
            )
        flags.append(
            ("--num-layers-per-virtual-pipeline-stage", plan.model.num_layers // (plan.pp * plan.virtual_stages))
        )
    flags.append(("--context-parallel-size", plan.cp))
    if plan.ep > 1:
        flags.append(("--expert-model-parallel-size", plan.ep))
        if plan.etp != plan.tp:
            flags.append(("--expert-tensor-parallel-size", plan.etp))
    flags += mapping
    if plan.sequence_parallel and plan.tp > 1:
        flags.append(("--sequence-parallel", None))
    notes = []
    if plan.zero == 1:
        flags.append(("--use-distributed-optimizer", None))
    elif plan.zero in (2, 3):
        flags += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", "optim_grads" if plan.zero == 2 else "optim_grads_params"),
        ]
    if plan.recompute == "selective":
        flags.append(("--recompute-granularity", "selective"))
    elif plan.recompute == "full":
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    shape, shape_notes = _shape_flags(plan)
    flags += shape
    flags += [
        ("--seq-length", plan.seq),
        ("--micro-batch-size", plan.micro_batch_size),
        ("--global-batch-size", plan.global_batch),
        ("--bf16", None),
    ]
    notes += shape_notes
    return MegatronExport(run, [(f, None if v is None else str(v)) for f, v in flags], tuple(notes))


def torchtitan(plan: Plan) -> tuple[dict, tuple[str, ...]]:
    """torchtitan settings for ``plan`` as {section: {option: value}}, and notes."""
    notes = []
    if plan.zero == 0:
        replicate, shard, reshard = plan.dp, 1, None
    else:
        replicate, shard = 1, plan.dp
        reshard = "never" if plan.zero in (1, 2) else "always"
        if plan.zero == 1:
            notes.append("torchtitan has no ZeRO-1: exported as FSDP without resharding after forward (ZeRO-2-like)")
    if plan.model.family not in TORCHTITAN_MODELS:
        notes.append(
            f"torchtitan at {TORCHTITAN_COMMIT} has model code for {', '.join(TORCHTITAN_MODELS.values())} "
            f"only (torchtitan/models/): {plan.model.name} ({plan.model.family}) needs its own model "
            "definition"
        )
    par: dict[str, object] = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard}
    if reshard is not None and shard > 1:
        par["fsdp_reshard_after_forward"] = reshard
    par.update(
        {
            "tensor_parallel_degree": plan.tp,
            "pipeline_parallel_degree": plan.pp,
            "pipeline_parallel_schedule": "Interleaved1F1B" if plan.virtual_stages > 1 else "1F1B",
            "pipeline_parallel_microbatch_size": plan.micro_batch_size,
            "context_parallel_degree": plan.cp,
            "expert_parallel_degree": plan.ep,
        }
    )
    if plan.ep > 1 and plan.etp != plan.tp:
        notes.append(
            f"expert tensor parallelism {plan.etp} (experts not split like the dense layers' TP "
            f"{plan.tp}): not among the pinned torchtitan options; set it by hand where supported"
        )
    if plan.layers_per_stage is not None or plan.virtual_stages > 1:
        notes.append(
            "set the layers of each stage with pipeline_parallel_layers_per_stage or "
            "module_fqns_per_model_part to match the plan's stages"
        )
    settings = {
        "parallelism": par,
        "activation_checkpoint": {"mode": plan.recompute},
        "training": {
            "local_batch_size": plan.micro_batch_size * plan.micro_batches,
            "global_batch_size": plan.global_batch,
            "seq_len": plan.seq,
        },
    }
    return settings, tuple(notes)


def toml(settings: dict, notes=()) -> str:
    """torchtitan settings as TOML text."""
    lines = [f"# note: {n}" for n in notes]
    for sec, opts in settings.items():
        lines.append(f"[{sec}]")
        for k, v in opts.items():
            lines.append(f"{k} = " + (f'"{v}"' if isinstance(v, str) else str(v)))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def price_note(plan: Plan) -> str:
    """One line: the plan's memory per GPU in its own ledger, and whether it fits (``plan.accounting``)."""

    r = evaluate(plan)
    verdict = "fits" if r.fits else "does NOT fit"
    return (
        f"memory per GPU in the {plan.accounting.name} ledger: {fmt_gb(r.memory_bytes['total'])} "
        f"({fmt_gb(r.memory_bytes['model_states'])} model states + {fmt_gb(r.memory_bytes['activations'])} "
        f"activations), {verdict} in {fmt_gb(plan.gpu_memory_bytes, 0)}"
    )


def export_text(plan: Plan, fmt: str, ledger: str | None = None) -> str:
    """The export of ``plan`` in format ``megatron`` or ``torchtitan`` (ValueError for another), headed by its price in
    ``ledger`` (default: the plan's own; the command line prices a Megatron-LM export in the ``megatron`` ledger and a
    torchtitan one in ``fsdp2``, ``ENGINE_LEDGER``). torchtitan runs ZeRO-1 as FSDP without resharding after forward
    (ZeRO-2-like), so that is what its export prices."""
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r} must be one of {', '.join(FORMATS)}")
    priced = (
        plan
        if ledger is None
        else plan.replace(accounting=ledger, **({"zero": 2} if (fmt == "torchtitan" and plan.zero == 1) else {}))
    )
    if fmt == "megatron":
        return f"# {price_note(priced)}\n" + megatron(plan).command()
    return f"# {price_note(priced)}\n" + toml(*torchtitan(plan))
