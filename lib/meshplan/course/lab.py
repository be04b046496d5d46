"""The lab page's plans for the anchor (Qwen3.8-27B), as data the book and the tests evaluate.

Every row is a set of ``Plan.create`` arguments; the lab page's numbers come from ``evaluate`` on them
(s = 4,096, b = 1, m = 8 unless stated, 80 GB GPUs, 8 per node, GB = 10⁹ B).

* ``LAB_8_GPUS``, ``LAB_64_GPUS``: the lab page's two tables, in its convention (each row at m = 8 micro-batches of
  one sequence, so their global batches differ: compare them per token, ``bytes_per_token``).
* ``DESIGN_8_GPUS``, ``DESIGN_64_GPUS``: chapter 8's plan-design exercises (GPUs, sequence length, global batch);
  ``DESIGN_PIPELINE``: chapter 5's, a pipeline on four machines in Megatron-LM's ledger.
* ``LEDGER_COMPARISON_8``: 8-GPU plans at one global batch, for the lab ledger against the engines'.
* ``LONG_CONTEXT_64``: 64-GPU plans at s = 131,072 and one token budget per step.

    >>> [row["label"] for row in LAB_8_GPUS][:2]
    ['DP 8 · ZeRO-3 · full recompute', 'DP 8 · ZeRO-3 · selective recompute']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from meshplan.core.units import GB, MiB, fmt_gb, fmt_int, fmt_mib, fmt_pct
from meshplan.course.design import plan_checklist
from meshplan.course.grid import nodes_spanned
from meshplan.course.published import deepseek_v3_plan
from meshplan.plan import Plan, Report, evaluate
from meshplan.plan.reporting import link_name
from meshplan.spec.model import load_model
from meshplan.widgets import Exercise

ANCHOR = "qwen3.8-27b"

LAB_8_GPUS: tuple[dict[str, Any], ...] = (
    {"label": "DP 8 · ZeRO-3 · full recompute", "gpus": 8, "dp": 8, "zero": 3, "recompute": "full"},
    {"label": "DP 8 · ZeRO-3 · selective recompute", "gpus": 8, "dp": 8, "zero": 3, "recompute": "selective"},
    {"label": "TP 8 · selective recompute", "gpus": 8, "tp": 8, "recompute": "selective"},
    {"label": "TP 2 × PP 4 · full recompute", "gpus": 8, "tp": 2, "pp": 4, "recompute": "full"},
)

LAB_64_GPUS: tuple[dict[str, Any], ...] = (
    {"label": "TP 8 × PP 8 · full recompute", "gpus": 64, "tp": 8, "pp": 8, "recompute": "full"},
    {
        "label": "TP 8 × PP 8 · full recompute · m = 32",
        "gpus": 64,
        "tp": 8,
        "pp": 8,
        "recompute": "full",
        "micro_batches": 32,
    },
    {"label": "TP 8 × PP 2 × DP 4 · ZeRO-1", "gpus": 64, "tp": 8, "pp": 2, "dp": 4, "zero": 1, "recompute": "full"},
)


DESIGN_8_GPUS: dict[str, Any] = {"gpus": 8, "seq": 4096, "global_batch": 64}  # 262,144 tokens per step
DESIGN_64_GPUS: dict[str, Any] = {"gpus": 64, "seq": 4096, "global_batch": 512}  # 2,097,152 tokens per step
DESIGN_PIPELINE: dict[str, Any] = {"gpus": 32, "seq": 4096, "global_batch": 64}  # four machines, 262,144 tokens

# One machine at the 8-GPU exercise's global batch (64 sequences): the lab page's DP 8 plan, its TP 8 plan with the
# micro-batches that batch needs, and TP 4 x DP 2, the widest TP the engines accept for the anchor's 4 KV heads.
LEDGER_COMPARISON_8: tuple[dict[str, Any], ...] = (
    {"label": "DP 8 · ZeRO-3 · full recompute", "gpus": 8, "zero": 3, "recompute": "full", "global_batch": 64},
    {"label": "TP 8 · selective recompute", "gpus": 8, "tp": 8, "recompute": "selective", "global_batch": 64},
    {
        "label": "TP 4 × DP 2 · ZeRO-3 · full recompute",
        "gpus": 8,
        "tp": 4,
        "zero": 3,
        "recompute": "full",
        "global_batch": 64,
    },
)

LONG_SEQ = 131_072
# Long context on 64 GPUs at the 64-GPU exercise's token budget (2,097,152 tokens: 16 sequences of 131,072).
LONG_CONTEXT_64: tuple[dict[str, Any], ...] = (
    {
        "label": "TP 8 × CP 8 · ZeRO-1 · selective recompute",
        "gpus": 64,
        "tp": 8,
        "cp": 8,
        "seq": LONG_SEQ,
        "zero": 1,
        "recompute": "selective",
        "global_batch": 16,
    },
    {
        "label": "TP 8 × PP 8 · selective recompute",
        "gpus": 64,
        "tp": 8,
        "pp": 8,
        "seq": LONG_SEQ,
        "recompute": "selective",
        "global_batch": 16,
    },
    {
        "label": "TP 8 × PP 8 · full recompute",
        "gpus": 64,
        "tp": 8,
        "pp": 8,
        "seq": LONG_SEQ,
        "recompute": "full",
        "global_batch": 16,
    },
    {
        "label": "TP 4 × CP 16 · ZeRO-2 · selective recompute",
        "gpus": 64,
        "tp": 4,
        "cp": 16,
        "seq": LONG_SEQ,
        "zero": 2,
        "recompute": "selective",
        "global_batch": 16,
    },
    {
        "label": "TP 4 × CP 16 · ZeRO-3 · selective recompute",
        "gpus": 64,
        "tp": 4,
        "cp": 16,
        "seq": LONG_SEQ,
        "zero": 3,
        "recompute": "selective",
        "global_batch": 16,
    },
)


def bytes_per_token(report: Report) -> float:
    """Bytes each GPU sends per token of the step (every dimension's traffic ÷ the step's tokens, dp × b × m × s):
    the measure that compares plans whose global batches differ.

        >>> round(bytes_per_token(evaluate(lab_plan(LAB_8_GPUS[0]))) / 1e6, 2)   # 145.9 GB ÷ 262,144 tokens
        0.56
    """
    return sum(report.comm_bytes_per_step.values()) / report.plan.tokens_per_step


def lab_plan(row: Mapping[str, Any], model: str = ANCHOR, **overrides: Any) -> Plan:
    """The ``Plan`` of one lab row (``overrides``, e.g. ``accounting="fsdp2"``, go to ``Plan.create``)."""
    kw = {k: v for k, v in row.items() if k != "label"}
    return Plan.create(model, **{**kw, **overrides})


def lab_reports(rows: Iterable[Mapping[str, Any]] = LAB_8_GPUS, model: str = ANCHOR) -> list[tuple[str, Report]]:
    """(label, report) for each row."""
    return [(row["label"], evaluate(lab_plan(row, model))) for row in rows]


def design_checklist_8(results: Mapping[str, Any] | None = None):
    """The chapter's first plan-design checklist (``design.plan_checklist``): the anchor on one machine
    (``DESIGN_8_GPUS``), with the ledger to choose (the lab page's, FSDP2's, Megatron-LM's); it starts from one GPU's
    plan copied eight times (DP 8, no ZeRO, no recomputation). ``results``: the searches, by ledger, if already run."""

    return plan_checklist(
        "ch8-design-8",
        ANCHOR,
        **DESIGN_8_GPUS,
        ledgers=("lab", "fsdp2", "megatron"),
        results=results,
        defaults={"tp": 1, "pp": 1, "zero": 0, "recompute": "none", "m": 8},
    )


def design_checklist_64(results: Mapping[str, Any] | None = None):
    """The chapter's second plan-design checklist: the anchor on eight machines (``DESIGN_64_GPUS``) in the lab page's
    ledger; TP up to 16 (one node is 8 GPUs), no CP (4,096 tokens), m from 8 to the global batch."""

    return plan_checklist(
        "ch8-design-64",
        ANCHOR,
        **DESIGN_64_GPUS,
        tp=(1, 2, 4, 8, 16),
        cp=(1,),
        pp=(1, 2, 4, 8, 16),
        micro_batches=(8, 16, 32, 64, 128, 256, 512),
        results=results,
        defaults={"tp": 4, "pp": 2, "zero": 1, "recompute": "selective", "m": 16},
    )


def pipeline_design_checklist(results: Mapping[str, Any] | None = None):
    """Chapter 5's plan-design checklist: the anchor on four machines (``DESIGN_PIPELINE``) in Megatron-LM's ledger
    (the engine whose flags the TP × PP × DP tuning article turns), no CP; ZeRO 0 or 1 (Megatron's distributed
    optimizer is the usual companion of a pipeline; its ZeRO-2/3 path, Megatron-FSDP, is not verified with PP:
    ``data/engines/conventions.md``, ``refuses_zero2_3_with_pp``); m from 4 to the global batch. It starts from
    TP 4 × PP 4 with full recomputation and m = 8, which fails the bubble, the global batch and the search."""

    return plan_checklist(
        "ch5-design",
        ANCHOR,
        **DESIGN_PIPELINE,
        tp=(1, 2, 4, 8),
        cp=(1,),
        pp=(1, 2, 4, 8, 16),
        zero=(0, 1),
        micro_batch_size=(1,),
        micro_batches=(4, 8, 16, 32, 64),
        ledgers=("megatron",),
        results=results,
        defaults={"tp": 4, "pp": 4, "zero": 0, "recompute": "full", "m": 8},
    )


# ---------------------------------------------------------------- the chapter's predict-then-check exercises
SMALL_MODEL = "small-3.7m"  # the course's small model (3,688,704 parameters)


def heaviest_64(tp: int, pp: int, m: int) -> Report:
    """The anchor on ``DESIGN_64_GPUS``'s 64 GPUs with TP ``tp``, PP ``pp`` (DP the rest), ZeRO-1, full recomputation
    and ``m`` micro-batches (the lab page's 64-GPU plans)."""
    return evaluate(Plan.create(ANCHOR, gpus=DESIGN_64_GPUS["gpus"], tp=tp, pp=pp, zero=1, recompute="full",
                                micro_batches=m))  # fmt: skip


def heaviest_exercise():
    """Decision 2's prediction: the bytes per GPU per step of the heaviest dimension of ``heaviest_64`` (GB), with a
    worked answer naming the dimension, its link, the bubble and the memory. Its default (TP 4, PP 2, m = 32) is none
    of the lab page's printed rows."""

    def answer(tp: int, pp: int, m: int) -> float:
        r = heaviest_64(tp, pp, m)
        return r.comm_bytes_per_step[r.heaviest_dim] / GB if r.heaviest_dim else 0.0

    def explain(tp: int, pp: int, m: int) -> str:
        r = heaviest_64(tp, pp, m)
        d = r.heaviest_dim
        if d is None:
            return f"{r.plan.dims.label()}: nothing is sent."
        bubble = f"the bubble (p−1)/m is {fmt_pct(r.bubble)}" if pp > 1 else "no pipeline, no bubble"
        return (
            f"{r.plan.dims.label()}: the heaviest dimension is {d.upper()}, {fmt_gb(r.comm_bytes_per_step[d])} per "
            f"GPU per step over {link_name(r.link[d])}; {bubble}; {fmt_gb(r.memory_bytes['total'])} per GPU."
        )

    return Exercise(
        "ch8-plan64",
        "Bytes per GPU per step of the heaviest dimension, in GB?",
        answer,
        sliders={"tp": [2, 4, 8], "pp": [1, 2, 8], "m": [8, 32]},
        defaults={"tp": 4, "pp": 2, "m": 32},
        unit="GB",
        digits=1,
        explain=explain,
        labels={"tp": "TP", "pp": "PP", "m": "micro-batches m"},
    )


def small_model_exercise():
    """Decision 3: the small model's model states per GPU (MiB) on 1 or 8 GPUs, with or without ZeRO-3."""

    small = load_model(SMALL_MODEL)

    def answer(gpus: int, zero_stage: int) -> float:
        return evaluate(Plan.create(small, gpus=gpus, zero=zero_stage)).memory_bytes["model_states"] / MiB

    def explain(gpus: int, zero_stage: int) -> str:
        p = Plan.create(small, gpus=gpus, zero=zero_stage)
        s = evaluate(p).memory_bytes["model_states"]
        per = f" ÷ {gpus} (ZeRO-3)" if zero_stage == 3 and gpus > 1 else ""
        return (
            f"{p.bytes_per_param.total} B × {fmt_int(small.params.total)} parameters{per} = {fmt_mib(s)}, "
            f"{fmt_pct(s / p.gpu_memory_bytes, 3)} of one GPU: no parallelism is needed for memory."
        )

    return Exercise(
        "ch8-small",
        "Model states per GPU of the small model, in MiB?",
        answer,
        sliders={"gpus": [1, 8], "zero_stage": [0, 3]},
        unit="MiB",
        digits=1,
        explain=explain,
        labels={"gpus": "GPUs", "zero_stage": "ZeRO stage"},
    )


def ep_span_exercise():
    """Where DeepSeek-V3's experts live: the nodes spanned by GPU 0's EP group under two axis orders and two node
    sizes (``published.deepseek_v3_plan``)."""

    def span(order: str, gpus_per_node: int) -> int:
        return nodes_spanned(deepseek_v3_plan(order, gpus_per_node=gpus_per_node).mesh, 0, "ep")

    def explain(order: str, gpus_per_node: int) -> str:
        g = deepseek_v3_plan(order, gpus_per_node=gpus_per_node).mesh.group(0, "ep")
        return (
            f"Order {order}: the EP group of GPU 0 is {g[0]}, {g[1]}, …, {g[-1]} (stride {g[1] - g[0]}), "
            f"{span(order, gpus_per_node)} nodes of {gpus_per_node} GPUs."
        )

    return Exercise(
        "ch8-ep-span",
        f"Nodes spanned by the {deepseek_v3_plan().ep}-way EP group of GPU 0?",
        span,
        sliders={"order": ["tp-cp-pp-dp", "tp-cp-ep-dp-pp"], "gpus_per_node": [8, 4]},
        unit="nodes",
        digits=0,
        explain=explain,
        labels={"order": "axis order", "gpus_per_node": "GPUs per node"},
    )
