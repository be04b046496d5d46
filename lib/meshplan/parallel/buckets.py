"""DDP gradient bucketing and its overlap with the backward pass.

PyTorch DDP (Li et al. 2020, arXiv:2006.15704; ``torch/nn/parallel/distributed.py``) does not wait for
the whole backward pass: it groups the gradients into buckets and starts a bucket's all-reduce as soon as
every gradient in it is ready, while the backward pass carries on with earlier layers.

**Bucket assignment** (``compute_bucket_assignment_by_size`` in PyTorch's reducer): walk the parameters
in *reversed* registration order (roughly the order backward produces their gradients), add each tensor's
gradient bytes (elements × the gradient dtype's size: 2 B for bf16, 4 B for fp32) to the open bucket, and
close the bucket once it holds at least its cap. With the default ``bucket_cap_mb=None`` the first bucket's
cap is 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``, so that communication starts early) and every later one
25 MiB (26,214,400 B; ``data/published.json`` key ``ddp_bucket_cap_bytes``); an explicit ``bucket_cap_mb``
(even 25) applies to every bucket, the first included (``first_cap_bytes=cap_bytes`` here). A tensor bigger
than the cap gets a bucket to itself (with whatever small tensors were already open). PyTorch (with the
default ``find_unused_parameters=False``) runs the first iteration with all gradients in one bucket and rebuilds
the buckets with this rule, in the order the gradients actually became ready, before the second; this module
models those rebuilt buckets (from the second iteration on), taking reversed registration order as the ready
order.

**Timeline** (this module's model, not PyTorch's): the backward pass visits the tensors in that order and
spends on each 4 FLOP × its parameters × tokens ÷ the effective FLOP/s (``meshplan.parallel.compute``); tensors
that no text token's matmul touches (input embedding, vision tower, MTP module: outside
``ModelSpec.flop_params``) take no time. A bucket is ready when its last tensor is done; its ring
all-reduce (``collectives.ring_all_reduce_bytes``) starts when it is ready *and* the previous bucket's
all-reduce has finished (one serial link), and takes bytes ÷ bandwidth. The **exposed** communication
is what is left after the backward pass ends: max(0, last all-reduce end − backward end).

Assumptions: bf16 gradients (2 B per parameter; ``grad_bytes_per_param=4`` for fp32, Megatron-LM's default);
latency, kernel launch, and the optimizer step ignored; compute and communication do not slow each other down;
the gradients become ready in reversed registration order (the real ready order, which the rebuild uses, can
differ inside a layer). These are the lab page's conventions; ``meshplan.steptime`` prices the same overlap with
fitted rates, link efficiency and NCCL latency.

Tensors: for the llama and qwen3_5 families each decoder layer is modelled as its tensors in Hugging
Face registration order: the token mixer (attention or Gated DeltaNet) as **one block**, the MLP's three
matrices (gate, up, down; h × ffn each) and the two norms. The embedding, the output head and the final
norm are one tensor each; the vision tower and the MTP module one block each. Sizes are exact
(``ModelSpec``), so the buckets add up to every parameter.

    >>> from meshplan import load_model
    >>> tl = ddp_timeline(load_model("qwen3.8-27b"), tokens=4096, dp=8, bytes_per_s=50e9, flop_per_s=400e12)
    >>> round(tl.backward_s, 2), round(tl.comm_s, 2), round(tl.exposed_s, 2)
    (1.05, 1.94, 0.92)
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.core.collectives import ring_all_reduce_bytes, transfer_time_s
from meshplan.core.units import MiB, add_up
from meshplan.parallel.compute import backward_time_s
from meshplan.spec.model import ModelSpec
from meshplan.spec.models.spec import NORM_NAMES

DEFAULT_CAP_BYTES = 25 * MiB  # bucket_cap_mb=None -> 25 MiB, data/published.json ddp_bucket_cap_bytes
FIRST_BUCKET_BYTES = 1 * MiB  # dist._DEFAULT_FIRST_BUCKET_BYTES (only with bucket_cap_mb=None)
GRAD_BYTES_PER_PARAM = 2  # bf16 gradients


@dataclass(frozen=True)
class GradTensor:
    """One parameter tensor (or block of tensors) whose gradient DDP synchronises.

    name: a Hugging Face-style name; block: the layer it belongs to (for plotting); params: elements;
    compute: whether its backward costs 4 FLOP per parameter per token (False outside ``flop_params``).
    """

    name: str
    block: str
    params: int
    compute: bool = True


@dataclass(frozen=True)
class Bucket:
    """A DDP bucket: the tensors it holds (in backward order) and its gradient bytes."""

    index: int
    tensors: tuple[str, ...]
    n_bytes: int


@dataclass(frozen=True)
class BucketTiming:
    """When a bucket's gradients are ready and when its all-reduce runs (seconds from backward start)."""

    bucket: Bucket
    ready_s: float
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    """The backward pass and the bucketed all-reduces of one step on one GPU.

    spans: (block, start_s, end_s) of the backward compute, in backward order.
    """

    buckets: tuple[BucketTiming, ...]
    spans: tuple[tuple[str, float, float], ...]
    backward_s: float
    comm_s: float

    @property
    def end_s(self) -> float:
        """When the last all-reduce (or the backward pass, if later) ends."""
        return max([self.backward_s] + [b.end_s for b in self.buckets])

    @property
    def exposed_s(self) -> float:
        """Communication time not hidden behind the backward pass: max(0, last end − backward end)."""
        return max(0.0, self.end_s - self.backward_s)


def forward_tensors(model: ModelSpec) -> tuple[GradTensor, ...]:
    """The model's tensors in registration (forward) order: vision, embedding, layers (mixer, gate/up/down, norms),
    final norm, head, MTP, read from the per-layer description (``ModelSpec.layers``).

    Raises ValueError for models whose layers are not dense with a gated (three-matrix) MLP (MoE, GPT-2's MLP).
    """
    if model.is_moe or not model.layers or any(L.mlp != "gated" or L.is_moe for L in model.layers):
        raise ValueError(
            f"bucket timeline models dense models with gated MLPs only, not {model.name} (family {model.family})"
        )
    comps, h = model.params.components, model.hidden_size
    out = []
    if comps["vision"]:
        out.append(GradTensor("visual", "vision tower", comps["vision"], compute=False))
    out.append(GradTensor("embed_tokens", "embedding", comps["embedding"], compute=False))
    for i, (lp, layer) in enumerate(zip(model.layer_params, model.layers)):
        blk = f"layer {i}"
        mat = h * layer.intermediate_size + (layer.intermediate_size if layer.mlp_bias else 0)
        down = h * layer.intermediate_size + (h if layer.mlp_bias else 0)
        norm = h * (2 if getattr(layer, "norm_bias", False) else 1)
        mixer = lp - 2 * mat - down - layer.norms_per_layer * norm
        out += [
            GradTensor(f"layers.{i}.mixer", blk, mixer),
            GradTensor(f"layers.{i}.mlp.gate_proj", blk, mat),
            GradTensor(f"layers.{i}.mlp.up_proj", blk, mat),
            GradTensor(f"layers.{i}.mlp.down_proj", blk, down),
        ]
        names = NORM_NAMES.get(getattr(layer, "norm_position", "pre"), NORM_NAMES["pre"])[: layer.norms_per_layer]
        out += [GradTensor(f"layers.{i}.{name}", blk, norm) for name in names]
    final = add_up(n * per for name, n, per in model.params.groups if name == "final_norm")
    out.append(GradTensor("norm", "final norm", final))
    if comps["head"]:
        out.append(GradTensor("lm_head", "output head", comps["head"]))
    mtp = comps["mtp"] + model.params.extra.get("mtp", 0)
    if mtp:
        out.append(GradTensor("mtp", "MTP module", mtp, compute=False))
    assert add_up(t.params for t in out) == model.params.total + model.params.extra.get("mtp", 0), model.name
    return tuple(out)


def backward_tensors(model: ModelSpec) -> tuple[GradTensor, ...]:
    """``forward_tensors`` reversed: the order DDP walks when it assigns buckets."""
    return tuple(reversed(forward_tensors(model)))


def assign_buckets(
    tensors,
    cap_bytes: int = DEFAULT_CAP_BYTES,
    first_cap_bytes: int = FIRST_BUCKET_BYTES,
    grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM,
) -> tuple[Bucket, ...]:
    """Greedy bucket assignment over ``tensors`` (already in backward order), PyTorch's rule.

    Add each tensor to the open bucket; close it once its bytes reach the cap (``first_cap_bytes`` for the
    first bucket, ``cap_bytes`` after). Units: bytes.

        >>> ts = [GradTensor(str(i), "b", p) for i, p in enumerate([300_000, 300_000, 5_000_000, 10, 20])]
        >>> [(b.tensors, b.n_bytes) for b in assign_buckets(ts, cap_bytes=4 * 2**20, first_cap_bytes=2**20)]
        [(('0', '1'), 1200000), (('2',), 10000000), (('3', '4'), 60)]
    """
    for name, cap in (("cap_bytes", cap_bytes), ("first_cap_bytes", first_cap_bytes)):
        if not cap > 0:
            raise ValueError(f"{name}={cap!r} must be positive")
    buckets: list[Bucket] = []
    names: list[str] = []
    size = 0
    for t in tensors:
        names.append(t.name)
        size += t.params * grad_bytes_per_param
        if size >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(Bucket(len(buckets), tuple(names), size))
            names, size = [], 0
    if names:
        buckets.append(Bucket(len(buckets), tuple(names), size))
    return tuple(buckets)


def ddp_timeline(
    model: ModelSpec,
    tokens: float,
    dp: int,
    bytes_per_s: float,
    flop_per_s: float,
    cap_bytes: int = DEFAULT_CAP_BYTES,
    first_cap_bytes: int = FIRST_BUCKET_BYTES,
    grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM,
) -> Timeline:
    """The backward pass of ``tokens`` tokens per GPU with each bucket's ring all-reduce over ``dp`` ranks
    starting when it is ready and the link is free (see the module docstring). Seconds."""
    if not tokens > 0:
        raise ValueError(f"tokens={tokens!r} per GPU must be positive")
    tensors = backward_tensors(model)
    ready: dict[str, float] = {}
    spans: list[tuple[str, float, float]] = []
    clock = 0.0
    for t in tensors:
        dt = backward_time_s(t.params, tokens, flop_per_s) if t.compute else 0.0
        if spans and spans[-1][0] == t.block:
            spans[-1] = (t.block, spans[-1][1], clock + dt)
        else:
            spans.append((t.block, clock, clock + dt))
        clock += dt
        ready[t.name] = clock
    timings, link_free, comm = [], 0.0, 0.0
    for b in assign_buckets(tensors, cap_bytes, first_cap_bytes, grad_bytes_per_param):
        r = ready[b.tensors[-1]]
        dur = transfer_time_s(ring_all_reduce_bytes(dp, b.n_bytes), bytes_per_s)
        start = max(r, link_free)
        link_free = start + dur
        comm += dur
        timings.append(BucketTiming(b, r, start, link_free))
    return Timeline(tuple(timings), tuple(spans), clock, comm)


def exposed_comm_s(
    model: ModelSpec,
    tokens: float,
    dp: int,
    bytes_per_s: float,
    flop_per_s: float,
    cap_bytes: int = DEFAULT_CAP_BYTES,
    first_cap_bytes: int = FIRST_BUCKET_BYTES,
    grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM,
) -> float:
    """Seconds of gradient all-reduce left after the backward pass ends (``Timeline.exposed_s``).

    ``grad_bytes_per_param=4`` reduces fp32 gradients, as Megatron-LM's DDP does by default: twice the bytes, and
    half as many parameters per bucket (the cap counts bytes of the gradient dtype).

        >>> from meshplan import load_model
        >>> m = load_model("qwen3.8-27b")
        >>> [round(exposed_comm_s(m, 8192, 8, 50e9, 400e12, grad_bytes_per_param=b), 2) for b in (2, 4)]
        [0.13, 1.83]
    """
    if grad_bytes_per_param not in (2, 4) or isinstance(grad_bytes_per_param, bool):
        raise ValueError(f"grad_bytes_per_param={grad_bytes_per_param!r} must be 2 (bf16) or 4 (fp32)")
    return ddp_timeline(
        model, tokens, dp, bytes_per_s, flop_per_s, cap_bytes, first_cap_bytes, grad_bytes_per_param
    ).exposed_s
