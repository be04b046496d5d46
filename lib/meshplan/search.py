"""Plan search: every (TP, CP, PP, DP, EP, ZeRO stage, recompute, micro-batch size, virtual stages) for a
model on a cluster, the constraint each rejected plan fails first, and the fitting plans ranked by an
estimated step time.

Ranking: by the estimated seconds per optimizer step of ``steptime.step_time`` (compute, blocking
communication, exposed gradient sync, bubble), then by memory.

A plan is kept if it passes every constraint and fits; constraints are checked in this order and the first
failure names the rejection: TP inside one node (tp ≤ GPUs per node), at least ``min_seq_per_cp_rank``
tokens per CP rank (the estimate charges nothing for short chunks; 0 switches the floor off), the global
batch divisible by DP × micro-batch size, the plan's own validation (``Plan``: heads, layers, sequence, experts, interleaving),
then memory. Search sizes are divisors of the GPU count: TP up to 2 × GPUs per node (so that crossing a node
is reported), CP up to ``max_cp``, PP up to the layers; when PP does not divide the layers, the stages are
spread ends-lighter (``plan.spread_layers``) unless ``uneven_stages=False``.

    >>> r = search("qwen3.8-27b", gpus=8, seq=4096, global_batch=8)
    >>> best = r.ranked[0]
    >>> best.plan.tp, best.plan.pp, best.plan.dp, best.plan.zero, best.plan.recompute
    (2, 1, 4, 3, 'selective')
    >>> round(best.step.total_s, 2), round(best.mfu(989.5e12), 3)
    (1.71, 0.372)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from .accounting import Accounting, get_accounting
from .activations import RECOMPUTE_MODES
from .dims import DEFAULT_ORDER, MAX_GPUS, ParallelDims, check_count, parse_order
from .hardware import Hardware, load_hardware
from .mesh import check_nodes
from .model import ModelSpec, load_model
from .plan import MAX_SEQ, Plan, Report, Workload, evaluate
from .reporting import plan_label
from .stages import spread_layers
from .steptime import TERMS, StepTime, mfu, model_flop_per_step, step_time
from .units import fmt_gb

ZERO_STAGES = (0, 1, 2, 3)
RECOMPUTE = ("none", "selective", "full")
MICRO_BATCH_SIZES = (1, 2, 4)
VIRTUAL_STAGES = (1, 2, 4)
# The step-time estimate charges nothing for short chunks, so it would split an 8K sequence 32 ways. Megatron's
# guide (quoted in the course's seed 004) uses CP only for sequences of 8K and more, with CP 2 at 8,192 in its
# Llama 3 70B example; Llama 3 runs CP 16 at 131,072 (8,192 tokens per rank). Floor: 4,096 tokens per CP rank.
MIN_SEQ_PER_CP_RANK = 4096
__all__ = ["Candidate", "Rejection", "SearchResult", "StepTime", "describe", "format_search", "mfu",
           "model_flop_per_step", "search", "step_time"]


@dataclass(frozen=True)
class Candidate:
    """A plan that passes every constraint and fits, with its report and estimated step time."""

    plan: Plan
    report: Report
    step: StepTime

    def mfu(self, peak_flop_per_s: float) -> float:
        return mfu(self.report, self.step.total_s, peak_flop_per_s)

    def label(self) -> str:
        return describe(self.plan)

    def to_dict(self, rank: int | None = None) -> dict:
        """The ``plan --json`` report plus ``step_time_s``, its terms and the rank."""
        d = self.report.to_dict()
        d["step_time_s"] = self.step.total_s
        d["step_time_terms_s"] = self.step.terms()
        if rank is not None:
            d["rank"] = rank
        return d


@dataclass(frozen=True)
class Rejection:
    """A plan that was not kept: its settings, the first constraint it fails and the message."""

    settings: Mapping[str, object]
    constraint: str
    message: str


@dataclass(frozen=True)
class SearchResult:
    """Every enumerated plan: ``ranked`` (fastest first) and ``rejected`` (in enumeration order)."""

    model: ModelSpec
    gpus: int
    seq: int
    global_batch: int
    ranked: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]
    enumerated: int = field(default=0)

    def rank_of(self, **fixed) -> tuple[int, Candidate] | None:
        """The 1-based rank and candidate of the best kept plan whose attributes equal ``fixed``
        (e.g. ``tp=8, cp=1, pp=16, dp=128``), or None if no kept plan matches."""
        for i, c in enumerate(self.ranked, 1):
            if all(getattr(c.plan, k) == v for k, v in fixed.items()):
                return i, c
        return None

    def shape_rank_of(self, **fixed) -> int | None:
        """The 1-based rank of the first mesh shape (tp, cp, pp, dp, ep) matching ``fixed`` when every shape is
        ranked by its fastest kept plan, or None."""
        seen: list[tuple] = []
        for c in self.ranked:
            shape = tuple(getattr(c.plan, k) for k in ("tp", "cp", "pp", "dp", "ep"))
            if shape in seen:
                continue
            seen.append(shape)
            if all(getattr(c.plan, k) == v for k, v in fixed.items()):
                return len(seen)
        return None

    def rejections_by_constraint(self) -> dict[str, int]:
        """How many plans each constraint rejected first."""
        return dict(Counter(r.constraint for r in self.rejected))

    def rejection_examples(self) -> dict[str, Rejection]:
        """The first rejection of each constraint."""
        out: dict[str, Rejection] = {}
        for r in self.rejected:
            out.setdefault(r.constraint, r)
        return out


describe = plan_label  # 'TP 8 × PP 16 × DP 128 · ZeRO-1 · selective · b 1 · m 16 · v 1'


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _check_choices(name: str, values, allowed) -> tuple:
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} is empty: give at least one value")
    for v in values:
        if v not in allowed or isinstance(v, bool):
            raise ValueError(f"{name}: {v!r} is not one of {', '.join(map(str, allowed))}")
    return values


def search(model, gpus: int, seq: int, global_batch: int, gpus_per_node: int | None = None,
           gpu_memory_bytes: float | None = None, order: str = DEFAULT_ORDER, max_cp: int = 32,
           min_seq_per_cp_rank: int = MIN_SEQ_PER_CP_RANK, uneven_stages: bool = True,
           hardware: Hardware | str | None = None, accounting: Accounting | str = "lab",
           zero_stages=ZERO_STAGES, recompute=RECOMPUTE, micro_batch_sizes=MICRO_BATCH_SIZES,
           virtual_stages=VIRTUAL_STAGES) -> SearchResult:
    """Enumerate every plan of ``model`` on ``gpus`` GPUs for sequences of ``seq`` tokens and a global batch of
    ``global_batch`` sequences; keep those that pass every constraint and fit, ranked by ``step_time``.

    Duplicates are not enumerated: ZeRO stages > 0 only when dp × cp > 1, virtual stages > 1 only with
    pp > 1, EP > 1 only for MoE models. Every argument is validated as ``Plan.create`` validates it (ValueError
    naming it): the same order, memory, stage and recompute rules, so ``search`` never silently finds nothing
    for a bad input.
    """
    spec = load_model(model)
    check_count("gpus", gpus, MAX_GPUS)
    check_count("seq", seq, MAX_SEQ)
    check_count("global_batch", global_batch)
    check_count("max_cp", max_cp, MAX_GPUS)
    if isinstance(min_seq_per_cp_rank, bool) or not isinstance(min_seq_per_cp_rank, int) or min_seq_per_cp_rank < 0:
        raise ValueError(f"min_seq_per_cp_rank={min_seq_per_cp_rank!r} must be a non-negative integer")
    parse_order(order)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    hw = hw.with_overrides(gpu_memory_bytes, gpus_per_node)
    acc = get_accounting(accounting)
    gpn, mem = hw.gpus_per_node, hw.gpu_memory_bytes
    check_nodes(gpus, gpn)
    zero_stages = _check_choices("zero_stages", zero_stages, ZERO_STAGES)
    recompute = _check_choices("recompute", recompute, RECOMPUTE_MODES)
    micro_batch_sizes = tuple(check_count("micro_batch_sizes entry", b) for b in micro_batch_sizes)
    virtual_stages = tuple(check_count("virtual_stages entry", v) for v in virtual_stages)
    if not micro_batch_sizes or not virtual_stages:
        raise ValueError("micro_batch_sizes and virtual_stages need at least one value each")
    L = spec.num_layers
    ranked: list[Candidate] = []
    rejected: list[Rejection] = []
    n = 0
    for tp in _divisors(gpus, 2 * gpn):
        for cp in _divisors(gpus // tp, max_cp):
            for pp in _divisors(gpus // (tp * cp), L):
                dp = gpus // (tp * cp * pp)
                lps = None if L % pp == 0 or not uneven_stages else spread_layers(L, pp)
                eps = [e for e in _divisors(spec.num_experts, spec.num_experts) if (dp * cp) % e == 0] \
                    if spec.is_moe else [1]
                for ep in eps:
                    for zero in (zero_stages if dp * cp > 1 else (0,)):
                        for b in micro_batch_sizes:
                            for v in (virtual_stages if pp > 1 else (1,)):
                                for rc in recompute:
                                    n += 1
                                    settings = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": ep, "zero": zero,
                                                "recompute": rc, "micro_batch_size": b, "virtual_stages": v}
                                    if tp > gpn:
                                        rejected.append(Rejection(settings, "tp inside a node",
                                                                  f"tp={tp} > {gpn} GPUs per node: a TP group "
                                                                  "would cross nodes"))
                                        continue
                                    if cp > 1 and seq // cp < min_seq_per_cp_rank:
                                        rejected.append(Rejection(
                                            settings, "cp chunk",
                                            f"cp={cp} leaves {seq // cp:,} tokens per CP rank, fewer than "
                                            f"{min_seq_per_cp_rank:,}"))
                                        continue
                                    if global_batch % (dp * b):
                                        rejected.append(Rejection(
                                            settings, "global batch",
                                            f"global batch {global_batch} is not divisible by dp × micro-batch "
                                            f"size = {dp} × {b} = {dp * b}"))
                                        continue
                                    try:
                                        plan = Plan(model=spec, dims=ParallelDims(tp, cp, pp, dp, ep, order=order),
                                                    workload=Workload(seq, b, global_batch // (dp * b)),
                                                    hardware=hw, accounting=acc, zero=zero, recompute=rc,
                                                    virtual_stages=v, layers_per_stage=lps)
                                    except ValueError as exc:
                                        rejected.append(Rejection(settings, "plan", str(exc)))
                                        continue
                                    report = evaluate(plan)
                                    if not report.fits:
                                        total = report.memory_bytes["total"]
                                        rejected.append(Rejection(
                                            settings, "memory",
                                            f"needs {total / 1e9:,.1f} GB per GPU > {mem / 1e9:,.0f} GB"))
                                        continue
                                    ranked.append(Candidate(plan, report, step_time(report)))
    ranked.sort(key=lambda c: (c.step.total_s, c.report.memory_bytes["total"], c.plan.tp, c.plan.cp, c.plan.pp,
                               c.plan.ep, c.plan.zero, RECOMPUTE.index(c.plan.recompute),
                               c.plan.micro_batch_size, c.plan.virtual_stages))
    return SearchResult(spec, gpus, seq, global_batch, tuple(ranked), tuple(rejected), n)


def format_search(result: SearchResult, top: int = 10) -> str:
    """The table ``meshplan search`` prints: the top plans with their step-time terms, then the rejections."""
    lines = [f"{result.model.name} on {result.gpus:,} GPUs, s = {result.seq:,}, global batch {result.global_batch:,} "
             f"sequences: {result.enumerated:,} plans, {len(result.ranked):,} kept, {len(result.rejected):,} rejected",
             ""]
    head = f"{'#':>4}  {'plan':<58}{'memory':>10}{'step s':>9}  " + "  ".join(f"{t[:-2]:>8}" for t in TERMS)
    lines.append(head)
    for i, c in enumerate(result.ranked[:top], 1):
        terms = "  ".join(f"{x:8.3f}" for x in c.step.terms().values())
        lines.append(f"{i:>4}  {c.label():<58}{fmt_gb(c.report.memory_bytes['total']):>10}"
                     f"{c.step.total_s:9.3f}  {terms}")
    lines += ["", "rejected plans, by the first constraint they fail:"]
    examples = result.rejection_examples()
    for constraint, count in result.rejections_by_constraint().items():
        lines.append(f"  {constraint:<18}{count:>8,}  e.g. {examples[constraint].message}")
    return "\n".join(lines)
