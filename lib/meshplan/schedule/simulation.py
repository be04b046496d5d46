"""The event simulation: each device runs its order, each operation as soon as the device is free and its
inputs are ready, and the measurements taken from the resulting timeline.

An operation starts at max(the device is free, its inputs are ready) and lasts its compute time.
Dependencies, with k the position on a micro-batch's path through the model (``orders.position``): F of
micro-batch j at k needs F of j at k−1; B (or BW) at k needs its own F and the backward of j at k+1; W needs
its own B; ``F&B`` needs what its forward and its backward need. Communication between stages takes zero
time (an assumption of the simulator, as of the bubble formulas it checks).

Times: ``f``, ``b``, ``w`` are the times of one micro-batch through one pipeline stage (1/p of the layers);
a full backward takes b + w and ``F&B`` f + b + w (it computes both; the overlap hides communication, which
is free here anyway). A schedule whose micro-batches pass c chunks per device (v for the interleaved
schedule, 2 for DualPipeV) has chunks of 1/(p·c) of the layers, and an operation takes f/c, b/c, w/c.
Every device then computes m(f + b + w) per step, the *ideal* compute. Inside, the times are scaled to
integers (exact for any finite input, floats included); the results are floats.

Measured quantities (``Timeline``):

* **bubble**: a device's idle time between its first and its last operation, the largest over the devices,
  over the ideal compute m(f + b + w). This is the step's bubble when steps follow each other and a stage
  may start the next step as soon as its own last operation is done; ``sync_bubble`` uses the makespan
  instead (every device waits for the step's last operation, as an optimizer step that synchronises all
  stages makes it). The two agree for GPipe, 1F1B, interleaved and ZB-H1; ZB-H2's zero bubble needs the
  synchronisation removed (Qi et al. 2024 §2.2). ``bubble_share`` is bubble / (1 + bubble).
* **makespan**: the end of the last operation (the step starts at 0).
* **peak_activations**: per device, the most micro-batch activations held at once, counting one micro-batch
  of one chunk from the start of its F to the end of its last backward operation (BW, or W when B and W
  are split), in chunks; ``peak_stages`` converts to stages (1/p of the layers).

Cost: linear in the number of operations. The dependencies are array slots indexed by (micro-batch,
position), and a device blocked on a missing input waits on that slot's list until the input is produced,
so no operation is looked at more than twice. ``check_size`` bounds the size (``MAX_FORWARDS``).

``replay`` runs an explicit per-device order (for instance ``torch.distributed.pipelining``'s
``pipeline_order``) through the same simulation.

    >>> t = simulate("1f1b", 4, 8)
    >>> t.bubble, t.makespan, t.peak_activations
    (0.375, 33.0, (4, 3, 2, 1))
    >>> simulate("zb-h1", 4, 8).bubble == simulate("1f1b", 4, 8).bubble / 3
    True
    >>> replay({0: [("F", 0, 0), ("F", 0, 1), ("BW", 0, 0), ("BW", 0, 1)],
    ...         1: [("F", 1, 0), ("F", 1, 1), ("BW", 1, 0), ("BW", 1, 1)]}).sync_bubble
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import NamedTuple

from meshplan.schedule.inputs import OP_KINDS, Time, check, check_size, check_times, check_total, path_chunks
from meshplan.schedule.order import Op, model_stages, orders, position


class Event(NamedTuple):
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


class _Trace(NamedTuple):
    """What the events are built from: each device's order, the start of each operation in integer units of
    1/``scale``, and each kind's duration in the same units."""

    orders: Sequence[Sequence[Op]]
    starts: list[list[int]]
    durations: dict[str, int]
    scale: int

    def device_events(self, d: int) -> tuple[Event, ...]:
        dur, scale = self.durations, self.scale
        return tuple(
            Event(
                d,
                op.kind,
                op.micro_batch,
                op.chunk,
                s / scale,
                (s + dur[op.kind]) / scale,
                op.bw_micro_batch,
                op.bw_chunk,
            )
            for op, s in zip(self.orders[d], self.starts[d])
        )


@dataclass(frozen=True)
class Timeline:
    """A simulated step: what was measured, and the events (built when first asked for).

    Attributes:
        kind, pp, micro_batches, virtual_stages, f, b, w: the inputs (``kind`` is ``"replay"`` for an
            explicit order).
        makespan: end of the last operation (the step starts at 0).
        ideal: compute per device, m(f + b + w).
        idle: per device, idle time between its first and its last operation.
        bubble: max(idle) / ideal.
        sync_bubble: (makespan − ideal) / ideal, when all devices wait for the step's last operation.
        bubble_share: max(idle) / (ideal + max(idle)), the idle share of the step's time.
        peak_activations: per device, the most micro-batch activations held at once, in chunks (one
            micro-batch through 1/``model_stages`` of the layers).
        model_stages: chunks on a micro-batch's path through the model (p·v interleaved, 2p DualPipeV).
        trace: what the events are built from (each device's order, the operations' start times as integers
            of 1/``trace.scale``, each kind's duration); exact, where the events' floats are rounded.
        events: every operation, sorted by (stage, start).
    """

    kind: str
    pp: int
    micro_batches: int
    virtual_stages: int
    f: float
    b: float
    w: float
    makespan: float
    ideal: float
    idle: tuple[float, ...]
    bubble: float
    sync_bubble: float
    bubble_share: float
    peak_activations: tuple[int, ...]
    model_stages: int
    trace: _Trace = field(repr=False, compare=False)

    @cached_property
    def events(self) -> tuple[Event, ...]:
        """Every operation, sorted by (stage, start)."""
        return tuple(e for d in range(self.pp) for e in self.trace.device_events(d))

    def stage_events(self, stage: int) -> tuple[Event, ...]:
        """The events of one device, in time order."""
        return self.trace.device_events(stage) if 0 <= stage < self.pp else ()

    @property
    def chunks_per_device(self) -> int:
        """Model chunks each device holds: v for the interleaved schedule, 2 for DualPipe (stage i and stage
        p−1−i of two copies of the model) and for DualPipeV (stages i and 2p−1−i of one), else 1."""
        return 2 if self.kind == "dualpipe" else self.model_stages // self.pp

    @property
    def parameter_copies(self) -> int:
        """Copies of the model's parameters the pipeline holds: 2 for DualPipe, else 1. Per device, DualPipe
        and DualPipeV both hold twice the parameters of one of their pipeline stages (DeepSeek's README:
        "Parameter Per Device 2×"), but DualPipeV's stages are half as large: 1/(2p) of the model each."""
        return 2 if self.kind == "dualpipe" else 1

    @property
    def peak_stages(self) -> tuple[float, ...]:
        """``peak_activations`` in units of one micro-batch through one stage (1/p of the layers): ÷ v for
        the interleaved schedule (Korthikanti 2022: p × (1 + (p−1)/(p·v)) on the first device), ÷ 2 for
        DualPipeV."""
        c = self.model_stages // self.pp
        return tuple(x / c for x in self.peak_activations)

    def to_dict(self) -> dict:
        """The ``schedule --json`` contract, then the extra measurements."""
        return {
            "kind": self.kind,
            "pp": self.pp,
            "micro_batches": self.micro_batches,
            "virtual_stages": self.virtual_stages,
            "bubble": self.bubble,
            "makespan": self.makespan,
            "peak_activations": list(self.peak_activations),
            "bubble_share_of_time": self.bubble_share,
            "sync_bubble": self.sync_bubble,
            "idle_per_stage": list(self.idle),
            "chunks_per_device": self.chunks_per_device,
            "parameter_copies": self.parameter_copies,
            "model_stages": self.model_stages,
            "times": {"f": self.f, "b": self.b, "w": self.w},
        }


# ---------------------------------------------------------------------------------------------- engine


def _run(
    dev_orders: Sequence[Sequence[Op]],
    positions: Sequence[Sequence[int]],
    n_stages: int,
    n_mb: int,
    dur: Mapping[str, int],
) -> list[list[int]]:
    """Start time of every operation, per device in its order; a device's list stops short where the orders
    deadlock. Slot mb·S + k holds the end of F of micro-batch mb at position k and slot N + mb·S + k the end
    of its backward for inputs (B or BW), −1 until they run; a device that finds a slot empty waits on it
    (``waiting``) and resumes when the slot is filled."""
    S, N, last = n_stages, n_mb * n_stages, n_stages - 1
    done = [-1] * (2 * N)
    waiting: dict[int, list[int]] = {}
    starts: list[list[int]] = [[] for _ in dev_orders]
    nxt, free = [0] * len(dev_orders), [0] * len(dev_orders)
    stack = list(range(len(dev_orders) - 1, -1, -1))
    while stack:
        d = stack.pop()
        ops, st, pos = dev_orders[d], starts[d], positions[d]
        i, t, n = nxt[d], free[d], len(ops)
        while i < n:
            kind, mb, chunk, bw_mb, bw_chunk = ops[i]
            needs: tuple[int, ...] = ()
            fills: tuple[int, ...] = ()
            if kind == "F" or kind == "F&B":
                k = pos[chunk]
                key = mb * S + k
                needs, fills = ((key - 1,) if k else ()), (key,)
            if kind == "W":
                needs = (N + mb * S + pos[chunk],)
            elif kind != "F":  # B, BW, or the backward half of F&B
                if kind == "F&B":
                    mb, chunk = bw_mb, bw_chunk  # type: ignore[assignment]  # set for F&B
                k = pos[chunk]
                key = mb * S + k
                needs += (key, N + key + 1) if k < last else (key,)
                fills += (N + key,)
            start = t
            for key in needs:
                e = done[key]
                if e < 0:
                    waiting.setdefault(key, []).append(d)
                    break
                start = max(start, e)
            else:
                st.append(start)
                t = start + dur[kind]
                for key in fills:
                    if done[key] >= 0:
                        raise ValueError(f"device {d}: {ops[i]} runs a computation that already ran")
                    done[key] = t
                    if key in waiting:
                        stack.extend(waiting.pop(key))
                i += 1
                continue
            break
        nxt[d], free[d] = i, t
    return starts


def _measure(
    kind: str,
    p: int,
    m: int,
    v: int,
    times: tuple[Fraction, Fraction, Fraction],
    c: int,
    dev_orders: Sequence[Sequence[Op]],
    positions: Sequence[Sequence[int]],
    n_stages: int,
) -> Timeline:
    """Simulate ``dev_orders`` with operation times f/c, b/c, w/c and measure the timeline."""
    tf, tb, tw = (t / c for t in times)
    scale = math.lcm(tf.denominator, tb.denominator, tw.denominator)  # times in integer units of 1/scale
    fi, bi, wi = (int(t * scale) for t in (tf, tb, tw))
    dur = {"F": fi, "B": bi, "W": wi, "BW": bi + wi, "F&B": fi + bi + wi}
    starts = _run(dev_orders, positions, n_stages, m, dur)
    stuck = {d: tuple(dev_orders[d][len(st)]) for d, st in enumerate(starts) if len(st) < len(dev_orders[d])}
    if stuck:
        raise ValueError(f"the orders deadlock: devices wait forever at {stuck}")
    busy, peaks, ends = [], [], []
    for ops, st in zip(dev_orders, starts):
        held = peak = work = 0
        for op in ops:
            k = op.kind
            work += dur[k]
            if k == "F" or k == "F&B":
                held += 1
                peak = max(peak, held)
            if k == "BW" or k == "W" or k == "F&B":
                held -= 1
        busy.append(work)
        peaks.append(peak)
        ends.append(st[-1] + dur[ops[-1].kind] if st else 0)
    if len(set(busy)) != 1:
        raise ValueError(f"devices are unequally loaded (busy time per device {busy}, in units of 1/{scale})")
    ideal, makespan = busy[0], max(ends)
    idle = [end - st[0] - ideal if st else 0 for end, st in zip(ends, starts)]
    worst = max(idle)
    return Timeline(
        kind=kind,
        pp=p,
        micro_batches=m,
        virtual_stages=v,
        f=float(times[0]),
        b=float(times[1]),
        w=float(times[2]),
        makespan=makespan / scale,
        ideal=ideal / scale,
        idle=tuple(x / scale for x in idle),
        bubble=worst / ideal,
        sync_bubble=(makespan - ideal) / ideal,
        bubble_share=worst / (ideal + worst),
        peak_activations=tuple(peaks),
        model_stages=n_stages,
        trace=_Trace(dev_orders, starts, dur, scale),
    )


# ---------------------------------------------------------------------------------------------- entry points


def simulate(
    kind: str, pp: int, micro_batches: int, virtual_stages: int = 1, f: Time = 1, b: Time = 1, w: Time = 1
) -> Timeline:
    """Simulate one step of ``kind`` on ``pp`` devices with ``micro_batches`` micro-batches.

    ``f``, ``b``, ``w``: times of one micro-batch through one stage (1/p of the layers) for the forward,
    the backward for inputs and the backward for weights (any unit; the timeline uses the same).
    Raises ValueError naming the factor, before any work, for sizes the schedule cannot run, sizes too
    large to simulate quickly (``inputs.MAX_FORWARDS``) and times that are negative, not finite, all zero
    or so large that the step's total overflows a float.
    """
    check(kind, pp, micro_batches, virtual_stages)
    check_size(kind, pp, micro_batches, virtual_stages)
    times = check_times(f, b, w)
    check_total(*times, pp, micro_batches)
    dev_orders = orders(kind, pp, micro_batches, virtual_stages)
    c = path_chunks(kind, virtual_stages)
    positions = [[position(kind, pp, d, chunk) for chunk in range(max(c, 2))] for d in range(pp)]
    return _measure(
        kind, pp, micro_batches, virtual_stages, times, c, dev_orders, positions, model_stages(kind, pp, virtual_stages)
    )


class Action(NamedTuple):
    """One entry of an explicit order, with model stage indices as ``torch.distributed.pipelining``'s
    ``_Action``: ``kind`` (F, B, W, BW or F&B, this package's names) of ``micro_batch`` on model ``stage``;
    for F&B also the overlapped full backward's (``bw_stage``, ``bw_micro_batch``)."""

    kind: str
    stage: int
    micro_batch: int
    bw_stage: int | None = None
    bw_micro_batch: int | None = None


def replay(
    order: Mapping[int, Sequence[Action | tuple]] | Sequence[Sequence[Action | tuple]],
    f: Time = 1,
    b: Time = 1,
    w: Time = 1,
) -> Timeline:
    """Simulate an explicit order: ``order[d]`` lists device d's ``Action`` s (or plain tuples
    ``(kind, stage, micro_batch[, bw_stage, bw_micro_batch])``) in the order it runs them; devices are
    0 … p−1. Each operation takes f, b, w as given (one micro-batch through one of the listed stages), BW
    b + w, F&B f + b + w. The timeline has ``kind="replay"``; its chunks are each device's stages in
    increasing order. ValueError for an unknown kind, a negative index, an operation listed twice, orders
    that deadlock, or devices with unequal work.
    """
    if isinstance(order, Mapping) and set(order) != set(range(len(order))):
        raise ValueError(f"devices {sorted(order)} must be numbered 0 … {len(order) - 1}")
    seq = [order[d] for d in range(len(order))] if isinstance(order, Mapping) else list(order)
    if not seq or not any(seq):
        raise ValueError("the order is empty")
    times = check_times(f, b, w)

    def index(d: int, a: object, x: object) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ValueError(f"device {d}: {a} needs non-negative integer stages and micro-batches")
        return x

    stages: list[list[int]] = []  # per action: stage (and the overlapped backward's stage)
    dev_ops: list[list[tuple[str, int, int | None]]] = []  # (kind, micro-batch, backward's micro-batch)
    for d, row in enumerate(seq):
        stages.append([])
        dev_ops.append([])
        for a in row:
            if not isinstance(a, tuple) or len(a) not in (3, 5):
                raise ValueError(f"device {d}: {a!r} must be (kind, stage, micro_batch[, bw_stage, bw_micro_batch])")
            act = Action(*a)
            if act.kind not in OP_KINDS:
                raise ValueError(f"device {d}: kind={act.kind!r} must be one of {', '.join(OP_KINDS)}")
            both = act.kind == "F&B"
            stages[-1] += [index(d, a, act.stage)] + ([index(d, a, act.bw_stage)] if both else [])
            dev_ops[-1].append(
                (act.kind, index(d, a, act.micro_batch), index(d, a, act.bw_micro_batch) if both else None)
            )
    n_stages = max(s for row in stages for s in row) + 1
    m = max(max(mb, bw or 0) for row in dev_ops for _, mb, bw in row) + 1
    p = len(seq)
    check_size("gpipe", n_stages, m)
    check_total(*times, n_stages, m)
    positions: list[list[int]] = []
    dev_orders: list[list[Op]] = []
    for row_stages, row in zip(stages, dev_ops):
        mine = sorted(set(row_stages))
        chunk = {s: i for i, s in enumerate(mine)}
        positions.append(mine)
        it = iter(row_stages)
        dev_orders.append(
            [Op(kind, mb, chunk[next(it)], bw, chunk[next(it)] if kind == "F&B" else None) for kind, mb, bw in row]
        )
    v = n_stages // p if n_stages % p == 0 else 1
    return _measure("replay", p, m, v, times, 1, dev_orders, positions, n_stages)


def compare_kinds(
    kinds: Sequence[str], pp: int, micro_batches: int, virtual_stages: int = 1, f: Time = 1, b: Time = 1, w: Time = 1
) -> dict[str, Timeline]:
    """``simulate`` for several kinds at once (v applies to the interleaved schedule only)."""
    return {k: simulate(k, pp, micro_batches, virtual_stages if k == "interleaved" else 1, f, b, w) for k in kinds}
