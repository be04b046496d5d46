"""Count collectives where they are issued: a ``TorchDispatchMode`` that records every ``c10d`` op.

Every collective of ``torch.distributed`` reaches the dispatcher as a ``c10d.*`` op (eager API, DDP's C++
reducer, FSDP2) or a ``_c10d_functional.*`` op (DTensor, functional collectives); the mode records its
kind and its **payload**: the bytes of the full buffer in the library's convention
(``meshplan.core.collectives``): the buffer of an all-reduce or a broadcast, the *output* of an all-gather, the
*input* of a reduce-scatter, the tensor of a send or receive. Nothing is estimated: the numbers are the
tensors' ``numel() × element_size()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# op name (without overload) -> kind
KINDS = {
    "allreduce_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
    "barrier": "barrier",
    "monitored_barrier_": "barrier",
}


@dataclass(frozen=True)
class Collective:
    """One collective call as this rank issued it."""

    kind: str  # all_reduce | all_gather | reduce_scatter | broadcast | all_to_all | send | recv | barrier
    op: str  # the dispatcher op, e.g. "c10d.allreduce_.default"
    payload_bytes: int  # the full buffer (see the module docstring)
    dtype: str
    phase: str  # the label set by the caller (e.g. "forward", "backward", "step")


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def payload(kind: str, name: str, args) -> tuple[int, str]:
    """Payload bytes and dtype of one collective call, from its arguments."""
    first = list(_tensors(args[0])) if args else []
    dtype = str(first[0].dtype).replace("torch.", "") if first else ""
    if kind == "all_gather":
        if name in ("allgather_", "_allgather_base_", "allgather_into_tensor_coalesced_"):
            return _nbytes(first), dtype  # args[0]: the output (list) tensor(s)
        # functional: args = (input, group_size, group_name): the output is group_size × input
        return _nbytes(first) * int(args[1]), dtype
    if kind == "reduce_scatter":
        if name in ("reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_"):
            return _nbytes(_tensors(args[1])), dtype  # args[1]: the input(s)
        return _nbytes(first), dtype  # functional: args[0] is the input
    if kind == "barrier":
        return 0, dtype
    return _nbytes(first), dtype


class CollectiveLogger(TorchDispatchMode):
    """Records every collective issued while active. ``phase`` labels the calls that follow."""

    def __init__(self):
        super().__init__()
        self.calls: list[Collective] = []
        self.phase = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = func.namespace
        if ns in ("c10d", "_c10d_functional"):
            name = func._schema.name.split("::")[-1]
            kind = KINDS.get(name)
            if kind is not None:
                size, dtype = payload(kind, name, args)
                self.calls.append(Collective(kind, str(func), size, dtype, self.phase))
        return func(*args, **(kwargs or {}))

    def take(self) -> list[Collective]:
        """The calls recorded so far, and forget them."""
        out, self.calls = self.calls, []
        return out
