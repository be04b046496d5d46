"""Step time: an estimate of the seconds per optimizer step of a plan, as named terms, and MFU.

On the most-loaded GPU, in seconds:

* ``compute_s``: the step's model FLOP at the hardware's effective FLOP/s, split evenly over the GPUs:
  ``compute.step_time_s(flop_params, tokens per step, effective FLOP/s × gpus, recompute)`` (6 FLOP per
  parameter per token, 8 with full recompute; attention-score FLOP ignored, as in ``compute``).
* ``tp_s``, ``cp_s``, ``ep_s``, ``pp_s``: the plan's bytes ÷ link bandwidth for the collectives that block the
  layer (TP all-reduces, CP's K/V exchange, EP's all-to-all, PP's send/receive): not hidden.
* ``dp_exposed_s``: the gradient synchronisation (``Report.grad_sync_bytes``: DP, the CP part of the two-level
  ring and the expert-data-parallel sync; ZeRO-3's gathers too) overlaps the backward pass of the last
  micro-batch (``compute.backward_time_s`` of b·s tokens over the t·c·p GPUs of one replica); only what sticks
  out is counted: max(0, sync time − that backward time).
* ``bubble_s``: the pipeline bubble (p−1)/(m·v) × (compute + blocking communication), the per-micro-batch work
  the idle stages wait for (Narayanan et al. 2021 §2.2).

MFU = 6 × flop_params × tokens per step ÷ (step time × GPUs × peak FLOP/s) (Chowdhery et al. 2022's model
FLOPs, without the attention term). Assumptions: no overlap of TP/CP/EP/PP traffic with compute, no latency,
no stragglers, balanced experts; the gradient sync is the plan's once-per-step volume (2Ψ, ZeRO-3's 3Ψ).

    >>> from meshplan.lab import LAB_64_GPUS, lab_plan
    >>> from meshplan.plan import evaluate
    >>> st = step_time(evaluate(lab_plan(LAB_64_GPUS[2])))
    >>> round(st.compute_s, 3), round(st.tp_s, 3), round(st.bubble_s, 3), round(st.total_s, 2)
    (1.05, 0.47, 0.192, 1.76)
"""

from __future__ import annotations

from dataclasses import dataclass

from . import compute
from .plan import Report

TERMS = ("compute_s", "tp_s", "cp_s", "ep_s", "pp_s", "dp_exposed_s", "bubble_s")


@dataclass(frozen=True)
class StepTime:
    """The estimated step time of one plan, in seconds, as named terms (see the module docstring)."""

    compute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    dp_exposed_s: float
    bubble_s: float

    @property
    def total_s(self) -> float:
        return sum(self.terms().values())

    def terms(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TERMS}


def _effective_flop_per_s(report: Report) -> float:
    hw = report.plan.hardware
    if hw.effective_flop_per_s is None:
        raise ValueError(f"hardware {hw.name!r} has no effective FLOP/s for this estimate")
    return hw.effective_flop_per_s


def step_time(report: Report) -> StepTime:
    """Estimated seconds per optimizer step of ``report``'s plan: compute + blocking communication + the part of
    the gradient synchronisation the last backward does not hide + the pipeline bubble."""
    p, m, hw = report.plan, report.plan.model, report.plan.hardware
    flops = _effective_flop_per_s(report)
    compute_s = compute.step_time_s(m.flop_params, p.tokens_per_step, flops * p.gpus, p.recompute)

    def secs(dim: str, n_bytes: float) -> float:
        link = report.link[dim]
        return n_bytes / hw.bandwidth(link) if link else 0.0

    sync = report.grad_sync_bytes
    cp_kv = report.comm_bytes_per_step["cp"] - sync.get("cp", 0.0)
    blocking = {"tp_s": report.comm_time_s["tp"], "cp_s": secs("cp", cp_kv), "ep_s": report.comm_time_s["ep"],
                "pp_s": report.comm_time_s["pp"]}
    sync_s = sum(secs(k, x) for k, x in sync.items())
    window = compute.backward_time_s(m.flop_params, p.micro_batch_size * p.seq, flops * p.tp * p.cp * p.pp)
    bubble = report.bubble * (compute_s + sum(blocking.values()))
    return StepTime(compute_s=compute_s, dp_exposed_s=max(0.0, sync_s - window), bubble_s=bubble, **blocking)


def model_flop_per_step(report: Report) -> float:
    """6 × flop_params × tokens per step (no recompute): the FLOP that MFU counts."""
    return compute.step_flop(report.plan.model.flop_params, report.plan.tokens_per_step)


def mfu(report: Report, step_s: float, peak_flop_per_s: float) -> float:
    """Model FLOPs utilisation: model FLOP per step ÷ (step time × GPUs × peak FLOP/s)."""
    if not peak_flop_per_s > 0 or not step_s > 0:
        raise ValueError(f"peak_flop_per_s={peak_flop_per_s!r} and step_s={step_s!r} must be positive")
    return model_flop_per_step(report) / (step_s * report.plan.gpus * peak_flop_per_s)
