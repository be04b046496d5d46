"""Chapter 5 (pipeline parallel): the key numbers it prints, each asserted to its printed digit.

The bubble is measured on the simulated timeline (``meshplan.schedule``) and checked against the plan
report's formula; GB = 1e9 B, MB = 1e6 B.
"""

from __future__ import annotations

import pytest

from meshplan import activations, evaluate, load_model, pp, published, schedule, tp
from meshplan.lab import LAB_8_GPUS, LAB_64_GPUS, lab_plan
from meshplan.plotting import TimelineExplorer, gantt, gantt_grid, timeline_svg
from meshplan.units import fmt_gb, fmt_mb, fmt_pct

S, B = 4096, 1


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


def test_boundary_bytes_41_9_mb(anchor):
    assert fmt_mb(pp.boundary_bytes(S, B, anchor.hidden_size)) == "41.9 MB"
    # TP 8 sends 3.5x per layer (forward + backward) what a stage sends per micro-batch across its cut
    # (activation forward + gradient backward), and for every layer
    cut = pp.pp_bytes_per_step(S, B, anchor.hidden_size, 2, 1)
    assert cut == 2 * pp.boundary_bytes(S, B, anchor.hidden_size)
    ratio = tp.tp_bytes_per_layer(S, B, anchor.hidden_size, 8) / cut
    assert f"{ratio:.1f}" == "3.5"


def test_one_f_one_b_on_4_gpus_8_micro_batches():
    t = schedule.simulate("1f1b", 4, 8)
    assert (fmt_pct(t.bubble), fmt_pct(t.bubble_share), t.idle[0], t.ideal) == ("37.5 %", "27.3 %", 9.0, 24.0)


def test_lab_tp2_pp4_bubble_37_5_and_nvlink():
    report = evaluate(lab_plan(LAB_8_GPUS[3]))
    assert LAB_8_GPUS[3]["label"] == "TP 2 × PP 4 · full recompute"
    assert report.bubble == schedule.simulate("1f1b", 4, 8).bubble
    assert fmt_pct(report.bubble) == "37.5 %"
    assert (fmt_gb(report.comm_bytes_per_step["pp"]), report.link["pp"]) == ("0.7 GB", "nvlink")
    assert (fmt_gb(report.comm_bytes_per_step["tp"]), report.link["tp"]) == ("21.5 GB", "nvlink")
    dp8 = evaluate(lab_plan(LAB_8_GPUS[0]))
    assert (fmt_gb(dp8.memory_bytes["total"]), dp8.bubble) == ("58.2 GB", 0.0)


def test_p8_m32_and_interleaved_v4(anchor):
    t = schedule.simulate("1f1b", 8, 32)
    assert (fmt_pct(t.bubble), fmt_pct(t.bubble_share)) == ("21.9 %", "17.9 %")
    assert fmt_pct(schedule.simulate("1f1b", 8, 8).bubble) == "87.5 %"
    assert fmt_pct(schedule.simulate("interleaved", 8, 32, 4).bubble) == "5.5 %"
    h = anchor.hidden_size
    assert (fmt_gb(pp.pp_bytes_per_step(S, B, h, 8, 32, 4)), fmt_gb(pp.pp_bytes_per_step(S, B, h, 8, 32))) == \
        ("10.7 GB", "2.7 GB")
    for row in (LAB_64_GPUS[0], LAB_64_GPUS[1]):
        plan = lab_plan(row)
        assert evaluate(plan).bubble == schedule.simulate("1f1b", plan.pp, plan.micro_batches).bubble


def test_seven_schedules_on_4_gpus():
    ts = schedule.compare_kinds(schedule.KINDS, 4, 8, 2)
    got = {k: (fmt_pct(t.bubble), fmt_pct(t.bubble_share), f"{t.makespan:g}", f"{t.peak_stages[0]:g}")
           for k, t in ts.items()}
    assert got == {
        "gpipe": ("37.5 %", "27.3 %", "33", "8"),
        "1f1b": ("37.5 %", "27.3 %", "33", "4"),
        "interleaved": ("18.8 %", "15.8 %", "28.5", "5.5"),
        "zb-h1": ("12.5 %", "11.1 %", "27", "4"),
        "zb-h2": ("0.0 %", "0.0 %", "27", "7"),
        "dualpipe": ("8.3 %", "7.7 %", "26", "5"),
        "dualpipev": ("12.5 %", "11.1 %", "27", "4.5"),   # 2p + 1 = 9 chunks of half a stage
    }
    for k, t in ts.items():
        assert t.bubble == schedule.formula_bubble(k, 4, 8, t.virtual_stages)
    assert fmt_pct(ts["zb-h2"].sync_bubble) == "12.5 %"


def test_memory_p_instead_of_m(anchor):
    plan = lab_plan(LAB_64_GPUS[1])
    per_layer = activations.activation_bytes_per_layer(S, B, anchor.hidden_size, anchor.num_attention_heads,
                                                       plan.tp, plan.recompute)
    peaks = {k: schedule.simulate(k, 8, 32).peak_activations[0] for k in ("gpipe", "1f1b")}
    assert peaks == {"gpipe": 32, "1f1b": 8}
    assert fmt_gb(per_layer * 8 * 32, 2) == "1.34 GB"
    assert fmt_gb(per_layer * 8 * 8, 2) == "0.34 GB" == fmt_gb(evaluate(plan).memory_bytes["activations"], 2)


def test_deepseek_table_2_at_pp16():
    rows = published.value("deepseek_v3_dualpipe_table2")
    assert rows["DualPipe"] == ["(PP/2-1)(F&B+B-3W)", "2x", "PP+1"]
    idle = {k: max(schedule.simulate(k, 16, 32).idle) for k in ("1f1b", "zb-h1", "dualpipe")}
    assert idle == {"1f1b": 45.0, "zb-h1": 15.0, "dualpipe": 14.0}
    d = schedule.simulate("dualpipe", 16, 32)
    assert (max(d.peak_activations), d.chunks_per_device) == (17, 2)
    assert (fmt_pct(d.bubble), fmt_pct(schedule.simulate("1f1b", 16, 32).bubble)) == ("14.6 %", "46.9 %")


def test_long_sequence_does_not_fit(anchor):
    h, a, L = anchor.hidden_size, anchor.num_attention_heads, anchor.num_layers
    assert fmt_gb(activations.activation_bytes_per_layer(131072, 1, h, a, 8, "selective")) == "2.9 GB"
    assert fmt_gb(activations.activation_bytes(131072, 1, h, a, L, 8, "selective", pp=8, micro_batches=32)) \
        == "182.5 GB"


def test_figures_and_explorer_are_deterministic():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = schedule.simulate("dualpipe", 4, 8)
    fig = gantt(t)
    assert fig.axes[0].get_title(loc="left").startswith("DualPipe: p = 4, m = 8; bubble 8.3 %")
    plt.close(fig)
    fig = gantt_grid([t, schedule.simulate("1f1b", 4, 8)])
    assert len(fig.axes) == 2
    plt.close(fig)
    assert timeline_svg(t) == timeline_svg(schedule.simulate("dualpipe", 4, 8))
    ex = TimelineExplorer("x", kinds=["interleaved", "dualpipe"], pps=[3, 4], mbs=[8], vs=[1, 2])
    table = ex.table()
    assert table["0,0,0,1"]["error"] == "pp=3 does not divide micro_batches=8 (the interleaved schedule needs a multiple)"
    assert table["1,0,0,0"]["error"].startswith("pp=3 is odd")
    assert table["0,1,0,1"]["caption"].startswith("interleaved 1F1B: p = 4, m = 8, v = 2; bubble 18.8 %")
    assert ex._repr_html_() == TimelineExplorer("x", kinds=["interleaved", "dualpipe"], pps=[3, 4], mbs=[8],
                                                vs=[1, 2])._repr_html_()
