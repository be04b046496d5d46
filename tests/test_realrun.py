"""Chapter 9's real runs: the formulas against PyTorch on forked gloo ranks (ranks ≤ 4), and the activation
ledger against autograd.

Runs the quick set once (about 30 s of CPU in all, the ranks included, a sixth of it for the activation rows)
and asserts exact equality, to the byte and to the call, for model-state bytes, collective payloads and counts
(FSDP2 with m = 1 and 2 micro-batches included), DDP's bucket counts from iteration 2 on, pipeline bytes and
replayed bubbles, and the bytes autograd saves for three families; then compares the re-run with
``data/realrun_results.json``. Also: the predictions come from the library (``meshplan.parallel.buckets``,
``meshplan.schedule``, ``meshplan.parallel.engine_activations``), nothing happens at import, the ranks start with the
lazily imported modules already loaded, and ``validate`` checks its output path and its dependencies before any run.
No timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import meshplan
from meshplan import schedule
from meshplan.parallel import buckets, zero
from meshplan.realrun import RESULTS_PATH, command, load_results, predict, rows_from_results, run_checks, validate
from meshplan.realrun.activations import QUICK_FAMILIES, SHAPES, TINY_CONFIGS, part_differences, tiny_config
from meshplan.realrun.predict import ddp_buckets, fsdp2_resharded, replay, zero1_partition

PSI = 3_688_704


def _torch():
    """torch, imported by the first test that needs it rather than when the file is collected: a pytest process that
    runs none of these tests never loads it."""
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def quick_rows():
    _torch()
    return {r.check: r for r in run_checks(quick=True)}


def test_small_model_parameter_count_equals_the_library():
    _torch()
    from meshplan.realrun.model import build_small, count_params

    assert count_params(build_small()) == meshplan.load_model("small-3.7m").params.total == PSI
    assert count_params(build_small(fused_qkv=True)) == PSI


def test_every_exact_row_agrees(quick_rows):
    failed = [(r.check, r.predicted, r.measured) for r in quick_rows.values() if r.failed]
    assert failed == []
    assert sum(r.exact for r in quick_rows.values()) >= 50


@pytest.mark.parametrize(
    "check, value",
    [
        # model states (FSDP2: 4 + 4 + 8 B per parameter, each ÷ N)
        ("FSDP2 ZeRO-3 N=2: sharded parameters per rank", 4 * PSI // 2),
        ("FSDP2 ZeRO-3 N=4: Adam m and v per rank", 8 * PSI // 4),
        ("FSDP2 ZeRO-3 N=4: model states per rank", 16 * PSI // 4),
        ("FSDP2 ZeRO-2 mode (reshard_after_forward=False) N=4: model states per rank at rest", 16 * PSI // 4),
        ("ZeroRedundancyOptimizer N=4: optimizer bytes on rank 0", 7_471_104),
        ("ZeroRedundancyOptimizer N=2: optimizer bytes on the largest rank", 14_811_136),
        # payloads and counts
        ("DDP N=4: bytes all-reduced per step", 4 * PSI),
        ("FSDP2 ZeRO-3 N=4: all-gather + reduce-scatter payload per step", 12 * PSI),
        ("FSDP2 ZeRO-2 mode (reshard_after_forward=False) N=2: all-gather + reduce-scatter payload per step", 8 * PSI),
        ("FSDP2 ZeRO-3 N=2: collectives per step", 15),
        ("ZeroRedundancyOptimizer N=4: payload per step (all-reduce + broadcasts)", 8 * PSI),
        ("ZeroRedundancyOptimizer N=2: broadcasts per step", 35),
        ("TP t=2, separate q, k, v: all-reduces per layer, backward", 4),
        ("TP t=2, fused qkv: all-reduces per layer, backward", 2),
        ("TP t=2, fused qkv + SequenceParallel: all-gathers + reduce-scatters per layer (fwd + bwd)", 8),
        ("TP t=2, fused qkv + SequenceParallel: norm-weight gradients left Partial (bytes)", 2 * 4 * 256 * 4),
        # DDP buckets from iteration 2 on; iteration 1 is one bucket
        ("DDP N=2, default bucket_cap_mb (25 MiB, first bucket 1 MiB): buckets from iteration 2 on", 2),
        ("DDP N=4, bucket_cap_mb=1: buckets from iteration 2 on", 13),
        ("DDP N=4, bucket_cap_mb=1: buckets in iteration 1", 1),
        # pipeline bytes and bubbles
        ("GPipe p=2 v=1 m=4: bytes per send", 16 * 256 * 4),
        ("GPipe p=2 v=1 m=4: bytes sent by all ranks per step", 2 * 4 * 1 * 16 * 256 * 4),
        ("ZBVZeroBubble p=2 v=2 m=4: bytes sent by all ranks per step", 2 * 4 * 2 * 16 * 256 * 4),
        ("GPipe p=4 v=1 m=8: bubble replayed from pipeline_order", 3 / 8),
        ("Interleaved1F1B p=4 v=2 m=8: bubble replayed from pipeline_order", 3 / 16),
        ("ZBVZeroBubble p=4 v=2 m=8: bubble replayed from pipeline_order", 1 / 16),
        ("InterleavedZeroBubble p=4 v=1 m=8: bubble replayed from pipeline_order", 1 / 8),
        ("DualPipeV p=4 v=2 m=8: bubble replayed from pipeline_order", 1 / 8),
        # FSDP2 with gradient accumulation: 5 units (root 540,928 + 4 blocks of 786,944 parameters), fp32
        ("FSDP2 N=2, reshard_after_forward=True, m=2: all-gathers per step", 2 * (5 + 5)),
        ("FSDP2 N=2, reshard_after_forward=True, m=2: all-gather payload per step", 2 * 2 * 4 * PSI),
        ("FSDP2 N=2, reshard_after_forward default, m=2: all-gathers per step", 2 * (5 + 4)),
        ("FSDP2 N=2, reshard_after_forward default, m=2: all-gather payload per step", 2 * 4 * (2 * PSI - 540_928)),
        ("FSDP2 N=2, reshard_after_forward=False, m=2: all-gathers per step", 2 * 5),
        ("FSDP2 N=2, reshard_after_forward=False, m=2: reduce-scatters per step", 2 * 5),
        ("FSDP2 N=2, reshard_after_forward=False, m=2: reduce-scatter payload per step", 2 * 4 * PSI),
        (
            "FSDP2 N=2, reshard_after_forward default, sync on the last micro-batch only, "
            "m=2: reduce-scatters per step",
            5,
        ),
        (
            "FSDP2 N=2, reshard_after_forward default, sync on the last micro-batch only, "
            "m=2: reduce-scatter payload per step",
            4 * PSI,
        ),
        (
            "FSDP2 N=2, reshard_after_forward default, sync on the last micro-batch only, m=2: all-gathers per step",
            2 * (5 + 4),
        ),
    ],
)
def test_measured_values(quick_rows, check, value):
    assert quick_rows[check].measured == value


def test_bubbles_agree_with_the_schedule_simulator(quick_rows):
    for name, kind, v in (
        ("1F1B", "1f1b", 1),
        ("Interleaved1F1B", "interleaved", 2),
        ("InterleavedZeroBubble", "zb-h1", 1),
        ("DualPipeV", "dualpipev", 2),
    ):
        r = quick_rows[f"{name} p=4 v={v} m=8: bubble replayed from pipeline_order"]
        t = schedule.simulate(kind, 4, 8, v if kind == "interleaved" else 1)
        assert r.exact and r.measured == r.predicted == t.sync_bubble == t.bubble
        assert "meshplan.schedule.replay" in r.explanation


def test_fsdp_accumulation_rows_grow_with_m(quick_rows):
    # ZeRO-3 traffic is per micro-batch: m = 2 (re-run here) moves twice m = 1 (the results file), except the
    # gradient sync when it waits for the last micro-batch
    stored = {r.check: r for r in rows_from_results(load_results())}
    for label in (
        "reshard_after_forward=True",
        "reshard_after_forward default",
        "reshard_after_forward=False",
        "reshard_after_forward default, sync on the last micro-batch only",
    ):
        for what in ("all-gathers", "all-gather payload", "reduce-scatters", "reduce-scatter payload"):
            one = stored[f"FSDP2 N=2, {label}, m=1: {what} per step"]
            two = quick_rows[f"FSDP2 N=2, {label}, m=2: {what} per step"]
            four = stored[f"FSDP2 N=2, {label}, m=4: {what} per step"]
            once = "sync on the last" in label and what.startswith("reduce-scatter")
            assert two.measured == (1 if once else 2) * one.measured
            assert four.measured == (1 if once else 4) * one.measured
            assert one.exact and two.exact and four.exact and two.agrees and two.dimension == "fsdp_accum"


def test_departures_are_explained_not_hidden(quick_rows):
    r = quick_rows["ZeroRedundancyOptimizer N=4: bytes each rank sends per step (ring)"]
    assert (r.predicted, r.measured) == (2 * 3 / 4 * 4 * PSI, 3 * 3 / 4 * 4 * PSI) and not r.exact
    r = quick_rows["FSDP2 ZeRO-3 N=2: parameter bytes per rank, textbook split"]
    assert r.measured == 2 * r.predicted and "4 + 4 + 8" in r.explanation
    r = quick_rows["gloo N=2: reduce-scatter wire bytes per rank, 4 MiB input"]
    assert 2 * r.predicted <= r.measured < 2 * r.predicted * 1.001  # an all-reduce's bytes, plus headers
    r = quick_rows["TP t=2, separate q, k, v: bytes each rank sends per layer"]
    assert r.measured == 1.5 * r.predicted
    for row in quick_rows.values():
        assert row.explanation, row.check


def test_rerun_matches_the_results_file(quick_rows):
    doc = load_results()
    assert doc["provenance"]["torch"] == _torch().__version__
    stored = {r.check: r for r in rows_from_results(doc)}
    compared = 0
    for check, row in quick_rows.items():
        if row.dimension == "collectives":  # socket bytes include gloo's headers: not compared
            continue
        assert check in stored, check
        assert (stored[check].predicted, stored[check].measured) == (row.predicted, row.measured), check
        compared += 1
    assert compared >= 70


def test_results_file_has_no_failed_exact_row_and_covers_eight_ranks():
    rows = rows_from_results(load_results())
    assert not [r.check for r in rows if r.failed]
    assert any("N=8" in r.check for r in rows) and any("p=8" in r.check for r in rows)
    assert {r.dimension for r in rows} == {
        "ddp",
        "fsdp",
        "fsdp_accum",
        "zero1",
        "tp",
        "pp",
        "collectives",
        "activations",
    }
    # the full set: FSDP2 with m = 1, 2 and 4 micro-batches on 2 and 4 ranks, every variant
    accum = [r for r in rows if r.dimension == "fsdp_accum"]
    assert len(accum) == 2 * 4 * 3 * 4 and all(r.exact for r in accum)
    assert {r.check.split(", m=")[1].split(":")[0] for r in accum} == {"1", "2", "4"}
    assert json.loads(RESULTS_PATH.read_text()) == load_results()
    # the activation ledger: every family at two sequence lengths and two micro-batch sizes, all exact and equal
    act = [r for r in rows if r.dimension == "activations"]
    assert len(act) == len(TINY_CONFIGS) * len(SHAPES) == 16 * 4
    assert all(r.exact and r.agrees and r.explanation.endswith("Every part agrees to the byte.") for r in act)
    assert {r.check.split(" s=")[0] for r in act} == set(TINY_CONFIGS)
    assert load_results()["provenance"]["transformers"] == "5.23.0"


def test_activation_rows_equal_the_ledger_to_the_byte(quick_rows):
    act = {c: r for c, r in quick_rows.items() if r.dimension == "activations"}
    assert len(act) == len(QUICK_FAMILIES) * len(SHAPES) and all(r.exact and r.agrees for r in act.values())
    r = act["llama s=24 b=1: bytes autograd saves for backward"]
    # two layers and the model-level terms, each named with its bytes in the explanation
    assert r.measured == 162_924 and r.unit == "bytes"
    assert "2 layers (norms 37,248, mixer 23,040, mlp 73,728 B)" in r.explanation
    assert "logits 15,360" in r.explanation and "(sdpa)" in r.explanation
    assert act["deepseek_v3 s=80 b=3: bytes autograd saves for backward"].measured == 4_159_004


def test_tiny_configs_are_copied_out():
    cfg = tiny_config("qwen3_5")
    cfg["layer_types"].append("full_attention")  # a copy: the library's stays as it is
    assert len(TINY_CONFIGS["qwen3_5"]["layer_types"]) == 3
    with pytest.raises(ValueError, match="family='bloom' has no tiny config"):
        tiny_config("bloom")


def test_part_differences_names_every_part_that_differs():
    from types import MappingProxyType, SimpleNamespace

    class Formula:
        def layer_parts(self, i):
            return {"norms": 10.0, "mixer": 20.0, "mlp": 30.0, "layer": 0.0}

        def model_parts(self):
            return {"logits": 40.0, "loss": 4.0}

    same = SimpleNamespace(
        layers=(MappingProxyType({"norms": 10, "mixer": 20, "mlp": 30, "layer": 0}),),
        model=MappingProxyType({"logits": 40, "loss": 4, "embedding": 0}),
    )
    assert part_differences(same, Formula()) == []
    off = SimpleNamespace(
        layers=(MappingProxyType({"norms": 10, "mixer": 2_020, "mlp": 30, "layer": 0}),),
        model=MappingProxyType({"logits": 40, "loss": 4, "embedding": 8}),
    )
    assert part_differences(off, Formula()) == [
        "layer 0 mixer: measured 2,020 B, formula 20 B",
        "embedding: measured 8 B, formula 0 B",
    ]


def test_fsdp2_resharding_default_keeps_the_root_gathered():
    assert fsdp2_resharded(5, True) == [True] * 5
    assert fsdp2_resharded(5, False) == [False] * 5
    assert fsdp2_resharded(5, None) == [False, True, True, True, True]
    with pytest.raises(ValueError, match="units=0 must be a positive integer"):
        fsdp2_resharded(0, None)
    with pytest.raises(ValueError, match="reshard_after_forward=2 must be True, False or None"):
        fsdp2_resharded(5, 2)  # type: ignore[arg-type]  # an int where a bool is due, on purpose


def _lazily_imported(rank, world):
    import sys

    return "torch._dynamo" in sys.modules and "torch.distributed.pipelining" in sys.modules


def test_ranks_start_with_the_lazy_imports_loaded():
    # DDP and FSDP2 import torch._dynamo on first use (seconds per rank): the parent imports it once before forking
    from meshplan.realrun.launch import PRELOADED, run_ranks

    assert "torch._dynamo" in PRELOADED
    assert run_ranks(_lazily_imported, 2, backend=None) == [True, True]


def test_predictions_are_pure():
    assert ddp_buckets([3, 3, 3], cap_bytes=4) == [6, 3]
    assert zero1_partition([5, 4, 3, 2, 1], 3) == [5, 5, 5]
    with pytest.raises(ValueError, match="deadlock"):
        replay({0: [("B", 0, 0), ("F", 0, 0)]})
    with pytest.raises(ValueError, match="unknown computation type 'X'"):
        replay({0: [("X", 0, 0)]})
    assert zero.model_states_bytes(PSI, 3, 8) == 2 * PSI


def test_ddp_prediction_is_the_library_bucket_walk(quick_rows):
    # realrun has no bucket walk of its own: its prediction is meshplan.parallel.buckets.assign_buckets over the small
    # model's tensors (fp32 gradients), and the adapter the book uses gives the same buckets
    spec = meshplan.load_model("small-3.7m")
    tensors = tuple(reversed(predict.small_grad_tensors(spec)))
    assert [t.name for t in tensors][:2] == ["norm.weight", "blocks.3.mlp.fc2.weight"]
    from meshplan.realrun.model import build_small

    model = build_small()
    assert [(t.name, t.params) for t in predict.small_grad_tensors(spec)] == [
        (n, p.numel()) for n, p in model.named_parameters()
    ]
    assert sum(t.params for t in tensors) == PSI
    for cap, first, label in (
        (25 << 20, 1 << 20, "default bucket_cap_mb (25 MiB, first bucket 1 MiB)"),
        (1 << 20, 1 << 20, "bucket_cap_mb=1"),
    ):
        walk = buckets.assign_buckets(tensors, cap, first, grad_bytes_per_param=4)
        assert [b.n_bytes for b in walk] == ddp_buckets([4 * t.params for t in tensors], cap, first)
        for n in (2, 4):
            assert quick_rows[f"DDP N={n}, {label}: buckets from iteration 2 on"].predicted == len(walk)
            assert quick_rows[f"DDP N={n}, {label}: largest bucket"].predicted == max(b.n_bytes for b in walk)
    assert (
        "meshplan.parallel.buckets.assign_buckets"
        in quick_rows["DDP N=2, bucket_cap_mb=1: buckets from iteration 2 on"].explanation
    )


def test_torch_dualpipev_runs_the_library_order(quick_rows):
    # torch's ScheduleDualPipeV (a port of deepseek-ai/DualPipe's DualPipeV.step) lists, action for action,
    # the order meshplan.schedule builds from the repository's steps 1-8
    r = quick_rows["DualPipeV p=4 v=2 m=8: actions of pipeline_order equal to the library's"]
    ours = predict.torch_order("dualpipev", 4, 8)
    assert r.exact and r.measured == r.predicted == sum(map(len, ours.values()))
    for acts in ours.values():  # every rank: m forwards through each of its two stages, in F or OVERLAP_F_B
        assert sum(a[0] in ("F", "OVERLAP_F_B") for a in acts) == 2 * 8
    assert ours[3][:3] == [("F", 3, 0), ("F", 4, 0), ("F", 3, 1)]
    assert ("OVERLAP_F_B", 4, 4, 3, 0) in ours[3]


def test_fsdp2_prediction_formula():
    units = zero.fsdp_unit_params(meshplan.load_model("small-3.7m"))
    assert units == [540_928] + [786_944] * 4 and sum(units) == PSI
    for m in (1, 2, 4):
        for resharded in ([True] * 5, [False] + [True] * 4, [False] * 5):
            r = sum(resharded)
            for sync in (True, False):
                got = zero.fsdp2_collectives_per_step(units, resharded, m, sync)
                syncs = m if sync else 1
                assert got == {
                    "all_gathers": m * (5 + r),
                    "reduce_scatters": syncs * 5,
                    "all_gather_bytes": 4 * m * (PSI + sum(u for u, x in zip(units, resharded) if x)),
                    "reduce_scatter_bytes": 4 * syncs * PSI,
                }
    with pytest.raises(ValueError, match="micro_batches=0"):
        zero.fsdp2_collectives_per_step(units, [True] * 5, 0)
    with pytest.raises(ValueError, match="4 entries for 5 units"):
        zero.fsdp2_collectives_per_step(units, [True] * 4, 1)


def test_nothing_happens_at_import():
    # importing realrun loads no model, sets no environment variable and does not import torch
    code = (
        "import os, sys; import meshplan.spec.model as M\n"
        "def boom(*a, **k): raise AssertionError('load_model at import')\n"
        "M.load_model = boom; before = dict(os.environ)\n"
        "import meshplan.realrun, meshplan.realrun.predict, meshplan.realrun.rows, meshplan.realrun.command\n"
        "import meshplan.realrun.activations\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "import meshplan.realrun.checks, meshplan.realrun.runs, meshplan.realrun.launch\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "target, words",
    [
        ("missing/results.json", ["does not exist"]),
        (".", ["is a directory"]),
        ("file.txt/results.json", ["is not a directory"]),
    ],
)
def test_validate_checks_the_output_before_any_run(tmp_path, monkeypatch, target, words):
    (tmp_path / "file.txt").write_text("x")
    monkeypatch.chdir(tmp_path)

    def no_run(quick=True):
        raise AssertionError("ran the checks before checking --output")

    monkeypatch.setattr(command, "run_checks", no_run)
    with pytest.raises(ValueError) as err:
        validate(True, target)
    assert all(w in str(err.value) for w in words) and f"--output {target}" in str(err.value)


def test_validate_command_refuses_a_bad_output_at_once(tmp_path):
    # exit 2 with one line, before importing torch or running anything
    out = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "meshplan",
            "validate",
            "--quick",
            "--output",
            str(tmp_path / "missing" / "r.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and out.stdout == "" and len(errors) == 1, out.stderr
    assert errors[0].startswith("meshplan: error: --output ") and "does not exist" in errors[0]
    assert not any(line.rstrip().endswith(" torch") for line in out.stderr.splitlines())


def test_validate_writes_the_document_it_returns(tmp_path, monkeypatch):
    rows = rows_from_results(load_results())[:3]
    monkeypatch.setattr(command, "run_checks", lambda quick=True: rows)
    got_rows, doc = validate(False, tmp_path / "r.json")
    assert got_rows == rows and json.loads((tmp_path / "r.json").read_text()) == doc
    assert doc["rows"] == [r.to_dict() for r in rows] and doc["provenance"]["torch"] == _torch().__version__
    import transformers

    assert doc["provenance"]["transformers"] == transformers.__version__
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left behind


def test_validate_needs_transformers_before_any_run(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a)
    )
    monkeypatch.setattr(command, "run_checks", lambda quick=True: pytest.fail("ran the checks first"))
    with pytest.raises(ValueError, match=r"validate needs transformers: install the pinned version"):
        validate(True)


def test_plan_command_does_not_import_torch():
    code = (
        "import sys; from meshplan.cli import main; "
        "main(['plan', '--model', 'small-3.7m', '--gpus', '1', '--json']); assert 'torch' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr


def test_predict_doctests():
    import doctest

    import meshplan.realrun.predict as mod

    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4 and result.failed == 0
