"""Exact parameter counts against shared/reference/param-counts.md, and the loader's errors.

Every number here is an integer from the reference; the library must reproduce it exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshplan import available_models, load_model, model_from_config
from meshplan.spec.model import COMPONENT_KEYS, MODELS_DIR

REFERENCE = ["deepseek-v3", "llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "qwen3.8-27b", "small-3.7m"]
BOOK = ["qwen3-30b-a3b", "qwen3-8b"]  # the "Plan your own model" page: one dense, one MoE config not in the book yet
SHIPPED = sorted(REFERENCE + BOOK)
PUBLIC = sorted(p.stem for p in (MODELS_DIR / "public").glob("*.json"))


def _groups(spec) -> dict[str, tuple[int, int]]:
    return {name: (count, per) for name, count, per in spec.params.groups}


def _config(name: str) -> dict:
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def test_shipped_models_are_the_six_of_the_reference_and_the_two_of_the_book():
    assert available_models() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED + [f"public/{n}" for n in PUBLIC])
def test_every_config_file_records_its_source(name):
    cfg = json.loads((MODELS_DIR / f"{name}.json").read_text())
    assert isinstance(cfg["source"], str) and len(cfg["source"]) > 40


# ---------------------------------------------------------------- anchor: Qwen3.8-27B
ANCHOR_TOTAL = 27_781_427_952
ANCHOR_EMB = 1_271_398_400
ANCHOR_FULL_LAYER = 372_255_232
ANCHOR_LINEAR_LAYER = 383_273_184
ANCHOR_TEXT = 26_895_998_464
ANCHOR_VISION = 460_730_096
ANCHOR_MTP = 424_699_392


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


def test_anchor_total(anchor):
    assert anchor.params.total == ANCHOR_TOTAL
    assert f"{anchor.params.total:,}" == "27,781,427,952"


def test_anchor_rows(anchor):
    g = _groups(anchor)
    assert g["embedding"] == (1, ANCHOR_EMB)
    assert g["head"] == (1, ANCHOR_EMB)  # untied
    assert g["full_attention_layers"] == (16, ANCHOR_FULL_LAYER)
    assert g["linear_attention_layers"] == (48, ANCHOR_LINEAR_LAYER)
    assert g["final_norm"] == (1, 5_120)
    assert g["vision_tower"] == (1, ANCHOR_VISION)
    assert g["mtp"] == (1, ANCHOR_MTP)
    # the layer totals of param-counts.md, from the library's per-layer description
    assert sum(L.params for L in anchor.layers if L.mixer == "attention") == 5_956_083_712
    assert sum(L.params for L in anchor.layers if L.mixer == "linear_attention") == 18_397_112_832
    c = anchor.params.components
    assert c["embedding"] == ANCHOR_EMB == 248_320 * 5_120
    assert c["head"] == ANCHOR_EMB
    assert c["vision"] == ANCHOR_VISION
    assert c["mtp"] == ANCHOR_MTP
    assert c["routed_experts"] == 0


def test_anchor_text_model(anchor):
    c = anchor.params.components
    text = anchor.params.total - c["vision"] - c["mtp"]
    assert text == ANCHOR_TEXT
    g = _groups(anchor)
    assert (
        g["embedding"][1]
        + g["head"][1]
        + 16 * g["full_attention_layers"][1]
        + 48 * g["linear_attention_layers"][1]
        + g["final_norm"][1]
    ) == ANCHOR_TEXT
    # the text model is also the sum of the decoder layers, both embeddings and the final norm
    assert sum(anchor.layer_params) + 2 * ANCHOR_EMB + 5_120 == ANCHOR_TEXT


def test_anchor_totals_seen_in_the_wild(anchor):
    c = anchor.params.components
    text = anchor.params.total - c["vision"] - c["mtp"]
    assert text + c["vision"] == 27_356_728_560  # what transformers instantiates
    assert text + c["mtp"] == 27_320_697_856  # GGUF-style


def test_anchor_flop_params(anchor):
    # text model without the input embedding
    assert anchor.flop_params == 25_624_600_064
    assert anchor.flop_params == ANCHOR_TEXT - ANCHOR_EMB


def test_anchor_layer_layout(anchor):
    # 3 x linear attention then 1 x full attention, 16 times
    assert anchor.num_layers == 64
    assert anchor.num_full_attention_layers == 16
    assert anchor.layer_params == tuple(
        ANCHOR_FULL_LAYER if (i + 1) % 4 == 0 else ANCHOR_LINEAR_LAYER for i in range(64)
    )
    assert anchor.kv_width == 2 * 4 * 256
    assert (anchor.hidden_size, anchor.num_attention_heads, anchor.num_key_value_heads, anchor.head_dim) == (
        5_120,
        24,
        4,
        256,
    )
    assert (anchor.linear_num_key_heads, anchor.linear_num_value_heads) == (16, 48)


def test_reference_breakdown_adds_up_to_the_library_rows(anchor):
    """The per-projection numbers of param-counts.md add up to the per-layer rows the library gives."""
    mlp = 3 * 5_120 * 17_408
    assert mlp == 267_386_880
    full = 62_914_560 + 2 * 5_242_880 + 31_457_280 + 2 * 256 + mlp + 2 * 5_120
    lin = 52_428_800 + 31_457_280 + 2 * 245_760 + 40_960 + 48 + 48 + 128 + 31_457_280 + mlp + 2 * 5_120
    vision = 1_770_624 + 2_654_208 + 27 * 15_239_504 + 44_838_656
    mtp = 52_428_800 + 15_360 + full
    g = _groups(anchor)
    assert (full, lin, vision, mtp) == (
        g["full_attention_layers"][1],
        g["linear_attention_layers"][1],
        g["vision_tower"][1],
        g["mtp"][1],
    )


# ---------------------------------------------------------------- DeepSeek-V3
@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


def test_deepseek_v3_main_model(dsv3):
    p = dsv3.params
    assert p.total == 671_026_419_200
    g = _groups(dsv3)
    assert g["embedding"] == (1, 926_679_040) and 926_679_040 == 129_280 * 7_168
    assert g["head"] == (1, 926_679_040)
    assert g["dense_layers"] == (3, 583_483_392)
    assert g["moe_layers"] == (58, 11_507_286_272)
    assert g["final_norm"] == (1, 7_168)
    assert 3 * 583_483_392 == 1_750_450_176 and 58 * 11_507_286_272 == 667_422_603_776
    # MLA attention per layer: the reference's projections
    mla = 11_010_048 + 1_536 + 37_748_736 + 4_128_768 + 512 + 16_777_216 + 117_440_512
    assert mla == 187_107_328
    assert p.components["attention"] == 61 * mla


def test_deepseek_v3_routed_experts(dsv3):
    routed = 58 * 256 * 3 * 7_168 * 2_048
    assert routed == 653_908_770_816
    assert dsv3.params.components["routed_experts"] == routed
    assert dsv3.routed_expert_params == routed
    assert sum(dsv3.layer_expert_params) == routed
    assert dsv3.layer_expert_params == (0,) * 3 + (256 * 3 * 7_168 * 2_048,) * 58
    assert (dsv3.num_experts, dsv3.experts_per_token, dsv3.num_moe_layers) == (256, 8, 58)


def test_deepseek_v3_mtp_is_extra_not_in_total(dsv3):
    assert dict(dsv3.params.extra) == {"mtp": 11_610_068_224}
    assert dsv3.params.components["mtp"] == 0


def test_deepseek_v3_activated(dsv3):
    assert dsv3.flop_params == 36_625_618_432  # without the input embedding
    assert dsv3.flop_params + dsv3.params.components["embedding"] == 37_552_297_472


# ---------------------------------------------------------------- Llama 3.1
LLAMA = {
    "llama-3.1-8b": (525_336_576, 218_112_000, 32, 8_030_261_248, 4_096),
    "llama-3.1-70b": (1_050_673_152, 855_654_400, 80, 70_553_706_496, 8_192),
    "llama-3.1-405b": (2_101_346_304, 3_187_703_808, 126, 405_853_388_800, 16_384),
}


@pytest.mark.parametrize("name", sorted(LLAMA))
def test_llama_rows(name):
    emb, layer, n_layers, total, h = LLAMA[name]
    spec = load_model(name)
    assert spec.params.total == total
    g = _groups(spec)
    assert g["embedding"] == (1, emb)
    assert g["head"] == (1, emb)
    assert g["layers"] == (n_layers, layer)
    assert g["final_norm"] == (1, h)
    assert spec.num_layers == n_layers and spec.layer_params == (layer,) * n_layers
    assert 2 * emb + n_layers * layer + h == total
    assert spec.num_key_value_heads == 8


def test_llama_405b_with_16_kv_heads():
    cfg = _config("llama-3.1-405b")
    assert cfg["num_key_value_heads"] == 8
    cfg["num_key_value_heads"] = 16
    spec = model_from_config(cfg, name="llama-3.1-405b-kv16")
    assert spec.params.total == 410_081_247_232
    assert spec.num_key_value_heads == 16


# ---------------------------------------------------------------- the small model and GPT-2
def test_small_model():
    spec = load_model("small-3.7m")
    assert spec.params.total == 3_688_704
    g = _groups(spec)
    assert g["embedding"] == (1, 2_048 * 256) == (1, 524_288)
    assert g["position_embedding"] == (1, 64 * 256) == (1, 16_384)
    assert g["head"] == (1, 0)  # tied
    assert g["layers"] == (4, 786_944)
    assert g["final_norm"] == (1, 256)
    assert 4 * 256**2 + 2 * 256 * 1_024 + 2 * 256 == 786_944


GPT2_124M = {
    "model_type": "gpt2",
    "vocab_size": 50_257,
    "n_positions": 1_024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "tie_word_embeddings": True,
}


def test_gpt2_124m_with_biases_and_layernorm():
    spec = model_from_config(dict(GPT2_124M), name="gpt2")
    assert spec.params.total == 124_439_808
    g = _groups(spec)
    assert g["layers"] == (12, 7_087_872)
    assert g["final_norm"] == (1, 2 * 768)  # LayerNorm weight + bias
    assert g["embedding"] == (1, 50_257 * 768) and g["position_embedding"] == (1, 1_024 * 768)


def test_gpt2_defaults_are_bias_and_layernorm():
    explicit = model_from_config({**GPT2_124M, "bias": True, "norm": "layernorm", "n_inner": 3_072})
    assert explicit.params.total == 124_439_808


# ---------------------------------------------------------------- the book's two new configs
def test_qwen3_8b_rows():
    """Qwen3-8B: 36 layers of GQA (32 heads, 8 KV heads of 128) with per-head q/k norms and a SwiGLU MLP."""
    spec = load_model("qwen3-8b")
    emb = 151_936 * 4_096
    attention = 4_096 * 4_096 + 2 * 4_096 * 1_024 + 4_096 * 4_096 + 2 * 128  # q, k, v, o, q_norm + k_norm
    layer = attention + 3 * 4_096 * 12_288 + 2 * 4_096
    assert (emb, layer) == (622_329_856, 192_946_432)
    assert _groups(spec) == {"embedding": (1, emb), "head": (1, emb), "layers": (36, layer), "final_norm": (1, 4_096)}
    assert spec.params.total == 2 * emb + 36 * layer + 4_096 == 8_190_735_360
    assert spec.flop_params == spec.params.total - emb
    s = spec.layers[0]
    assert (s.qk_norm, s.qk_norm_scope, s.qk_norm_width, s.qkv_bias, s.num_kv_heads) == (True, "head", 128, False, 8)


def test_qwen3_30b_a3b_rows():
    """Qwen3-30B-A3B: 48 MoE layers of 128 SwiGLU experts of width 768 (8 per token), no shared expert."""
    spec = load_model("qwen3-30b-a3b")
    emb = 151_936 * 2_048
    attention = 2_048 * 4_096 + 2 * 2_048 * 512 + 4_096 * 2_048 + 2 * 128
    expert = 3 * 2_048 * 768
    layer = attention + 128 * 2_048 + 128 * expert + 2 * 2_048
    assert (attention, expert, layer) == (18_874_624, 4_718_592, 623_120_640)
    assert _groups(spec) == {"embedding": (1, emb), "head": (1, emb), "layers": (48, layer), "final_norm": (1, 2_048)}
    assert spec.params.total == 2 * emb + 48 * layer + 2_048 == 30_532_122_624
    assert spec.routed_expert_params == 48 * 128 * expert == spec.params.components["routed_experts"]
    assert (spec.num_experts, spec.experts_per_token, spec.num_moe_layers) == (128, 8, 48)
    assert spec.flop_params == 48 * (layer - 120 * expert) + 2_048 + emb == 3_041_867_776


# ---------------------------------------------------------------- the per-layer description of the reference models
def test_layer_specs_of_the_reference_models(anchor, dsv3):
    full, linear = anchor.layers[3], anchor.layers[0]
    assert (full.mixer, full.output_gate, full.qk_norm_width, full.num_heads, full.num_kv_heads) == (
        "attention",
        True,
        256,
        24,
        4,
    )
    assert (linear.mixer, linear.linear_num_key_heads, linear.linear_num_value_heads, linear.linear_conv_kernel) == (
        "linear_attention",
        16,
        48,
        4,
    )
    assert full.params == ANCHOR_FULL_LAYER and linear.params == ANCHOR_LINEAR_LAYER
    assert anchor.num_mtp_layers == 1 and not anchor.tie_word_embeddings
    dense, moe = dsv3.layers[2], dsv3.layers[3]
    assert (dense.mixer, dense.q_lora_rank, dense.kv_lora_rank, dense.qk_rope_head_dim, dense.intermediate_size) == (
        "mla",
        1_536,
        512,
        64,
        18_432,
    )
    assert (
        moe.num_experts,
        moe.experts_per_token,
        moe.num_shared_experts,
        moe.shared_intermediate_size,
        moe.router_bias,
        moe.expert_params,
    ) == (256, 8, 1, 2_048, True, 256 * 3 * 7_168 * 2_048)
    assert moe.intermediate_size == moe.expert_intermediate_size == 2_048  # each routed expert's width
    small = load_model("small-3.7m")
    assert (small.layers[0].mlp, small.layers[0].norm, small.position_embedding, small.tie_word_embeddings) == (
        "plain",
        "rmsnorm",
        "learned",
        True,
    )


# ---------------------------------------------------------------- both breakdowns sum to the total
ALL_SPECS = SHIPPED + ["gpt2-124m", "llama-405b-kv16"] + [f"public/{n}" for n in PUBLIC]


def _spec(name):
    if name == "gpt2-124m":
        return model_from_config(dict(GPT2_124M), name=name)
    if name == "llama-405b-kv16":
        return model_from_config({**_config("llama-3.1-405b"), "num_key_value_heads": 16}, name=name)
    if name.startswith("public/"):
        return load_model(MODELS_DIR / f"{name}.json")
    return load_model(name)


@pytest.mark.parametrize("name", ALL_SPECS)
def test_components_and_groups_sum_to_total(name):
    p = _spec(name).params
    assert tuple(p.components) == COMPONENT_KEYS
    assert sum(p.components.values()) == p.total
    assert sum(count * per for _, count, per in p.groups) == p.total
    assert all(isinstance(v, int) and v >= 0 for v in p.components.values())


def test_public_configs_load_by_stem_under_their_folder():
    spec = load_model("public/mixtral-8x7b-v0.1")
    assert spec.name == "mixtral-8x7b-v0.1" and spec.params.total == 46_702_792_704
    assert load_model(MODELS_DIR / "public" / "mixtral-8x7b-v0.1.json").params == spec.params


@pytest.mark.parametrize("name", SHIPPED)
def test_load_by_path_equals_load_by_name(name):
    by_name = load_model(name)
    by_path = load_model(MODELS_DIR / f"{name}.json")
    assert by_path.params == by_name.params
    assert by_path.name == name


# ---------------------------------------------------------------- loader errors
def test_unknown_model_name():
    with pytest.raises(ValueError) as exc:
        load_model("no-such-model")
    msg = str(exc.value)
    assert "unknown model 'no-such-model'" in msg
    assert "qwen3.8-27b" in msg  # lists the known ones


def test_malformed_json(tmp_path: Path):
    path = tmp_path / "broken.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096,')
    with pytest.raises(ValueError) as exc:
        load_model(str(path))
    msg = str(exc.value)
    assert "malformed config" in msg and "invalid JSON" in msg and str(path) in msg


def test_config_missing_hidden_size(tmp_path: Path):
    cfg = _config("llama-3.1-8b")
    del cfg["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as exc:
        load_model(path)
    assert "missing key 'hidden_size'" in str(exc.value)
    assert str(path) in str(exc.value)
    with pytest.raises(ValueError, match="missing key 'hidden_size'"):
        model_from_config(cfg)


def test_qwen_config_missing_hidden_size():
    cfg = _config("qwen3.8-27b")
    del cfg["text_config"]["hidden_size"]
    with pytest.raises(ValueError, match=r"missing key 'text_config\.hidden_size'"):
        model_from_config(cfg)


def test_unsupported_model_type(tmp_path: Path):
    path = tmp_path / "nofamily.json"
    path.write_text(json.dumps({"model_type": "no_such_family", "hidden_size": 768}))
    with pytest.raises(ValueError) as exc:
        load_model(path)
    msg = str(exc.value)
    assert "unsupported model_type 'no_such_family'" in msg and str(path) in msg
    assert "llama" in msg and "deepseek_v3" in msg and "qwen3_moe" in msg


def test_type_transformers_knows_goes_to_its_fallback(tmp_path: Path):
    """mamba is not counted analytically; transformers knows it, and its fallback names the key it needs."""
    path = tmp_path / "mamba.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768}))
    with pytest.raises(
        ValueError,
        match=r"unsupported model_type 'mamba' .* transformers knows 'mamba' but cannot "
        "count this config: missing key 'num_hidden_layers'",
    ):
        load_model(path)


def test_bad_values_are_named():
    cfg = {**_config("llama-3.1-8b"), "num_hidden_layers": 0}
    with pytest.raises(ValueError, match="'num_hidden_layers' must be a positive integer, got 0"):
        model_from_config(cfg)
    with pytest.raises(ValueError, match="expected a JSON object"):
        model_from_config([1, 2])  # type: ignore[arg-type]  # not a mapping, on purpose
    with pytest.raises(ValueError, match="'norm' must be one of 'layernorm', 'rmsnorm', got 'batchnorm'"):
        model_from_config({**GPT2_124M, "norm": "batchnorm"})


def test_gpt2_n_inner_null_means_4h():
    assert model_from_config({**GPT2_124M, "n_inner": None}).params.total == 124_439_808


@pytest.mark.parametrize("bad", ["big", -5, 2.5])
def test_gpt2_n_inner_is_validated(bad):
    """gpt2's n_inner is validated: a string, -5 or 2.5 gives a ValueError naming the key, not a TypeError or a
    fractional parameter count."""
    with pytest.raises(ValueError, match="'n_inner'"):
        model_from_config({**GPT2_124M, "n_inner": bad})


def test_qwen_text_config_must_be_an_object():
    """A non-object text_config (e.g. 5) gives a ValueError naming it, not a TypeError."""
    with pytest.raises(ValueError, match="text_config"):
        model_from_config({"model_type": "qwen3_5", "text_config": 5})


@pytest.mark.parametrize("key", ["num_key_value_heads", "head_dim"])
def test_llama_zero_heads_rejected(key):
    """num_key_value_heads and head_dim must be positive: 0 KV heads would divide by zero in evaluate() once
    cp > 1."""
    with pytest.raises(ValueError, match=f"'{key}' must be a positive integer"):
        model_from_config({**_config("llama-3.1-8b"), key: 0})
