"""Predict a consequence: which part of the step becomes the bottleneck when one choice changes.

The chapters' other exercises ask for a formula's value; these ask what a change does to a whole step. The reader
moves a lever (TP's width, the pipeline's depth against the batch, EP across a node) and predicts which of the
step-time model's terms after compute (``steptime.OVERHEADS``: TP communication, CP communication, EP all-to-all,
pipeline sends, DP synchronisation, pipeline bubble, optimizer step) is the largest; the answer is
``StepTime.largest_overhead`` of the plan, priced by ``steptime.step_time`` under the ledger's engine, and the worked
answer lists every term in seconds, largest first. Each chapter's exercise is one ``Exercise`` over a plan builder:

* ``tp_bottleneck``  (chapter 4): the anchor on 16 GPUs, two nodes, as TP grows to the node's width;
* ``pp_bottleneck``  (chapter 5): the anchor on 32 GPUs with TP 2, the pipeline's depth against the global batch;
* ``cp_bottleneck``  (chapter 6): Llama 3.1 8B on 64 GPUs, CP's group size against the sequence;
* ``ep_bottleneck``  (chapter 7): Qwen3-30B-A3B on 64 GPUs as EP grows past the node.

Two other consequences, of memory and of scale:

* ``memory_exercise`` asks which part of one GPU's memory is the largest in the lab page's convention
  (``MEMORY_PARTS``: the bf16 weights and gradients, the optimizer states, the activations): ``sequence_memory``
  (chapter 1: Qwen3-8B on one GPU, the sequence against the recomputation), ``zero_memory`` (chapter 3: the anchor,
  the ZeRO stage against the GPUs) and ``moe_memory`` (chapter 10: Qwen3-30B-A3B against the dense Qwen3-8B on one
  node, the ZeRO stage);
* ``dp_speedup`` (chapter 2) asks how many times faster the step gets when the data-parallel replicas double at the
  same global batch: twice as fast only while the gradient synchronisation stays hidden;
* ``stage_peak`` (chapter 8) asks which end of a pipeline reaches the higher allocated peak in Megatron-LM's ledger:
  the first stage's in-flight micro-batches, or the last stage's head, logits and loss (``STAGES``).

    >>> ex = pp_bottleneck()
    >>> ex.result(pp=2, global_batch=32).value, ex.result(pp=8, global_batch=32).value
    ('DP synchronisation', 'pipeline bubble')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from meshplan.core.units import fmt_gb
from meshplan.parallel import zero
from meshplan.plan import Plan, Report, evaluate
from meshplan.plan.reporting import link_name
from meshplan.realrun import predict
from meshplan.spec.hardware import load_hardware
from meshplan.spec.model import load_model
from meshplan.steptime import OVERHEADS, execution_for, step_time
from meshplan.widgets import Exercise

__all__ = [
    "MEMORY_PARTS",
    "QUESTION",
    "bottleneck_exercise",
    "cp_bottleneck",
    "dp_speedup",
    "ep_bottleneck",
    "fsdp_accum_growth",
    "largest_memory_part",
    "memory_exercise",
    "memory_line",
    "moe_memory",
    "overhead_line",
    "pp_bottleneck",
    "sequence_memory",
    "stage_peak",
    "tp_bottleneck",
    "zero_memory",
]

QUESTION = "Which part of the step, after its own compute, takes the longest?"
CHOICES = tuple(OVERHEADS.values())


def overhead_line(plan: Plan) -> str:
    """The plan's step in words: compute, then every term after it that takes time, largest first, in seconds."""
    st = step_time(evaluate(plan), execution_for(plan.accounting.name))
    parts = sorted(((v, OVERHEADS[k]) for k, v in st.terms().items() if k != "compute_s" and v >= 5e-3), reverse=True)
    rest = "; ".join(f"{name} {v:.2f} s" for v, name in parts) or "nothing else"
    return (
        f"{plan.dims.label()}, m = {plan.micro_batches}: compute {st.compute_s:.2f} s per step; then {rest} "
        f"({st.total_s:.2f} s in all)."
    )


def plan_exercise(
    exercise_id: str,
    question: str,
    plan_of: Callable[..., Plan],
    answer_of: Callable[[Plan], str],
    explain_of: Callable[[Plan], str],
    choices: Sequence[str],
    sliders: Mapping[str, Sequence[Any]],
    *,
    labels: Mapping[str, str],
    setup: str,
    defaults: Mapping[str, Any] | None = None,
    texts: Mapping[str, Mapping[Any, str]] | None = None,
) -> Exercise:
    """A word-answer exercise over the plan ``plan_of(**controls)``: ``question`` asked after ``setup`` (its fixed
    choices, written from the plan builder's own constants), answered by ``answer_of(plan)`` (one of ``choices``) and
    explained by ``explain_of(plan)``; a ValueError marks a combination the library refuses, as in every exercise."""
    return Exercise(
        exercise_id,
        f"{setup} {question}",
        lambda **values: answer_of(plan_of(**values)),
        sliders=dict(sliders),
        defaults=dict(defaults or {}),
        explain=lambda **values: explain_of(plan_of(**values)),
        labels=dict(labels),
        texts=dict(texts or {}),
        choices=tuple(choices),
    )


def largest_overhead(plan: Plan) -> str:
    """``StepTime.largest_overhead`` of ``plan`` under its ledger's engine."""
    return step_time(evaluate(plan), execution_for(plan.accounting.name)).largest_overhead()


def bottleneck_exercise(exercise_id: str, plan_of: Callable[..., Plan], sliders, **kw: Any) -> Exercise:
    """An exercise asking ``QUESTION`` of the plan ``plan_of(**controls)`` (``plan_exercise``'s keywords)."""
    return plan_exercise(exercise_id, QUESTION, plan_of, largest_overhead, overhead_line, CHOICES, sliders, **kw)


ANCHOR = "qwen3.8-27b"
LAB_GPUS_PER_NODE = load_hardware().gpus_per_node  # the lab page's machine, which every plan here runs on


def _on(gpus: int) -> str:
    nodes = gpus // LAB_GPUS_PER_NODE
    return f"{gpus:,} GPUs ({nodes} node{'s' if nodes != 1 else ''} of the lab page's machine)"


TP_GPUS, TP_BATCH = 16, 64


def tp_plan(tp: int) -> Plan:
    """Chapter 4's lever: the anchor on ``TP_GPUS`` GPUs (two nodes of the lab page's machine), TP ``tp`` and DP the
    rest, ZeRO-1, selective recomputation, a global batch of ``TP_BATCH`` sequences, in the lab page's ledger."""
    return Plan.create(ANCHOR, gpus=TP_GPUS, tp=tp, zero=1, recompute="selective", global_batch=TP_BATCH)


def tp_bottleneck() -> Exercise:
    setup = (
        f"The anchor on {_on(TP_GPUS)}, a global batch of {TP_BATCH} sequences, ZeRO-1, selective recomputation, the "
        "lab page's ledger."
    )
    return bottleneck_exercise("ch4-bottleneck", tp_plan, {"tp": [1, 2, 4, 8]}, labels={"tp": "TP size t"}, setup=setup)


PP_GPUS, PP_TP = 32, 2


def pp_plan(pp: int, global_batch: int) -> Plan:
    """Chapter 5's levers: the anchor on ``PP_GPUS`` GPUs with TP ``PP_TP``, PP ``pp`` (layers spread ends-lighter
    when they do not divide) and DP the rest, ZeRO-1, selective recomputation, ``global_batch`` sequences per step,
    lab page's ledger."""
    return Plan.create(
        ANCHOR, gpus=PP_GPUS, tp=PP_TP, pp=pp, zero=1, recompute="selective", global_batch=global_batch,
        uneven_stages=True,
    )  # fmt: skip


def pp_bottleneck() -> Exercise:
    return bottleneck_exercise(
        "ch5-bottleneck",
        pp_plan,
        {"pp": [2, 4, 8], "global_batch": [32, 64, 256]},
        defaults={"pp": 4, "global_batch": 64},
        labels={"pp": "stages p", "global_batch": "global batch B"},
        setup=f"The anchor on {_on(PP_GPUS)} with TP {PP_TP}, ZeRO-1, selective recomputation, the lab page's ledger.",
    )


EP_MODEL = "qwen3-30b-a3b"


EP_GPUS, EP_BATCH = 64, 256


def ep_plan(ep: int) -> Plan:
    """Chapter 7's lever: Qwen3-30B-A3B on ``EP_GPUS`` GPUs (eight nodes), DP over all of them with EP ``ep`` folded
    inside it, ZeRO-1, selective recomputation, a global batch of ``EP_BATCH`` sequences, lab page's ledger."""
    return Plan.create(EP_MODEL, gpus=EP_GPUS, ep=ep, zero=1, recompute="selective", global_batch=EP_BATCH)


def ep_bottleneck() -> Exercise:
    setup = (
        f"{load_model(EP_MODEL).name} on {_on(EP_GPUS)}, DP over all of them with EP inside it, a global batch of "
        f"{EP_BATCH} sequences, ZeRO-1, selective recomputation, the lab page's ledger."
    )
    return bottleneck_exercise(
        "ch7-bottleneck",
        ep_plan,
        {"ep": [1, 2, 4, 8, 16, 32, 64]},
        defaults={"ep": 4},
        labels={"ep": "EP size"},
        setup=setup,
    )


CP_MODEL, CP_GPUS, CP_BATCH = "llama-3.1-8b", 64, 16


def cp_plan(cp: int, seq: int) -> Plan:
    """Chapter 6's levers: Llama 3.1 8B on ``CP_GPUS`` GPUs (eight nodes), CP ``cp`` and DP the rest, ZeRO-3, full
    recomputation, sequences of ``seq`` tokens, a global batch of ``CP_BATCH`` sequences, lab page's ledger."""
    return Plan.create(CP_MODEL, gpus=CP_GPUS, cp=cp, zero=3, recompute="full", seq=seq, global_batch=CP_BATCH)


def cp_bottleneck() -> Exercise:
    setup = (
        f"{load_model(CP_MODEL).name} on {_on(CP_GPUS)}, a global batch of {CP_BATCH} sequences, ZeRO-3, full "
        "recomputation, the lab page's ledger."
    )
    return bottleneck_exercise(
        "ch6-bottleneck",
        cp_plan,
        {"cp": [4, 8, 16], "seq": [32768, 131072]},
        defaults={"cp": 8, "seq": 32768},
        labels={"cp": "CP size", "seq": "sequence s"},
        texts={"seq": {32768: "32,768", 131072: "131,072"}},
        setup=setup,
    )


# ---------------------------------------------------------------- memory: which part is the largest
MEMORY_PARTS = ("weights and gradients", "optimizer states", "activations")
MEMORY_QUESTION = "Which part of one GPU's memory is the largest, in the lab page's convention?"


def _parts(r: Report) -> dict[str, float]:
    t = r.model_states_terms
    return {
        "weights and gradients": t.get("weights", 0.0) + t.get("grads", 0.0),
        "optimizer states": t.get("master", 0.0) + t.get("adam_m", 0.0) + t.get("adam_v", 0.0),
        "activations": r.memory_bytes["activations"],
    }


def largest_memory_part(r: Report) -> str:
    """The largest of ``MEMORY_PARTS`` on the report's most-loaded GPU (the first of equals): the bf16 weights and
    gradients together, the fp32 master weights and Adam moments, or the saved activations."""
    parts = _parts(r)
    return max(parts, key=parts.__getitem__)


def memory_line(plan: Plan) -> str:
    r = evaluate(plan)
    ranked = sorted(((v, k) for k, v in _parts(r).items()), reverse=True)
    parts = ", ".join(f"{name} {fmt_gb(v)}" for v, name in ranked)
    return f"{plan.dims.label()}, ZeRO-{plan.zero}, recompute {plan.recompute}, s = {plan.seq:,}: {parts} per GPU."


def memory_exercise(exercise_id: str, plan_of: Callable[..., Plan], sliders, **kw: Any) -> Exercise:
    """An exercise asking ``MEMORY_QUESTION`` of the plan ``plan_of(**controls)`` (``plan_exercise``'s keywords)."""
    return plan_exercise(
        exercise_id,
        MEMORY_QUESTION,
        plan_of,
        lambda p: largest_memory_part(evaluate(p)),
        memory_line,
        MEMORY_PARTS,
        sliders,
        **kw,
    )


SEQ_MODEL = "qwen3-8b"


def sequence_plan(seq: int, recompute: str) -> Plan:
    """Chapter 1's levers: Qwen3-8B on one GPU, sequences of ``seq`` tokens, recomputation ``recompute``."""
    return Plan.create(SEQ_MODEL, gpus=1, seq=seq, recompute=recompute)


def sequence_memory() -> Exercise:
    return memory_exercise(
        "ch1-largest",
        sequence_plan,
        {"seq": [2048, 8192, 32768], "recompute": ["none", "selective", "full"]},
        defaults={"seq": 8192, "recompute": "selective"},
        labels={"seq": "sequence s", "recompute": "recomputation"},
        texts={"seq": {2048: "2,048", 8192: "8,192", 32768: "32,768"}},
        setup=f"{load_model(SEQ_MODEL).name} on one GPU, one sequence per micro-batch.",
    )


def zero_plan(zero: int, gpus: int) -> Plan:
    """Chapter 3's levers: the anchor on ``gpus`` GPUs, pure DP with ZeRO stage ``zero``, selective recomputation."""
    return Plan.create(ANCHOR, gpus=gpus, zero=zero, recompute="selective")


def zero_memory() -> Exercise:
    return memory_exercise(
        "ch3-largest",
        zero_plan,
        {"zero": [0, 1, 2, 3], "gpus": [8, 64]},
        defaults={"zero": 1, "gpus": 8},
        labels={"zero": "ZeRO stage", "gpus": "GPUs"},
        setup="The anchor in pure data parallelism, selective recomputation.",
    )


MOE_MODELS = {"qwen3-30b-a3b": "Qwen3-30B-A3B (MoE)", "qwen3-8b": "Qwen3-8B (dense)"}


MOE_GPUS, MOE_SEQ = 8, 4096


def moe_plan(model: str, zero: int) -> Plan:
    """Chapter 10's levers: ``model`` on one node of ``MOE_GPUS`` GPUs, pure DP (no EP) with ZeRO stage ``zero``,
    selective recomputation, s = ``MOE_SEQ``, lab page's ledger."""
    return Plan.create(model, gpus=MOE_GPUS, zero=zero, recompute="selective", seq=MOE_SEQ)


def moe_memory() -> Exercise:
    return memory_exercise(
        "own-moe-largest",
        moe_plan,
        {"model": list(MOE_MODELS), "zero": [0, 1, 2, 3]},
        defaults={"model": "qwen3-30b-a3b", "zero": 3},
        labels={"model": "model", "zero": "ZeRO stage"},
        texts={"model": MOE_MODELS},
        setup=f"On {_on(MOE_GPUS)}, pure data parallelism (no EP), selective recomputation, s = {MOE_SEQ:,}.",
    )


# ---------------------------------------------------------------- memory: which pipeline stage peaks
STAGES = ("the first stage", "a middle stage", "the last stage")
STAGE_GPUS, STAGE_TP, STAGE_BATCH = 64, 4, 256


def stage_plan(pp: int, recompute: str) -> Plan:
    """Chapter 8's levers: the anchor on ``STAGE_GPUS`` GPUs with TP ``STAGE_TP``, PP ``pp`` and DP the rest, ZeRO-1
    (Megatron's distributed optimizer), recomputation ``recompute``, a global batch of ``STAGE_BATCH`` sequences, in
    Megatron-LM's ledger and stage layout (the embedding on the first stage, the head and the loss on the last)."""
    return Plan.create(
        ANCHOR, gpus=STAGE_GPUS, tp=STAGE_TP, pp=pp, zero=1, recompute=recompute, global_batch=STAGE_BATCH,
        accounting="megatron", stage_balance="max", uneven_stages=True,
    )  # fmt: skip


def peak_stage_name(r: Report) -> str:
    """Which of ``STAGES`` holds the plan's allocated peak (``Report.peak_stage``)."""
    k, last = r.peak_stage, r.plan.pp - 1
    return STAGES[0] if k == 0 else STAGES[2] if k == last else STAGES[1]


def stage_line(plan: Plan) -> str:
    r = evaluate(plan)
    parts = "; ".join(
        f"stage {s.index + 1}: {fmt_gb(s.peak.total, 2)} ({s.peak.name})" for s in r.by_stage if s.index in
        sorted({0, 1, plan.pp - 2, plan.pp - 1})
    )  # fmt: skip
    return f"{plan.dims.label()}, recompute {plan.recompute}, m = {plan.micro_batches}: {parts}."


def stage_peak() -> Exercise:
    """Which stage's GPU peaks highest: the first (most micro-batches in flight under 1F1B, the embedding) or the
    last (the head, the logits and the loss's temporaries)."""
    setup = (
        f"The anchor on {_on(STAGE_GPUS)} with TP {STAGE_TP}, ZeRO-1, a global batch of {STAGE_BATCH} sequences, in "
        "Megatron-LM's ledger and stage layout."
    )
    return plan_exercise(
        "ch8-peak-stage",
        "Which pipeline stage's GPUs reach the highest allocated peak?",
        stage_plan,
        lambda p: peak_stage_name(evaluate(p)),
        stage_line,
        STAGES,
        {"pp": [2, 4, 8], "recompute": ["selective", "full"]},
        defaults={"pp": 4, "recompute": "full"},
        labels={"pp": "stages p", "recompute": "recomputation"},
        setup=setup,
    )


# ---------------------------------------------------------------- scale: twice the replicas
def dp_plan(gpus: int, global_batch: int) -> Plan:
    """Chapter 2's levers: the anchor on ``gpus`` data-parallel GPUs (ZeRO-3, full recomputation: it fits), a global
    batch of ``global_batch`` sequences, lab page's ledger."""
    return Plan.create(ANCHOR, gpus=gpus, zero=3, recompute="full", global_batch=global_batch)


def dp_speedup() -> Exercise:
    """How many times faster the step is on 2N replicas than on N at the same global batch."""

    def times(gpus: int, global_batch: int):
        return tuple(step_time(evaluate(dp_plan(g, global_batch))) for g in (gpus, 2 * gpus))

    def answer(gpus: int, global_batch: int) -> float:
        before, after = times(gpus, global_batch)
        return before.total_s / after.total_s

    def explain(gpus: int, global_batch: int) -> str:
        before, after = times(gpus, global_batch)
        links = [link_name(evaluate(dp_plan(g, global_batch)).link["dp"]) for g in (gpus, 2 * gpus)]
        return (
            f"{gpus} GPUs (DP over {links[0]}): compute {before.compute_s:.2f} s + exposed DP "
            f"{before.dp_exposed_s:.2f} s = {before.total_s:.2f} s per step; {2 * gpus} (over {links[1]}): compute "
            f"{after.compute_s:.2f} s + exposed DP {after.dp_exposed_s:.2f} s = {after.total_s:.2f} s. The compute "
            "halves; the bytes each GPU synchronises stay about the same, and fewer micro-batches leave less backward "
            "to hide them under."
        )

    return Exercise(
        "ch2-speedup",
        "The anchor in pure data parallelism (ZeRO-3, full recomputation: it fits), the lab page's machine and "
        f"ledger, {LAB_GPUS_PER_NODE} GPUs a node. Double the GPUs at the same global batch: how many times faster "
        "is the step?",
        answer,
        sliders={"gpus": [8, 16, 32], "global_batch": [64, 256]},
        defaults={"gpus": 16, "global_batch": 256},
        unit="×",
        digits=2,
        explain=explain,
        labels={"gpus": "from N GPUs", "global_batch": "global batch B"},
    )


# ---------------------------------------------------------------- FSDP2 with gradient accumulation (chapter 9)
GROWS = ("all-gathers only", "reduce-scatters only", "all-gathers and reduce-scatters", "neither")


def fsdp_accum_counts(
    units: Sequence[int], reshard: bool | None, sync_every: bool, micro_batches: int
) -> tuple[int, int]:
    """(all-gathers, reduce-scatters) of one FSDP2 step over ``units`` (their parameter counts, root first) with
    ``reshard_after_forward=reshard`` (None: FSDP2's default) and the gradients synchronised after every backward or
    only the last (``zero.fsdp2_collectives_per_step``, the formula the gloo runs match)."""
    c = zero.fsdp2_collectives_per_step(units, predict.fsdp2_resharded(len(units), reshard), micro_batches, sync_every)
    return c["all_gathers"], c["reduce_scatters"]


def fsdp_accum_growth(units: Sequence[int], reshard: bool | None, sync_every: bool) -> str:
    """Which of FSDP2's collectives grow in number from one micro-batch per step to two (one of ``GROWS``)."""
    (ag1, rs1), (ag2, rs2) = (fsdp_accum_counts(units, reshard, sync_every, m) for m in (1, 2))
    return {(True, True): GROWS[2], (True, False): GROWS[0], (False, True): GROWS[1], (False, False): GROWS[3]}[
        (ag2 > ag1, rs2 > rs1)
    ]
