"""The peak memory of one FSDP2 training step, measured by PyTorch's own tracker: the ground truth of the peak-memory
ledger (``meshplan.parallel.peak``).

What ``measure_peak`` runs, on this CPU machine and on one rank of a fake world (nothing is allocated: every tensor
is a ``FakeTensor``, so a model of real widths costs seconds):

* Process group: ``dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())``
  (``torch.testing._internal.distributed.fake_pg``), created for the measurement and destroyed after it (one group
  per process at a time; re-creating it costs milliseconds, so measurements run one after the other in the same
  process). The mesh is ``init_device_mesh("cpu", (world,))``, or ``(world // tp, tp)`` named ``("dp", "tp")``.
* Model: ``AutoModelForCausalLM.from_config`` of the pinned ``transformers`` (5.23.0) under ``FakeTensorMode``, in
  fp32 (torchtitan keeps fp32 sharded parameters and casts to bf16 for compute through FSDP's mixed precision), with
  ``num_hidden_layers = layers`` (a ``layer_types`` list is cut to its first ``layers`` entries, ``mlp_only_layers``
  to those below ``layers``), dropout 0, ``use_cache`` on but for selective recompute (see ``_config``) and the
  attention implementation ``attention``. The model must have the Llama layout (``model.embed_tokens``,
  ``model.layers``, ``model.norm``, ``lm_head``): every family the library counts but GPT-2.
* Recompute, applied to each decoder layer before FSDP as torchtitan does:

  - ``"full"``: ``checkpoint_wrapper(layer, preserve_rng_state=True, determinism_check="default",
    early_stop=False, debug=False)`` (the non-reentrant checkpoint; torch's default would be ``early_stop=True``):
    torchtitan 0.3.0 (PyPI) ``torchtitan/distributed/activation_checkpoint.py:166-182`` (``FullAC``, with the
    defaults of its config, ``:120-140``).
  - ``"op"``: torchtitan 0.3.0's selective per-op AC, ``activation_checkpoint.py:31-94`` (``_get_default_save_ops``)
    and ``:185-287`` (``SelectiveAC``): a ``checkpoint_wrapper`` whose ``context_fn`` is
    ``create_selective_checkpoint_contexts`` of its policy: ``MUST_SAVE`` for the outputs of every op of
    ``get_default_op_list().compute_intensive_ops`` (``aten.mm``, ``addmm``, ``bmm``, the CUDA SDPA kernels, ...)
    and of ``aten.linear``, ``aten.max``, ``aten.topk`` and the reduce-scatter and all-to-all collectives, except
    every second ``mm``/``linear`` of a layer's forward (counted from 1: the 2nd, 4th, ... are recomputed), and
    ``PREFER_RECOMPUTE`` for the rest; an ``mm`` whose right-hand side has the shape ``(in, out)`` of a router gate
    is always recomputed (torchtitan's ``force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]``; here the gate is
    ``transformers``' module ``*.gate`` of a MoE block, weight ``(experts, hidden)``). Two additions: the CPU's SDPA
    kernel ``aten._scaled_dot_product_flash_attention_for_cpu`` is saved too, as the CUDA flash kernel
    (``aten._scaled_dot_product_flash_attention``, in the list) would be on a GPU; and
    ``allow_cache_entry_mutation=True``, since ``transformers``' MoE routers divide the saved ``topk`` values in
    place (``norm_topk_prob``), which torch's SAC otherwise refuses. The policy is only asked in forward (torch
    2.13's SAC replays its decisions in recompute), so torchtitan's separate recompute counter changes nothing.
  - ``"layer:K"``: torchtitan's layer-selective AC, which 0.3.0 no longer has: torchtitan 0.2.0 (PyPI)
    ``torchtitan/distributed/activation_checkpoint.py:23-44`` (``_apply_layer_sac``): a counter starting at 1
    checkpoints the layers where it is a multiple of K, i.e. layer i when ``(i + 1) % K == 0``, with
    ``checkpoint_wrapper(layer, preserve_rng_state=False, early_stop=False)`` (0.2.0's default ``early_stop``,
    ``torchtitan/config/job_config.py:611``).
* FSDP2, as torchtitan 0.3.0 ``torchtitan/distributed/fsdp.py:110-366`` (``apply_fsdp_to_decoder``, default
  ``reshard_after_forward_policy``, no PP, so ``get_fsdp_reshard_after_forward_policy`` (``:54-78``) gives True):
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32, cast_forward_inputs=False)``; the embedding its own
  unit (``reshard_after_forward=True``), ``[norm, lm_head]`` one unit with ``reshard_after_forward=False``
  (``:193-207``), or with tied embeddings ``[embed_tokens, norm, lm_head]`` one unit with
  ``reshard_after_forward=False`` (``:180-192``); each decoder layer a unit (``reshard_after_forward=True``,
  ``:303-308``); then the root (``:310``); and ``set_gradient_divide_factor(1.0)`` on every unit
  (``disable_fsdp_gradient_division``, ``:27-41``, called at ``:316``). MoE layers are one unit each (EP = 1 and
  experts >= world: ``Shard(0)``, ``:236-242``); with fewer experts than ranks torchtitan shards the experts on
  dim 1 (``:243-258``), which is replicated here too (the 3-D parameters are the routed experts).
* Tensor parallelism (``tp > 1``): the plan of torchtitan 0.2.0 (PyPI) ``models/llama3/infra/parallelize.py:152-236``
  (``apply_tp``, which 0.3.0 replaced by its own sharding specs), written for the ``transformers`` module names:
  the embedding ``RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))``, the final norm and each
  layer's two norms ``SequenceParallel()``, the attention and the MLP ``PrepareModuleInput`` (``Shard(1)`` to
  ``Replicate()``: the sequence all-gather), q/k/v and gate/up ``ColwiseParallel()``, o_proj and down_proj
  ``RowwiseParallel(output_layouts=Shard(1))``, ``lm_head`` ``ColwiseParallel(input_layouts=Shard(1),
  output_layouts=Shard(-1), use_local_output=False)`` with the loss computed under ``loss_parallel()``. Differences:
  the residual stream stays a ``DTensor`` (``use_local_output=False`` on the embedding and the row-parallel
  outputs; torchtitan's model hands local shards between layers, which ``transformers``' shape-dependent code (the
  position ids, the mask) cannot take; same bytes); Qwen3's q/k norms act on the local heads with an unsharded
  weight (torchtitan 0.2.0: ``SequenceParallel(sequence_dim=2)``, a replicated weight either way). Refused
  (NotImplementedError): MoE layers (expert TP/EP is not replicated), layers without these module names (Phi-3's
  fused projections, OLMo 2's post-norms), a tp that does not divide the heads and the KV heads. FSDP then shards
  over the ``dp`` sub-mesh.
* Training loop, as torchtitan's ``Trainer`` (0.3.0 ``torchtitan/trainer.py:806-828``, ``:871-930``): per micro-batch
  ``loss = model(input_ids=x, labels=x).loss / m; loss.backward()`` (the output, with its bf16 logits, is dropped
  before backward, as torchtitan's ``del pred``), then ``opt.step()`` with ``torch.optim.AdamW(fused=True)``
  (torchtitan's default implementation, ``components/optimizer/optimizer.py:109-111``; its step allocates nothing,
  where ``foreach`` would allocate one sharded-parameter-sized temporary) and ``opt.zero_grad(set_to_none=False)``
  (torchtitan's while CUDA graphs are on, its 0.3.0 default, ``trainer.py:874`` and ``config/configs.py:66``: the
  sharded gradients stay allocated through the next forward). Not replicated: torchtitan's gradient clipping (a
  few scalars per parameter) and the CUDA graphs themselves (which capture the step into a private memory pool).
  The loss is ``transformers``' (``ForCausalLMLoss``: the logits upcast to fp32, then ``cross_entropy``).
* Measurement: ``FSDPMemTracker`` (``torch.distributed._tools.fsdp2_mem_tracker``) over two steps; the first step
  (whose optimizer creates its state lazily, which the tracker shows as a large artefact in fake mode) is discarded
  (``reset_mod_stats`` and the peak cleared), the second is measured. The tracker counts each storage once, by its
  bytes, under a category fixed by *when* it is allocated (``CATEGORIES``): ``ACT`` in forward, ``TEMP`` in backward,
  ``OPT`` in the optimizer step; the FSDP categories (sharded and unsharded parameters and gradients, the
  all-gather output and reduce-scatter input, buffers, inputs) are re-filed when FSDP hands the tensor over (so
  the fp32 reduce-scatter input is ``TEMP`` until the reduce-scatter is issued). Recomputed activations are
  ``TEMP``: the tracker files recompute as ``ACT`` only when an FSDP unit's forward runs in backward, and here
  the unit is the checkpoint wrapper, whose recompute calls the wrapped layer.
  After every op the tracker updates its peak; ``_PeakTracker`` also files the op's snapshot under the phase the
  step is in (``FORWARD``, ``LOSS_FORWARD``, ``LOSS_BACKWARD``, ``layer_phase(i)``, ``EMBEDDING_BACKWARD``,
  ``OPTIMIZER``; with m > 1 micro-batches each but the optimizer's once per micro-batch, ``phase_name``), keeping
  each phase's largest total. The phases are cut by hooks: the root's forward pre-hook starts ``forward``,
  ``lm_head``'s starts ``loss forward``; the first op in backward starts ``loss backward`` (the loss, ``lm_head``
  and the final norm); a hook on the gradient of decoder layer i's output starts ``backward of layer i`` (its
  FSDP all-gather, its recompute, its reduce-scatter), one on the embedding's output ``backward of the
  embedding``; the tracker's optimizer flag, ``optimizer``.

What the CPU and fake mode measure that a GPU may not: the outputs of the CPU's ops as their meta functions give
them (a kernel's internal workspace is not seen), e.g. SDPA runs ``_scaled_dot_product_flash_attention_for_cpu``;
FSDP2's deferred frees are the same code on either (in forward the previous unit's all-gather output is held
until the next all-gather; the reduce-scatter input until the next reduce-scatter); nothing models the CUDA
caching allocator's rounding, fragmentation or per-stream pools.

torch and transformers are imported inside the functions: ``import meshplan`` does not import them.

    >>> parse_recompute("layer:2")
    ('layer', 2)
    >>> phase_name(LOSS_BACKWARD, 2, 2), phase_name(layer_phase(3), 1, 1)
    ('loss backward (micro-batch 2)', 'backward of layer 3')
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from meshplan.realrun.measure import ATTENTION_IMPLEMENTATIONS, text_config

# The tracker's categories (the member names of ``_FSDPRefType``, in its order); every snapshot adds ``"total"``.
CATEGORIES = (
    "SHARDED_PARAM",
    "UNSHARDED_PARAM",
    "BUFFER",
    "SHARDED_GRAD",
    "UNSHARDED_GRAD",
    "ACT",
    "TEMP",
    "ALL_GATHER",
    "REDUCE_SCATTER",
    "OPT",
    "INP",
)
TOTAL = "total"
FORWARD = "forward"
LOSS_FORWARD = "loss forward"
LOSS_BACKWARD = "loss backward"
EMBEDDING_BACKWARD = "backward of the embedding"
OPTIMIZER = "optimizer"
RECOMPUTE_MODES = ("none", "full", "op", "layer:K")


def layer_phase(i: int) -> str:
    """The phase of decoder layer ``i``'s backward (its recompute, if any, included)."""
    return f"backward of layer {i}"


def phase_name(base: str, micro_batch: int, micro_batches: int) -> str:
    """The key in ``PeakMeasurement.phases`` of phase ``base`` in micro-batch ``micro_batch`` (from 1) of
    ``micro_batches``: ``base`` itself with one micro-batch, and for the optimizer."""
    if micro_batches == 1 or base == OPTIMIZER:
        return base
    return f"{base} (micro-batch {micro_batch})"


def parse_recompute(recompute: str) -> tuple[str, int]:
    """``(mode, K)`` of a recompute setting: ``("none", 0)``, ``("full", 0)``, ``("op", 0)`` or ``("layer", K)``
    for ``"layer:K"`` (K >= 1); ValueError otherwise."""
    if recompute in ("none", "full", "op"):
        return recompute, 0
    m = re.fullmatch(r"layer:([1-9][0-9]*)", recompute) if isinstance(recompute, str) else None
    if m is None:
        raise ValueError(f"recompute={recompute!r} must be one of {', '.join(RECOMPUTE_MODES)} (K >= 1)")
    return "layer", int(m.group(1))


@dataclass(frozen=True)
class PeakMeasurement:
    """One measured training step (bytes, on one rank).

    Attributes:
        peak: category (``CATEGORIES``) -> bytes at the step's peak, and ``"total"``.
        phase: the phase (a key of ``phases``) of the op at which the peak was first reached.
        phases: phase -> its snapshot (category -> bytes, and ``"total"``) at the op where the phase's total was
            largest, in the order the phases began.
        params: parameters of the model (tied ones once).
        world: ranks (dp x tp).
        config: the ``transformers`` config the model was built from (``num_hidden_layers = layers``).
        seconds: wall time of the measurement (the model's construction included, the imports not).
        layers, seq, batch, micro_batches, recompute, tp, attention: the arguments.
        timeline: with ``timeline=True``, one ``(phase, snapshot)`` per op of the measured step, the snapshot a tuple
            of bytes in the order of ``CATEGORIES`` then the total; else empty.
    """

    peak: Mapping[str, int]
    phase: str
    phases: Mapping[str, Mapping[str, int]]
    params: int
    world: int
    config: Mapping[str, Any]
    seconds: float
    layers: int
    seq: int
    batch: int
    micro_batches: int
    recompute: str
    tp: int
    attention: str
    timeline: tuple[tuple[str, tuple[int, ...]], ...] = field(default=(), repr=False)

    @property
    def total(self) -> int:
        """Bytes at the peak."""
        return self.peak[TOTAL]

    def phase_max(self, base: str) -> Mapping[str, int]:
        """The largest snapshot of phase ``base`` over the micro-batches (its key itself with one micro-batch)."""
        found = [s for name, s in self.phases.items() if name == base or name.startswith(f"{base} (micro-batch ")]
        if not found:
            raise KeyError(base)
        return max(found, key=lambda s: s[TOTAL])


def _validate(layers: int, seq: int, batch: int, world: int, micro_batches: int, tp: int, attention: str) -> None:
    for name, value in (
        ("layers", layers),
        ("seq", seq),
        ("batch", batch),
        ("world", world),
        ("micro_batches", micro_batches),
        ("tp", tp),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    if world % tp:
        raise ValueError(f"world={world} must be a multiple of tp={tp}")
    if attention not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention={attention!r} must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}")


def _config(config: Mapping[str, Any], layers: int, seq: int, recompute: str = "none") -> Any:
    """The ``transformers`` config of ``config`` with ``layers`` decoder layers."""
    cfg = text_config(config)
    if cfg is config:  # a transformers config: not changed in place
        cfg = copy.deepcopy(cfg)
    cfg.num_hidden_layers = layers
    types = getattr(cfg, "layer_types", None)
    if types:
        cfg.layer_types = [types[i % len(types)] for i in range(layers)]
    if getattr(cfg, "mlp_only_layers", None):
        cfg.mlp_only_layers = [i for i in cfg.mlp_only_layers if i < layers]
    if getattr(cfg, "max_position_embeddings", seq) < seq:
        cfg.max_position_embeddings = seq
    # use_cache stays on where it can: with use_cache=False the tracker under FakeTensorMode keeps 5·T·h bytes a
    # Llama layer (its q, k, v and attention output) alive that real tensors free (measured on a 2-layer model both
    # ways; with real tensors the two settings allocate the same). Selective checkpointing (op, layer:K) needs it
    # off: the cache's update inside a checkpointed region is not replayed identically by the recomputation.
    cfg.use_cache = recompute in ("none", "full")
    return cfg


class _Phases:
    """The phase the step is in, set by hooks and by the tracker (see the module docstring)."""

    def __init__(self, micro_batches: int) -> None:
        self.micro_batches = micro_batches
        self.micro_batch = 0
        self.base = FORWARD
        self.name = FORWARD

    def set(self, base: str) -> None:
        self.base = base
        self.name = phase_name(base, max(self.micro_batch, 1), self.micro_batches)


def _tracker_class() -> type:
    from torch.distributed._tools.fsdp2_mem_tracker import _TOTAL_KEY, FSDPMemTracker, _FSDPRefType

    keys = tuple(_FSDPRefType[c] for c in CATEGORIES)
    assert [k.name for k in _FSDPRefType] == list(CATEGORIES), "torch's tracker categories changed"

    class _PeakTracker(FSDPMemTracker):
        """``FSDPMemTracker`` that also files each op's snapshot under the current phase."""

        def __init__(self, mod: Any, optm: Any, phases: _Phases, timeline: bool) -> None:
            super().__init__(mod, optm)
            self.phase_state = phases
            self.recording = False
            self.keep_timeline = timeline
            self.timeline: list[tuple[str, tuple[int, ...]]] = []
            self.phase_peaks: dict[str, tuple[int, ...]] = {}
            self.peak_phase = ""
            self.peak_total = -1

        def start_recording(self) -> None:
            self.reset_mod_stats()
            self._peak_mem.clear()
            self._peak_mem_snap.clear()
            self.phase_state.micro_batch = 0
            self.recording = True

        def _update_peak_stats(self, peak_state: Any) -> None:
            super()._update_peak_stats(peak_state)
            if not self.recording:
                return
            ph = self.phase_state
            if self._in_opt:
                if ph.base != OPTIMIZER:
                    ph.set(OPTIMIZER)
            elif ph.base in (FORWARD, LOSS_FORWARD) and self._mod_tracker.is_bw:
                ph.set(LOSS_BACKWARD)
            for dev_snap in self._curr_mem_snap.values():  # one device: the CPU
                snap = (*(dev_snap[k] for k in keys), dev_snap[_TOTAL_KEY])
                if self.keep_timeline:
                    self.timeline.append((ph.name, snap))
                best = self.phase_peaks.get(ph.name)
                if best is None or snap[-1] > best[-1]:
                    self.phase_peaks[ph.name] = snap
                if snap[-1] > self.peak_total:
                    self.peak_total, self.peak_phase = snap[-1], ph.name

    return _PeakTracker


def _snapshot(values: tuple[int, ...]) -> Mapping[str, int]:
    return MappingProxyType({**dict(zip(CATEGORIES, values[:-1])), TOTAL: values[-1]})


def _layout(model: Any) -> tuple[Any, Any, Any, Any]:
    """(embedding, decoder layers, final norm, lm_head) of a ``transformers`` causal LM of the Llama layout."""
    inner = getattr(model, "model", None)
    parts = [getattr(inner, n, None) for n in ("embed_tokens", "layers", "norm")] + [getattr(model, "lm_head", None)]
    if any(p is None for p in parts):
        raise ValueError(
            f"{type(model).__name__} does not have the layout model.embed_tokens, model.layers, model.norm, lm_head"
        )
    return parts[0], parts[1], parts[2], parts[3]


def _router_shapes(layer: Any) -> set[tuple[int, int]]:
    """``(in, out)`` of the router gates of a MoE layer: modules named ``gate`` holding a 2-D ``weight``."""
    shapes = set()
    for name, mod in layer.named_modules():
        w = getattr(mod, "weight", None)
        if name.rsplit(".", 1)[-1] == "gate" and w is not None and w.dim() == 2:
            shapes.add((int(w.shape[1]), int(w.shape[0])))
    return shapes


def _op_sac_wrapper(layer: Any) -> Any:
    """torchtitan 0.3.0's ``SelectiveAC._wrap_block`` for ``layer`` (see the module docstring)."""
    import torch
    from torch._functorch.partitioners import get_default_op_list
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    compute_intensive: Any = get_default_op_list().compute_intensive_ops
    save_ops = {op.default for op in compute_intensive}
    save_ops |= {
        aten._scaled_dot_product_cudnn_attention.default,
        aten._scaled_dot_product_attention_math.default,
        aten._scaled_dot_product_fused_attention_overrideable.default,
        aten.max.default,
        aten.linear.default,
        aten.topk.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        torch.ops._c10d_functional.all_to_all_single.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,  # the CPU's flash kernel (see the docstring)
    }
    mm_ops = (aten.mm.default, aten.linear.default)
    recompute_shapes = _router_shapes(layer)

    def policy() -> Any:
        meta = {"forward": 0, "recompute": 0}

        def wrapped(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            mode = "recompute" if ctx.is_recompute else "forward"
            if func in mm_ops:
                shape = tuple(args[1].shape)
                if func == aten.linear.default:
                    shape = shape[::-1]
                if shape in recompute_shapes:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                meta[mode] += 1
            if func in save_ops:
                if func in mm_ops and meta[mode] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return wrapped

    return checkpoint_wrapper(
        layer,
        # transformers' MoE routers divide the saved topk values in place (norm_topk_prob): allowed, as the bytes
        # held are the same (torchtitan's router does not mutate them)
        context_fn=lambda: create_selective_checkpoint_contexts(policy(), allow_cache_entry_mutation=True),
        preserve_rng_state=True,
        determinism_check="default",
        early_stop=False,
        debug=False,
    )


def _apply_recompute(layers: Any, recompute: str) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    mode, k = parse_recompute(recompute)
    for i in range(len(layers)):
        if mode == "full":
            layers[i] = checkpoint_wrapper(
                layers[i], preserve_rng_state=True, determinism_check="default", early_stop=False, debug=False
            )
        elif mode == "op":
            layers[i] = _op_sac_wrapper(layers[i])
        elif mode == "layer" and (i + 1) % k == 0:
            layers[i] = checkpoint_wrapper(layers[i], preserve_rng_state=False, early_stop=False)


def _is_moe(layer: Any) -> bool:
    return any(p.dim() == 3 for p in layer.parameters())


def _apply_tp(model: Any, tp_mesh: Any) -> None:
    """torchtitan 0.2.0's ``apply_tp`` plan for the ``transformers`` modules (see the module docstring)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    layers = _layout(model)[1]
    cfg = model.config
    heads = (cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    if any(h % tp_mesh.size() for h in heads):
        raise NotImplementedError(f"tp={tp_mesh.size()} must divide the attention heads and KV heads {heads}")
    parallelize_module(
        model,
        tp_mesh,
        {
            "model.embed_tokens": RowwiseParallel(
                input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False
            ),
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
        },
    )
    for layer in layers:
        if _is_moe(layer):
            raise NotImplementedError("tp > 1 with MoE layers: torchtitan's expert TP/EP is not replicated")
        attn = "self_attn"
        plan = {
            "input_layernorm": SequenceParallel(),
            attn: PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()},
                use_local_output=True,
            ),
            f"{attn}.q_proj": ColwiseParallel(),
            f"{attn}.k_proj": ColwiseParallel(),
            f"{attn}.v_proj": ColwiseParallel(),
            f"{attn}.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
            ),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        }
        names = {n for n, _ in layer.named_modules()}
        missing = sorted(k for k in plan if k not in names)
        if missing:
            raise NotImplementedError(f"tp > 1: {type(layer).__name__} has no {', '.join(missing)}")
        parallelize_module(layer, tp_mesh, plan)


def _dim1_placement(ids: set[int], shard1: Any) -> Any:
    """FSDP's ``shard_placement_fn``: ``shard1`` for the parameters whose ``id`` is in ``ids``, the default for the
    rest."""
    return lambda param: shard1 if id(param) in ids else None


def _apply_fsdp(model: Any, mesh: Any, tied: bool) -> None:
    """torchtitan 0.3.0's ``apply_fsdp_to_decoder`` (see the module docstring)."""
    import torch
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Shard

    embed, layers, norm, head = _layout(model)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    cfg = {"mesh": mesh, "mp_policy": mp}
    if tied:
        fully_shard([embed, norm, head], **cfg, reshard_after_forward=False)
    else:
        fully_shard(embed, **cfg, reshard_after_forward=True)
        fully_shard([norm, head], **cfg, reshard_after_forward=False)
    for layer in layers:
        experts = [p for p in layer.parameters() if p.dim() == 3]
        if experts and mesh.size() > min(p.shape[0] for p in experts):
            placement = _dim1_placement({id(p) for p in experts}, Shard(1))
            fully_shard(layer, **cfg, reshard_after_forward=True, shard_placement_fn=placement)
        else:
            fully_shard(layer, **cfg, reshard_after_forward=True)
    fully_shard(model, **cfg)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)


def _install_phase_hooks(model: Any, phases: _Phases) -> list[Any]:
    import torch

    embed, layers, _, head = _layout(model)

    def in_backward() -> bool:
        return bool(torch._C._current_graph_task_id() != -1)

    def root_pre(mod: Any, args: Any, kwargs: Any) -> None:
        if not in_backward():
            phases.micro_batch += 1
            phases.set(FORWARD)

    def head_pre(mod: Any, args: Any) -> None:
        if not in_backward():
            phases.set(LOSS_FORWARD)

    def on_grad(base: str) -> Any:
        def hook(mod: Any, args: Any, out: Any) -> None:
            t = out[0] if isinstance(out, (tuple, list)) else out
            if not in_backward() and isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(lambda grad: phases.set(base))

        return hook

    handles = [
        model.register_forward_pre_hook(root_pre, prepend=True, with_kwargs=True),
        head.register_forward_pre_hook(head_pre, prepend=True),
        embed.register_forward_hook(on_grad(EMBEDDING_BACKWARD), prepend=True),
    ]
    handles += [layer.register_forward_hook(on_grad(layer_phase(i)), prepend=True) for i, layer in enumerate(layers)]
    return handles


@contextmanager
def _dtensor_under_fake_mode() -> Iterator[None]:
    """Two patches for DTensor (tp > 1) under the measurement's ``FakeTensorMode``, undone after:

    * ``fully_shard`` joins the dp and tp meshes of each parameter (``DeviceMesh._concatenate``), which computes
      on the meshes' real rank tensors: it runs outside the fake mode.
    * DTensor's sharding propagation computes each output's metadata by running the op on global shapes under
      ``detect_fake_mode() or FakeTensorMode()`` (``torch/distributed/tensor/_sharding_prop.py``): under the
      measurement's fake mode it would reuse it, and the tracker would count those global-shape tensors (a full
      ``T x V`` fp32 tensor for ``_log_softmax`` under ``loss_parallel``). It gets a fake mode of its own, which
      the tracker skips (the tracker's own test: ops under a fake mode other than the one it was entered in).
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import _sharding_prop

    mesh_class: Any = DeviceMesh
    original = DeviceMesh.__dict__["_concatenate"]
    detect = _sharding_prop.detect_fake_mode

    def concatenate(meshes: Any) -> Any:
        with unset_fake_temporarily():
            return original.__func__(meshes)

    mesh_class._concatenate = staticmethod(concatenate)
    _sharding_prop.detect_fake_mode = lambda *args, **kwargs: None
    try:
        yield
    finally:
        mesh_class._concatenate = original
        _sharding_prop.detect_fake_mode = detect


@contextmanager
def _fake_world(world: int, tp: int) -> Iterator[Any]:
    """A fake process group of ``world`` ranks (this process is rank 0) and its device mesh, destroyed after."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("measure_peak creates its own (fake) process group: one is already initialised")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        if tp == 1:
            yield init_device_mesh("cpu", (world,))
        else:
            yield init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    finally:
        dist.destroy_process_group()


def measure_peak(
    config: Mapping[str, Any],
    *,
    layers: int,
    seq: int,
    batch: int = 1,
    world: int = 8,
    micro_batches: int = 1,
    recompute: str = "none",
    tp: int = 1,
    attention: str = "sdpa",
    timeline: bool = False,
) -> PeakMeasurement:
    """Measure the peak memory of one rank in the second FSDP2 training step of ``config`` (see the module docstring).

    Args:
        config: a Hugging Face ``config.json`` (a dict; a multimodal wrapper's ``text_config`` is used) or a
            ``transformers`` config.
        layers: decoder layers built (``num_hidden_layers``).
        seq, batch: tokens per sequence and sequences per micro-batch (labels = input ids).
        world: ranks; ``tp``: tensor-parallel degree (the mesh is ``(world // tp, tp)``).
        micro_batches: micro-batches per step (gradient accumulation).
        recompute: ``"none"``, ``"full"``, ``"op"`` or ``"layer:K"``.
        attention: ``"sdpa"`` or ``"eager"``.
        timeline: keep every op's snapshot (``PeakMeasurement.timeline``).

    Raises ValueError for bad arguments or a model without the Llama layout, NotImplementedError for a tp > 1 the
    plan does not cover (see the module docstring), RuntimeError when a process group is already initialised.
    """
    _validate(layers, seq, batch, world, micro_batches, tp, attention)
    parse_recompute(recompute)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    start = time.perf_counter()

    phases = _Phases(micro_batches)
    verbosity = hf_logging.get_verbosity()
    with ExitStack() as stack:
        hf_logging.set_verbosity_error()
        stack.callback(hf_logging.set_verbosity, verbosity)
        cfg = _config(config, layers, seq, recompute)
        mesh = stack.enter_context(_fake_world(world, tp))
        stack.enter_context(FakeTensorMode())
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation=attention)
        model.train()
        embed, decoder_layers, _, head = _layout(model)
        tied = head.weight is embed.weight
        params = sum(p.numel() for p in model.parameters())
        if tp > 1:
            stack.enter_context(_dtensor_under_fake_mode())
            _apply_tp(model, mesh["tp"])
        _apply_recompute(decoder_layers, recompute)
        _apply_fsdp(model, mesh["dp"] if tp > 1 else mesh, tied)
        for h in _install_phase_hooks(model, phases):
            stack.callback(h.remove)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        tracker = _tracker_class()(model, opt, phases, timeline)
        tracker.track_inputs((ids,))
        loss_context: Any = ExitStack
        if tp > 1:
            from torch.distributed.tensor.parallel import loss_parallel

            loss_context = loss_parallel
        with tracker:
            for step in range(2):
                for _ in range(micro_batches):
                    with loss_context():
                        loss = model(input_ids=ids, labels=ids).loss / micro_batches
                        loss.backward()
                    del loss
                opt.step()
                opt.zero_grad(set_to_none=False)
                if step == 0:
                    tracker.start_recording()
        peak_snap = next(iter(tracker._peak_mem_snap.values()))
    from torch.distributed._tools.fsdp2_mem_tracker import _TOTAL_KEY, _FSDPRefType

    peak = MappingProxyType({**{c: peak_snap[_FSDPRefType[c]] for c in CATEGORIES}, TOTAL: peak_snap[_TOTAL_KEY]})
    if peak[TOTAL] != tracker.peak_total:
        raise AssertionError(f"the tracker's peak {peak[TOTAL]} is not the largest phase's {tracker.peak_total}")
    return PeakMeasurement(
        peak=peak,
        phase=tracker.peak_phase,
        phases=MappingProxyType({name: _snapshot(v) for name, v in tracker.phase_peaks.items()}),
        params=params,
        world=world,
        config=MappingProxyType(cfg.to_dict()),
        seconds=time.perf_counter() - start,
        layers=layers,
        seq=seq,
        batch=batch,
        micro_batches=micro_batches,
        recompute=recompute,
        tp=tp,
        attention=attention,
        timeline=tuple(tracker.timeline),
    )
