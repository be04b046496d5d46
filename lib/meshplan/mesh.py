"""The device mesh: rank ↔ coordinates for a named axis order, groups, and the link each group uses.

Convention: an order string lists the axes **from inner to outer**, the first axis varying fastest
(contiguous ranks), as Megatron's order strings do. The default ``"tp-cp-pp-dp"`` is Llama 3's
[TP, CP, PP, DP] (its Figure 5), which the lab page's grid follows; Megatron-LM's default is
``"tp-cp-ep-dp-pp"``. Expert parallelism does not add an axis: EP groups are carved out of the ranks that
share a TP and PP coordinate (the DP × CP ranks), taken in mesh order and cut into consecutive runs of
``ep`` (Megatron folds experts inside the data-parallel ranks the same way), so EP never multiplies the GPU
count. With an expert tensor-parallel size ``etp`` smaller than tp (Megatron-Core's MoE parallel folding,
``--expert-tensor-parallel-size``), the expert layers regroup all TP × CP × DP ranks of a pipeline stage as
etp × ep × expert-dp, with etp innermost: list the stage's ranks with the TP coordinate fastest, cut them
into blocks of etp·ep, and an EP group takes every etp-th rank of a block. etp = tp gives the rule above.

rank = Σ coord[axis] × stride[axis], stride[first axis] = 1, stride[next] = stride × size[previous].

A group "stays inside a node" when all its ranks share ``rank // gpus_per_node``; then it uses NVLink,
otherwise InfiniBand.

    >>> m = Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 2}, "tp-cp-pp-dp", gpus_per_node=8)
    >>> m.group(0, "tp"), m.group(0, "pp"), m.group(0, "dp")
    ((0, 1), (0, 2, 4, 6), (0, 8))
    >>> m.link("tp"), m.link("dp")
    ('nvlink', 'infiniband')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Mapping

AXES = ("tp", "cp", "pp", "dp")
DEFAULT_ORDER = "tp-cp-pp-dp"
MEGATRON_ORDER = "tp-cp-ep-dp-pp"
NVLINK, INFINIBAND = "nvlink", "infiniband"


def parse_order(order: str) -> tuple[str, ...]:
    """``"tp-cp-ep-dp-pp"`` → ``("tp", "cp", "dp", "pp")`` (``ep`` is folded, not an axis).

    Raises ValueError unless the order names tp, cp, pp and dp once each (ep optional).
    """
    if not isinstance(order, str):
        raise ValueError(f"order={order!r} must be a string like 'tp-cp-pp-dp'")
    parts = [p.strip().lower() for p in order.split("-")]
    axes = tuple(p for p in parts if p != "ep")
    if sorted(axes) != sorted(AXES) or parts.count("ep") > 1:
        raise ValueError(f"order={order!r} must name tp, cp, pp and dp once each (ep optional), e.g. 'tp-cp-pp-dp'")
    return axes


@dataclass(frozen=True)
class Mesh:
    """A 4-axis device mesh. ``sizes`` maps tp, cp, pp, dp to their sizes; ``ep`` folds inside dp × cp."""

    sizes: Mapping[str, int]
    order: str = DEFAULT_ORDER
    gpus_per_node: int = 8
    ep: int = 1
    etp: int | None = None  # expert tensor-parallel size; None means tp
    axes: tuple[str, ...] = field(init=False)
    strides: Mapping[str, int] = field(init=False)

    def __post_init__(self):
        axes = parse_order(self.order)
        for a in AXES:
            v = self.sizes.get(a)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{a}={v!r} must be a positive integer")
        for name, v in (("gpus_per_node", self.gpus_per_node), ("ep", self.ep)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive integer")
        etp = self.sizes["tp"] if self.etp is None else self.etp
        if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
            raise ValueError(f"expert_tp={etp!r} must be a positive integer")
        if self.sizes["tp"] % etp:
            raise ValueError(f"expert_tp={etp} does not divide tp={self.sizes['tp']}")
        dc = self.sizes["dp"] * self.sizes["cp"]
        if etp == self.sizes["tp"]:
            if dc % self.ep:
                raise ValueError(f"ep={self.ep} does not divide dp×cp = {self.sizes['dp']}×{self.sizes['cp']} = {dc}")
        elif (self.sizes["tp"] * dc) % (etp * self.ep):
            raise ValueError(f"ep×expert_tp = {self.ep}×{etp} = {self.ep * etp} does not divide tp×cp×dp = "
                             f"{self.sizes['tp']}×{self.sizes['cp']}×{self.sizes['dp']} = {self.sizes['tp'] * dc}")
        object.__setattr__(self, "etp", etp)
        strides, s = {}, 1
        for a in axes:
            strides[a] = s
            s *= self.sizes[a]
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "strides", strides)

    @property
    def world_size(self) -> int:
        return prod(self.sizes[a] for a in AXES)

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` on each axis."""
        self._check_rank(rank)
        return {a: (rank // self.strides[a]) % self.sizes[a] for a in AXES}

    def rank(self, **coords: int) -> int:
        """The rank at the given coordinates (missing axes are 0)."""
        return sum(coords.get(a, 0) * self.strides[a] for a in AXES)

    def _check_rank(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"rank={rank!r} is not in 0..{self.world_size - 1}")

    def group(self, rank: int, axis: str) -> tuple[int, ...]:
        """The ranks that differ from ``rank`` only along ``axis`` (``ep``: its expert-parallel group)."""
        if axis == "ep":
            return self._ep_group(rank)
        if axis not in AXES:
            raise ValueError(f"axis={axis!r} must be one of tp, cp, pp, dp, ep")
        c = self.coords(rank)
        base = rank - c[axis] * self.strides[axis]
        return tuple(base + i * self.strides[axis] for i in range(self.sizes[axis]))

    def _dp_cp_members(self, tp: int, pp: int) -> list[int]:
        """The dp × cp ranks at (tp, pp), in mesh (inner-to-outer) order."""
        inner, outer = sorted(("cp", "dp"), key=self.axes.index)
        return [self.rank(tp=tp, pp=pp, **{inner: i, outer: o})
                for o in range(self.sizes[outer]) for i in range(self.sizes[inner])]

    def _ep_group(self, rank: int) -> tuple[int, ...]:
        c = self.coords(rank)
        if self.etp == self.sizes["tp"]:
            members = self._dp_cp_members(c["tp"], c["pp"])
            k = members.index(rank) // self.ep
            return tuple(members[k * self.ep:(k + 1) * self.ep])
        members = self._stage_members(c["pp"])
        i = members.index(rank)
        block, offset = i // (self.etp * self.ep) * self.etp * self.ep, i % self.etp
        return tuple(members[block + offset + j * self.etp] for j in range(self.ep))

    def _stage_members(self, pp: int) -> list[int]:
        """The tp × cp × dp ranks of pipeline stage ``pp``, TP coordinate fastest, then cp and dp in mesh order."""
        inner, outer = sorted(("cp", "dp"), key=self.axes.index)
        return [self.rank(tp=t, pp=pp, **{inner: i, outer: o})
                for o in range(self.sizes[outer]) for i in range(self.sizes[inner]) for t in range(self.sizes["tp"])]

    def _ep_groups(self) -> list[tuple[int, ...]]:
        out = []
        if self.etp != self.sizes["tp"]:
            span = self.etp * self.ep
            for pp in range(self.sizes["pp"]):
                members = self._stage_members(pp)
                out += [tuple(members[b + o + j * self.etp] for j in range(self.ep))
                        for b in range(0, len(members), span) for o in range(self.etp)]
            return sorted(out)
        for tp in range(self.sizes["tp"]):
            for pp in range(self.sizes["pp"]):
                members = self._dp_cp_members(tp, pp)
                out += [tuple(members[k:k + self.ep]) for k in range(0, len(members), self.ep)]
        return sorted(out)

    def _run_stride(self, axis: str) -> int | None:
        """The stride between consecutive members if every group along ``axis`` is an arithmetic run
        aligned to blocks of stride × size (always for tp, cp, pp, dp; for ep when its groups lie along one
        of dp and cp), else None."""
        if axis != "ep":
            return self.strides[axis]
        if self.etp != self.sizes["tp"]:
            return None
        inner, outer = sorted(("cp", "dp"), key=self.axes.index)
        if self.sizes[inner] == 1:
            inner = outer
        elif self.sizes[inner] % self.ep:
            return None
        return self.strides[inner]

    def groups(self, axis: str) -> list[tuple[int, ...]]:
        """Every group along ``axis`` (each rank in exactly one), sorted by first rank."""
        if axis == "ep":
            return self._ep_groups()
        seen, out = set(), []
        for r in range(self.world_size):
            if r not in seen:
                g = self.group(r, axis)
                seen.update(g)
                out.append(g)
        return out

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def size(self, axis: str) -> int:
        return self.ep if axis == "ep" else self.sizes[axis]

    def link(self, axis: str) -> str | None:
        """``"nvlink"`` if every group along ``axis`` stays inside one node, ``"infiniband"`` if any crosses,
        ``None`` if the axis has size 1."""
        n = self.size(axis)
        if n == 1:
            return None
        g = self.gpus_per_node
        stride = self._run_stride(axis)
        if stride is not None:
            # every group is a run of n ranks `stride` apart inside an aligned block of stride * n ranks
            if g % (stride * n) == 0:
                return NVLINK
            if stride >= g and stride % g == 0:
                return INFINIBAND  # consecutive members always sit on different nodes
            if (n - 1) * stride >= g:
                return INFINIBAND  # first and last member are at least a node apart
        for grp in self.groups(axis):
            if self.node(grp[0]) != self.node(grp[-1]) or len({self.node(r) for r in grp}) > 1:
                return INFINIBAND
        return NVLINK
