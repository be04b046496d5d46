"""The engines' interleaved 1F1B holds a different number of chunks on each pipeline rank (issue 24): the warm-up
count Megatron-Core and PyTorch's ScheduleInterleaved1F1B use (``spec.stages.interleaved_inflight_chunks``) equals
the peak the library's own schedule simulator finds, rank by rank; and the engine ledgers price each rank by it, the
lab page's ledger keeping Korthikanti's every-rank-as-the-first convention."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meshplan.cli import main
from meshplan.plan import Plan
from meshplan.plan import evaluation as ev
from meshplan.spec.stages import interleave_factor, interleaved_inflight_chunks


@pytest.mark.parametrize(("pp", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 4, 16), (8, 2, 16), (3, 2, 6)])
def test_warm_up_count_equals_the_simulated_peak(pp, v, m, capsys):
    assert main(["schedule", "--kind", "interleaved", "--pp", str(pp), "--micro-batches", str(m),
                 "--virtual-stages", str(v), "--json"]) == 0  # fmt: skip
    simulated = json.loads(capsys.readouterr().out)["peak_activations"]
    assert simulated == [interleaved_inflight_chunks(pp, k, m, v) for k in range(pp)]


def test_first_rank_is_korthikanti_and_the_last_rank_is_not():
    p, v, m = 8, 5, 64
    assert interleaved_inflight_chunks(p, 0, m, v) / v == pytest.approx(p * interleave_factor(p, v))
    assert interleaved_inflight_chunks(p, p - 1, m, v) / v == pytest.approx(p - (p - 1) / v)
    assert interleaved_inflight_chunks(4, 0, 2, 4) == 2 * 4  # all of m·v in the warm-up


def test_engine_ledgers_price_each_rank_lab_keeps_its_convention():
    """Llama 3.1 70B, PP 8 × v 5: the megatron ledger's last rank holds 33 chunks (6.6 micro-batches' worth of its
    layers, plus one micro-batch's head and loss); the lab's ledger counts 1 + 7/40 for it."""
    kw: dict[str, Any] = {"gpus": 64, "tp": 4, "pp": 8, "virtual_stages": 5, "seq": 8192, "global_batch": 128,
          "hardware": "h100-sxm-80gb", "zero": 1, "stage_balance": "max"}  # fmt: skip
    plan = Plan.create("llama-3.1-70b", accounting="megatron", **kw)
    last = plan.stages[-1]
    layers, rest = ev.stage_bytes(
        plan.model, last.layers, plan.seq, plan.micro_batch_size, recompute=plan.recompute, tp=plan.tp,
        sp=plan.sequence_parallel, first=False, last=True,
    )  # fmt: skip
    assert ev._stage_activations(plan, last, 0.0) == pytest.approx(layers * 33 / 5 + rest)
    lab = Plan.create("llama-3.1-70b", accounting="lab", **kw)
    per_layer = ev.lab_per_layer(lab)
    assert ev._stage_activations(lab, lab.stages[-1], per_layer) == pytest.approx(
        per_layer * lab.stages[-1].num_layers * interleave_factor(8, 5)
    )
