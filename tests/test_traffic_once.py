"""Each dimension's traffic is written once: the bytes ledger (``evaluate``'s ``comm_bytes_per_step``) and the
step-time model (``step_time``) read the same list of collectives (``Report.collectives``, from
``tp.tp_collectives``, ``cp.cp_collectives``, ``ep.ep_collectives``). Change a count in a dimension's module and both
move; the step-time model prices exactly the entries of the report's list."""

from __future__ import annotations

from typing import Any

import pytest

from meshplan.parallel import cp, ep, tp
from meshplan.plan import Plan, evaluate, evaluation
from meshplan.steptime import Execution, step_time

H100 = "h100-sxm-80gb"
CASES: dict[str, tuple[Any, str, dict[str, Any], Execution]] = {
    "tp": (tp, "TP_BLOCKS_PER_LAYER", {"model": "qwen3.8-27b", "gpus": 8, "tp": 8}, Execution(tp_overlap="none")),
    "cp": (
        cp,
        "CP_FORWARD_PASSES",
        {"model": "qwen3.8-27b", "gpus": 16, "tp": 8, "cp": 2, "seq": 32768},
        Execution(cp_overlap=False),
    ),
    "ep": (ep, "EP_ALL_TO_ALLS_FORWARD", {"model": "qwen3-30b-a3b", "gpus": 8, "ep": 8}, Execution()),
}


def _price(kw: dict[str, Any], ex: Execution):
    report = evaluate(Plan.create(**kw, hardware=H100, micro_batches=2))
    return report, step_time(report, ex)


@pytest.fixture
def fresh_collectives():
    """evaluate builds each list of collectives once per what it reads (``evaluation._collectives``, an lru cache):
    a count changed at run time, as the test below changes one, needs the cache emptied, before and after."""
    evaluation._collectives.cache_clear()
    yield
    evaluation._collectives.cache_clear()


@pytest.mark.parametrize("dim", sorted(CASES))
def test_a_count_changed_in_the_module_moves_bytes_and_time(monkeypatch, fresh_collectives, dim):
    module, name, kw, ex = CASES[dim]
    before, t_before = _price(kw, ex)
    assert before.comm_bytes_per_step[dim] > 0 and getattr(t_before, f"{dim}_s") > 0
    monkeypatch.setattr(module, name, 2 * getattr(module, name))
    evaluation._collectives.cache_clear()
    after, t_after = _price(kw, ex)
    assert after.comm_bytes_per_step[dim] > before.comm_bytes_per_step[dim]
    assert getattr(t_after, f"{dim}_s") > getattr(t_before, f"{dim}_s")
    others = [k for k in before.comm_bytes_per_step if k != dim]
    assert [after.comm_bytes_per_step[k] for k in others] == [before.comm_bytes_per_step[k] for k in others]


@pytest.mark.parametrize("dim", sorted(CASES))
def test_the_ledger_sums_the_lists_ledger_entries(dim):
    _, _, kw, _ = CASES[dim]
    report = evaluate(Plan.create(**kw, hardware=H100, micro_batches=2))
    stage = report.plan.stages[report.traffic_stage]
    units = {"tp": stage.num_layers, "cp": stage.full_attention_layers, "ep": stage.moe_layers}[dim]
    counted = sum(c.sent_bytes for c in report.collectives[dim] if c.in_ledger) * units * 2
    extra = report.grad_sync_bytes.get(dim, 0.0)  # CP's share of the gradient sync is reported under cp too
    assert report.comm_bytes_per_step[dim] == pytest.approx(counted + extra, rel=1e-12)


def test_recompute_adds_time_the_ledger_does_not_count():
    kw: dict[str, Any] = {"model": "qwen3.8-27b", "gpus": 8, "tp": 8, "hardware": H100}
    plain, full = (evaluate(Plan.create(**kw, recompute=r)) for r in ("none", "full"))
    assert plain.comm_bytes_per_step["tp"] == full.comm_bytes_per_step["tp"]
    ex = Execution(tp_overlap="none")
    assert step_time(full, ex).tp_s == pytest.approx(1.5 * step_time(plain, ex).tp_s, rel=1e-12)
    assert [c.phase for c in full.collectives["tp"] if not c.in_ledger] == ["recompute", "recompute"]
