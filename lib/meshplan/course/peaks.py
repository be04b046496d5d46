"""Published measured peaks against the engine ledgers' peak (issue 24): ``data/published_peaks.json``.

Each row of the data file is a real run with its measured peak memory (Megatron-LM's CI golden values: the largest
``torch.cuda.memory_stats()['allocated_bytes.all.peak']`` on the last rank; torchtitan's benchmark tables: the
maximum reserved memory over the GPUs) or its published outcome (ran out of memory, or ran), and its full
configuration. ``peak_rows`` prices each in its engine's ledger: the model (a shipped model, or the row's Megatron
GPT config as the nearest family the ledger counts), its mesh, ZeRO stage, recompute, sequence and batch, on its GPU,
and compares the ledger's peak of the kind the source measured (allocated, or reserved) with the measurement.

A row is priced only when the ledger has what the run used. It is *not priced*, and says why, when the run used
something the ledger does not model yet: Megatron's ``--recompute-modules``, torchtitan's op-level selective
recompute of MoE or MLA layers (priced for dense attention layers, ``recompute="op"``), a Megatron GPT config no
counted family has (grouped-query attention with LayerNorm, GELU and learned positions), or an MoE/MLA layout given
only as Megatron flags. What the ledger prices but the run did
differently is listed in ``differs`` (Transformer Engine's fused kernels save less than ``transformers``' modules, FP8
keeps other copies, ``torch.compile`` fuses and frees early): those rows are priced, and their error is what the
difference costs.

    >>> rows = peak_rows()
    >>> len(rows) == len(published_rows()), all(r.id for r in rows)
    (True, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from meshplan.core.resources import read_json
from meshplan.plan import Plan, evaluate
from meshplan.spec.accounting import get_accounting
from meshplan.spec.hardware import load_hardware
from meshplan.spec.model import load_model, model_from_config

__all__ = ["PeakRow", "peak_rows", "plan_for", "published_rows"]


@cache
def published_rows() -> tuple[Mapping[str, Any], ...]:
    """The rows of ``data/published_peaks.json``."""
    return tuple(read_json("published_peaks.json")["rows"])


@dataclass(frozen=True)
class PeakRow:
    """One published run priced (or not) by its engine's ledger. Bytes; ``error`` = predicted ÷ measured − 1."""

    id: str
    engine: str
    outcome: str
    kind: str | None
    measured: float | None
    predicted: float | None
    fits: bool | None
    verdict: str
    not_priced: str
    differs: tuple[str, ...]

    @property
    def error(self) -> float | None:
        if self.measured is None or self.predicted is None:
            return None
        return self.predicted / self.measured - 1

    @property
    def outcome_right(self) -> bool | None:
        """Whether the ledger's verdict agrees with what happened (ran, or ran out of memory)."""
        if self.fits is None:
            return None
        return self.fits == (self.outcome != "oom")


def _gpt_config(c: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Megatron GPT config as a ``transformers`` config the ledger counts, or None."""
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
    vocab = c.get("padded_vocab_size") or c["vocab_size"]
    learned = c.get("position_embedding") == "learned_absolute"
    if c.get("normalization") == "LayerNorm" and c.get("activation") == "gelu" and learned:
        if kv != heads:
            return None
        return {
            "model_type": "gpt2", "n_embd": c["hidden_size"], "n_layer": c["num_layers"], "n_head": heads,
            "n_inner": c["ffn_hidden_size"], "vocab_size": vocab, "n_positions": c.get("max_position_embeddings", 4096),
            "tie_word_embeddings": bool(c.get("tied_embeddings", True)),
        }  # fmt: skip
    if c.get("activation") == "swiglu" and c.get("normalization") == "RMSNorm" and not learned:
        return {
            "model_type": "llama", "hidden_size": c["hidden_size"], "num_hidden_layers": c["num_layers"],
            "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": c["ffn_hidden_size"],
            "vocab_size": vocab, "max_position_embeddings": c.get("max_position_embeddings", 4096),
            "tie_word_embeddings": bool(c.get("tied_embeddings", False)),
        }  # fmt: skip
    return None


def _why_not(row: Mapping[str, Any]) -> str:
    rc = row["recompute"]
    c = row["model"].get("config") or {}
    name = row["model"].get("file")
    if name:
        try:
            load_model(name)
        except ValueError:
            return f"its model, {name}, is not a config the library ships"
    if rc["granularity"] == "selective" and rc.get("modules"):
        return "Megatron's --recompute-modules are not in the ledger yet"
    if c.get("num_experts") or "moe" in row["id"] or "mla" in row["id"]:
        return "the run's MoE / MLA layout is given as Megatron flags, not as a config the ledger counts"
    if c and _gpt_config(c) is None:
        heads, kv = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
        parts = [c.get("normalization"), c.get("activation"), f"{c.get('position_embedding')} positions"]
        gqa = f", {kv} KV heads for {heads}" if kv != heads else ""
        return f"a Megatron GPT config ({', '.join(str(x) for x in parts)}{gqa}) that no counted family has"
    return ""


def _differs(row: Mapping[str, Any]) -> tuple[str, ...]:
    out = []
    if (row.get("transformer_impl") or "") == "transformer_engine":
        out.append("Transformer Engine's fused kernels (the ledger counts transformers' modules)")
    if (row.get("precision") or {}).get("fp8"):
        out.append("FP8 (the ledger counts bf16)")
    if row.get("torch_compile") is True:
        out.append("torch.compile")
    if row["engine"]["name"] == "fsdp2" and row["source"].get("kind") == "benchmark_table":
        # torchtitan at 9dec370: torchtitan/optimizer.py#L132-L138 (foreach unless --optimizer.fused) and train.py#L266
        # (optimizers.zero_grad(), torch's set_to_none=True); the ledger prices torchtitan 0.3.0's fused AdamW and
        # resident gradients
        out.append("torchtitan of December 2024 (foreach AdamW, gradients freed by zero_grad)")
    return tuple(out)


def plan_for(row: Mapping[str, Any]) -> Plan:
    """The plan a published row describes, in its engine's ledger and stage layout, on its GPU (ValueError when the
    library refuses it)."""
    m = row["model"]
    spec = load_model(m["file"]) if m.get("file") else model_from_config(_gpt_config(m["config"]) or {}, row["id"])
    mesh = row["mesh"]
    engine = row["engine"]["name"]
    dp_kind = (row.get("data_parallel") or {}).get("kind")
    zero = 3 if engine == "fsdp2" else (1 if dp_kind == "distributed_optimizer" else 0)
    preset = (row.get("hardware") or {}).get("preset")
    hw = load_hardware(preset or "h100-sxm-80gb")
    memory = None if preset else float(row["hardware"]["memory_gb"]) * 1e9
    rc = row["recompute"]["granularity"]
    # torchtitan's selective is op-level (recompute="op"); Megatron's is the attention core ("selective")
    recompute = "op" if (rc == "selective" and row["recompute"].get("method") == "op") else rc
    assumed = row.get("defaults_assumed") or {}  # torchtitan's defaults where the benchmark did not say
    b = int(row.get("micro_batch_size") or assumed.get("micro_batch_size") or 1)
    v = mesh.get("virtual_stages") or assumed.get("virtual_stages") or 1
    if "interleaved" in str(row.get("pipeline_schedule") or "").lower() and v == 1:
        v = 2
    args = row.get("engine_args") or {}
    backend, dropout = "flash", 0.0
    if engine == "megatron":  # Megatron's own defaults where the run gives no flag: dropout 0.1, TE's attention
        unfused = row.get("transformer_impl") == "local" or args.get("--attention-backend") == "unfused"
        backend = "unfused" if unfused else "flash"
        dropout = max(float(args.get("--attention-dropout", 0.1)), float(args.get("--hidden-dropout", 0.1)))
    return Plan.create(
        spec, gpus=row["gpus"], tp=mesh["tp"], cp=mesh["cp"] or 1, pp=mesh["pp"], dp=mesh["dp"], ep=mesh["ep"] or 1,
        zero=zero, recompute=recompute, seq=row["seq"],
        micro_batch_size=b, global_batch=row["global_batch"], accounting=engine,
        hardware=hw, gpu_memory_bytes=memory, virtual_stages=v,
        sp=bool(row.get("sequence_parallel")) if mesh["tp"] > 1 else False, uneven_stages=True,
        stage_balance=get_accounting(engine).stage_balance, attention_backend=backend, dropout=dropout,
    )  # fmt: skip


def measured_on_last_rank(row: Mapping[str, Any]) -> bool:
    """Whether the row's figure is the last rank's (Megatron-LM's golden values: the TensorBoard writer lives on
    rank world_size − 1, the last pipeline stage in Megatron's default order), not the maximum over the GPUs."""
    return str((row.get("measured") or {}).get("rank") or "").startswith("world_size - 1")


def peak_rows() -> list[PeakRow]:
    """Every published row, priced in its engine's ledger where the ledger has what the run used."""
    out = []
    for row in published_rows():
        measured = row.get("measured") or {}
        value = measured.get("value_bytes")
        kind = measured.get("kind")
        engine = row["engine"]["name"]
        why = _why_not(row)
        predicted = fits = None
        verdict = ""
        if not why:
            try:
                r = evaluate(plan_for(row))
            except ValueError as exc:
                why = f"the library refuses the plan: {exc}"
            else:
                mem = r.memory_bytes
                predicted = mem["peak_reserved"] if kind == "reserved" else mem["peak_allocated"]
                if kind == "allocated" and measured_on_last_rank(row):
                    predicted = r.by_stage[-1].peak.total  # the rank measured: the last stage's peak
                fits = r.fits
                verdict = r.headroom.verdict if r.headroom else ""
        out.append(
            PeakRow(row["id"], engine, row["outcome"], kind, value, predicted, fits, verdict, why, _differs(row))
        )
    return out
