"""Chapter 4 (tensor and sequence parallel): heads, bytes, activations, links and the check bench.

Every key number the chapter prints is asserted to its printed digit (GB = 1e9 B).
"""

from __future__ import annotations

import pytest

from meshplan import Plan, activations, collectives, compute, derive, evaluate, load_hardware, load_model, published, tp, tpbench
from meshplan.units import GB

S, B, H, A, L = 4_096, 1, 5_120, 24, 64


def gb(x: float) -> str:
    return f"{x / GB:.1f}"


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


def test_anchor_heads(anchor):
    assert (anchor.num_attention_heads, anchor.num_key_value_heads) == (24, 4)
    assert tp.head_split(24, 4, 4) == tp.HeadSplit(4, 6, 1, 1)
    assert tp.head_split(24, 4, 8) == tp.HeadSplit(8, 3, 1, 2)        # each KV head on 2 GPUs
    assert tp.head_split(24, 4, 2) == tp.HeadSplit(2, 12, 2, 1)
    with pytest.raises(ValueError, match="tp=16 does not divide 24 attention heads"):
        tp.head_split(24, 4, 16)
    with pytest.raises(ValueError, match="tp=3 does not divide 4 KV heads"):
        tp.head_split(24, 4, 3)
    # the plan agrees, and says what it does not count
    r = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, recompute="selective"))
    assert any("replicated on 2 GPUs" in n for n in r.notes)
    with pytest.raises(ValueError, match="24 attention heads"):
        Plan.create("qwen3.8-27b", gpus=16, tp=16)


def test_sp_same_bytes_as_all_reduce():
    for t in (2, 4, 8):
        plain = tp.tp_collectives_per_layer(S, B, H, t)
        seq = tp.tp_collectives_per_layer(S, B, H, t, sp=True)
        assert sum(seq.values()) == pytest.approx(sum(plain.values()), rel=1e-15)
        assert sum(plain.values()) == tp.tp_bytes_per_layer(S, B, H, t)
        x = S * B * H * 2
        assert (collectives.all_gather_bytes(t, x) + collectives.reduce_scatter_bytes(t, x)
                == pytest.approx(collectives.ring_all_reduce_bytes(t, x), rel=1e-15))
    assert derive.sp_equals_all_reduce() == 0
    t, s, b, h = derive.t, derive.s, derive.b, derive.h
    assert derive.sp.simplify(derive.tp_layer_volume() - 8 * s * b * h * (t - 1) / t) == 0


def test_activations_45_6_to_5_7():
    before = activations.activation_bytes(S, B, H, A, L, recompute="selective")
    after = activations.activation_bytes(S, B, H, A, L, t=8, recompute="selective")
    no_sp = activations.activation_bytes(S, B, H, A, L, t=8, recompute="selective", sp=False)
    assert (gb(before), gb(after), gb(no_sp)) == ("45.6", "5.7", "17.4")


def test_tp8_bytes_per_4096_tokens_and_link_time():
    x = tp.tp_bytes_per_step(S, B, H, L, 8, 1)
    assert gb(x) == "18.8"
    assert f"{tp.tp_bytes_per_layer(S, B, H, 8) / 1e6:.0f}" == "294"
    hw = load_hardware()
    t_nv = collectives.transfer_time_s(x, hw.nvlink_bytes_per_s)
    t_ib = collectives.transfer_time_s(x, hw.infiniband_bytes_per_s)
    assert (f"{t_nv:.3f}", f"{t_ib:.3f}") == ("0.117", "0.376")
    assert t_ib / t_nv == pytest.approx(3.2)


def test_one_layer_forward_against_its_two_collectives(anchor):
    """The chapter's bar chart: an average layer's forward per GPU at t = 8 against its two TP collectives."""
    hw = load_hardware()
    fwd_s = compute.forward_flop(anchor.flop_params / L, S) / 8 / hw.effective_flop_per_s
    half = tp.tp_bytes_per_layer(S, B, H, 8) / 2
    nv = collectives.transfer_time_s(half, hw.nvlink_bytes_per_s)
    ib = collectives.transfer_time_s(half, hw.infiniband_bytes_per_s)
    assert (f"{fwd_s * 1e3:.2f}", f"{nv * 1e3:.2f}", f"{ib * 1e3:.2f}") == ("1.02", "0.92", "2.94")
    assert f"{ib / fwd_s:.1f}" == "2.9"
    assert 0.8 < nv / fwd_s < 1.0        # "about as long as the computation they serve"


def test_full_recompute_tp_collectives_are_not_counted():
    """The lab convention: 4 collectives per layer whatever the recomputation; the plan says so in its notes."""
    full = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, recompute="full"))
    sel = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=8, recompute="selective"))
    assert full.comm_bytes_per_step["tp"] == sel.comm_bytes_per_step["tp"] == tp.tp_bytes_per_step(S, B, H, L, 8, 8)
    assert any("full recompute" in n for n in full.notes) and not any("recompute" in n for n in sel.notes)
    # with sequence parallelism the stored layer input is the sequence shard: 2sbh/t per layer
    assert full.memory_bytes["activations"] == 2 * S * B * H * L / 8


def test_zero_paper_40b_two_dgx2():
    assert published.value("zero_40b_two_dgx2_tflops_per_gpu") == 5
    assert "5%" in published.source("zero_40b_two_dgx2_tflops_per_gpu")


# ---------------------------------------------------------------- the check bench
@pytest.mark.parametrize("dtype", tpbench.DTYPES)
@pytest.mark.parametrize("t", [1, 2, 3, 4, 6, 8])
def test_bench_column_half_is_exact(t, dtype):
    assert tpbench.bench(t, dtype).column_max_abs_diff == 0.0


@pytest.mark.parametrize("dtype", tpbench.DTYPES)
def test_bench_reorder_is_exactly_zero_for_two_and_nonzero_from_three(dtype):
    assert tpbench.bench(1, dtype).reorder_max_abs_diff == 0.0
    assert tpbench.bench(2, dtype).reorder_max_abs_diff == 0.0
    for t in (3, 4, 6, 8):
        assert tpbench.bench(t, dtype).reorder_max_abs_diff > 0.0, t


def test_bench_rounding_levels():
    for t in (2, 3, 4, 6, 8):
        f32, bf16 = tpbench.bench(t, "float32"), tpbench.bench(t, "bfloat16")
        assert 0 < f32.row_max_abs_diff < 1e-5 * f32.y_max_abs
        assert (t == 2) == (f32.reorder_max_abs_diff == 0) and f32.reorder_max_abs_diff < 1e-6 * f32.y_max_abs
        assert 1e-4 * bf16.y_max_abs < bf16.row_max_abs_diff < 1e-2 * bf16.y_max_abs
    assert tpbench.bench(1).row_max_abs_diff == 0.0
    # the printed values
    assert f"{tpbench.bench(8).row_max_abs_diff:.1e}" == "1.3e-06"
    assert f"{tpbench.bench(8).reorder_max_abs_diff:.1e}" == "2.7e-07"
    assert f"{tpbench.bench(8, 'bfloat16').row_max_abs_diff:.1e}" == "1.6e-02"


def test_bench_is_seeded_and_validates():
    assert tpbench.bench(4) == tpbench.bench(4)
    with pytest.raises(ValueError, match="t=5 does not divide the MLP width f=384"):
        tpbench.bench(5)
    with pytest.raises(ValueError, match="dtype"):
        tpbench.bench(2, "float16")


def test_megatron_sp_backward_regather():
    # two extra all-gathers of s·b·h per layer: 2 × 7/8 × 41,943,040 B = 73,400,320 B at t = 8
    extra = tp.megatron_sp_regather_bytes_per_layer(4096, 1, 5120, 8)
    assert extra == 73_400_320
    assert f"{extra / tp.tp_bytes_per_layer(4096, 1, 5120, 8):.0%}" == "25%"
    assert tp.megatron_sp_regather_bytes_per_layer(4096, 1, 5120, 1) == 0
