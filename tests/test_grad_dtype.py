"""Megatron-LM's --grad-reduce-in-bf16 (Plan.grad_dtype): half the gradient memory and the gradient reduction's
bytes at ZeRO 0 and 1, an fp32 copy of the optimizer's gradients at its step, the flag in the export, and refusals
that name the factor everywhere else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from commands import run
from test_export_roundtrip import check_round_trip

from meshplan import Plan, evaluate
from meshplan.core.validation import PlanError
from meshplan.export import export_text
from meshplan.spec.accounting import get_accounting

H100 = "h100-sxm-80gb"
KW = {"gpus": 64, "tp": 4, "pp": 8, "virtual_stages": 5, "seq": 8192, "global_batch": 128, "hardware": H100}


def _plan(**kw) -> Plan:
    return Plan.create("llama-3.1-70b", **{**KW, "accounting": "megatron", "zero": 1, "stage_balance": "max", **kw})


def test_bf16_gradients_halve_the_gradient_bytes_in_memory_and_on_the_wire():
    fp32, bf16 = evaluate(_plan()), evaluate(_plan(grad_dtype="bf16"))
    assert (fp32.plan.grad_dtype, bf16.plan.grad_dtype) == ("fp32", "bf16")
    params = fp32.model_states_terms["weights"] / 2  # bf16 weights: 2 bytes a parameter on this GPU
    assert fp32.model_states_terms["grads"] == 4 * params and bf16.model_states_terms["grads"] == 2 * params
    assert {k: v for k, v in bf16.model_states_terms.items() if k != "grads"} == {
        k: v for k, v in fp32.model_states_terms.items() if k != "grads"
    }
    # ZeRO-1 at DP 2: reduce-scatter of the gradients (4 → 2 bytes) and all-gather of the bf16 weights (2 bytes)
    dp = fp32.plan.dp
    assert fp32.comm_bytes_per_step["dp"] == pytest.approx(6 * params * (dp - 1) / dp)
    assert bf16.comm_bytes_per_step["dp"] == pytest.approx(4 * params * (dp - 1) / dp)
    assert [c.label for c in bf16.plan.accounting.sync[1]] == [
        "reduce-scatter (bf16 gradients)",
        "all-gather (bf16 updated weights)",
    ]
    # the optimizer step copies its share of the gradients to fp32 (distrib_optimizer.py L2782)
    steps = [mo for st in (fp32, bf16) for mo in st.by_stage[0].moments if mo.name == "optimizer step"]
    copy = steps[1].terms["temporaries"]
    assert steps[0].terms["temporaries"] == 0 and copy == pytest.approx(4 * params / dp)
    assert bf16.memory_bytes["peak_allocated"] < fp32.memory_bytes["peak_allocated"]


def test_the_export_writes_the_flag_and_reads_back():
    text = export_text(_plan(grad_dtype="bf16"), "megatron")
    assert "--grad-reduce-in-bf16" in text.split() and "--grad-reduce-in-bf16" not in export_text(_plan(), "megatron")
    assert check_round_trip(_plan(grad_dtype="bf16"), "megatron", "megatron")
    # back to fp32, and to another ledger, the engine's default returns
    assert _plan(grad_dtype="bf16").replace(grad_dtype="fp32").accounting == get_accounting("megatron")
    assert _plan(grad_dtype="bf16").replace(accounting="fsdp2", zero=3).grad_dtype == "fp32"


def test_refusals_name_the_factor():
    with pytest.raises(PlanError, match="grad_dtype='bf16': the fsdp2 ledger keeps its gradients in fp32") as err:
        Plan.create("llama-3.1-8b", gpus=8, zero=3, accounting="fsdp2", grad_dtype="bf16")
    assert err.value.factor == "grad_dtype"
    with pytest.raises(PlanError, match="grad_dtype='bf16' with zero=3: Megatron-FSDP") as err:
        _plan(grad_dtype="bf16", zero=3)
    assert err.value.factor == "grad_dtype"
    with pytest.raises(ValueError, match="grad_dtype='fp16' must be 'fp32' or 'bf16'"):
        _plan(grad_dtype="fp16")
    # the ledger's own dtype is accepted wherever it is asked for
    assert Plan.create("llama-3.1-8b", gpus=8, grad_dtype="bf16").grad_dtype == "bf16"  # the lab page's


def test_the_command_line():
    base = ["plan", "--model", "llama-3.1-8b", "--gpus", "8", "--accounting", "megatron", "--zero", "1", "--json"]
    out = json.loads(run([*base, "--grad-dtype", "bf16"]).stdout)
    assert out["settings"]["grad_dtype"] == "bf16"
    assert json.loads(run(base).stdout)["settings"]["grad_dtype"] == "fp32"
    bad = run(["plan", "--model", "llama-3.1-8b", "--gpus", "8", "--accounting", "fsdp2", "--grad-dtype", "bf16"])
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "grad_dtype='bf16'" in bad.stderr


def test_the_search_prices_every_candidate_with_the_gradient_dtype():
    from meshplan.search import search

    kw: dict[str, Any] = {"gpus": 16, "seq": 8192, "global_batch": 32, "hardware": H100, "accounting": "megatron"}
    fp32, bf16 = search("llama-3.1-8b", **kw), search("llama-3.1-8b", grad_dtype="bf16", **kw)
    assert {c.plan.grad_dtype for c in bf16.ranked} == {"bf16"} and {c.plan.grad_dtype for c in fp32.ranked} == {"fp32"}
    assert not [c for c in bf16.ranked if c.plan.zero >= 2]
    refused = [x for x in bf16.rejected if x.settings["zero"] >= 2 and x.constraint == "plan"]
    assert refused and all("Megatron-FSDP" in x.message and x.engine_refusal for x in refused)
    # with ZeRO-1 bf16 gradients never raise the peak (the optimizer's fp32 copy is 4/dp bytes a parameter, no more
    # than the 2 they save); at ZeRO 0 the optimizer copies every gradient to fp32 (optimizer.py L1097 at
    # core_v0.19.0: main_param.grad = model_param.main_grad.float()), so a step that peaks there peaks higher
    keys = {c.label(): c for c in bf16.ranked}
    peak = "peak_allocated"
    one = [(c, keys[c.label()]) for c in fp32.ranked if c.plan.zero == 1 and c.label() in keys]
    assert one and all(b.report.memory_bytes[peak] <= a.report.memory_bytes[peak] for a, b in one)
    zero0 = [(c, keys[c.label()]) for c in fp32.ranked if c.plan.zero == 0 and c.label() in keys]
    assert any(b.report.memory_bytes[peak] > a.report.memory_bytes[peak] for a, b in zero0)
    argv = ["search", "--model", "llama-3.1-8b", "--gpus", "16", "--seq", "8192", "--global-batch", "32"]
    out = run([*argv, "--hardware", H100, "--accounting", "megatron", "--grad-dtype", "bf16", "--top", "1", "--json"])
    assert json.loads(out.stdout)[0]["settings"]["grad_dtype"] == "bf16"
