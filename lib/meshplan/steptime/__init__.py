"""The step-time model and what is built on it (imports ``plan`` and below).

* ``model``: the seconds per optimizer step of a ``Report``, as named terms, with MFU and HFU;
* ``breakdowns``: the chapters' views of it (a TP layer's time, the CP ring's overlap, the EP all-to-all's
  balance, CP folded into DP);
* ``fitting``: the fit of the model's constants to published runs, and its held-out errors.
"""

from meshplan.steptime.model import (
    OVERHEADS,
    PHYSICAL_RANGES,
    TERMS,
    Calibration,
    Execution,
    MicroBatch,
    StepTime,
    calibration,
    collective_latency_s,
    execution_for,
    fit_data,
    flash_attention_utilisation,
    hardware_flop_per_step,
    hfu,
    mfu,
    micro_batch,
    model_flop_per_step,
    step_report,
    step_time,
    step_time_floors,
)

__all__ = [
    "OVERHEADS",
    "PHYSICAL_RANGES",
    "TERMS",
    "Calibration",
    "Execution",
    "MicroBatch",
    "StepTime",
    "calibration",
    "collective_latency_s",
    "execution_for",
    "fit_data",
    "flash_attention_utilisation",
    "hardware_flop_per_step",
    "hfu",
    "mfu",
    "micro_batch",
    "model_flop_per_step",
    "step_report",
    "step_time",
    "step_time_floors",
]
