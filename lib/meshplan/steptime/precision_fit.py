"""The low-precision GEMM efficiencies: the fraction of the FP8 and MXFP8 peaks the decoder layers' GEMMs reach,
fitted on declared published runs and validated on runs kept apart.

The runs are NVIDIA's Megatron-Bridge performance tables (``data/published_fp8_runs.json``, each row with its source):
Llama 3 8B, 70B and 3.1 405B pretraining on DGX H100 and DGX B200. The sets were declared before any fit: **FP8**
(per-tensor current scaling, ``FP8-CS``) is fitted on the three H100 rows of the 25.11 container and validated on the
H100 rows of 26.02 (the same meshes at 2-3 times the global batch) and on the B200 FP8-CS rows (another GPU); **MXFP8**
is fitted on the two B200 FP8-MX rows of 25.11 and validated on the two of 25.09. Each constant is fitted alone, the
bf16 constants (``data/steptime_fit.json``) fixed, minimising the squared log ratio of predicted to published step
time over its fit set (a golden-section search on [0.05, 1], deterministic, pure Python).

How each run is planned (``plan_for``), with the assumptions it takes:

* the megatron ledger, ZeRO as the row's FSDP column says (FSDP > 0: Megatron-FSDP, ZeRO-3; else the distributed
  optimizer, ZeRO-1), the embedding on the first stage and the head on the last (``stage_balance="max"``), layers
  spread ends-lighter where pp × v does not divide them (405B: 126 layers); the ranks in Megatron-Bridge's order
  ``tp-cp-ep-dp-pp`` (``src/megatron/bridge/training/initialize.py`` L683 at 00919dc; no performance recipe sets
  ``use_tp_pp_dp_mapping``);
* Megatron-Bridge's performance recipes run with the communication overlaps on (``--overlap-grad-reduce``,
  ``--overlap-param-gather``, TP communication overlap): ``Execution(tp_overlap="full", dp_overlap=True)``;
* no recomputation (the tables state none; the H100 8B recipe recomputes 5 of its 32 layers, which is left out:
  about 3 % more GEMM work than priced);
* Llama 3 8B and 70B as the shipped Llama 3.1 configs (the same layers; 3.1 only changes the RoPE scaling).

    >>> rows = {r.id: r for r in validate()}
    >>> rows["bridge-26.02-h100-fp8-llama3-70b"].set
    'held out'
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from meshplan.core.optimize import golden_section
from meshplan.core.resources import read_json
from meshplan.plan import Plan, evaluate
from meshplan.spec.dims import MEGATRON_ORDER
from meshplan.steptime import model as stm
from meshplan.steptime.model import Execution, step_time

EXECUTION = Execution(tp_overlap="full", dp_overlap=True)
RANGE = (0.05, 1.0)  # an efficiency is a fraction of the peak


@lru_cache(maxsize=1)
def runs() -> tuple[dict, ...]:
    """The rows of ``data/published_fp8_runs.json``."""
    return tuple(read_json("published_fp8_runs.json")["runs"])


def plan_for(r: dict) -> Plan:
    """The plan of one published row (the assumptions are the module docstring's)."""
    return Plan.create(
        r["model"],
        gpus=r["gpus"],
        tp=r["tp"],
        pp=r["pp"],
        cp=r["cp"],
        virtual_stages=r["virtual_stages"],
        seq=r["seq"],
        micro_batch_size=r["micro_batch_size"],
        global_batch=r["global_batch"],
        hardware=r["hardware"],
        accounting="megatron",
        zero=r["zero"],
        recompute="none",
        precision=r["precision"],
        uneven_stages=True,
        stage_balance="max",
        order=MEGATRON_ORDER,
    )


def published_step_s(r: dict) -> float:
    """Seconds per step from the published throughput: B · s ÷ (tokens per second per GPU × GPUs)."""
    return r["global_batch"] * r["seq"] / (r["tokens_per_s_per_gpu"] * r["gpus"])


@dataclass(frozen=True)
class Row:
    """One published run against the model: ``error`` is predicted ÷ published − 1."""

    id: str
    precision: str
    hardware: str
    set: str
    published_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.published_s - 1


def _predict(r: dict, efficiency: float | None) -> float:
    report = evaluate(plan_for(r))
    if efficiency is None:
        return step_time(report, EXECUTION).total_s
    stored = stm.precision_fit()
    trial = {**stored, "constants": {**stored["constants"], r["precision"]: {"value": efficiency}}}
    stm.precision_fit.cache_clear()
    try:
        stm._PRECISION_OVERRIDE = trial
        return step_time(report, EXECUTION).total_s
    finally:
        stm._PRECISION_OVERRIDE = None
        stm.precision_fit.cache_clear()


def validate(efficiency: dict[str, float] | None = None) -> list[Row]:
    """Every row, predicted with the stored efficiencies (or those of ``efficiency``, by precision)."""
    out = []
    for r in runs():
        eff = None if efficiency is None else efficiency.get(r["precision"])
        out.append(Row(r["id"], r["precision"], r["hardware"], r["set"], published_step_s(r), _predict(r, eff)))
    return out


def fit(precision: str) -> float:
    """The efficiency of ``precision`` that minimises Σ log²(predicted ÷ published) over its fit set."""
    fit_set = [r for r in runs() if r["precision"] == precision and r["set"] == "fit"]
    if not fit_set:
        raise ValueError(f"precision={precision!r} has no fit set in published_fp8_runs.json")

    def loss(x: float) -> float:
        return sum(math.log(_predict(r, x) / published_step_s(r)) ** 2 for r in fit_set)

    return round(golden_section(loss, *RANGE), 4)  # (0.618)^40 × 0.95 < 1e-8


def summary(rows: list[Row]) -> dict[str, dict[str, float]]:
    """Median and largest |error| by precision, set and GPU."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(f"{r.precision} {r.set} {r.hardware}", []).append(abs(r.error))
    return {
        k: {"n": len(v), "median": round(statistics.median(v), 4), "max": round(max(v), 4)}
        for k, v in sorted(groups.items())
    }


def record() -> dict:
    """``data/precision_fit.json``: the fitted efficiencies, their fit sets and every row's error."""
    constants = {p: fit(p) for p in ("fp8", "mxfp8")}
    rows = validate(constants)
    return {
        "description": "Achieved fraction of the FP8 / MXFP8 dense peak in the decoder layers' GEMMs "
        "(meshplan.steptime.precision_fit; written by `python -m meshplan.steptime.precision_fit --write`).",
        "constants": {
            p: {
                "value": v,
                "fit_set": [r["id"] for r in runs() if r["precision"] == p and r["set"] == "fit"],
                "held_out": [r["id"] for r in runs() if r["precision"] == p and r["set"] != "fit"],
            }
            for p, v in constants.items()
        },
        "rows": [
            {
                "id": r.id,
                "set": r.set,
                "published_s": round(r.published_s, 4),
                "predicted_s": round(r.predicted_s, 4),
                "error": round(r.error, 4),
            }
            for r in rows
        ],
        "summary": summary(rows),
    }


if __name__ == "__main__":  # pragma: no cover - the refit, run by hand
    import json
    import sys

    from meshplan.core.resources import data_path

    rec = record()
    text = json.dumps(rec, indent=2, ensure_ascii=False) + "\n"
    if "--write" in sys.argv:
        data_path("precision_fit.json").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
