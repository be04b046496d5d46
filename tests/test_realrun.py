"""Chapter 9's real runs: the formulas against PyTorch on forked gloo ranks (ranks ≤ 4).

Runs the quick set once (about 30 s on 2 cores) and asserts exact equality, to the byte and to the call,
for model-state bytes, collective payloads and counts, DDP's bucket counts from iteration 2 on, pipeline
bytes and replayed bubbles; then compares the re-run with ``data/realrun_results.json``. No timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import meshplan  # noqa: E402
from meshplan import zero  # noqa: E402
from meshplan.realrun import RESULTS_PATH, load_results, rows_from_results, run_checks  # noqa: E402
from meshplan.realrun.model import build_small, count_params  # noqa: E402
from meshplan.realrun.predict import ddp_buckets, replay, zero1_partition  # noqa: E402

PSI = 3_688_704


@pytest.fixture(scope="module")
def quick_rows():
    return {r.check: r for r in run_checks(quick=True)}


def test_small_model_parameter_count_equals_the_library():
    assert count_params(build_small()) == meshplan.load_model("small-3.7m").params.total == PSI
    assert count_params(build_small(fused_qkv=True)) == PSI


def test_every_exact_row_agrees(quick_rows):
    failed = [(r.check, r.predicted, r.measured) for r in quick_rows.values() if r.failed]
    assert failed == []
    assert sum(r.exact for r in quick_rows.values()) >= 50


@pytest.mark.parametrize("check, value", [
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
])
def test_measured_values(quick_rows, check, value):
    assert quick_rows[check].measured == value


def test_bubbles_agree_with_the_schedule_simulator(quick_rows):
    schedule = pytest.importorskip("meshplan.schedule")
    for (name, kind, v) in (("1F1B", "1f1b", 1), ("Interleaved1F1B", "interleaved", 2),
                            ("InterleavedZeroBubble", "zb-h1", 1)):
        r = quick_rows[f"{name} p=4 v={v} m=8: bubble replayed from pipeline_order"]
        assert r.exact and r.measured == r.predicted == schedule.simulate(kind, 4, 8, v).bubble


def test_departures_are_explained_not_hidden(quick_rows):
    r = quick_rows["ZeroRedundancyOptimizer N=4: bytes each rank sends per step (ring)"]
    assert (r.predicted, r.measured) == (2 * 3 / 4 * 4 * PSI, 3 * 3 / 4 * 4 * PSI) and not r.exact
    r = quick_rows["FSDP2 ZeRO-3 N=2: parameter bytes per rank, textbook split"]
    assert r.measured == 2 * r.predicted and "4 + 4 + 8" in r.explanation
    r = quick_rows["gloo N=2: reduce-scatter wire bytes per rank, 4 MiB input"]
    assert 2 * r.predicted <= r.measured < 2 * r.predicted * 1.001   # an all-reduce's bytes, plus headers
    r = quick_rows["TP t=2, separate q, k, v: bytes each rank sends per layer"]
    assert r.measured == 1.5 * r.predicted
    for row in quick_rows.values():
        assert row.explanation, row.check


def test_rerun_matches_the_results_file(quick_rows):
    doc = load_results()
    assert doc["provenance"]["torch"] == torch.__version__
    stored = {r.check: r for r in rows_from_results(doc)}
    compared = 0
    for check, row in quick_rows.items():
        if row.dimension == "collectives":        # socket bytes include gloo's headers: not compared
            continue
        assert check in stored, check
        assert (stored[check].predicted, stored[check].measured) == (row.predicted, row.measured), check
        compared += 1
    assert compared >= 70


def test_results_file_has_no_failed_exact_row_and_covers_eight_ranks():
    rows = rows_from_results(load_results())
    assert not [r.check for r in rows if r.failed]
    assert any("N=8" in r.check for r in rows) and any("p=8" in r.check for r in rows)
    assert {r.dimension for r in rows} == {"ddp", "fsdp", "zero1", "tp", "pp", "collectives"}
    assert json.loads(RESULTS_PATH.read_text()) == load_results()


def test_predictions_are_pure():
    assert ddp_buckets([3, 3, 3], cap_bytes=4) == [6, 3]
    assert zero1_partition([5, 4, 3, 2, 1], 3) == [5, 5, 5]
    with pytest.raises(ValueError, match="deadlocks"):
        replay({0: [("B", 0, 0), ("F", 0, 0)]})
    assert zero.model_states_bytes(PSI, 3, 8) == 2 * PSI


def test_plan_command_does_not_import_torch():
    code = ("import sys; from meshplan.cli import main; main(['plan', '--model', 'small-3.7m', '--gpus', '1', '--json']);"
            "assert 'torch' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_predict_doctests():
    import doctest

    import meshplan.realrun.predict as mod
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4 and result.failed == 0
