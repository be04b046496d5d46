"""The "what becomes the bottleneck" exercises (chapters 4, 5 and 7): each asks for ``StepTime.largest_overhead`` of
the plan its controls describe, and the answer moves as the lever does: DP synchronisation gives way to TP's
collectives as TP grows, the bubble to DP on a shallow pipeline and to TP on a large batch, DP to the EP all-to-all as
EP reaches and leaves the node."""

from __future__ import annotations

import pytest

from meshplan.course import bottleneck as B
from meshplan.plan import evaluate
from meshplan.steptime import OVERHEADS, StepTime, execution_for, step_time


def test_the_largest_overhead_is_the_largest_term_after_compute_first_of_equals():
    assert StepTime(100.0, 1.0, 2.0, 0.0, 0.0, 2.0, 0.5, 0.1).largest_overhead() == "CP communication"
    assert StepTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2).largest_overhead() == "optimizer step"
    assert set(OVERHEADS) == {"tp_s", "cp_s", "ep_s", "pp_s", "dp_exposed_s", "bubble_s", "optimizer_s"}


@pytest.mark.parametrize(
    ("exercise", "answers"),
    [
        (B.tp_bottleneck, {(1,): "DP synchronisation", (2,): "DP synchronisation", (4,): "TP communication",
                           (8,): "TP communication"}),
        (B.pp_bottleneck, {(2, 32): "DP synchronisation", (2, 64): "DP synchronisation", (2, 256): "TP communication",
                           (4, 32): "pipeline bubble", (4, 64): "pipeline bubble", (4, 256): "TP communication",
                           (8, 32): "pipeline bubble", (8, 64): "pipeline bubble", (8, 256): "TP communication"}),
        (B.ep_bottleneck, {(1,): "DP synchronisation", (2,): "DP synchronisation", (4,): "DP synchronisation",
                           (8,): "EP all-to-all", (16,): "EP all-to-all", (32,): "EP all-to-all",
                           (64,): "EP all-to-all"}),
    ],
)  # fmt: skip
def test_each_combination_answers_as_the_step_time_model(exercise, answers):
    ex = exercise()
    names = list(ex.sliders)
    assert ex.choices == tuple(OVERHEADS.values())
    assert {tuple(v[n] for n in names): ex.result(**v).value for v in ex.combinations()} == answers


def test_the_worked_answer_lists_every_term_largest_first():
    plan = B.pp_plan(4, 64)
    st = step_time(evaluate(plan), execution_for("lab"))
    line = B.overhead_line(plan)
    assert line.startswith(f"TP 2 × PP 4 × DP 4, m = 16: compute {st.compute_s:.2f} s per step; then pipeline bubble")
    shown = [
        OVERHEADS[k] for k, v in sorted(st.terms().items(), key=lambda kv: -kv[1]) if k != "compute_s" and v >= 5e-3
    ]
    assert [part.rsplit(" ", 2)[0] for part in line.split("; then ")[1].split(" (")[0].split("; ")] == shown
    assert line.endswith(f"({st.total_s:.2f} s in all).")
    # EP across the node: the all-to-all's seconds more than triple from EP 8 to EP 16
    ep8, ep16 = (step_time(evaluate(B.ep_plan(e)), execution_for("lab")).ep_s for e in (8, 16))
    assert ep16 > 3 * ep8


def test_the_memory_exercises_answer_which_part_is_largest():
    seq = B.sequence_memory()
    assert seq.choices == B.MEMORY_PARTS
    got = {(v["seq"], v["recompute"]): seq.result(**v).value for v in seq.combinations()}
    # the optimizer states (12 B a parameter) lead until the activations outgrow them: 8K tokens without recomputation,
    # 32K with selective; full recomputation keeps them under at every length
    assert {k for k, v in got.items() if v == "activations"} == {(8192, "none"), (32768, "none"), (32768, "selective")}
    assert set(got.values()) == {"activations", "optimizer states"}
    zero = B.zero_memory()
    assert {(v["zero"], v["gpus"]): zero.result(**v).value for v in zero.combinations()} == {
        **{(0, g): "optimizer states" for g in (8, 64)},
        **{(z, g): "weights and gradients" for z in (1, 2) for g in (8, 64)},
        **{(3, g): "activations" for g in (8, 64)},
    }
    assert B.memory_line(B.zero_plan(3, 8)) == (
        "DP 8, ZeRO-3, recompute selective, s = 4,096: activations 45.6 GB, optimizer states 41.7 GB, weights and "
        "gradients 13.9 GB per GPU."
    )


def test_the_cp_exercise_exposes_the_ring_only_on_short_chunks():
    ex = B.cp_bottleneck()
    got = {(v["cp"], v["seq"]): ex.result(**v).value for v in ex.combinations()}
    assert {k for k, v in got.items() if v == "CP communication"} == {(16, 32768)}  # 2,048 tokens per rank
    assert set(got.values()) == {"CP communication", "DP synchronisation"}


def test_twice_the_replicas_is_never_twice_as_fast_and_crossing_the_node_costs_most():
    ex = B.dp_speedup()
    got = {(v["gpus"], v["global_batch"]): float(ex.result(**v).value or 0.0) for v in ex.combinations()}
    assert all(1 < s < 2 for s in got.values())
    # a larger batch hides more of the synchronisation under more micro-batches of backward
    assert all(got[g, 256] > got[g, 64] for g in (8, 16, 32))
    assert ex.result(gpus=8, global_batch=256).explanation.startswith("8 GPUs (DP over NVLink)")
    assert "16 (over InfiniBand)" in ex.result(gpus=8, global_batch=256).explanation


def test_an_moe_keeps_its_optimizer_states_largest_where_a_dense_model_turns_to_activations():
    ex = B.moe_memory()
    got = {(v["model"], v["zero"]): ex.result(**v).value for v in ex.combinations()}
    assert got["qwen3-30b-a3b", 3] == "optimizer states" and got["qwen3-8b", 3] == "activations"
    assert got["qwen3-30b-a3b", 1] == got["qwen3-8b", 1] == "weights and gradients"


def test_chapter9_gradient_accumulation_grows_the_gathers_and_the_reduce_scatters_only_with_sync():
    """Chapter 9's consequence exercise (``ch9-accum-grows``), from the formula its gloo runs match exactly: whatever
    reshard_after_forward says, every micro-batch gathers the parameters again; the reduce-scatters grow with m only
    when every backward synchronises the gradients."""
    from meshplan import load_model
    from meshplan.parallel import zero

    units = zero.fsdp_unit_params(load_model("small-3.7m"))
    for reshard in (True, None, False):
        assert B.fsdp_accum_growth(units, reshard, True) == "all-gathers and reduce-scatters"
        assert B.fsdp_accum_growth(units, reshard, False) == "all-gathers only"
        one, two = (B.fsdp_accum_counts(units, reshard, False, m) for m in (1, 2))
        assert two == (2 * one[0], one[1])


def test_which_end_of_the_pipeline_peaks_depends_on_the_recomputation_and_the_depth():
    """Chapter 8: the first stage (1F1B's in-flight micro-batches) peaks with selective recomputation at every depth;
    with full recomputation the last stage (the head, the logits, the loss) peaks at PP 2 and 4, and the first again
    at PP 8, where each stage's layers are fewer."""
    ex = B.stage_peak()
    got = {(v["pp"], v["recompute"]): ex.result(**v).value for v in ex.combinations()}
    assert got == {
        (2, "selective"): "the first stage", (4, "selective"): "the first stage", (8, "selective"): "the first stage",
        (2, "full"): "the last stage", (4, "full"): "the last stage", (8, "full"): "the first stage",
    }  # fmt: skip
    assert ex.result(pp=4, recompute="full").explanation.endswith("stage 4: 19.26 GB (loss forward).")
