"""Families the analytic loader does not know, counted by ``transformers`` on the meta device.

The total and every decoder layer's count are exact: the sum of the parameters' sizes of the model
``AutoModelForCausalLM`` builds (no memory is allocated on the meta device). The shapes the plan needs come from
the config's standard keys; what cannot be read off exactly is named in ``ModelSpec.estimated``:

* ``components``: split by parameter names (embedding and head exactly, the rest by name patterns);
* ``layers``, ``kv_width``, ``num_full_attention_layers``: every layer taken as softmax attention with the
  standard keys' heads (sliding windows, linear attention and the like are not recognised);
* ``flop_params`` and the expert counts: routed experts found by name, activated by ``num_experts_per_tok``.

``torch`` and ``transformers`` are imported here only, so ``import meshplan`` stays fast without them.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from meshplan.core.units import add_up
from meshplan.spec.models.fields import MAX_LAYERS, Fields, show
from meshplan.spec.models.spec import COMPONENT_KEYS, LayerSpec, ModelSpec, ParamCount

ESTIMATED = (
    "components",
    "layers",
    "kv_width",
    "num_full_attention_layers",
    "flop_params",
    "routed_expert_params",
    "layer_expert_params",
)
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


_PAIR = re.compile(r'"([\w.-]+)"\s*[,:]\s*"\w+Config"')


@lru_cache(maxsize=1)
def _transformers_types() -> frozenset[str]:
    """The model types transformers has a config class for, read from the source of its ``CONFIG_MAPPING_NAMES``:
    importing transformers (and torch) takes seconds, too long just to say that a type is unknown. Falls back to
    the import if the source does not have the expected form."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    auto = Path(next(iter(spec.submodule_search_locations))) / "models" / "auto"
    try:
        names = {
            m
            for f in ("auto_mappings.py", "configuration_auto.py")
            for m in _PAIR.findall((auto / f).read_text(encoding="utf-8"))
            if not m.isupper()
        }
    except OSError:
        names = set()
    if "llama" not in names:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        names = set(CONFIG_MAPPING_NAMES)
    return frozenset(names)


def transformers_knows(model_type: str) -> bool:
    """Whether the installed transformers has a config class for ``model_type`` (False without transformers)."""
    return model_type in _transformers_types()


def _build(cfg: dict, where: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {k: v for k, v in cfg.items() if k not in ("source", "source_note", "model_type")}
    try:
        config = AutoConfig.for_model(cfg["model_type"], **kwargs)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise ValueError(
            f"transformers cannot build {where} (model_type {cfg['model_type']!r}): {type(exc).__name__}: {text}"
        ) from None


def _decoder_layers(model: Any, n_layers: int) -> list[Any]:
    """The ModuleList of the text decoder's layers: the largest one with ``num_hidden_layers`` entries."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers]
    if not lists:
        raise ValueError(f"no list of {n_layers} decoder layers found in {type(model).__name__}")
    best: Any = max(lists, key=lambda m: add_up(p.numel() for p in m.parameters()))
    return list(best)


def from_transformers(cfg: dict, name: str, where: str) -> ModelSpec:
    """Count an unknown family with transformers (see the module docstring for what is exact and what is not)."""
    f = Fields(cfg, where)
    h, n_layers = f.integer("hidden_size"), f.integer("num_hidden_layers", hi=MAX_LAYERS)
    a = f.integer("num_attention_heads")
    kv = f.integer("num_key_value_heads", a)
    d = f.integer("head_dim", h // a if h >= a else 1)
    vocab = f.integer("vocab_size")
    ffn = f.integer("intermediate_size", 0, lo=0)
    n_experts = next((f.integer(k, lo=0) for k in _EXPERT_KEYS if f.has(k)), 0)
    k = f.integer("num_experts_per_tok", 0, lo=0) if n_experts else 0
    expert_ffn = f.integer("moe_intermediate_size", ffn, lo=0) if n_experts else 0
    model = _build(dict(cfg), where)

    params = {id(p): p for p in model.parameters()}  # tied weights once
    total = add_up(p.numel() for p in params.values())
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    emb_n = add_up(p.numel() for p in emb.parameters()) if emb is not None else 0
    tied = head is not None and emb is not None and head.weight is emb.weight
    head_n = 0 if head is None or tied else add_up(p.numel() for p in head.parameters())
    layers = _decoder_layers(model, n_layers)
    layer_ids = {id(p) for m in layers for p in m.parameters()}

    comps = dict.fromkeys(COMPONENT_KEYS, 0)
    comps.update(embedding=emb_n, head=head_n)
    specs = []
    for m in layers:
        experts = 0
        for pname, p in m.named_parameters():
            low = pname.lower()
            if "expert" in low and "shared" not in low:
                comps["routed_experts"] += p.numel()
                experts += p.numel()
            elif "norm" in low or "ln" in low.split("."):
                comps["norms"] += p.numel()
            elif "attn" in low or "attention" in low or "mixer" in low:
                comps["attention"] += p.numel()
            else:
                comps["mlp"] += p.numel()
        n = add_up(p.numel() for p in m.parameters())
        specs.append(
            LayerSpec(
                mixer="attention",
                num_heads=a,
                num_kv_heads=kv,
                head_dim=d,
                v_head_dim=d,
                intermediate_size=0 if experts else ffn,
                num_experts=n_experts if experts else 0,
                experts_per_token=k if experts else 0,
                expert_intermediate_size=expert_ffn if experts else 0,
                params=n,
                expert_params=experts,
            )
        )
    known = {id(p) for p in emb.parameters()} if emb is not None else set()
    if head is not None:
        known |= {id(p) for p in head.parameters()}
    for pname, p in model.named_parameters():
        if id(p) in layer_ids or id(p) in known:
            continue
        low = pname.lower()
        comps["vision" if ("vision" in low or "visual" in low) else "norms"] += p.numel()
    assert add_up(comps.values()) == total, (comps, total)

    moe = [s for s in specs if s.is_moe]
    in_layers = add_up(s.params for s in specs)
    rest = total - emb_n - head_n - in_layers  # final norm, learned positions, vision, ...
    counts: dict[int, int] = {}
    for s in specs:
        counts[s.params] = counts.get(s.params, 0) + 1
    groups = [("embedding", 1, emb_n), ("head", 1, head_n)]
    groups += [("layers" if len(counts) == 1 else f"layers_{p}", n, p) for p, n in counts.items()]
    groups.append(("other", 1, rest))
    return ModelSpec(
        name=name,
        family=str(cfg["model_type"]),
        hidden_size=h,
        num_layers=n_layers,
        num_attention_heads=a,
        num_key_value_heads=kv,
        head_dim=d,
        kv_width=2 * kv * d,
        num_full_attention_layers=n_layers,
        vocab_size=vocab,
        params=ParamCount(total, MappingProxyType(comps), tuple(groups)),
        layer_params=tuple(s.params for s in specs),
        flop_params=add_up(s.activated_params for s in specs) + rest - comps["vision"] + vocab * h,
        num_experts=n_experts if moe else 0,
        experts_per_token=k if moe else 0,
        num_moe_layers=len(moe),
        routed_expert_params=comps["routed_experts"],
        layer_expert_params=tuple(s.expert_params for s in specs) if moe else (),
        max_position_embeddings=f.opt_integer("max_position_embeddings"),
        layers=tuple(specs),
        tie_word_embeddings=tied,
        estimated=ESTIMATED,
    )


__all__ = ["ESTIMATED", "from_transformers", "show", "transformers_knows"]
