"""Chapter 1 (one GPU): every number the chapter prints, asserted from the library to its printed digit
(GB = 1e9 B), and the library functions the chapter introduces (``compute.model_flop``, ``utilisation``,
``training_time_s``).

The chapter's cells only format these values; each test computes them here with the same library calls.
"""

from __future__ import annotations

import pytest

from meshplan import DEFAULT_BPP, MEGATRON_BPP, load_hardware, load_model
from meshplan.core.resources import read_json
from meshplan.core.units import GB, fmt_gb, fmt_gib, fmt_pct
from meshplan.course import lab, published
from meshplan.parallel import activations, compute, engine_activations, zero
from meshplan.spec import accounting

P = 27_781_427_952
SEQ = 4096
MODELS = ("small-3.7m", "llama-3.1-8b", "qwen3.8-27b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-v3")


@pytest.fixture(scope="module")
def anchor():
    return load_model("qwen3.8-27b")


@pytest.fixture(scope="module")
def hw():
    return load_hardware()


@pytest.fixture(scope="module")
def ledger(anchor):
    return engine_activations.spec_activations(anchor, SEQ, 1, device="cuda")


# ---------------------------------------------------------------- provenance
def test_the_anchor_config_names_its_source_and_the_count_the_library_reproduces(anchor):
    config = read_json("models", "qwen3.8-27b.json")
    assert config["source"].startswith("huggingface.co/") and config["source_note"].strip()
    assert f"{anchor.params.total:,}" in config["source"]  # the published (safetensors) parameter count


# ---------------------------------------------------------------- model states in four ledgers
def test_bytes_per_parameter_in_every_ledger():
    terms = {n: accounting.get_accounting(n).bytes_per_param.terms() for n in accounting.LEDGERS}
    assert terms["lab"] == {"weights": 2, "grads": 2, "master": 4, "adam_m": 4, "adam_v": 4}
    assert terms["megatron"] == {"weights": 2, "grads": 4, "master": 4, "adam_m": 4, "adam_v": 4}
    assert terms["fsdp2"] == {"weights": 4, "grads": 4, "master": 0, "adam_m": 4, "adam_v": 4}
    assert terms["deepspeed"] == terms["lab"]
    totals = {n: sum(t.values()) for n, t in terms.items()}
    assert totals == {"lab": 16, "megatron": 18, "fsdp2": 16, "deepspeed": 16}
    fsdp2 = accounting.get_accounting("fsdp2").bytes_per_param
    assert f"{fsdp2.weights} + {fsdp2.grads} + {fsdp2.optimizer}" == "4 + 4 + 8"
    for name in accounting.LEDGERS:  # every ledger cites where its bytes come from
        assert accounting.get_accounting(name).source("bytes_per_param")


def test_anchor_model_states(anchor, hw):
    assert anchor.params.total == P
    states = zero.model_states_bytes(P)
    megatron = zero.model_states_bytes(P, bpp=MEGATRON_BPP)
    assert (fmt_gb(states), fmt_gib(states), fmt_gb(megatron)) == ("444.5 GB", "414.0 GiB", "500.1 GB")
    assert (f"{states / hw.gpu_memory_bytes:.1f}", f"{megatron / hw.gpu_memory_bytes:.1f}") == ("5.6", "6.3")
    assert fmt_gb(DEFAULT_BPP.optimizer * P) == "333.4 GB"  # the optimizer's terms alone overflow a GPU
    fsdp2 = accounting.get_accounting("fsdp2").bytes_per_param
    assert fsdp2.optimizer * P > hw.gpu_memory_bytes
    assert fmt_gb(zero.model_states_bytes(P, bpp=fsdp2)) == "444.5 GB"


def test_anchor_blocks(anchor):
    groups = {name: n * per for name, n, per in anchor.params.groups}
    assert sum(groups.values()) == P
    assert groups["linear_attention_layers"] == 48 * 383_273_184
    assert groups["full_attention_layers"] == 16 * 372_255_232
    assert anchor.params.components["embedding"] == 1_271_398_400
    assert (anchor.num_layers, anchor.num_full_attention_layers) == (64, 16)


@pytest.mark.parametrize(
    "name, gb16, gb18, gpus16, gpus18",
    [
        ("small-3.7m", "0.1", "0.1", 1, 1),
        ("llama-3.1-8b", "128.5", "144.5", 2, 2),
        ("qwen3.8-27b", "444.5", "500.1", 6, 7),
        ("llama-3.1-70b", "1,128.9", "1,270.0", 15, 16),
        ("llama-3.1-405b", "6,493.7", "7,305.4", 82, 92),
        ("deepseek-v3", "10,736.4", "12,078.5", 135, 151),
    ],
)
def test_the_other_models(name, gb16, gb18, gpus16, gpus18, hw):
    params = load_model(name).params.total
    assert f"{zero.model_states_bytes(params) / GB:,.1f}" == gb16
    assert f"{zero.model_states_bytes(params, bpp=MEGATRON_BPP) / GB:,.1f}" == gb18
    assert zero.min_gpus_for_states(params, hw.gpu_memory_bytes) == gpus16
    assert zero.min_gpus_for_states(params, hw.gpu_memory_bytes, MEGATRON_BPP) == gpus18


def test_deepseek_mtp_and_small_model(hw):
    assert load_model("deepseek-v3").params.extra["mtp"] == 11_610_068_224
    small = zero.model_states_bytes(load_model("small-3.7m").params.total)
    assert (f"{small / 2**20:.1f}", f"{small / 1e6:.1f}", fmt_pct(small / hw.gpu_memory_bytes, 2)) == (
        "56.3",
        "59.0",
        "0.07 %",
    )


def test_exercise_defaults_are_not_the_printed_numbers(hw):
    """The chapter's exercises start on models and sizes whose answers the page has not printed above them."""
    assert f"{zero.model_states_bytes(load_model('llama-3.1-8b').params.total) / GB:.1f}" == "128.5"  # ch1-states
    assert zero.min_gpus_for_states(load_model("llama-3.1-405b").params.total, hw.gpu_memory_bytes, MEGATRON_BPP) == 92
    assert f"{zero.model_states_bytes(P, 3, 16) / GB:.1f}" == "27.8"  # ch1-floor at 16 GPUs
    logits = engine_activations.spec_activations(load_model("llama-3.1-70b"), 8192, 1, device="cuda")
    assert f"{logits.model_parts()['logits'] / GB:.2f}" == "4.20"  # ch1-logits
    assert f"{compute.backward_time_s(load_model('llama-3.1-70b').flop_params, 8192, 400e12):.2f}" == "5.69"


# ---------------------------------------------------------------- activations: two ledgers
def test_the_lab_page_charges_scores_to_every_layer(anchor):
    h, a = anchor.hidden_size, anchor.num_attention_heads
    layer = activations.activation_bytes_per_layer(SEQ, 1, h, a)
    scores = layer - activations.activation_bytes_per_layer(SEQ, 1, h, a, recompute="selective")
    assert (fmt_gb(layer, 2), fmt_gb(scores, 2), f"{layer / (SEQ * h):.1f}") == ("2.73 GB", "2.01 GB", "130.0")
    assert scores == 5 * a * SEQ * SEQ  # 5as/h × sbh: the s × s softmax, dropout mask and dropout output
    assert fmt_gb(activations.activation_bytes(SEQ, 1, h, a, 64)) == "174.5 GB"
    assert fmt_gb(activations.activation_bytes(SEQ, 1, h, a, 64, recompute="selective")) == "45.6 GB"
    assert fmt_gb(48 * scores) == "96.6 GB"  # charged to the Gated DeltaNet layers, which have no scores


def test_the_engine_ledger_per_layer_type(anchor, ledger):
    sbh = SEQ * anchor.hidden_size
    full = next(i for i, layer in enumerate(anchor.layers) if layer.mixer == "attention")
    linear = next(i for i, layer in enumerate(anchor.layers) if layer.mixer == "linear_attention")
    assert (full, linear) == (3, 0)
    parts = {i: ledger.layer_parts(i) for i in (full, linear)}
    assert {k: fmt_gb(v, 2) for k, v in parts[full].items() if v} == {
        "norms": "0.34 GB",
        "mixer": "0.50 GB",
        "mlp": "0.61 GB",
    }
    assert {k: fmt_gb(v, 2) for k, v in parts[linear].items() if v} == {
        "norms": "0.34 GB",
        "mixer": "2.23 GB",
        "mlp": "0.61 GB",
    }
    per_layer = {i: sum(p.values()) for i, p in parts.items()}
    assert (f"{per_layer[full] / sbh:.1f}", f"{per_layer[linear] / sbh:.1f}") == ("68.8", "151.6")
    assert (fmt_gb(16 * per_layer[full]), fmt_gb(48 * per_layer[linear])) == ("23.1 GB", "152.6 GB")
    # every layer of a type saves the same bytes, so the first one stands for all
    assert all(
        sum(ledger.layer_parts(i).values()) == per_layer[3 if L.mixer == "attention" else 0]
        for i, L in enumerate(anchor.layers)
    )
    assert fmt_gb(sum(ledger.model_parts().values())) == "4.3 GB"
    assert fmt_gb(ledger.total) == "179.9 GB"
    # no term of an SDPA layer grows with s²: doubling s doubles every layer's bytes (Gated DeltaNet pads to 64)
    longer = engine_activations.spec_activations(anchor, 2 * SEQ, 1, device="cuda")
    assert sum(longer.layer_parts(full).values()) == pytest.approx(2 * per_layer[full], rel=1e-3)
    assert (f"{anchor.layers[0].intermediate_size / anchor.hidden_size:.1f}") == "3.4"


def test_the_logits(anchor, ledger):
    logits = ledger.model_parts()["logits"]
    assert logits == 4 * SEQ * anchor.vocab_size == 4_068_474_880
    assert (fmt_gb(logits), fmt_gb(ledger.output_logits)) == ("4.1 GB", "2.0 GB")
    below = {
        label: r.memory_bytes["activations"] for label, r in lab.lab_reports() if r.memory_bytes["activations"] < logits
    }
    assert {label: fmt_gb(b) for label, b in below.items()} == {
        "DP 8 · ZeRO-3 · full recompute": "2.7 GB",
        "TP 2 × PP 4 · full recompute": "1.3 GB",
    }


# ---------------------------------------------------------------- time and MFU
def test_deepseek_years():
    hours = published.value("deepseek_v3_pretraining_gpu_hours")
    assert (f"{hours / 1000:,.0f}K", f"{published.gpu_years(hours):.0f}") == ("2,664K", "304")
    assert published.value("deepseek_v3_cluster_gpus") == 2048


def test_mfu_of_the_lab_page_rate(anchor, hw):
    flop = compute.model_flop(anchor, SEQ)
    seconds = flop / hw.effective_flop_per_s
    assert fmt_pct(compute.utilisation(flop, seconds, hw.peak_bf16_flop_per_s)) == "40.4 %"
    assert hw.peak_bf16_flop_per_s == load_hardware("h100-sxm-80gb").peak_bf16_flop_per_s == 989.5e12
    assert hw.peak_bf16_flop_per_s == load_hardware("h800-sxm-80gb").peak_bf16_flop_per_s
    row = next(r for r in published.value("llama3_table4") if r["cp"] == 1 and r["gpus"] == 16384)
    assert (row["tflops_per_gpu"], fmt_pct(row["mfu"], 0)) == (400, "41 %")


def test_time_on_one_gpu(anchor, hw):
    rate = hw.effective_flop_per_s
    llama = load_model("llama-3.1-405b")
    row = next(r for r in published.value("llama3_table4") if r["cp"] == 1 and r["gpus"] == 16384)
    sequences = row["batch_per_dp"] * row["dp"]
    tokens = published.tokens_per_step(row["seq"], row["batch_per_dp"], row["dp"])
    assert (sequences, tokens) == (2048, 16_777_216)
    assert f"{compute.training_time_s(anchor, SEQ, 1, rate):.2f}" == "1.63"
    assert f"{compute.training_time_s(anchor, SEQ, tokens // SEQ, rate) / 3600:.1f}" == "1.9"
    assert f"{compute.training_time_s(llama, row['seq'], sequences, rate) / 3600:.1f}" == "30.6"
    assert f"{llama.flop_params / anchor.flop_params:.1f}" == "15.8"
    assert fmt_pct(compute.model_flop(anchor, SEQ) / compute.step_flop(anchor.flop_params, SEQ) - 1) == "3.6 %"
    assert f"{compute.backward_time_s(anchor.flop_params, SEQ, rate):.2f}" == "1.05"  # the lab page's backward
    assert f"{compute.model_flop(llama, 8192, 2048):.2e}" == "4.40e+19"
    assert f"{compute.step_flop(llama.flop_params, tokens):.2e}" == "4.06e+19"


# ---------------------------------------------------------------- the library functions the chapter introduces
def test_model_flop_is_the_mfu_numerator(anchor):
    per_sequence = compute.training_flop_per_sequence(anchor, SEQ, "none", causal=False)
    assert compute.model_flop(anchor, SEQ) == per_sequence
    assert compute.model_flop(anchor, SEQ, 3) == 3 * per_sequence
    # a GPT with a·d = h: PaLM's 6N + 12·L·h·s per token
    gpt = load_model("llama-3.1-70b")
    attention = sum(compute.attention_forward_flop(L, SEQ, causal=False) for L in gpt.layers)
    assert compute.model_flop(gpt, SEQ) == pytest.approx(6 * gpt.flop_params * SEQ + 3 * attention)
    assert attention == 80 * 4 * SEQ**2 * 8192


def test_utilisation_and_time_reject_bad_input(anchor):
    assert compute.utilisation(1e15, 2.0, 1e15, gpus=2) == 0.25
    with pytest.raises(ValueError, match="seconds=0"):
        compute.utilisation(1e15, 0, 1e15)
    with pytest.raises(ValueError, match="peak_flop_per_s=-1"):
        compute.utilisation(1e15, 1.0, -1)
    with pytest.raises(ValueError, match="gpus=0"):
        compute.utilisation(1e15, 1.0, 1e15, gpus=0)
    with pytest.raises(ValueError, match="sequences=0"):
        compute.model_flop(anchor, SEQ, 0)
    with pytest.raises(ValueError, match="flop_per_s=0"):
        compute.training_time_s(anchor, SEQ, 1, 0)
    assert compute.training_time_s(anchor, SEQ, 2, 1e15) == pytest.approx(compute.model_flop(anchor, SEQ, 2) / 1e15)


def test_where_it_gets_stuck_is_the_maps_first_row(hw):
    """The chapter's closing glues the evolution map's first row (``evolution.row(1)``), which must print the
    numbers this chapter computes."""
    from meshplan.course import evolution

    numbers = {name: n.text for name, n in evolution.row(1).numbers.items()}
    assert numbers == {
        "bpp": "16 B",
        "params": "27,781,427,952",
        "states": "444.5 GB",
        "gpu_memory": "80 GB",
        "states_over_gpu": "5.6",
        "gpu_hours": "2,664K",
        "gpu_years": "304",
    }
    assert evolution.row(1).numbers["states"].value == zero.model_states_bytes(P)
    assert evolution.row(1).numbers["gpu_years"].value == published.gpu_years(
        published.value("deepseek_v3_pretraining_gpu_hours")
    )
