"""Chapter 6 (context parallel): the key numbers it prints, each asserted to its printed digit (GB = 1e9 B)."""

from __future__ import annotations

import pytest

from meshplan import activations, cp, load_hardware, load_model, published, tp
from meshplan.units import fmt_gb, fmt_gib, fmt_int, fmt_mb, fmt_pct

LONG = 131072


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


def test_activations_of_one_long_sequence(anchor):
    h, a, L = anchor.hidden_size, anchor.num_attention_heads, anchor.num_layers
    got = [fmt_gb(activations.activation_bytes(LONG, 1, h, a, L, 8, "selective", cp=c)) for c in (1, 2, 4, 8, 16)]
    assert got == ["182.5 GB", "91.3 GB", "45.6 GB", "22.8 GB", "11.4 GB"]
    assert fmt_gb(activations.activation_bytes_per_layer(LONG, 1, h, a, 8, "selective")) == "2.9 GB"


def test_causal_load_and_zigzag():
    assert cp.causal_load(16, 4) == (10, 26, 42, 58)
    assert cp.causal_load(16, 4, zigzag=True) == (34, 34, 34, 34)
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
    assert fmt_gb(ring[8] * anchor.num_full_attention_layers) == "7.5 GB"
    hw = load_hardware()
    assert (f"{1e3 * ring[8] / hw.nvlink_bytes_per_s:.1f}", f"{1e3 * ring[8] / hw.infiniband_bytes_per_s:.1f}") == \
        ("2.9", "9.4")
    with pytest.raises(ValueError, match="cp=3 does not divide seq=131072"):
        cp.ring_kv_bytes_per_layer(LONG, 1, anchor.kv_width, 3)
    # with TP 8 a GPU holds one of the 4 KV heads (replicated on 2 GPUs) and passes only its K and V
    kv_heads = tp.head_split(anchor.num_attention_heads, anchor.num_key_value_heads, 8).kv_heads_per_gpu
    assert kv_heads == 1
    per_gpu = cp.ring_kv_bytes_per_layer(LONG, 1, anchor.kv_width * kv_heads // anchor.num_key_value_heads, 8)
    assert per_gpu == ring[8] / 4 and fmt_gb(per_gpu, 2) == "0.12 GB"


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
    assert cp.ulysses_heads_per_rank(24, 4, 4) == (6, 1)
    with pytest.raises(ValueError) as err:
        cp.ulysses_heads_per_rank(24, 4, 8)
    assert str(err.value) == "cp=8 does not divide 4 KV heads (Ulysses splits heads over the CP ranks)"
    assert cp.ulysses_max_degree(32, 8) == 8                     # Llama 3.1 8B: 8 KV heads


def test_llama3_long_context_row():
    rows = published.value("llama3_table4")
    long_row = rows[2]
    assert (long_row["cp"], long_row["dp"], long_row["seq"]) == (16, 8, LONG)
    tokens = [published.tokens_per_step(r["seq"], r["batch_per_dp"], r["dp"]) for r in rows]
    assert fmt_int(tokens[2]) == "16,777,216" and len(set(tokens)) == 1
    assert long_row["cp"] * long_row["dp"] == rows[1]["dp"] == 128
    assert fmt_pct(long_row["mfu"], 0) == "38 %" and long_row["mfu"] == min(r["mfu"] for r in rows)
