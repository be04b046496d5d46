"""One validation path: each value of a plan checked once where it is defined, the order parsed once, typed errors
that still are ValueErrors, and a search that rejects a candidate with the message its Plan raises."""

from __future__ import annotations

import json

import pytest

from meshplan import Mesh, ParallelDims, Plan, evaluate
from meshplan.core.validation import ConfigError, LedgerError, MeshplanError, PlanError, check_zero
from meshplan.parallel import dp as dp_mod
from meshplan.parallel import zero as zero_mod
from meshplan.plan import Workload
from meshplan.search import search
from meshplan.spec import dims as dims_mod
from meshplan.spec.model import load_model


@pytest.mark.parametrize(
    ("kw", "kind", "factor", "message"),
    [
        ({"tp": 3}, PlanError, "gpus", "tp×cp×pp = 3×1×1 = 3 does not divide gpus=8"),
        ({"tp": 16, "gpus": 16}, PlanError, "tp", "tp=16 does not divide 24 attention heads"),
        ({"pp": 8, "virtual_stages": 16}, PlanError, "virtual_stages", "pp×virtual_stages = 8×16 does not divide 64"),
        ({"global_batch": 12}, PlanError, "global_batch", "global batch 12 is not divisible by dp × micro-batch"),
        ({"zero": 4}, PlanError, "zero", "zero=4 must be 0, 1, 2 or 3"),
        ({"zero": 1, "accounting": "fsdp2"}, LedgerError, "zero", "zero=1: FSDP2 has no ZeRO-1"),
        ({"order": "tp-pp"}, PlanError, "order", "order='tp-pp' must name tp, cp, pp and dp once each"),
    ],
)
def test_a_plan_that_cannot_be_built_raises_a_plan_error_naming_its_factor(kw, kind, factor, message):
    with pytest.raises(ValueError) as err:  # every except ValueError still catches it
        Plan.create("qwen3.8-27b", **{"gpus": 8, **kw})
    assert type(err.value) is kind and isinstance(err.value, MeshplanError)
    assert err.value.factor == factor and str(err.value).startswith(message)


def test_a_bad_model_config_raises_a_config_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": "4096"}))
    with pytest.raises(ConfigError, match=r"^malformed config .*'hidden_size' must be a positive integer"):
        load_model(bad)
    with pytest.raises(ConfigError, match=r"^unknown model 'no-such-model'"):
        load_model("no-such-model")


def test_the_zero_stage_rule_is_written_once():
    for call in (
        lambda: check_zero(4),
        lambda: zero_mod.model_states_bytes(1e9, zero_stage=4, dp=8),
        lambda: dp_mod.ledger_sync_bytes(1e9, 8, "lab", zero_stage=4, micro_batches=8),
        lambda: Plan.create("qwen3.8-27b", gpus=8, zero=4),
    ):
        with pytest.raises(ValueError, match=r"^zero=4 must be 0, 1, 2 or 3$"):
            call()
    with pytest.raises(ValueError, match=r"^zero=True must be 0, 1, 2 or 3$"):  # a bool is not a stage
        zero_mod.model_states_bytes(1e9, zero_stage=True, dp=8)


def test_one_plan_checks_each_size_once_and_parses_its_order_once(monkeypatch):
    calls: list[tuple[str, object]] = []
    parses: list[str] = []
    check, parse = dims_mod.check_count, dims_mod.parse_order

    def counted_check(name, value, limit=None, error=MeshplanError):
        calls.append((name, value))
        return check(name, value, limit, error)

    def counted_parse(order):
        parses.append(order)
        return parse(order)

    monkeypatch.setattr(dims_mod, "check_count", counted_check)
    monkeypatch.setattr(dims_mod, "parse_order", counted_parse)
    plan = Plan.create("qwen3.8-27b", gpus=64, tp=8, pp=2, zero=1, recompute="full")
    evaluate(plan)
    assert sorted(name for name, _ in calls) == ["cp", "dp", "ep", "gpus", "pp", "tp"]  # ParallelDims' sizes, once
    assert parses == ["tp-cp-pp-dp"] and plan.dims.axes == ("tp", "cp", "pp", "dp")
    assert plan.mesh.dims is plan.dims  # the mesh takes the validated dims as they are


def test_a_mesh_of_a_mapping_equals_the_mesh_of_its_dims():
    d = ParallelDims(tp=2, pp=4, dp=2, ep=2, expert_tp=1, order="tp-cp-dp-pp")
    m = Mesh({"tp": 2, "cp": 1, "pp": 4, "dp": 2}, "tp-cp-dp-pp", 4, ep=2, etp=1)
    assert Mesh.from_dims(d, 4) == m and Mesh.from_dims(d, 4).strides == m.strides
    with pytest.raises(PlanError, match=r"^cp=None must be a positive integer$"):
        Mesh({"tp": 2, "pp": 4, "dp": 2})


def test_search_rejects_a_candidate_with_the_message_its_parts_raise():
    r = search("qwen3.8-27b", gpus=8, seq=4096, global_batch=12, micro_batch_sizes=(1, 2))
    by = r.rejection_examples()
    s = by["global batch"].settings
    with pytest.raises(PlanError) as err:
        Workload.for_global_batch(12, s["dp"], 4096, s["micro_batch_size"])
    assert by["global batch"].message == str(err.value) and err.value.factor == "global_batch"
    s = by["plan"].settings
    with pytest.raises(PlanError) as err:
        Plan.create(
            "qwen3.8-27b",
            gpus=8,
            **{k: s[k] for k in ("tp", "cp", "pp", "dp", "zero", "recompute", "micro_batch_size", "virtual_stages")},
            global_batch=12,
        )
    assert by["plan"].message == str(err.value)
