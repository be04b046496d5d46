"""Every family's analytic count against the field's own library: transformers (pinned 5.23.0) on the meta device.

For each config, the model ``transformers`` builds from it (no memory is allocated on the meta device) must hold
exactly as many parameters as the library counts, layer by layer and in total; the input embedding, the head and the
sliding windows must agree too. Known, named differences, each checked on its own:

* DeepSeek-V3's router bias (``e_score_correction_bias``, a tensor of the checkpoint) is a buffer in transformers:
  added to the transformers side.
* Multi-token-prediction modules (Qwen3.5's ``mtp.*``, DeepSeek-V3's layer 61) are not built by transformers: the
  library's MTP count is checked against the transformers decoder layer it repeats (module tree), plus its own fc
  and norms.
* Vision towers: built by the multimodal class (``AutoModelForImageTextToText``) when the config has one.

The configs are the real ones in ``data/models/`` (with their sources) and, per family, seeded random small
configs that vary every key the family's loader reads (biases, tying, head_dim, windows, layer types, expert
patterns, ...), each key sometimes left out so that the defaults are checked against transformers' too.
"""

from __future__ import annotations

import json
import os
import random
from functools import cache
from pathlib import Path

import pytest

from meshplan.spec.model import FAMILIES, MODELS_DIR, load_model, model_from_config
from meshplan.spec.models.count import counted


@cache
def _torch_and_transformers():
    """Imported by the first test that builds a model, not when the file is collected: a pytest process that runs
    none of these tests never loads them (about 2.5 s of CPU)."""
    return pytest.importorskip("torch"), pytest.importorskip("transformers")


pytestmark = pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning")

REAL = sorted([*MODELS_DIR.glob("*.json"), *(MODELS_DIR / "public").glob("*.json")])
NOT_HF = {"small-3.7m"}  # the course's GPT variant (bias: false, norm: rmsnorm) has no transformers class


def _strip(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k not in ("source", "source_note")}


def build(cfg: dict):
    """The transformers model of ``cfg`` on the meta device (the multimodal class when there is a vision tower)."""
    torch, transformers = _torch_and_transformers()
    cfg = _strip(cfg)
    mtype = cfg.pop("model_type")
    config = transformers.AutoConfig.for_model(mtype, **cfg)
    cls = transformers.AutoModelForImageTextToText if "vision_config" in cfg else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        return cls.from_config(config)


@cache
def built(path: Path):
    return build(json.loads(path.read_text()))


def _numel(module) -> int:
    params = sum(p.numel() for p in module.parameters())
    return params + sum(b.numel() for n, b in module.named_buffers() if n.endswith("e_score_correction_bias"))


def _decoder_layers(model):
    if hasattr(model, "transformer"):  # GPT-2
        return list(model.transformer.h)
    inner = getattr(model.model, "language_model", model.model)
    return list(inner.layers)


def _text_config(model):
    c = model.config
    return c.get_text_config() if hasattr(c, "get_text_config") else c


def _windows(model) -> list[int | None]:
    """Each layer's sliding window as transformers' config says (``layer_types`` and ``sliding_window``)."""
    c = _text_config(model)
    window = getattr(c, "sliding_window", None) or None
    types = getattr(c, "layer_types", None)
    if types is None:
        return [window] * c.num_hidden_layers
    return [window if t == "sliding_attention" else None for t in types]


def assert_matches(spec, model) -> None:
    """Total, every layer, embedding, head and windows of ``spec`` equal transformers' ``model``."""
    c = spec.params.components
    assert spec.params.total - c["mtp"] == _numel(model), spec.name
    assert spec.layer_params == tuple(_numel(layer) for layer in _decoder_layers(model))
    assert c["embedding"] == sum(p.numel() for p in model.get_input_embeddings().parameters()) + (
        spec.max_position_embeddings * spec.hidden_size if spec.position_embedding == "learned" else 0
    )
    head = model.get_output_embeddings()
    tied = head.weight is model.get_input_embeddings().weight
    assert spec.tie_word_embeddings == tied
    assert c["head"] == (0 if tied else head.weight.numel())
    assert [s.sliding_window for s in spec.layers] == _windows(model)


# ---------------------------------------------------------------- the real configs
@pytest.mark.parametrize("path", [p for p in REAL if p.stem not in NOT_HF], ids=lambda p: p.stem)
def test_real_config_equals_transformers(path):
    assert_matches(load_model(path), built(path))


@pytest.mark.parametrize("path", [p for p in REAL if p.stem not in NOT_HF], ids=lambda p: p.stem)
def test_config_as_transformers_saves_it_counts_the_same(path):
    """The config a reader's ``save_pretrained`` writes today: transformers 5 renames some keys on the way
    (Qwen3-MoE's ``num_experts`` is written as ``num_local_experts``, its ``attribute_map``), and the library must read
    what it writes, to the same model."""
    _, transformers = _torch_and_transformers()
    cfg = _strip(json.loads(path.read_text()))
    saved = json.loads(transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg).to_json_string())
    spec = model_from_config(saved, name=path.stem, where=f"{path.stem} as saved")
    assert spec.params.total == load_model(path).params.total
    assert spec.layer_params == load_model(path).layer_params


# Totals the model cards and papers publish, and the unit of their last digit (exact counts: unit 1). Model cards
# round or truncate that digit (Qwen2.5-7B's 7,615,616,512 is "7.61B", Qwen3-8B's 8,190,735,360 is "8.2B"), so a
# rounded total must lie within one unit of it.
PUBLISHED = {
    "mistral-7b-v0.1": (7_241_732_096, 1),  # HF safetensors total
    "gpt2": (124_439_808, 1),  # HF safetensors total of openai-community/gpt2
    "gemma-2-9b": (8_324_201_984 + 917_504_000, 1),  # Gemma 2 report (arXiv 2408.00118) Table 1: non-emb. + emb.
    "mixtral-8x7b-v0.1": (46.7e9, 1e8),  # mistral.ai/news/mixtral-of-experts: "46.7B total parameters"
    "qwen2.5-7b": (7.61e9, 1e7),  # Qwen2.5-7B model card: "Number of Parameters: 7.61B"
    "qwen3-8b": (8.2e9, 1e8),  # Qwen3-8B model card: "Number of Parameters: 8.2B"
    "qwen3-30b-a3b": (30.5e9, 1e8),  # Qwen3-30B-A3B model card: "30.5B in total"
    "qwen1.5-moe-a2.7b": (14.3e9, 1e8),  # Qwen1.5-MoE-A2.7B model card: "14.3B parameters in total"
    "deepseek-v2-lite": (15.7e9, 1e8),  # DeepSeek-V2 paper (arXiv 2405.04434) Appendix B: "15.7B"
    "phi-3-mini-4k-instruct": (3.8e9, 1e8),  # Phi-3 report (arXiv 2404.14219): "3.8 billion parameters"
    "olmo-2-1124-7b": (7.3e9, 1e8),  # OLMo 2 model card: "7B" (7.30B in its table)
    "gemma-3-1b-it": (302e6 + 698e6, 1e6),  # Gemma 3 report (arXiv 2503.19786) Table 1: emb. + non-emb.
    "qwen3.5-35b-a3b": (35e9, 1e9),  # Qwen3.5-35B-A3B model card: "35B in total" (text + vision)
}


def _public(name: str):
    path = MODELS_DIR / "public" / f"{name}.json"
    return load_model(path if path.exists() else MODELS_DIR / f"{name}.json")


def _near(count: float, published: float, unit: float) -> bool:
    return abs(count - published) < unit


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_totals(name):
    published, unit = PUBLISHED[name]
    spec = _public(name)
    assert _near(spec.params.total - spec.params.components["mtp"], published, unit)


def test_published_activated_and_split_totals():
    """Model cards' activated counts include the input embedding; report tables split embedding from the rest."""

    def active(spec):
        return spec.flop_params + spec.params.components["embedding"]

    def non_embedding(spec):
        return spec.params.total - spec.params.components["embedding"] - spec.params.components["head"]

    assert _near(active(_public("mixtral-8x7b-v0.1")), 12.9e9, 1e8)  # "12.9B active parameters"
    q30 = _public("qwen3-30b-a3b")
    assert _near(active(q30), 3.3e9, 1e8)  # "3.3B activated"
    assert _near(non_embedding(q30), 29.9e9, 1e8)  # "29.9B non-embedding"
    assert _near(non_embedding(_public("qwen3-8b")), 6.95e9, 1e7)  # "6.95B non-embedding"
    assert _near(non_embedding(_public("qwen2.5-7b")), 6.53e9, 1e7)  # "6.53B non-embedding"
    assert _near(active(_public("qwen1.5-moe-a2.7b")), 2.7e9, 1e8)  # "2.7B activated"
    assert _near(active(load_model("deepseek-v3")), 37e9, 1e9)  # DeepSeek-V3 report: "37B activated"
    g1 = _public("gemma-3-1b-it")
    assert _near(g1.params.components["embedding"], 302e6, 1e6)
    assert _near(g1.params.total - g1.params.components["embedding"], 698e6, 1e6)
    g12 = _public("gemma-3-12b-it")  # Table 1: vision encoder 417M, embedding 1,012M, non-embedding 10,759M
    siglip = g12.params.components["vision"] - (1152 * 3840 + 1152)  # less the projector and its norm
    assert _near(siglip, 417e6, 1e6)
    assert g12.params.components["embedding"] == 262_208 * 3_840 == 1_006_878_720  # Table 1 prints 1,012M
    assert _near(g12.params.total - g12.params.components["vision"] - g12.params.components["embedding"], 10_759e6, 1e6)


# ---------------------------------------------------------------- named differences, checked on their own
def test_deepseek_v3_router_bias_is_a_transformers_buffer():
    model = built(MODELS_DIR / "deepseek-v3.json")
    names = [n for n, _ in model.named_buffers() if n.endswith("e_score_correction_bias")]
    assert len(names) == 58 and sum(b.numel() for n, b in model.named_buffers() if n in names) == 58 * 256


def test_deepseek_v3_mtp_is_one_transformers_moe_layer_plus_its_projection_and_norms():
    spec, model = load_model("deepseek-v3"), built(MODELS_DIR / "deepseek-v3.json")
    h, layer = spec.hidden_size, _numel(_decoder_layers(model)[-1])
    assert spec.params.extra["mtp"] == 2 * h + 2 * h * h + layer + h == 11_610_068_224


def test_qwen3_5_mtp_is_one_transformers_full_attention_layer_plus_fc_and_norms():
    spec, model = load_model("qwen3.8-27b"), built(MODELS_DIR / "qwen3.8-27b.json")
    h = spec.hidden_size
    full = _decoder_layers(model)[3]
    assert hasattr(full, "self_attn")
    assert spec.params.components["mtp"] == 2 * h * h + 3 * h + _numel(full) == 424_699_392
    moe = load_model(MODELS_DIR / "public" / "qwen3.5-35b-a3b.json")
    full = _decoder_layers(built(MODELS_DIR / "public" / "qwen3.5-35b-a3b.json"))[3]
    assert moe.params.components["mtp"] == 2 * moe.hidden_size**2 + 3 * moe.hidden_size + _numel(full)


def test_vision_towers_are_the_multimodal_class_less_the_text_model():
    for path in (MODELS_DIR / "qwen3.8-27b.json", MODELS_DIR / "public" / "gemma-3-12b-it.json"):
        spec, model = load_model(path), built(path)
        text = _numel(model.model.language_model) + (
            0 if spec.tie_word_embeddings else model.get_output_embeddings().weight.numel()
        )
        assert spec.params.components["vision"] == _numel(model) - text


# ---------------------------------------------------------------- the per-layer description
def test_layer_specs_of_the_real_configs():
    gemma2 = load_model(MODELS_DIR / "public" / "gemma-2-9b.json")
    assert [s.sliding_window for s in gemma2.layers[:3]] == [4096, None, 4096]
    assert gemma2.layers[0].norms_per_layer == 4 and gemma2.layers[0].norm_position == "sandwich"
    assert gemma2.layers[0].attn_logit_softcapping == 50.0 and gemma2.final_logit_softcapping == 30.0
    assert gemma2.tie_word_embeddings and gemma2.params.components["head"] == 0
    gemma3 = load_model(MODELS_DIR / "public" / "gemma-3-1b-it.json")
    assert [s.sliding_window for s in gemma3.layers[:6]] == [512] * 5 + [None]
    assert gemma3.layers[0].qk_norm_scope == "head" and gemma3.final_logit_softcapping is None
    mistral = load_model(MODELS_DIR / "public" / "mistral-7b-v0.1.json")
    assert {s.sliding_window for s in mistral.layers} == {4096} and mistral.num_full_attention_layers == 32
    olmo = load_model(MODELS_DIR / "public" / "olmo-2-1124-7b.json")
    assert (olmo.layers[0].qk_norm_scope, olmo.layers[0].qk_norm_width, olmo.layers[0].norm_position) == (
        "projection",
        4096,
        "post",
    )
    qwen = load_model(MODELS_DIR / "public" / "qwen2.5-7b.json")
    assert qwen.layers[0].qkv_bias and not qwen.layers[0].o_bias and qwen.layers[0].sliding_window is None
    moe = load_model(MODELS_DIR / "public" / "qwen1.5-moe-a2.7b.json")
    s = moe.layers[0]
    assert (
        s.num_experts,
        s.experts_per_token,
        s.expert_intermediate_size,
        s.shared_intermediate_size,
        s.shared_expert_gate,
    ) == (60, 4, 1408, 5632, True)
    lite = load_model(MODELS_DIR / "public" / "deepseek-v2-lite.json")
    assert [x.is_moe for x in lite.layers[:2]] == [False, True] and lite.layers[1].q_lora_rank == 0
    assert lite.layers[1].num_shared_experts == 2 and lite.layers[1].shared_intermediate_size == 2 * 1408
    gpt2 = load_model(MODELS_DIR / "public" / "gpt2.json")
    assert (gpt2.layers[0].mlp, gpt2.layers[0].norm, gpt2.position_embedding, gpt2.final_norm) == (
        "plain",
        "layernorm",
        "learned",
        "layernorm",
    )
    q35 = load_model(MODELS_DIR / "public" / "qwen3.5-35b-a3b.json")
    assert q35.num_full_attention_layers == 10 and q35.layers[3].output_gate and q35.num_mtp_layers == 1


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_layer_params_are_the_layer_specs_count(path):
    spec = load_model(path)
    assert spec.layer_params == tuple(s.params for s in spec.layers)
    assert all(counted(spec.hidden_size, s) == s for s in spec.layers)
    assert (
        spec.flop_params
        == sum(s.activated_params for s in spec.layers)
        + spec.params.groups[[g[0] for g in spec.params.groups].index("final_norm")][2]
        + spec.vocab_size * spec.hidden_size
    )
    assert spec.estimated == ()


# ---------------------------------------------------------------- random small configs of every family
def _maybe(rnd: random.Random, cfg: dict, key: str, value) -> None:
    """Set ``key`` half of the time (else leave it out, so the family's default applies)."""
    if rnd.random() < 0.5:
        cfg[key] = value


def _heads(rnd):
    a = rnd.choice([1, 2, 4, 8])
    h = a * rnd.choice([2, 4, 6, 8])
    kv = rnd.choice([k for k in (1, 2, 4, 8) if a % k == 0])
    return h, a, kv


def _dense_base(rnd, mtype: str, kv_required: bool) -> dict:
    h, a, kv = _heads(rnd)
    cfg = {
        "model_type": mtype,
        "hidden_size": h,
        "num_hidden_layers": rnd.randint(1, 5),
        "num_attention_heads": a,
        "intermediate_size": rnd.randint(1, 40),
        "vocab_size": rnd.randint(8, 200),
    }
    if kv_required:
        cfg["num_key_value_heads"] = kv
    else:
        _maybe(rnd, cfg, "num_key_value_heads", kv)
    _maybe(rnd, cfg, "tie_word_embeddings", rnd.random() < 0.5)
    return cfg


def _types(rnd, n, kinds):
    return [rnd.choice(kinds) for _ in range(n)]


def _qwen_window(rnd, cfg):
    _maybe(rnd, cfg, "use_sliding_window", rnd.random() < 0.5)
    _maybe(rnd, cfg, "sliding_window", rnd.randint(1, 64))
    _maybe(rnd, cfg, "max_window_layers", rnd.randint(0, 4))


def _experts(rnd, cfg, key="num_experts", zero_ok=False):
    n = rnd.randint(0 if zero_ok else 1, 6)
    cfg[key] = n
    cfg["num_experts_per_tok"] = rnd.randint(1, max(n, 1))
    cfg["moe_intermediate_size"] = rnd.randint(1, 24)


def gen_llama(rnd):
    cfg = _dense_base(rnd, "llama", False)
    _maybe(rnd, cfg, "head_dim", 2 * rnd.randint(1, 6))
    _maybe(rnd, cfg, "attention_bias", rnd.random() < 0.5)
    _maybe(rnd, cfg, "mlp_bias", rnd.random() < 0.5)
    return cfg


def gen_mistral(rnd):
    cfg = _dense_base(rnd, "mistral", True)
    _maybe(rnd, cfg, "head_dim", 2 * rnd.randint(1, 6))
    _maybe(rnd, cfg, "sliding_window", rnd.choice([None, rnd.randint(1, 99)]))
    return cfg


def gen_mixtral(rnd):
    cfg = gen_mistral(rnd) | {"model_type": "mixtral"}
    n = rnd.randint(1, 6)
    cfg.update(num_local_experts=n, num_experts_per_tok=rnd.randint(1, n))
    return cfg


def gen_phi3(rnd):
    cfg = _dense_base(rnd, "phi3", False) | {"pad_token_id": None, "eos_token_id": None, "bos_token_id": None}
    _maybe(rnd, cfg, "sliding_window", rnd.choice([None, rnd.randint(1, 99)]))
    _maybe(rnd, cfg, "attention_bias", False)
    return cfg


def gen_olmo2(rnd):
    cfg = _dense_base(rnd, "olmo2", False) | {"eos_token_id": None, "pad_token_id": None}
    _maybe(rnd, cfg, "attention_bias", rnd.random() < 0.5)
    return cfg


def gen_qwen2(rnd):
    cfg = _dense_base(rnd, "qwen2", True)
    _maybe(rnd, cfg, "head_dim", 2 * rnd.randint(1, 6))
    _qwen_window(rnd, cfg)
    _maybe(rnd, cfg, "layer_types", _types(rnd, cfg["num_hidden_layers"], ["full_attention", "sliding_attention"]))
    return cfg


def gen_qwen3(rnd):
    cfg = _dense_base(rnd, "qwen3", True) | {"head_dim": 2 * rnd.randint(1, 6)}
    _maybe(rnd, cfg, "attention_bias", rnd.random() < 0.5)
    _qwen_window(rnd, cfg)
    _maybe(rnd, cfg, "layer_types", _types(rnd, cfg["num_hidden_layers"], ["full_attention", "sliding_attention"]))
    return cfg


def _sparse_pattern(rnd, cfg):
    _maybe(rnd, cfg, "decoder_sparse_step", rnd.randint(1, 3))
    _maybe(
        rnd,
        cfg,
        "mlp_only_layers",
        sorted(rnd.sample(range(cfg["num_hidden_layers"]), rnd.randint(0, cfg["num_hidden_layers"]))),
    )


def gen_qwen2_moe(rnd):
    cfg = _dense_base(rnd, "qwen2_moe", True)
    _maybe(rnd, cfg, "head_dim", 2 * rnd.randint(1, 6))
    _maybe(rnd, cfg, "qkv_bias", rnd.random() < 0.5)
    _experts(rnd, cfg, zero_ok=True)
    cfg["shared_expert_intermediate_size"] = rnd.randint(0, 24)
    _sparse_pattern(rnd, cfg)
    _qwen_window(rnd, cfg)
    return cfg


def gen_qwen3_moe(rnd):
    cfg = _dense_base(rnd, "qwen3_moe", True)
    _maybe(rnd, cfg, "head_dim", 2 * rnd.randint(1, 6))
    _maybe(rnd, cfg, "attention_bias", rnd.random() < 0.5)
    _experts(rnd, cfg, zero_ok=True)
    _sparse_pattern(rnd, cfg)
    _maybe(rnd, cfg, "use_sliding_window", rnd.random() < 0.5)
    _maybe(rnd, cfg, "sliding_window", rnd.randint(1, 64))
    return cfg


def _gemma_base(rnd, mtype):
    cfg = _dense_base(rnd, mtype, True) | {"head_dim": 2 * rnd.randint(1, 6)}
    cfg["vocab_size"] = max(cfg["vocab_size"], 3)  # Gemma's pad/bos/eos ids 0, 2, 1
    _maybe(rnd, cfg, "attention_bias", rnd.random() < 0.5)
    _maybe(rnd, cfg, "sliding_window", rnd.randint(1, 64))
    _maybe(rnd, cfg, "layer_types", _types(rnd, cfg["num_hidden_layers"], ["full_attention", "sliding_attention"]))
    return cfg


def gen_gemma2(rnd):
    cfg = _gemma_base(rnd, "gemma2")
    _maybe(rnd, cfg, "attn_logit_softcapping", rnd.choice([None, 20.0]))
    _maybe(rnd, cfg, "final_logit_softcapping", rnd.choice([None, 15.0]))
    return cfg


def gen_gemma3_text(rnd):
    cfg = _gemma_base(rnd, "gemma3_text")
    _maybe(rnd, cfg, "sliding_window_pattern", rnd.randint(1, 4))
    _maybe(rnd, cfg, "use_bidirectional_attention", rnd.random() < 0.3)
    return cfg


def gen_gemma3(rnd):
    text = gen_gemma3_text(rnd)
    vw = rnd.choice([1, 2]) * 8
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": vw,
        "intermediate_size": rnd.randint(1, 20),
        "num_hidden_layers": rnd.randint(1, 2),
        "num_attention_heads": rnd.choice([1, 2]),
        "image_size": rnd.choice([8, 12, 16]),
        "patch_size": rnd.choice([2, 4]),
    }
    _maybe(rnd, vision, "vision_use_head", rnd.random() < 0.5)
    _maybe(rnd, vision, "num_channels", rnd.randint(1, 3))
    cfg = {
        "model_type": "gemma3",
        "text_config": text,
        "vision_config": vision,
        "mm_tokens_per_image": 4,
        "image_token_index": 0,
        "boi_token_index": 0,
        "eoi_token_index": 0,
    }
    if "tie_word_embeddings" in text:  # a multimodal config's flag, set alike at both levels
        cfg["tie_word_embeddings"] = text["tie_word_embeddings"]
    return cfg


def _qwen3_5(rnd, mtype, moe):
    t = _dense_base(rnd, mtype + "_text", True) | {"head_dim": 2 * rnd.randint(1, 6)}
    del t["model_type"]
    n = t["num_hidden_layers"]
    if rnd.random() < 0.5:
        t["layer_types"] = _types(rnd, n, ["full_attention", "linear_attention"])
    else:
        t["full_attention_interval"] = rnd.randint(1, 3)
    t.update(
        linear_num_key_heads=rnd.randint(1, 3),
        linear_key_head_dim=rnd.randint(1, 6),
        linear_value_head_dim=rnd.randint(1, 6),
        linear_conv_kernel_dim=rnd.randint(1, 4),
    )
    t["linear_num_value_heads"] = t["linear_num_key_heads"] * rnd.randint(1, 2)
    _maybe(rnd, t, "attention_bias", rnd.random() < 0.5)
    _maybe(rnd, t, "attn_output_gate", True)
    _maybe(rnd, t, "mtp_num_hidden_layers", rnd.randint(0, 2))
    if moe:
        del t["intermediate_size"]
        _experts(rnd, t)
        t["shared_expert_intermediate_size"] = rnd.randint(0, 24)
    if rnd.random() < 0.25:  # a text-only checkpoint: the text model at the top level, typed ..._text
        return t | {"model_type": mtype + "_text"}
    cfg = {"model_type": mtype, "text_config": t}
    if "tie_word_embeddings" in t:  # a multimodal config's flag, set alike at both levels
        cfg["tie_word_embeddings"] = t["tie_word_embeddings"]
    if rnd.random() < 0.5:
        vw = rnd.choice([1, 2]) * 8
        cfg["vision_config"] = {
            "depth": rnd.randint(1, 2),
            "hidden_size": vw,
            "intermediate_size": rnd.randint(1, 20),
            "num_heads": rnd.choice([1, 2]),
            "patch_size": rnd.choice([2, 4]),
            "temporal_patch_size": rnd.randint(1, 2),
            "spatial_merge_size": rnd.randint(1, 2),
            "num_position_embeddings": rnd.choice([4, 16]),
            "out_hidden_size": t["hidden_size"],
        }
    return cfg


def gen_qwen3_5(rnd):
    return _qwen3_5(rnd, "qwen3_5", moe=False)


def gen_qwen3_5_moe(rnd):
    return _qwen3_5(rnd, "qwen3_5_moe", moe=True)


def _deepseek(rnd, mtype):
    h, a, _ = _heads(rnd)
    n_layers = rnd.randint(1, 5)
    cfg = {
        "model_type": mtype,
        "hidden_size": h,
        "num_hidden_layers": n_layers,
        "num_attention_heads": a,
        "vocab_size": rnd.randint(8, 200),
        "intermediate_size": rnd.randint(1, 40),
        "q_lora_rank": rnd.choice([None, rnd.randint(1, 16)]),
        "kv_lora_rank": rnd.randint(1, 16),
        "qk_nope_head_dim": rnd.randint(1, 8),
        "qk_rope_head_dim": 2 * rnd.randint(1, 4),
        "v_head_dim": rnd.randint(1, 8),
        "n_routed_experts": rnd.randint(1, 6),
        "moe_intermediate_size": rnd.randint(1, 24),
        "first_k_dense_replace": rnd.randint(0, n_layers),
        "n_group": 1,
        "topk_group": 1,
    }
    cfg["num_experts_per_tok"] = rnd.randint(1, cfg["n_routed_experts"])
    _maybe(rnd, cfg, "n_shared_experts", rnd.randint(0, 2))
    _maybe(rnd, cfg, "attention_bias", rnd.random() < 0.5)
    _maybe(rnd, cfg, "tie_word_embeddings", rnd.random() < 0.5)
    _maybe(rnd, cfg, "moe_layer_freq", 1)
    return cfg


def gen_deepseek_v2(rnd):
    cfg = _deepseek(rnd, "deepseek_v2")
    _maybe(rnd, cfg, "mlp_bias", rnd.random() < 0.5)
    return cfg


def gen_deepseek_v3(rnd):
    cfg = _deepseek(rnd, "deepseek_v3")
    _maybe(rnd, cfg, "num_nextn_predict_layers", rnd.randint(0, 1))
    return cfg


def gen_gpt2(rnd):
    h, a, _ = _heads(rnd)
    cfg = {
        "model_type": "gpt2",
        "n_embd": h,
        "n_head": a,
        "n_layer": rnd.randint(1, 5),
        "n_positions": rnd.randint(1, 64),
        "vocab_size": rnd.randint(8, 200),
        "bos_token_id": 0,
        "eos_token_id": 0,
    }
    _maybe(rnd, cfg, "n_inner", rnd.choice([None, rnd.randint(1, 40)]))
    _maybe(rnd, cfg, "tie_word_embeddings", rnd.random() < 0.5)
    return cfg


GENERATORS = {name[4:]: fn for name, fn in globals().items() if name.startswith("gen_")}
RANDOM_PER_FAMILY = int(os.environ.get("MESHPLAN_RANDOM_CONFIGS", "4"))  # 60 per family pass too (1,020)


def test_every_family_has_a_generator_and_a_real_config():
    assert sorted(GENERATORS) == sorted(FAMILIES)
    real = {load_model(p).family for p in REAL}
    assert real == set(FAMILIES)


@pytest.mark.parametrize("family,seed", [(f, s) for f in sorted(GENERATORS) for s in range(RANDOM_PER_FAMILY)])
def test_random_config_equals_transformers(family, seed):
    cfg = GENERATORS[family](random.Random(f"{family}-{seed}"))
    spec = model_from_config(cfg, name=f"{family}-{seed}")
    assert spec.family == family
    assert_matches(spec, build(cfg))


# ---------------------------------------------------------------- types only transformers knows: its fallback
FALLBACK = {
    "olmoe": {
        "model_type": "olmoe",
        "hidden_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 16,
        "vocab_size": 50,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "pad_token_id": 1,
        "eos_token_id": 2,
    },
    "granite": {
        "model_type": "granite",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 16,
        "vocab_size": 50,
        "tie_word_embeddings": True,
    },
    "gemma": {
        "model_type": "gemma",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "intermediate_size": 16,
        "vocab_size": 50,
    },
    "qwen3_next": {
        "model_type": "qwen3_next",
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 16,
        "vocab_size": 50,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 8,
        "shared_expert_intermediate_size": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 4,
        "linear_value_head_dim": 4,
        "linear_conv_kernel_dim": 2,
    },
}


@pytest.mark.parametrize("mtype", sorted(FALLBACK))
def test_fallback_counts_exactly_and_names_its_estimates(mtype):
    from meshplan.spec.models.fallback import ESTIMATED

    cfg = FALLBACK[mtype]
    assert mtype not in FAMILIES
    spec, model = model_from_config(cfg, name=mtype), build(cfg)
    layers = _decoder_layers(model)
    assert spec.params.total == sum(p.numel() for p in model.parameters())
    assert spec.layer_params == tuple(sum(p.numel() for p in layer.parameters()) for layer in layers)
    assert spec.params.components["embedding"] == model.get_input_embeddings().weight.numel()
    assert sum(spec.params.components.values()) == spec.params.total == sum(n * c for _, n, c in spec.params.groups)
    assert spec.estimated == ESTIMATED and spec.family == mtype
    assert spec.is_moe == ("num_experts" in cfg)
