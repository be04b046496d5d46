"""Context parallelism over Gated DeltaNet layers (issue 26): Megatron-Core re-shards each such layer from
sequence to heads and back with all-to-alls (``cp.linear_attention_cp_collectives``), so the megatron ledger's CP
bytes and step time grow with the sequence for the anchor's 48 linear-attention layers too; the lab page's ledger
keeps its convention (a fixed-size state, nothing sent)."""

from __future__ import annotations

import pytest

from meshplan import Plan, evaluate, load_model
from meshplan.parallel.cp import linear_attention_cp_collectives, linear_attention_widths
from meshplan.steptime import Execution, step_time

H100 = "h100-sxm-80gb"


def _plan(accounting: str, model: str = "qwen3.8-27b", cp: int = 8, seq: int = 131072, **kw) -> Plan:
    return Plan.create(model, gpus=64, tp=2, cp=cp, seq=seq, hardware=H100, accounting=accounting, **kw)


def test_the_megatron_ledger_sends_the_all_to_alls_of_every_linear_layer():
    m = load_model("qwen3.8-27b")
    L = next(x for x in m.layers if x.mixer == "linear_attention")
    p = _plan("megatron", zero=1)
    r = evaluate(p)
    st = p.stages[r.traffic_stage]
    assert st.linear_attention_layers == 48 and st.full_attention_layers == 16
    into, back = linear_attention_widths(
        L.linear_num_key_heads, L.linear_num_value_heads, L.linear_key_head_dim, L.linear_value_head_dim, 2
    )
    assert (into, back) == (16480 / 2, 6144 / 2)
    coll = linear_attention_cp_collectives(131072, 1, into, back, 8)
    forward = 7 / 8 * (131072 // 8) * (into + back) * 2  # each rank keeps 1/c of its buffer, bf16
    assert sum(c.sent_bytes for c in coll if c.in_ledger) == pytest.approx(forward, rel=1e-12)
    assert r.collectives["cp_linear"] == coll
    # the rest of CP's bytes: the K/V ring of the 16 softmax layers and CP's share of the gradient sync
    kv = sum(c.sent_bytes for c in r.collectives["cp"] if c.in_ledger) * 16 * p.micro_batches
    rest = kv + r.grad_sync_bytes["cp"]
    assert r.comm_bytes_per_step["cp"] == pytest.approx(rest + forward * 48 * p.micro_batches, rel=1e-12)
    assert evaluate(_plan("lab", zero=1)).collectives["cp_linear"] == ()  # the lab page's convention


def test_the_step_time_prices_all_of_them_unhidden_and_more_with_the_sequence():
    ex = Execution()  # CP ring overlapped: only the all-to-alls can show
    short, long = (step_time(evaluate(_plan("megatron", zero=1, seq=s)), ex).cp_s for s in (32768, 131072))
    assert 0 < short < long
    full = evaluate(_plan("megatron", zero=1, recompute="full"))
    assert [c.phase for c in full.collectives["cp_linear"]].count("recompute") == 2


def test_no_linear_layers_no_all_to_alls():
    r = evaluate(Plan.create("llama-3.1-70b", gpus=64, tp=4, cp=8, seq=131072, hardware=H100, accounting="megatron"))
    assert r.collectives["cp_linear"] == ()
    assert evaluate(_plan("megatron", cp=1, seq=8192, zero=1)).collectives["cp_linear"] == ()


def test_the_megatron_ledger_refuses_a_split_megatron_core_asserts_against():
    """TP × CP must divide the Gated DeltaNet key and value heads (transformer_config.py L1371-L1382 at
    core_v0.19.0): TP 4 × CP 16 does not divide the anchor's 16 key heads; the lab page's ledger has no such rule."""
    from meshplan.core.validation import PlanError

    with pytest.raises(PlanError, match=r"tp × cp = 4 × 16 does not divide 16 linear-attention key heads") as err:
        Plan.create("qwen3.8-27b", gpus=64, tp=4, cp=16, seq=131072, zero=3, accounting="megatron")
    assert err.value.factor == "cp"
    Plan.create("qwen3.8-27b", gpus=64, tp=4, cp=16, seq=131072, zero=3, accounting="fsdp2")
    Plan.create("qwen3.8-27b", gpus=64, tp=1, cp=16, seq=131072, zero=3, accounting="megatron")
