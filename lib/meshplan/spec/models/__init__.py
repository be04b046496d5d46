"""The model loader's families: one reader per Hugging Face ``model_type``, each turning a parsed ``config.json``
into a ``ModelSpec`` with exact parameter counts; ``transformers`` (meta device) for any other type it knows.

Public entry points are re-exported by ``meshplan.spec.model``.

    >>> cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...        "intermediate_size": 128, "vocab_size": 100}
    >>> spec = from_config(cfg, "tiny", "'tiny.json'")
    >>> spec.params.total   # embedding and head 2·100·64, 2 layers of 4·64² + 3·64·128 + 2·64, final norm 64
    95040
    >>> from_config({**cfg, "num_local_experts": 8}, "tiny", "'tiny.json'")
    Traceback (most recent call last):
    ...
    meshplan.core.validation.ConfigError: malformed config 'tiny.json': 'num_local_experts' = 8 changes the ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from meshplan.core.validation import ConfigError
from meshplan.spec.models import deepseek, gemma, gpt2, llama, qwen, qwen3_5
from meshplan.spec.models.fallback import from_transformers, transformers_knows
from meshplan.spec.models.fields import Fields, show
from meshplan.spec.models.spec import COMPONENT_KEYS, LayerSpec, ModelSpec, ParamCount

Reader = Callable[[Fields, str], ModelSpec]

FAMILIES: Mapping[str, Reader] = {
    "llama": llama.llama,
    "mistral": llama.mistral,
    "mixtral": llama.mixtral,
    "phi3": llama.phi3,
    "olmo2": llama.olmo2,
    "qwen2": qwen.qwen2,
    "qwen2_moe": qwen.qwen2_moe,
    "qwen3": qwen.qwen3,
    "qwen3_moe": qwen.qwen3_moe,
    "qwen3_5": qwen3_5.qwen3_5,
    "qwen3_5_moe": qwen3_5.qwen3_5_moe,
    "gemma2": gemma.gemma2,
    "gemma3_text": gemma.gemma3_text,
    "gemma3": gemma.gemma3,
    "deepseek_v2": deepseek.deepseek_v2,
    "deepseek_v3": deepseek.deepseek_v3,
    "gpt2": gpt2.gpt2,
}
# Text-only checkpoints of the Qwen3.5 families carry the text model at the top level under these types.
ALIASES: Mapping[str, str] = {"qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}

# ``architectures`` classes of the families above: a config whose class belongs to another family than its
# ``model_type`` has been relabelled (a Qwen2.5 config labelled ``llama`` loses its q/k/v biases without a key to
# betray it), and is refused.
ARCHITECTURES: Mapping[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5ForCausalLM": "qwen3_5",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
    "Qwen3_5MoeForCausalLM": "qwen3_5_moe",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GPT2LMHeadModel": "gpt2",
}


def from_config(cfg: Mapping, name: str, where: str) -> ModelSpec:
    """Read ``cfg`` with its family's reader, then refuse count-changing keys the reader did not understand.

    A ``model_type`` no reader knows goes to transformers when it knows it (``fallback.from_transformers``,
    imported only then), else is an error listing the supported families.
    """
    f = Fields(cfg, where)
    mtype = cfg.get("model_type")
    if mtype is None:
        raise f.error(f"missing key 'model_type' (one of {', '.join(sorted(FAMILIES))})")
    if not isinstance(mtype, str):
        raise f.error(f"'model_type' must be a string, got {show(mtype)}")
    reader = FAMILIES.get(ALIASES.get(mtype, mtype))
    if reader is None:
        supported = ", ".join(sorted(FAMILIES))
        if transformers_knows(mtype):
            try:
                return from_transformers(dict(cfg), name, where)
            except ValueError as exc:
                why = str(exc).removeprefix(f"malformed config {where}: ")
                raise ConfigError(
                    f"unsupported model_type {show(mtype)} in {where}: counted analytically are "
                    f"{supported}; transformers knows {show(mtype)} but cannot count this config: "
                    f"{why}"
                ) from None
        raise ConfigError(
            f"unsupported model_type {show(mtype)} in {where}: counted analytically are {supported}; "
            "other types need transformers to know them (pip install transformers), and it does not "
            "know this one"
        )
    _check_architectures(f, mtype)
    spec = reader(f, name)
    f.refuse_unread(mtype)
    return _with_numerics(spec, f)


def _with_numerics(spec: ModelSpec, f: Fields) -> ModelSpec:
    """The rotary base, the rotating fraction of each head and the norms' epsilon, which change no count but which an
    export must carry (Megatron-LM's defaults differ: --rotary-base 10000, --norm-epsilon 1e-5)."""
    text = f.opt_section("text_config") or f
    rope = text.opt_section("rope_parameters")
    theta = text.number("rope_theta", None) or (rope.number("rope_theta", None) if rope else None)
    fraction = (rope.number("partial_rotary_factor", None) if rope else None) or text.number(
        "partial_rotary_factor", None
    )
    eps = None
    for key in ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "norm_eps"):
        eps = eps or text.number(key, None)
    if fraction is not None and fraction > 1:
        raise text.error(f"'partial_rotary_factor' must be at most 1, got {fraction}")
    return replace(spec, rope_theta=theta, rotary_fraction=fraction or 1.0, norm_eps=eps)


def _check_architectures(f: Fields, mtype: str) -> None:
    """Refuse a config whose ``architectures`` class belongs to another family than its ``model_type``."""
    archs = f.cfg.get("architectures")
    if archs is None:
        return
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise f.error(f"'architectures' must be a list of class names, got {show(archs)}")
    family = ALIASES.get(mtype, mtype)
    for arch in archs:
        other = ARCHITECTURES.get(arch)
        if other is not None and other != family:
            raise f.error(
                f"'architectures' names {arch} (model_type '{other}') but 'model_type' is '{mtype}': "
                "a relabelled config is counted wrong (biases, norms or experts the label lacks); "
                "make them agree"
            )


__all__ = ["COMPONENT_KEYS", "FAMILIES", "LayerSpec", "ModelSpec", "ParamCount", "from_config"]
