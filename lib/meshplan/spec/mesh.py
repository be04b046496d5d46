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

from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from functools import cached_property
from math import gcd
from typing import Any

from meshplan.core.units import add_up
from meshplan.core.validation import PlanError, check_count
from meshplan.spec.dims import AXES, DEFAULT_ORDER, MEGATRON_ORDER, ParallelDims, parse_order

__all__ = [
    "AXES",
    "DEFAULT_ORDER",
    "INFINIBAND",
    "MEGATRON_ORDER",
    "NVLINK",
    "Mesh",
    "check_nodes",
    "parse_order",
    "partial_node",
]

NVLINK, INFINIBAND = "nvlink", "infiniband"
GROUP_AXES = (*AXES, "ep", "edp")


def check_nodes(gpus: int, gpus_per_node: int, partial: bool = False) -> None:
    """PlanError unless the GPUs fill whole nodes (or fit in one): gpus_per_node must divide gpus beyond one node.
    ``partial=True`` allows a last node (NVLink domain) that is only partly filled, as a job on GB200 NVL72 racks
    has when 72 does not divide its GPUs (``partial_node``): the mesh then lays the ranks out in order, the last
    domain holding the rest, and a group crossing into it uses InfiniBand.

    >>> check_nodes(12, 8)
    Traceback (most recent call last):
    ...
    meshplan.core.validation.PlanError: gpus_per_node=8 does not divide gpus=12
    >>> check_nodes(100, 72, partial=True), partial_node(100, 72)
    (None, 28)
    """
    check_count("gpus_per_node", gpus_per_node, error=PlanError)
    if gpus > gpus_per_node and gpus % gpus_per_node and not partial:
        raise PlanError(f"gpus_per_node={gpus_per_node} does not divide gpus={gpus}", "gpus_per_node")


def partial_node(gpus: int, gpus_per_node: int) -> int:
    """How many GPUs the last, partly filled node (NVLink domain) holds; 0 when the GPUs fill whole nodes or fit in
    one."""
    return gpus % gpus_per_node if gpus > gpus_per_node else 0


def launch_hosts(gpus: int, gpus_per_host: int, gpus_per_node: int | None = None) -> tuple[int, int]:
    """(hosts, processes per host) of a launch of ``gpus`` processes on hosts of ``gpus_per_host`` GPUs: ``torchrun
    --nnodes --nproc_per_node``, DeepSpeed's hostfile slots. A host is what one operating system and one launcher
    agent drive (``Hardware.host_gpus``): the whole NVLink domain of an HGX/DGX node, 4 of a GB200 NVL72 rack's 72,
    so a job may fill part of a rack as long as it fills whole hosts. ValueError naming ``gpus_per_host`` when it does
    not: the launchers start the same number of processes on every host, a layout only the scheduler knows.

        >>> launch_hosts(144, 4, 72), launch_hosts(100, 4, 72), launch_hosts(4, 8)
        ((36, 4), (25, 4), (1, 4))
        >>> launch_hosts(102, 4, 72)
        Traceback (most recent call last):
        ...
        ValueError: gpus=102 fill 25 host(s) of 4 and 2 GPUs of another: the engines' launchers start the same number \
of processes on every host, so export a plan on whole hosts (set --gpus-per-host to the GPUs one host drives, or \
launch this one with your scheduler's host list)
    """
    rest = partial_node(gpus, gpus_per_host)
    if rest:
        what = "node(s)" if gpus_per_node in (None, gpus_per_host) else "host(s)"
        raise ValueError(
            f"gpus={gpus} fill {gpus // gpus_per_host} {what} of {gpus_per_host} and {rest} GPUs of another: the "
            "engines' launchers start the same number of processes on every host, so export a plan on whole hosts "
            "(set --gpus-per-host to the GPUs one host drives, or launch this one with your scheduler's host list)"
        )
    return max(1, gpus // gpus_per_host), min(gpus, gpus_per_host)


@dataclass(frozen=True)
class Mesh:
    """A 4-axis device mesh: the ``ParallelDims`` of ``sizes`` (tp, cp, pp, dp), ``order``, ``ep`` and ``etp``
    (validated there, once), laid out on nodes of ``gpus_per_node`` GPUs. A last, partly filled node is allowed
    here (the plan demands whole nodes: ``check_nodes``)."""

    sizes: Mapping[str, int]
    order: str = DEFAULT_ORDER
    gpus_per_node: int = 8
    ep: int = 1
    etp: int | None = None  # expert tensor-parallel size; None means tp
    dims: ParallelDims = field(init=False, repr=False, compare=False)
    axes: tuple[str, ...] = field(init=False, repr=False)
    strides: Mapping[str, int] = field(init=False, repr=False)
    # ``from_dims``: a ParallelDims already validated, which the mesh takes as it is (sizes, order, ep, etp)
    validated: InitVar[ParallelDims | None] = field(default=None, kw_only=True)

    def __post_init__(self, validated: ParallelDims | None) -> None:
        if validated is not None:
            dims = validated
        elif not isinstance(self.sizes, Mapping):
            raise PlanError(f"sizes={self.sizes!r} must map tp, cp, pp and dp to their sizes", "sizes")
        else:  # ParallelDims checks each size (a missing one is None: "tp=None must be a positive integer")
            given: dict[str, Any] = {a: self.sizes.get(a) for a in AXES}
            dims = ParallelDims(**given, ep=self.ep, expert_tp=self.etp, order=self.order)
        check_count("gpus_per_node", self.gpus_per_node, error=PlanError)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "sizes", dims.sizes)
        object.__setattr__(self, "order", dims.order)
        object.__setattr__(self, "ep", dims.ep)
        object.__setattr__(self, "etp", dims.etp)
        strides, s = {}, 1
        for a in dims.axes:
            strides[a] = s
            s *= self.sizes[a]
        object.__setattr__(self, "axes", dims.axes)
        object.__setattr__(self, "strides", strides)

    @classmethod
    def from_dims(cls, dims: ParallelDims, gpus_per_node: int = 8) -> Mesh:
        """The mesh of a validated ``ParallelDims`` on nodes of ``gpus_per_node`` GPUs: the mesh takes ``dims`` as
        it is (no second ParallelDims, no second check of its sizes or parse of its order)."""
        return cls(dims.sizes, dims.order, gpus_per_node, dims.ep, dims.expert_tp, validated=dims)

    @property
    def world_size(self) -> int:
        return self.dims.world_size

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` on each axis."""
        self._check_rank(rank)
        return {a: (rank // self.strides[a]) % self.sizes[a] for a in AXES}

    def rank(self, **coords: int) -> int:
        """The rank at the given coordinates (missing axes are 0); ValueError for an unknown axis or a coordinate
        outside its axis."""
        for a, c in coords.items():
            if a not in AXES:
                raise ValueError(f"axis={a!r} must be one of {', '.join(AXES)}")
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.sizes[a]:
                raise ValueError(
                    f"{a}={c!r} is not a coordinate of an axis of size {self.sizes[a]} (0..{self.sizes[a] - 1})"
                )
        return add_up(coords.get(a, 0) * self.strides[a] for a in AXES)

    def _check_rank(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"rank={rank!r} is not in 0..{self.world_size - 1}")

    @staticmethod
    def _check_axis(axis: str) -> None:
        if axis not in GROUP_AXES:
            raise ValueError(f"axis={axis!r} must be one of {', '.join(GROUP_AXES)}")

    def group(self, rank: int, axis: str) -> tuple[int, ...]:
        """The ranks that differ from ``rank`` only along ``axis``; ``ep``: its expert-parallel group; ``edp``: the
        ranks that hold the same expert shard (its expert-data-parallel group)."""
        self._check_axis(axis)
        if axis in ("ep", "edp"):
            return self._expert_group(rank, axis)
        c = self.coords(rank)
        base = rank - c[axis] * self.strides[axis]
        return tuple(base + i * self.strides[axis] for i in range(self.sizes[axis]))

    # ---- expert groups: EP is folded inside the stage's ranks, never an axis of its own
    @cached_property
    def _expert_arrays(self) -> dict[str, Any]:
        return {}

    def forget_groups(self) -> None:
        """Drop the expert groups worked out so far (a world-sized array per axis); the links stay."""
        self._expert_arrays.clear()

    def _expert_array(self, axis: str) -> Any:
        """``_build_expert_array(axis)``, built once per mesh and axis (its first group reads it; the mesh is frozen,
        and no caller writes to the rows)."""
        got = self._expert_arrays.get(axis)
        if got is None:
            got = self._expert_arrays[axis] = self._build_expert_array(axis)
        return got

    def _expert_base(self, axis: str) -> Any:
        """``_build_expert_base(axis)``, built once per mesh and axis (the link and the arithmetic check read it)."""
        key = "base:" + axis
        got = self._expert_arrays.get(key)
        if got is None:
            got = self._expert_arrays[key] = self._build_expert_base(axis)
        return got

    def _build_expert_base(self, axis: str) -> Any:
        """The EP (or expert-DP) groups of the first list as the rows of an integer array, and every list's shift
        from the first (numpy; O(world size ÷ lists)), or None without numpy.

        The expert layers list each stage's ranks in order: with expert-TP = TP, the dp × cp ranks at one TP
        coordinate (inner axis fastest), one list per (TP coordinate, stage); otherwise all tp × cp × dp ranks, TP
        fastest, one list per stage. Every list is the first one shifted by its TP and stage offsets, so its groups
        are the first list's groups shifted too. Each list is cut into blocks of expert-TP × EP positions; in a
        block, an EP group takes every expert-TP-th position (one expert shard each), and an expert-DP group takes
        the same position of every block (the ranks holding one shard)."""
        try:
            import numpy as np
        except ImportError:
            return None

        sz, st = self.sizes, self.strides
        inner, outer = sorted(("cp", "dp"), key=self.axes.index)
        o = np.arange(sz[outer], dtype=np.int64)[:, None] * st[outer]
        i = np.arange(sz[inner], dtype=np.int64)[None, :] * st[inner]
        pp = np.arange(sz["pp"], dtype=np.int64) * st["pp"]
        tp = np.arange(sz["tp"], dtype=np.int64) * st["tp"]
        if self.dims.etp == sz["tp"]:
            k = 1
            first = (o + i).reshape(-1)
            shifts = (tp[:, None] + pp[None, :]).reshape(-1)  # list index t · pp + p
        else:
            k = self.dims.etp
            first = (o[:, :, None] + i[:, :, None] + tp[None, None, :]).reshape(-1)  # TP fastest
            shifts = pp
        span = k * self.ep
        blocks = first.reshape(-1, self.ep, k)  # (block, j, offset)
        if axis == "ep":
            rows = blocks.transpose(0, 2, 1).reshape(-1, self.ep)  # fixed (block, offset), j varies
        else:
            rows = blocks.reshape(-1, span).T  # fixed position in the block, the block varies
        return rows, shifts

    def _build_expert_array(self, axis: str) -> Any:
        """Every EP (or expert-DP) group as the rows of an integer array (numpy, O(world size)): the first list's
        groups (``_build_expert_base``) shifted by each list's offset, list by list.

        Without numpy (the live planner runs the library in the browser, where it is not installed) the same rows
        come from ``_expert_rows``, in pure Python (``tests/test_planner_pure.py`` holds them equal)."""
        got = self._expert_base(axis)
        if got is None:
            return self._expert_rows(axis)
        rows, shifts = got
        return (shifts[:, None, None] + rows[None, :, :]).reshape(-1, rows.shape[1])

    def _expert_rows(self, axis: str) -> list[list[int]]:
        """``_expert_array``'s rows as lists, in pure Python: the same construction, 2-3 times slower on a large
        mesh (DeepSeek-V3's search on 16,384 GPUs: 14.6 against 6.3 CPU-s), so used only where numpy is missing."""
        sz, st = self.sizes, self.strides
        inner, outer = sorted(("cp", "dp"), key=self.axes.index)
        oi = [o * st[outer] + i * st[inner] for o in range(sz[outer]) for i in range(sz[inner])]
        pp = [p * st["pp"] for p in range(sz["pp"])]
        tp = [t * st["tp"] for t in range(sz["tp"])]
        if self.dims.etp == sz["tp"]:
            k = 1
            lists = [[x + t + p for x in oi] for t in tp for p in pp]
        else:
            k = self.dims.etp
            members = [x + t for x in oi for t in tp]  # TP fastest
            lists = [[p + x for x in members] for p in pp]
        ep, span = self.ep, k * self.ep
        blocks = len(lists[0]) // span
        if axis == "ep":  # fixed (list, block, offset), the EP position varies
            return [
                [lst[b * span + j * k + off] for j in range(ep)]
                for lst in lists
                for b in range(blocks)
                for off in range(k)
            ]
        return [[lst[b * span + q] for b in range(blocks)] for lst in lists for q in range(span)]

    def _expert_row(self, rank: int, axis: str) -> Any:
        """The row of ``_expert_array`` that holds ``rank`` (a numpy array, or a list without numpy)."""
        self._check_rank(rank)
        rows = self._expert_array(axis)
        if isinstance(rows, list):  # no numpy: _expert_rows
            return next(row for row in rows if rank in row)
        where = (rows == rank).any(axis=1).nonzero()[0]
        return rows[where[0]]

    def _expert_group(self, rank: int, axis: str) -> tuple[int, ...]:
        return tuple(int(x) for x in self._expert_row(rank, axis))

    def _expert_groups(self, axis: str) -> list[tuple[int, ...]]:
        return sorted(tuple(int(x) for x in row) for row in self._expert_array(axis))

    def groups(self, axis: str) -> list[tuple[int, ...]]:
        """Every group along ``axis`` (each rank in exactly one), sorted by first rank."""
        self._check_axis(axis)
        if axis in ("ep", "edp"):
            return self._expert_groups(axis)
        seen: set[int] = set()
        out = []
        for r in range(self.world_size):
            if r not in seen:
                g = self.group(r, axis)
                seen.update(g)
                out.append(g)
        return out

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def size(self, axis: str) -> int:
        self._check_axis(axis)
        return self.dims.size(axis)

    def _run_stride(self, axis: str) -> int | None:
        """The stride between consecutive members if every group along ``axis`` is an arithmetic run aligned to
        blocks of stride × size (always for tp, cp, pp, dp; for ep and edp when their groups lie along one of dp
        and cp), else None."""
        if axis in AXES:
            return self.strides[axis]
        if self.etp != self.sizes["tp"]:
            return None
        inner, outer = sorted(("cp", "dp"), key=self.axes.index)
        ni = self.sizes[inner]
        if axis == "ep":
            if ni == 1:
                return self.strides[outer]
            return self.strides[inner] if ni % self.ep == 0 else None
        # edp: members ep apart in the dp × cp list
        if ni == 1:
            return self.strides[outer] * self.ep
        if self.ep == 1:
            return self.strides[inner] if self.sizes[outer] == 1 else None
        return self.strides[outer] * (self.ep // ni) if self.ep % ni == 0 else None

    def link(self, axis: str) -> str | None:
        """``"nvlink"`` if every group along ``axis`` stays inside one node, ``"infiniband"`` if any crosses,
        ``None`` if the axis has size 1.

        Closed form for groups that are arithmetic runs (every axis; EP and expert-DP groups when they lie along
        one axis): a group r0, r0 + S, ..., r0 + (n−1)S crosses a node boundary iff (r0 mod g) + (n−1)S ≥ g, and
        the residues r0 mod g of the groups' first ranks take at most g values (g = GPUs per node), so the work
        is bounded by g, not by the world size. Other expert groups are enumerated."""
        self._check_axis(axis)
        links = self._links
        if axis not in links:  # worked out on first use, axis by axis: the mesh is frozen
            links[axis] = self._link(axis)
        return links[axis]

    @cached_property
    def _links(self) -> dict[str, str | None]:
        return {}

    def _link(self, axis: str) -> str | None:
        n = self.size(axis)
        if n == 1:
            return None
        g = self.gpus_per_node
        stride = self._run_stride(axis)
        if stride is not None and self._arithmetic(axis, stride):
            return INFINIBAND if self._max_first_residue(axis, stride) + (n - 1) * stride >= g else NVLINK
        got = self._expert_base(axis)
        if got is None:  # no numpy: _expert_rows
            rows = self._expert_rows(axis)
            return INFINIBAND if any(row[0] // g != x // g for row in rows for x in row) else NVLINK
        return INFINIBAND if self._shifted_rows_cross(*got) else NVLINK

    def _shifted_rows_cross(self, rows: Any, shifts: Any) -> bool:
        """True if any row of ``rows`` shifted by any of ``shifts`` holds ranks of two nodes.

        A shift x = q·g + r moves every rank's node by q plus 0 or 1, by r: so only the residues r = x mod g matter,
        and a residue with max(b mod g over the rows) + r < g moves no rank across a boundary, so its rows cross
        exactly where the unshifted rows do. The others are checked shifted, one residue at a time; TP's offsets
        inside a node, and stages whole nodes apart, take none."""
        import numpy as np  # _build_expert_base found it

        g = self.gpus_per_node
        nodes = rows // g
        if bool((nodes.min(axis=1) != nodes.max(axis=1)).any()):
            return True
        top = int((rows % g).max())
        for r in np.unique(shifts % g).tolist():
            if top + r < g:
                continue
            moved = (rows + r) // g
            if bool((moved.min(axis=1) != moved.max(axis=1)).any()):
                return True
        return False

    def _arithmetic(self, axis: str, stride: int) -> bool:
        """True when the groups along ``axis`` are runs n members ``stride`` apart, each starting at a rank whose
        coordinate along the run is 0 (checked on the first group; the layout is the same for every group)."""
        if axis in AXES:
            return True
        got = self._expert_base(axis)
        if got is None:  # no numpy
            g0 = self._expert_row(0, axis)
            return g0 == [g0[0] + i * stride for i in range(len(g0))]
        import numpy as np  # _build_expert_base found it

        rows = got[0]
        g0 = rows[(rows == 0).any(axis=1).nonzero()[0][0]]  # rank 0 is in the first list

        return bool((g0 == g0[0] + stride * np.arange(len(g0), dtype=np.int64)).all())

    def _max_first_residue(self, axis: str, stride: int) -> int:
        """max over the groups along ``axis`` of (first rank mod g): the first ranks are q·(S·n) + j for j < S and
        q < W/(S·n), and q·S·n mod g repeats every g / gcd(S·n, g) values of q."""
        g, n = self.gpus_per_node, self.size(axis)
        block = stride * n
        blocks = self.world_size // block
        best = 0
        for q in range(min(blocks, g // gcd(block, g))):
            a = (q * block) % g
            best = max(best, a + stride - 1 if a + stride - 1 < g else g - 1)
            if best == g - 1:
                break
        return best
