"""Plan search: every (TP, CP, PP, DP, EP, ZeRO stage, recompute, micro-batch size, virtual stages) for a
model on a cluster, the constraint each rejected plan fails first, and the fitting plans ranked by an
estimated step time.

Ranking: by the estimated seconds per optimizer step of ``steptime.step_time`` under the ledger's engine (compute,
exposed communication, bubble, optimizer; ``steptime.execution_for(accounting)`` unless ``execution`` is given), then
by memory. The model is not exact: plans whose step times lie within ``tie_band`` of a faster plan's share its rank
(``SearchResult.tied_ranks``). The band is the model's median error on the *ratio* of the step times of two published
runs of one model on one machine (``calibration.tie_band``, stored in ``data/steptime_fit.json``): ranking compares
plans of one model on one machine, where errors common to both cancel. A plan the ledger's engine refuses (DeepSpeed:
ZeRO-2/3 with pipeline parallelism) fails ``Plan`` validation and is rejected under ``"plan"``.

A plan is kept if it passes every constraint and fits; constraints are checked in this order and the first
failure names the rejection: two policies of the search, TP inside one node (tp ≤ GPUs per node) and at least
``min_seq_per_cp_rank`` tokens per CP rank (the step time does not model short chunks' kernel efficiency; 0 switches
the floor off); then the plan's own rules, asked of the plan's parts as ``Plan.create`` builds them, each
rejection carrying the ``PlanError``'s message: the workload (``Workload.for_global_batch``: the global batch
divisible by DP × micro-batch size, rejected as ``"global batch"``), then ``Plan`` (heads, layers, sequence,
experts, interleaving, the ledger's refusals: ``"plan"``); then memory. Search sizes are divisors of the GPU count: TP
up to 2 × GPUs per node (so that crossing a node is reported), CP up to ``max_cp``, PP up to the layers; when PP does
not divide the layers, the stages are spread ends-lighter (``plan.spread_layers``) unless ``uneven_stages=False``.

Stage layout: each plan places what lies outside the decoder layers as the ledger's engine does
(``stage_balance_for``): Megatron-LM, torchtitan's pipeline split and DeepSpeed's ``PipelineModule`` put the
embedding on the first stage and the head (with the final norm and an MTP module) on the last (``"max"``); the lab
ledger spreads them evenly, as the lab page does (``"even"``). ``stage_balance=`` chooses either.

Cost: the mesh shape (``ParallelDims``) and its workloads are built once per shape; a plan's memory is priced from
what its shape, ZeRO stage, micro-batch size and virtual stages share, exactly as ``evaluate`` prices it, and only
the plans that fit are evaluated and timed (``_Pricer``, which proves it; the tests hold it to pricing every plan
on its own). A search that would enumerate more than ``MAX_PLANS`` plans is refused before it starts.

Bounded search (``top=N``, what ``meshplan search --top N`` runs): the plans of each mesh, EP size and micro-batch
size form a block with a lower bound on every plan's step time (``steptime.step_time_floors``: every term but the
exposed DP synchronisation and the optimizer step, which read the ZeRO stage and model states, with one stage's
micro-batch); blocks are priced in the order of their bounds until the next bound is above the ``N``-th fastest
step time found or the fastest's × (1 + the model's largest ratio error), whichever is larger (``_branch_and_bound``).
``ranked`` is then exactly the head of the full ranking: every plan that fits with a step time up to ``bound_s``,
the same reports and times in the same order; ``unranked`` counts the plans left (slower, most never priced nor
checked for memory), and ``rejected`` holds the full search's rejections less those of plans never priced. It
prices a small share of a large search: of DeepSeek-V3's 123,120 plans on 16,384 H100s at s = 131,072 in the
megatron ledger, 46 reach the peak-memory check and 27 are ranked (``scripts/benchmark.py --search`` times it).

    >>> r = search("qwen3.8-27b", gpus=8, seq=4096, global_batch=8)
    >>> best = r.ranked[0]
    >>> best.plan.tp, best.plan.pp, best.plan.dp, best.plan.zero, best.plan.recompute
    (2, 1, 4, 3, 'selective')
    >>> round(best.step.total_s, 2), round(best.mfu(), 3)        # MFU against the machine's dense bf16 peak
    (1.3, 0.508)
    >>> r.tied_ranks()[:6]                                        # within 3 % of a faster plan: the same rank
    [1, 2, 2, 2, 5, 6]
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from typing import Any

from meshplan.core.units import add_up, fmt_gb, fmt_pct
from meshplan.core.validation import (
    LedgerError,
    MeshplanError,
    PlanError,
    check_choice,
    check_count,
    check_non_negative_int,
)
from meshplan.parallel.activations import RECOMPUTE_MODES
from meshplan.plan import Plan, Report, Workload, evaluate
from meshplan.plan.construct import MAX_GLOBAL_BATCH, OP_RECOMPUTE, precision_refusal, recompute_refusal
from meshplan.plan.evaluation import (
    Moments,
    _stage_activations,
    _stage_states,
    floor_reason,
    freed_at_the_head,
    lab_per_layer,
    memory_budget,
    memory_floor,
    memory_reason,
    peak_line,
    stage_peak,
    step_inputs,
    time_inputs,
    time_report,
)
from meshplan.plan.reporting import plan_label
from meshplan.spec.accounting import Accounting, get_accounting
from meshplan.spec.dims import DEFAULT_ORDER, MAX_GPUS, ParallelDims
from meshplan.spec.hardware import Hardware, load_hardware
from meshplan.spec.mesh import check_nodes
from meshplan.spec.model import ModelSpec, load_model
from meshplan.spec.stages import spread_layers
from meshplan.steptime import (
    TERMS,
    Execution,
    StepTime,
    execution_for,
    fit_data,
    mfu,
    model_flop_per_step,
    step_time,
    step_time_floors,
)
from meshplan.steptime.contract import plan_json

ZERO_STAGES = (0, 1, 2, 3)
# The coarse floor of a bounded search's block: ``steptime.step_time_floors`` of its plans without recomputation,
# which is at most that of any recompute mode of the same plan outside DualPipe. Every term it adds is one that
# recomputation can only lengthen: the micro-batch's compute (the GEMMs' passes and, for full, the weights read once
# more; the recomputed attention core or layer; the element-wise passes), its TP, CP and EP collectives (a recompute
# mode only adds to their lists: parallel.tp, cp, ep), a TP overlap that hides behind the GEMMs taking no more than
# the GEMMs add, and the 1F1B bubble, a fraction of the micro-batch's time; the sends do not read the mode. DualPipe's
# idle time reads the forward alone, which full recomputation can shorten where the weights bound the GEMMs, so under
# DualPipe every mode is floored. ``tests/test_search_bound.py`` holds it on every plan of its cases.
COARSE_FLOOR = "none"
RECOMPUTE = ("none", "selective", "full")
MICRO_BATCH_SIZES = (1, 2, 4)
# virtual_stages="layers": every count the stage's layers allow (``virtual_stage_counts``), the search's default
AUTO_VIRTUAL_STAGES = "layers"
BALANCES = ("even", "max")  # Plan.stage_balance
# The most plans one search enumerates. Every shipped model stays below it at every power-of-two GPU count up to
# MAX_GPUS (the divisors saturate: Qwen3-30B-A3B enumerates 190,080 at 1,048,576 GPUs, DeepSeek-V3 126,360); a GPU
# count with more divisors (2,304 = 2⁸ · 9: 623,988 plans of Qwen3-30B-A3B, 402,876 of DeepSeek-V3), a model with more
# experts or layers can exceed it, and is refused with the sizes that multiply into the count (``_too_many``).
MAX_PLANS = 200_000
# The most plans the command line reports (``meshplan search --top``). Each listed plan gets a full report, the one
# ``plan`` prints: about 0.7 ms to build and 5 KB of JSON apiece. ``--top 1000 --json`` for DeepSeek-V3 on 2,048 H100s
# at s = 131,072 takes 3.7 s of wall time in a new process (4.6 MB); every plan that fits there (10,605) would take
# 14 CPU-s and 56 MB (``scripts/benchmark.py --search``). The Python ``search`` has no such limit: a candidate's
# report is built when it is read.
MAX_TOP = 1000
# The step-time model charges CP's K/V ring only where it outlasts the attention compute (and its latency), and
# nothing for the attention kernels' lower efficiency on short chunks, so it would split an 8K sequence 32 ways.
# Megatron's guide (quoted in the course's seed 004) uses CP only for sequences of 8K and more, with CP 2 at 8,192
# in its Llama 3 70B example; Llama 3 runs CP 16 at 131,072 (8,192 tokens per rank). Floor: 4,096 tokens per rank.
MIN_SEQ_PER_CP_RANK = 4096
SHAPE = ("tp", "cp", "pp", "dp", "ep")
# the rejection a PlanError's factor names; any other factor is the plan's own validation, "plan"
_CONSTRAINT = {"global_batch": "global batch"}
__all__ = [
    "MAX_TOP",
    "Candidate",
    "Rejection",
    "SearchResult",
    "StepTime",
    "describe",
    "format_search",
    "mfu",
    "model_flop_per_step",
    "ratio_uncertainty",
    "search",
    "stage_balance_for",
    "step_time",
    "tie_band",
    "tied_ranks",
    "virtual_stage_counts",
]


# The regime the tie band is measured in: its pairs of held-out runs of one model on one machine
# (``steptime.fitting.ratio_errors`` over ``fitting.validate``'s rows: Korthikanti 2022's GPT models, MT-NLG 530B,
# Llama 3 405B, torchtitan's Llama 3 8B) are all dense models training in bf16 on these machines;
# tests/test_search_bound.py derives it from those rows.
BAND_REGIME: dict[str, Any] = {"moe": False, "precision": ("bf16",), "hardware": ("a100-sxm-80gb", "h100-sxm-80gb")}


def band_regime_gaps(model: ModelSpec, precision: str, hardware: str) -> list[str]:
    """What puts a search of ``model`` in ``precision`` on ``hardware`` outside the regime its tie band is measured
    in (``BAND_REGIME``), in words; empty when it is inside.

        >>> band_regime_gaps(load_model("qwen3-30b-a3b"), "fp8", "b200-sxm-180gb")
        ['a mixture of experts', 'fp8 GEMMs', 'b200-sxm-180gb']
    """
    out = []
    if model.is_moe and not BAND_REGIME["moe"]:
        out.append("a mixture of experts")
    if precision not in BAND_REGIME["precision"]:
        out.append(f"{precision} GEMMs")
    if hardware not in BAND_REGIME["hardware"]:
        out.append(hardware)
    return out


def tie_band() -> float:
    """The stored tie band (a fraction): the step-time model's median error on the ratio of two published runs."""
    return fit_data()["tie_band"]["value"]


def ratio_uncertainty() -> float:
    """The stored uncertainty of the step-time model on the ratio of two plans' step times (a fraction): its largest
    error on the ratio of two held-out published runs of one model on one machine (``fitting.ratio_uncertainty``)."""
    return fit_data()["tie_band"]["worst"]


def tied_ranks(times: list[float], band: float) -> list[int]:
    """Display ranks of ``times`` (sorted, fastest first): a time within ``band`` of its group's first (fastest)
    time shares that time's rank; the next time outside starts a group ranked by its position (1, 1, 1, 4, ...).

        >>> tied_ranks([9.14, 9.20, 9.60, 9.70, 12.0], 0.03)
        [1, 1, 3, 3, 5]
    """
    if any(b < a for a, b in pairwise(times)):
        raise MeshplanError("tied_ranks needs the times sorted, fastest first", "times")
    if not band >= 0:
        raise MeshplanError(f"band={band!r} must be a non-negative fraction", "band")
    ranks, leader = [], None
    for i, t in enumerate(times):
        if leader is None or t > times[leader] * (1 + band):
            leader = i
        ranks.append(leader + 1)
    return ranks


@dataclass(frozen=True, eq=False)
class Candidate:
    """A plan that passes every constraint and fits, with its estimated step time and its report. A search times
    each plan from its ``StepInputs`` and builds the report (``evaluate``) when it is first read: it then checks
    that the report repeats the memory total the search ranked it by and says the plan fits. Candidates are equal
    when their plans, reports, step times and executions are."""

    plan: Plan
    step: StepTime
    execution: Execution = field(default_factory=Execution)
    memory_total: float = 0.0
    _report: Report | None = field(default=None, repr=False)

    @property
    def report(self) -> Report:
        """``evaluate(plan)``, built once."""
        if self._report is None:
            report = evaluate(self.plan)
            found = report.memory_bytes["total"]
            if found != self.memory_total or not report.fits:
                raise AssertionError(
                    f"search kept {describe(self.plan)} at {self.memory_total!r} B; evaluate prices {found!r} B"
                    + ("" if report.fits else " and says it does not fit")
                )
            object.__setattr__(self, "_report", report)
            return report
        return self._report

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        return (self.plan, self.step, self.execution, self.report) == (
            other.plan,
            other.step,
            other.execution,
            other.report,
        )

    __hash__ = None  # type: ignore[assignment]  # equal by value, and mutable in its cached report

    def mfu(self, peak_flop_per_s: float | None = None) -> float:
        """MFU against ``peak_flop_per_s`` (default: the hardware's dense bf16 peak)."""
        return mfu(self.report, self.step.total_s, peak_flop_per_s)

    def label(self) -> str:
        return describe(self.plan)

    def to_dict(self, rank: int | None = None) -> dict:
        """The ``plan --json`` report plus ``steptime.step_report``'s keys (``step_time_s``, its terms,
        ``tokens_per_step``, ``mfu``, ``hfu``, ...) and the rank."""
        return plan_json(self.report, self.execution, self.step, rank)


@dataclass(frozen=True)
class Rejection:
    """A plan that was not kept: its settings, the first constraint it fails and the message; ``engine_refusal``
    when the ledger's engine refuses the plan (a ``LedgerError``: DeepSpeed's ZeRO-2/3 with a pipeline, FSDP2's
    ZeRO-1), not a rule of the plan itself."""

    settings: Mapping[str, Any]
    constraint: str
    message: str
    engine_refusal: bool = False


class Rejections(Sequence[Rejection]):
    """A search's rejections in enumeration order, each built when first read: a search rejects most of its plans on
    rules that hold for a whole group (a mesh crossing nodes, a batch that does not divide, a plan rule of its shape),
    kept as records of (settings, the recompute modes they hold for, (constraint, message, engine refusal)). Equal to
    any sequence of the same rejections; counted by constraint without building them."""

    def __init__(self, records: tuple[tuple[Mapping[str, Any], tuple[str, ...], Reason], ...] = ()):
        self._records = records
        self._len = add_up(len(modes) for _, modes, _ in records)
        self._items: tuple[Rejection, ...] | None = None

    def _all(self) -> tuple[Rejection, ...]:
        if self._items is None:
            self._items = tuple(
                Rejection({**settings, "recompute": rc}, *reason)
                for settings, modes, reason in self._records
                for rc in modes
            )
        return self._items

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rejections({len(self):,} plans)"

    def by_constraint(self) -> dict[str, int]:
        """How many plans each constraint rejected first, in the order of their first rejection."""
        out: dict[str, int] = {}
        for _, modes, (constraint, _, _) in self._records:
            out[constraint] = out.get(constraint, 0) + len(modes)
        return out

    def examples(self) -> dict[str, Rejection]:
        """The first rejection of each constraint."""
        out: dict[str, Rejection] = {}
        for settings, modes, reason in self._records:
            if modes and reason[0] not in out:
                out[reason[0]] = Rejection({**settings, "recompute": modes[0]}, *reason)
        return out


@dataclass(frozen=True)
class SearchResult:
    """Every enumerated plan: ``ranked`` (fastest first) and ``rejected`` (in enumeration order). A bounded search
    (``top`` given) ranks only the plans with step times up to ``bound_s`` (the head of the full ranking) and counts
    the others in ``unranked``; ``margin`` is the fraction over the fastest it ranks in any case."""

    model: ModelSpec
    gpus: int
    seq: int
    global_batch: int
    ranked: tuple[Candidate, ...]
    rejected: Sequence[Rejection]
    enumerated: int = field(default=0)
    band: float = 0.0
    accounting: str = "lab"
    execution: Execution = field(default_factory=Execution)
    stage_balance: str = "even"
    precision: str = "bf16"
    order: str = DEFAULT_ORDER
    top: int | None = None
    bound_s: float = math.inf
    unranked: int = 0
    margin: float = 0.0
    hardware: str = ""

    def tied_ranks(self) -> list[int]:
        """The displayed rank of each kept plan: plans within ``band`` of a faster plan's step time share its rank."""
        return tied_ranks([c.step.total_s for c in self.ranked], self.band)

    def shapes(self) -> list[tuple[tuple[int, ...], Candidate]]:
        """Each mesh shape (tp, cp, pp, dp, ep) with its fastest kept plan, fastest first."""
        best: dict[tuple[int, ...], Candidate] = {}
        for c in self.ranked:
            best.setdefault(tuple(getattr(c.plan, k) for k in SHAPE), c)
        return list(best.items())

    def rank_of(self, **fixed) -> tuple[int, Candidate] | None:
        """The 1-based rank and candidate of the best kept plan whose attributes equal ``fixed``
        (e.g. ``tp=8, cp=1, pp=16, dp=128``), or None if no kept plan matches."""
        for i, c in enumerate(self.ranked, 1):
            if all(getattr(c.plan, k) == v for k, v in fixed.items()):
                return i, c
        return None

    def shape_rank_of(self, ties: bool = False, **fixed) -> int | None:
        """The 1-based rank of the first mesh shape (tp, cp, pp, dp, ep) matching ``fixed`` when every shape is
        ranked by its fastest kept plan (with ``ties``: shapes within ``band`` of a faster one share its rank), or
        None."""
        shapes = self.shapes()
        ranks = tied_ranks([c.step.total_s for _, c in shapes], self.band) if ties else range(1, len(shapes) + 1)
        for rank, (_, c) in zip(ranks, shapes, strict=True):
            if all(getattr(c.plan, k) == v for k, v in fixed.items()):
                return rank
        return None

    def rejections_by_constraint(self) -> dict[str, int]:
        """How many plans each constraint rejected first."""
        if isinstance(self.rejected, Rejections):
            return self.rejected.by_constraint()
        return dict(Counter(r.constraint for r in self.rejected))

    def rejection_examples(self) -> dict[str, Rejection]:
        """The first rejection of each constraint."""
        if isinstance(self.rejected, Rejections):
            return self.rejected.examples()
        out: dict[str, Rejection] = {}
        for r in self.rejected:
            out.setdefault(r.constraint, r)
        return out

    @cached_property
    def index(self) -> SearchIndex:
        """The result looked up by settings (``settings_key``), built once per result: the position of the first kept
        plan of each setting, the message of the first rejection of each, the kept plans' step times and their tied
        ranks."""
        kept: dict[tuple, int] = {}
        for i, c in enumerate(self.ranked):
            kept.setdefault(settings_key(c.plan), i)
        rejected: dict[tuple, str] = {}
        for r in self.rejected:
            rejected.setdefault(settings_key(r.settings), r.message)
        times = tuple(c.step.total_s for c in self.ranked)
        return SearchIndex(kept, rejected, times, tuple(tied_ranks(list(times), self.band)))


SETTINGS = ("tp", "cp", "pp", "dp", "ep", "zero", "recompute", "micro_batch_size", "virtual_stages")


def settings_key(obj: Any) -> tuple:
    """The search settings (``SETTINGS``) of a plan or of a rejection's settings mapping, as a tuple."""
    get = obj.get if isinstance(obj, Mapping) else lambda k: getattr(obj, k)
    return tuple(get(k) for k in SETTINGS)


@dataclass(frozen=True)
class SearchIndex:
    """``SearchResult.index``: kept plans (settings → position), rejections (settings → why), step times, tied ranks."""

    kept: Mapping[tuple, int]
    rejected: Mapping[tuple, str]
    times: tuple[float, ...]
    ties: tuple[int, ...]


describe = plan_label  # 'TP 8 × PP 16 × DP 128 · ZeRO-1 · selective · b 1 · m 16 · v 1'


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def virtual_stage_counts(num_layers: int, pp: int, layers_per_stage: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Every virtual-stage count v (chunks per pipeline rank) the layers allow, the search's default
    (``virtual_stages="layers"``): with equal stages of L/pp layers, each divisor v of L/pp, chunks of L/(pp·v)
    layers, as Megatron-LM's ``--num-layers-per-virtual-pipeline-stage`` needs them (v = 7 for PP 9 of Llama 3.1
    405B's 126 layers, 12 for PP 8 of 96 layers: two layers or one per chunk); with uneven
    stages (``spread_layers``), the divisors of every stage's count, and 2 and 4 where every stage has that many
    layers, as ``Plan`` accepts them. 1 alone without pipeline parallelism.

        >>> virtual_stage_counts(126, 9), virtual_stage_counts(96, 8)
        ((1, 2, 7, 14), (1, 2, 3, 4, 6, 12))
        >>> virtual_stage_counts(126, 16, spread_layers(126, 16))
        (1, 2, 4)
    """
    if pp == 1 or (layers_per_stage is None and num_layers % pp):
        return (1,)
    if layers_per_stage is None:
        return tuple(_divisors(num_layers // pp, num_layers))
    common = math.gcd(*layers_per_stage)
    return tuple(sorted({*_divisors(common, common), *(v for v in (2, 4) if v <= min(layers_per_stage))}))


def _check_choices(name: str, values, allowed) -> tuple:
    values = tuple(values)
    if not values:
        raise MeshplanError(f"{name} is empty: give at least one value", name)
    for v in values:
        if v not in allowed or isinstance(v, bool):
            raise MeshplanError(f"{name}: {v!r} is not one of {', '.join(map(str, allowed))}", name)
    return values


Reason = tuple[str, str, bool]  # a rejection's constraint, message and whether the ledger's engine refuses the plan


def _reason(exc: PlanError) -> Reason:
    """The rejection of a plan that cannot be built: the constraint its factor names, its message, and whether the
    ledger's engine refuses it."""
    return _CONSTRAINT.get(exc.factor or "", "plan"), str(exc), isinstance(exc, LedgerError)


def _workload(global_batch: int, dp: int, seq: int, b: int) -> Workload | PlanError:
    """The workload of micro-batch size ``b`` on ``dp`` replicas (``Workload.for_global_batch``, as
    ``Plan.create`` builds it), or the PlanError that says why there is none."""
    try:
        return Workload.for_global_batch(global_batch, dp, seq, b)
    except PlanError as exc:
        return exc


def stage_balance_for(accounting: Accounting | str) -> str:
    """The stage layout of a ledger's engine: ``"max"`` for the engine ledgers (Megatron-LM, torchtitan's pipeline
    split and DeepSpeed's ``PipelineModule`` put the embedding on the first stage and the output head on the last),
    ``"even"`` for the lab page's ledger (everything outside the decoder layers spread evenly).

        >>> stage_balance_for("megatron"), stage_balance_for("lab")
        ('max', 'even')
    """
    return get_accounting(accounting).stage_balance


def _stage_states_bytes(plan: Plan) -> tuple[list[float], list[float], list[dict[str, float]]]:
    """Model-state bytes per GPU of each pipeline stage of ``plan``, each summed as ``evaluate`` sums it, each
    stage's gradient term, and its terms (stages holding the same parameters share one computation, as there)."""
    seen: dict[tuple[float, float], tuple[float, float, dict[str, float]]] = {}
    sums, grads, terms = [], [], []
    for st in plan.stages:
        key = (st.dense_params, st.expert_params)
        if key not in seen:
            t = _stage_states(plan, st)
            seen[key] = (add_up(t.values()), t["grads"], t)
        sums.append(seen[key][0])
        grads.append(seen[key][1])
        terms.append(seen[key][2])
    return sums, grads, terms


def _stage_activation_bytes(plan: Plan) -> list[float]:
    """Activation bytes per GPU of each pipeline stage of ``plan``, as ``evaluate`` computes them."""
    per_layer = lab_per_layer(plan)
    return [_stage_activations(plan, st, per_layer) for st in plan.stages]


def _leaders(plan: Plan, acts: list[float]) -> tuple[int, ...]:
    """The stages, in order, that can hold the maximum of states + saved bytes, of the floor (``memory_floor``) and
    of the peak over ``plan``'s stages: of each group of alike stages (``Plan.stage_groups``: equal parameters, so
    equal model states), its first stage when that one keeps the most saved bytes (1F1B keeps fewer micro-batches
    in flight on later stages), else all of them. A float sum never falls as one addend grows, so no other stage
    has a larger value, and none an equal one with a lower index: the maxima over these stages, and their first
    stage, are those over all the stages. The last stage is always its own group."""
    out: list[int] = []
    for group in plan.stage_groups:
        top = max(acts[k] for k in group)
        out.extend((group[0],) if acts[group[0]] == top else group)
    return tuple(sorted(out))


def _shapes(spec: ModelSpec, gpus: int, gpn: int, max_cp: int) -> list[tuple[int, int, int, int, list[int]]]:
    """The mesh shapes the search enumerates, in its order: (tp, cp, pp, dp, the EP sizes)."""
    out = []
    for tp in _divisors(gpus, 2 * gpn):
        for cp in _divisors(gpus // tp, max_cp):
            for pp in _divisors(gpus // (tp * cp), spec.num_layers):
                dp = gpus // (tp * cp * pp)
                eps = [e for e in _divisors(spec.num_experts, spec.num_experts) if (dp * cp) % e == 0]
                out.append((tp, cp, pp, dp, eps if spec.is_moe else [1]))
    return out


def _too_many(spec: ModelSpec, gpus: int, n: int, shapes: list[tuple[int, int, int, int, list[int]]]) -> str:
    """The one line that refuses a search larger than ``MAX_PLANS``, with the sizes that multiply into it."""
    sizes = {k: len({s[i] for s in shapes}) for i, k in enumerate(("TP", "CP", "PP"))}
    eps = max(len(s[4]) for s in shapes)
    counts = ", ".join(f"{v} {k}" for k, v in sizes.items()) + (f", up to {eps} EP" if eps > 1 else "")
    return (
        f"gpus={gpus:,}: the search of {spec.name} would enumerate {n:,} plans ({len(shapes):,} mesh shapes of "
        f"{counts} sizes, each with every ZeRO stage, micro-batch size, virtual stage count and recompute mode), "
        f"more than the {MAX_PLANS:,} it can price in seconds; narrow it (zero_stages, recompute, "
        "micro_batch_sizes, virtual_stages, max_cp)"
    )


class _Pricer:
    """Prices the candidates of a search, one group at a time: the recompute modes of one mesh shape, ZeRO stage,
    micro-batch size and virtual stages. The pruned path (``prune=True``) returns exactly what pricing every
    candidate on its own (``Plan``, then ``evaluate``, then the step time of those that fit: ``prune=False``) returns:
    the same kept plans with the same reports and step times, the same rejections with the same messages, in the
    same order. Why:

    (1) ``Plan.__post_init__`` reads the recompute mode only to check that the ledger and the model take it
        (``construct.recompute_refusal``, which reads neither the mesh nor the workload, and which the plan checks
        before anything they could fail: asked once per mode, a refused mode is rejected with its message), and EP
        only to check that it divides the experts and that a dense model has none (``search``'s EP sizes are
        divisors of the experts, 1 for a dense model): whether a plan of an accepted mode can be built, and the first
        rule it fails with its message, depend on tp × cp × pp × dp, the ZeRO stage, the workload and the virtual
        stages alone. One ``Plan`` per tp × cp × pp × dp, ZeRO stage, micro-batch size and virtual stages answers for
        every accepted recompute mode and EP size.
    (2) ``evaluate``'s memory is the most-loaded stage's: max over the stages k of states_k + activations_k, where
        states_k (``evaluation._stage_states``) reads the mesh shape, EP included, the ZeRO stage, the ledger and the
        stage's parameters, never the recompute mode, micro-batch size or virtual stages; and activations_k
        (``evaluation._stage_activations``) reads tp, cp, pp, dp, the recompute mode, b, m (= B ÷ (dp × b)), v, the
        ledger and the stage, never the ZeRO stage or EP. The pruned path computes each with those very functions,
        once per the settings it reads (states per shape and ZeRO stage; activations per tp × cp × pp × dp, b, v and
        recompute mode), and adds them as ``evaluate`` does (states, then activations; the same floats in the same
        order, so the same total to the bit). A plan whose floor is over the GPU's memory is rejected with
        ``evaluate``'s number and never built nor evaluated.
    (3) A plan over no floor is built, and its peak priced from its stages' moments (``evaluation.stage_peak``:
        each moment priced once per what it reads, in ``memo``, and its total with the saved bytes added by the
        additions ``Moment.total`` makes: ``evaluate``'s peak and stage to the bit); one over the device is rejected
        with ``evaluate``'s message (``peak_line``). One that fits is timed from its ``StepInputs``
        (``evaluation.step_inputs``, which ``evaluate`` copies into the report, with the most-loaded stage's model
        states), each micro-batch time kept by all it reads (``steptime._slowest_stage``'s memo); its report is built
        when it is read and must repeat the search's total and verdict (``Candidate.report``).
    """

    def __init__(
        self,
        spec: ModelSpec,
        hw: Hardware,
        acc: Accounting,
        ex: Execution,
        balance: str,
        prune: bool,
        recompute: tuple[str, ...],
        precision: str = "bf16",
    ):
        self.spec, self.hw, self.acc, self.ex, self.balance, self.prune = spec, hw, acc, ex, balance, prune
        self.precision = precision
        self.mem = hw.gpu_memory_bytes
        # the recompute modes Plan refuses for this model and ledger whatever the mesh (construct.recompute_refusal)
        self.refused = {rc: why for rc in recompute if (why := recompute_refusal(spec, acc, rc))}
        self.ranked: list[Candidate] = []
        # the rejections, as records of (settings, the recompute modes they hold for, reason): ``Rejections``
        self.rejected: list[tuple[dict[str, Any], tuple[str, ...], Reason]] = []
        self.verdicts: dict[tuple[int, int, int], Reason | None] = {}  # (zero, b, v) → why not, or None
        # (b, v, recompute) → (bytes per stage, what the last stage's loss and head free before its layers' backward,
        # the stages that can hold a maximum: _leaders)
        self.activations: dict[tuple[int, int, str], tuple[list[float], float, tuple[int, ...]]] = {}
        # ZeRO stage → (bytes, gradient bytes, terms) per stage
        self.states: dict[int, tuple[list[float], list[float], list[dict[str, float]]]] = {}
        self.moments: Moments = {}  # the stages' moments without saved bytes (evaluation._base_moments), per EP size
        self.recompute = recompute
        self.bound = math.inf  # a bounded search's bound (``_branch_and_bound``): slower plans are left unpriced
        self._by_shape: dict[tuple, tuple[dict, dict]] = {}  # (tp, cp, pp, dp) → (verdicts, activations)
        self._by_experts: dict[tuple, tuple[dict, Moments]] = {}  # (tp, cp, pp, dp, ep) → (states, moments)
        self.micro_batches: dict = {}  # micro-batch times (steptime's _slowest_stage), for the whole search
        self._bases: dict[tuple, tuple[Plan, Any]] = {}  # a block's plan and TimeInputs, from its coarse floors

    def enter(self, dims: ParallelDims, keep: bool) -> None:
        """Price the groups of mesh ``dims`` next: what (1) and (2) share across its EP sizes is kept per
        tp × cp × pp × dp, the model states and the moments per EP size too. Without ``keep`` (a search that prices
        every plan in enumeration order) what belongs to other meshes is forgotten; with it (a pruned search, which
        comes back to a mesh in the order of its bounds) it is kept for the search."""
        shape, experts = (dims.tp, dims.cp, dims.pp, dims.dp), (dims.tp, dims.cp, dims.pp, dims.dp, dims.ep)
        if not keep:
            for store, key in ((self._by_shape, shape), (self._by_experts, experts)):
                if key not in store:
                    store.clear()
        self.verdicts, self.activations = self._by_shape.setdefault(shape, ({}, {}))
        self.states, self.moments = self._by_experts.setdefault(experts, ({}, {}))

    def floors(
        self, dims: ParallelDims, workload: Workload, lps, groups: list[tuple[int, int, int]], coarse: bool = False
    ) -> dict:
        """A lower bound on the step time of every plan of ``groups`` ((enumeration index, ZeRO stage, virtual
        stages) of mesh ``dims`` and ``workload``), per virtual-stage count and recompute mode the ledger and model
        take: ``steptime.step_time_floors``, which reads neither the ZeRO stage nor the model states (one valid plan
        of the block, copied per mode, serves them all). Empty when no plan of the groups can be built, or no mode is
        taken: their rejections are what pricing them gives. ``coarse``: the floors without recomputation alone,
        keyed (v, "none"), a lower bound on every mode's (``COARSE_FLOOR``), or every mode's under DualPipe."""
        accepted = [rc for rc in self.recompute if rc not in self.refused]
        if not accepted:
            return {}
        block = (dims, workload.micro_batch_size)
        if block in self._bases:  # the block's coarse floors found its plan: its modes' floors read the same one
            known, known_inputs = self._bases.pop(block)
            return self._floors(known, known_inputs, groups, accepted)
        base: Plan | None = None
        self.enter(dims, keep=True)  # the verdicts found here are the pricing's (1): one Plan per group either way
        for _, zero, v in groups:
            key = (zero, workload.micro_batch_size, v)
            if self.verdicts.get(key, None) is not None:
                continue
            try:
                base = self._build(dims, workload, zero, v, lps, accepted[0])
                self.verdicts[key] = None
                break
            except PlanError as exc:
                self.verdicts[key] = _reason(exc)
        if base is None:
            return {}
        inputs = time_inputs(base)
        if coarse and self.ex.pipeline != "dualpipe":
            self._bases[block] = (base, inputs)
            accepted = [COARSE_FLOOR]
        return self._floors(base, inputs, groups, accepted)

    def _floors(self, base: Plan, inputs, groups: list[tuple[int, int, int]], accepted: list[str]) -> dict:
        probes = []
        for rc in accepted:
            probe = copy.copy(base)
            object.__setattr__(probe, "recompute", rc)
            probes.append(inputs.for_recompute(probe))
        chunks = dict.fromkeys(v for _, _, v in groups)
        if self.ex.pipeline == "dualpipe":  # DualPipe's micro-batch reads the chunk count (it runs at v = 1 alone)
            got: dict[tuple[int, str], float] = {}
            for v in chunks:
                at_v = []
                for one in probes:
                    plan = copy.copy(one.plan)
                    object.__setattr__(plan, "virtual_stages", v)
                    at_v.append(one._replace(plan=plan))
                got.update(step_time_floors(at_v, (v,), self.ex, None, self.micro_batches))
        else:
            got = step_time_floors(probes, chunks, self.ex, None, self.micro_batches)
        # a floor that is not a finite number (a hardware rate too small for one) prunes nothing: pricing the plan
        # raises the step-time model's own error naming the rate
        return {k: low if math.isfinite(low) else -math.inf for k, low in got.items()}

    def _build(self, dims, workload, zero, v, lps, rc) -> Plan:
        return Plan(
            model=self.spec,
            dims=dims,
            workload=workload,
            hardware=self.hw,
            accounting=self.acc,
            zero=zero,
            recompute=rc,
            virtual_stages=v,
            layers_per_stage=lps,
            stage_balance=self.balance,
            precision=self.precision,
        )

    def reject(self, settings: dict[str, Any], recompute: tuple[str, ...], reason: Reason) -> None:
        """Reject the plans of ``settings`` in every mode of ``recompute`` for ``reason``."""
        self.rejected.append((settings, recompute, reason))

    def group(
        self,
        dims: ParallelDims,
        workload: Workload,
        zero: int,
        v: int,
        lps: tuple[int, ...] | None,
        recompute: tuple[str, ...],
    ) -> None:
        """Price the plans of one group, one per recompute mode, in that order."""
        b = workload.micro_batch_size
        settings: dict[str, Any] = {
            "tp": dims.tp,
            "cp": dims.cp,
            "pp": dims.pp,
            "dp": dims.dp,
            "ep": dims.ep,
            "zero": zero,
        }
        settings.update(recompute="", micro_batch_size=b, virtual_stages=v)

        def build(rc: str) -> Plan:
            if self.prune:  # one plan of the group validated, the others copied (proof (1))
                for other in plans.values():
                    return other.with_recompute(rc)
            return self._build(dims, workload, zero, v, lps, rc)

        plans: dict[str, Plan] = {}
        if not self.prune:
            for rc in recompute:
                here = {**settings, "recompute": rc}
                try:
                    plan = build(rc)
                except PlanError as exc:
                    self.rejected.append((here, (rc,), _reason(exc)))
                    continue
                self._keep_if_it_fits(plan, here)
            return
        accepted = [rc for rc in recompute if rc not in self.refused]
        if accepted and (zero, b, v) not in self.verdicts:  # (1)
            try:
                plans[accepted[0]] = build(accepted[0])
                self.verdicts[zero, b, v] = None
            except PlanError as exc:
                self.verdicts[zero, b, v] = _reason(exc)
        reason = self.verdicts.get((zero, b, v))
        for rc in recompute:  # (2)
            here = {**settings, "recompute": rc}
            if rc in self.refused:  # the ledger or the model refuses the mode whatever the mesh: Plan checks it first
                self.rejected.append((here, (rc,), ("plan", self.refused[rc], False)))
                continue
            if reason is not None:
                self.rejected.append((here, (rc,), reason))
                continue
            found = self.activations.get((b, v, rc))
            if found is None:
                plan = plans[rc] = plans.get(rc) or build(rc)
                acts_ = _stage_activation_bytes(plan)
                found = self.activations[b, v, rc] = (acts_, freed_at_the_head(plan), _leaders(plan, acts_))
            acts, freed, leaders = found
            got = self.states.get(zero)
            if got is None:
                plan = plans[rc] = plans.get(rc) or build(rc)
                got = self.states[zero] = _stage_states_bytes(plan)
            states, grads, terms = got
            # the floor and the total over the stages that can hold their maximum (_leaders), in stage order
            ls = [states[k] for k in leaders]
            la = [acts[k] for k in leaders]
            total = max(s + a for s, a in zip(ls, la))
            floor = memory_floor(self.acc.name, ls, [grads[k] for k in leaders], la, freed)
            why = floor_reason(self.acc.name, self.hw, dims, floor) if math.isfinite(floor) else ""
            if why:
                self.rejected.append((here, (rc,), ("memory", why, False)))
            elif not math.isfinite(floor):  # evaluate names a total too large for a float
                self._keep_if_it_fits(plans.get(rc) or build(rc), here)
            else:
                self._price(plans.get(rc) or build(rc), here, states, acts, terms, total, leaders)

    def _price(
        self,
        plan: Plan,
        settings: dict[str, Any],
        states: list[float],
        acts: list[float],
        terms: list[dict[str, float]],
        total: float,
        leaders: tuple[int, ...],
    ) -> None:
        """(3) A plan over no floor: its peak from the stages' moments (``evaluation.stage_peak``, ``evaluate``'s
        numbers to the bit; the lab's verdict is its total, which the floor has checked), and if it fits, its step
        time from its ``StepInputs`` with the reported stage's model states: the most-loaded stage, as ``evaluate``
        finds it from the same sums. Its report is built when it is read (``Candidate.report``). In a bounded
        search (``self.bound`` finite) its step time less the optimizer's term comes first (``time_report``: the
        same terms, the last one zero, so never more than the step time), and a plan slower than the bound is left
        there, neither ranked nor checked at its peak."""
        k_mem, most = 0, -math.inf  # the most-loaded stage, the first of equals (evaluate's k_mem)
        for k in leaders:
            if states[k] + acts[k] > most:
                k_mem, most = k, states[k] + acts[k]
        # a bounded search: the step time less the optimizer's term (``time_report``) must be at most the bound
        if (
            self.bound < math.inf
            and step_time(time_report(plan), self.ex, None, self.micro_batches).total_s > self.bound
        ):
            return
        if self.acc.name != "lab":
            peak, k, moment = stage_peak(plan, terms, acts, self.moments)
            room = memory_budget(self.acc.name, self.hw, plan.dims, peak)
            if not room.fits:
                why = peak_line(peak, moment, k, plan.pp, room)
                self.rejected.append((settings, (plan.recompute,), ("memory", why, False)))
                return
        step = step_time(step_inputs(plan, terms[k_mem]), self.ex, None, self.micro_batches)
        self.ranked.append(Candidate(plan, step, self.ex, total))

    def _keep_if_it_fits(self, plan: Plan, settings: dict[str, Any]) -> None:
        """Evaluate ``plan``; keep it with its step time if it fits, else reject it for memory (the reference path,
        and the pruned one's for a total too large for a float, which ``evaluate`` names)."""
        report = evaluate(plan)
        if report.fits:
            step = step_time(report, self.ex)
            self.ranked.append(Candidate(plan, step, self.ex, report.memory_bytes["total"], report))
        else:
            self.rejected.append((settings, (plan.recompute,), ("memory", memory_reason(report), False)))


def search(
    model,
    gpus: int,
    seq: int,
    global_batch: int,
    gpus_per_node: int | None = None,
    gpu_memory_bytes: float | None = None,
    order: str | None = None,
    max_cp: int = 32,
    min_seq_per_cp_rank: int = MIN_SEQ_PER_CP_RANK,
    uneven_stages: bool = True,
    hardware: Hardware | str | None = None,
    accounting: Accounting | str = "lab",
    zero_stages=ZERO_STAGES,
    recompute=RECOMPUTE,
    micro_batch_sizes=MICRO_BATCH_SIZES,
    virtual_stages=AUTO_VIRTUAL_STAGES,
    execution: Execution | None = None,
    band: float | None = None,
    stage_balance: str | None = None,
    precision: str = "bf16",
    gpus_per_host: int | None = None,
    grad_dtype: str | None = None,
    top: int | None = None,
    _prune: bool = True,
) -> SearchResult:
    """Enumerate every plan of ``model`` on ``gpus`` GPUs for sequences of ``seq`` tokens and a global batch of
    ``global_batch`` sequences; keep those that pass every constraint and fit, ranked by ``step_time`` under
    ``execution`` (default: the ``accounting`` ledger's engine, ``steptime.execution_for``); ``band`` (default: the
    stored ``tie_band()``) sets which step times count as ties. ``stage_balance`` places what lies outside the
    decoder layers (``Plan.stage_balance``); default: where the ledger's engine places it (``stage_balance_for``:
    the embedding on the first stage and the head on the last for the engine ledgers, spread evenly for the lab's).
    ``grad_dtype`` (``Plan.create``'s; None: the ledger's own) is every candidate's gradient dtype: with ``"bf16"``
    the megatron ledger's ZeRO-2/3 plans are rejected under ``"plan"``, as Megatron-FSDP does not read the flag.
    ``order`` (default: the ledger's engine's rank order, ``Accounting.order``: Megatron-LM's ``tp-cp-ep-dp-pp`` for
    the engine ledgers, which keeps EP inside the NVLink domain before DP, ``tp-cp-pp-dp`` for the lab's) is the
    mesh order of every candidate. ``precision`` (``Plan.precision``: bf16, fp8, mxfp8) is the GEMM format every
    candidate trains in; a precision the machine or the ledger refuses (``construct.precision_refusal``) is a
    PlanError naming ``precision``.

    ``top``: None (the default) prices every plan and ranks every one that fits; a count N bounds the search
    (module docstring, "Bounded search"): it ranks the N fastest and every plan within the model's largest ratio
    error of the fastest exactly as the full search does, and leaves the rest once a lower bound on their step
    time is above that (``SearchResult.unranked``), as ``meshplan search --top N`` runs it.

    ``virtual_stages``: by default (``"layers"``) every count the stage's layers allow (``virtual_stage_counts``),
    or the counts given (each tried on every pipeline shape, and rejected where the layers do not split).
    Duplicates are not enumerated: ZeRO stages > 0 only when dp × cp > 1, virtual stages > 1 only with
    pp > 1, EP > 1 only for MoE models. Every argument is validated as ``Plan.create`` validates it (a
    ``MeshplanError``, a ValueError, naming it): the GPU count and order by ``ParallelDims``, the sequence by
    ``Workload``, the same memory, node, stage and recompute rules, so ``search`` never silently finds nothing for a
    bad input. ``_prune=False`` prices every candidate on its own: the reference the pruned search equals
    (``_Pricer``; the tests hold them to it).
    """
    spec = load_model(model)
    acc = get_accounting(accounting)
    if grad_dtype is not None:
        acc = acc.with_grad_dtype(grad_dtype)
    order = acc.order if order is None else order
    ParallelDims.from_gpus(gpus, order=order)  # the GPU count, then the order, as Plan.create checks them
    Workload(seq)
    check_count("global_batch", global_batch, MAX_GLOBAL_BATCH)
    check_count("max_cp", max_cp, MAX_GPUS)
    check_non_negative_int("min_seq_per_cp_rank", min_seq_per_cp_rank)
    if top is not None:
        check_count("top", top)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    hw = hw.with_overrides(gpu_memory_bytes, gpus_per_node, gpus_per_host)
    ex = execution_for(acc.name) if execution is None else execution
    if not isinstance(ex, Execution):
        raise MeshplanError(f"execution={execution!r} must be a steptime.Execution", "execution")
    band = tie_band() if band is None else band
    if isinstance(band, bool) or not isinstance(band, (int, float)) or not 0 <= band < 1:
        raise MeshplanError(f"band={band!r} must be a fraction from 0 to 1", "band")
    balance = (
        stage_balance_for(acc) if stage_balance is None else check_choice("stage_balance", stage_balance, BALANCES)
    )
    gpn = hw.gpus_per_node
    check_nodes(gpus, gpn, partial=True)
    why = precision_refusal(hw, acc, precision)
    if why:
        raise PlanError(why, "precision")
    zero_stages = _check_choices("zero_stages", zero_stages, ZERO_STAGES)
    recompute = _check_choices("recompute", recompute, (*RECOMPUTE_MODES, OP_RECOMPUTE))
    micro_batch_sizes = tuple(check_count("micro_batch_sizes entry", b) for b in micro_batch_sizes)
    auto = isinstance(virtual_stages, str)
    if auto and virtual_stages != AUTO_VIRTUAL_STAGES:
        raise MeshplanError(
            f"virtual_stages={virtual_stages!r} must be {AUTO_VIRTUAL_STAGES!r} (every count the layers allow) or a "
            "sequence of counts",
            "virtual_stages",
        )
    virtual_stages = () if auto else tuple(check_count("virtual_stages entry", v) for v in virtual_stages)
    if not micro_batch_sizes or not (auto or virtual_stages):
        raise MeshplanError("micro_batch_sizes and virtual_stages need at least one value each", "micro_batch_sizes")
    L = spec.num_layers
    shapes = _shapes(spec, gpus, gpn, max_cp)
    layouts = {pp: None if L % pp == 0 or not uneven_stages else spread_layers(L, pp) for pp in {s[2] for s in shapes}}
    vs_of = {
        pp: virtual_stage_counts(L, pp, lps) if auto else virtual_stages if pp > 1 else (1,)
        for pp, lps in layouts.items()
    }
    n = add_up(
        len(eps) * (len(zero_stages) if dp * cp > 1 else 1) * len(vs_of[pp]) for _, cp, pp, dp, eps in shapes
    ) * (len(micro_batch_sizes) * len(recompute))
    if n > MAX_PLANS:
        raise MeshplanError(_too_many(spec, gpus, n, shapes), "gpus")
    pricer = _Pricer(spec, hw, acc, ex, balance, _prune, recompute, precision)
    pruned = top is not None
    margin = max(band, ratio_uncertainty()) if pruned else 0.0
    # a pruned search's blocks: (mesh, workload, stage layout, [(enumeration index, ZeRO stage, virtual stages)]);
    # and where each stretch of its rejections falls in enumeration order
    blocks: list[tuple[ParallelDims, Workload, tuple[int, ...] | None, list[tuple[int, int, int]]]] = []
    stretches: list[tuple[int, int, int]] = []
    index = 0
    for tp, cp, pp, dp, eps in shapes:
        lps = layouts[pp]
        # the search's own policies, which are not rules of a plan
        policy: Reason | None = None
        if tp > gpn:
            policy = ("tp inside a node", f"tp={tp} > {gpn} GPUs per node: a TP group would cross nodes", False)
        elif cp > 1 and seq // cp < min_seq_per_cp_rank:
            policy = (
                "cp chunk",
                f"cp={cp} leaves {seq // cp:,} tokens per CP rank, fewer than {min_seq_per_cp_rank:,}",
                False,
            )
        # the parts the candidates of this shape share, each built (and validated) once
        works = {b: _workload(global_batch, dp, seq, b) for b in micro_batch_sizes}
        for ep in eps:
            dims = ParallelDims(tp, cp, pp, dp, ep, order=order)
            if not pruned:
                pricer.enter(dims, keep=False)
            per_b: dict[int, list[tuple[int, int, int]]] = {}
            for zero in zero_stages if dp * cp > 1 else (0,):
                for b in micro_batch_sizes:
                    for v in vs_of[pp]:
                        index += 1
                        workload = works[b]
                        reason = policy or (_reason(workload) if isinstance(workload, PlanError) else None)
                        if reason is not None:
                            settings: dict[str, Any] = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": ep, "zero": zero}
                            settings.update(recompute="", micro_batch_size=b, virtual_stages=v)
                            start = len(pricer.rejected)
                            pricer.reject(settings, recompute, reason)
                            stretches.append((index, start, len(pricer.rejected)))
                        elif pruned:
                            per_b.setdefault(b, []).append((index, zero, v))
                        else:
                            assert isinstance(workload, Workload)
                            pricer.group(dims, workload, zero, v, lps, recompute)
            for b, groups in per_b.items():
                work = works[b]
                assert isinstance(work, Workload)
                blocks.append((dims, work, lps, groups))
    bound = math.inf
    if pruned:
        assert top is not None
        bound = _branch_and_bound(pricer, blocks, stretches, top, margin)
        order_ = sorted(stretches)
        pricer.rejected = [r for _, a, z in order_ for r in pricer.rejected[a:z]]
    ranked = [c for c in pricer.ranked if c.step.total_s <= bound]
    ranked.sort(
        key=lambda c: (
            c.step.total_s,
            c.memory_total,
            c.plan.tp,
            c.plan.cp,
            c.plan.pp,
            c.plan.ep,
            c.plan.zero,
            (*RECOMPUTE, OP_RECOMPUTE).index(c.plan.recompute),
            c.plan.micro_batch_size,
            c.plan.virtual_stages,
        )
    )
    return SearchResult(
        spec,
        gpus,
        seq,
        global_batch,
        tuple(ranked),
        Rejections(tuple(pricer.rejected)),
        n,
        band,
        acc.name,
        ex,
        balance,
        precision,
        order,
        top,
        bound,
        n - len(ranked) - add_up(len(r[1]) for r in pricer.rejected),
        margin,
        hw.name,
    )


def _branch_and_bound(
    pricer: _Pricer,
    blocks: list[tuple[ParallelDims, Workload, tuple[int, ...] | None, list[tuple[int, int, int]]]],
    stretches: list[tuple[int, int, int]],
    top: int,
    margin: float,
) -> float:
    """Price the blocks of a pruned search (one mesh, EP size and micro-batch size each) in the order of their
    step-time floors (``_Pricer.floors``), each block's groups in enumeration order, until the next floor is above
    the bound: the ``top``-th fastest step time found so far, or the fastest's × (1 + ``margin``), whichever is
    larger (infinite while fewer than ``top`` plans fit). The bound only falls as plans are found, and every plan
    left has a floor above it, so every plan at or below the final bound has been priced: the search's ranking up
    to that bound is the full search's. Returns the final bound; appends each priced group's stretch of rejections
    (enumeration index, start, end) to ``stretches``."""
    # (floor, block, whether its floors are each mode's): first the coarse floor of every block (COARSE_FLOOR),
    # each mode's when the block comes up
    heap: list[tuple[float, int, bool]] = []
    floors: list[dict[tuple[int, str], float]] = []
    for i, (dims, work, lps, groups) in enumerate(blocks):
        got = pricer.floors(dims, work, lps, groups, coarse=True)
        floors.append(got)
        # under DualPipe the coarse floors are already each mode's (``_Pricer.floors``)
        heap.append((min(got.values()) if got else -math.inf, i, not got or pricer.ex.pipeline == "dualpipe"))
    heapq.heapify(heap)
    fastest: list[float] = []  # the negated ``top`` fastest step times found (a max-heap)
    best, bound = math.inf, math.inf
    while heap and heap[0][0] <= bound:
        _, i, each = heapq.heappop(heap)
        dims, work, lps, groups = blocks[i]
        if not each:
            floors[i] = pricer.floors(dims, work, lps, groups)
            heapq.heappush(heap, (min(floors[i].values()) if floors[i] else -math.inf, i, True))
            continue
        pricer.enter(dims, keep=True)
        for index, zero, v in groups:
            # the modes whose floor is at most the bound (a refused mode has none: pricing rejects it)
            modes = tuple(rc for rc in pricer.recompute if floors[i].get((v, rc), -math.inf) <= bound)
            if not modes:
                continue
            start, found = len(pricer.rejected), len(pricer.ranked)
            pricer.group(dims, work, zero, v, lps, modes)
            stretches.append((index, start, len(pricer.rejected)))
            for c in pricer.ranked[found:]:
                t = c.step.total_s
                best = min(best, t)
                if len(fastest) < top:
                    heapq.heappush(fastest, -t)
                elif t < -fastest[0]:
                    heapq.heapreplace(fastest, -t)
            if len(fastest) == top:
                bound = pricer.bound = max(-fastest[0], best * (1 + margin))
    return bound


def format_search(result: SearchResult, top: int = 10) -> str:
    """The table ``meshplan search`` prints: the top plans with their tied rank, step-time terms and MFU, then the
    rejections."""
    ex = result.execution
    band = fit_data()["tie_band"]
    counts = (
        f"{result.enumerated:,} plans, {len(result.ranked):,} kept, {len(result.rejected):,} rejected"
        if result.top is None
        else f"{result.enumerated:,} plans, {len(result.ranked):,} ranked (every plan that fits and takes at most "
        f"{result.bound_s:.3f} s), {result.unranked:,} slower or not priced, {len(result.rejected):,} rejected"
    )
    lines = [
        f"{result.model.name} on {result.gpus:,} GPUs, s = {result.seq:,}, global batch {result.global_batch:,} "
        f"sequences: {counts}",
        f"ledger {result.accounting}; rank order {result.order} (inner to outer); attention {ex.attention}, "
        f"TP overlap {ex.tp_overlap}, DP overlap {'on' if ex.dp_overlap else 'off'}, pipeline {ex.pipeline}; "
        "embedding and head "
        + ("on the first and last stages" if result.stage_balance == "max" else "spread over the stages")
        + ("" if result.precision == "bf16" else f"; {result.precision} GEMMs (attention and the output head in bf16)"),
        f"plans within {fmt_pct(result.band, 0)} of a faster plan's step time share its rank: "
        + (
            "the model's median error on the step-time ratio of two published runs of one model on one machine "
            f"(absolute step times: median {fmt_pct(band['absolute_median_error'], 1)} off on held-out runs)"
            if result.band == band["value"]
            else "the band given to the search"
        ),
    ]
    gaps = band_regime_gaps(result.model, result.precision, result.hardware)
    if gaps and result.band == band["value"]:
        lines.append(
            f"the band and the {fmt_pct(ratio_uncertainty(), 0)} below are measured on dense models training in "
            f"{' and '.join(BAND_REGIME['precision'])} on {' and '.join(BAND_REGIME['hardware'])}; this search is "
            f"outside them ({', '.join(gaps)}): the model's error on its step-time ratios is not measured there, so "
            "close ranks are less certain than they read"
        )
    if result.ranked:  # how many plans the model cannot tell from the fastest (the plan checker's search line)
        u, best = ratio_uncertainty(), result.ranked[0].step.total_s
        close = sum(1 for c in result.ranked if c.step.total_s / best - 1 <= u)
        of = f"of the {len(result.ranked):,} kept plans " if result.top is None else "plans "
        lines.append(
            f"{close:,} {of}are within {fmt_pct(u, 0)} of the fastest's "
            f"{best:.2f} s, the model's largest error on such a ratio: it cannot tell them apart"
        )
    lines.append("")
    shown = list(zip(result.tied_ranks(), result.ranked, strict=True))[:top]
    width = max([len(c.label()) for _, c in shown] + [len("plan")]) + 2
    names = {"dp_exposed_s": "dp", "optimizer_s": "optim"}
    # the lab page's total, or an engine's allocated peak (what its verdict is on)
    key, head = ("total", "memory") if result.accounting == "lab" else ("peak_allocated", "peak")
    lines.append(
        f"{'#':>4}  {'plan':<{width}}{head:>10}{'step s':>9}{'MFU':>8}  "
        + "  ".join(f"{names.get(t, t[:-2]):>7}" for t in TERMS)
    )
    for rank, c in shown:
        terms = "  ".join(f"{x:7.3f}" for x in c.step.terms().values())
        lines.append(
            f"{rank:>4}  {c.label():<{width}}{fmt_gb(c.report.memory_bytes[key]):>10}"
            f"{c.step.total_s:9.3f}{fmt_pct(c.mfu(), 1):>8}  {terms}"
        )
    lines += ["", "rejected plans, by the first constraint they fail:"]
    examples = result.rejection_examples()
    for constraint, count in result.rejections_by_constraint().items():
        lines.append(f"  {constraint:<18}{count:>8,}  e.g. {examples[constraint].message}")
    if result.top is not None:
        lines.append(
            f"  {'not ranked':<18}{result.unranked:>8,}  a step time above {result.bound_s:.3f} s (the {result.top:,} "
            f"fastest and every plan within {fmt_pct(result.margin, 0)} of the fastest are ranked): most never "
            "priced, as a lower bound on their step time is above it, so they are not checked for memory either"
        )
    return "\n".join(lines)
