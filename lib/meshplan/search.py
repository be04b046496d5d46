"""Plan search: every (TP, CP, PP, DP, EP, ZeRO stage, recompute, micro-batch size, virtual stages) for a
model on a cluster, the constraint each rejected plan fails first, and the fitting plans ranked by an
estimated step time.

Step time (seconds per optimizer step, on the most-loaded GPU), as a sum of named terms:

* ``compute_s``: the step's model FLOP at the hardware's effective FLOP/s, split evenly over the GPUs:
  ``compute.step_time_s(flop_params, B·s, effective FLOP/s × gpus, recompute)`` (6 FLOP per parameter per
  token, 8 with full recompute; attention-score FLOP ignored, as in ``compute``).
* ``tp_s``, ``cp_s``, ``ep_s``, ``pp_s``: the plan's bytes ÷ link bandwidth for the collectives that block
  the layer (TP all-reduces, CP's K/V exchange, EP's all-to-all, PP's send/receive): not hidden.
* ``dp_exposed_s``: the gradient synchronisation (``Report.grad_sync_bytes``: DP and the CP part of the
  two-level ring, ZeRO-3's gathers too) overlaps the backward pass of the last micro-batch
  (``compute.backward_time_s`` of b·s tokens over the t·c·p GPUs of one replica); only what sticks out is
  counted: max(0, sync time − that backward time).
* ``bubble_s``: the pipeline bubble (p−1)/(m·v) × (compute + blocking communication), the per-micro-batch
  work the idle stages wait for (Narayanan et al. 2021 §2.2).

MFU = 6 × flop_params × tokens per step ÷ (step time × GPUs × peak FLOP/s) (Chowdhery et al. 2022's model
FLOPs, without the attention term). Assumptions: no overlap of TP/CP/EP/PP traffic with compute, no
latency, no stragglers, balanced experts; these make the estimate a lower bound on what tuned systems
reach and an upper bound on none. One assumption errs the other way: the gradient sync is the plan's
once-per-step volume (2Ψ, ZeRO-3's 3Ψ), while FSDP with m > 1 micro-batches re-gathers the weights (ZeRO-3)
and reduce-scatters the gradients (ZeRO-2 and 3) for every micro-batch, so ZeRO-2/3 plans with many
micro-batches are estimated too cheap.

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

from . import compute
from .hardware import Hardware, load_hardware
from .mesh import DEFAULT_ORDER
from .model import ModelSpec, load_model
from .plan import Plan, Report, evaluate, spread_layers

ZERO_STAGES = (0, 1, 2, 3)
RECOMPUTE = ("none", "selective", "full")
MICRO_BATCH_SIZES = (1, 2, 4)
VIRTUAL_STAGES = (1, 2, 4)
# The step-time estimate charges nothing for short chunks, so it would split an 8K sequence 32 ways. Megatron's
# guide (quoted in the course's seed 004) uses CP only for sequences of 8K and more, with CP 2 at 8,192 in its
# Llama 3 70B example; Llama 3 runs CP 16 at 131,072 (8,192 tokens per rank). Floor: 4,096 tokens per CP rank.
MIN_SEQ_PER_CP_RANK = 4096
TERMS = ("compute_s", "tp_s", "cp_s", "ep_s", "pp_s", "dp_exposed_s", "bubble_s")


@dataclass(frozen=True)
class StepTime:
    """The estimated step time of one plan, in seconds, as named terms (see the module docstring)."""

    compute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    dp_exposed_s: float
    bubble_s: float

    @property
    def total_s(self) -> float:
        return sum(self.terms().values())

    def terms(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TERMS}


def step_time(report: Report) -> StepTime:
    """Estimated seconds per optimizer step of ``report``'s plan: compute + blocking communication +
    the part of the gradient synchronisation the last backward does not hide + the pipeline bubble.

        >>> from meshplan.lab import LAB_64_GPUS, lab_plan
        >>> st = step_time(evaluate(lab_plan(LAB_64_GPUS[2])))
        >>> round(st.compute_s, 3), round(st.tp_s, 3), round(st.bubble_s, 3), round(st.total_s, 2)
        (1.05, 0.47, 0.192, 1.76)
    """
    p, m, hw = report.plan, report.plan.model, report.plan.hardware
    tokens = p.dp * p.micro_batch_size * p.micro_batches * p.seq
    compute_s = compute.step_time_s(m.flop_params, tokens, hw.effective_flop_per_s * p.gpus, p.recompute)
    bw = {"nvlink": hw.nvlink_bytes_per_s, "infiniband": hw.infiniband_bytes_per_s}

    def secs(dim: str, n_bytes: float) -> float:
        link = report.link[dim]
        return n_bytes / bw[link] if link else 0.0

    sync = report.grad_sync_bytes
    cp_kv = report.comm_bytes_per_step["cp"] - sync.get("cp", 0.0)
    blocking = {"tp_s": report.comm_time_s["tp"], "cp_s": secs("cp", cp_kv), "ep_s": report.comm_time_s["ep"],
                "pp_s": report.comm_time_s["pp"]}
    sync_s = secs("dp", sync.get("dp", 0.0)) + secs("cp", sync.get("cp", 0.0))
    window = compute.backward_time_s(m.flop_params, p.micro_batch_size * p.seq,
                                     hw.effective_flop_per_s * p.tp * p.cp * p.pp)
    bubble = report.bubble * (compute_s + sum(blocking.values()))
    return StepTime(compute_s=compute_s, dp_exposed_s=max(0.0, sync_s - window), bubble_s=bubble, **blocking)


def model_flop_per_step(report: Report) -> float:
    """6 × flop_params × tokens per step (no recompute): the FLOP that MFU counts."""
    p = report.plan
    return compute.step_flop(p.model.flop_params, p.dp * p.micro_batch_size * p.micro_batches * p.seq)


def mfu(report: Report, step_s: float, peak_flop_per_s: float) -> float:
    """Model FLOPs utilisation: model FLOP per step ÷ (step time × GPUs × peak FLOP/s)."""
    if not peak_flop_per_s > 0 or not step_s > 0:
        raise ValueError(f"peak_flop_per_s={peak_flop_per_s!r} and step_s={step_s!r} must be positive")
    return model_flop_per_step(report) / (step_s * report.plan.gpus * peak_flop_per_s)


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


def describe(plan: Plan) -> str:
    """A short label: 'TP 8 × PP 16 × DP 128 · ZeRO-1 · selective · b 1 · m 16 · v 1'."""
    dims = " × ".join(f"{k.upper()} {getattr(plan, k)}" for k in ("tp", "cp", "pp", "dp") if getattr(plan, k) > 1)
    if plan.ep > 1:
        dims += f" (EP {plan.ep})"
    return (f"{dims or '1 GPU'} · ZeRO-{plan.zero} · {plan.recompute} · b {plan.micro_batch_size} · "
            f"m {plan.micro_batches} · v {plan.virtual_stages}")


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def search(model, gpus: int, seq: int, global_batch: int, gpus_per_node: int | None = None,
           gpu_memory_bytes: float | None = None, order: str = DEFAULT_ORDER, max_cp: int = 32,
           min_seq_per_cp_rank: int = MIN_SEQ_PER_CP_RANK, uneven_stages: bool = True, hardware: Hardware | None = None,
           zero_stages=ZERO_STAGES, recompute=RECOMPUTE, micro_batch_sizes=MICRO_BATCH_SIZES,
           virtual_stages=VIRTUAL_STAGES) -> SearchResult:
    """Enumerate every plan of ``model`` on ``gpus`` GPUs for sequences of ``seq`` tokens and a global batch of
    ``global_batch`` sequences; keep those that pass every constraint and fit, ranked by ``step_time``.

    Duplicates are not enumerated: ZeRO stages > 0 only when dp × cp > 1, virtual stages > 1 only with
    pp > 1, EP > 1 only for MoE models. Raises ValueError for a bad model, GPU count or batch.
    """
    spec = load_model(model)
    hw = hardware or load_hardware()
    gpn = hw.gpus_per_node if gpus_per_node is None else gpus_per_node
    mem = hw.gpu_memory_bytes if gpu_memory_bytes is None else gpu_memory_bytes
    for name, x in (("gpus", gpus), ("seq", seq), ("global_batch", global_batch), ("gpus_per_node", gpn)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name}={x!r} must be a positive integer")
    if gpus > gpn and gpus % gpn:
        raise ValueError(f"gpus_per_node={gpn} does not divide gpus={gpus}")
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
                                        plan = Plan(model=spec, gpus=gpus, tp=tp, cp=cp, ep=ep, pp=pp, dp=dp,
                                                    zero=zero, recompute=rc, seq=seq, micro_batch_size=b,
                                                    micro_batches=global_batch // (dp * b), virtual_stages=v,
                                                    order=order, gpus_per_node=gpn, gpu_memory_bytes=mem,
                                                    layers_per_stage=lps, hardware=hw)
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


# ---------------------------------------------------------------- command line
def _format(result: SearchResult, top: int, peak: float | None) -> str:
    from .units import fmt_gb
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


def add_command(subparsers) -> None:
    """Register ``python -m meshplan search``."""
    from .cli import _gb, _int  # the shared option parsers
    from .units import GB
    p = subparsers.add_parser("search", help="rank every plan that fits by an estimated step time")
    p.add_argument("--model", required=True, help="a file stem in data/models/ or a path to a config.json")
    p.add_argument("--gpus", required=True, type=_int("gpus"))
    p.add_argument("--gpus-per-node", type=_int("gpus-per-node"), default=None)
    p.add_argument("--gpu-memory-gb", type=_gb, default=None)
    p.add_argument("--seq", type=_int("seq"), default=4096)
    p.add_argument("--global-batch", required=True, type=_int("global-batch"), help="sequences per step")
    p.add_argument("--top", type=_int("top"), default=10)
    p.add_argument("--order", default=DEFAULT_ORDER)
    p.add_argument("--json", action="store_true", help="print a JSON list of the top plan reports")

    def run(args) -> int:
        import json
        result = search(args.model, args.gpus, args.seq, args.global_batch, gpus_per_node=args.gpus_per_node,
                        gpu_memory_bytes=None if args.gpu_memory_gb is None else args.gpu_memory_gb * GB,
                        order=args.order)
        if args.json:
            print(json.dumps([c.to_dict(i) for i, c in enumerate(result.ranked[:args.top], 1)]))
        else:
            print(_format(result, args.top, None))
        return 0

    p.set_defaults(run=run)
