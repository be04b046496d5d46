"""The shape of a parallel plan: how many ways each dimension splits, and the axis order of the device mesh.

One validated object, in the spirit of torchtitan's ``ParallelDims`` and Megatron's rank generator: the sizes
(TP, CP, PP, DP; EP and the expert tensor-parallel size folded inside them) and the order of the mesh axes.
Every other part of the library that needs a mesh shape (``Plan``, ``Mesh``, the device grid, the search) takes
or builds a ``ParallelDims``, so a shape is checked in one place only.

Conventions:

* the world is TP × CP × PP × DP GPUs; expert parallelism is **not** a factor of it. Per pipeline stage the
  attention layers use the TP × CP × DP ranks, and the expert layers regroup the same ranks as
  expert-TP × EP × expert-DP (Megatron-Core's "MoE parallel folding"). With expert-TP = TP (the default) EP
  folds inside DP × CP, so EP must divide DP × CP; with a smaller expert-TP, EP × expert-TP must divide
  TP × CP × DP.
* the order names the axes from inner to outer, the first varying fastest (contiguous ranks), as Megatron's
  order strings do: ``"tp-cp-pp-dp"`` is Llama 3's [TP, CP, PP, DP] (its Figure 5) and the course's default;
  Megatron-LM's default is ``"tp-cp-ep-dp-pp"`` (``ep`` may appear in the string and is ignored: it is folded).
* sizes are bounded by ``MAX_GPUS`` so that every answer stays exact and fast; beyond it the library says so.

    >>> d = ParallelDims(tp=8, pp=16, dp=128)
    >>> d.world_size, d.order, d.etp
    (16384, 'tp-cp-pp-dp', 8)
    >>> ParallelDims.from_gpus(64, tp=8, pp=2).dp
    4
    >>> ParallelDims(tp=2, pp=16, dp=32, ep=64, expert_tp=1).expert_dp
    1
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meshplan.core.validation import MeshplanError, PlanError, check_count, is_count

AXES = ("tp", "cp", "pp", "dp")
DEFAULT_ORDER = "tp-cp-pp-dp"
MEGATRON_ORDER = "tp-cp-ep-dp-pp"
MAX_GPUS = 2**20  # 1,048,576 GPUs: larger than any cluster built; keeps every mesh computation fast


def parse_order(order: str) -> tuple[str, ...]:
    """``"tp-cp-ep-dp-pp"`` → ``("tp", "cp", "dp", "pp")`` (``ep`` is folded, not an axis).

    Raises PlanError unless the order names tp, cp, pp and dp once each (ep optional).
    """
    if not isinstance(order, str):
        raise PlanError(f"order={order!r} must be a string like 'tp-cp-pp-dp'", "order")
    parts = [p.strip().lower() for p in order.split("-")]
    axes = tuple(p for p in parts if p != "ep")
    if sorted(axes) != sorted(AXES) or parts.count("ep") > 1:
        raise PlanError(
            f"order={order!r} must name tp, cp, pp and dp once each (ep optional), e.g. 'tp-cp-pp-dp'", "order"
        )
    return axes


@dataclass(frozen=True)
class ParallelDims:
    """Sizes of the parallel dimensions and the mesh's axis order, validated on construction.

    Attributes:
        tp, cp, pp, dp: tensor, context, pipeline and data parallel sizes (the world is their product).
        ep: expert-parallel size, folded inside the other dimensions (see the module docstring).
        expert_tp: expert tensor-parallel size (Megatron's ``--expert-tensor-parallel-size``); ``None`` means tp.
        order: mesh axes from inner to outer.
        axes: ``order`` parsed (without ``ep``), once, on construction.

    Every rule raises ``PlanError`` naming its factor.
    """

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    expert_tp: int | None = None
    order: str = DEFAULT_ORDER
    axes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "ep"):
            check_count(name, getattr(self, name), MAX_GPUS, PlanError)
        world = self.tp * self.cp * self.pp * self.dp
        if world > MAX_GPUS:
            raise PlanError(
                f"tp×cp×pp×dp = {self.tp}×{self.cp}×{self.pp}×{self.dp} = {world:,} GPUs is more than "
                f"the {MAX_GPUS:,} this library plans for",
                "gpus",
            )
        object.__setattr__(self, "axes", parse_order(self.order))
        if self.expert_tp is not None:
            check_count("expert_tp", self.expert_tp, error=PlanError)
            if self.tp % self.expert_tp:
                raise PlanError(f"expert_tp={self.expert_tp} does not divide tp={self.tp}", "expert_tp")
        dc = self.dp * self.cp
        if self.etp == self.tp:
            if dc % self.ep:
                raise PlanError(f"ep={self.ep} does not divide dp×cp = {self.dp}×{self.cp} = {dc}", "ep")
        elif (self.tp * dc) % (self.ep * self.etp):
            raise PlanError(
                f"ep×expert_tp = {self.ep}×{self.etp} = {self.ep * self.etp} does not divide "
                f"tp×cp×dp = {self.tp}×{self.cp}×{self.dp} = {self.tp * dc}",
                "ep",
            )

    @classmethod
    def from_gpus(
        cls,
        gpus: int,
        tp: int = 1,
        cp: int = 1,
        pp: int = 1,
        dp: int | None = None,
        ep: int = 1,
        expert_tp: int | None = None,
        order: str = DEFAULT_ORDER,
    ) -> ParallelDims:
        """The dims of ``gpus`` GPUs; ``dp`` defaults to gpus ÷ (tp × cp × pp). PlanError if they do not multiply
        to ``gpus``.

        Each size is checked once, by the constructor: deriving dp only tests that tp, cp and pp are counts
        (``is_count``); when one is not, the constructor names it."""
        check_count("gpus", gpus, MAX_GPUS, PlanError)
        if dp is None:
            dp = 1  # a stand-in: the constructor below names the bad size
            if all(is_count(x, MAX_GPUS) for x in (tp, cp, pp)):
                inner = tp * cp * pp
                if gpus % inner:
                    raise PlanError(f"tp×cp×pp = {tp}×{cp}×{pp} = {inner} does not divide gpus={gpus}", "gpus")
                dp = gpus // inner
        dims = cls(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, expert_tp=expert_tp, order=order)
        if dims.world_size != gpus:
            raise PlanError(f"gpus={gpus} is not tp×cp×pp×dp = {tp}×{cp}×{pp}×{dp} = {dims.world_size}", "gpus")
        return dims

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def sizes(self) -> dict[str, int]:
        return {a: getattr(self, a) for a in AXES}

    @property
    def etp(self) -> int:
        """The expert tensor-parallel size (tp unless ``expert_tp`` says otherwise)."""
        return self.tp if self.expert_tp is None else self.expert_tp

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same expert shard (they sync its gradients): tp·cp·dp ÷ (expert_tp·ep)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def shard_group(self) -> int:
        """Ranks ZeRO shards the dense model states over: the data-parallel ranks, which include the CP ranks
        (Megatron's dp-cp group; torchtitan's dp_shard × cp)."""
        return self.dp * self.cp

    def size(self, dim: str) -> int:
        """Size of a dimension: tp, cp, pp, dp, ep or edp (the expert-data-parallel group)."""
        if dim == "edp":
            return self.expert_dp
        if dim == "ep":
            return self.ep
        if dim not in AXES:
            raise MeshplanError(f"dim={dim!r} must be one of tp, cp, pp, dp, ep, edp", "dim")
        return getattr(self, dim)

    def label(self) -> str:
        """'TP 8 × PP 16 × DP 128' (sizes > 1 in the order tp, cp, pp, dp), '1 GPU' when all are 1; EP and expert TP
        in parentheses.

            >>> ParallelDims(pp=16, dp=128, ep=64).label()
            'PP 16 × DP 128 (EP 64)'
        """
        dims = " × ".join(f"{a.upper()} {getattr(self, a)}" for a in AXES if getattr(self, a) > 1) or "1 GPU"
        if self.ep > 1:
            dims += f" (EP {self.ep}" + (f", expert TP {self.etp})" if self.etp != self.tp else ")")
        return dims
