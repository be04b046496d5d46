"""What autograd saves for backward, measured: the ground truth of the fsdp2 activation ledger (issue 11).

Definition (issue 11, deliverable 2): the activation bytes of one training micro-batch are the bytes of the
tensors autograd saves for backward when the model is the pinned ``transformers`` implementation of its family
(5.23.0, torch 2.13.0), in bf16, with SDPA attention and dropout off; every storage counts once (views and a
tensor saved by several autograd nodes count once), parameters and their views are excluded, the logits and the
loss are included.

How ``saved_activation_bytes`` measures it: ``AutoModelForCausalLM.from_config`` builds the model with seeded
random weights, in bf16, on the CPU, in training mode, with every dropout probability of the config set to 0.
One forward with ``labels = input_ids`` (so that the loss is computed) and ``use_cache=False`` runs under
``torch.autograd.graph.saved_tensors_hooks``. The pack hook records each saved tensor with the innermost module
running (forward pre-hooks and forward hooks keep a stack) and holds a reference, so that no storage is freed and
its address reused during the forward. The forward runs on one thread (restored after): the tiny test models run
10-50 times faster on a loaded machine, and what is saved does not depend on it. The autograd graph is then walked
from the loss: only storages that a node reachable from the loss saves are counted (a branch whose result is
dropped frees what it saved), each named by the nodes that save it (``MmBackward0.self``,
``ScaledDotProductFlashAttentionForCpuBackward0.logsumexp``, ...).

Attribution (the keys the formulas of ``engine_activations`` use too): a storage belongs to decoder layer i when
the module running is inside the i-th element of the decoder ``ModuleList`` (``model.layers`` or GPT-2's
``transformer.h``), and within it to a part: ``norms`` (a direct child named ``*norm*`` or ``ln_*``), ``mixer``
(the attention, MLA or Gated DeltaNet child), ``mlp`` (the MLP or MoE child) or ``layer`` (the layer's own code,
e.g. the input a layer-granularity checkpoint keeps). Outside the layers: ``embedding`` (the token and position
indices the embeddings save, Gemma's scale), ``rotary`` (what the model's ``*rotary_emb`` module returns, saved
by every attention layer and counted once), ``shared`` (any other tensor handed to the decoder layers as an
argument, e.g. an attention mask that a checkpointed attention core keeps), ``final_norm``, ``head`` (the
``lm_head`` input), ``logits`` (what the loss keeps of the logits: ``log_softmax``'s fp32 output, plus Gemma 2's
softcapping) and ``loss`` (``nll_loss``'s shifted labels and ``total_weight``).

Recompute modes, measured with ``torch.utils.checkpoint(use_reentrant=True)`` (whose ``save_for_backward`` of the
checkpointed function's tensor inputs goes through the hooks; the non-reentrant default keeps the same inputs
but outside ``saved_tensors_hooks``):

* ``"full"``: ``transformers``' own ``activation_checkpointing_enable`` (``GradientCheckpointingLayer``,
  modeling_layers.py:54-123): each decoder layer's forward is checkpointed with the hidden states as its only
  tensor argument (the other arguments are bound with ``functools.partial``).
* ``"selective"``: the attention core is checkpointed: every call of the attention interface
  (``ALL_ATTENTION_FUNCTIONS.get_interface``: ``sdpa_attention_forward`` or the family's
  ``eager_attention_forward``, from q, k, v after rotary to the output before ``o_proj``) and, for Gated
  DeltaNet, ``torch_chunk_gated_delta_rule``. The checkpoint keeps their tensor inputs (q, k, v, the mask;
  for Gated DeltaNet q, k, v, g, beta; keyword tensors that need gradients are passed as checkpoint arguments,
  the others, such as position ids, are captured) and drops everything they save inside. This is Megatron-LM's
  selective recompute (``--recompute-granularity selective``, core attention) applied to the ``transformers`` code.

What the CPU runs that a GPU may not (the formulas follow the CPU; ``engine_activations`` states each difference):

* SDPA: with equal q/k/v head dims the CPU runs ``_scaled_dot_product_flash_attention_for_cpu``, which saves q,
  k, v, the output and the fp32 logsumexp, like the CUDA flash kernel; its output follows q's memory layout, so
  when q comes out of a ``torch.cat`` (partial rotary: Phi-3, Qwen3.5) the ``transpose(1, 2).contiguous()`` in
  ``sdpa_attention_forward`` copies it. With unequal head dims (MLA) the CPU falls back to the math kernel, which
  upcasts q, k, v to fp32 and saves the fp32 softmax: an s² term that CUDA's memory-efficient kernel does not have.
  A materialized mask (sliding windows once s >= the window) is converted to bf16 and saved by every layer.
* Gated DeltaNet (Qwen3.5 linear attention): ``flash-linear-attention`` (fla) and ``causal-conv1d`` are not
  installed here, so ``transformers`` runs its reference PyTorch path (``torch_chunk_gated_delta_rule``,
  ``causal_conv1d_fn``), which is what is measured; fla's fused kernels save far less.
* MoE experts: the ``transformers`` default experts implementation, ``grouped_mm`` (integrations/moe.py:424),
  which runs on the CPU and on CUDA (SM80+).

torch and transformers are imported inside the functions: ``import meshplan`` does not import them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")
RECOMPUTE_MODES = ("none", "selective", "full")
LAYER_PARTS = ("norms", "mixer", "mlp", "layer")
MODEL_PARTS = ("embedding", "rotary", "shared", "final_norm", "head", "logits", "loss", "other")
_LAYER_RE = re.compile(r"^(?:.*\.)?(?:layers|h)\.(\d+)(?:\.([^.]+))?")
_WRAPPER_TYPES = {"qwen3_5", "qwen3_5_moe", "gemma3"}  # multimodal configs: their text model is measured
_GATED_DELTANET_MODULES = (
    "transformers.models.qwen3_5.modeling_qwen3_5",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
)


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd keeps for backward.

    Attributes:
        module: qualified name of the innermost module running when it was first saved ("" for the top level).
        layer: decoder-layer index, or None outside the layers (and for ``rotary``/``shared``).
        part: one of ``LAYER_PARTS`` within a layer, one of ``MODEL_PARTS`` outside.
        shape, dtype: of the first tensor that saved this storage (a view may be smaller than its storage).
        nbytes: bytes of the whole storage.
        ops: the autograd nodes and slots that save it, e.g. ``("MmBackward0.self",)``.
    """

    module: str
    layer: int | None
    part: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    ops: tuple[str, ...]


@dataclass(frozen=True)
class SavedActivations:
    """The measured ledger of one training forward (bytes).

    Attributes:
        total: bytes of every saved storage, parameters excluded.
        layers: one mapping per decoder layer, part (``LAYER_PARTS``) -> bytes.
        model: bucket (``MODEL_PARTS``) -> bytes, for what lies outside the layers.
        output_logits: bytes of the logits tensor the forward returns (bf16; the caller holds it, autograd does not).
        tensors: every saved storage, in the order it was first saved.
        config: the ``transformers`` config the model was built from.
    """

    total: int
    layers: tuple[Mapping[str, int], ...]
    model: Mapping[str, int]
    output_logits: int
    tensors: tuple[SavedTensor, ...]
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def layer_total(self, i: int) -> int:
        """Bytes saved inside decoder layer ``i``."""
        return sum(self.layers[i].values())


def text_config(config: Any) -> Any:
    """A ``transformers`` config of a causal LM from a config dict or object (a multimodal one's text model),
    with every ``*dropout*`` and ``*pdrop*`` probability set to 0."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        cfg = config
    elif isinstance(config, Mapping):
        d = dict(config)
        if d.get("model_type") in _WRAPPER_TYPES and isinstance(d.get("text_config"), Mapping):
            d = dict(d["text_config"])
        model_type = d.pop("model_type", None)
        if not model_type:
            raise ValueError("config has no 'model_type'")
        for key in ("architectures", "transformers_version", "auto_map", "torch_dtype", "dtype"):
            d.pop(key, None)
        cfg = AutoConfig.for_model(model_type, **d)
    else:
        raise TypeError(f"config must be a dict or a transformers config, got {type(config).__name__}")
    if cfg.model_type in _WRAPPER_TYPES and hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    for key, value in cfg.to_dict().items():
        if isinstance(value, float) and ("dropout" in key or "pdrop" in key):
            setattr(cfg, key, 0.0)
    return cfg


def build_model(config: Any, attention: str = "sdpa", seed: int = 0) -> Any:
    """The ``transformers`` causal LM of ``config``: random weights (``torch.manual_seed(seed)``), bf16, CPU,
    training mode, dropout 0, attention implementation ``attention``."""
    if attention not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention={attention!r} must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}")
    import torch
    from transformers import AutoModelForCausalLM

    cfg = text_config(config)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=attention)
    model.train()
    return model


def layer_part(child: str | None) -> str:
    """The part of a decoder layer that its direct child ``child`` belongs to (``None``: the layer's own code).

    >>> [layer_part(c) for c in ("input_layernorm", "self_attn", "linear_attn", "mlp", "ln_2", None)]
    ['norms', 'mixer', 'mixer', 'mlp', 'norms', 'layer']
    """
    if child is None:
        return "layer"
    name = child.lower()
    if "norm" in name or name.startswith("ln"):
        return "norms"
    if "attn" in name or "attention" in name:
        return "mixer"
    return "mlp"


def _saved_by_graph(root: Any) -> dict[int, list[str]]:
    """Storage address -> the autograd nodes (and slots) that save it, over every node reachable from ``root``."""
    import torch

    saves: dict[int, list[str]] = {}
    slots: dict[type, list[str]] = {}
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node) not in slots:
            slots[type(node)] = [a for a in dir(node) if a.startswith("_saved_")]
        found = []
        for attr in slots[type(node)]:
            with suppress(RuntimeError):  # an optional slot that holds no tensor
                found.append((attr[7:], getattr(node, attr)))
        if hasattr(node, "saved_tensors"):  # a custom autograd.Function (the reentrant checkpoint)
            found.append(("saved_tensors", node.saved_tensors))
        for slot, value in found:
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor):
                    saves.setdefault(t.untyped_storage().data_ptr(), []).append(f"{node.name()}.{slot}")
        todo.extend(fn for fn, _ in node.next_functions)
    return saves


@contextmanager
def _selective_recompute() -> Iterator[None]:
    """Checkpoint (reentrant) every attention-interface call and every ``torch_chunk_gated_delta_rule`` call."""
    import importlib

    import torch
    import torch.utils.checkpoint as ckpt
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def checkpointed(fn):
        def run(*args, **kwargs):
            # tensors that need gradients must be arguments of the checkpoint, not captured by a closure
            grads = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.requires_grad]
            rest = {k: v for k, v in kwargs.items() if k not in grads}
            n = len(args)

            def call(*a):
                return fn(*a[:n], **rest, **dict(zip(grads, a[n:])))

            return ckpt.checkpoint(call, *args, *(kwargs[k] for k in grads), use_reentrant=True)

        return run

    interface: Any = ALL_ATTENTION_FUNCTIONS  # an instance attribute shadows the class's method while patched
    original = interface.get_interface
    patched: list[tuple[Any, Any]] = []
    interface.get_interface = lambda impl, default: checkpointed(original(impl, default))
    try:
        for name in _GATED_DELTANET_MODULES:
            module: Any = importlib.import_module(name)
            patched.append((module, module.torch_chunk_gated_delta_rule))
            module.torch_chunk_gated_delta_rule = checkpointed(module.torch_chunk_gated_delta_rule)
        yield
    finally:
        del interface.get_interface
        for module, fn in patched:
            module.torch_chunk_gated_delta_rule = fn


def saved_activation_bytes(
    config: Any,
    seq: int,
    batch: int,
    attention: str = "sdpa",
    recompute: str = "none",
    seed: int = 0,
    model: Any = None,
) -> SavedActivations:
    """Measure what autograd saves in one training forward (with the loss) of a ``transformers`` causal LM.

    Args:
        config: a parsed ``config.json`` (a multimodal wrapper's ``text_config`` is used) or a ``transformers``
            config; ignored when ``model`` is given.
        seq, batch: sequence length and micro-batch size of the random ``input_ids`` (labels = input_ids).
        attention: ``"sdpa"`` (the ledger's definition) or ``"eager"``; must match ``model`` when one is given.
        recompute: ``"none"``, ``"selective"`` (attention core checkpointed) or ``"full"`` (every decoder layer
            checkpointed): see the module docstring.
        seed: seeds the weights and the tokens (MoE routing depends on both; the bytes do not).
        model: a model from ``build_model`` to reuse across shapes.

    Returns the ``SavedActivations`` breakdown, in bytes.
    """
    if attention not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention={attention!r} must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}")
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute={recompute!r} must be one of {', '.join(RECOMPUTE_MODES)}")
    for name, value in (("seq", seq), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    if model is None:
        model = build_model(config, attention=attention, seed=seed)
    elif model.config._attn_implementation != attention:
        raise ValueError(f"attention={attention!r} but the model was built with {model.config._attn_implementation!r}")
    import torch

    cfg = model.config
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    names = {m: n for n, m in model.named_modules()}
    stack: list[str] = []
    rotary: dict[int, torch.Tensor] = {}  # references held so that no address is reused during the forward
    shared: dict[int, torch.Tensor] = {}
    records: dict[int, tuple[str, torch.Tensor]] = {}

    def push(mod, args):
        stack.append(names[mod])

    def pop(mod, args, out):
        name = stack.pop()
        if name.endswith("rotary_emb"):
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    rotary[t.untyped_storage().data_ptr()] = t

    def layer_arguments(mod, args, kwargs):
        for value in (*args[1:], *kwargs.values()):
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor):
                    shared[t.untyped_storage().data_ptr()] = t

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in records:
            records[ptr] = (stack[-1] if stack else "", t)
        return t

    handles = []
    for mod, name in names.items():
        handles += [mod.register_forward_pre_hook(push), mod.register_forward_hook(pop)]
        if re.search(r"(?:^|\.)(?:layers|h)\.\d+$", name):
            handles.append(mod.register_forward_pre_hook(layer_arguments, with_kwargs=True))
    torch.manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    threads = torch.get_num_threads()
    with ExitStack() as stack_ctx:
        # one thread: the tiny models run 10-50x faster on a loaded machine, and the saved bytes do not change
        torch.set_num_threads(1)
        stack_ctx.callback(torch.set_num_threads, threads)
        if recompute == "full":
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
            stack_ctx.callback(model.activation_checkpointing_disable)
        elif recompute == "selective":
            stack_ctx.enter_context(_selective_recompute())
        for h in handles:
            stack_ctx.callback(h.remove)
        stack_ctx.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))
        out = model(input_ids=ids, labels=ids, use_cache=False)
    saves = _saved_by_graph(out.loss.grad_fn)

    per_layer = [dict.fromkeys(LAYER_PARTS, 0) for _ in range(cfg.num_hidden_layers)]
    model_level = dict.fromkeys(MODEL_PARTS, 0)
    tensors = []
    for ptr, (module, t) in records.items():
        if ptr not in saves:
            continue
        m = _LAYER_RE.match(module)
        layer = None
        if m and ptr in rotary:
            part = "rotary"
        elif m and ptr in shared:
            part = "shared"
        elif m:
            layer, part = int(m.group(1)), layer_part(m.group(2))
        elif "embed" in module or module.endswith(("wte", "wpe")):
            part = "embedding"
        elif module.endswith("lm_head"):
            part = "head"
        elif "norm" in module or module.endswith("ln_f"):
            part = "final_norm"
        elif module == "":
            part = "logits" if t.dim() and t.shape[-1] == cfg.vocab_size else "loss"
        else:
            part = "other"
        st = SavedTensor(
            module,
            layer,
            part,
            tuple(t.shape),
            str(t.dtype).removeprefix("torch."),
            t.untyped_storage().nbytes(),
            tuple(sorted(set(saves[ptr]))),
        )
        tensors.append(st)
        if layer is None:
            model_level[part] += st.nbytes
        else:
            per_layer[layer][part] += st.nbytes
    logits = out.logits
    return SavedActivations(
        total=sum(st.nbytes for st in tensors),
        layers=tuple(MappingProxyType(p) for p in per_layer),
        model=MappingProxyType(model_level),
        output_logits=logits.numel() * logits.element_size(),
        tensors=tuple(tensors),
        config=MappingProxyType(cfg.to_dict()),
    )
