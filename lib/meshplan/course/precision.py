"""The precision lever for the book (issue 25): one plan's step time, MFU and memory in bf16, FP8 and MXFP8, every
number from the library (``Plan(precision=...)``, ``steptime.step_time``, the megatron ledger), beside the published
run it reproduces.

    >>> rows = precision_rows()
    >>> [r["precision"] for r in rows]
    ['bf16', 'fp8', 'bf16', 'fp8', 'mxfp8']
"""

from __future__ import annotations

from meshplan.plan import evaluate
from meshplan.steptime import mfu, step_time
from meshplan.steptime import precision_fit as pf
from meshplan.steptime.precision_fit import EXECUTION

# the two shapes of Megatron-Bridge's tables the step time was fitted and checked on (``data/published_fp8_runs.json``)
SHAPES = (
    ("bridge-25.11-h100-fp8-llama3-70b", ("bf16", "fp8")),
    ("bridge-25.11-b200-fp8-llama3.1-405b", ("bf16", "fp8", "mxfp8")),
)


def precision_rows() -> list[dict]:
    """For each shape and precision: the step time (s), MFU against the bf16 peak, the GEMM share of the compute, the
    FP8 weight copies and the allocated peak per GPU (bytes), and the published step time where the tables print one
    for that precision (None for bf16 on these meshes, which NVIDIA publishes only with other meshes)."""
    runs = {r["id"]: r for r in pf.runs()}
    out = []
    for run_id, precisions in SHAPES:
        base = runs[run_id]
        for precision in precisions:
            r = {**base, "precision": precision}
            report = evaluate(pf.plan_for(r))
            st = step_time(report, EXECUTION)
            published = next(
                (
                    pf.published_step_s(x)
                    for x in pf.runs()
                    if x["precision"] == precision
                    and x["source"] == base["source"]
                    and all(x[k] == base[k] for k in ("hardware", "model", "gpus", "global_batch", "tp", "pp", "cp"))
                ),
                None,
            )
            out.append(
                {
                    "model": base["model"],
                    "hardware": base["hardware"],
                    "gpus": base["gpus"],
                    "precision": precision,
                    "step_s": st.total_s,
                    "compute_s": st.compute_s,
                    "mfu": mfu(report, st.total_s),
                    "fp8_weight_copies_bytes": report.model_states_terms.get("fp8 weight copies", 0.0),
                    "peak_allocated_bytes": report.memory_bytes["peak_allocated"],
                    "published_step_s": published,
                }
            )
    return out
