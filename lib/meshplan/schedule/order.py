"""Each schedule as the ordered list of operations every device runs, with its source.

``orders(kind, p, m, v)[d]`` is device d's list of ``Op``, in the order device d runs them, as in the papers
and in ``torch.distributed.pipelining`` (whose ``pipeline_order`` is the same kind of list). Operation kinds:
``F`` forward; ``B`` backward for inputs; ``W`` backward for weights; ``BW`` a full backward (B then W as one
operation); ``F&B`` a forward of one micro-batch overlapped with the full backward of another (DualPipe).
An ``Op`` names the micro-batch and the device's model chunk; ``position`` says where that chunk sits on a
micro-batch's path through the model.

* ``gpipe`` (Huang et al. 2019): all m forwards, then all m full backwards (in micro-batch order, as
  ``torch.distributed.pipelining.ScheduleGPipe``).
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021 §2.2.1): device r runs min(p−r−1, m) warm-up forwards,
  then alternates one F and one full backward, then drains.
* ``interleaved`` (Narayanan et al. 2021 §2.2.2; Megatron-LM's
  ``forward_backward_pipelining_with_interleaving``): each device holds v chunks, chunk c of device r being
  model stage c·p + r; forwards go through the chunks in groups of p micro-batches; warm-up
  (p−r−1)·2 + (v−1)·p forwards. Needs m a multiple of p; v = 1 is 1F1B.
* ``zb-h1`` (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §2.1 and Figure 3): 1F1B with the backward
  split into B and W; device r runs min(p−r−1, m) warm-up forwards, then F, B pairs, and delays each W by r
  micro-batches (the last device's W passes fill the cool-down). Needs m ≥ p.
* ``zb-h2`` (Qi et al. 2024 §2.2 and Figure 4): up to 2p−1 micro-batches in flight; extra warm-up forwards
  fill the head bubble and deferred W passes fill the tail. The order is the one the paper draws for
  f = b = w: on a grid of equal slots each device runs a B if one is ready, else an F if fewer than 2p−1
  micro-batches are in flight and one is ready, else its oldest pending W. Needs m ≥ p.
* ``dualpipe`` (DeepSeek-V3 report §3.2.1, Figure 5; ``DualPipe.step`` of deepseek-ai/DualPipe at commit
  3da1bbea53606543d7f5f232338fc58096db30e3, ``dualpipe/dualpipe.py`` lines 358–424, its steps 1–8): device i
  holds stage i and stage p−1−i of a p-stage model (two copies of the parameters); micro-batches 0 … m/2−1
  enter at device 0 and flow down (chunk 0), m/2 … m−1 enter at device p−1 and flow up (chunk 1). Needs
  p even, m even and m ≥ 2p (the repository asserts all three, line 332–333).
* ``dualpipev`` (the same repository and commit, ``dualpipe/dualpipev.py`` lines 330–396: ``DualPipeV.step``,
  Sea AI Lab's "cut-in-half" of DualPipe): device i holds chunk 0 = stage i and chunk 1 = stage 2p−1−i of a
  2p-stage model, one copy of the parameters folded into a V; every micro-batch enters at device 0, flows
  down chunk 0 to device p−1, turns there and comes back up chunk 1 to device 0, which computes the loss.
  Its steps 1–8 are DualPipe's with ``num_half_ranks`` → p, ``half_rank`` → i, ``half_num_chunks`` → m and
  the middle rank → the last rank, so both are built by one function (``_dual_device``).
  ``torch.distributed.pipelining.ScheduleDualPipeV`` ports the same steps. Needs m ≥ 2p (line 318).

    >>> [op.kind + str(op.micro_batch) for op in orders("1f1b", 2, 3)[0]]
    ['F0', 'F1', 'BW0', 'F2', 'BW1', 'BW2']
    >>> position("dualpipev", 4, 1, 1), model_stages("dualpipev", 4)
    (6, 8)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from meshplan.schedule.inputs import check, check_size, path_chunks


class Op(NamedTuple):
    """One entry of a device's order: ``kind`` on (``micro_batch``, ``chunk``); ``F&B`` also names the
    micro-batch and chunk of its overlapped full backward (``bw_micro_batch``, ``bw_chunk``)."""

    kind: str
    micro_batch: int
    chunk: int = 0
    bw_micro_batch: int | None = None
    bw_chunk: int | None = None


def model_stages(kind: str, pp: int, virtual_stages: int = 1) -> int:
    """Model chunks on a micro-batch's path: p·v for the interleaved schedule, 2p for DualPipeV, else p."""
    return pp * path_chunks(kind, virtual_stages)


def position(kind: str, pp: int, device: int, chunk: int) -> int:
    """Where (device, chunk) sits on a micro-batch's path (0 = the first stage it passes): chunk·p + device
    for the interleaved schedule; for DualPipe chunk 0 is stage ``device`` of the downward direction and
    chunk 1 stage p−1−``device`` of the upward one; for DualPipeV chunk 1 is stage 2p−1−``device``."""
    if kind == "interleaved":
        return chunk * pp + device
    if kind == "dualpipe" and chunk:
        return pp - 1 - device
    if kind == "dualpipev" and chunk:
        return 2 * pp - 1 - device
    return device


# ---------------------------------------------------------------------------------------------- builders


def _gpipe(p: int, m: int) -> list[list[Op]]:
    return [[Op("F", j) for j in range(m)] + [Op("BW", j) for j in range(m)] for _ in range(p)]


def _one_f_one_b(p: int, m: int) -> list[list[Op]]:
    orders = []
    for r in range(p):
        warm = min(p - r - 1, m)
        ops = [Op("F", j) for j in range(warm)]
        for k in range(m - warm):
            ops += [Op("F", warm + k), Op("BW", k)]
        ops += [Op("BW", k) for k in range(m - warm, m)]
        orders.append(ops)
    return orders


def _interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM's order: the k-th forward of a device is micro-batch (k // pv)·p + k % p on chunk
    (k // p) % v; backwards go through the chunks in reverse."""
    total = m * v

    def fwd(k: int) -> Op:
        return Op("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> Op:
        return Op("BW", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    orders = []
    for r in range(p):
        warm = min((p - r - 1) * 2 + (v - 1) * p, total)
        ops = [fwd(k) for k in range(warm)]
        for k in range(total - warm):
            ops += [fwd(warm + k), bwd(k)]
        ops += [bwd(k) for k in range(total - warm, total)]
        orders.append(ops)
    return orders


def _zb_h1(p: int, m: int) -> list[list[Op]]:
    """1F1B with B and W split; device r runs W of micro-batch k − r after B of micro-batch k."""
    orders = []
    for r in range(p):
        warm = min(p - r - 1, m)
        ops = [Op("F", j) for j in range(warm)]
        nw = 0
        for k in range(m):
            if k < m - warm:
                ops.append(Op("F", warm + k))
            ops.append(Op("B", k))
            if k >= r:
                ops.append(Op("W", nw))
                nw += 1
        ops += [Op("W", j) for j in range(nw, m)]
        orders.append(ops)
    return orders


def _zb_h2(p: int, m: int) -> list[list[Op]]:
    """The order of ZB-H2 drawn on a grid of equal slots (f = b = w): B first, else F while fewer than
    2p−1 micro-batches are in flight, else the oldest pending W. ``f_end[s][j]`` is the slot after which F
    of micro-batch j is done on device s (likewise ``b_end``); an operation placed in slot t is visible to
    the others from slot t + 1, so the devices' order within a slot does not matter."""
    cap = 2 * p - 1
    f_end: list[list[int]] = [[] for _ in range(p)]
    b_end: list[list[int]] = [[] for _ in range(p)]
    nf, nb, inflight = [0] * p, [0] * p, [0] * p
    pending: list[deque[int]] = [deque() for _ in range(p)]
    orders: list[list[Op]] = [[] for _ in range(p)]
    active, t = list(range(p)), 0
    while active:
        for s in active:
            j = nb[s]
            if j < nf[s] and f_end[s][j] <= t and (s == p - 1 or (j < nb[s + 1] and b_end[s + 1][j] <= t)):
                orders[s].append(Op("B", j))
                b_end[s].append(t + 1)
                nb[s] = j + 1
                pending[s].append(j)
            elif nf[s] < m and inflight[s] < cap and (s == 0 or (nf[s] < nf[s - 1] and f_end[s - 1][nf[s]] <= t)):
                orders[s].append(Op("F", nf[s]))
                f_end[s].append(t + 1)
                nf[s] += 1
                inflight[s] += 1
            elif pending[s]:
                orders[s].append(Op("W", pending[s].popleft()))
                inflight[s] -= 1
        active = [s for s in active if nb[s] < m or pending[s]]
        t += 1
    return orders


def _dual_device(
    ranks: int, r: int, chunks: int, chunk_of: Callable[[int], int], micro_batch: Callable[[int, int], int]
) -> list[Op]:
    """Steps 1–8 of ``DualPipe.step`` (with ``ranks`` = num_half_ranks, ``r`` = half_rank, ``chunks`` =
    half_num_chunks) and of ``DualPipeV.step`` (num_ranks, rank, num_chunks) on one device. A phase is
    the repository's: phase 0 the direction whose first stage sits at this device's end of the pipeline.
    ``chunk_of(phase)`` gives the device's chunk for a phase and ``micro_batch(chunk, k)`` the k-th
    micro-batch through that chunk. Backwards run in each chunk's forward order; W passes pop the
    oldest split backward (the repository's ``WeightGradStore`` FIFO)."""
    nf, nb = [0, 0], [0, 0]
    wq: deque[tuple[int, int]] = deque()
    ops: list[Op] = []
    turn = r == ranks - 1  # DualPipe's middle rank, DualPipeV's last rank

    def f(phase: int) -> None:
        c = chunk_of(phase)
        ops.append(Op("F", micro_batch(c, nf[c]), c))
        nf[c] += 1

    def b(phase: int, zb: bool = False) -> None:
        c = chunk_of(phase)
        ops.append(Op("B" if zb else "BW", micro_batch(c, nb[c]), c))
        if zb:
            wq.append((micro_batch(c, nb[c]), c))
        nb[c] += 1

    def w() -> None:
        ops.append(Op("W", *wq.popleft()))

    def fb(phase0: int, phase1: int) -> None:
        c0, c1 = chunk_of(phase0), chunk_of(phase1)
        ops.append(Op("F&B", micro_batch(c0, nf[c0]), c0, micro_batch(c1, nb[c1]), c1))
        nf[c0] += 1
        nb[c1] += 1

    for _ in range((ranks - r - 1) * 2):  # step 1: nF0
        f(0)
    for _ in range(r + 1):  # step 2: nF0F1
        f(0)
        f(1)
    for _ in range(ranks - r - 1):  # step 3: nB1W1F1 (zero bubble)
        b(1, zb=True)
        w()
        f(1)
    for i in range(chunks - 2 * ranks + r + 1):  # step 4: nF0B1F1B0
        if i == 0 and turn:  # "We don't overlap these two chunks"
            f(0)
            b(1)
        else:
            fb(0, 1)
        fb(1, 0)
    for _ in range(ranks - r - 1):  # step 5: nB1F1B0
        b(1)
        fb(1, 0)
    zb = False
    for i in range(r + 1):  # step 6: nB1B0, second half zero bubble
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        b(1, zb)
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        b(0, zb)
    for _ in range(ranks - r - 1):  # step 7: nWB0 (zero bubble)
        w()
        b(0, zb=True)
    for _ in range(r + 1):  # step 8: nW
        w()
    return ops


def _dualpipe(p: int, m: int) -> list[list[Op]]:
    """DualPipe: ranks p/2, chunks m/2 per direction; on the first half of the devices phase 0 is the
    downward direction (chunk 0, micro-batches 0 … m/2−1), on the second half the upward one (chunk 1,
    micro-batches m/2 … m−1)."""
    half_p, half_m = p // 2, m // 2

    def chunk_of(second_half: int) -> Callable[[int], int]:
        return lambda phase: phase ^ second_half

    return [
        _dual_device(half_p, min(i, p - 1 - i), half_m, chunk_of(int(i >= half_p)), lambda c, k: k + c * half_m)
        for i in range(p)
    ]


def _dualpipev(p: int, m: int) -> list[list[Op]]:
    """DualPipeV: phase = chunk (0 down, 1 up), every micro-batch through both chunks."""
    return [_dual_device(p, i, m, lambda phase: phase, lambda c, k: k) for i in range(p)]


def orders(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> list[list[Op]]:
    """Each device's ordered operations for ``kind``: ValueError for sizes the schedule cannot run
    (``check``) or too large to simulate (``check_size``), before any work."""
    check(kind, pp, micro_batches, virtual_stages)
    check_size(kind, pp, micro_batches, virtual_stages)
    p, m, v = pp, micro_batches, virtual_stages
    if kind == "gpipe":
        return _gpipe(p, m)
    if kind == "1f1b" or (kind == "interleaved" and v == 1):
        return _one_f_one_b(p, m)
    if kind == "interleaved":
        return _interleaved(p, m, v)
    if kind == "zb-h1":
        return _zb_h1(p, m)
    if kind == "zb-h2":
        return _zb_h2(p, m)
    if kind == "dualpipe":
        return _dualpipe(p, m)
    return _dualpipev(p, m)
