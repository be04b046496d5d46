"""Chapter 2 (data parallel): the ring schedule, naive vs ring bytes, what each ledger sends, gradient accumulation
and the global batch, bucketing and its overlap, and the step-time model beside the lab page's timeline.

Every key number the chapter prints is asserted to its printed digit (GB = 1e9 B), from the library calls the
chapter's cells make.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from meshplan import Plan, evaluate, load_hardware, load_model, steptime
from meshplan.core import collectives
from meshplan.core.units import GB, MiB, fmt_pct
from meshplan.course import derive, published
from meshplan.parallel import buckets, compute, dp, zero
from meshplan.spec import accounting

P = 27_781_427_952


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


def gb(x: float) -> str:
    return f"{x / GB:,.1f}"


# ---------------------------------------------------------------- the ring, step by step
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_ring_schedule_reproduces_a_real_all_reduce(n):
    rng = np.random.default_rng(n)
    bufs = [rng.integers(-1000, 1000, size=8 * 3 * 5 * 7).astype(np.int64) for _ in range(n)]
    out, sent = collectives.run_ring_all_reduce(bufs)
    total = np.sum(bufs, axis=0)
    for r in range(n):
        assert np.array_equal(out[r], total), r  # integers: the sum is exact, order does not matter
    assert sent == [collectives.ring_all_reduce_bytes(n, bufs[0].nbytes)] * n


def test_ring_schedule_float_buffers_agree_to_rounding():
    rng = np.random.default_rng(0)
    bufs = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    out, sent = collectives.run_ring_all_reduce(bufs)
    for r in range(4):
        np.testing.assert_allclose(out[r], np.sum(bufs, axis=0), rtol=1e-5, atol=1e-6)
    assert sent == [collectives.ring_all_reduce_bytes(4, 64 * 4)] * 4 == [384.0] * 4


def test_ring_schedule_for_the_figure():
    sched = collectives.ring_all_reduce_schedule(4)
    assert len(sched) == 2 * 3 * 4
    assert sorted({s.step for s in sched}) == list(range(6))
    for s in sched:
        assert s.dst == (s.src + 1) % 4
    # each rank sends exactly one chunk per step, and every chunk travels once per step
    for step in range(6):
        moves = [s for s in sched if s.step == step]
        assert sorted(s.src for s in moves) == [0, 1, 2, 3]
        assert sorted(s.chunk for s in moves) == [0, 1, 2, 3]
    first = [(s.src, s.chunk) for s in sched if s.step == 0]
    assert first == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [s.phase for s in sched].count("reduce-scatter") == 12
    with pytest.raises(ValueError, match="n=0"):
        collectives.ring_all_reduce_schedule(0)
    with pytest.raises(ValueError, match="same length"):
        collectives.run_ring_all_reduce([np.ones(4), np.ones(5)])


def test_ring_factor_derivation():
    rows = derive.ring_step_table(4)
    assert len(rows) == 6 and rows[-1][3] == derive.sp.Rational(3, 2)
    assert [r[1] for r in rows] == ["reduce-scatter"] * 3 + ["all-gather"] * 3
    assert derive.ring_factor_limit() == 2
    assert derive.naive_over_ring() == derive.N / 2
    assert float(rows[-1][3]) == collectives.ring_factor(4)


# ---------------------------------------------------------------- naive vs ring (the chapter's table)
def test_naive_gather_vs_ring():
    assert gb(dp.naive_gather_bytes_per_step(P, 8)) == "388.9"
    assert f"{dp.naive_gather_bytes_per_step(P, 64) / GB:,.0f}" == "3,500"
    assert (gb(dp.dp_bytes_per_step(P, 8)), gb(dp.dp_bytes_per_step(P, 64))) == ("97.2", "109.4")


def test_where_it_gets_stuck_every_replica_holds_everything():
    for n in (1, 8, 64, 1024):
        assert gb(dp.replica_states_bytes(P, n)) == "444.5"
    assert dp.replica_states_bytes(P, 8) == zero.model_states_bytes(P)


# ---------------------------------------------------------------- bucketing
def test_bucket_cap_is_the_published_default():
    assert buckets.DEFAULT_CAP_BYTES == published.value("ddp_bucket_cap_bytes") == 25 * MiB == 26_214_400
    assert buckets.FIRST_BUCKET_BYTES == 1_048_576


def test_anchor_tensors_add_up(anchor):
    ts = buckets.backward_tensors(anchor)
    assert sum(t.params for t in ts) == anchor.params.total == P
    assert sum(t.params for t in ts if t.compute) == anchor.flop_params
    assert ts[0].name == "mtp" and ts[1].name == "lm_head" and ts[-1].name == "visual"
    assert len(ts) == 6 * 64 + 5


def test_anchor_buckets(anchor):
    bs = buckets.assign_buckets(buckets.backward_tensors(anchor))
    assert sum(b.n_bytes for b in bs) == 2 * P
    assert len(bs) == 260
    # every bucket but the last reached its cap (the first one's is 1 MiB)
    assert bs[0].n_bytes >= MiB and all(b.n_bytes >= 25 * MiB for b in bs[1:-1])
    # the bf16 norms (10 KB each) ride along with the next big matrix
    assert bs[2].tensors == (
        "norm",
        "layers.63.post_attention_layernorm",
        "layers.63.input_layernorm",
        "layers.63.mlp.down_proj",
    )
    assert sum(collectives.ring_all_reduce_bytes(8, b.n_bytes) for b in bs) == pytest.approx(dp.dp_bytes_per_step(P, 8))


def test_first_bucket_rule_matches_pytorch_greedy_walk():
    ts = [buckets.GradTensor(str(i), "x", 100_000) for i in range(30)]  # 200 kB each in bf16
    bs = buckets.assign_buckets(ts, cap_bytes=1_000_000, first_cap_bytes=500_000)
    assert [len(b.tensors) for b in bs] == [3, 5, 5, 5, 5, 5, 2]
    with pytest.raises(ValueError, match="cap_bytes"):
        buckets.assign_buckets(ts, cap_bytes=0)


def test_bucket_rule_against_pytorchs_own_assignment(anchor):
    """The library's greedy walk against PyTorch's C++ ``_compute_bucket_assignment_by_size`` (the rule DDP's
    rebuild uses), on meta tensors of the anchor's exact sizes: bf16 and fp32 gradients (the cap counts
    bytes of the gradient dtype), the default limits [1 MiB, 25 MiB] and an explicit 25 MiB for every bucket."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == buckets.FIRST_BUCKET_BYTES
    small = [buckets.GradTensor(f"s{i}", "x", n) for i, n in enumerate([70_000, 200_000, 400_000, 10, 5_000_000, 300])]
    for ts in (buckets.backward_tensors(anchor), tuple(small)):
        names = [t.name for t in ts]
        for dtype, bpp in ((torch.bfloat16, 2), (torch.float32, 4)):
            meta = [torch.empty(t.params, dtype=dtype, device="meta") for t in ts]
            for limits in ([buckets.FIRST_BUCKET_BYTES, buckets.DEFAULT_CAP_BYTES], [buckets.DEFAULT_CAP_BYTES]):
                idx, _ = dist._compute_bucket_assignment_by_size(meta, limits)
                ours = buckets.assign_buckets(
                    ts, cap_bytes=limits[-1], first_cap_bytes=limits[0], grad_bytes_per_param=bpp
                )
                assert [tuple(names[i] for i in b) for b in idx] == [b.tensors for b in ours], (dtype, limits)
    # the first-bucket rule matters for the small tensors: 1 MiB closes after three in bf16, two in fp32
    assert [len(b.tensors) for b in buckets.assign_buckets(small)] == [3, 3]
    assert [len(b.tensors) for b in buckets.assign_buckets(small, grad_bytes_per_param=4)] == [2, 4]


def test_the_lab_page_point_comm_vs_backward(anchor):
    hw = load_hardware()
    assert hw.effective_flop_per_s is not None
    t_comm = collectives.transfer_time_s(dp.dp_bytes_per_step(P, 8), hw.infiniband_bytes_per_s)
    t_bwd = compute.backward_time_s(anchor.flop_params, 4096, hw.effective_flop_per_s)
    assert (f"{t_comm:.2f}", f"{t_bwd:.2f}") == ("1.94", "1.05")
    tl = buckets.ddp_timeline(anchor, 4096, 8, hw.infiniband_bytes_per_s, hw.effective_flop_per_s)
    assert f"{tl.backward_s:.2f}" == "1.05" and f"{tl.comm_s:.2f}" == "1.94"
    assert f"{tl.exposed_s:.2f}" == "0.92"
    assert tl.exposed_s >= t_comm - t_bwd  # overlap cannot beat the gap


def test_exposed_comm_falls_with_tokens_then_floors_at_the_last_buckets(anchor):
    hw = load_hardware()
    assert hw.effective_flop_per_s is not None
    got = {
        tok: buckets.exposed_comm_s(anchor, tok, 8, 50e9, hw.effective_flop_per_s)
        for tok in (1024, 2048, 4096, 8192, 16384)
    }
    assert [f"{got[k]:.2f}" for k in sorted(got)] == ["1.68", "1.42", "0.92", "0.13", "0.13"]
    # the floor: embedding and vision tower gradients are ready only when the backward ends
    tail = (
        sum(
            collectives.ring_all_reduce_bytes(8, 2 * n)
            for n in (anchor.params.components["embedding"], anchor.params.components["vision"])
        )
        / 50e9
    )
    assert tail <= got[16384] < tail + 0.01
    assert f"{tail:.2f}" == "0.12"
    # faster links hide more
    assert buckets.exposed_comm_s(anchor, 4096, 8, 160e9, 400e12) < got[4096]


def test_timeline_rejects_bad_input(anchor):
    with pytest.raises(ValueError, match="tokens"):
        buckets.ddp_timeline(anchor, 0, 8, 50e9, 400e12)
    with pytest.raises(ValueError, match="deepseek-v3"):
        buckets.backward_tensors(load_model("deepseek-v3"))
    with pytest.raises(ValueError, match="bandwidth"):
        buckets.ddp_timeline(anchor, 4096, 8, 0, 400e12)


# ---------------------------------------------------------------- two ledgers: what the wire carries
def test_what_each_ledger_sends_for_plain_data_parallelism():
    sent = {name: dp.ledger_sync_bytes(P, 8, name) for name in accounting.LEDGERS}
    assert {name: {k: gb(v) for k, v in terms.items()} for name, terms in sent.items()} == {
        "lab": {"all-reduce (gradients)": "97.2"},
        "megatron": {"all-reduce (fp32 gradients)": "194.5"},
        "fsdp2": {"all-reduce (fp32 gradients, every micro-batch)": "194.5"},
        "deepspeed": {"all-reduce (bf16 gradients)": "97.2"},
    }
    assert sum(sent["lab"].values()) == dp.dp_bytes_per_step(P, 8)
    assert sum(sent["megatron"].values()) == 2 * dp.dp_bytes_per_step(P, 8)  # fp32 on the wire: twice the lab's
    wires = {
        n: [(c.wire_bytes, c.per_micro_batch) for c in accounting.get_accounting(n).sync_schedule(0, 1)]
        for n in accounting.LEDGERS
    }
    assert wires == {"lab": [(2, False)], "megatron": [(4, False)], "fsdp2": [(4, True)], "deepspeed": [(2, False)]}
    # Megatron-LM's distributed optimizer: fp32 reduce-scatter + bf16 all-gather of the updated weights
    assert gb(sum(dp.ledger_sync_bytes(P, 8, "megatron", zero_stage=1).values())) == "145.9"
    for name in accounting.LEDGERS:
        assert accounting.get_accounting(name).source("sync")


def test_the_published_conventions_quote_their_sources():
    """Llama 3's FP32 reduce-scatter (the fsdp2 ledger's 4-byte gradients on the wire, above) and the other published
    choices the ledgers follow: each quoted, with its source."""
    quoted = accounting.conventions()["published"]
    assert "llama3_fp32_reduce_scatter" in quoted
    for key, entry in quoted.items():
        assert entry["source"].strip() and entry["quote"].strip(), key


# ---------------------------------------------------------------- gradient accumulation and the global batch
def test_global_batch():
    assert dp.global_batch(8, 1, 8) == 64
    assert dp.global_batch(128, 1, 16) * 8192 == published.tokens_per_step(8192, 16, 128) == 16_777_216
    plan = Plan.create("qwen3.8-27b", gpus=8, global_batch=64)
    assert (plan.micro_batches, plan.tokens_per_step) == (8, 262_144)
    assert dp.global_batch(plan.dp, plan.micro_batch_size, plan.micro_batches) == plan.global_batch == 64
    bad: dict[str, Any]
    for bad in ({"dp": 0}, {"micro_batch_size": 1.5}, {"micro_batches": True}):
        args: dict[str, Any] = {"dp": 8, "micro_batch_size": 1, "micro_batches": 8, **bad}
        with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
            dp.global_batch(**args)


ACCUMULATION = {  # m = 1 → m = 8, GB per GPU per step, DP 8: the chapter's table
    "lab": ["97.2 → 97.2 GB", "97.2 → 97.2 GB", "97.2 → 97.2 GB", "145.9 → 145.9 GB"],
    "megatron": ["194.5 → 194.5 GB", "145.9 → 145.9 GB", "145.9 → 826.5 GB", "194.5 → 1,555.8 GB"],
    "fsdp2": ["194.5 → 1,555.8 GB", "refused", "145.9 → 1,166.8 GB", "194.5 → 1,555.8 GB"],
    "deepspeed": ["97.2 → 97.2 GB", "145.9 → 145.9 GB", "145.9 → 826.5 GB", "145.9 → 1,166.8 GB"],
}


@pytest.mark.parametrize("ledger", list(ACCUMULATION))
def test_bytes_per_step_with_accumulation(ledger):
    got = []
    for stage in range(4):
        try:
            one, eight = (sum(dp.ledger_sync_bytes(P, 8, ledger, stage, m).values()) for m in (1, 8))
        except ValueError as err:
            assert "FSDP2 has no ZeRO-1" in str(err)
            got.append("refused")
            continue
        got.append(f"{gb(one)} → {gb(eight)} GB")
        split = dp.per_micro_batch_bytes(P, 8, ledger, stage, 8)
        assert split["every micro-batch"] + split["once per step"] == pytest.approx(eight)
        assert eight == pytest.approx(one + 7 * split["every micro-batch"] / 8)  # only the per-micro-batch part grows
    assert got == ACCUMULATION[ledger]


def test_accumulation_numbers_in_the_prose():
    def per_step(ledger, stage, m=8):
        return sum(dp.ledger_sync_bytes(P, 8, ledger, stage, m).values())

    assert (gb(per_step("lab", 3)), gb(per_step("fsdp2", 3)), gb(per_step("deepspeed", 2))) == (
        "145.9",
        "1,555.8",
        "826.5",
    )
    assert f"{per_step('fsdp2', 3) / per_step('lab', 3):.1f}" == "10.7"
    assert {k: gb(v) for k, v in dp.per_micro_batch_bytes(P, 8, "deepspeed", 2, 4).items()} == {
        "every micro-batch": "388.9",
        "once per step": "48.6",
    }
    assert f"{per_step('deepspeed', 2, 4) / GB:.1f}" == "437.6"  # the exercise's default: not printed above it


def test_ledger_sync_bytes_rejects_bad_input():
    with pytest.raises(ValueError, match="micro_batches=0"):
        dp.ledger_sync_bytes(P, 8, "fsdp2", 3, 0)
    with pytest.raises(ValueError, match="pp=0"):
        dp.ledger_sync_bytes(P, 8, "lab", 0, 1, pp=0)
    with pytest.raises(ValueError, match="zero=4"):
        dp.per_micro_batch_bytes(P, 8, "lab", 4)
    with pytest.raises(ValueError, match="accounting='nemo'"):
        dp.ledger_sync_bytes(P, 8, "nemo")
    with pytest.raises(ValueError, match="DeepSpeed refuses ZeRO-2 and ZeRO-3 with pipeline parallelism"):
        dp.ledger_sync_bytes(P, 8, "deepspeed", 3, 8, pp=4)
    with pytest.raises(ValueError, match="dp=0"):
        dp.per_micro_batch_bytes(P, 0, "lab")


# ---------------------------------------------------------------- time: the lab page's timeline and the step-time model
def test_fp32_gradients_in_the_timeline(anchor):
    hw = load_hardware()
    assert hw.effective_flop_per_s == 400e12
    fp32 = buckets.ddp_timeline(anchor, 4096, 8, 50e9, 400e12, grad_bytes_per_param=4)
    assert f"{fp32.comm_s:.2f}" == "3.89" and fp32.comm_s == pytest.approx(2 * 97_234_997_832 / 50e9)
    assert f"{buckets.exposed_comm_s(anchor, 4096, 8, 50e9, 400e12, grad_bytes_per_param=4):.2f}" == "2.84"
    with pytest.raises(ValueError, match="grad_bytes_per_param=8"):
        buckets.exposed_comm_s(anchor, 4096, 8, 50e9, 400e12, grad_bytes_per_param=8)


def test_exercise_defaults(anchor):
    """ch2-naive-ring (ring, 4 GPUs), ch2-allreduce-time (NVLink, 4 GPUs, fp32), ch2-exposed (2,048 tokens,
    100 GB/s, bf16): none of them is a number printed above its exercise."""
    assert gb(dp.dp_bytes_per_step(P, 4)) == "83.3"
    t = collectives.transfer_time_s(dp.dp_bytes_per_step(P, 4, grad_bytes_per_param=4), 160e9)
    assert f"{t:.2f}" == "1.04"
    assert f"{buckets.exposed_comm_s(anchor, 2048, 8, 100e9, 400e12):.2f}" == "0.46"


def test_the_step_time_model_on_the_same_step():
    """The chapter's side-by-side table: the lab page's timeline against meshplan.steptime for 8 replicas, one per
    node (every byte on InfiniBand), one micro-batch of 4,096 tokens."""
    cal = steptime.calibration()
    assert (fmt_pct(cal.matmul_efficiency), fmt_pct(cal.link_efficiency)) == ("69.3 %", "74.4 %")
    reports = {
        name: evaluate(Plan.create("qwen3.8-27b", gpus=8, gpus_per_node=1, seq=4096, micro_batches=1, accounting=name))
        for name in ("lab", "megatron")
    }
    for r in reports.values():
        assert r.link["dp"] == "infiniband"
    assert f"{steptime.micro_batch(reports['lab'], 0).backward_s:.2f}" == "0.71"
    assert f"{steptime.micro_batch(reports['megatron'], 0).backward_s:.2f}" == "0.71"
    assert (gb(reports["lab"].grad_sync_bytes["dp"]), gb(reports["megatron"].grad_sync_bytes["dp"])) == (
        "97.2",
        "194.5",
    )
    exposed = {name: steptime.step_time(r).dp_exposed_s for name, r in reports.items()}
    assert (f"{exposed['lab']:.2f}", f"{exposed['megatron']:.2f}") == ("1.96", "4.61")


def test_where_it_gets_stuck_the_map_rows():
    """Rows 2 and 3 of the evolution map (``evolution.row``), which the chapter glues, print the chapter's numbers;
    row 1 opens it."""
    from meshplan.course import evolution

    hw = load_hardware()
    assert gb(dp.replica_states_bytes(P, 8)) == "444.5"
    assert f"{dp.replica_states_bytes(P, 8) / hw.gpu_memory_bytes:.1f}" == "5.6"
    assert [gb(dp.dp_bytes_per_step(P, n)) for n in (1, 8, 64, 1024)] == ["0.0", "97.2", "109.4", "111.0"]
    t_comm = collectives.transfer_time_s(dp.dp_bytes_per_step(P, 8), hw.infiniband_bytes_per_s)
    assert f"{t_comm:.2f}" == "1.94"
    assert f"{hw.infiniband_bytes_per_s / GB:.0f}" == "50"
    assert f"{published.value('ddp_bucket_cap_bytes') / MiB:.0f}" == "25"
    one, two, three = (evolution.row(n).numbers for n in (1, 2, 3))
    assert (one["states"].text, one["states_over_gpu"].text, one["gpu_years"].text) == ("444.5 GB", "5.6", "304")
    assert {k: n.text for k, n in two.items()} == {
        "gpus": "8",
        "gpus_large": "64",
        "ring": "97.2 GB",
        "ring_large": "109.4 GB",
        "naive": "388.9 GB",
        "naive_large": "3,500 GB",
        "states": "444.5 GB",
    }
    assert two["ring"].value == dp.dp_bytes_per_step(P, 8) and two["states"].value == dp.replica_states_bytes(P, 8)
    assert (three["bucket"].text, three["ring"].text, three["ib"].text) == ("25 MiB", "97.2 GB", "50 GB/s")
    assert (three["t_comm"].text, three["t_backward"].text, three["tokens"].text) == ("1.94 s", "1.05 s", "4,096")
    assert three["t_comm"].value == t_comm
    assert three["verdict"].text == "too few tokens to hide it"
