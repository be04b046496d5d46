"""Chapter 2 (data parallel): the ring schedule, naive vs ring bytes, bucketing and its overlap.

Every key number the chapter prints is asserted to its printed digit (GB = 1e9 B).
"""

from __future__ import annotations

import numpy as np
import pytest

from meshplan import buckets, collectives, compute, derive, dp, load_hardware, load_model, published, zero
from meshplan.units import GB, MiB

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
        assert np.array_equal(out[r], total), r          # integers: the sum is exact, order does not matter
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
    assert bs[2].tensors == ("norm", "layers.63.post_attention_layernorm", "layers.63.input_layernorm",
                             "layers.63.mlp.down_proj")
    assert sum(collectives.ring_all_reduce_bytes(8, b.n_bytes) for b in bs) == pytest.approx(dp.dp_bytes_per_step(P, 8))


def test_first_bucket_rule_matches_pytorch_greedy_walk():
    ts = [buckets.GradTensor(str(i), "x", 100_000) for i in range(30)]        # 200 kB each in bf16
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
                ours = buckets.assign_buckets(ts, cap_bytes=limits[-1], first_cap_bytes=limits[0],
                                              grad_bytes_per_param=bpp)
                assert [tuple(names[i] for i in b) for b in idx] == [b.tensors for b in ours], (dtype, limits)
    # the first-bucket rule matters for the small tensors: 1 MiB closes after three in bf16, two in fp32
    assert [len(b.tensors) for b in buckets.assign_buckets(small)] == [3, 3]
    assert [len(b.tensors) for b in buckets.assign_buckets(small, grad_bytes_per_param=4)] == [2, 4]


def test_the_lab_page_point_comm_vs_backward(anchor):
    hw = load_hardware()
    t_comm = collectives.transfer_time_s(dp.dp_bytes_per_step(P, 8), hw.infiniband_bytes_per_s)
    t_bwd = compute.backward_time_s(anchor.flop_params, 4096, hw.effective_flop_per_s)
    assert (f"{t_comm:.2f}", f"{t_bwd:.2f}") == ("1.94", "1.05")
    tl = buckets.ddp_timeline(anchor, 4096, 8, hw.infiniband_bytes_per_s, hw.effective_flop_per_s)
    assert f"{tl.backward_s:.2f}" == "1.05" and f"{tl.comm_s:.2f}" == "1.94"
    assert f"{tl.exposed_s:.2f}" == "0.92"
    assert tl.exposed_s >= t_comm - t_bwd                                        # overlap cannot beat the gap


def test_exposed_comm_falls_with_tokens_then_floors_at_the_last_buckets(anchor):
    hw = load_hardware()
    got = {tok: buckets.exposed_comm_s(anchor, tok, 8, 50e9, hw.effective_flop_per_s)
           for tok in (1024, 2048, 4096, 8192, 16384)}
    assert [f"{got[k]:.2f}" for k in sorted(got)] == ["1.68", "1.42", "0.92", "0.13", "0.13"]
    # the floor: embedding and vision tower gradients are ready only when the backward ends
    tail = sum(collectives.ring_all_reduce_bytes(8, 2 * n) for n in
               (anchor.params.components["embedding"], anchor.params.components["vision"])) / 50e9
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
