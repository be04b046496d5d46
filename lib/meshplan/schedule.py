"""Pipeline schedules as simulated timelines: GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2 and DualPipe.

A schedule is, for each device (pipeline rank), the ordered list of the operations it runs, as in the
papers and in ``torch.distributed.pipelining``. ``simulate`` runs these lists through a
dependency-driven event simulation: an operation starts at max(the device is free, its inputs are ready)
and lasts its compute time. Dependencies: F of micro-batch j on pipeline position k needs F of j on
position k−1; B (backward for inputs) on position k needs B on position k+1 and its own F; W (backward for
weights) needs its own B. Communication between stages takes zero time here (an assumption of the
simulator, as of the bubble formulas it checks).

Operation kinds (``Event.kind``): ``F`` forward; ``B`` backward for inputs; ``W`` backward for weights;
``BW`` a full backward (B then W as one operation, what GPipe, 1F1B and the interleaved schedule run);
``F&B`` DualPipe's forward of one micro-batch overlapped with the full backward of another.

Times: ``f``, ``b``, ``w`` are the times of one micro-batch through one pipeline stage (1/p of the
layers); 1F1B's full backward takes b + w. With v virtual stages each device holds v chunks of 1/(p·v)
of the layers, so an operation takes f/v, b/v, w/v. Every device then computes m(f + b + w) per step,
the *ideal* compute. Times are exact fractions inside (inputs are converted exactly); the results are
floats.

Measured quantities:

* **bubble**: a device's idle time between its first and its last operation, the largest over the
  devices, over the ideal compute m(f + b + w). This is the step's bubble when steps follow each other
  and a stage may start the next step as soon as its own last W is done; ``sync_bubble`` uses the
  makespan instead (every device waits for the last operation of the step, as an optimizer step that
  synchronises all stages makes it). The two agree for GPipe, 1F1B, interleaved and ZB-H1; ZB-H2's zero
  bubble needs the synchronisation removed (Qi et al. 2024 §2.2: "the synchronization between the
  optimizer steps is removed here"). ``bubble_share`` is the same idle time over the total time,
  bubble / (1 + bubble).
* **makespan**: the end of the last operation (the step starts at 0).
* **peak_activations**: per device, the largest number of micro-batch activations held at once, counting
  one micro-batch of one chunk from the start of its F to the end of its last backward operation (BW, or
  W when B and W are split). Each unit is one micro-batch through one stage (1/p of the layers; 1/(p·v)
  for the interleaved schedule, whose units are v times smaller).

The schedules, with their sources:

* ``gpipe`` (Huang et al. 2019): all m forwards, then all m full backwards (in micro-batch order, as
  ``torch.distributed.pipelining.ScheduleGPipe``). Bubble (p−1)/m, peak m.
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021 §2.2.1): device r runs min(p−r−1, m) warm-up
  forwards, then alternates one F and one full backward, then drains. Bubble (p−1)/m, peak p on device 0.
* ``interleaved`` (Narayanan et al. 2021 §2.2.2, Megatron-LM's order): each device holds v chunks,
  chunk c of device r being model stage c·p + r; forwards go through the chunks in groups of p
  micro-batches; warm-up (p−r−1)·2 + (v−1)·p forwards. Needs m a multiple of p. Bubble (p−1)/(m·v).
* ``zb-h1`` (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §2.1 and Figure 3): 1F1B with the
  backward split into B and W; device r runs min(p−r−1, m) warm-up forwards, then F, B pairs, and
  delays each W by r micro-batches (the last device's W passes fill the cool-down). Bubble
  (p−1)(f + b − w) of m(f + b + w) (Table 2): a third of 1F1B's when f = b = w; peak p, as 1F1B.
  Needs m ≥ p.
* ``zb-h2`` (Qi et al. 2024 §2.2 and Figure 4): up to 2p−1 micro-batches in flight; extra warm-up
  forwards fill the head bubble and deferred W passes fill the tail. Its order is the one the paper draws
  for f = b = w: on a grid of equal slots each device runs a B if one is ready, else an F if fewer than
  2p−1 micro-batches are in flight and one is ready, else its oldest pending W. The order is then replayed
  with the given times. Zero bubble when f = b = w and m ≥ 2p−1 (without the optimizer-step
  synchronisation); peak 2p−1. Needs m ≥ p.
* ``dualpipe`` (DeepSeek-V3 report §3.2.1, Figure 5 and Table 2; the order of the open-source
  ``deepseek-ai/DualPipe`` ``DualPipe.step``, its steps 1–8): device i holds stage i and stage p−1−i (two
  copies of the parameters); half of the micro-batches enter at device 0 and flow down, the other half
  enter at device p−1 and flow up. ``F&B`` overlaps a forward of one direction with a full backward of
  the other; it computes both, so here it takes f + b + w (the overlap hides communication, which the
  simulator already counts as zero). Table 2's bubble (PP/2 − 1)(F&B + B − 3W), with its B the full
  backward (b + w) and F&B read as f + b + w, is (p/2 − 1)(f + 2b − w); the simulated order idles
  exactly that whenever f = b, and a different amount when the forward and the backward for inputs take
  different times (the report does not state the times its closed form assumes). Peak p + 1 on every
  device (Table 2: PP + 1). Needs p even, m even and m ≥ 2p (the repository asserts
  ``num_chunks >= num_ranks * 2``).

    >>> t = simulate("1f1b", 4, 8)
    >>> t.bubble, t.makespan, t.peak_activations
    (0.375, 33.0, (4, 3, 2, 1))
    >>> simulate("zb-h1", 4, 8).bubble == simulate("1f1b", 4, 8).bubble / 3
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

KINDS = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe")
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B", "zb-h1": "ZB-H1",
         "zb-h2": "ZB-H2", "dualpipe": "DualPipe"}
OP_KINDS = ("F", "B", "W", "BW", "F&B")


# ---------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Op:
    """One entry of a device's order: ``kind`` on (``micro_batch``, ``chunk``); ``F&B`` also names the
    micro-batch and chunk of its overlapped full backward (``bw_micro_batch``, ``bw_chunk``)."""

    kind: str
    micro_batch: int
    chunk: int = 0
    bw_micro_batch: int | None = None
    bw_chunk: int | None = None


@dataclass(frozen=True)
class Event:
    """One operation on the timeline: device ``stage`` ran ``kind`` on ``micro_batch`` (its model chunk
    ``chunk`` on that device) from ``start`` to ``end`` (same unit as f, b, w). For ``F&B`` the forward is
    (``micro_batch``, ``chunk``) and the overlapped full backward (``bw_micro_batch``, ``bw_chunk``)."""

    stage: int
    kind: str
    micro_batch: int
    chunk: int
    start: float
    end: float
    bw_micro_batch: int | None = None
    bw_chunk: int | None = None

    @property
    def label(self) -> str:
        """Short text: ``F3``, ``BW0``, ``F1.2`` (micro-batch 1, chunk 2), ``F2|BW5`` for F&B."""
        def one(kind, mb, chunk):
            return f"{kind}{mb}" + (f".{chunk}" if chunk else "")
        if self.kind == "F&B":
            return f"{one('F', self.micro_batch, self.chunk)}|{one('BW', self.bw_micro_batch, self.bw_chunk)}"
        return one(self.kind, self.micro_batch, self.chunk)


@dataclass(frozen=True)
class Timeline:
    """A simulated step: the events and what was measured from them.

    Attributes:
        kind, pp, micro_batches, virtual_stages, f, b, w: the inputs.
        events: every operation, sorted by (stage, start).
        makespan: end of the last operation (the step starts at 0).
        ideal: compute per device, m(f + b + w).
        idle: per device, idle time between its first and its last operation.
        bubble: max(idle) / ideal.
        sync_bubble: (makespan − ideal) / ideal, when all devices wait for the step's last operation.
        bubble_share: max(idle) / (ideal + max(idle)), the idle share of the step's time.
        peak_activations: per device, the most micro-batch activations held at once, in chunks (one
            micro-batch through 1/(p·v) of the layers).
    """

    kind: str
    pp: int
    micro_batches: int
    virtual_stages: int
    f: float
    b: float
    w: float
    events: tuple[Event, ...]
    makespan: float
    ideal: float
    idle: tuple[float, ...]
    bubble: float
    sync_bubble: float
    bubble_share: float
    peak_activations: tuple[int, ...]

    @property
    def chunks_per_device(self) -> int:
        """Model chunks each device holds: v for the interleaved schedule, 2 for DualPipe (stage i and
        stage p−1−i: two copies of the parameters), else 1."""
        return 2 if self.kind == "dualpipe" else self.virtual_stages

    @property
    def peak_stages(self) -> tuple[float, ...]:
        """``peak_activations`` in units of one micro-batch through one stage (1/p of the layers): ÷ v for
        the interleaved schedule (Korthikanti 2022: p × (1 + (p−1)/(p·v)) on the first device)."""
        v = self.virtual_stages if self.kind == "interleaved" else 1
        return tuple(x / v for x in self.peak_activations)

    def stage_events(self, stage: int) -> tuple[Event, ...]:
        """The events of one device, in time order."""
        return tuple(e for e in self.events if e.stage == stage)

    def to_dict(self) -> dict:
        """The ``schedule --json`` contract, then the extra measurements."""
        return {
            "kind": self.kind, "pp": self.pp, "micro_batches": self.micro_batches,
            "virtual_stages": self.virtual_stages, "bubble": self.bubble, "makespan": self.makespan,
            "peak_activations": list(self.peak_activations),
            "bubble_share_of_time": self.bubble_share, "sync_bubble": self.sync_bubble,
            "idle_per_stage": list(self.idle), "chunks_per_device": self.chunks_per_device,
            "times": {"f": self.f, "b": self.b, "w": self.w},
        }


# ---------------------------------------------------------------------------------------------- checks


def _pos_int(name: str, x) -> None:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name}={x!r} must be a positive integer")


def _time(name: str, x) -> Fraction:
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)) or not math.isfinite(x) or x < 0:
        raise ValueError(f"{name}={x!r} must be a non-negative finite time")
    return Fraction(x)


def check(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> None:
    """Raise ValueError naming the factor when ``kind`` cannot run with these sizes."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} must be one of {', '.join(KINDS)}")
    p, m, v = pp, micro_batches, virtual_stages
    _pos_int("pp", p)
    _pos_int("micro_batches", m)
    _pos_int("virtual_stages", v)
    if kind != "interleaved" and v != 1:
        raise ValueError(f"virtual_stages={v} needs the interleaved schedule, not {kind}")
    if kind in ("interleaved", "zb-h1", "zb-h2") and m < p:
        raise ValueError(f"micro_batches={m} is fewer than pp={p} stages, which {kind} needs")
    if kind == "interleaved" and m % p:
        raise ValueError(f"pp={p} does not divide micro_batches={m} (the interleaved schedule needs a multiple)")
    if kind == "dualpipe":
        if p % 2:
            raise ValueError(f"pp={p} is odd; DualPipe needs an even number of stages")
        if m % 2:
            raise ValueError(f"micro_batches={m} is odd; DualPipe feeds half from each end")
        if m < 2 * p:
            raise ValueError(f"micro_batches={m} is fewer than 2 × pp = {2 * p}, which DualPipe needs")


# ---------------------------------------------------------------------------------------------- orders
# Each builder returns orders: orders[d] is device d's list of Op, in the order device d runs them.
# Where (device, chunk) sits on a micro-batch's path through the model is ``_position``.


def _gpipe(p, m):
    return [[Op("F", j) for j in range(m)] + [Op("BW", j) for j in range(m)] for _ in range(p)]


def _one_f_one_b(p, m):
    orders = []
    for r in range(p):
        warm = min(p - r - 1, m)
        ops = [Op("F", j) for j in range(warm)]
        for k in range(m - warm):
            ops += [Op("F", warm + k), Op("BW", k)]
        ops += [Op("BW", k) for k in range(m - warm, m)]
        orders.append(ops)
    return orders


def _interleaved(p, m, v):
    """Megatron-LM's order (``forward_backward_pipelining_with_interleaving``)."""
    total = m * v

    def fwd(k):
        return (k // (p * v)) * p + k % p, (k // p) % v       # (micro-batch, chunk)

    def bwd(k):
        return (k // (p * v)) * p + k % p, v - 1 - (k // p) % v

    orders = []
    for r in range(p):
        warm = min((p - r - 1) * 2 + (v - 1) * p, total)
        ops = [Op("F", *fwd(k)) for k in range(warm)]
        for k in range(total - warm):
            ops += [Op("F", *fwd(warm + k)), Op("BW", *bwd(k))]
        ops += [Op("BW", *bwd(k)) for k in range(total - warm, total)]
        orders.append(ops)
    return orders


def _zb_h1(p, m):
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


def _zb_h2(p, m):
    """The order of ZB-H2 drawn on a grid of equal slots (f = b = w): B first, else F while fewer than
    2p−1 micro-batches are in flight, else the oldest pending W."""
    cap = 2 * p - 1
    done: dict[tuple[str, int, int], int] = {}
    nf, nb, inflight = [0] * p, [0] * p, [0] * p
    pending: list[list[int]] = [[] for _ in range(p)]
    orders: list[list[Op]] = [[] for _ in range(p)]
    t = 0
    big = float("inf")
    while any(nb[s] < m or pending[s] for s in range(p)):
        for s in range(p):
            j = nb[s]
            if j < m and done.get(("F", s, j), big) <= t and (s == p - 1 or done.get(("B", s + 1, j), big) <= t):
                op = Op("B", j)
                nb[s] += 1
                pending[s].append(j)
            elif nf[s] < m and inflight[s] < cap and (s == 0 or done.get(("F", s - 1, nf[s]), big) <= t):
                op = Op("F", nf[s])
                nf[s] += 1
                inflight[s] += 1
            elif pending[s]:
                op = Op("W", pending[s].pop(0))
                inflight[s] -= 1
            else:
                continue
            done[(op.kind, s, op.micro_batch)] = t + 1
            orders[s].append(op)
        t += 1
    return orders


def _dualpipe(p, m):
    """DeepSeek's ``DualPipe.step`` order, steps 1–8. Direction 0 carries micro-batches 0 … m/2−1 from
    device 0 down (chunk 0 of device i is stage i); direction 1 carries m/2 … m−1 from device p−1 up
    (chunk 1 of device i is stage p−1−i of the second copy). A device's "phase 0" is the direction that
    enters at its own end of the pipeline."""
    half_p, half_m = p // 2, m // 2
    orders = []
    for i in range(p):
        h = min(i, p - 1 - i)
        second = i >= half_p
        middle = h == half_p - 1
        nf, nb = [0, 0], [0, 0]
        wq: list[tuple[int, int]] = []
        ops: list[Op] = []

        def direction(phase):
            return phase ^ second

        def mb(d, k):
            return k + d * half_m

        def F(phase):
            d = direction(phase)
            ops.append(Op("F", mb(d, nf[d]), d))
            nf[d] += 1

        def B(phase, zb=False):
            d = direction(phase)
            ops.append(Op("B" if zb else "BW", mb(d, nb[d]), d))
            if zb:
                wq.append((mb(d, nb[d]), d))
            nb[d] += 1

        def W():
            j, d = wq.pop(0)
            ops.append(Op("W", j, d))

        def FB(phase0, phase1):
            d0, d1 = direction(phase0), direction(phase1)
            ops.append(Op("F&B", mb(d0, nf[d0]), d0, mb(d1, nb[d1]), d1))
            nf[d0] += 1
            nb[d1] += 1

        for _ in range((half_p - h - 1) * 2):                      # step 1: nF0
            F(0)
        for _ in range(h + 1):                                     # step 2: nF0F1
            F(0)
            F(1)
        for _ in range(half_p - h - 1):                            # step 3: nB1W1F1 (zero bubble)
            B(1, zb=True)
            W()
            F(1)
        for k in range(half_m - p + h + 1):                        # step 4: nF0B1F1B0
            if k == 0 and middle:                                  # not overlapped in the repository
                F(0)
                B(1)
            else:
                FB(0, 1)
            FB(1, 0)
        for _ in range(half_p - h - 1):                            # step 5: nB1F1B0
            B(1)
            FB(1, 0)
        zb = False
        for k in range(h + 1):                                     # step 6: nB1B0, second half zero bubble
            if k == (h + 1) // 2 and h % 2 == 1:
                zb = True
            B(1, zb)
            if k == (h + 1) // 2 and h % 2 == 0:
                zb = True
            B(0, zb)
        for _ in range(half_p - h - 1):                            # step 7: nWB0
            W()
            B(0, zb=True)
        for _ in range(h + 1):                                     # step 8: nW
            W()
        orders.append(ops)
    return orders


def orders(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> list[list[Op]]:
    """Each device's ordered operations for ``kind`` (ValueError for sizes the schedule cannot run)."""
    check(kind, pp, micro_batches, virtual_stages)
    p, m, v = pp, micro_batches, virtual_stages
    if kind == "gpipe":
        return _gpipe(p, m)
    if kind == "1f1b":
        return _one_f_one_b(p, m)
    if kind == "interleaved":
        return _interleaved(p, m, v) if v > 1 else _one_f_one_b(p, m)  # v = 1 is 1F1B
    if kind == "zb-h1":
        return _zb_h1(p, m)
    if kind == "zb-h2":
        return _zb_h2(p, m)
    return _dualpipe(p, m)


# ---------------------------------------------------------------------------------------------- simulation


def _position(kind: str, p: int, device: int, chunk: int) -> int:
    """Where (device, chunk) sits on a micro-batch's path (0 = the first stage it passes): chunk·p + device
    for the interleaved schedule; for DualPipe chunk 0 is stage ``device`` of the downward direction and
    chunk 1 stage p−1−``device`` of the upward one."""
    if kind == "interleaved":
        return chunk * p + device
    if kind == "dualpipe":
        return device if chunk == 0 else p - 1 - device
    return device


def simulate(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1,
             f: float = 1, b: float = 1, w: float = 1) -> Timeline:
    """Simulate one step of ``kind`` on ``pp`` devices with ``micro_batches`` micro-batches.

    ``f``, ``b``, ``w``: times of one micro-batch through one stage (1/p of the layers) for the forward,
    the backward for inputs and the backward for weights (any unit; the timeline uses the same).
    Raises ValueError naming the factor for sizes the schedule cannot run.
    """
    tf, tb, tw = _time("f", f), _time("b", b), _time("w", w)
    if tf + tb + tw == 0:
        raise ValueError("f + b + w = 0: at least one operation must take time")
    p, m, v = pp, micro_batches, virtual_stages
    dev_orders = orders(kind, p, m, v)
    n_pos = p * v if kind == "interleaved" else p
    dur = {"F": tf / v, "B": tb / v, "W": tw / v, "BW": (tb + tw) / v, "F&B": (tf + tb + tw) / v}

    def needs_provides(d: int, op: Op):
        needs, provides = [], []

        def fwd(mb, chunk):
            k = _position(kind, p, d, chunk)
            if k > 0:
                needs.append(("F", mb, k - 1))
            provides.append(("F", mb, k))

        def bwd(mb, chunk, with_w):
            k = _position(kind, p, d, chunk)
            needs.append(("F", mb, k))
            if k < n_pos - 1:
                needs.append(("B", mb, k + 1))
            provides.append(("B", mb, k))
            if with_w:
                provides.append(("W", mb, k))

        if op.kind == "F":
            fwd(op.micro_batch, op.chunk)
        elif op.kind in ("B", "BW"):
            bwd(op.micro_batch, op.chunk, op.kind == "BW")
        elif op.kind == "W":
            k = _position(kind, p, d, op.chunk)
            needs.append(("B", op.micro_batch, k))
            provides.append(("W", op.micro_batch, k))
        else:  # F&B
            fwd(op.micro_batch, op.chunk)
            bwd(op.bw_micro_batch, op.bw_chunk, True)
        return needs, provides

    prepared = [[(op, *needs_provides(d, op)) for op in ops] for d, ops in enumerate(dev_orders)]
    done: dict[tuple[str, int, int], Fraction] = {}
    free = [Fraction(0)] * p
    nxt = [0] * p
    raw: list[tuple[int, Op, Fraction, Fraction]] = []
    remaining = sum(len(o) for o in prepared)
    while remaining:
        progressed = False
        for d in range(p):
            while nxt[d] < len(prepared[d]):
                op, needs, provides = prepared[d][nxt[d]]
                if any(k not in done for k in needs):
                    break
                start = max([free[d]] + [done[k] for k in needs])
                end = start + dur[op.kind]
                for k in provides:
                    done[k] = end
                free[d] = end
                raw.append((d, op, start, end))
                nxt[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - an order that deadlocks is a bug in this module
            raise RuntimeError(f"{kind}: the per-device orders deadlock (p={p}, m={m}, v={v})")

    ideal = m * (tf + tb + tw)
    makespan = max(e for _, _, _, e in raw)
    idle, peaks = [], []
    for d in range(p):
        evs = [(s, e, op) for dd, op, s, e in raw if dd == d]  # in the device's order
        busy = sum(e - s for s, e, _ in evs)
        idle.append(evs[-1][1] - evs[0][0] - busy)
        held = peak = 0
        for _, _, op in evs:
            if op.kind in ("F", "F&B"):
                held += 1
                peak = max(peak, held)
            if op.kind in ("BW", "W", "F&B"):
                held -= 1
        peaks.append(peak)
    worst = max(idle)
    events = tuple(Event(d, op.kind, op.micro_batch, op.chunk, float(s), float(e), op.bw_micro_batch, op.bw_chunk)
                   for d, op, s, e in sorted(raw, key=lambda x: (x[0], x[2])))
    return Timeline(
        kind=kind, pp=p, micro_batches=m, virtual_stages=v,
        f=float(tf), b=float(tb), w=float(tw), events=events, makespan=float(makespan), ideal=float(ideal),
        idle=tuple(float(x) for x in idle), bubble=float(worst / ideal),
        sync_bubble=float((makespan - ideal) / ideal), bubble_share=float(worst / (ideal + worst)),
        peak_activations=tuple(peaks),
    )


# ---------------------------------------------------------------------------------------------- formulas


def formula_bubble(kind: str, pp: int, micro_batches: int, virtual_stages: int = 1,
                   f: float = 1, b: float = 1, w: float = 1) -> float:
    """The published bubble over the ideal compute m(f + b + w), to compare with ``simulate``.

    GPipe, 1F1B: (p−1)/m (Narayanan §2.2.1); interleaved: (p−1)/(m·v) (§2.2.2); ZB-H1:
    (p−1)(f + b − w)/(m(f + b + w)); ZB-H2: (p−1)(f + b − 2w)/(m(f + b + w)), floored at 0 (Qi et al.
    Table 2; ZB-H2's assumes m ≥ 2p − 1); DualPipe: (p/2 − 1)(F&B + B − 3W) with F&B = f + b + w and
    B = b + w (DeepSeek-V3 Table 2; the simulated order matches it when f = b).

        >>> formula_bubble("interleaved", 8, 32, 4)
        0.0546875
    """
    check(kind, pp, micro_batches, virtual_stages)
    p, m, v = pp, micro_batches, virtual_stages
    tf, tb, tw = _time("f", f), _time("b", b), _time("w", w)
    ideal = m * (tf + tb + tw)
    if kind in ("gpipe", "1f1b"):
        return (p - 1) / m
    if kind == "interleaved":
        return (p - 1) / (m * v)
    if kind == "zb-h1":
        return float((p - 1) * (tf + tb - tw) / ideal)
    if kind == "zb-h2":
        if m < 2 * p - 1:
            raise ValueError(f"micro_batches={m} is fewer than 2 × pp − 1 = {2 * p - 1}, which ZB-H2's "
                             "formula assumes")
        return float(max(Fraction(0), (p - 1) * (tf + tb - 2 * tw)) / ideal)
    return float((Fraction(p, 2) - 1) * ((tf + tb + tw) + (tb + tw) - 3 * tw) / ideal)


# ---------------------------------------------------------------------------------------------- text


def format_timeline(t: Timeline, max_cells: int = 240) -> str:
    """A text timeline: a header, then one row per device. When every operation is a whole number of
    slots of a common unit and the step fits in ``max_cells`` slots, each slot is a cell (``.`` idle, an
    operation's label in its first slot, ``=`` in the rest); otherwise each row lists ``label@start``."""
    name = NAMES[t.kind]
    head = [
        f"{name}: p = {t.pp}, m = {t.micro_batches}, v = {t.virtual_stages}, chunks per device = {t.chunks_per_device}; "
        f"F = {t.f:g}, B = {t.b:g}, W = {t.w:g} (communication takes no time)",
        f"bubble {100 * t.bubble:.1f} % of ideal compute ({100 * t.bubble_share:.1f} % of the step); "
        f"makespan {t.makespan:g}; peak activations per stage: {' '.join(map(str, t.peak_activations))}",
    ]
    durs = {Fraction(e.end) - Fraction(e.start) for e in t.events} | {Fraction(e.start) for e in t.events}
    durs.discard(Fraction(0))
    unit = Fraction(0)
    for x in durs:
        unit = Fraction(math.gcd(unit.numerator * x.denominator, x.numerator * unit.denominator),
                        unit.denominator * x.denominator) if unit else x
    width = max(len(e.label) for e in t.events) + 1
    cells = int(Fraction(t.makespan) / unit) if unit else 0
    rows = []
    if unit and cells <= max_cells:
        for s in range(t.pp):
            line = ["." * (width - 1)] * cells
            for e in t.stage_events(s):
                a, z = int(Fraction(e.start) / unit), int(Fraction(e.end) / unit)
                line[a] = e.label.ljust(width - 1)
                for c in range(a + 1, z):
                    line[c] = "=" * (width - 1)
            rows.append(f"stage {s:>2} | " + " ".join(line).rstrip())
        head.append(f"one cell = {float(unit):g} time unit(s)")
    else:
        for s in range(t.pp):
            rows.append(f"stage {s:>2} | " + " ".join(f"{e.label}@{e.start:g}" for e in t.stage_events(s)))
    return "\n".join(head + rows)


# ---------------------------------------------------------------------------------------------- CLI


def _nonneg(name):
    import argparse

    def conv(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be a non-negative number") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{name}={text} must be a non-negative finite number")
        return int(value) if value.is_integer() else value
    return conv


def _run(args) -> int:
    import json

    t = simulate(args.kind, args.pp, args.micro_batches, args.virtual_stages, args.f, args.b, args.w)
    print(json.dumps(t.to_dict()) if args.json else format_timeline(t))
    return 0


def add_command(subparsers) -> None:
    """Register ``python -m meshplan schedule``."""
    from .cli import _int

    p = subparsers.add_parser("schedule", help="simulate a pipeline schedule: timeline, bubble, peak activations")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--pp", required=True, type=_int("pp"))
    p.add_argument("--micro-batches", required=True, type=_int("micro-batches"))
    p.add_argument("--virtual-stages", type=_int("virtual-stages"), default=1)
    p.add_argument("--f", type=_nonneg("f"), default=1, help="forward time of one micro-batch through one stage")
    p.add_argument("--b", type=_nonneg("b"), default=1, help="backward-for-inputs time")
    p.add_argument("--w", type=_nonneg("w"), default=1, help="backward-for-weights time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_run)


def compare_kinds(kinds: Sequence[str], pp: int, micro_batches: int, virtual_stages: int = 1,
                  f: float = 1, b: float = 1, w: float = 1) -> dict[str, Timeline]:
    """``simulate`` for several kinds at once (v applies to the interleaved schedule only)."""
    return {k: simulate(k, pp, micro_batches, virtual_stages if k == "interleaved" else 1, f, b, w) for k in kinds}
