"""The hardware presets (data/hardware/*.json) and the published runs (data/published_runs.json).

Presets: every field present, positive, finite and sourced; `h800-sxm-80gb` differs from `lab` only where NVIDIA's
datasheet differs from DeepSeek-V3's effective figure.
Runs: every GPT config reproduces its paper's parameter figure to the printed digits, and every printed throughput
agrees with the paper's own FLOP formula and the other printed columns within their rounding.
"""

from __future__ import annotations

import math

import pytest

from meshplan.core.resources import data_path, read_json
from meshplan.parallel.compute import narayanan_eq3_flop
from meshplan.spec.hardware import load_hardware
from meshplan.spec.model import load_model, model_from_config

PRESETS = (
    "a100-sxm-80gb",
    "b200-sxm-180gb",
    "gb200-nvl72-186gb",
    "h100-sxm-80gb",
    "h200-sxm-141gb",
    "h800-sxm-80gb",
    "lab",
)
FIELDS = (
    "gpu_memory_bytes",
    "gpus_per_node",
    "nvlink_bytes_per_s",
    "infiniband_bytes_per_s",
    "peak_bf16_flop_per_s",
    "hbm_bytes_per_s",
)
LAB_ONLY = "effective_flop_per_s"


def preset(name: str) -> dict:
    return read_json("hardware", f"{name}.json")


RUNS = read_json("published_runs.json")["runs"]
BY_ID = {r["id"]: r for r in RUNS}


def runs(prefix: str) -> list[dict]:
    return [r for r in RUNS if r["id"].startswith(prefix)]


def agrees(lo: float, hi: float, printed: float, half_unit: float) -> bool:
    """True when a value computed to lie in [lo, hi] can print as `printed` (rounded to ±half_unit)."""
    return lo <= printed + half_unit and hi >= printed - half_unit


def half_unit(printed: str) -> float:
    """Half of the last printed digit: '1.7' -> 0.05, '22' -> 0.5."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10.0**-decimals


# ---------------------------------------------------------------- presets
def test_the_preset_folder_holds_exactly_the_six_presets():
    assert sorted(p.stem for p in data_path("hardware").glob("*.json")) == list(PRESETS)


DEVICE_FIELDS = ("device_total_bytes", "fb_total_bytes")
NO_CUDA_TOTAL = ("gb200-nvl72-186gb",)
HOST_FIELDS = ("gpus_per_host",)  # only machines whose host is smaller than the NVLink domain
LOW_PRECISION_FIELDS = ("peak_fp8_flop_per_s", "peak_mxfp8_flop_per_s")  # only GPUs with such tensor cores


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_field_is_positive_finite_and_sourced(name):
    p = preset(name)
    assert p["name"] == name
    assert isinstance(p["label"], str) and p["label"].strip()
    expected_keys = {"name", "label", *FIELDS} | ({LAB_ONLY} if name == "lab" else set())
    # the device's own totals (what CUDA exposes, what NVML reports): every real GPU has the first
    expected_keys |= set(p) & set(DEVICE_FIELDS)
    expected_keys |= set(p) & set(LOW_PRECISION_FIELDS)
    expected_keys |= set(p) & set(HOST_FIELDS)
    # no published CUDA-visible total for the GB200 (nvidia-smi's frame buffer only): its verdict uses the datasheet's
    assert name in ("lab", *NO_CUDA_TOTAL) or "device_total_bytes" in p, name
    assert name not in NO_CUDA_TOTAL or ("fb_total_bytes" in p and "device_total_bytes" not in p)
    assert set(p) == expected_keys
    for key in expected_keys - {"name", "label"}:
        value, source = p[key]["value"], p[key]["source"]
        assert set(p[key]) == {"value", "source"}, (name, key)
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (name, key)
        assert math.isfinite(value) and value > 0, (name, key, value)
        assert isinstance(source, str) and len(source.strip()) > 20, (name, key)
    assert isinstance(p["gpus_per_node"]["value"], int)


@pytest.mark.parametrize("name", PRESETS)
def test_nvlink_sources_say_the_figure_is_per_direction(name):
    source = preset(name)["nvlink_bytes_per_s"]["source"]
    assert "per direction" in source or "bidirectional" in source


def test_h800_and_lab_differ_only_in_nvlink_where_deepseek_quotes_an_effective_figure():
    h800, lab = preset("h800-sxm-80gb"), preset("lab")
    differ = [k for k in FIELDS if h800[k]["value"] != lab[k]["value"]]
    assert differ == ["nvlink_bytes_per_s"]
    assert lab["nvlink_bytes_per_s"]["value"] / h800["nvlink_bytes_per_s"]["value"] == 0.8  # 160 of 200 GB/s
    assert "DeepSeek" in h800["nvlink_bytes_per_s"]["source"] and "datasheet" in lab["nvlink_bytes_per_s"]["source"]


def test_only_lab_has_an_effective_compute_figure_below_its_peak():
    assert [n for n in PRESETS if LAB_ONLY in preset(n)] == ["lab"]
    lab = preset("lab")
    assert lab[LAB_ONLY]["value"] < lab["peak_bf16_flop_per_s"]["value"]


# ---------------------------------------------------------------- runs: shape of the file
def test_run_ids_are_unique_and_the_file_holds_listed_and_held_out_runs():
    assert len(BY_ID) == len(RUNS)
    assert all(isinstance(r["held_out"], bool) for r in RUNS)
    assert {r["held_out"] for r in RUNS} == {True, False}


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["id"])
def test_every_run_names_a_preset_a_loadable_model_and_a_sourced_metric(run):
    assert run["hardware"] is None or data_path("hardware", f"{run['hardware']}.json").is_file()
    model = run["model"]
    if "file" in model:
        load_model(model["file"])
    elif "config" in model:
        model_from_config(model["config"], name=model["name"])
    else:
        assert run["held_out"] and model["shape"]
    assert run["citation"]["paper"] and run["published"]
    for metric in run["published"].values():
        assert {"value", "unit", "counts"} <= set(metric) and metric["counts"].strip()


PLANNED = [r for r in RUNS if r["gpus"] and None not in (r["mesh"][k] for k in ("tp", "cp", "pp", "dp", "ep"))]


@pytest.mark.parametrize("run", PLANNED, ids=lambda r: r["id"])
def test_mesh_multiplies_to_the_gpu_count_and_batches_divide(run):
    mesh = run["mesh"]
    assert mesh["tp"] * mesh["cp"] * mesh["pp"] * mesh["dp"] == run["gpus"]
    assert mesh["dp"] % mesh["ep"] == 0  # EP folds inside DP
    if run["micro_batch_size"] and run["global_batch"]:
        assert run["global_batch"] % (mesh["dp"] * run["micro_batch_size"]) == 0


@pytest.mark.parametrize("run", [r for r in RUNS if (r["mesh"]["virtual_stages"] or 1) > 1], ids=lambda r: r["id"])
def test_interleaved_rows_split_layers_evenly_and_feed_whole_rounds_of_micro_batches(run):
    """Megatron's interleaved schedule needs L divisible by pp x v and m a multiple of pp (Narayanan §2.2.2)."""
    mesh, layers = run["mesh"], run["model"]["config"]["n_layer"]
    assert layers % (mesh["pp"] * mesh["virtual_stages"]) == 0
    micro_batches = run["global_batch"] // (mesh["dp"] * run["micro_batch_size"])
    assert micro_batches % mesh["pp"] == 0


# ---------------------------------------------------------------- runs: parameter counts
@pytest.mark.parametrize("run", [r for r in RUNS if "config" in r["model"]], ids=lambda r: r["id"])
def test_gpt_configs_reproduce_the_printed_parameter_figure(run):
    total = model_from_config(run["model"]["config"]).params.total
    printed = run["published_params"]["printed"]
    assert abs(total / run["published_params"]["scale"] - float(printed)) < half_unit(printed)


@pytest.mark.parametrize("run", runs("narayanan2021-t1-"), ids=lambda r: r["id"])
def test_library_count_is_narayanan_eq2_plus_the_final_layernorm(run):
    """Eq. (2) P = 12lh²(1 + 13/12h + (V+s)/12lh) leaves out the final LayerNorm (2h); the library counts it."""
    c = run["model"]["config"]
    h, layers, vocab, seq = c["n_embd"], c["n_layer"], c["vocab_size"], c["n_positions"]
    eq2 = 12 * layers * h**2 + 13 * layers * h + (vocab + seq) * h
    assert model_from_config(c).params.total == eq2 + 2 * h


# ---------------------------------------------------------------- runs: printed throughput against the paper's formulas
@pytest.mark.parametrize("run", runs("narayanan2021-t1-"), ids=lambda r: r["id"])
def test_narayanan_percent_of_peak_and_aggregate_match_the_tflops_column(run):
    """Table 1 prints no iteration time, so Eq. (3) cannot give TFLOP/s: check the columns against each other."""
    pub = run["published"]
    tflops, pct, agg = (pub[k]["value"] for k in ("tflop_per_s_per_gpu", "percent_of_peak", "aggregate_pflop_per_s"))
    assert round(tflops / 312 * 100) == pct
    per_gpu = agg * 1e3 / run["gpus"], 0.05 * 1e3 / run["gpus"]  # aggregate printed to 0.1 PFLOP/s
    assert agrees(per_gpu[0] - per_gpu[1], per_gpu[0] + per_gpu[1], tflops, 0.5)


@pytest.mark.parametrize("run", runs("korthikanti2022-"), ids=lambda r: r["id"])
def test_korthikanti_mfu_and_hfu_follow_from_the_iteration_time(run):
    c, pub, gpus = run["model"]["config"], run["published"], run["gpus"]
    B, s, h, layers, v = run["global_batch"], run["seq"], c["n_embd"], c["n_layer"], c["vocab_size"]
    model_flop = 72 * B * layers * s * h**2 * (1 + s / (6 * h) + v / (12 * h * layers))
    hardware_flop = 72 * B * layers * s * h**2 * (1 + s / (3 * h) + v / (12 * h * layers))
    t = pub["iteration_time_s"]["value"]
    for flop, key in ((model_flop, "mfu_percent"), (hardware_flop, "hfu_percent")):
        lo, hi = (flop / ((t + d) * gpus * 312e12) * 100 for d in (0.005, -0.005))
        assert agrees(lo, hi, pub[key]["value"], 0.05), key
    t_full = pub["iteration_time_full_recompute_s"]["value"]
    lo, hi = ((t_full - 0.005) / (t + 0.005) - 1) * 100, ((t_full + 0.005) / (t - 0.005) - 1) * 100
    assert agrees(lo, hi, pub["throughput_increase_percent"]["value"], 0.05)


@pytest.mark.parametrize("run", runs("llama3-405b-"), ids=lambda r: r["id"])
def test_llama3_mfu_is_its_tflops_over_the_h100_dense_peak(run):
    pub, peak = run["published"], preset("h100-sxm-80gb")["peak_bf16_flop_per_s"]["value"]
    mfu = pub["mfu_percent"]["value"]
    lo, hi = ((mfu + d) / 100 * peak / 1e12 for d in (-0.5, 0.5))  # MFU printed to 1 %, TFLOP/s to 10
    assert agrees(lo, hi, pub["tflop_per_s_per_gpu"]["value"], 5)
    assert run["seq"] * run["global_batch"] == pub["tokens_per_batch"]["value"] == 2**24


def test_deepseek_v3_gpu_hours_per_trillion_tokens_match_table_1():
    pub = BY_ID["deepseek-v3-pretraining"]["published"]
    per_trillion = pub["pretraining_gpu_hours"]["value"] / (pub["pretraining_tokens"]["value"] / 1e12)
    assert per_trillion == pytest.approx(pub["gpu_hours_per_trillion_tokens"]["value"], rel=1e-9)
    days = pub["gpu_hours_per_trillion_tokens"]["value"] / BY_ID["deepseek-v3-pretraining"]["gpus"] / 24
    assert round(days, 1) == pub["days_per_trillion_tokens"]["value"]


# ---------------------------------------------------------------- held-out runs: printed figures agree
@pytest.mark.parametrize(
    "run_id, vocab",
    [
        ("bloom-176b", 250880),
        ("mt-nlg-530b-2240gpu", 50272),
        ("mt-nlg-530b-2800gpu", 50272),
        ("mt-nlg-530b-3360gpu", 50272),
    ],
)
def test_held_out_tflops_follow_from_eq3_and_the_iteration_time(run_id, vocab):
    run = BY_ID[run_id]
    shape, pub = run["model"]["shape"], run["published"]
    flop = narayanan_eq3_flop(run["global_batch"], run["seq"], shape["layers"], shape["hidden"], vocab)
    t, printed = pub["iteration_time_s"]["value"], pub["tflop_per_s_per_gpu"]["value"]
    t_half = 0.005 if run_id == "bloom-176b" else 0.05  # BLOOM's log prints 104.70 s; MT-NLG 60.1 s
    tf_half = 0.005 if run_id == "bloom-176b" else 0.5
    lo, hi = (flop / ((t + d) * run["gpus"]) / 1e12 for d in (t_half, -t_half))
    assert agrees(lo, hi, printed, tf_half)


@pytest.mark.parametrize("run", runs("torchtitan-a100-"), ids=lambda r: r["id"])
def test_torchtitan_a100_mfu_follows_from_its_tokens_per_second(run):
    """torchtitan's MFU then: (6 N + 12 L h s) tokens/s / 312 TFLOP/s, N with the embeddings, attention not halved."""
    m, pub = load_model(run["model"]["file"]), run["published"]
    flop_per_token = 6 * m.params.total + 12 * m.num_layers * m.hidden_size * run["seq"]
    wps = pub["tokens_per_s_per_gpu"]["value"]
    lo, hi = (flop_per_token * (wps + d) / 312e12 * 100 for d in (-0.5, 0.5))
    assert agrees(lo, hi, pub["mfu_percent"]["value"], 0.05)


def test_an_oversized_hardware_file_is_refused_before_it_is_read(tmp_path):
    """Issue 29: a 2 GB (sparse) file given as --hardware took 17 s and 4.2 GB of memory before it was refused."""
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(2 * 2**30)
    with pytest.raises(ValueError, match=r"2,147,483,648 bytes is not a hardware file \(at most 1,048,576\)"):
        load_hardware(str(path))


@pytest.mark.parametrize("name", PRESETS)
def test_low_precision_peaks_are_the_datasheets_multiples(name):
    """Hopper and Blackwell run dense FP8 at twice the dense bf16 rate (their datasheets); the A100 has no FP8 tensor
    cores; only Blackwell has MXFP8, at its FP8 rate."""
    p = preset(name)
    fp8, mx = p.get("peak_fp8_flop_per_s"), p.get("peak_mxfp8_flop_per_s")
    if name in ("a100-sxm-80gb", "lab"):
        assert fp8 is None and mx is None
        return
    assert fp8 is not None
    assert (
        fp8["value"] == 2 * p["peak_bf16_flop_per_s"]["value"]
        or abs(fp8["value"] / (2 * p["peak_bf16_flop_per_s"]["value"]) - 1) < 1e-3
    )
    assert (mx is not None) == ("b200" in name)
    if mx:
        assert mx["value"] == fp8["value"]
