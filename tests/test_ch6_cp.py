"""Chapter 6 (context parallel): the numbers it prints, each asserted to its printed digit from the library
(GB = 1e9 B), and the page rules checked on the saved notebook."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import saved_notebook
from saved_notebook import printed

from meshplan import Plan, evaluate, load_model, search, steptime
from meshplan.core.units import fmt_gb, fmt_gib, fmt_int, fmt_mb, fmt_pct
from meshplan.course import evolution, published
from meshplan.course.lab import LAB_64_GPUS, lab_plan
from meshplan.parallel import activations, cp, tp
from meshplan.steptime import breakdowns
from meshplan.steptime import fitting as calibration

LONG = 131072
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "06_context_parallel.ipynb"


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


@pytest.fixture(scope="module")
def stages():
    return {row.stage.number: row.numbers for row in evolution.rows()}


@pytest.fixture(scope="module")
def llama():
    run = calibration.run("llama3-405b-128k-16384gpu")
    return calibration.run_plan(run), calibration.run_execution(run)


# ------------------------------------------------------------------------------------------- the saved page


def _cells() -> list[dict]:
    return saved_notebook.cells(NOTEBOOK)


def page_text_before(marker: str) -> tuple[str, str]:
    return saved_notebook.page_text_around(NOTEBOOK, marker)


def test_exercise_defaults_are_not_printed_above(anchor):
    h, a, L = anchor.hidden_size, anchor.num_attention_heads, anchor.num_layers
    defaults = {  # id: the library's answer at the default controls, as the exercise prints it (its unit)
        "ch6-activations": f"{activations.activation_bytes(262144, 1, h, a, L, 8, 'selective', cp=4) / 1e9:,.1f} GB",
        "ch6-causal": f"{max(cp.causal_load(16, 4)):,} pairs",
        "ch6-ring": f"{cp.ring_kv_bytes_per_layer(65536, 1, anchor.kv_width, 4) / 1e9:,.2f} GB",
        "ch6-ulysses": f"{cp.ulysses_heads_per_rank(64, 8, 4)[1]} heads",
    }
    assert defaults == {
        "ch6-activations": "91.3 GB",
        "ch6-causal": "58 pairs",
        "ch6-ring": "0.20 GB",
        "ch6-ulysses": "2 heads",
    }
    for ex, answer in defaults.items():
        above, _ = page_text_before(f'Exercise("{ex}"')
        number = answer.split()[0]
        assert answer not in above, f"{ex}: its default answer {answer} is printed above it"
        if len(number) > 2:  # small integers (2, 58) are everywhere; longer numbers must not be
            assert not printed(number, above), f"{ex}: its default answer {number} is printed above it"
    assert printed("58", page_text_before('Exercise("ch6-causal"')[1].split("Ring Attention")[0])


def test_the_page_shows_a_handful_of_code_cells():
    code = [c for c in _cells() if c["cell_type"] == "code"]
    tags = [tuple(c["metadata"].get("tags", ())) for c in code]
    # one tag, or remove-input with hide-output: a table that would answer an exercise on its screen, folded
    assert all(
        (set(t) <= {"remove-cell", "remove-input", "hide-input"} and len(t) <= 1)
        or set(t) == {"remove-input", "hide-output"}
        for t in tags
    )
    visible = [c for c, t in zip(code, tags) if not t]
    assert 1 <= len(visible) <= 5
    assert all(len("".join(c["source"]).splitlines()) <= 3 for c in visible)


def test_mfu_links_to_chapter_1_and_the_branch_does_not_claim_chapter_7():
    text = "\n".join("".join(c["source"]) for c in _cells() if c["cell_type"] == "markdown")
    assert "{doc}`defined in chapter 1 <01_one_gpu>`" in text
    closing = text.split("## Where it gets stuck")[1]
    assert "does not follow from this one" in closing
    assert "64 GPUs" not in text and "131K" not in text  # numbers in the prose are glued


# ------------------------------------------------------------------------------------------- the numbers


def test_opens_from_chapter_5s_stuck_point(stages):
    assert [stages[6][k].text for k in ("p", "m", "bubble")] == ["8", "32", "21.9 %"]
    assert stages[8]["long_seq"].value == LONG


def test_a_long_sequence_fits_tp8_pp8_with_full_recompute():
    plan = lab_plan(LAB_64_GPUS[0])
    got = {}
    for rc in ("selective", "full"):
        r = evaluate(plan.replace(seq=LONG, recompute=rc))
        got[rc] = (
            fmt_gb(r.memory_bytes["model_states"]),
            fmt_gb(r.memory_bytes["activations"]),
            fmt_gb(r.memory_bytes["total"]),
            r.fits,
        )
    assert got == {
        "selective": ("6.9 GB", "182.5 GB", "189.5 GB", False),
        "full": ("6.9 GB", "10.7 GB", "17.7 GB", True),
    }


def test_llama3_kept_its_tokens_per_step():
    rows = published.value("llama3_table4")
    tokens = [published.tokens_per_step(r["seq"], r["batch_per_dp"], r["dp"]) for r in rows]
    assert fmt_int(tokens[2]) == "16,777,216" and len(set(tokens)) == 1
    assert [r["batch_per_dp"] * r["dp"] for r in rows] == [2048, 2048, 128]
    long_row = rows[2]
    assert (long_row["cp"], long_row["dp"], long_row["seq"], rows[1]["dp"]) == (16, 8, LONG, 128)
    assert long_row["gpus"] // (long_row["tp"] * long_row["pp"]) == 128  # replicas without CP: one sequence each
    assert fmt_pct(long_row["mfu"], 0) == "38 %" and long_row["mfu"] == min(r["mfu"] for r in rows)


def test_cp_keeps_the_llama3_pipelines_busy(llama):
    with_cp, ex = llama
    without_cp = breakdowns.fold_into_dp(with_cp)
    got = {}
    for plan in (with_cp, without_cp):
        r = evaluate(plan)
        st = steptime.step_time(r, ex)
        got[plan.cp] = (
            plan.dp,
            plan.micro_batches,
            plan.virtual_stages,
            f"{100 * r.bubble:,.1f} %",
            f"{st.total_s:.1f} s",
            fmt_pct(steptime.mfu(r, st.total_s)),
        )
        if plan.cp > 1:
            assert (f"{st.cp_s:.2f} s", fmt_pct(st.cp_s / st.total_s)) == ("0.78 s", "6.1 %")
    assert got == {
        16: (8, 16, 7, "13.4 %", "12.8 s", "45.8 %"),
        1: (128, 1, 1, "1,500.0 %", "164.2 s", "3.6 %"),
    }


def test_fold_into_dp():
    p = Plan.create("qwen3.8-27b", gpus=64, tp=4, cp=4, pp=4, seq=32768, global_batch=16, virtual_stages=2)
    q = breakdowns.fold_into_dp(p)
    assert (q.cp, q.dp, q.micro_batches, q.virtual_stages, q.global_batch) == (1, 4, 4, 2, 16)  # m = 4 ≥ pp: kept
    r = breakdowns.fold_into_dp(p.replace(global_batch=4))
    assert (r.dp, r.micro_batches, r.virtual_stages) == (4, 1, 1)  # m = 1 < pp: the interleaved schedule cannot run
    plain = Plan.create("qwen3.8-27b", gpus=8, tp=8)
    assert breakdowns.fold_into_dp(plain) is plain
    with pytest.raises(ValueError, match=r"^global batch 1 is not divisible by dp × micro-batch size = 8 × 1 = 8$"):
        breakdowns.fold_into_dp(Plan.create("qwen3.8-27b", gpus=64, tp=8, cp=8, seq=LONG, global_batch=1))


def test_activations_of_one_long_sequence(anchor):
    h, a, L = anchor.hidden_size, anchor.num_attention_heads, anchor.num_layers
    got = [fmt_gb(activations.activation_bytes(LONG, 1, h, a, L, 8, "selective", cp=c)) for c in (1, 2, 4, 8, 16)]
    assert got == ["182.5 GB", "91.3 GB", "45.6 GB", "22.8 GB", "11.4 GB"]
    assert fmt_gb(activations.activation_bytes_per_layer(LONG, 1, h, a, 8, "selective")) == "2.9 GB"


def test_causal_load_and_zigzag(stages):
    assert cp.causal_load(16, 4) == (10, 26, 42, 58)
    assert cp.causal_load(16, 4, zigzag=True) == (34, 34, 34, 34)
    assert (stages[8]["contiguous"].text, stages[8]["zigzag"].text) == ("10 : 26 : 42 : 58", "34 : 34 : 34 : 34")
    assert cp.zigzag_chunks(4) == ((0, 7), (1, 6), (2, 5), (3, 4))
    assert f"{cp.load_imbalance(cp.causal_load(16, 4)):.2f}" == "1.71"
    assert cp.token_ranges(16, 4) == (((1, 4),), ((5, 8),), ((9, 12),), ((13, 16),))
    assert cp.token_ranges(16, 4, zigzag=True)[3] == ((7, 8), (9, 10))
    for tokens, ranks in ((32, 4), (64, 8), (24, 2), (128, 8)):
        loads = cp.causal_load(tokens, ranks, zigzag=True)
        assert len(set(loads)) == 1 and sum(loads) == tokens * (tokens + 1) // 2
    with pytest.raises(ValueError, match="2 × ranks = 16 does not divide tokens=24"):
        cp.causal_load(24, 8, zigzag=True)


def test_ring_attention_bytes(anchor):
    kv = cp.kv_bytes_per_layer(LONG, 1, anchor.kv_width)
    assert (fmt_gb(kv), fmt_gb(kv, 3), fmt_gib(kv)) == ("0.5 GB", "0.537 GB", "0.5 GiB")
    ring = {c: cp.ring_kv_bytes_per_layer(LONG, 1, anchor.kv_width, c) for c in (2, 4, 8, 16)}
    assert [fmt_gb(ring[c], 2) for c in ring] == ["0.27 GB", "0.40 GB", "0.47 GB", "0.50 GB"]
    assert [fmt_gb(ring[c] * anchor.num_full_attention_layers) for c in ring] == [
        "4.3 GB",
        "6.4 GB",
        "7.5 GB",
        "8.1 GB",
    ]
    with pytest.raises(ValueError, match="cp=3 does not divide seq=131072"):
        cp.ring_kv_bytes_per_layer(LONG, 1, anchor.kv_width, 3)
    # with TP 8 a GPU holds one of the 4 KV heads (replicated on 2 GPUs) and passes only its K and V
    assert tp.head_split(anchor.num_attention_heads, anchor.num_key_value_heads, 8).kv_heads_per_gpu == 1
    per_gpu = cp.ring_kv_bytes_per_layer(
        LONG, 1, cp.kv_width_per_gpu(anchor.kv_width, anchor.num_key_value_heads, 8), 8
    )
    assert per_gpu == ring[8] / 4 and fmt_gb(per_gpu, 2) == "0.12 GB"


def test_kv_exchange_against_attention(anchor, llama):
    plan = Plan.create(anchor, gpus=64, tp=8, cp=8, seq=LONG, recompute="full", micro_batches=1)
    rows = {}
    for label, report, ex in (
        ("8K", evaluate(plan.replace(seq=8192)), None),
        ("131K", evaluate(plan), None),
        ("llama", evaluate(llama[0]), llama[1]),
    ):
        o = breakdowns.ring_overlap(report, execution=ex)
        rows[label] = (
            fmt_mb(o.kv_bytes),
            o.link,
            f"{1e3 * o.transfer_s:.2f}",
            f"{1e3 * o.attention_s:.2f}",
            f"{o.ratio:.2f}",
            o.passes,
            o.layers,
            o.overlapped,
        )
    assert rows == {
        "8K": ("7.3 MB", "infiniband", "0.35", "0.04", "9.52", 4, 16, True),
        "131K": ("117.4 MB", "infiniband", "3.31", "9.52", "0.35", 4, 16, True),
        "llama": ("62.9 MB", "infiniband", "2.03", "12.70", "0.16", 3, 8, False),
    }


@pytest.mark.parametrize(
    "kw",
    [
        {"gpus": 64, "tp": 8, "cp": 8, "seq": 8192, "micro_batches": 1, "recompute": "full"},
        {"gpus": 64, "tp": 8, "cp": 8, "seq": LONG, "micro_batches": 1, "recompute": "none"},
        {"gpus": 64, "tp": 4, "cp": 4, "pp": 4, "seq": 32768, "recompute": "selective"},
        {"gpus": 32, "tp": 2, "cp": 16, "seq": 65536, "recompute": "selective", "hardware": "h100-sxm-80gb"},
    ],
)
def test_ring_overlap_is_the_step_time_models_cp_term(anchor, kw):
    report = evaluate(Plan.create(anchor, **kw))
    base = steptime.execution_for("lab")
    for k in range(report.plan.pp):
        for overlap in (True, False):
            ex = replace(base, cp_overlap=overlap)
            o = breakdowns.ring_overlap(report, k, execution=ex)
            assert o.overlapped is overlap
            assert o.per_micro_batch_s == pytest.approx(steptime.micro_batch(report, k, ex).cp_s, rel=1e-12)
            assert o.per_micro_batch_s == o.passes * o.layers * (
                max(0.0, o.transfer_s - o.attention_s) if overlap else o.transfer_s
            )


def test_ring_overlap_refuses_what_has_no_exchange(anchor):
    with pytest.raises(ValueError, match=r"^cp=1: the plan has no context parallelism, so no K/V are exchanged$"):
        breakdowns.ring_overlap(evaluate(Plan.create(anchor, gpus=8, tp=8)))
    report = evaluate(Plan.create(anchor, gpus=64, tp=8, cp=8, seq=LONG, micro_batches=1))
    with pytest.raises(ValueError, match=r"^stage=1 must be a pipeline stage from 0 to 0$"):
        breakdowns.ring_overlap(report, 1)
    deep = evaluate(Plan.create(anchor, gpus=128, cp=2, pp=64, seq=8192, recompute="full", micro_batches=64))
    with pytest.raises(ValueError, match=r"^stage 0 of qwen3.8-27b has no full-attention layer"):
        breakdowns.ring_overlap(deep, 0)  # one Gated DeltaNet layer per stage; layer 3 is the first full-attention one
    assert breakdowns.ring_overlap(deep, 3).layers == 1


def test_only_full_attention_layers_pay(anchor):
    assert (anchor.num_full_attention_layers, anchor.num_layers - anchor.num_full_attention_layers) == (16, 48)
    shape = cp.linear_attention_shape("qwen3.8-27b")
    state = cp.linear_state_bytes(**shape)
    assert fmt_mb(state, 2) == "1.57 MB"
    assert f"{cp.kv_bytes_per_layer(LONG, 1, anchor.kv_width) / state:.0f}" == "341"
    with pytest.raises(ValueError, match="no linear-attention layers"):
        cp.linear_attention_shape("llama-3.1-8b")


def test_ulysses_capped_by_4_kv_heads(anchor):
    assert anchor.num_key_value_heads == 4
    assert cp.ulysses_max_degree(anchor.num_attention_heads, anchor.num_key_value_heads) == 4
    assert cp.ulysses_heads_per_rank(24, 4, 2) == (12, 2) and cp.ulysses_heads_per_rank(24, 4, 4) == (6, 1)
    with pytest.raises(ValueError) as err:
        cp.ulysses_heads_per_rank(24, 4, 8)
    assert str(err.value) == "cp=8 does not divide 4 KV heads (Ulysses splits heads over the CP ranks)"
    assert cp.ulysses_max_degree(32, 8) == 8  # Llama 3.1 8B: 8 KV heads


def test_plan_it_yourself(anchor):
    """The checklist's lines, from the library: the search's winner passes each; the others fail where the page
    says."""
    assert search.MIN_SEQ_PER_CP_RANK == 4096
    assert lab_plan(LAB_64_GPUS[1]).tokens_per_step == LONG  # the lab's 64-GPU token budget: one sequence

    def plan(tp_, cp_, pp_, zero, rc):
        return Plan.create(anchor, gpus=64, tp=tp_, cp=cp_, pp=pp_, seq=LONG, zero=zero, recompute=rc, micro_batches=1)

    best = evaluate(plan(4, 16, 1, 3, "selective"))
    o = breakdowns.ring_overlap(best)
    assert (fmt_gb(best.memory_bytes["total"]), best.fits, LONG // 16 >= 4096, o.transfer_s < o.attention_s) == (
        "29.8 GB",
        True,
        True,
        True,
    )
    assert 4 % 4 == 0 and anchor.num_key_value_heads % 8  # TP 4 holds whole KV heads, TP 8 does not
    assert LONG // 64 < search.MIN_SEQ_PER_CP_RANK  # CP 64 leaves 2,048 tokens per rank
    exposed = breakdowns.ring_overlap(evaluate(plan(1, 64, 1, 3, "full")))
    assert exposed.transfer_s > exposed.attention_s  # TP 1: four KV heads per GPU to pass
    assert not evaluate(plan(4, 16, 1, 0, "selective")).fits  # ZeRO must shard over the CP ranks


def test_the_search_agrees(anchor):
    result = search.search(anchor, 64, LONG, 1, max_cp=64)
    assert (fmt_int(result.enumerated), fmt_int(len(result.ranked))) == ("9,855", "132")
    top = result.ranked[0]
    assert (top.plan.dims.label(), top.plan.zero, top.plan.recompute, fmt_gb(top.report.memory_bytes["total"])) == (
        "TP 4 × CP 16",
        2,
        "selective",
        "42.8 GB",
    )
    assert (f"{top.step.total_s:.2f} s", fmt_pct(top.mfu())) == ("1.54 s", "41.6 %")
    found = result.rank_of(tp=8, cp=8)
    assert found is not None
    index, _ = found
    assert result.tied_ranks()[index - 1] == 5


def test_ends_with_row_8_of_the_map(stages, anchor):
    eight = stages[8]
    assert [eight[k].text for k in ("kv_layer", "cp", "kv_heads", "ulysses_max", "long_seq")] == [
        "0.5 GB",
        "8",
        "4",
        "4",
        "131,072",
    ]
    assert eight["kv_layer"].text == fmt_gb(cp.ring_kv_bytes_per_layer(LONG, 1, anchor.kv_width, 8))
    assert eight["ulysses_max"].value == cp.ulysses_max_degree(anchor.num_attention_heads, anchor.num_key_value_heads)


def test_causal_owners_draw_the_figure():
    for tokens, ranks, zigzag in ((16, 4, False), (16, 4, True), (24, 2, True), (64, 8, False)):
        grid = cp.causal_owners(tokens, ranks, zigzag)
        work = [sum(1 for row in grid for owner in row if owner == r) for r in range(ranks)]
        assert tuple(work) == cp.causal_load(tokens, ranks, zigzag)
        assert all(grid[q][k] == -1 for q in range(tokens) for k in range(q + 1, tokens))
    assert [row[0] for row in cp.causal_owners(16, 4, zigzag=True)][:4] == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="2 × ranks = 16 does not divide tokens=24"):
        cp.causal_owners(24, 8, zigzag=True)
