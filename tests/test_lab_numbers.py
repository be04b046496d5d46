"""The lab page's acceptance numbers, each asserted to its printed digit.

s = 4,096, b = 1, m = 8 unless stated; 80 GB GPUs, 8 per node; GB = 1e9 B.
"""

from __future__ import annotations

import pytest

from meshplan import activations, collectives, compute, cp, dp, ep, load_hardware, load_model, pp, published, tp, zero
from meshplan.lab import ANCHOR, LAB_8_GPUS, LAB_64_GPUS, lab_plan, lab_reports
from meshplan.plan import DIMS, evaluate
from meshplan.units import GB, fmt_gb, fmt_gib, fmt_mb, fmt_mib, fmt_pct

P = 27_781_427_952  # the anchor's stored parameters
S, B, H, A, L = 4_096, 1, 5_120, 24, 64


def gb(x: float, digits: int = 1) -> str:
    return f"{x / GB:.{digits}f}"


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


@pytest.fixture(scope="module")
def anchor():
    return load_model(ANCHOR)


# ---------------------------------------------------------------- the lab rows
# label -> (states, activations, total, fits, {dim: (GB, link)}, bubble %)
EXPECTED_8 = {
    "DP 8 · ZeRO-3 · full recompute": ("55.6", "2.7", "58.2", True, {"dp": ("145.9", "nvlink")}, "0.0"),
    "DP 8 · ZeRO-3 · selective recompute": ("55.6", "45.6", "101.2", False, {"dp": ("145.9", "nvlink")}, "0.0"),
    "TP 8 · selective recompute": ("55.6", "5.7", "61.3", True, {"tp": ("150.3", "nvlink")}, "0.0"),
    "TP 2 × PP 4 · full recompute": ("55.6", "1.3", "56.9", True,
                                     {"tp": ("21.5", "nvlink"), "pp": ("0.7", "nvlink")}, "37.5"),
}
EXPECTED_64 = {
    "TP 8 × PP 8 · full recompute": ("6.9", "0.3", "7.3", True,
                                     {"tp": ("18.8", "nvlink"), "pp": ("0.7", "infiniband")}, "87.5"),
    "TP 8 × PP 8 · full recompute · m = 32": ("6.9", "0.3", "7.3", True,
                                              {"tp": ("75.2", "nvlink"), "pp": ("2.7", "infiniband")}, "21.9"),
    "TP 8 × PP 2 × DP 4 · ZeRO-1": ("12.2", "0.3", "12.5", True,
                                    {"tp": ("75.2", "nvlink"), "pp": ("0.7", "infiniband"),
                                     "dp": ("5.2", "infiniband")}, "12.5"),
}


def test_lab_tables_have_the_expected_rows():
    assert [r["label"] for r in LAB_8_GPUS] == list(EXPECTED_8)
    assert [r["label"] for r in LAB_64_GPUS] == list(EXPECTED_64)


@pytest.mark.parametrize("rows, expected, gpus", [(LAB_8_GPUS, EXPECTED_8, 8), (LAB_64_GPUS, EXPECTED_64, 64)],
                         ids=["8-gpus", "64-gpus"])
def test_lab_rows(rows, expected, gpus):
    reports = lab_reports(rows)
    assert len(reports) == len(expected)
    for label, r in reports:
        states, activ, total, fits, comm, bubble = expected[label]
        m = r.memory_bytes
        assert (gb(m["model_states"]), gb(m["activations"]), gb(m["total"])) == (states, activ, total), label
        assert r.fits is fits, label
        assert r.plan.gpus == gpus and r.plan.gpus_per_node == 8 and r.plan.gpu_memory_bytes == 80e9
        for dim in DIMS:
            if dim in comm:
                assert (gb(r.comm_bytes_per_step[dim]), r.link[dim]) == comm[dim], (label, dim)
                assert r.comm_bytes_per_step[dim] > 0
            else:
                assert r.comm_bytes_per_step[dim] == 0, (label, dim)
                assert r.link[dim] is None, (label, dim)
        assert pct(r.bubble) == bubble, label


def test_lab_row_settings():
    row = lab_plan(LAB_64_GPUS[2])
    assert (row.tp, row.pp, row.dp, row.cp, row.ep, row.zero, row.recompute) == (8, 2, 4, 1, 1, 1, "full")
    assert (row.seq, row.micro_batch_size, row.micro_batches) == (S, B, 8)
    assert lab_plan(LAB_64_GPUS[1]).micro_batches == 32


def test_lab_comm_times(anchor):
    """Time = bytes / the link's bandwidth (NVLink 160 GB/s, IB 50 GB/s)."""
    r = evaluate(lab_plan(LAB_64_GPUS[2]))
    assert f"{r.comm_time_s['tp']:.3f}" == f"{r.comm_bytes_per_step['tp'] / 160e9:.3f}" == "0.470"
    assert f"{r.comm_time_s['dp']:.3f}" == f"{r.comm_bytes_per_step['dp'] / 50e9:.3f}" == "0.104"
    assert r.comm_time_s["cp"] == 0.0 and r.comm_time_s["ep"] == 0.0


# ---------------------------------------------------------------- the page's text numbers
def test_sixteen_psi():
    states = zero.model_states_bytes(P)
    assert gb(states) == "444.5"
    assert fmt_gb(states) == "444.5 GB"
    assert f"{states / 80e9:.1f}" == "5.6"
    assert gb(zero.model_states_bytes(P, 3, 8)) == "55.6"


def test_ring_all_reduce_vs_naive():
    assert gb(dp.dp_bytes_per_step(P, 8)) == "97.2"
    assert gb(dp.dp_bytes_per_step(P, 64)) == "109.4"
    assert gb(dp.naive_gather_bytes_per_step(P, 8)) == "388.9"
    assert f"{dp.naive_gather_bytes_per_step(P, 64) / GB:,.0f}" == "3,500"


def test_all_reduce_time_vs_backward(anchor):
    hw = load_hardware()
    assert hw.infiniband_bytes_per_s == 50e9 and hw.effective_flop_per_s == 400e12
    t_comm = collectives.transfer_time_s(dp.dp_bytes_per_step(P, 8), hw.infiniband_bytes_per_s)
    assert f"{t_comm:.2f}" == "1.94"
    t_bwd = compute.backward_time_s(anchor.flop_params, 4096, 400e12)
    assert f"{t_bwd:.2f}" == "1.05"
    assert f"{t_bwd:.4f}" == "1.0496"
    assert t_comm > t_bwd


def test_zero_ladder_on_8_gpus():
    ladder = [gb(zero.model_states_bytes(P, stage, 8)) for stage in range(4)]
    assert ladder == ["444.5", "152.8", "104.2", "55.6"]


def test_selective_recompute_against_what_is_left():
    activ = activations.activation_bytes(S, B, H, A, L, recompute="selective")
    assert gb(activ) == "45.6"
    left = 80e9 - zero.model_states_bytes(P, 3, 8)
    assert gb(left) == "24.4"
    assert activ > left


def test_tp8_bytes_and_activations():
    assert gb(tp.tp_bytes_per_step(S, B, H, L, 8, 1)) == "18.8"
    before = activations.activation_bytes(S, B, H, A, L, recompute="selective")
    after = activations.activation_bytes(S, B, H, A, L, t=8, recompute="selective")
    assert (gb(before), gb(after)) == ("45.6", "5.7")


def test_full_recompute_activations_gb_and_gib():
    full = activations.activation_bytes(S, B, H, A, L, recompute="full")
    assert full == 2 * S * B * H * L
    assert fmt_gb(full) == "2.7 GB"
    assert fmt_gib(full) == "2.5 GiB"


def test_stage_boundary():
    assert fmt_mb(pp.boundary_bytes(S, B, H)) == "41.9 MB"


def test_bubbles():
    assert fmt_pct(pp.bubble_fraction(8, 32)) == "21.9 %"
    assert fmt_pct(pp.bubble_share_of_time(8, 32)) == "17.9 %"
    assert fmt_pct(pp.bubble_fraction(8, 32, 4)) == "5.5 %"
    assert fmt_pct(pp.bubble_fraction(4, 8)) == "37.5 %"
    assert fmt_pct(pp.bubble_fraction(2, 8)) == "12.5 %"


def test_kv_per_full_attention_layer_long_context(anchor):
    kv = cp.kv_bytes_per_layer(131_072, 1, anchor.kv_width)
    assert gb(kv) == "0.5"
    assert f"{kv / GB:.3f}" == "0.537"
    sent = cp.cp_kv_bytes_per_step(131_072, 1, anchor.kv_width, 8, 1, 1)
    assert gb(sent) == "0.5"
    assert sent == kv * 7 / 8


def test_deepseek_v3_experts():
    ds = load_model("deepseek-v3")
    assert round(ds.routed_expert_params / 1e9) == 654
    assert ep.experts_per_gpu(ds.num_experts, 64) == 4


def test_causal_load():
    assert cp.causal_load(16, 4) == (10, 26, 42, 58)
    zz = cp.causal_load(16, 4, zigzag=True)
    assert len(set(zz)) == 1 and sum(zz) == sum(range(1, 17)) == 136


def test_llama3_tokens_per_step():
    rows = published.value("llama3_table4")
    assert len(rows) == 3
    for row in rows:
        assert row["tp"] * row["cp"] * row["pp"] * row["dp"] == row["gpus"]
        assert published.tokens_per_step(row["seq"], row["batch_per_dp"], row["dp"]) == 16_777_216
    v1 = published.value("llama3_table4_row3_dp_v1")
    assert published.tokens_per_step(rows[2]["seq"], rows[2]["batch_per_dp"], v1) == 8_388_608


def test_small_model_states():
    small = load_model("small-3.7m")
    assert fmt_mib(zero.model_states_bytes(small.params.total)) == "56.3 MiB"


def test_deepseek_gpu_years():
    hours = published.value("deepseek_v3_pretraining_gpu_hours")
    assert hours == 2_664_000
    assert round(published.gpu_years(hours)) == 304
    assert f"{published.gpu_years(hours):.1f}" == "303.9"


def test_zero_paper_figure_1():
    psi, n = 7.5e9, 64
    got = [gb(zero.model_states_bytes(psi, stage, n)) for stage in range(4)]
    assert got == ["120.0", "31.4", "16.6", "1.9"]
    assert f"{zero.model_states_bytes(psi, 3, n) / GB:.3f}" == "1.875"
