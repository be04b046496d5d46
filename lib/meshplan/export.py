"""Export a plan to the engines readers run: Megatron-LM's ``pretrain_gpt.py`` flags with a ``torchrun`` line,
torchtitan 0.3.0's command (``torchtitan_030``: its current release on PyPI, a config_registry entry with
command-line overrides, checked by torchtitan 0.3.0's own config classes and ``ParallelDims`` in
``tests/test_export_torchtitan_030.py``), torchtitan's parallelism settings at commit 6404b93 (TOML), and DeepSpeed's
config JSON (``export_deepspeed``: DeepSpeed alone on a
transformers model, data parallelism with ZeRO; the price and notes as ``#`` lines above the JSON, which
``deepspeed.initialize`` reads with hjson; strip them, ``grep -v '^#'``, for a loader that wants strict JSON, such
as transformers' Trainer).

The flag and option names follow the versions named in ``data/engines/*.json`` (each file lists the
options read from that version's source, with the source): Megatron-LM core_v0.19.0 (commit 5be9626,
``megatron/training/arguments.py`` and the Megatron-Core configs its parser derives options from), torchtitan at
commit 6404b93 (``torchtitan/config/job_config.py``), PyTorch's ``torchrun``. ``engine_options(name)`` returns that
list; the tests check every emitted flag against it.

Mapping (the plan's terms → the engine's):

* ZeRO: 1 → ``--use-distributed-optimizer`` (Megatron's "6 + 12/dp" bytes per parameter: optimizer states
  sharded); 2 → ``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads``; 3 → the same with
  ``optim_grads_params``. torchtitan shards with FSDP (``data_parallel_shard_degree``): ZeRO-3 by default,
  ZeRO-2-like with ``fsdp_reshard_after_forward = "never"`` (Llama 3's choice), over the DP × CP ranks (its
  ``dp_shard_cp`` mesh), ZeRO-0 as DDP (``data_parallel_replicate_degree``) without CP; it has no ZeRO-1, and
  shards over the CP ranks whenever cp > 1: both exported as ZeRO-2 with a note.
* recompute: ``selective`` / ``full`` → ``--recompute-granularity`` (full adds ``--recompute-method
  uniform --recompute-num-layers 1``); torchtitan ``[activation_checkpoint] mode``, selective at the op level
  (``selective_ac_option = "op"``; its default ``"2"`` is full recompute of every second block).
* mesh order: Megatron's default is tp-cp-ep-dp-pp; the course's default tp-cp-pp-dp (Llama 3) is
  ``--use-tp-pp-dp-mapping``; other orders raise ValueError. torchtitan's mesh is always tp-cp-dp-pp.
* stages: Megatron-LM ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` when
  the middle stages are equal (Llama 3's 7, 8, …, 8, 7), ``--num-layers-per-virtual-pipeline-stage`` when
  interleaved; torchtitan ``pipeline_parallel_first_stage_less_layers`` / ``..._last_stage_less_layers`` (0 for
  equal stages: its default 1 moves a layer off each end) and ``pipeline_parallel_layers_per_stage``
  (``_torchtitan_stages``); anything else raises ValueError.
* global batch: B sequences = dp × b × m. Megatron-LM: ``--micro-batch-size b --global-batch-size B``
  (it derives m = B ÷ (b × dp)). torchtitan: ``training.local_batch_size`` is what one data-parallel rank
  feeds one forward-backward call and gradient accumulation is ``global_batch_size ÷ (local_batch_size × dp)``
  (``torchtitan/train.py`` L200-L217 at 6404b93); with pipeline parallelism that call splits the local batch
  into ``local_batch_size ÷ pipeline_parallel_microbatch_size`` micro-batches (``torchtitan/distributed/
  pipeline.py`` L64-L72). So the export writes local = b without PP (m accumulation steps) and local = b × m
  with it (m pipeline micro-batches of b, one accumulation step).
* expert TP: Megatron-LM's ``--expert-tensor-parallel-size`` defaults to the TP size (``arguments.py``
  L569-L570), so the flag is written whenever the plan's expert TP differs from TP, with or without EP.
  torchtitan at 6404b93 has no such option: experts split over TP like the dense layers (``ep_tp`` mesh,
  ``experiments/llama4/infra/parallelize.py`` L95-L105).
* what the engine runs is what the header prices (``engine_plan``): an export is read back into the same plan,
  or the difference is priced and noted (torchtitan: ZeRO-1 as ZeRO-2, its own mesh order, sequence
  parallelism always on with TP, expert TP = TP), or the export refuses (ValueError).

The Megatron-LM command is shell text: every value is quoted for bash (``shlex.quote``; Megatron's argparse
then reads ``--moe-layer-freq '([0]*3+[1]*58)'`` as the Python list expression ``moe_freq_type`` evaluates,
``arguments.py`` L326-L349, ``--linear-attention-freq '([1]*3+[0]*1)*16'`` as ``la_freq_type`` does, L351-L374,
and ``--window-size '(4096,0)'`` as ``tuple_type`` strips and splits it, L376).

What the price assumes, the command says (``data/engines/megatron-lm.json``'s ``priced_defaults`` and
``startup_rules``, each with its line; ``scripts/check_megatron_export.py`` runs Megatron-LM's own parser,
``validate_args`` and ``TransformerConfig`` on the exports): ``--overlap-grad-reduce`` (and
``--overlap-param-gather`` with ZeRO ≥ 1) because the step time overlaps the data-parallel sync; the all-to-all
dispatcher and grouped GEMMs for MoE; ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with TP or CP, unset under Megatron-FSDP,
which also needs ``--ckpt-format fsdp_dtensor``; Gated DeltaNet layers as Megatron-Core's
``gated_delta_net`` variant.

    >>> from meshplan import Plan
    >>> p = Plan.create("llama-3.1-70b", gpus=64, tp=4, pp=4, cp=2, seq=8192, micro_batches=256,
    ...                 order="tp-cp-ep-dp-pp")
    >>> ex = megatron(p)
    >>> ex.value("--tensor-model-parallel-size"), ex.value("--global-batch-size"), ex.torchrun[:3]
    ('4', '512', ['torchrun', '--nnodes=8', '--nproc_per_node=8'])
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import cache

from meshplan.core.resources import DATA_DIR
from meshplan.core.units import fmt_gb
from meshplan.core.validation import PlanError
from meshplan.export_deepspeed import deepspeed_config
from meshplan.parallel.engine_activations import op_projections, spec_implementation
from meshplan.plan import Plan, Report, evaluate
from meshplan.spec.dims import MEGATRON_ORDER, parse_order
from meshplan.spec.mesh import launch_hosts
from meshplan.spec.model import ModelSpec

ENGINES_DIR = DATA_DIR / "engines"
TORCHTITAN_030 = "torchtitan-0.3.0"  # the format of torchtitan's current release: a command line, not TOML
FORMATS = ("megatron", "torchtitan", TORCHTITAN_030, "deepspeed")
TORCHTITAN_COMMIT = "6404b93"
# What a reader who installs torchtitan today meets (torchtitan 0.3.0 on PyPI, torchtitan/config/manager.py there)
TORCHTITAN_VERSION_NOTE = (
    f"note: the TOML job settings of torchtitan at {TORCHTITAN_COMMIT}; torchtitan 0.3.0 (PyPI) reads no TOML: it "
    "builds a job from a config_registry entry (--module M --config F, torchtitan/config/manager.py) with "
    "--section.option overrides: --format torchtitan-0.3.0 writes that command"
)
TORCHTITAN_MODELS = {"llama": "Llama 3", "deepseek_v3": "DeepSeek-V3"}  # torchtitan/models/ at that commit
ENGINE_LEDGER = {  # each export's ledger
    "megatron": "megatron",
    "torchtitan": "fsdp2",
    TORCHTITAN_030: "fsdp2",
    "deepspeed": "deepspeed",
}
# torchtitan's device mesh, outermost first ["pp", "dp_replicate", "dp_shard", "cp", "tp"]
# (torchtitan/distributed/parallel_dims.py L136-L139 at 6404b93), in the library's inner-to-outer order strings
TORCHTITAN_ORDER = MEGATRON_ORDER


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
    if name == "deepspeed":  # config keys as dotted paths (zero_optimization.stage)
        return frozenset(d["options"])
    return frozenset(f"{sec}.{opt}" for sec, opts in d["options"].items() for opt in opts)


@dataclass(frozen=True)
class MegatronExport:
    """``torchrun`` argv (up to the script), then ``pretrain_gpt.py`` flags as (flag, value or None); ``env``: what
    the command sets before ``torchrun`` (``VAR=value``, or ``env -u VAR``)."""

    torchrun: list
    flags: list
    notes: tuple = ()
    env: tuple = ()

    def value(self, flag: str) -> str | None:
        for f, v in self.flags:
            if f == flag:
                return v
        raise KeyError(flag)

    def command(self) -> str:
        """The shell command, one flag per line."""
        lines = [" ".join([*self.env, *self.torchrun, engine_file("megatron-lm")["script"]])]  # $MASTER_ADDR expands
        lines += [f"    {f}" + (f" {shlex.quote(v)}" if v is not None else "") for f, v in self.flags]
        out = " \\\n".join(lines)
        return "\n".join([f"# note: {n}" for n in self.notes] + [out])


def _freq_pattern(flags: list[int]) -> str:
    """A per-layer 0/1 pattern as the Python list expression Megatron-LM evaluates (``--moe-layer-freq``,
    ``--linear-attention-freq``): run-length, and its shortest repeating period once, times the repeats.

        >>> _freq_pattern([0, 0, 1, 1, 1]), _freq_pattern([1, 1, 1, 0] * 16)
        ('([0]*2+[1]*3)', '([1]*3+[0]*1)*16')
    """
    n = len(flags)
    period = next(p for p in range(1, n + 1) if n % p == 0 and flags == flags[:p] * (n // p))
    runs: list[list[int]] = []
    for x in flags[:period]:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    body = "(" + "+".join(f"[{x}]*{k}" for x, k in runs) + ")"
    return body if period == n else f"{body}*{n // period}"


def mtp_layers(model: ModelSpec) -> int:
    """Depths of the model's multi-token-prediction module (Megatron-LM's ``--mtp-num-layers``,
    ``transformer_config.py`` L68): ``ModelSpec.num_mtp_layers`` (Qwen3.5's ``mtp_num_hidden_layers``, DeepSeek-V3's
    ``num_nextn_predict_layers``).

        >>> from meshplan import load_model
        >>> [mtp_layers(load_model(name)) for name in ("deepseek-v3", "qwen3.8-27b", "qwen3-8b")]
        [1, 1, 0]
    """
    return model.num_mtp_layers


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
    linear = [L for L in layers if L.mixer == "linear_attention"]
    if linear:  # Megatron-Core's Gated DeltaNet (transformer_config.py L294 and L349-L368, checks L1347-L1382)
        g = linear[0]
        if len({(L.linear_num_key_heads, L.linear_num_value_heads, L.linear_key_head_dim, L.linear_value_head_dim,
                 L.linear_conv_kernel) for L in linear}) > 1:  # fmt: skip
            raise ValueError(f"{m.name}: Gated DeltaNet layers of different shapes; Megatron-LM sets one shape")
        split = plan.tp * plan.cp  # Megatron-Core splits the heads over TP x CP (transformer_config.py L1371-L1382)
        for heads, what in ((g.linear_num_key_heads, "key"), (g.linear_num_value_heads, "value")):
            if heads % split:
                raise ValueError(
                    f"tp × cp = {plan.tp} × {plan.cp} does not divide {m.name}'s {heads} Gated DeltaNet {what} heads, "
                    "which Megatron-Core splits over TP × CP"
                )
        f += [
            ("--experimental-attention-variant", "gated_delta_net"),
            ("--linear-attention-freq", _freq_pattern([int(L.mixer == "linear_attention") for L in layers])),
            ("--linear-conv-kernel-dim", g.linear_conv_kernel),
            ("--linear-key-head-dim", g.linear_key_head_dim),
            ("--linear-value-head-dim", g.linear_value_head_dim),
            ("--linear-num-key-heads", g.linear_num_key_heads),
            ("--linear-num-value-heads", g.linear_num_value_heads),
        ]
    if any(L.output_gate for L in attn):
        f.append(("--attention-output-gate", None))  # transformer_config.py L271
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
    if mtp_layers(m):
        f.append(("--mtp-num-layers", mtp_layers(m)))
    if m.params.components["vision"]:
        notes.append(f"{m.name}'s vision tower is not part of pretrain_gpt.py")
    if m.max_position_embeddings:  # Megatron asserts it covers --seq-length (arguments.py L1314)
        positions = m.max_position_embeddings
        if plan.seq > positions:
            if m.position_embedding == "learned":
                raise ValueError(
                    f"seq={plan.seq:,} is longer than {m.name}'s {positions:,} learned positions: Megatron-LM "
                    "refuses it, and the model has no embedding for the positions beyond"
                )
            notes.append(
                f"--max-position-embeddings raised from the config's {positions:,} to seq {plan.seq:,} (Megatron "
                "asserts it covers the sequence; rotary positions have no table to grow)"
            )
            positions = plan.seq
        f.append(("--max-position-embeddings", positions))
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
    nodes, per_node = launch_hosts(plan.gpus, plan.gpus_per_host, plan.gpus_per_node)
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
    if plan.etp != plan.tp:  # Megatron's default is the TP size (arguments.py L569-L570), with or without EP
        flags.append(("--expert-tensor-parallel-size", plan.etp))
    flags += mapping
    if plan.sequence_parallel and plan.tp > 1:
        flags.append(("--sequence-parallel", None))
    notes = []
    fsdp = plan.zero in (2, 3)
    if plan.zero == 1:
        flags.append(("--use-distributed-optimizer", None))
    elif fsdp:
        flags += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", "optim_grads" if plan.zero == 2 else "optim_grads_params"),
            ("--ckpt-format", "fsdp_dtensor"),  # Megatron-FSDP asserts it (arguments.py L1146-L1147)
            # the ledger's fp32 main gradients and fp32 reduce-scatters (18 bytes per parameter before sharding);
            # the default 'auto' keeps them in bf16 under --bf16 (arguments.py L3524-L3527)
            ("--megatron-fsdp-main-grads-dtype", "fp32"),
        ]
    # the step time prices the data-parallel sync overlapped with compute (steptime.Execution.dp_overlap);
    # Megatron-LM overlaps it only when asked, both flags off by default (arguments.py L2968, L2989): the gradient
    # reduce for any DP > 1, the parameter gather with a sharded optimizer (it needs one, L990-L995)
    if plan.dp * plan.cp > 1:
        flags.append(("--overlap-grad-reduce", None))
        if plan.zero >= 1:
            flags.append(("--overlap-param-gather", None))
    if plan.recompute == "selective":  # Megatron's selective: the core attention ("core_attn", its default module)
        flags += [("--recompute-granularity", "selective"), ("--recompute-modules", "core_attn")]
    elif plan.recompute == "full":
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    shape, shape_notes = _shape_flags(plan)
    flags += shape
    if plan.model.is_moe:
        # the all-to-all dispatch the EP traffic prices (the default dispatcher is allgather: transformer_config.py
        # L862), and the experts as grouped GEMMs (off by default, L829)
        if plan.ep > 1:
            flags.append(("--moe-token-dispatcher-type", "alltoall"))
        flags.append(("--moe-grouped-gemm", None))
    flags += [
        ("--seq-length", plan.seq),
        ("--micro-batch-size", plan.micro_batch_size),
        ("--global-batch-size", plan.global_batch),
        ("--bf16", None),
    ]
    # gradients in bf16 as priced (Plan.grad_dtype): --bf16 accumulates and reduces them in fp32 unless
    # --grad-reduce-in-bf16 (arguments.py L1190-L1193 and L2905 at core_v0.19.0)
    if plan.accounting.grad_reduce_bf16:
        flags.append(("--grad-reduce-in-bf16", None))
    # FP8 through Transformer Engine (TransformerConfig.fp8 / fp8_recipe at core_v0.19.0, transformer_config.py
    # L566-L578: the argument --fp8-format, the recipe 'delayed' by default): E4M3 forward, E5M2 gradients
    # ('hybrid'), per-tensor current scaling ('tensorwise', what the step time's FP8 runs use, Megatron-Bridge's
    # FP8-CS) or block-scaled MXFP8 (Blackwell). --bf16 stays: the parameters, attention and the head are bf16.
    if plan.precision != "bf16":
        flags += [("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise" if plan.precision == "fp8" else "mxfp8")]
    # dropout as priced (Plan.dropout): Megatron's default is 0.1 for both (transformer_config.py L181-L184 at
    # core_v0.19.0), whose masks the megatron ledger keeps only when asked; the attention kernel when it is not
    # Transformer Engine's own choice (--attention-backend auto, flash or fused attention: what "flash" prices)
    flags += [("--attention-dropout", f"{plan.dropout:g}"), ("--hidden-dropout", f"{plan.dropout:g}")]
    if plan.attention_backend == "unfused":
        flags.append(("--attention-backend", "unfused"))
    notes += shape_notes
    # CUDA_DEVICE_MAX_CONNECTIONS: TP or CP before Blackwell needs 1 (arguments.py L1413-L1439; harmless after),
    # Megatron-FSDP needs anything but 1 (L1143-L1144), so the export unsets it there
    env: list[str] = []
    if fsdp:
        env = ["env", "-u", "CUDA_DEVICE_MAX_CONNECTIONS"]
    elif plan.tp > 1 or plan.cp > 1:
        env = ["CUDA_DEVICE_MAX_CONNECTIONS=1"]
    return MegatronExport(run, [(f, None if v is None else str(v)) for f, v in flags], tuple(notes), tuple(env))


def _mesh_axes(plan: Plan, order: str) -> tuple[str, ...]:
    """The axes of ``order`` that split (size > 1), inner to outer: two orders that agree on them build one mesh."""
    sizes = {"tp": plan.tp, "cp": plan.cp, "pp": plan.pp, "dp": plan.dp}
    return tuple(a for a in parse_order(order) if sizes[a] > 1)


def _torchtitan_runs(
    plan: Plan, sequence_parallel_option: bool = False, experts_over_tp: bool = True
) -> tuple[dict, tuple[str, ...]]:
    """What torchtitan at 6404b93 runs of ``plan`` where that differs from it, as ``Plan.replace`` changes, with a note
    each; ValueError for what its settings cannot say. ``sequence_parallel_option`` and ``experts_over_tp=False``
    leave to the caller (torchtitan 0.3.0, ``_torchtitan_030_runs``) the two rules its release changed, and the
    6404b93 rule on EP, CP and FSDP."""
    changes: dict[str, object] = {}
    notes = []
    # FSDP shards over data_parallel_shard_degree × cp whenever that is more than 1 (its dp_shard_cp mesh,
    # models/llama3/infra/parallelize.py L99-L114), as the library's ZeRO shards over dp × cp; DDP replicates
    if plan.dp * plan.cp == 1:
        if plan.zero:
            changes["zero"] = 0  # nothing to shard: torchtitan wraps the model in neither
    elif plan.zero == 1:
        changes["zero"] = 2
        notes.append(
            "torchtitan has no ZeRO-1: exported as FSDP without resharding after forward (ZeRO-2-like), priced so"
        )
    elif plan.zero == 0 and plan.cp > 1:
        changes["zero"] = 2
        notes.append(
            "torchtitan shards the parameters over the CP ranks whenever cp > 1 (FSDP on its dp_shard_cp mesh): "
            "ZeRO-0 exported as FSDP without resharding after forward (ZeRO-2-like), priced so"
        )
    if _mesh_axes(plan, plan.order) != _mesh_axes(plan, TORCHTITAN_ORDER):
        changes["order"] = TORCHTITAN_ORDER
        notes.append(
            f"torchtitan's mesh is pp, dp, cp, tp from outer to inner (order {TORCHTITAN_ORDER!r}, "
            f"torchtitan/distributed/parallel_dims.py L136-L139), not {plan.order!r}: priced in its order"
        )
    if plan.accounting.grad_reduce_bf16:  # a Megatron-LM flag the TOML cannot carry
        changes["grad_dtype"] = "fp32"
        notes.append(
            "torchtitan has no --grad-reduce-in-bf16: it reduces gradients in fp32 (mixed_precision_reduce's "
            "default), priced so"
        )
    if plan.tp > 1 and not plan.sequence_parallel and not sequence_parallel_option:
        changes["sp"] = None
        notes.append(
            "torchtitan's tensor parallelism is always sequence parallel (no option turns it off at this commit): "
            "priced with sequence parallelism"
        )
    if plan.etp != plan.tp and experts_over_tp:
        changes["expert_tp"] = None
        notes.append(
            f"torchtitan has no expert tensor-parallel size: its experts split over TP {plan.tp} like the dense "
            f"layers (experiments/llama4/infra/parallelize.py L95-L105), not over {plan.etp}: priced so"
        )
    if plan.recompute == "selective":  # torchtitan's selective checkpointing is op-level, not the attention core
        try:
            for L in plan.model.layers:
                op_projections(L, plan.model.hidden_size, spec_implementation(plan.model))
        except ValueError as exc:
            notes.append(
                f"torchtitan's selective checkpointing is op-level (SelectiveAC), not Megatron's core attention; "
                f"{exc}: priced as the core attention's"
            )
        else:
            changes["recompute"] = "op"
            notes.append(
                "torchtitan's selective checkpointing is op-level (SelectiveAC: the matmul and attention outputs, "
                "every second matmul recomputed), not Megatron's core attention: priced as recompute='op'"
            )
    zero = changes.get("zero", plan.zero)
    shard = 1 if zero == 0 else plan.dp
    if not sequence_parallel_option and plan.ep > 1 and (plan.ep % plan.cp or (shard * plan.cp) % plan.ep):
        raise ValueError(
            f"ep={plan.ep}: torchtitan's expert parallelism borrows all of CP and part of FSDP's shard degree, so "
            f"cp={plan.cp} must divide ep and ep must divide data_parallel_shard_degree × cp = {shard} × {plan.cp}"
            + (" (ZeRO-0 runs as DDP, shard degree 1)" if zero == 0 else "")
            + " (torchtitan/distributed/parallel_dims.py L56-L58)"
        )
    return changes, tuple(notes)


def _torchtitan_stages(plan: Plan) -> dict[str, int]:
    """The pipeline options that make torchtitan split the layers as ``plan`` does. torchtitan spreads L + a + b
    "effective layers" over the pp × v stages, the first ones taking one more where it does not divide, the
    embedding weighing a layers on the first stage and the head b on the last
    (``pipeline_parallel_first_stage_less_layers`` = a, ``..._last_stage_less_layers`` = b, both 1 by default:
    ``generate_llm_fqn_per_model_part``, torchtitan/distributed/pipeline.py L126-L234); without
    ``pipeline_parallel_layers_per_stage`` an interleaved schedule takes 2 stages per rank
    (models/llama3/infra/pipeline.py L62-L116). Equal stages: a = b = 0; a first and last stage lighter than the
    k-layer middle ones: a = k − first, b = k − last. ValueError for other layouts."""
    if plan.pp == 1:
        return {}
    L, lps, v = plan.model.num_layers, plan.layers_per_stage, plan.virtual_stages
    if lps is None or len(set(lps)) == 1:
        out = {"pipeline_parallel_first_stage_less_layers": 0, "pipeline_parallel_last_stage_less_layers": 0}
        if v > 1:
            out["pipeline_parallel_layers_per_stage"] = L // (plan.pp * v)
        return out
    if v > 1:
        raise ValueError(
            "virtual_stages > 1 with uneven stages: export the layout by hand (module_fqns_per_model_part)"
        )
    k = lps[1] if len(lps) > 2 else max(lps)
    if len(set(lps[1:-1])) > 1 or lps[0] > k or lps[-1] > k:
        raise ValueError(
            f"layers_per_stage={list(lps)}: torchtitan's options make the first and last stage lighter than "
            "equal middle stages only; set module_fqns_per_model_part by hand"
        )
    return {
        "pipeline_parallel_first_stage_less_layers": k - lps[0],
        "pipeline_parallel_last_stage_less_layers": k - lps[-1],
    }


def torchtitan(plan: Plan) -> tuple[dict, tuple[str, ...]]:
    """torchtitan settings for ``plan`` as {section: {option: value}}, and notes (``engine_plan`` is the plan they
    run)."""
    changes, runs_notes = _torchtitan_runs(plan)
    notes = list(runs_notes)
    zero = changes.get("zero", plan.zero)
    if zero == 0:
        replicate, shard, reshard = plan.dp, 1, None
    else:
        replicate, shard = 1, plan.dp
        reshard = "never" if zero == 2 else "always"
    if plan.model.family not in TORCHTITAN_MODELS:
        notes.append(
            f"torchtitan at {TORCHTITAN_COMMIT} has model code for {', '.join(TORCHTITAN_MODELS.values())} "
            f"only (torchtitan/models/): {plan.model.name} ({plan.model.family}) needs its own model "
            "definition"
        )
    if mtp_layers(plan.model):
        notes.append(
            f"torchtitan at {TORCHTITAN_COMMIT} has no multi-token-prediction module: {plan.model.name}'s "
            f"{mtp_layers(plan.model)} MTP depth(s) are not trained"
        )
    par: dict[str, object] = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard}
    if reshard is not None and shard * plan.cp > 1:
        par["fsdp_reshard_after_forward"] = reshard
    par.update(
        {
            "tensor_parallel_degree": plan.tp,
            "pipeline_parallel_degree": plan.pp,
            "pipeline_parallel_schedule": "Interleaved1F1B" if plan.virtual_stages > 1 else "1F1B",
            "pipeline_parallel_microbatch_size": plan.micro_batch_size,
            **_torchtitan_stages(plan),
            "context_parallel_degree": plan.cp,
            "expert_parallel_degree": plan.ep,
        }
    )
    ac: dict[str, object] = {"mode": "selective" if plan.recompute == "op" else plan.recompute}
    if plan.recompute in ("selective", "op"):
        ac["selective_ac_option"] = "op"  # the default "2" is full recompute of every 2nd block (job_config.py L506)
    settings = {
        "parallelism": par,
        "activation_checkpoint": ac,
        "training": {
            # rows of one forward-backward call per DP rank: the m micro-batches with PP, one without (module doc)
            "local_batch_size": plan.micro_batch_size * (plan.micro_batches if plan.pp > 1 else 1),
            "global_batch_size": plan.global_batch,
            "seq_len": plan.seq,
        },
    }
    # FP8 through torchao, torchtitan's model converters ([model] converters, job_config.py at 6404b93): "float8"
    # (tensorwise dynamic scaling) or "mx" (MXFP8, Blackwell); the output head left in bf16, as the step time prices
    # it (float8's filter_fqns is empty by default; mx filters "output" by default). Weights are gathered in bf16
    # (enable_fsdp_float8_all_gather off, the default), the FSDP bytes the ledger counts.
    if plan.precision == "fp8":
        settings["model"] = {"converters": ["float8"]}
        settings["float8"] = {"filter_fqns": ["output"]}
    elif plan.precision == "mxfp8":
        settings["model"] = {"converters": ["mx"]}
        settings["mx"] = {"filter_fqns": ["output"]}
    return settings, tuple(notes)


def _torchtitan_030_runs(plan: Plan) -> tuple[dict, tuple[str, ...]]:
    """What torchtitan 0.3.0 runs of ``plan`` where that differs from it, as ``Plan.replace`` changes, with a note
    each; ValueError for what its command line cannot say. As at 6404b93 (``_torchtitan_runs``): FSDP over
    data_parallel_shard_degree × cp (its ``fsdp`` mesh, ``parallel_dims.py`` L257-L262 in the wheel), no ZeRO-1,
    gradients reduced in fp32 (``TrainingConfig.mixed_precision_reduce``: ``Literal["float32"]``, configs.py L93),
    the mesh pp, dp, cp, tp, op-level selective checkpointing. What changed: sequence parallelism is an option
    (``enable_sequence_parallel``, configs.py L160); expert parallelism borrows ranks from FSDP, CP and TP (efsdp =
    dp_shard × cp × tp ÷ ep, ``parallel_dims.py`` L258; the ParallelismConfig docstring L279-L286), and the routed
    experts are sharded over EP alone, not TP, whenever ep > 1 (``expert_param_placement_sparse``,
    models/common/moe_sharding.py L22-L38), over TP like the dense layers when ep = 1 (L41-L56)."""
    changes, notes = _torchtitan_runs(plan, sequence_parallel_option=True, experts_over_tp=plan.ep == 1)
    zero = changes.get("zero", plan.zero)
    shard = 1 if zero == 0 else plan.dp
    if plan.ep > 1 and (shard * plan.cp * plan.tp) % plan.ep:
        raise ValueError(
            f"ep={plan.ep}: torchtitan 0.3.0's expert parallelism borrows ranks from FSDP, CP and TP, so ep must "
            f"divide data_parallel_shard_degree × cp × tp = {shard} × {plan.cp} × {plan.tp}"
            + (" (ZeRO-0 runs as DDP, shard degree 1)" if zero == 0 else "")
            + " (torchtitan/distributed/parallel_dims.py L258 in the 0.3.0 wheel)"
        )
    if plan.ep > 1 and plan.etp != 1:
        changes["expert_tp"] = 1
        notes = (
            *notes,
            f"torchtitan 0.3.0 shards the routed experts over EP alone when ep > 1, not over TP {plan.etp} "
            "(models/common/moe_sharding.py L22-L38): priced with expert TP 1",
        )
    return changes, notes


def _torchtitan_030_entry(plan: Plan) -> tuple[str, str | None, str]:
    """torchtitan 0.3.0's config_registry entry for ``plan``'s model and precision: (module, config function or
    None when it has none, the entry's source), matched by family, layers, hidden size and vocabulary
    (``data/engines/torchtitan-0.3.0.json``). PlanError naming ``precision`` when the model has an entry but none in
    the plan's precision: the registry's converters set it, and the command line cannot (``model_spec`` is
    suppressed from tyro, trainer.py L75-L77)."""
    data = engine_file(TORCHTITAN_030)
    m = plan.model
    for r in data["registry"]:
        if (r["family"], r["num_layers"], r["hidden_size"], r["vocab_size"]) == (
            m.family,
            m.num_layers,
            m.hidden_size,
            m.vocab_size,
        ):
            config = r["precision"].get(plan.precision)
            if config is None:
                raise PlanError(
                    f"precision={plan.precision!r}: torchtitan 0.3.0's config_registry has no {plan.precision} entry "
                    f"for {m.name} (only {', '.join(r['precision'])}: {r['source']}); its converters are set in the "
                    "registry entry, not on the command line",
                    "precision",
                )
            return r["module"], config, r["source"]
    return data["modules"].get(m.family, m.family), None, ""


@dataclass(frozen=True)
class TorchtitanCommand:
    """torchtitan 0.3.0's launch: the ``torchrun`` argv up to ``-m torchtitan.train``, then its arguments (the
    registry entry, the overrides as (flag, value or None), the activation-checkpoint subcommand last), and notes."""

    torchrun: list
    args: list
    notes: tuple = ()

    def argv(self) -> list[str]:
        """The arguments after ``-m torchtitan.train``, as torchtitan's parser receives them."""
        out: list[str] = []
        for flag, value in self.args:
            out += [flag] if value is None else [flag, str(value)]
        return out

    def command(self) -> str:
        """The shell command, one argument per line."""
        lines = [" ".join([*self.torchrun, "-m", "torchtitan.train"])]
        lines += [f"    {f}" + (f" {shlex.quote(str(v))}" if v is not None else "") for f, v in self.args]
        return "\n".join([f"# note: {n}" for n in self.notes] + [" \\\n".join(lines)])


def torchtitan_030(plan: Plan, master: str = "$MASTER_ADDR:29500") -> TorchtitanCommand:
    """torchtitan 0.3.0's command for ``plan`` (``engine_plan(plan, "torchtitan-0.3.0")`` is the plan it runs):
    the config_registry entry of its model and precision, and every override the price reads, so that the
    entry's own parallelism, batch and checkpointing do not apply; ValueError (a PlanError naming its factor) for
    what the command line cannot say."""
    changes, notes_ = _torchtitan_030_runs(plan)
    notes = list(notes_)
    module, config, source = _torchtitan_030_entry(plan)
    if config is None:
        config = f"{plan.model.name.replace('-', '_').replace('.', '_')}_config"
        notes.append(
            f"torchtitan 0.3.0 has no config_registry entry for {plan.model.name} ({plan.model.family}): write "
            f"{config}() in a module my_registry on PYTHONPATH (ConfigManager imports --module as a module path, "
            f"torchtitan/config/manager.py L121-L140), a copy of a torchtitan/models/{module}/config_registry.py "
            "entry with this model's spec"
        )
        module = "my_registry"
    else:
        notes.append(
            f"--module {module} --config {config} ({source}): the entry's model, data, optimizer, compile and "
            "checkpoint settings apply; the overrides below set all that the price reads"
        )
    if mtp_layers(plan.model):
        notes.append(
            f"the price counts {plan.model.name}'s {mtp_layers(plan.model)} multi-token-prediction depth(s) on the "
            "last stage; torchtitan 0.3.0 builds them only when the entry's model_registry(...) is given "
            "num_mtp_layers, with MTPLoss: of the wheel's entries only deepseek_v3_debugmodel_mtp does "
            "(torchtitan/models/deepseek_v3/config_registry.py L73-L79)"
        )
    zero = changes.get("zero", plan.zero)
    replicate, shard = (plan.dp, 1) if zero == 0 else (1, plan.dp)
    nodes, per_node = launch_hosts(plan.gpus, plan.gpus_per_host, plan.gpus_per_node)
    run = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={per_node}"]
    if nodes > 1:
        run += ["--rdzv_id=$JOB_ID", "--rdzv_backend=c10d", f"--rdzv_endpoint={master}"]
    par: list[tuple[str, object]] = [
        ("data_parallel_replicate_degree", replicate),
        ("data_parallel_shard_degree", shard),
    ]
    if zero > 0 and shard * plan.cp > 1:
        par.append(("fsdp_reshard_after_forward", "never" if zero == 2 else "always"))
    par += [
        ("tensor_parallel_degree", plan.tp),
        ("pipeline_parallel_degree", plan.pp),
        ("pipeline_parallel_schedule", "Interleaved1F1B" if plan.virtual_stages > 1 else "1F1B"),
        ("pipeline_parallel_microbatch_size", plan.micro_batch_size),
        *_torchtitan_stages(plan).items(),
        ("context_parallel_degree", plan.cp),
        ("expert_parallel_degree", plan.ep),
    ]
    args: list[tuple[str, object]] = [("--module", module), ("--config", config)]
    args += [(f"--parallelism.{k}", v) for k, v in par]
    if plan.tp > 1 and not plan.sequence_parallel:
        args.append(("--parallelism.no_enable_sequence_parallel", None))
    args += [
        # rows of one forward-backward call per DP rank: the m micro-batches with PP, one without (module doc)
        ("--training.local_batch_size", plan.micro_batch_size * (plan.micro_batches if plan.pp > 1 else 1)),
        ("--training.global_batch_size", plan.global_batch),
        ("--training.seq_len", plan.seq),
    ]
    recompute = changes.get("recompute", plan.recompute)
    args.append((f"activation_checkpoint:{engine_file(TORCHTITAN_030)['activation_checkpoint'][recompute]}", None))
    return TorchtitanCommand(run, args, tuple(notes))


def engine_plan(plan: Plan, fmt: str, ledger: str | None = None) -> Plan:
    """The plan the engine of format ``fmt`` runs from ``plan``'s export, in ``ledger`` (default: the plan's own):
    ``plan`` itself for Megatron-LM, whose flags say all of it; for torchtitan the changes its settings force
    (ZeRO-1 → FSDP without resharding, its mesh order, sequence parallelism with TP, expert TP = TP), each noted in
    the export. ValueError (a ``PlanError``/``LedgerError`` naming its factor) when that plan cannot be built."""
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r} must be one of {', '.join(FORMATS)}")
    changes = (
        _torchtitan_runs(plan)[0]
        if fmt == "torchtitan"
        else _torchtitan_030_runs(plan)[0]
        if fmt == TORCHTITAN_030
        else {}
    )
    if ledger is not None and ledger != plan.accounting.name:  # the plan's own ledger keeps its choices (grad_dtype)
        changes["accounting"] = ledger
        if plan.accounting.grad_reduce_bf16 and fmt == "megatron":  # the command keeps --grad-reduce-in-bf16
            changes["grad_dtype"] = "bf16"  # priced so, or refused by a ledger without the choice
    return plan.replace(**changes) if changes else plan


def first_that_runs(ranked, fmt: str) -> tuple[int, object, Report]:
    """The fastest of a search's ranked candidates (anything with a ``.plan``, fastest first) that still fits when
    priced as the engine of export format ``fmt`` runs it (``engine_plan``, in the plan's own ledger), with its
    1-based rank and that report; a candidate the engine cannot run (ValueError) is passed over. ValueError when
    none fits. A search prices plans in its ledger's layout, which an engine's release can change (torchtitan
    0.3.0 shards the routed experts over EP alone): this is the plan to export for that release."""
    for rank, c in enumerate(ranked, 1):
        try:
            report = evaluate(engine_plan(c.plan, fmt))
        except ValueError:
            continue
        if report.fits:
            return rank, c, report
    raise ValueError(f"format={fmt!r}: none of the {len(ranked):,} ranked plans fits as that engine runs it")


def _toml_value(v: object) -> str:
    """A TOML value: a basic string, a list of them, or a number or boolean as Python prints it."""
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def toml(settings: dict, notes=()) -> str:
    """torchtitan settings as TOML text."""
    lines = [f"# note: {n}" for n in notes]
    for sec, opts in settings.items():
        lines.append(f"[{sec}]")
        for k, v in opts.items():
            lines.append(f"{k} = " + _toml_value(v))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def price_note(plan: Plan) -> str:
    """One line: the plan's memory per GPU in its own ledger, and whether it fits (``plan.accounting``): the lab page's
    total against the GPU's memory, or an engine's allocated peak with its verdict (``evaluation.memory_budget``)."""

    r = evaluate(plan)
    mem = r.memory_bytes
    if plan.accounting.name != "lab" and r.headroom is not None:
        sp = r.by_stage[r.peak_stage]
        where = f", stage {sp.index + 1} of {plan.pp}" if plan.pp > 1 else ""
        return (
            f"peak memory per GPU in the {plan.accounting.name} ledger: {fmt_gb(mem['peak_allocated'])} at the "
            f"{sp.peak.name}{where} ({fmt_gb(mem['model_states'])} model states + {fmt_gb(mem['activations'])} "
            f"saved activations = {fmt_gb(mem['total'])}); {r.headroom.verdict}"
        )
    verdict = "fits" if r.fits else "does NOT fit"
    return (
        f"memory per GPU in the {plan.accounting.name} ledger: {fmt_gb(mem['total'])} "
        f"({fmt_gb(mem['model_states'])} model states + {fmt_gb(mem['activations'])} "
        f"activations), {verdict} in {fmt_gb(plan.gpu_memory_bytes, 0)}"
    )


def export_text(plan: Plan, fmt: str, ledger: str | None = None) -> str:
    """The export of ``plan`` in format ``megatron``, ``torchtitan`` or ``deepspeed`` (ValueError for another), headed
    by the price
    of what the engine runs (``engine_plan``) in ``ledger`` (default: the plan's own; the command line prices a
    Megatron-LM export in the ``megatron`` ledger and a torchtitan one in ``fsdp2``, ``ENGINE_LEDGER``)."""
    launch_hosts(plan.gpus, plan.gpus_per_host, plan.gpus_per_node)  # equal processes on every host
    priced = engine_plan(plan, fmt, ledger)
    if fmt == "megatron":
        return f"# {price_note(priced)}\n" + megatron(plan).command()
    if fmt == "deepspeed":  # JSON with '#' lines above it: DeepSpeed reads its config with hjson (module docstring)
        config, notes = deepspeed_config(plan)
        return "".join(f"# {line}\n" for line in (price_note(priced), *(f"note: {n}" for n in notes))) + (
            json.dumps(config, indent=2) + "\n"
        )
    if fmt == TORCHTITAN_030:
        return f"# {price_note(priced)}\n" + torchtitan_030(plan).command()
    return f"# {price_note(priced)}\n# {TORCHTITAN_VERSION_NOTE}\n" + toml(*torchtitan(plan))
