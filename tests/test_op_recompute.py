"""torchtitan's op-level selective activation checkpointing (``recompute="op"``, issue 24): what the fsdp2 ledger
keeps of a layer, what it refuses, and what it costs; tests/test_peak_measure.py holds the resulting peak to
FSDPMemTracker's measurement of torchtitan's policy."""

from __future__ import annotations

import pytest

from meshplan import Plan, evaluate, load_model
from meshplan.core.validation import MeshplanError
from meshplan.export import export_text
from meshplan.parallel import compute
from meshplan.parallel.engine_activations import layer_bytes, op_projections, spec_implementation
from meshplan.steptime import step_time


def test_op_keeps_the_input_every_other_projection_and_the_attention_outputs():
    m = load_model("llama-3.1-8b")
    L, h, T = m.layers[0], m.hidden_size, 4096
    kept = [name for name, _, _, _, _, keep in op_projections(L, h, spec_implementation(m)) if keep]
    assert kept == ["q_proj", "v_proj", "gate_proj", "down_proj"]  # the 1st, 3rd, 5th and 7th mm
    a, kv, d, f = L.num_heads, L.num_kv_heads, L.head_dim, L.intermediate_size
    want = 2 * T * h + 2 * T * (a * d + kv * d + f + h) + 2 * T * a * d + 4 * T * a
    assert layer_bytes(L, h, T, 1, family=m.family, recompute="op") == want
    assert layer_bytes(L, h, T, 1, family=m.family, recompute="full") < want
    assert want < layer_bytes(L, h, T, 1, family=m.family, recompute="none")


def test_a_projection_with_a_bias_is_an_addmm_always_kept_and_not_counted():
    m = load_model("qwen3-8b")
    qwen2 = {"model_type": "qwen2", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
             "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 32000}  # fmt: skip
    from meshplan.spec.model import model_from_config

    q2 = model_from_config(qwen2)
    rows = op_projections(q2.layers[0], q2.hidden_size, spec_implementation(q2))
    assert [(n, k) for n, _, _, _, _, k in rows][:4] == [
        ("q_proj", True), ("k_proj", True), ("v_proj", True), ("o_proj", True),
    ]  # fmt: skip  # q, k, v have biases (addmm); o_proj is the first counted mm
    assert [k for *_, k in op_projections(m.layers[0], m.hidden_size, spec_implementation(m))] == [
        True, False, True, False, True, False, True,
    ]  # fmt: skip


@pytest.mark.parametrize("ledger", ["lab", "megatron", "deepspeed"])
def test_only_the_fsdp2_ledger_has_it(ledger):
    with pytest.raises(MeshplanError, match=rf"recompute='op' is torchtitan's .* the {ledger} ledger has no such mode"):
        Plan.create("llama-3.1-8b", gpus=8, zero=3 if ledger != "deepspeed" else 2, recompute="op", accounting=ledger)


def test_moe_and_mla_layers_are_refused_not_guessed():
    with pytest.raises(ValueError, match="not yet for layers with routed experts"):
        evaluate(Plan.create("qwen3-30b-a3b", gpus=8, zero=3, recompute="op", accounting="fsdp2"))
    with pytest.raises(ValueError, match="not yet for mla layers"):
        evaluate(Plan.create("deepseek-v3", gpus=256, ep=8, pp=8, zero=3, recompute="op", accounting="fsdp2",
                             uneven_stages=True))  # fmt: skip


def test_it_costs_between_no_recompute_and_full():
    r = {
        rc: evaluate(
            Plan.create("llama-3.1-8b", gpus=8, zero=3, seq=8192, accounting="fsdp2", hardware="h100-sxm-80gb",
                        recompute=rc)
        )
        for rc in ("none", "op", "full")
    }  # fmt: skip
    peaks = [r[x].memory_bytes["peak_allocated"] for x in ("full", "op", "none")]
    times = [step_time(r[x]).total_s for x in ("none", "op", "full")]
    assert peaks == sorted(peaks) and times == sorted(times)
    m = load_model("llama-3.1-8b")
    # k, o and up projections: 4096·1024 + 4096·4096 + 4096·14336 weights recomputed per layer
    assert compute.op_recomputed_params(m.layers[0], m) == 4096 * 1024 + 4096 * 4096 + 4096 * 14336


def test_torchtitan_exports_and_prices_its_selective_as_op():
    p = Plan.create("llama-3.1-8b", gpus=8, zero=3, recompute="selective", accounting="fsdp2")
    text = export_text(p, "torchtitan")
    assert 'mode = "selective"' in text and 'selective_ac_option = "op"' in text
    assert "priced as recompute='op'" in text
    op = Plan.create("llama-3.1-8b", gpus=8, zero=3, recompute="op", accounting="fsdp2")
    assert export_text(op, "torchtitan").splitlines()[0] == text.splitlines()[0]  # the same price


@pytest.mark.parametrize(
    ("model", "ledger", "why"),
    [
        ("qwen3.8-27b", "fsdp2", "not yet for linear_attention layers"),
        ("qwen3-30b-a3b", "fsdp2", "not yet for layers with routed experts"),
        ("qwen3-8b", "megatron", "the megatron ledger has no such mode"),
    ],
)
def test_a_search_rejects_a_refused_op_mode_by_name_and_prices_the_others(model, ledger, why):
    """A plan refuses 'op' for a model or ledger it is not priced for, before any rule of the mesh; a search given
    it among its modes rejects those plans under "plan" with that message (it raised the PlanError before) and
    prices the other modes as it would without it, pruned or not."""
    from meshplan.search import search

    kw = {"gpus": 8, "seq": 4096, "global_batch": 8, "hardware": "h100-sxm-80gb", "accounting": ledger}
    got = search(model, recompute=("none", "op", "full"), **kw)
    assert got == search(model, recompute=("none", "op", "full"), _prune=False, **kw)
    op = [r for r in got.rejected if r.settings["recompute"] == "op"]
    assert any(why in r.message for r in op)
    assert all(why in r.message for r in op if r.constraint in ("plan", "memory"))  # none reaches memory
    assert not any(c.plan.recompute == "op" for c in got.ranked)
    without = search(model, recompute=("none", "full"), **kw)
    assert [c.plan for c in got.ranked] == [c.plan for c in without.ranked]
