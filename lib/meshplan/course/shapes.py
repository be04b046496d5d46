"""Where the search puts the meshes that published runs used (issue 26): each run's shape ranked among the shapes
the search keeps for the same model, GPUs, sequence, global batch, machine, ledger and precision, and, when it is not
in the top ``TOP``, the step-time terms that put it lower.

A *shape* is (TP, CP, PP, DP, EP); the search ranks every shape by its fastest kept plan
(``SearchResult.shape_rank_of``), plans within the tie band sharing a rank. The runs are those the library can plan:
``data/published_runs.json`` through ``steptime.fitting.run_plan`` (Narayanan 2021, Korthikanti 2022, Llama 3,
DeepSeek-V3, BLOOM, MT-NLG, torchtitan's tables; each in the ledger of the engine that ran it) and
``data/published_fp8_runs.json`` through ``steptime.precision_fit.plan_for`` (NVIDIA Megatron-Bridge's FP8 and MXFP8
rows, Megatron-LM's ledger, with the recipes' bf16 gradient reduction at ZeRO 0 and 1: ``recipe_settings``). The
search runs as the command line runs it: the ledger's default execution (``steptime.execution_for``), its stage
layout and rank order, every ZeRO stage, recomputation, micro-batch size of 1, 2 and 4 and virtual-stage count the
layers allow, the run's gradient dtype (``DeepSeek-V3`` adds ``pipeline="dualpipe"``, its schedule).

The explanation compares the published shape's fastest kept plan with the search's fastest, term by term
(``StepTime.terms``: seconds per step), and says where the published plan itself, as it ran, falls
(``design.placement``), or why the ledger refuses it: the reading of "which term puts them lower and why".

    >>> r = shape_rank(fitting.run_plan(fitting.run("llama3-405b-8k-16384gpu")))
    >>> r.rank, r.tied_rank, r.shapes
    (6, 6, 24)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from meshplan.core.resources import read_json
from meshplan.course.design import placement
from meshplan.plan import Plan
from meshplan.search import SHAPE, Candidate, SearchResult, search
from meshplan.steptime import Execution, execution_for, fitting, precision_fit

TOP = 5  # the bar: a published shape belongs among the search's five fastest shapes
# the pipeline schedule a run used where it is not the ledger's 1F1B (DeepSeek-V3's report, §3.2.1: DualPipe)
PIPELINE = {"deepseek-v3-pretraining": "dualpipe"}

__all__ = [
    "PIPELINE",
    "TOP",
    "ShapeRank",
    "published_plans",
    "recipe_settings",
    "shape_rank",
    "shape_ranks",
    "unpriced_settings",
]


def recipe_settings(run_id: str) -> tuple[dict, ...]:
    """The memory settings of a published run's recipe that its engine's ledger does not price (``recipe_settings``
    of ``data/published_fp8_runs.json``: NVIDIA's performance recipes reduce gradients in bf16, keep FP8 parameters,
    fuse the cross-entropy in Transformer Engine, and offload activations in one GB200 preset), each with the
    recipe's words, what the ledger prices instead and the source line.

        >>> [x["setting"] for x in recipe_settings("bridge-25.11-gb200-fp8-llama3-70b")][-1]
        'activations of 40 layers offloaded to the CPU'
    """
    rows = read_json("published_fp8_runs.json").get("recipe_settings", [])
    return tuple(x for x in rows if run_id.startswith(x["id_prefix"]))


@dataclass(frozen=True)
class ShapeRank:
    """One published run's shape in the search.

    Attributes:
        id: the run's id.
        plan: the run as published (``run_plan`` / ``plan_for``).
        rank, tied_rank: its shape's place among the kept shapes (1-based; with ties); None when no plan of the
            shape is kept.
        shapes: how many shapes the search keeps.
        best: the search's fastest plan.
        shape_best: the fastest kept plan of the published shape (None when none is kept).
        as_run: the published plan's own placement: "rank N (tied with M) at T s", or the reason it is not kept.
        as_run_fits: whether the published plan, as it ran, fits in the ledger.
    """

    id: str
    plan: Plan
    rank: int | None
    tied_rank: int | None
    shapes: int
    best: Candidate
    shape_best: Candidate | None
    as_run: str
    as_run_fits: bool

    @property
    def in_top(self) -> bool:
        """Whether the shape is among the ``TOP`` fastest (ties counted)."""
        return self.tied_rank is not None and self.tied_rank <= TOP

    def deltas(self) -> dict[str, float]:
        """Seconds per step the published shape's fastest plan spends beyond the search's fastest, per term (negative
        where it spends less); empty when no plan of the shape is kept."""
        if self.shape_best is None:
            return {}
        mine, best = self.shape_best.step.terms(), self.best.step.terms()
        return {k: mine[k] - best[k] for k in mine}

    def lower_terms(self) -> list[tuple[str, float]]:
        """The terms the published shape's fastest plan spends more on than the search's fastest, largest first (those
        over 0.5 % of the fastest's step): (term, seconds per step)."""
        floor = 0.005 * self.best.step.total_s
        return sorted(((k, v) for k, v in self.deltas().items() if v > floor), key=lambda kv: -kv[1])

    def lower_text(self) -> str:
        """``lower_terms`` as text, the first three: "+3.66 s compute, +1.57 s tp"."""
        return ", ".join(f"+{v:.2f} s {k.removesuffix('_s').replace('_', ' ')}" for k, v in self.lower_terms()[:3])

    def explanation(self) -> str:
        """One line: in the top, or the terms (largest first) that put the shape lower, with what differs."""
        if self.shape_best is None:
            return f"no plan of its shape fits in this ledger; as run: {self.as_run}"
        slower = self.shape_best.step.total_s / self.best.step.total_s - 1
        own = self.shape_best.plan
        why = ""
        if not self.as_run_fits:  # the ledger's verdict on the run as published decides which plan of it is kept
            ran = "no" if self.plan.recompute == "none" else self.plan.recompute
            why = (
                f"; as published ({ran} recomputation, ZeRO-{self.plan.zero}) it does not fit the "
                f"ledger ({self.as_run}), so its shape is priced with {own.recompute} recomputation"
            )
        if self.in_top:
            return f"in the top {TOP}: its best plan is {100 * slower:.1f} % slower than the fastest{why}"
        return (
            f"{100 * slower:.1f} % slower than the fastest ({self.best.label()}): {self.lower_text()}; its best "
            f"plan is {self.shape_best.label()}{why}"
        )


def _execution(plan: Plan, run_id: str) -> Execution:
    ex = execution_for(plan.accounting.name)
    return replace(ex, pipeline=PIPELINE[run_id]) if run_id in PIPELINE else ex


def shape_rank(plan: Plan, run_id: str = "", result: SearchResult | None = None) -> ShapeRank:
    """The published ``plan``'s shape in the search of its model on its GPUs, sequence, batch, machine, ledger,
    precision and stage layout (``result``: that search, if it has been run)."""
    if result is None:
        result = search(
            plan.model,
            plan.gpus,
            plan.seq,
            plan.global_batch,
            hardware=plan.hardware,
            accounting=plan.accounting,
            precision=plan.precision,
            stage_balance=plan.stage_balance,
            execution=_execution(plan, run_id),
            grad_dtype=plan.grad_dtype if plan.accounting.grad_reduce_bf16 else None,
        )
    shape = {k: getattr(plan, k) for k in SHAPE}
    hit = result.rank_of(**shape)
    try:
        where = placement(plan, result)
        tie = f" (tied with {where.tied_rank})" if where.tied_rank < where.rank else ""
        kept = "" if where.kept else f"; not kept: {where.why}"
        as_run, fits = f"rank {where.rank}{tie} at {where.step_s:.2f} s{kept}", True
    except ValueError as exc:  # the ledger's verdict on memory
        as_run, fits = str(exc), False
    return ShapeRank(
        run_id,
        plan,
        result.shape_rank_of(**shape),
        result.shape_rank_of(ties=True, **shape),
        len(result.shapes()),
        result.ranked[0],
        None if hit is None else hit[1],
        as_run,
        fits,
    )


def published_plans() -> dict[str, Plan]:
    """Every published run the library can plan, by id: the runs of ``published_runs.json`` with a setup and a
    full mesh, then the rows of ``published_fp8_runs.json``."""
    out: dict[str, Plan] = {}
    for r in fitting.published_runs():
        mesh = r["mesh"]
        if r["gpus"] is None or any(mesh.get(k) is None for k in ("tp", "cp", "pp", "dp")):
            continue
        try:
            out[r["id"]] = fitting.run_plan(r)
        except ValueError:  # no setup: the run cannot be planned
            continue
    for r in precision_fit.runs():
        plan = precision_fit.plan_for(r)
        if plan.zero < 2 and any(x["setting"] == "bf16 gradients" for x in recipe_settings(r["id"])):
            plan = plan.replace(grad_dtype="bf16")  # the recipe's --grad-reduce-in-bf16, which the ledger prices
        out[r["id"]] = plan
    return out


def unpriced_settings(rank: ShapeRank) -> tuple[str, ...]:
    """The recipe settings of ``rank``'s run that its plan does not price (``recipe_settings``, less the bf16
    gradients where the plan has them)."""
    priced = {"bf16 gradients"} if rank.plan.grad_dtype == "bf16" and rank.plan.accounting.name == "megatron" else set()
    return tuple(x["setting"] for x in recipe_settings(rank.id) if x["setting"] not in priced)


@cache
def shape_ranks() -> tuple[ShapeRank, ...]:
    """``shape_rank`` of every ``published_plans`` run, in their order."""
    return tuple(shape_rank(p, run_id) for run_id, p in published_plans().items())
