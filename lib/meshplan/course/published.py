"""Published figures the course quotes, each with its source, read from ``data/published.json``.

>>> round(gpu_years(value("deepseek_v3_pretraining_gpu_hours")))
304
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from meshplan.core.collectives import all_to_all_bytes
from meshplan.core.resources import DATA_DIR
from meshplan.core.units import HOURS_PER_YEAR
from meshplan.course.plotting import FIG_WIDTH, FONT
from meshplan.parallel.ep import ACT_BYTES, node_limited_routing
from meshplan.plan import Plan
from meshplan.plan.reporting import plan_label
from meshplan.steptime.fitting import run, run_plan


@cache
def _table() -> dict:
    return json.loads((DATA_DIR / "published.json").read_text())


def value(key: str):
    """The published value for ``key`` (ValueError for an unknown key)."""
    try:
        return _table()[key]["value"]
    except KeyError:
        raise ValueError(f"unknown published figure {key!r}; known: {', '.join(sorted(_table()))}") from None


def source(key: str) -> str:
    """Where the figure comes from."""
    value(key)
    return _table()[key]["source"]


def gpu_years(gpu_hours: float) -> float:
    """GPU-hours as years on one GPU (8,766 h per year)."""
    return gpu_hours / HOURS_PER_YEAR


def tokens_per_step(seq: int, batch_per_dp: int, dp: int) -> int:
    """Tokens per optimizer step: sequence length × sequences per DP rank × DP ranks.

    >>> tokens_per_step(131072, 16, 8)
    16777216
    """
    return seq * batch_per_dp * dp


# ---------------------------------------------------------------- the published plans, as plans
LLAMA3_405B = "llama-3.1-405b"
LLAMA3_HARDWARE = "h100-sxm-80gb"  # Llama 3 §3.3.1: H100 80 GB, 8 per server (NVLink), RoCE between servers


def llama3_rows() -> list[dict]:
    """Llama 3 405B's three pre-training configurations (Table 4): GPUs, TP, CP, PP, DP, sequence length, batch per
    DP rank, TFLOPs per GPU and BF16 MFU."""
    return list(value("llama3_table4"))


def llama3_global_batch(row: dict) -> int:
    """Sequences per step of a Table 4 row: batch per DP rank × DP (tokens per step ÷ sequence length).

    >>> [llama3_global_batch(r) for r in llama3_rows()]
    [2048, 2048, 128]
    """
    return tokens_per_step(row["seq"], row["batch_per_dp"], row["dp"]) // row["seq"]


def llama3_plan(row: dict, **overrides):
    """A Table 4 row of Llama 3 405B as a ``Plan``, in the lab page's convention unless ``overrides`` say otherwise:
    the row's TP, CP, PP (DP is what is left), its sequence length, one sequence per micro-batch and m = the batch per
    DP rank; 126 layers on 16 stages with one layer fewer on the first and the last ("we reduce one Transformer layer
    each from the first and the last stages", §3.3.2: ``uneven_stages``); ZeRO-2 (its FSDP "shards optimizer states
    and gradients" and does not reshard the weights after the forward, §3.3.2); selective recomputation (it trained at
    8K "without activation checkpointing", with attention kernels that store no s × s scores, which is what the lab
    ledger's selective mode leaves out); on H100 80 GB (``LLAMA3_HARDWARE``).

        >>> p = llama3_plan(llama3_rows()[1])
        >>> p.dims.label(), p.stage_layers[:2], p.micro_batches, p.global_batch
        ('TP 8 × PP 16 × DP 128', (7, 8), 16, 2048)
    """

    kw = {
        "gpus": row["gpus"],
        "tp": row["tp"],
        "cp": row["cp"],
        "pp": row["pp"],
        "seq": row["seq"],
        "micro_batches": row["batch_per_dp"],
        "zero": 2,
        "recompute": "selective",
        "uneven_stages": True,
        "hardware": LLAMA3_HARDWARE,
    }
    if "global_batch" in overrides or "micro_batch_size" in overrides:
        kw.pop("micro_batches")
        overrides.setdefault("global_batch", llama3_global_batch(row))
    kw.update(overrides)
    return Plan.create(LLAMA3_405B, **kw)


DEEPSEEK_V3_RUN = "deepseek-v3-pretraining"  # its entry in data/published_runs.json


def deepseek_v3_plan(order: str = "tp-cp-ep-dp-pp", **overrides):
    """DeepSeek-V3's published plan (§3.2: 2,048 H800 GPUs, PP 16, EP 64, ZeRO-1 DP, no TP) as the step-time
    validation plans the run (``calibration.run_plan``: s = 4,096, 15,360 sequences per step, one per micro-batch,
    selective recomputation, 61 layers spread ends-lighter over 16 stages with the embedding on the first and the head
    on the last), in the axis ``order`` (Megatron-LM's by default, in which a 64-way EP group is 8 whole nodes, as the
    report says); ``overrides`` as ``Plan.replace``.

        >>> p = deepseek_v3_plan()
        >>> p.dims.label(), p.micro_batches, p.stage_layers[:3]
        ('PP 16 × DP 128 (EP 64)', 120, (3, 3, 4))
    """

    return run_plan(run(DEEPSEEK_V3_RUN)).replace(order=order, **overrides)


def megatron_guide_plan(recompute: str = "none", zero: int = 0, **overrides):
    """The Megatron-LM guide's Llama 3 70B example on 64 GPUs (``megatron_guide_llama3_70b_64_gpus``: TP 4, PP 4,
    CP 2, s = 8,192, micro-batch 1, global batch 512, sequence parallel) in Megatron-LM's axis order, with the
    recomputation and ZeRO stage given (the guide's command sets neither: no recomputation, no distributed
    optimizer); ``overrides`` go to ``Plan.create``.

        >>> p = megatron_guide_plan()
        >>> p.dp, p.micro_batches, p.order
        (2, 256, 'tp-cp-ep-dp-pp')
    """

    ex = value("megatron_guide_llama3_70b_64_gpus")
    kw = {
        "gpus": ex["gpus"],
        "tp": ex["tp"],
        "pp": ex["pp"],
        "cp": ex["cp"],
        "seq": ex["seq"],
        "micro_batch_size": ex["micro_batch_size"],
        "global_batch": ex["global_batch_size"],
        "sp": ex["sequence_parallel"],
        "gpus_per_node": ex["gpus_per_node"],
        "order": "tp-cp-ep-dp-pp",
        "recompute": recompute,
        "zero": zero,
    }
    kw.update(overrides)
    return Plan.create(ex["model"], **kw)


@dataclass(frozen=True)
class AllToAll:
    """Bytes one token sends across nodes per MoE layer and forward pass (dispatch + combine), as a ledger charges
    them and as DeepSeek-V3 sends them.

    Attributes:
        ledger_bytes: the library's ledgers (``ep``): k copies of the hidden state, bf16 both ways, (e−1)/e of
            them leaving the GPU: 2 × (e−1)/e × k × h × 2 B.
        deepseek_bytes: DeepSeek-V3: at most M nodes per token (node-limited routing, §3.2.2; one copy per node,
            fanned out over NVLink there: ``ep.node_limited_routing``), dispatched in FP8 and combined in BF16
            (§3.3.3): copies × h × (1 + 2) B.
    """

    ledger_bytes: float
    deepseek_bytes: float

    @property
    def ratio(self) -> float:
        """How many times the ledger's bytes DeepSeek-V3's are."""
        return self.ledger_bytes / self.deepseek_bytes

    def at_deepseek_bytes(self, seconds: float) -> float:
        """``seconds`` of the ledger's all-to-all scaled to DeepSeek-V3's bytes (same links, same latency share)."""
        return seconds / self.ratio


def deepseek_v3_all_to_all(
    model, ep: int, gpus_per_node: int, nvlink_bytes_per_s: float, infiniband_bytes_per_s: float
) -> AllToAll:
    """The ledger's and DeepSeek-V3's all-to-all bytes per token and MoE layer (``AllToAll``).

    >>> from meshplan import load_model
    >>> a = deepseek_v3_all_to_all(load_model("deepseek-v3"), 64, 8, 160e9, 50e9)
    >>> round(a.ledger_bytes / 7168, 2), round(a.deepseek_bytes / 7168, 2), round(a.ratio, 3)
    (31.5, 12.0, 2.625)
    """

    k, h = model.experts_per_token, model.hidden_size
    ledger = 2 * all_to_all_bytes(ep, k * h * ACT_BYTES)
    routing = node_limited_routing(
        model.num_experts,
        k,
        ep,
        gpus_per_node,
        value("deepseek_v3_max_nodes_per_token"),
        nvlink_bytes_per_s,
        infiniband_bytes_per_s,
    )
    per_copy = h * (value("deepseek_v3_dispatch_bytes_per_element") + value("deepseek_v3_combine_bytes_per_element"))
    return AllToAll(ledger, routing.ib_copies_limited * per_copy)


# ---------------------------------------------------------------- the step-time model against published runs
def validation_rows(rows) -> list[dict]:
    """One display row per run of ``calibration.validate()``: group, plan, published and predicted step time,
    error, and MFU where the run prints one (GB-free, strings for a table)."""

    out = []
    for r in rows:
        pub_mfu, pred_mfu = r.mfu
        out.append(
            {
                "run": r.id,
                "set": r.group,
                "GPUs": f"{r.plan.gpus:,}",
                "plan": plan_label(r.plan),
                "published step (s)": f"{r.published.step_s:,.2f}",
                "predicted step (s)": f"{r.predicted_s:,.2f}",
                "error": f"{100 * r.error:+.1f} %",
                "MFU published / predicted": (
                    ("" if pub_mfu is None else f"{100 * pub_mfu:.0f} % / ") + f"{100 * pred_mfu:.1f} %"
                ),
            }
        )
    return out


def validation_figure(rows):
    """Predicted against published step time (log-log) for ``calibration.validate()`` rows, one marker per set, with
    the ±15 % and ±35 % bands of the validation's targets; readable at the book's width (``plotting.FONT``)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(FIG_WIDTH * 0.75, FIG_WIDTH * 0.68), dpi=100)
    lo = min(min(r.predicted_s, r.published.step_s) for r in rows) / 1.5
    hi = max(max(r.predicted_s, r.published.step_s) for r in rows) * 1.5
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=1)
    for f, style in ((0.15, "--"), (0.35, ":")):
        ax.plot(xs, [x * (1 + f) for x in xs], color="grey", ls=style, lw=0.9, label=f"±{round(100 * f)} %")
        ax.plot(xs, [x * (1 - f) for x in xs], color="grey", ls=style, lw=0.9)
    markers = iter("osD^vP*X")
    for group in dict.fromkeys(r.group for r in rows):
        sel = [r for r in rows if r.group == group]
        hollow: dict[str, Any] = {"facecolors": "none", "edgecolors": "black"} if group.startswith("not") else {}
        ax.scatter(
            [r.published.step_s for r in sel],
            [r.predicted_s for r in sel],
            marker=next(markers),
            s=36,
            label=group,
            **hollow,
        )
    ax.set(xscale="log", yscale="log", xlim=xs, ylim=xs)
    ax.set_xlabel("published step time (s)", fontsize=FONT["label"])
    ax.set_ylabel("predicted step time (s)", fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    ax.legend(fontsize=FONT["legend"], loc="upper left", frameon=False)
    fig.tight_layout()
    return fig
