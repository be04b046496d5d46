"""``meshplan plan``: the --json contract, the table, and one-line errors with exit code 2.

Every case runs in process (``commands.run``); ``test_real_processes_print_what_the_tests_read`` runs a sample of
every command as real ``python -m meshplan`` processes and checks that they print the same, byte for byte.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from commands import run, run_processes

from meshplan import Plan, evaluate
from meshplan.course.lab import LAB_8_GPUS, LAB_64_GPUS, lab_plan

CONTRACT = ["model", "params", "gpus", "mesh", "memory_bytes", "fits", "comm_bytes_per_step", "link", "bubble"]
DIMS = ["dp", "tp", "pp", "cp", "ep", "edp"]  # the five dimensions and the expert-data-parallel sync

# name -> argv after "plan"; "{tmp}" is replaced by a module temp dir holding the bad configs
OK = {
    "lab64_zero1_json": "--model qwen3.8-27b --gpus 64 --tp 8 --pp 2 --dp 4 --zero 1 --recompute full --json",
    "lab64_zero1_default_dp": "--model qwen3.8-27b --gpus 64 --tp 8 --pp 2 --zero 1 --recompute full --json",
    "lab8_dp_json": "--model qwen3.8-27b --gpus 8 --dp 8 --zero 3 --recompute full --json",
    "lab8_default_dp": "--model qwen3.8-27b --gpus 8 --zero 3 --recompute full --json",
    "lab8_selective_table": "--model qwen3.8-27b --gpus 8 --zero 3 --recompute selective",
    "lab64_table": "--model qwen3.8-27b --gpus 64 --tp 8 --pp 8 --recompute full --micro-batches 32",
    "deepseek_ep_json": "--model deepseek-v3 --gpus 128 --tp 2 --ep 64 --zero 1 --recompute full --json",
}
BAD = {
    # name -> (argv, substrings that must be in the one stderr line)
    "unknown_model": ("--model no-such-model --gpus 8", ["unknown model 'no-such-model'"]),
    "gpus_not_product": ("--model qwen3.8-27b --gpus 8 --dp 4", ["gpus=8", "= 4"]),
    "tp_not_dividing_gpus": ("--model qwen3.8-27b --gpus 8 --tp 3", ["tp×cp×pp = 3×1×1 = 3", "gpus=8"]),
    "tp_heads": ("--model small-3.7m --gpus 8 --tp 8", ["tp=8", "4 attention heads"]),
    "tp_kv_heads": ("--model {tmp}/kv6.json --gpus 4 --tp 4", ["tp=4", "6 KV heads"]),
    "pp_layers": ("--model qwen3.8-27b --gpus 24 --pp 3 --tp 8", ["pp=3", "64 layers"]),
    "interleaved_m": (
        "--model qwen3.8-27b --gpus 8 --pp 8 --virtual-stages 2 --micro-batches 4",
        ["micro_batches=4", "pp=8"],
    ),
    "pp_v_layers": ("--model qwen3.8-27b --gpus 8 --pp 8 --virtual-stages 3", ["pp×virtual_stages = 8×3", "64 layers"]),
    "cp_seq": ("--model qwen3.8-27b --gpus 3 --cp 3 --seq 4096", ["cp=3", "seq=4096"]),
    "ep_experts": ("--model deepseek-v3 --gpus 6 --ep 3", ["ep=3", "256 experts"]),
    "ep_dp_cp": ("--model deepseek-v3 --gpus 8 --ep 16", ["ep=16", "dp×cp = 8×1 = 8"]),
    "ep_dense": ("--model qwen3.8-27b --gpus 8 --ep 2", ["ep=2", "no experts"]),
    "tp_zero": ("--model qwen3.8-27b --gpus 8 --tp 0", ["tp=0"]),
    "tp_negative": ("--model qwen3.8-27b --gpus 8 --tp -2", ["tp=-2"]),
    "tp_fraction": ("--model qwen3.8-27b --gpus 8 --tp 1.5", ["tp='1.5'"]),
    "gpus_word": ("--model qwen3.8-27b --gpus x", ["gpus='x'"]),
    "zero_5": ("--model qwen3.8-27b --gpus 8 --zero 5", ["zero='5'", "0, 1, 2 or 3"]),
    "bad_order": ("--model qwen3.8-27b --gpus 8 --order tp-pp-dp", ["order='tp-pp-dp'"]),
    "gpus_per_node": ("--model qwen3.8-27b --gpus 8 --gpus-per-node 0", ["gpus-per-node=0"]),
    "memory_zero": ("--model qwen3.8-27b --gpus 8 --gpu-memory-gb 0", ["gpu-memory-gb=0"]),
    # a 300-digit sequence length: activations overflow a float; --json must not print the token Infinity
    "seq_overflow": (
        "--model qwen3.8-27b --gpus 8 --json --seq " + "9" * 300,
        ["seq=999999999999…", "(300 digits) is more than the 67,108,864 this library plans for"],
    ),
    "invalid_json": ("--model {tmp}/broken.json --gpus 8", ["malformed config", "invalid JSON", "broken.json"]),
    "missing_hidden_size": ("--model {tmp}/nohidden.json --gpus 8", ["missing key 'hidden_size'", "nohidden.json"]),
    "unsupported_type": ("--model {tmp}/mamba.json --gpus 8", ["model_type 'mamba'", "missing key 'hidden_size'"]),
    "no_command": ("", ["a command is required"]),
    "missing_model": ("--gpus 8", ["--model"]),
}
# found while writing these tests (library bugs; see the tests that use them)
EDGE_CASES = {"memory_inf": "--model qwen3.8-27b --gpus 8 --gpu-memory-gb inf --json"}
MALFORMED = {  # malformed configs: one line and exit 2, never a traceback
    "n_inner_word": ("--model {tmp}/ninner.json --gpus 1", "n_inner"),
    "text_config_int": ("--model {tmp}/textcfg.json --gpus 1", "text_config"),
    "kv_heads_zero": ("--model {tmp}/kv0.json --gpus 2 --cp 2", "num_key_value_heads"),
}

KV6 = {  # a Llama-style config with 24 query heads and 6 KV heads
    "model_type": "llama",
    "hidden_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 24,
    "num_key_value_heads": 6,
    "intermediate_size": 4096,
    "vocab_size": 32000,
}


def _argv(spec: str, tmp: Path) -> list[str]:
    args = spec.replace("{tmp}", str(tmp)).split()
    return ["plan", *args] if args != [] else []


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory):
    """A temporary directory holding the bad configs the specs name as {tmp}."""
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "kv6.json").write_text(json.dumps(KV6))
    (tmp / "broken.json").write_text('{"model_type": "llama", "hidden_size": ')
    nohidden = dict(KV6)
    del nohidden["hidden_size"]
    (tmp / "nohidden.json").write_text(json.dumps(nohidden))
    (tmp / "mamba.json").write_text(json.dumps({"model_type": "mamba"}))
    (tmp / "ninner.json").write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "vocab_size": 100,
                "n_positions": 8,
                "n_embd": 16,
                "n_layer": 2,
                "n_head": 2,
                "n_inner": "big",
            }
        )
    )
    (tmp / "textcfg.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": 5}))
    (tmp / "kv0.json").write_text(json.dumps({**KV6, "num_key_value_heads": 0}))
    return tmp


SPECS = {**OK, **{k: v[0] for k, v in BAD.items()}, **EDGE_CASES, **{k: v[0] for k, v in MALFORMED.items()}}


@pytest.fixture(scope="module")
def runs(config_dir):
    return {name: run(_argv(spec, config_dir)) for name, spec in SPECS.items()}


# A sample of every command run as real processes: a report as JSON and as a table, bad input (the library's and
# argparse's), a malformed config, no command, and the schedule, search and export commands (whose other cases run
# in process in their own modules).
PROCESS_SAMPLE = {
    "plan_json": _argv(OK["lab64_zero1_json"], Path("{tmp}")),
    "plan_table": _argv(OK["lab8_selective_table"], Path("{tmp}")),
    "plan_bad": _argv(BAD["tp_kv_heads"][0], Path("{tmp}")),
    "plan_malformed": _argv(MALFORMED["n_inner_word"][0], Path("{tmp}")),
    "argparse_error": _argv(BAD["gpus_word"][0], Path("{tmp}")),
    "no_command": [],
    "schedule_json": ["schedule", "--kind", "dualpipe", "--pp", "8", "--micro-batches", "16", "--json"],
    "schedule_bad": ["schedule", "--kind", "zb-h1", "--pp", "8", "--micro-batches", "4"],
    "search_table": ["search", "--model", "qwen3.8-27b", "--gpus", "8", "--global-batch", "8"],
    "export_megatron": [
        "export",
        "--format",
        "megatron",
        "--model",
        "qwen3.8-27b",
        "--gpus",
        "64",
        "--tp",
        "4",
        "--pp",
        "2",
        "--global-batch",
        "64",
    ],
}


def test_real_processes_print_what_the_tests_read(config_dir):
    argvs = {name: [a.replace("{tmp}", str(config_dir)) for a in argv] for name, argv in PROCESS_SAMPLE.items()}
    real = run_processes(argvs)
    for name, argv in argvs.items():
        assert real[name] == run(argv), name
    assert [real[n].returncode for n in argvs] == [0, 0, 2, 2, 2, 2, 0, 2, 0, 0]
    assert all("Traceback" not in r.stdout + r.stderr for r in real.values())


def _strict_json(text: str):
    def reject(const):
        raise ValueError(f"not JSON: {const}")

    return json.loads(text, parse_constant=reject)


def _ok(runs, name):
    rc, stdout, stderr = runs[name]
    assert rc == 0, stderr
    assert stderr == ""
    return stdout


def _report_json(runs, name):
    stdout = _ok(runs, name)
    assert stdout.endswith("\n") and stdout.count("\n") == 1  # one line: one object
    obj = _strict_json(stdout)
    assert isinstance(obj, dict)
    return obj


# ---------------------------------------------------------------- the --json contract
def test_json_contract(runs):
    for name in ("lab64_zero1_json", "lab8_dp_json", "deepseek_ep_json"):
        obj = _report_json(runs, name)
        assert list(obj)[: len(CONTRACT)] == CONTRACT, name  # the contract's keys first, extras after
        assert list(obj["mesh"]) == ["tp", "cp", "ep", "dp", "pp"]
        assert list(obj["memory_bytes"]) == [
            "model_states", "activations", "total", "peak_allocated", "peak_reserved", "headroom", "by_stage",
        ]  # fmt: skip
        stages = obj["memory_bytes"]["by_stage"]
        assert [x["stage"] for x in stages] == list(range(obj["mesh"]["pp"])), name
        assert max(x["peak_allocated"] for x in stages) == obj["memory_bytes"]["peak_allocated"], name
        for x in stages:
            assert list(x) == ["stage", "peak_allocated", "peak_moment", "terms", "total"], name
            assert math.isclose(sum(x["terms"].values()), x["peak_allocated"], rel_tol=1e-12), name
        assert isinstance(obj["memory_verdict"], str) and obj["memory_verdict"], name
        assert set(obj["comm_bytes_per_step"]) == set(DIMS)
        assert set(obj["link"]) == set(DIMS)
        assert isinstance(obj["fits"], bool)
        assert isinstance(obj["params"], int) and isinstance(obj["gpus"], int)


def test_json_values_lab64_zero1(runs):
    obj = _report_json(runs, "lab64_zero1_json")
    assert obj["model"] == "qwen3.8-27b"
    assert obj["params"] == 27_781_427_952
    assert obj["gpus"] == 64
    assert obj["mesh"] == {"tp": 8, "cp": 1, "ep": 1, "dp": 4, "pp": 2}
    mem = obj["memory_bytes"]
    assert [f"{mem[k] / 1e9:.1f}" for k in ("model_states", "activations", "total")] == ["12.2", "0.3", "12.5"]
    assert obj["fits"] is True
    comm = obj["comm_bytes_per_step"]
    assert {k: f"{comm[k] / 1e9:.1f}" for k in DIMS} == {
        "dp": "5.2",
        "tp": "75.2",
        "pp": "0.7",
        "cp": "0.0",
        "ep": "0.0",
        "edp": "0.0",
    }
    assert comm["cp"] == 0 and comm["ep"] == 0 and comm["edp"] == 0
    assert obj["link"] == {"dp": "infiniband", "tp": "nvlink", "pp": "infiniband", "cp": None, "ep": None, "edp": None}
    assert obj["bubble"] == 0.125
    # the same numbers as the library
    r = evaluate(lab_plan(LAB_64_GPUS[2]))
    assert {k: v for k, v in mem.items() if k != "by_stage"} == dict(r.memory_bytes)
    assert comm == dict(r.comm_bytes_per_step)


def test_json_values_lab8_dp(runs):
    obj = _report_json(runs, "lab8_dp_json")
    assert obj["mesh"] == {"tp": 1, "cp": 1, "ep": 1, "dp": 8, "pp": 1}
    mem = obj["memory_bytes"]
    assert [f"{mem[k] / 1e9:.1f}" for k in ("model_states", "activations", "total")] == ["55.6", "2.7", "58.2"]
    assert obj["fits"] is True
    assert f"{obj['comm_bytes_per_step']['dp'] / 1e9:.1f}" == "145.9"
    assert obj["link"] == {"dp": "nvlink", "tp": None, "pp": None, "cp": None, "ep": None, "edp": None}
    assert obj["bubble"] == 0
    assert {k: v for k, v in mem.items() if k != "by_stage"} == dict(evaluate(lab_plan(LAB_8_GPUS[0])).memory_bytes)


def test_json_values_deepseek_ep(runs):
    obj = _report_json(runs, "deepseek_ep_json")
    assert obj["model"] == "deepseek-v3" and obj["params"] == 671_026_419_200
    assert obj["mesh"] == {"tp": 2, "cp": 1, "ep": 64, "dp": 64, "pp": 1}
    assert obj["link"]["ep"] == "infiniband" and obj["link"]["tp"] == "nvlink"
    r = evaluate(Plan.create("deepseek-v3", gpus=128, tp=2, ep=64, zero=1, recompute="full"))
    assert obj["comm_bytes_per_step"] == dict(r.comm_bytes_per_step)
    assert {k: v for k, v in obj["memory_bytes"].items() if k != "by_stage"} == dict(r.memory_bytes)


def test_dp_defaults_to_gpus_over_tp_cp_pp(runs):
    explicit = _report_json(runs, "lab64_zero1_json")
    default = _report_json(runs, "lab64_zero1_default_dp")
    assert default["mesh"]["dp"] == 64 // (8 * 1 * 2) == 4
    assert default == explicit
    assert _report_json(runs, "lab8_default_dp") == _report_json(runs, "lab8_dp_json")


# ---------------------------------------------------------------- the table
def test_table_output(runs):
    fits = _ok(runs, "lab64_table")
    assert "qwen3.8-27b" in fits and "27,781,427,952 parameters on 64 GPUs" in fits
    assert "fits in 80 GB" in fits and "does NOT fit" not in fits
    assert "21.9 %" in fits
    lines = {line.split()[0]: line for line in fits.splitlines() if line.startswith(("  TP", "  PP"))}
    assert "75.2 GB" in lines["TP"] and "NVLink" in lines["TP"]
    assert "2.7 GB" in lines["PP"] and "InfiniBand" in lines["PP"]
    big = _ok(runs, "lab8_selective_table")
    assert "qwen3.8-27b" in big and "101.2 GB" in big and "does NOT fit in 80 GB" in big
    assert "fits" not in big


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_one_line_exit_2(runs, name):
    rc, stdout, stderr = runs[name]
    assert rc == 2, (stdout, stderr)
    assert stdout == ""
    assert "Traceback" not in stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert stderr.startswith("meshplan: error: ")
    for needle in BAD[name][1]:
        assert needle in stderr, (needle, stderr)


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("gpus_not_product", {"model": "qwen3.8-27b", "gpus": 8, "dp": 4}),
        ("tp_heads", {"model": "small-3.7m", "gpus": 8, "tp": 8}),
        ("pp_layers", {"model": "qwen3.8-27b", "gpus": 24, "pp": 3, "tp": 8}),
        ("interleaved_m", {"model": "qwen3.8-27b", "gpus": 8, "pp": 8, "virtual_stages": 2, "micro_batches": 4}),
        ("cp_seq", {"model": "qwen3.8-27b", "gpus": 3, "cp": 3, "seq": 4096}),
        ("ep_experts", {"model": "deepseek-v3", "gpus": 6, "ep": 3}),
        ("ep_dp_cp", {"model": "deepseek-v3", "gpus": 8, "ep": 16}),
        ("ep_dense", {"model": "qwen3.8-27b", "gpus": 8, "ep": 2}),
        ("unknown_model", {"model": "no-such-model", "gpus": 8}),
    ],
)
def test_library_raises_the_same_message(runs, name, kwargs):
    with pytest.raises(ValueError) as exc:
        Plan.create(**kwargs)
    assert runs[name][2] == f"meshplan: error: {exc.value}\n"


def test_library_kv_heads_message(tmp_path):
    path = tmp_path / "kv6.json"
    path.write_text(json.dumps(KV6))
    with pytest.raises(ValueError, match=r"tp=4 does not divide 6 KV heads"):
        Plan.create(str(path), gpus=4, tp=4)
    with pytest.raises(ValueError, match=r"^tp=4 does not divide 6 KV heads$"):
        Plan.create(str(path), gpus=4, tp=4, kv_replication=False)
    # tp = 12 is a multiple of 6 KV heads: replication allowed (a sequence sequence parallelism can split 12 ways)
    assert Plan.create(str(path), gpus=12, tp=12, gpus_per_node=12, seq=12 * 342).tp == 12


def test_library_rejects_bad_sizes():
    bad: list[tuple[dict[str, Any], str]] = [
        ({"tp": 0}, "tp=0"),
        ({"tp": -2}, "tp=-2"),
        ({"tp": 1.5}, "tp=1.5"),
        ({"zero": 5}, "zero=5"),
        ({"tp": True}, "tp=True"),
        ({"recompute": "all"}, "recompute"),
    ]
    for kwargs, needle in bad:
        with pytest.raises(ValueError, match="must be") as exc:
            Plan.create("qwen3.8-27b", gpus=8, dp=8, **kwargs)
        assert needle in str(exc.value)


def test_infinite_gpu_memory_is_rejected(runs):
    """--gpu-memory-gb inf is refused (accepted, every plan would 'fit' and --json would print the non-JSON token
    Infinity)."""
    rc, stdout, stderr = runs["memory_inf"]
    assert rc == 2, stdout[:200]
    assert "gpu-memory-gb" in stderr


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_config_is_one_line_not_a_traceback(runs, name):
    """Config values are checked before they reach arithmetic: a word for gpt2's 'n_inner', a non-object
    'text_config', and 0 KV heads (which would divide by zero in evaluate() with cp > 1) each give one line."""
    rc, _stdout, stderr = runs[name]
    assert "Traceback" not in stderr, stderr.strip().splitlines()[-1]
    assert rc == 2 and stderr.count("\n") == 1
    assert MALFORMED[name][1] in stderr
