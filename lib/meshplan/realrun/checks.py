"""Predicted against measured: run each dimension on forked gloo ranks and turn the numbers into rows.

Every ``predicted`` comes from the library (``meshplan.parallel.zero``, ``dp``, ``collectives``, ``tp``, ``pp``,
``buckets``, ``schedule``, through ``realrun.predict`` where the small model must be described) for the same
setting; every ``measured`` is counted at the collective calls or read
from the tensors. Units: bytes and counts (``unit``); fp32 throughout (4 B per element), since gloo on a
CPU trains in fp32.
"""

from __future__ import annotations

from functools import cache

from meshplan import schedule
from meshplan.core import collectives
from meshplan.parallel import buckets, dp, pp, tp, zero
from meshplan.realrun import predict
from meshplan.realrun.launch import run_ranks
from meshplan.realrun.rows import Row
from meshplan.spec.accounting import DEFAULT_BPP, FSDP2_BPP
from meshplan.spec.model import ModelSpec, load_model

FP32 = 4
SCHEDULES = [
    ("GPipe", 1),
    ("1F1B", 1),
    ("Interleaved1F1B", 2),
    ("InterleavedZeroBubble", 1),
    ("ZBVZeroBubble", 2),
    ("DualPipeV", 2),
]
# the library's schedule simulator (meshplan.schedule) names for the torch schedules it models
SIMULATOR_KINDS = {
    "GPipe": "gpipe",
    "1F1B": "1f1b",
    "Interleaved1F1B": "interleaved",
    "InterleavedZeroBubble": "zb-h1",
    "DualPipeV": "dualpipev",
}


@cache
def small() -> ModelSpec:
    """The small model's ModelSpec (read on first use, not at import)."""
    return load_model("small-3.7m")


def psi() -> int:
    """Ψ, the small model's parameters."""
    return small().params.total


def _wire(n, kind, payload):
    """Bytes one rank sends for one collective, by the library's ring formulas."""
    return {
        "all_reduce": collectives.ring_all_reduce_bytes,
        "all_gather": collectives.all_gather_bytes,
        "reduce_scatter": collectives.reduce_scatter_bytes,
        "broadcast": collectives.all_gather_bytes,
    }[kind](n, payload)


def _sum(calls, kind, phase=None):
    return sum(b for k, ph, b, _ in calls if k == kind and (phase is None or ph == phase))


def _count(calls, kind, phase=None):
    return sum(1 for k, ph, _, _ in calls if k == kind and (phase is None or ph == phase))


# ------------------------------------------------------------------------------------------- DDP
def ddp_rows(n: int) -> list[Row]:
    from meshplan.realrun.runs import ddp_worker  # imports torch (the realrun extra): only a run loads it

    rows = []
    backward_order = tuple(reversed(predict.small_grad_tensors(small())))
    psi_total = psi()
    for cap_mb in (None, 1):
        res = run_ranks(ddp_worker, n, (cap_mb,))[0]
        cap = buckets.DEFAULT_CAP_BYTES if cap_mb is None else cap_mb << 20
        first = buckets.FIRST_BUCKET_BYTES if cap_mb is None else cap
        pred = [b.n_bytes for b in buckets.assign_buckets(backward_order, cap, first, grad_bytes_per_param=FP32)]
        label = "default bucket_cap_mb (25 MiB, first bucket 1 MiB)" if cap_mb is None else f"bucket_cap_mb={cap_mb}"
        it1 = _count(res["steps"][0], "all_reduce", "backward")
        later = [_count(s, "all_reduce", "backward") for s in res["steps"][1:]]
        rows.append(
            Row(
                "ddp",
                f"DDP N={n}, {label}: buckets in iteration 1",
                len(pred),
                it1,
                "buckets",
                False,
                "DDP does not bucket the first iteration: it all-reduces one bucket holding every gradient, "
                "records the order in which gradients became ready, and rebuilds its buckets from it.",
            )
        )
        rows.append(
            Row(
                "ddp",
                f"DDP N={n}, {label}: buckets from iteration 2 on",
                len(pred),
                max(later),
                "buckets",
                min(later) == max(later),
                "Greedy walk over the gradients in reverse parameter order (meshplan.parallel.buckets."
                "assign_buckets): a bucket closes once it holds at least the limit.",
            )
        )
        rows.append(
            Row(
                "ddp",
                f"DDP N={n}, {label}: largest bucket",
                max(pred),
                max(b for k, ph, b, _ in res["steps"][-1] if k == "all_reduce" and ph == "backward"),
                "bytes",
                True,
                "The same greedy walk; fp32 gradients, 4 B each.",
            )
        )
    step = res["steps"][-1]
    payload = _sum(step, "all_reduce", "backward")
    rows.append(
        Row(
            "ddp",
            f"DDP N={n}: bytes all-reduced per step",
            psi_total * FP32,
            payload,
            "bytes",
            True,
            "Every gradient is all-reduced once per step: the buffer is 4 B × Ψ in fp32 (2 B × Ψ with "
            "bf16 gradients, the library's convention).",
        )
    )
    wire = sum(_wire(n, "all_reduce", b) for k, ph, b, _ in step if k == "all_reduce" and ph == "backward")
    rows.append(
        Row(
            "ddp",
            f"DDP N={n}: bytes each rank sends per step (ring)",
            dp.dp_bytes_per_step(psi_total, n, 0, grad_bytes_per_param=FP32),
            wire,
            "bytes",
            True,
            "meshplan.parallel.dp with 4 B gradients: 2(N−1)/N × 4Ψ; measured: the ring formula applied to each "
            "all-reduce the rank issued.",
        )
    )
    return rows


# ------------------------------------------------------------------------------------------- FSDP2
def fsdp_rows(n: int) -> list[Row]:
    from meshplan.realrun.runs import fsdp_worker  # imports torch (the realrun extra): only a run loads it

    rows = []
    psi_total = psi()
    for stage, raf in ((3, True), (2, False)):
        res = run_ranks(fsdp_worker, n, (raf,))
        r0 = res[0]
        mode = "ZeRO-3" if stage == 3 else "ZeRO-2 mode (reshard_after_forward=False)"
        terms = zero.model_states_terms(psi_total, 3, n, FSDP2_BPP)
        if stage == 3:
            for name, key, pred in (
                ("sharded parameters", "param_bytes", terms["weights"]),
                ("sharded gradients", "grad_bytes", terms["grads"]),
                ("Adam m and v", "optim_bytes", terms["adam_m"] + terms["adam_v"]),
            ):
                rows.append(
                    Row(
                        "fsdp",
                        f"FSDP2 {mode} N={n}: {name} per rank",
                        pred,
                        max(r[key] for r in res),
                        "bytes",
                        True,
                        "meshplan.parallel.zero with FSDP2_BPP (4 + 4 + 8 B per parameter, each ÷ N): FSDP2 keeps "
                        "fp32 sharded parameters that the optimizer updates directly, so there is no "
                        "separate master copy; bf16 copies, if any, are transient.",
                    )
                )
            total = sum(r0[k] for k in ("param_bytes", "grad_bytes", "optim_bytes"))
            rows.append(
                Row(
                    "fsdp",
                    f"FSDP2 {mode} N={n}: model states per rank",
                    zero.model_states_bytes(psi_total, 3, n, DEFAULT_BPP),
                    total,
                    "bytes",
                    True,
                    "The textbook 16Ψ/N (2 + 2 + 12) and FSDP2's split (4 + 4 + 8) have the same total.",
                )
            )
            rows.append(
                Row(
                    "fsdp",
                    f"FSDP2 {mode} N={n}: parameter bytes per rank, textbook split",
                    zero.model_states_terms(psi_total, 3, n, DEFAULT_BPP)["weights"],
                    r0["param_bytes"],
                    "bytes",
                    False,
                    "The textbook keeps 2 B (bf16) weights plus a 4 B master copy inside the "
                    "optimizer's 12 B; FSDP2 keeps one fp32 (4 B) sharded parameter and 8 B of Adam "
                    "state: 4 + 4 + 8 instead of 2 + 2 + 12. The Adam step counters (one scalar per "
                    "tensor) are not counted.",
                )
            )
        else:
            rest = sum(r0[k] for k in ("param_bytes", "grad_bytes", "optim_bytes"))
            rows.append(
                Row(
                    "fsdp",
                    f"FSDP2 {mode} N={n}: model states per rank at rest",
                    zero.model_states_bytes(psi_total, 2, n, FSDP2_BPP),
                    rest,
                    "bytes",
                    False,
                    "Textbook ZeRO-2 keeps whole weights on every rank; FSDP2 in this mode still stores "
                    "sharded parameters between steps and only keeps the gathered copy from the forward "
                    "to the backward pass, so at rest it holds ZeRO-3's 16Ψ/N.",
                )
            )
        step = r0["steps"][-1]
        ag, rs = _sum(step, "all_gather"), _sum(step, "reduce_scatter")
        rows.append(
            Row(
                "fsdp",
                f"FSDP2 {mode} N={n}: all-gather + reduce-scatter payload per step",
                zero.zero_comm_factor(stage) * psi_total * FP32,
                ag + rs,
                "bytes",
                True,
                (
                    "all-gather in forward and again in backward (2 × 4Ψ) + reduce-scatter of the gradients "
                    "(4Ψ): ZeRO-3's 3Ψ."
                    if stage == 3
                    else "No backward all-gather: all-gather in forward (4Ψ) + reduce-scatter (4Ψ) = 2Ψ, the same "
                    "volume as DP's all-reduce."
                ),
            )
        )
        wire = sum(_wire(n, k, b) for k, _, b, _ in step if k in ("all_gather", "reduce_scatter"))
        rows.append(
            Row(
                "fsdp",
                f"FSDP2 {mode} N={n}: bytes each rank sends per step (ring)",
                zero.zero_sync_bytes(n, psi_total * FP32, stage),
                wire,
                "bytes",
                True,
                "meshplan.parallel.zero.zero_sync_bytes with 4 B gradients. On gloo the reduce-scatter's wire "
                "cost is an all-reduce's (see the collectives rows), so gloo really sends more.",
            )
        )
        rows.append(
            Row(
                "fsdp",
                f"FSDP2 {mode} N={n}: collectives per step",
                (zero.zero_comm_factor(stage)) * 5,
                len(step),
                "calls",
                True,
                "One all-gather (and one reduce-scatter) per fully_shard unit: the four blocks and the "
                "root (embeddings, final norm), so 5 per transfer.",
            )
        )
    return rows


# ------------------------------------------------------------------------------------------- FSDP2 × m
# (label, reshard_after_forward passed to fully_shard (None: FSDP2's default), gradient sync on the last
# micro-batch only)
FSDP_ACCUM_VARIANTS = (
    ("reshard_after_forward=True", True, False),
    ("reshard_after_forward default", None, False),
    ("reshard_after_forward=False", False, False),
    ("reshard_after_forward default, sync on the last micro-batch only", None, True),
)


def fsdp_accum_rows(n: int, micro_batches: tuple[int, ...]) -> list[Row]:
    """FSDP2 with gradient accumulation over m micro-batches: all-gathers, reduce-scatters and their
    payloads per optimizer step, against ``zero.fsdp2_collectives_per_step``."""
    from meshplan.realrun.runs import fsdp_accum_worker  # imports torch (the realrun extra): only a run loads it

    configs = [(raf, last_only, m) for _, raf, last_only in FSDP_ACCUM_VARIANTS for m in micro_batches]
    res = run_ranks(fsdp_accum_worker, n, (configs,))[0]
    units = zero.fsdp_unit_params(small())
    rows = []
    for ((label, raf, last_only), m), step in zip(
        ((v, m) for v in FSDP_ACCUM_VARIANTS for m in micro_batches), res, strict=True
    ):
        resharded = predict.fsdp2_resharded(len(units), raf)
        pred = zero.fsdp2_collectives_per_step(
            units, resharded, m, sync_every_micro_batch=not last_only, param_bytes=FP32, grad_bytes=FP32
        )
        name = f"FSDP2 N={n}, {label}, m={m}"
        why = (
            f"zero.fsdp2_collectives_per_step: {len(units)} units (the root and {len(units) - 1} blocks), "
            f"{sum(resharded)} resharded after forward"
            + (
                " (FSDP2's default keeps the root's parameters gathered from forward to backward)"
                if raf is None
                else ""
            )
            + f", {'one gradient sync per step' if last_only else 'a gradient sync per micro-batch'}."
        )
        rows += [
            Row(
                "fsdp_accum",
                f"{name}: all-gathers per step",
                pred["all_gathers"],
                _count(step, "all_gather"),
                "calls",
                True,
                why + " Every unit gathers before its forward in each micro-batch and, if it "
                "resharded after forward, again before its backward: m × (units + resharded units).",
            ),
            Row(
                "fsdp_accum",
                f"{name}: reduce-scatters per step",
                pred["reduce_scatters"],
                _count(step, "reduce_scatter"),
                "calls",
                True,
                why
                + (
                    " set_requires_gradient_sync(False) keeps the gradients unsharded until the last "
                    "micro-batch: one reduce-scatter per unit per step."
                    if last_only
                    else " Each backward reduce-scatters every unit's gradients: m × units."
                ),
            ),
            Row(
                "fsdp_accum",
                f"{name}: all-gather payload per step",
                pred["all_gather_bytes"],
                _sum(step, "all_gather"),
                "bytes",
                True,
                why + " Gathered output, fp32: m × (Ψ + the resharded units' parameters) × 4 B.",
            ),
            Row(
                "fsdp_accum",
                f"{name}: reduce-scatter payload per step",
                pred["reduce_scatter_bytes"],
                _sum(step, "reduce_scatter"),
                "bytes",
                True,
                why + " Input before scattering, fp32: (m or 1) × Ψ × 4 B.",
            ),
        ]
    return rows


# ------------------------------------------------------------------------------------------- ZeRO-1
def zero1_rows(n: int) -> list[Row]:
    from meshplan.realrun.runs import zero1_worker  # imports torch (the realrun extra): only a run loads it

    psi_total = psi()
    res = run_ranks(zero1_worker, n)
    owned = predict.zero1_partition(res[0]["numels"], n)
    opt_bpp = FSDP2_BPP.adam_m + FSDP2_BPP.adam_v
    terms = zero.model_states_terms(psi_total, 1, n, FSDP2_BPP)
    mean_pred = terms["adam_m"] + terms["adam_v"]
    measured = [r["optim_bytes"] for r in res]
    step = res[0]["steps"][-1]
    rows = [
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: optimizer bytes per rank, mean",
            mean_pred,
            sum(measured) / n,
            "bytes",
            True,
            "meshplan.parallel.zero stage 1: Adam's m and v (8 B per parameter in fp32) ÷ N.",
        ),
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: optimizer bytes on the largest rank",
            mean_pred,
            max(measured),
            "bytes",
            False,
            "It partitions whole tensors, largest first, to the least-loaded rank; the tied "
            "embedding (2,048 × 256) cannot be split, so one rank carries more than 8Ψ/N.",
        ),
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: optimizer bytes on the largest rank, whole tensors",
            max(owned) * opt_bpp,
            max(measured),
            "bytes",
            True,
            "meshplan.realrun.predict.zero1_partition: the same sorted greedy packing of whole tensors.",
        ),
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: optimizer bytes on rank 0",
            owned[0] * opt_bpp,
            measured[0],
            "bytes",
            True,
            "Rank 0 receives the largest tensor first (the tied embedding).",
        ),
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: payload per step (all-reduce + broadcasts)",
            zero.zero_comm_factor(1) * psi_total * FP32,
            _sum(step, "all_reduce", "backward") + _sum(step, "broadcast", "step"),
            "bytes",
            True,
            "Textbook ZeRO-1: reduce-scatter + all-gather of 4Ψ each. ZeroRedundancyOptimizer: DDP's "
            "all-reduce of 4Ψ, then each owner broadcasts its updated parameters (4Ψ in all).",
        ),
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: broadcasts per step",
            len(res[0]["numels"]),
            _count(step, "broadcast", "step"),
            "calls",
            True,
            "One broadcast per parameter tensor.",
        ),
        Row(
            "zero1",
            f"ZeroRedundancyOptimizer N={n}: bytes each rank sends per step (ring)",
            zero.zero_sync_bytes(n, psi_total * FP32, 1),
            _wire(n, "all_reduce", _sum(step, "all_reduce", "backward"))
            + _wire(n, "broadcast", _sum(step, "broadcast", "step")),
            "bytes",
            False,
            "It all-reduces the gradients (2(N−1)/N × 4Ψ) where ZeRO reduce-scatters them "
            "((N−1)/N), then broadcasts the parameters ((N−1)/N per rank on average): it moves 3Ψ(N−1)/N, "
            "not ZeRO's 2Ψ(N−1)/N.",
        ),
    ]
    return rows


# ------------------------------------------------------------------------------------------- TP
def tp_rows(t: int) -> list[Row]:
    from meshplan.realrun.runs import tp_worker  # imports torch (the realrun extra): only a run loads it

    rows = []
    for sp in (False, True):
        for fused in (True, False):
            r = run_ranks(tp_worker, t, (fused, sp))[0]
            L = r["layers"]
            b, s, h = r["shape"]
            calls = r["calls"]
            what = ("fused qkv" if fused else "separate q, k, v") + (" + SequenceParallel" if sp else "")
            name = f"TP t={t}, {what}"
            if sp:
                n_ag, n_rs = _count(calls, "all_gather"), _count(calls, "reduce_scatter")
                rows.append(
                    Row(
                        "tp",
                        f"{name}: all-gathers + reduce-scatters per layer (fwd + bwd)",
                        2 * tp.TP_COLLECTIVES_PER_LAYER,
                        (n_ag + n_rs) / L,
                        "calls",
                        True,
                        "Each all-reduce becomes an all-gather and a reduce-scatter (2 each way per "
                        "layer); one PrepareModuleInput gathers the input once for q, k and v, so its "
                        "gradient is reduce-scattered once.",
                    )
                )
            else:
                n_f, n_b = _count(calls, "all_reduce", "forward"), _count(calls, "all_reduce", "backward")
                rows.append(
                    Row(
                        "tp",
                        f"{name}: all-reduces per layer, forward",
                        tp.TP_COLLECTIVES_PER_LAYER / 2,
                        n_f / L,
                        "calls",
                        True,
                        "One after attention's row-parallel o, one after fc2.",
                    )
                )
                rows.append(
                    Row(
                        "tp",
                        f"{name}: all-reduces per layer, backward",
                        tp.TP_COLLECTIVES_PER_LAYER / 2,
                        n_b / L,
                        "calls",
                        fused,
                        "One for the input gradient of the column-parallel qkv, one for fc1."
                        if fused
                        else "Each of q, k and v is its own ColwiseParallel module with its own copy of the "
                        "input, so each all-reduces its input gradient: 4 backward all-reduces per layer, "
                        "not 2.",
                    )
                )
            wire = sum(_wire(t, k, p) for k, _, p, _ in calls)
            rows.append(
                Row(
                    "tp",
                    f"{name}: bytes each rank sends per layer",
                    tp.tp_bytes_per_layer(s, b, h, t, FP32),
                    wire / L,
                    "bytes",
                    fused or sp,
                    "meshplan.parallel.tp: 4 all-reduces of s·b·h fp32 elements per layer (ring)."
                    + ("" if (fused or sp) else " The two extra backward all-reduces add half again."),
                )
            )
            if sp and fused:
                rows.append(
                    Row(
                        "tp",
                        f"{name}: norm-weight gradients left Partial (bytes)",
                        0,
                        r["partial_grad_bytes"],
                        "bytes",
                        False,
                        "The RMSNorm weights see only their sequence shard, so their gradients stay "
                        "Partial after backward: an all-reduce of 2·L·h elements is still pending, which "
                        "meshplan.parallel.tp does not count.",
                    )
                )
    return rows


# ------------------------------------------------------------------------------------------- PP
def _predicted_bubble(sched: str, p: int, m: int, v: int) -> tuple[float, str]:
    """(prediction, its source): meshplan.schedule's simulation where it models the schedule (the bubble
    with every stage waiting for the step's end, as the replay measures it), else
    meshplan.parallel.pp.bubble_fraction."""
    kind = SIMULATOR_KINDS.get(sched)
    if kind is not None:
        return (
            schedule.simulate(kind, p, m, v if kind == "interleaved" else 1).sync_bubble,
            f"meshplan.schedule.simulate('{kind}') (f = b = w = 1)",
        )
    return pp.bubble_fraction(p, m, v), "meshplan.parallel.pp.bubble_fraction, (p−1)/(m·v)"


def pp_rows(runs_: list[tuple[str, int, int]], micro_batches: int, replays: list[tuple[int, int]]) -> list[Row]:
    # imports torch (the realrun extra): only a run loads it
    from meshplan.realrun.runs import pp_worker, schedule_orders

    rows = []
    for sched, v, p in runs_:
        res = run_ranks(pp_worker, p, (sched, v, micro_batches))
        b, s, h = res[0]["shape"]
        bb = pp.boundary_bytes(s, b, h, FP32)
        stage_to_rank = {st: r for r, out in enumerate(res) for st in out["stages"]}
        crossings = predict.crossing_boundaries(stage_to_rank)
        sent = [sum(c[2] for c in out["sends"]) for out in res]
        name = f"{sched} p={p} v={v} m={micro_batches}"
        rows.append(
            Row(
                "pp",
                f"{name}: bytes per send",
                bb,
                max(c[2] for out in res for c in out["sends"]),
                "bytes",
                True,
                "meshplan.parallel.pp.boundary_bytes: one micro-batch's s·b·h activations (or their gradient), fp32.",
            )
        )
        rows.append(
            Row(
                "pp",
                f"{name}: bytes sent by all ranks per step",
                2 * micro_batches * crossings * bb,
                sum(sent),
                "bytes",
                True,
                f"2 × m × {crossings} stage boundaries that cross ranks × s·b·h × 4 B: every micro-batch "
                "crosses each boundary forward and its gradient crosses back.",
            )
        )
        pred = pp.pp_bytes_per_step(s, b, h, p, micro_batches, v, FP32)
        exact = max(sent) == pred
        rows.append(
            Row(
                "pp",
                f"{name}: bytes sent by the busiest rank per step",
                pred,
                max(sent),
                "bytes",
                exact,
                "meshplan.parallel.pp counts what a middle stage sends: 2 × v × m boundary transfers."
                + (
                    ""
                    if exact
                    else (
                        " Here no rank has two cross-rank neighbours for each of its stages: "
                        "the first stage sends no gradient and the last no activation"
                        + (", and the V layout keeps one boundary per rank local." if sched == "ZBVZeroBubble" else ".")
                    )
                ),
            )
        )
    for p, m in replays:
        orders = run_ranks(schedule_orders, 1, (p, m, SCHEDULES), backend=None)[0]
        for sched, v in SCHEDULES:
            measured = predict.replay(orders[sched]).sync_bubble
            pred, source = _predicted_bubble(sched, p, m, v)
            simulated = sched in SIMULATOR_KINDS
            rows.append(
                Row(
                    "pp",
                    f"{sched} p={p} v={v} m={m}: bubble replayed from pipeline_order",
                    pred,
                    measured,
                    "fraction",
                    simulated,
                    f"Predicted by {source}. Measured: torch's own action order (pipeline_order) replayed "
                    "by meshplan.schedule.replay with F = I = W = 1, a full backward B = 2 and an "
                    "overlapped F&B = 3, communication free; (makespan − busy) ÷ busy."
                    + (
                        " The zero-bubble schedule splits the backward into input and weight gradients "
                        "and fills idle slots with the weight halves: "
                        + ("a third of 1F1B's (p−1)/m." if v == 1 else "here a third of the interleaved (p−1)/(m·v).")
                        if "ZeroBubble" in sched
                        else ""
                    )
                    + (
                        " DualPipeV (torch's ScheduleDualPipeV, a port of deepseek-ai/DualPipe's "
                        "DualPipeV.step) runs the same order as meshplan.schedule's 'dualpipev'."
                        if sched == "DualPipeV"
                        else ""
                    )
                    + (
                        ""
                        if simulated
                        else " The library has no simulation of the V-shaped ZB-V "
                        "schedule, so the prediction is the interleaved formula it would replace."
                    ),
                )
            )
        ours = predict.torch_order("dualpipev", p, m)
        theirs = orders["DualPipeV"]
        same = sum(a == b for r in ours for a, b in zip(ours[r], theirs.get(r, [])))
        if all(len(ours[r]) == len(theirs.get(r, [])) for r in ours) and set(theirs) == set(ours):
            rows.append(
                Row(
                    "pp",
                    f"DualPipeV p={p} v=2 m={m}: actions of pipeline_order equal to the library's",
                    sum(map(len, ours.values())),
                    same,
                    "actions",
                    True,
                    "meshplan.schedule.orders('dualpipev'), built from deepseek-ai/DualPipe's DualPipeV.step "
                    "(steps 1-8), written in torch's names: torch's ScheduleDualPipeV lists the same "
                    "actions, rank by rank and in the same order.",
                )
            )
    return rows


# ------------------------------------------------------------------------------------------- wire
def wire_rows(n: int, numel: int = 1 << 20) -> list[Row]:
    from meshplan.realrun.runs import wire_worker  # imports torch (the realrun extra): only a run loads it

    res = run_ranks(wire_worker, n, (numel,))[0]
    size = numel * FP32
    return [
        Row(
            "collectives",
            f"gloo N={n}: all-reduce wire bytes per rank, 4 MiB buffer",
            collectives.ring_all_reduce_bytes(n, size),
            res["all_reduce"],
            "bytes",
            False,
            "Read from /proc/self/io (wchar): the ring formula plus gloo's message headers.",
        ),
        Row(
            "collectives",
            f"gloo N={n}: all-gather wire bytes per rank, 4 MiB output",
            collectives.all_gather_bytes(n, size),
            res["all_gather"],
            "bytes",
            False,
            "The ring formula (N−1)/N of the output, plus headers.",
        ),
        Row(
            "collectives",
            f"gloo N={n}: reduce-scatter wire bytes per rank, 4 MiB input",
            collectives.reduce_scatter_bytes(n, size),
            res["reduce_scatter"],
            "bytes",
            False,
            "gloo implements reduce-scatter as an all-reduce followed by a local copy: it sends 2(N−1)/N of the "
            "input, twice the ring's (N−1)/N. NCCL does not.",
        ),
    ]
