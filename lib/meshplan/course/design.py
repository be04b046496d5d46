"""Plan design: check a whole plan line by line, as the lab page asks, and place it in the plan search.

The lab page asks a reader who writes a plan (TP, CP, PP, DP, ZeRO stage, recomputation, micro-batch size b,
micro-batches m) for a model, a GPU count and a global batch of B sequences to check five lines; the sixth compares
with the library's search. Each function returns a ``widgets.Line``: the line's name, whether it passes, and the
reason with its numbers (GB = 10⁹ B).

* **memory fits** (``memory_line``): the most-loaded pipeline stage's model states + activations, in the plan's
  ledger, at most the GPU's memory.
* **TP inside a node** (``tp_line``): every TP group on one node, so its per-layer collectives use NVLink.
* **links** (``links_line``): the link each dimension's group uses; fails when a collective that blocks every
  layer crosses InfiniBand: TP's, EP's all-to-all, or CP's K/V ring where what outlasts the attention it overlaps
  (``steptime``'s exposed CP term) is at least ``EXPOSED_SHARE`` (1 %) of the step. PP's boundary sends and the
  DP/ZeRO synchronisation may cross it: they move far fewer bytes per layer (PP) or overlap the backward (DP).
* **acceptable bubble** (``bubble_line``): (p−1)/(m·v) ≤ ``BUBBLE_THRESHOLD`` = 10 % of the ideal compute time.
  A threshold is a judgement, not a law; this one is what tuned runs accept: the pipelines of Narayanan et al.
  2021 Table 1, each tuned for throughput, idle 3.6–12.3 % (``narayanan_bubbles``).
* **global batch** (``batch_line``): dp × b × m = B, with dp = GPUs ÷ (tp × cp × pp).
* **the search** (``search_line``): the plan's rank among the plans ``search.search`` keeps, with ties (plans
  within the model's tie band share a rank), and its step time against the fastest; passes when it is within the
  model's uncertainty of the fastest (``search.ratio_uncertainty``, 10 %: its largest error on the step-time ratio of
  two held-out published runs of one model on one machine), whatever its rank.

``check_plan(plan, global_batch, result)`` runs every line on one plan; ``plan_checklist(...)`` builds the
chapter's ``widgets.Checklist``, whose every line reads only the controls it needs (small tables, a light page);
``setting_plan`` is the plan one of its settings describes, ``with_global_batch`` a setting whose m fills the batch.

    >>> from meshplan import Plan
    >>> p = Plan.create("qwen3.8-27b", gpus=8, zero=3, recompute="full", micro_batches=8)
    >>> for line in check_plan(p, global_batch=64):
    ...     print(line.text)
    ✓ memory fits: states 55.6 + activations 2.7 = 58.2 GB ≤ 80 GB
    ✓ TP inside a node: no TP (tp = 1)
    ✓ links: DP 8 NVLink; nothing crosses InfiniBand
    ✓ acceptable bubble: no pipeline (pp = 1), no bubble
    ✓ global batch: dp × b × m = 8 × 1 × 8 = 64 = B
"""

from __future__ import annotations

import inspect
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshplan.core.units import GB, fmt_gb, fmt_int, fmt_pct
from meshplan.parallel.pp import bubble_fraction
from meshplan.plan import TRAFFIC, Plan, Workload, evaluate
from meshplan.plan.evaluation import memory_reason, peak_reason
from meshplan.plan.reporting import TRAFFIC_LABELS, link_name
from meshplan.search import SearchResult, ratio_uncertainty, search, settings_key, tied_ranks
from meshplan.spec.accounting import get_accounting
from meshplan.spec.dims import ParallelDims
from meshplan.spec.hardware import Hardware, load_hardware
from meshplan.spec.mesh import INFINIBAND, Mesh
from meshplan.spec.model import load_model
from meshplan.steptime import step_time
from meshplan.steptime.fitting import FIT_SET, published_runs, run_plan
from meshplan.widgets.exercise import Check, Checklist, Line

BUBBLE_THRESHOLD = 0.10  # (p−1)/(m·v) of the ideal compute time; see the module docstring
EXPOSED_SHARE = 0.01  # CP's ring fails the links line when what outlasts the attention is ≥ 1 % of the step
BLOCKING = ("tp", "ep")  # collectives inside every layer that nothing overlaps by default (steptime.Execution)
NAMES = {
    "memory": "memory fits",
    "tp": "TP inside a node",
    "links": "links",
    "bubble": "acceptable bubble",
    "batch": "global batch",
    "search": "the search",
}

__all__ = [
    "BUBBLE_THRESHOLD",
    "NAMES",
    "Placement",
    "batch_line",
    "bubble_line",
    "check_plan",
    "links_line",
    "memory_line",
    "narayanan_bubbles",
    "placement",
    "plan_checklist",
    "search_line",
    "setting_plan",
    "tp_line",
    "with_global_batch",
]


# ---------------------------------------------------------------- the lines
def memory_line(plan: Plan) -> Line:
    """Memory against the GPU's. The lab page's ledger: the most-loaded pipeline stage's own model states plus its
    own activations against the GPU's memory. An engine's ledger: the step's allocated peak (``parallel.peak``), at
    its moment and stage, with the verdict on what the device exposes (``evaluation.memory_budget``)."""
    r = evaluate(plan)
    mem = r.memory_bytes
    if plan.accounting.name != "lab" and r.headroom is not None:
        sp = r.by_stage[r.peak_stage]
        where = f", stage {sp.index + 1} of {plan.pp}" if plan.pp > 1 else ""
        return Line(
            NAMES["memory"],
            r.fits,
            f"peak {fmt_gb(mem['peak_allocated'])} ({sp.peak.name}{where}): {r.headroom.verdict}",
        )
    where = f" (stage {r.stage + 1} of {plan.pp})" if plan.pp > 1 else ""
    sign = "≤" if r.fits else ">"
    return Line(
        NAMES["memory"],
        r.fits,
        f"states {mem['model_states'] / GB:,.1f} + activations {mem['activations'] / GB:,.1f} = "
        f"{fmt_gb(mem['total'])} {sign} {fmt_gb(plan.gpu_memory_bytes, 0)}{where}",
    )


def tp_line(dims: ParallelDims, gpus_per_node: int) -> Line:
    """Every TP group inside one node of ``gpus_per_node`` GPUs (the mesh's own link for the TP axis)."""
    name = NAMES["tp"]
    if dims.tp == 1:
        return Line(name, True, "no TP (tp = 1)")
    link = Mesh.from_dims(dims, gpus_per_node).link("tp")
    if link == INFINIBAND:
        why = (
            f"tp = {dims.tp} > {gpus_per_node} GPUs per node"
            if dims.tp > gpus_per_node
            else f"in the order {dims.order} a TP group straddles a node boundary"
        )
        return Line(name, False, f"{why}: TP's per-layer collectives would cross InfiniBand")
    return Line(name, True, f"TP {dims.tp} within a node of {gpus_per_node} GPUs: NVLink")


def links_line(plan: Plan) -> Line:
    """The link of every dimension that communicates; fails when TP or EP, whose collectives block every layer,
    crosses InfiniBand, or CP's K/V ring does where the step-time model finds it outlasting the attention."""
    r = evaluate(plan)
    used = [k for k in TRAFFIC if r.link[k]]
    if not used:
        return Line(NAMES["links"], True, "no communication (one GPU)")
    sizes = ", ".join(f"{TRAFFIC_LABELS[k]} {plan.dims.size(k)} {link_name(r.link[k], short=True)}" for k in used)
    crossing = [k for k in used if r.link[k] == INFINIBAND]
    if not crossing:
        return Line(NAMES["links"], True, f"{sizes}; nothing crosses InfiniBand")
    bad = [k for k in crossing if k in BLOCKING]
    notes = []
    if "cp" in crossing:
        st = step_time(r)
        if st.cp_s >= EXPOSED_SHARE * st.total_s:
            bad.append("cp")
            notes.append(f"CP's K/V ring outlasts the attention by {st.cp_s:.2f} s per step")
        else:
            notes.append("CP's K/V ring hides under the attention")
    crossed = ", ".join(TRAFFIC_LABELS[k] for k in crossing)
    if bad:
        blocked = ", ".join(TRAFFIC_LABELS[k] for k in dict.fromkeys(bad))
        reason = f"{sizes}; {blocked} cross{'es' if len(bad) == 1 else ''} InfiniBand inside every layer"
    else:
        reason = f"{sizes}; crossing InfiniBand: {crossed}, none inside every layer"
    return Line(NAMES["links"], not bad, "; ".join([reason, *notes]))


def bubble_line(pp: int, micro_batches: int, virtual_stages: int = 1, threshold: float = BUBBLE_THRESHOLD) -> Line:
    """The pipeline bubble (p−1)/(m·v) of the ideal compute time against ``threshold``."""
    name = NAMES["bubble"]
    if pp == 1:
        return Line(name, True, "no pipeline (pp = 1), no bubble")
    b = bubble_fraction(pp, micro_batches, virtual_stages)
    sign = "≤" if b <= threshold else ">"
    formula = (
        f"(p − 1)/(m·v) = {pp - 1}/({micro_batches} × {virtual_stages})"
        if virtual_stages > 1
        else (f"(p − 1)/m = {pp - 1}/{micro_batches}")
    )
    return Line(name, b <= threshold, f"{formula} = {fmt_pct(b)} {sign} {fmt_pct(threshold, 0)}")


def batch_line(dims: ParallelDims, micro_batch_size: int, micro_batches: int, global_batch: int) -> Line:
    """dp × b × m against the global batch B (sequences per step)."""
    d, b, m = dims, micro_batch_size, micro_batches
    got = d.dp * b * m
    head = f"dp × b × m = {d.dp} × {b} × {m} = {fmt_int(got)}"
    if got == global_batch:
        return Line(NAMES["batch"], True, f"{head} = B")
    hint = (
        f"m = {global_batch // (d.dp * b)} would do"
        if global_batch % (d.dp * b) == 0
        else f"no m would: dp × b = {d.dp * b} does not divide it"
    )
    return Line(NAMES["batch"], False, f"{head} ≠ B = {fmt_int(global_batch)}; {hint}")


@dataclass(frozen=True)
class Placement:
    """Where a plan falls among a search's kept plans (fastest first).

    Attributes:
        step_s: its estimated step time under the search's execution.
        rank: 1 + the kept plans strictly faster.
        tied_rank: its rank with ties (``search.tied_ranks`` over the kept times with this one added).
        kept: whether the search itself kept this plan (else it was not enumerated or was rejected, ``why``).
        why: the search's rejection message, or '' when kept.
    """

    step_s: float
    rank: int
    tied_rank: int
    kept: bool
    why: str = ""


_key = settings_key


def _index(result: SearchResult) -> tuple[Mapping[tuple, int], Mapping[tuple, str], tuple[float, ...], tuple[int, ...]]:
    """The search's kept plans (settings → position), rejections (settings → why), step times and tied ranks
    (``SearchResult.index``, built once per result)."""
    ix = result.index
    return ix.kept, ix.rejected, ix.times, ix.ties


def placement(plan: Plan, result: SearchResult) -> Placement:
    """Where ``plan`` falls in ``result``: its own entry if the search kept it, else its step time (under the
    search's execution) placed among the kept plans' (ValueError if it does not fit)."""
    kept, rejected, times, ties = _index(result)
    key = _key(plan)
    if key in kept and result.ranked[kept[key]].plan.micro_batches == plan.micro_batches:
        i = kept[key]
        return Placement(times[i], 1 + bisect_right(times, times[i] * (1 - 1e-12)), ties[i], True)
    r = evaluate(plan)
    if not r.fits:
        raise ValueError(peak_reason(r) if r.plan.accounting.name != "lab" else f"does not fit: {memory_reason(r)}")
    t = step_time(r, result.execution).total_s
    pos = bisect_right(times, t)
    ranks = tied_ranks([*times[:pos], t, *times[pos:]], result.band)
    why = rejected.get(key, "not enumerated by the search")
    return Placement(t, pos + 1, ranks[pos], False, why)


def search_line(plan: Plan, result: SearchResult, uncertainty: float | None = None) -> Line:
    """The plan's place among the search's kept plans (its rank, ties sharing one) and its step time against the
    fastest; passes when it is within ``uncertainty`` of the fastest (default: ``search.ratio_uncertainty``, the
    model's largest error on the step-time ratio of two held-out published runs of one model on one machine): a
    plan the model cannot tell apart from the best is a sound choice, whatever its rank."""
    name = NAMES["search"]
    u = ratio_uncertainty() if uncertainty is None else uncertainty
    try:
        where = placement(plan, result)
    except ValueError as exc:
        return Line(name, False, str(exc))
    best = result.ranked[0].step.total_s
    tie = f" (tied with {where.tied_rank})" if where.tied_rank < where.rank else ""
    n = len(result.ranked)
    of = f"of {fmt_int(n)}" if where.kept else f"of {fmt_int(n + 1)} with the {fmt_int(n)} kept plans"
    over = where.step_s / best - 1
    ok = over <= u
    if over <= 0:
        against = "the fastest"
    else:
        within = "within" if ok else "beyond"
        against = (
            f"{fmt_pct(over, 1)} slower than the fastest {best:.2f} s, {within} the model's {fmt_pct(u, 0)} uncertainty"
        )
    head = f"{'rank' if where.kept else 'would rank'} {where.rank}{tie} {of}, {where.step_s:.2f} s per step; {against}"
    skipped = "" if where.kept else f" (the search skips it: {where.why})"
    return Line(name, ok, head + skipped)


def check_plan(plan: Plan, global_batch: int, result: SearchResult | None = None) -> list[Line]:
    """Every line for one plan (the search line when a search ``result`` is given)."""
    lines = [
        memory_line(plan),
        tp_line(plan.dims, plan.gpus_per_node),
        links_line(plan),
        bubble_line(plan.pp, plan.micro_batches, plan.virtual_stages),
        batch_line(plan.dims, plan.micro_batch_size, plan.micro_batches, global_batch),
    ]
    if result is not None:
        lines.append(search_line(plan, result))
    return lines


def narayanan_bubbles() -> dict[str, float]:
    """The bubble (p−1)/(m·v) of every pipelined run of Narayanan et al. 2021 Table 1, as planned by
    ``calibration`` (m = B ÷ (dp × b) from the published batch and micro-batch sizes)."""

    out = {}
    for r in published_runs():
        if r["id"].startswith(FIT_SET) and r["mesh"]["pp"] > 1:
            p = run_plan(r)
            out[r["id"]] = bubble_fraction(p.pp, p.micro_batches, p.virtual_stages)
    return out


# ---------------------------------------------------------------- the checklist
def setting_plan(
    model: Any,
    gpus: int,
    seq: int,
    setting: Mapping[str, Any],
    *,
    hardware: Any = None,
    ledger: str = "lab",
    order: str | None = None,
) -> Plan:
    """The plan a checklist setting describes: ``plan_checklist``'s controls (tp, cp, pp, zero, recompute, b, m, and
    ledger if the setting has one, else ``ledger``) on ``gpus`` GPUs for sequences of ``seq`` tokens, DP what is left,
    uneven stages allowed (the engines' ``--decoder-first/last-pipeline-num-layers``), the stages laid out as the
    ledger's engine lays them out (``Accounting.stage_balance``), its ranks in the engine's order
    (``Accounting.order``, unless ``order`` is given), as the search prices them."""
    accounting = get_accounting(setting.get("ledger", ledger))
    return Plan.create(
        model,
        gpus,
        tp=setting["tp"],
        cp=setting.get("cp", 1),
        pp=setting["pp"],
        zero=setting["zero"],
        recompute=setting["recompute"],
        micro_batch_size=setting["b"],
        micro_batches=setting["m"],
        seq=seq,
        hardware=hardware,
        accounting=accounting,
        stage_balance=accounting.stage_balance,
        order=accounting.order if order is None else order,
        uneven_stages=True,
    )


def with_global_batch(setting: Mapping[str, Any], gpus: int, global_batch: int, **changes: Any) -> dict[str, Any]:
    """``setting`` with ``changes`` and its m set so that dp × b × m = ``global_batch`` (dp = gpus ÷ (tp × cp × pp));
    ValueError when the shape does not divide the GPUs or the batch.

        >>> with_global_batch({"tp": 4, "pp": 2, "b": 1, "m": 8}, 32, 64, pp=4)
        {'tp': 4, 'pp': 4, 'b': 1, 'm': 32}
    """
    v = {**setting, **changes}
    dims = ParallelDims.from_gpus(gpus, tp=v["tp"], cp=v.get("cp", 1), pp=v["pp"])
    return {**v, "m": Workload.micro_batches_for(global_batch, dims.dp, v["b"])}


def _reading(names: Sequence[str], fn: Callable[..., Line]) -> Callable[..., tuple[bool, str]]:
    """``fn`` as a ``Check`` test that reads exactly the controls ``names`` (its visible parameters)."""

    def test(**values: Any) -> tuple[bool, str]:
        line = fn(**values)
        return line.ok, line.reason

    test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names]
    )
    return test


def plan_checklist(
    id: str,
    model: Any,
    gpus: int,
    seq: int,
    global_batch: int,
    *,
    tp: Sequence[int] = (1, 2, 4, 8),
    cp: Sequence[int] = (1, 2),
    pp: Sequence[int] = (1, 2, 4, 8),
    zero: Sequence[int] = (0, 1, 2, 3),
    recompute: Sequence[str] = ("none", "selective", "full"),
    micro_batch_size: Sequence[int] = (1, 2),
    micro_batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    ledgers: Sequence[str] = ("lab",),
    hardware: Any = None,
    results: Mapping[str, SearchResult] | None = None,
    defaults: Mapping[str, Any] | None = None,
    question: str | None = None,
) -> Checklist:
    """The plan-design checklist of ``model`` on ``gpus`` GPUs for sequences of ``seq`` tokens and a global batch of
    ``global_batch`` sequences: the reader picks TP, CP, PP (DP is what is left), the ZeRO stage, the
    recomputation, b and m (and the ledger, when ``ledgers`` offers more than one); every line of ``check_plan``.

    Dependent ranges keep the page small and every combination meaningful: CP and PP only where tp × cp × pp
    divides the GPUs, a ZeRO stage above 0 only when dp × cp > 1 (nothing to shard over otherwise), m ≥ pp (1F1B
    fills the pipeline with p micro-batches). With m ≥ p the most-loaded stage holds min(m, p − k) = p − k micro-batches
    whatever m is, so the memory line reads no m (its table is over the other controls only). ``results``: the
    search for each ledger (run here when not given).
    """

    spec = load_model(model)  # once: every combination's plan shares it
    machine = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    ledger_control = len(ledgers) > 1
    results = dict(results or {})
    for ledger in ledgers:
        if ledger not in results:
            results[ledger] = search(spec, gpus, seq, global_batch, hardware=machine, accounting=ledger)

    def dims(tp: int, cp: int, pp: int) -> ParallelDims:
        return ParallelDims.from_gpus(gpus, tp=tp, cp=cp, pp=pp)

    def plan(tp, cp, pp, zero, recompute, b, m, ledger, order=None) -> Plan:
        setting = {"tp": tp, "cp": cp, "pp": pp, "zero": zero, "recompute": recompute, "b": b, "m": m}
        return setting_plan(spec, gpus, seq, setting, hardware=machine, ledger=ledger, order=order)

    only = ledgers[0]

    def lg(values: dict) -> str:
        return values.get("ledger", only)

    def memory(**v) -> Line:  # m = pp: the same memory as any allowed m (see the docstring)
        return memory_line(plan(v["tp"], v["cp"], v["pp"], v["zero"], v["recompute"], v["b"], v["pp"], lg(v)))

    def tp_check(**v) -> Line:
        return tp_line(dims(v["tp"], v["cp"], v["pp"]), machine.gpus_per_node)

    def links(**v) -> Line:  # the mesh in the ledger's engine's rank order, and CP's exposure (the lab's plan: the
        # engines' refusals are the memory line's)
        order = get_accounting(lg(v)).order
        return links_line(plan(v["tp"], v["cp"], v["pp"], 0, v["recompute"], v["b"], v["pp"], "lab", order))

    def bubble(**v) -> Line:
        return bubble_line(v["pp"], v["m"])

    def batch(**v) -> Line:
        return batch_line(dims(v["tp"], v["cp"], v["pp"]), v["b"], v["m"], global_batch)

    def ranked(**v) -> Line:
        d = dims(v["tp"], v["cp"], v["pp"])
        if global_batch % (d.dp * v["b"]):
            return Line(NAMES["search"], False, f"B = {global_batch} is not divisible by dp × b = {d.dp * v['b']}")
        m = global_batch // (d.dp * v["b"])
        p = plan(v["tp"], v["cp"], v["pp"], v["zero"], v["recompute"], v["b"], m, lg(v))
        line = search_line(p, results[lg(v)])
        return Line(line.name, line.ok, f"m = {m}: {line.reason}")

    shape, led = ("tp", "cp", "pp"), (("ledger",) if ledger_control else ())
    checks = [
        Check(NAMES["memory"], _reading((*shape, "zero", "recompute", "b", *led), memory)),
        Check(NAMES["tp"], _reading(shape, tp_check)),
        Check(NAMES["links"], _reading((*shape, "recompute", "b", *led), links)),
        Check(NAMES["bubble"], _reading(("pp", "m"), bubble)),
        Check(NAMES["batch"], _reading((*shape, "b", "m"), batch)),
        Check(NAMES["search"], _reading((*shape, "zero", "recompute", "b", *led), ranked)),
    ]
    controls: dict[str, Sequence[Any]] = {
        "tp": tp,
        "cp": cp,
        "pp": pp,
        "zero": zero,
        "recompute": recompute,
        "b": micro_batch_size,
        "m": micro_batches,
    }
    if ledger_control:
        controls["ledger"] = ledgers

    def cp_allowed(tp: int) -> list[int]:
        return [c for c in cp if gpus % (tp * c) == 0] or [cp[0]]

    def pp_allowed(tp: int, cp: int) -> list[int]:
        return [p for p in pp if gpus % (tp * cp * p) == 0]

    def zero_allowed(tp: int, cp: int, pp: int) -> list[int]:
        return list(zero) if gpus // (tp * pp) > 1 else [0]

    def zero_why(tp: int, cp: int, pp: int) -> str:
        return (
            f"ZeRO 1-3 shard over the data-parallel ranks: TP {tp} × PP {pp} uses all {fmt_int(gpus)} GPUs, so "
            "DP × CP = 1 leaves nothing to shard (ZeRO-0)"
        )

    def dp_note(tp: int, cp: int, pp: int) -> str:
        return f"DP = {fmt_int(gpus)} ÷ (TP {tp} × CP {cp} × PP {pp}) = {fmt_int(gpus // (tp * cp * pp))}"

    def m_allowed(pp: int) -> list[int]:
        return [m for m in micro_batches if m >= pp]

    return Checklist(
        id,
        question
        or f"Write a plan for {spec.name} on {fmt_int(gpus)} GPUs, s = {fmt_int(seq)}, a global "
        f"batch of B = {fmt_int(global_batch)} sequences; then check it.",
        controls,
        checks,
        labels={
            "tp": "TP",
            "cp": "CP",
            "pp": "PP",
            "zero": "ZeRO stage",
            "recompute": "recompute",
            "b": "micro-batch size b",
            "m": "micro-batches m",
            **({"ledger": "ledger"} if ledger_control else {}),
        },
        defaults=defaults,
        depends={"cp": cp_allowed, "pp": pp_allowed, "zero": zero_allowed, "m": m_allowed},
        why={"zero": zero_why},
        notes={"pp": dp_note},
    )
