"""Config loading refuses what it cannot count right, with one line naming the key and the file (issue 10).

Every field read is type- and range-checked (a JSON boolean is not the string "false"; integers are bounded so that
2**63 layers or a 400-digit width are a message, not an OverflowError later); keys that change the count but that
the family does not have (experts in a config labelled ``llama``) are refused by name; unreadable files (binary,
a directory, a path too long, JSON nested too deeply) are a message. A fuzz test mutates real configs and checks
that the loader either counts (the breakdowns still add up) or raises one short ValueError line, quickly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplan.spec.model import FAMILIES, MODELS_DIR, load_model, model_from_config
from meshplan.spec.models.fields import COUNT_KEYS

PUBLIC = MODELS_DIR / "public"


def _cfg(path: Path) -> dict:
    return json.loads(path.read_text())


def _refused(cfg, *needles: str) -> str:
    with pytest.raises(ValueError) as exc:
        model_from_config(cfg, name="bad")
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 600, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def _write(tmp_path: Path, cfg, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return path


# ---------------------------------------------------------------- types and ranges
LLAMA = _cfg(MODELS_DIR / "llama-3.1-8b.json")


@pytest.mark.parametrize("value", ["false", "true", 0, 1, None, [], {}])
def test_booleans_must_be_json_booleans(value):
    _refused({**LLAMA, "tie_word_embeddings": value}, "'tie_word_embeddings' must be true or false")
    _refused({**LLAMA, "attention_bias": value}, "'attention_bias' must be true or false")


def test_tie_as_a_string_is_not_silently_true():
    # the case: "false" (a string) used to count as true and drop the 525M-parameter head
    assert load_model("llama-3.1-8b").params.components["head"] == 525_336_576
    _refused({**LLAMA, "tie_word_embeddings": "false"}, "'bad'", "got 'false'")


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("num_hidden_layers", 2**63, "'num_hidden_layers' = 9223372036854775808 is too large (at most 65,536)"),
        ("hidden_size", 10**400, "'hidden_size' = an integer of 1329 bits is too large"),
        ("vocab_size", 2**41, "'vocab_size' = 2199023255552 is too large (at most 1,099,511,627,776)"),
        ("intermediate_size", -1, "'intermediate_size' must be a positive integer, got -1"),
        ("num_attention_heads", 32.0, "'num_attention_heads' must be a positive integer, got 32.0"),
        ("num_attention_heads", True, "'num_attention_heads' must be a positive integer, got True"),
        ("head_dim", "128", "'head_dim' must be a positive integer, got '128'"),
        ("max_position_embeddings", 0, "'max_position_embeddings' must be a positive integer, got 0"),
    ],
)
def test_integers_are_typed_and_bounded(key, value, needle):
    _refused({**LLAMA, key: value}, needle)


def test_huge_integer_in_a_file_is_a_message_not_an_overflow(tmp_path):
    text = (MODELS_DIR / "llama-3.1-8b.json").read_text().replace('"hidden_size": 4096', '"hidden_size": 1' + "0" * 400)
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=r"'hidden_size' = an integer of 1329 bits is too large") as exc:
        load_model(path)
    assert str(path) in str(exc.value)
    digits = _write(tmp_path, text.replace("1" + "0" * 400, "1" + "0" * 5000), "digits.json")
    with pytest.raises(ValueError, match="invalid JSON"):  # beyond Python's 4,300-digit int() limit
        load_model(digits)


@pytest.mark.parametrize("value", [[1, 2], {"type": "llama"}, 7, True])
def test_model_type_must_be_a_string(value):
    _refused({**LLAMA, "model_type": value}, "'model_type' must be a string")


def test_missing_model_type_lists_the_families():
    cfg = {k: v for k, v in LLAMA.items() if k != "model_type"}
    _refused(cfg, "missing key 'model_type'", "qwen3_moe", "deepseek_v3")


def test_qwen_layer_types_must_be_strings_of_known_kinds():
    cfg = _cfg(MODELS_DIR / "qwen3.8-27b.json")
    cfg["text_config"]["layer_types"] = [{"type": "full_attention"}] * 64
    _refused(cfg, "'text_config.layer_types[0]' must be one of 'full_attention', 'linear_attention'")
    cfg["text_config"]["layer_types"] = ["full_attention"] * 63
    _refused(cfg, "'text_config.layer_types' must list 64 layer types (one per layer), got a list of 63")
    gemma = _cfg(PUBLIC / "gemma-2-9b.json") | {"layer_types": ["sliding_attention", "linear_attention"] * 21}
    _refused(gemma, "'layer_types[1]' must be one of 'full_attention', 'sliding_attention', got 'linear_attention'")


def test_deepseek_moe_layer_freq_zero_and_missing_q_lora_rank():
    cfg = _cfg(MODELS_DIR / "deepseek-v3.json")
    _refused({**cfg, "moe_layer_freq": 0}, "'moe_layer_freq' must be a positive integer, got 0")
    no_rank = {k: v for k, v in cfg.items() if k != "q_lora_rank"}
    _refused(no_rank, "missing key 'q_lora_rank' (null for an uncompressed")
    _refused({**cfg, "num_experts_per_tok": 300}, "'num_experts_per_tok' = 300 exceeds 'n_routed_experts' = 256")


@pytest.mark.parametrize(
    "path, section, expert_key, n",
    [
        (MODELS_DIR / "deepseek-v3.json", None, "n_routed_experts", 256),
        (PUBLIC / "mixtral-8x7b-v0.1.json", None, "num_local_experts", 8),
        (PUBLIC / "qwen1.5-moe-a2.7b.json", None, "num_experts", 60),
        (MODELS_DIR / "qwen3-30b-a3b.json", None, "num_experts", 128),
        (PUBLIC / "qwen3.5-35b-a3b.json", "text_config", "num_experts", 256),
    ],
)
def test_more_experts_per_token_than_experts_is_refused_in_every_moe_family(path, section, expert_key, n):
    cfg = _cfg(path)
    target = cfg[section] if section else cfg
    assert target[expert_key] == n
    target["num_experts_per_tok"] = n + 1
    where = f"{section}." if section else ""
    _refused(cfg, f"'{where}num_experts_per_tok' = {n + 1} exceeds '{where}{expert_key}' = {n}")


def test_moe_layer_freq_is_honoured_as_deepseek_defines_it():
    """DeepSeek's modeling_deepseek.py: MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0."""
    cfg = {**_cfg(MODELS_DIR / "deepseek-v3.json"), "moe_layer_freq": 2, "num_hidden_layers": 8}
    spec = model_from_config(cfg)
    assert [s.is_moe for s in spec.layers] == [False, False, False, False, True, False, True, False]


def test_heads_must_group_evenly():
    _refused(
        {**LLAMA, "num_key_value_heads": 3}, "'num_key_value_heads' = 3 does not divide 'num_attention_heads' = 32"
    )


def test_softcapping_must_be_finite():
    gemma = _cfg(PUBLIC / "gemma-2-9b.json")
    for bad in (float("nan"), float("inf"), -1.0, "30"):
        _refused({**gemma, "final_logit_softcapping": bad}, "'final_logit_softcapping' must be a positive number")
    assert model_from_config({**gemma, "final_logit_softcapping": None}).final_logit_softcapping is None


def test_expert_lists_are_checked():
    cfg = _cfg(MODELS_DIR / "qwen3-30b-a3b.json")
    _refused({**cfg, "mlp_only_layers": [48]}, "'mlp_only_layers[0]' must be an integer from 0 to 47, got 48")
    _refused({**cfg, "mlp_only_layers": "0,1"}, "'mlp_only_layers' must be a list of integers")
    _refused({**cfg, "decoder_sparse_step": 0}, "'decoder_sparse_step' must be a positive integer, got 0")


def test_sections_must_be_objects():
    _refused({"model_type": "qwen3_5", "text_config": 5}, "'text_config' must be a JSON object, got 5")
    gemma = _cfg(PUBLIC / "gemma-3-12b-it.json")
    _refused({**gemma, "vision_config": [1]}, "'vision_config' must be a JSON object")
    _refused({**gemma, "vision_config": None}, "missing key 'vision_config'")


def test_multimodal_tie_flags_must_agree():
    cfg = _cfg(MODELS_DIR / "qwen3.8-27b.json")
    cfg["text_config"]["tie_word_embeddings"] = True
    _refused(cfg, "'tie_word_embeddings' is false at the top level", "'text_config.tie_word_embeddings'")


def test_unmodelled_parts_are_refused():
    cfg = _cfg(MODELS_DIR / "qwen3.8-27b.json")
    cfg["text_config"]["mtp_use_dedicated_embeddings"] = True
    _refused(cfg, "'text_config.mtp_use_dedicated_embeddings' = true")
    gpt2 = _cfg(PUBLIC / "gpt2.json")
    _refused({**gpt2, "add_cross_attention": True}, "'add_cross_attention' = True changes the parameter count")


# ---------------------------------------------------------------- relabelled configs: refused, never undercounted
@pytest.mark.parametrize(
    "path,label,needle",
    [
        (PUBLIC / "mixtral-8x7b-v0.1.json", "llama", "'num_local_experts' = 8"),
        (MODELS_DIR / "qwen3-30b-a3b.json", "llama", "'num_experts' = 128"),
        (MODELS_DIR / "qwen3-30b-a3b.json", "qwen3", "'num_experts' = 128"),
        (PUBLIC / "qwen1.5-moe-a2.7b.json", "qwen2", "'num_experts' = 60"),
        (MODELS_DIR / "deepseek-v3.json", "llama", "'n_routed_experts' = 256"),
        (PUBLIC / "deepseek-v2-lite.json", "mistral", "'n_routed_experts' = 64"),
        (PUBLIC / "qwen3.5-35b-a3b.json", "qwen3_5", "'text_config.num_experts' = 256"),
    ],
)
def test_moe_config_relabelled_is_refused(path, label, needle):
    cfg = {k: v for k, v in _cfg(path).items() if k != "architectures"}
    if "text_config" in cfg:  # give the dense label the width it needs, so that only the experts betray the MoE
        cfg["text_config"] = {**cfg["text_config"], "intermediate_size": 512}
    _refused({**cfg, "model_type": label}, needle, f"a '{label}' model has no such part")


@pytest.mark.parametrize(
    "path,label",
    [
        (PUBLIC / "qwen2.5-7b.json", "llama"),  # q/k/v biases: no key betrays them, the class name does
        (MODELS_DIR / "qwen3-8b.json", "llama"),  # q/k norms
        (PUBLIC / "gemma-2-9b.json", "llama"),  # sandwich norms, tied head: +10 % as llama
        (PUBLIC / "mistral-7b-v0.1.json", "llama"),
    ],
)
def test_dense_config_relabelled_is_refused_by_its_class(path, label):
    cfg = _cfg(path)
    _refused({**cfg, "model_type": label}, "'architectures' names", f"but 'model_type' is '{label}'")


def test_neutral_values_of_foreign_keys_are_accepted():
    spec = model_from_config(
        {**LLAMA, "num_experts": 0, "n_shared_experts": None, "mlp_only_layers": [], "attn_output_gate": False}
    )
    assert spec.params.total == 8_030_261_248


# ---------------------------------------------------------------- files
def test_deeply_nested_json(tmp_path):
    path = _write(tmp_path, '{"model_type": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="JSON nested too deeply"):
        load_model(path)


def test_path_longer_than_the_file_system_allows():
    with pytest.raises(ValueError, match="is longer than the file system allows"):
        load_model("x" * 5000)
    with pytest.raises(ValueError, match="is longer than the file system allows"):
        load_model("/tmp/" + "y" * 300 + "/config.json")


def test_binary_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="not UTF-8 text"):
        load_model(path)


def test_directory_means_its_config_json(tmp_path):
    with pytest.raises(ValueError, match=r"has no config\.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text((MODELS_DIR / "llama-3.1-8b.json").read_text())
    spec = load_model(tmp_path)
    assert spec.params.total == 8_030_261_248 and spec.name == tmp_path.name


def test_oversized_file_is_not_read(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(" " * (9 * 2**20) + "{}")
    with pytest.raises(ValueError, match=r"is not a config\.json"):
        load_model(path)


@pytest.mark.parametrize("bad", [None, 5, ["llama"], "bad\x00name"])
def test_model_argument_types(bad):
    with pytest.raises(ValueError, match="model"):
        load_model(bad)


def test_values_too_deep_to_show_are_still_one_line():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    _refused({**LLAMA, "model_type": deep}, "'model_type' must be a string, got a list too large to show")


def test_top_level_must_be_an_object(tmp_path):
    with pytest.raises(ValueError, match="expected a JSON object, got \\[1, 2\\]"):
        load_model(_write(tmp_path, "[1, 2]"))


@pytest.mark.parametrize(
    "module", ["fields", "count", "common", "spec", "llama", "qwen", "qwen3_5", "gemma", "deepseek", "gpt2", "fallback"]
)
def test_loader_doctests(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"meshplan.spec.models.{module}"), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_import_meshplan_does_not_import_torch_or_transformers():
    code = (
        "import sys, meshplan; from meshplan.spec.model import load_model; load_model('deepseek-v3'); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---------------------------------------------------------------- fuzz: mutated real configs
CONFIGS = {p.stem: _cfg(p) for p in [*MODELS_DIR.glob("*.json"), *PUBLIC.glob("*.json")]}
VALUES = [
    None,
    True,
    False,
    "false",
    "",
    "x" * 5000,
    -1,
    0,
    1,
    3,
    2**63,
    10**400,
    1.5,
    float("nan"),
    float("inf"),
    [],
    {},
    [{"a": 1}],
    [[[[1]]]],
    {"model_type": "llama"},
    ["full_attention"],
    64,
]
KEYS = sorted(
    COUNT_KEYS
    | {
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "tie_word_embeddings",
        "layer_types",
        "sliding_window",
        "n_embd",
        "n_layer",
        "n_head",
        "n_positions",
    }
)


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(CONFIGS)))
    cfg = json.loads(json.dumps(CONFIGS[name]))
    for _ in range(draw(st.integers(1, 3))):
        target = cfg
        if "text_config" in cfg and isinstance(cfg["text_config"], dict) and draw(st.booleans()):
            target = cfg["text_config"]
        key = draw(st.sampled_from(KEYS + sorted(target)))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(st.sampled_from(VALUES))
    return cfg


@settings(
    max_examples=examples(250),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated())
def test_fuzz_mutated_configs_count_or_give_one_line(cfg):
    start = time.perf_counter()
    mtype = cfg.get("model_type")
    try:
        spec = model_from_config(cfg, name="fuzz")
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) < 700, msg
    else:
        p = spec.params
        assert mtype in FAMILIES or spec.estimated
        assert sum(p.components.values()) == p.total == sum(n * c for _, n, c in p.groups)
        assert spec.layer_params == tuple(s.params for s in spec.layers) and len(spec.layers) == spec.num_layers
    assert time.perf_counter() - start < 2.0
