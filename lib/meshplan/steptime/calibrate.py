"""The step-time model fitted to the reader's own runs (``meshplan calibrate``): a hardware file whose step times are
those of the reader's machine, its software and its kernels, not the published runs the stored constants came from.

Input: a JSON file, ``{"runs": [...], "busbw": {...}}`` or just the list of runs, or a CSV file with one run per row
under a header. A run is the plan it ran, in ``meshplan plan``'s option names (``model``, ``gpus``, ``tp``, ``cp``,
``pp``, ``ep``, ``expert_tp``, ``dp``, ``zero``, ``recompute``, ``seq``, ``micro_batch_size``, ``micro_batches``,
``global_batch``, ``virtual_stages``, ``order``, ``accounting``, ``precision``, ``uneven_stages``; dashes or
underscores), ``model`` a shipped name or a path to a ``config.json`` (relative to the runs file), and what was
measured: ``step_time_s`` (seconds per optimizer step, the steady state, not the first steps) or ``tokens_per_s``
(the whole job's, all GPUs), optionally ``id``. ``busbw`` (optional) is what nccl-tests' ``all_reduce_perf`` printed
as bus bandwidth on the machine, ``{"nvlink": GB/s within a node, "infiniband": GB/s across nodes}`` (GB = 10⁹ B):
the file's link bandwidths become those, with ``link_efficiency`` 1 (busbw already is what a ring achieves:
time = ring bytes per GPU ÷ busbw), unless ``link_efficiency`` is among the fitted constants.

Fit: the constants named (``matmul_efficiency`` by default; ``link_efficiency`` and ``hbm_passes`` on request) that
minimise Σ log²(predicted ÷ measured) over the runs, each within its physical range, by coordinate descent with a
golden-section search per constant (the stored fit's loss, ``steptime.fitting``); the others keep the stored values.
Reported: each run's error before (the stored constants) and after, and its **held-out** error: the fit repeated
without that run, which then predicts it (leave one out). The held-out errors are what to expect on a new plan on the
same machine; the in-sample ones are not. At least one more run than fitted constants is required.

Output: the base hardware file (a preset or a path, every figure and source kept) with ``name``, ``label`` and
``step_time_calibration`` (each constant with its value and a source naming the runs), which ``--hardware`` takes:
``steptime.calibration_for`` uses its constants instead of the stored ones. Memory verdicts do not change.

    >>> import tempfile, json, os
    >>> d = tempfile.mkdtemp()
    >>> runs = [{"model": "llama-3.1-8b", "gpus": 8, "zero": 3, "accounting": "fsdp2", "step_time_s": 2.5},
    ...         {"model": "llama-3.1-8b", "gpus": 16, "tp": 2, "accounting": "megatron", "step_time_s": 2.0}]
    >>> with open(os.path.join(d, "runs.json"), "w") as f:
    ...     json.dump(runs, f)
    >>> fit, _ = calibrate(os.path.join(d, "runs.json"), "h100-sxm-80gb")
    >>> [r.id for r in fit.rows], 0.05 <= fit.constants.matmul_efficiency <= 1
    (['run 1', 'run 2'], True)
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from meshplan.core.optimize import golden_section
from meshplan.core.units import GB
from meshplan.core.validation import PlanError
from meshplan.plan import Plan, evaluate
from meshplan.spec.accounting import get_accounting
from meshplan.spec.hardware import CALIBRATION_RANGES, HARDWARE_DIR, Hardware, load_hardware
from meshplan.steptime.model import (
    PHYSICAL_RANGES,
    Calibration,
    calibration_for,
    flash_attention_utilisation,
    step_time,
)

MAX_RUNS_BYTES = 4 * 2**20  # a runs file is a few kilobytes; refuse a large file before reading it
MAX_RUNS = 1000
FITTABLE = tuple(PHYSICAL_RANGES)
INT_KEYS = ("gpus", "tp", "cp", "pp", "ep", "expert_tp", "dp", "zero", "seq", "micro_batch_size", "micro_batches",
            "global_batch", "virtual_stages")  # fmt: skip
STR_KEYS = ("model", "recompute", "order", "accounting", "precision", "stage_balance")
BOOL_KEYS = ("uneven_stages",)
MEASURED = ("step_time_s", "tokens_per_s")
KNOWN = {*INT_KEYS, *STR_KEYS, *BOOL_KEYS, *MEASURED, "id"}


class CalibrationError(ValueError):
    """A runs file or a fit that cannot be used; the message names the file, the run and the field."""


@dataclass(frozen=True)
class Run:
    """One measured run: its id, the plan it ran and the measured seconds per step."""

    id: str
    plan: Plan
    measured_s: float


@dataclass(frozen=True)
class RunFit:
    """One run's predictions: with the stored constants, the fitted ones, and the fit made without it."""

    id: str
    measured_s: float
    stored_s: float
    fitted_s: float
    held_out_s: float | None

    @staticmethod
    def _err(pred: float | None, meas: float) -> float | None:
        return None if pred is None else pred / meas - 1

    @property
    def stored_error(self) -> float:
        return self.stored_s / self.measured_s - 1

    @property
    def fitted_error(self) -> float:
        return self.fitted_s / self.measured_s - 1

    @property
    def held_out_error(self) -> float | None:
        return self._err(self.held_out_s, self.measured_s)


@dataclass(frozen=True)
class Fit:
    """The fitted constants, the hardware they belong to, and every run's predictions."""

    hardware: Hardware
    constants: Calibration
    fitted: tuple[str, ...]
    rows: tuple[RunFit, ...]

    def summary(self) -> dict[str, float | None]:
        """Median and largest |error| with the stored constants, in sample, and held out."""

        def stats(xs: list[float | None]) -> tuple[float | None, float | None]:
            ys = [abs(x) for x in xs if x is not None]
            return (statistics.median(ys), max(ys)) if ys else (None, None)

        out: dict[str, float | None] = {}
        for name, xs in (
            ("stored", [r.stored_error for r in self.rows]),
            ("fitted", [r.fitted_error for r in self.rows]),
            ("held_out", [r.held_out_error for r in self.rows]),
        ):
            out[f"{name}_median"], out[f"{name}_max"] = stats(list(xs))
        return out


# ---------------------------------------------------------------------------------------------- the runs file
def _key(k: str) -> str:
    return k.strip().replace("-", "_")


def _value(where: str, key: str, raw: Any) -> Any:
    """A run's field, typed: integers, strings, booleans; CSV cells arrive as text."""
    if key in INT_KEYS:
        if isinstance(raw, str):
            try:
                raw = int(raw.strip())
            except ValueError:
                raise CalibrationError(f"{where}: {key}={raw!r} must be an integer") from None
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise CalibrationError(f"{where}: {key}={raw!r} must be an integer")
        return raw
    if key in BOOL_KEYS:
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return raw.strip().lower() in ("true", "1", "yes")
        if not isinstance(raw, bool):
            raise CalibrationError(f"{where}: {key}={raw!r} must be true or false")
        return raw
    if key in MEASURED:
        if isinstance(raw, str):
            try:
                raw = float(raw.strip())
            except ValueError:
                raise CalibrationError(f"{where}: {key}={raw!r} must be a number") from None
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw <= 0:
            raise CalibrationError(f"{where}: {key}={raw!r} must be a positive number")
        return float(raw)
    if not isinstance(raw, str) or not raw.strip():
        raise CalibrationError(f"{where}: {key}={raw!r} must be a non-empty string")
    return raw.strip()


def _rows(path: Path) -> tuple[list[dict], dict]:
    """The raw runs and the busbw table of ``path`` (JSON or CSV)."""
    try:
        size = path.stat().st_size
        if size > MAX_RUNS_BYTES:
            raise CalibrationError(f"runs file {str(path)!r}: {size:,} bytes is not a runs file (at most "
                                   f"{MAX_RUNS_BYTES:,})")  # fmt: skip
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CalibrationError(f"cannot read runs file {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CalibrationError(f"cannot read runs file {str(path)!r}: not UTF-8 text") from None
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        rows = [{k: v for k, v in row.items() if k is not None and v not in (None, "")} for row in reader]
        return rows, {}
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CalibrationError(f"runs file {str(path)!r}: invalid JSON ({exc})") from None
    if isinstance(doc, list):
        doc = {"runs": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise CalibrationError(f'runs file {str(path)!r}: expected a list of runs or {{"runs": [...]}}')
    busbw = doc.get("busbw") or {}
    if not isinstance(busbw, dict):
        raise CalibrationError(f'runs file {str(path)!r}: busbw must be {{"nvlink": GB/s, "infiniband": GB/s}}')
    return doc["runs"], busbw


def read_runs(path: Path | str, hardware: Hardware) -> tuple[list[Run], dict[str, float], Hardware]:
    """The runs of ``path`` as plans (their measured seconds per step), the busbw table in bytes per second by link,
    and the machine they ran on: ``hardware`` with the measured bus bandwidths as its link figures. Each plan is the
    one ``meshplan plan`` builds from the same options (the stages laid out as the ledger's engine lays them out).
    CalibrationError (one line, naming the file, the run and the field) for anything that cannot be used."""
    path = Path(path)
    raw_rows, raw_busbw = _rows(path)
    if not raw_rows:
        raise CalibrationError(f"runs file {str(path)!r}: no runs")
    if len(raw_rows) > MAX_RUNS:
        raise CalibrationError(f"runs file {str(path)!r}: {len(raw_rows):,} runs, at most {MAX_RUNS:,}")
    busbw: dict[str, float] = {}
    for link, v in raw_busbw.items():
        if link not in ("nvlink", "infiniband"):
            raise CalibrationError(f"runs file {str(path)!r}: busbw.{link}: the links are nvlink and infiniband")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise CalibrationError(f"runs file {str(path)!r}: busbw.{link}={v!r} must be a positive number (GB/s)")
        busbw[link] = float(v) * GB
    machine = with_busbw(hardware, busbw)
    runs = []
    for i, raw in enumerate(raw_rows, 1):
        where = f"runs file {str(path)!r}, run {i}"
        if not isinstance(raw, dict):
            raise CalibrationError(f"{where}: expected an object of plan options and a measurement")
        fields = {_key(k): v for k, v in raw.items()}
        unknown = sorted(set(fields) - KNOWN)
        if unknown:
            raise CalibrationError(f"{where}: unknown field {unknown[0]!r} (the plan options of meshplan plan, "
                                   "step_time_s or tokens_per_s, id)")  # fmt: skip
        run_id = str(fields.pop("id", f"run {i}"))
        where = f"runs file {str(path)!r}, {run_id}" if run_id != f"run {i}" else where
        values = {k: _value(where, k, v) for k, v in fields.items()}
        measured = [k for k in MEASURED if k in values]
        if len(measured) != 1:
            raise CalibrationError(f"{where}: give one of step_time_s or tokens_per_s")
        if "model" not in values or "gpus" not in values:
            raise CalibrationError(f"{where}: model and gpus are required")
        model = values.pop("model")
        local = path.parent / model
        if not Path(model).is_absolute() and ("/" in model or model.endswith(".json")) and local.exists():
            model = str(local)
        meas = {k: values.pop(k) for k in measured}
        values.setdefault("stage_balance", _stage_balance(values.get("accounting", "lab"), where))
        try:
            plan = Plan.create(model, hardware=machine, **values)
        except ValueError as exc:
            raise CalibrationError(f"{where}: {exc}") from None
        seconds = meas.get("step_time_s") or plan.tokens_per_step / meas["tokens_per_s"]
        runs.append(Run(run_id, plan, seconds))
    return runs, busbw, machine


def _stage_balance(accounting: str, where: str) -> str:
    try:
        return get_accounting(accounting).stage_balance
    except ValueError as exc:
        raise CalibrationError(f"{where}: {exc}") from None


# ---------------------------------------------------------------------------------------------- the fit
def _predict(run: Run, cal: Calibration) -> float:
    return step_time(evaluate(run.plan), None, cal).total_s


def _loss(runs: list[Run], cal: Calibration) -> float:
    return sum(math.log(_predict(r, cal) / r.measured_s) ** 2 for r in runs)


def fit_constants(runs: list[Run], start: Calibration, fitted: tuple[str, ...], cycles: int = 4) -> Calibration:
    """The constants of ``fitted`` minimising Σ log²(predicted ÷ measured) over ``runs`` (coordinate descent from
    ``start``, a golden-section search per constant within its physical range); the others as in ``start``."""
    cal = start
    for _ in range(cycles if len(fitted) > 1 else 1):
        for name in fitted:
            lo, hi = PHYSICAL_RANGES[name]

            def loss(x: float, name: str = name, cal: Calibration = cal) -> float:
                return _loss(runs, replace(cal, **{name: x}))

            cal = replace(cal, **{name: round(golden_section(loss, lo, hi), 4)})
    return cal


def with_busbw(hardware: Hardware, busbw: dict[str, float]) -> Hardware:
    """``hardware`` with the measured bus bandwidths as its link figures (bytes per second)."""
    if not busbw:
        return hardware
    return replace(
        hardware,
        nvlink_bytes_per_s=busbw.get("nvlink", hardware.nvlink_bytes_per_s),
        infiniband_bytes_per_s=busbw.get("infiniband", hardware.infiniband_bytes_per_s),
    )


def calibrate(
    path: Path | str, hardware: str | None = None, fitted: tuple[str, ...] = ("matmul_efficiency",)
) -> tuple[Fit, dict[str, float]]:
    """Fit ``fitted`` to the runs of ``path`` on the machine ``hardware`` (a preset or a path; default lab): the
    fit, with every run's stored, fitted and held-out predictions, and the busbw table. CalibrationError for a
    runs file that cannot be used or too few runs for the constants."""
    if not fitted or len(set(fitted)) != len(fitted) or any(f not in FITTABLE for f in fitted):
        raise CalibrationError(f"--fit {','.join(fitted)}: name one or more of {', '.join(FITTABLE)}, each once")
    base = load_hardware(hardware)
    runs, busbw, machine = read_runs(path, base)
    if len(runs) < len(fitted) + 1:
        raise CalibrationError(
            f"{len(runs)} run(s) for {len(fitted)} constant(s): give at least {len(fitted) + 1}, so that each run can "
            "be predicted by a fit made without it"
        )
    stored = calibration_for(base)
    start = replace(stored, link_efficiency=1.0) if busbw and "link_efficiency" not in fitted else stored
    try:
        cal = fit_constants(runs, start, fitted)
        rows = []
        for i, r in enumerate(runs):
            rest = runs[:i] + runs[i + 1 :]
            held = fit_constants(rest, start, fitted) if rest else None
            rows.append(
                RunFit(r.id, r.measured_s, _predict(r, stored), _predict(r, cal), _predict(r, held) if held else None)
            )
    except PlanError as exc:  # e.g. a plan that the step-time model cannot price on this machine
        raise CalibrationError(str(exc)) from None
    return Fit(machine, cal, fitted, tuple(rows)), busbw


# ---------------------------------------------------------------------------------------------- the hardware file
def hardware_document(fit: Fit, hardware: str | None, name: str, runs_path: Path | str, busbw: dict) -> dict:
    """The hardware file: the base file's figures and sources, the measured bus bandwidths, and the fitted
    constants with a source each."""
    text = "lab" if hardware is None else str(hardware)
    preset = HARDWARE_DIR / f"{text}.json"
    base_path = preset if "/" not in text and preset.is_file() else Path(text)
    doc = json.loads(base_path.read_text(encoding="utf-8"))
    doc.pop("step_time_calibration", None)
    base_label = doc.get("label") or doc.get("name") or text
    ids = ", ".join(r.id for r in fit.rows)
    s = fit.summary()
    held = "" if s["held_out_median"] is None else (
        f"; held out (leave one out): median {s['held_out_median']:.1%}, worst {s['held_out_max']:.1%}"
    )  # fmt: skip
    note = f"fitted by meshplan calibrate to {len(fit.rows)} measured run(s) in {str(runs_path)!r} ({ids}){held}"
    doc["name"] = name
    doc["label"] = f"{base_label}, calibrated to its own runs"
    for link, bw in busbw.items():
        doc[f"{link}_bytes_per_s"] = {
            "value": bw,
            "source": f"nccl-tests all_reduce_perf bus bandwidth measured on this machine ({bw / GB:g} GB/s), "
            f"from {str(runs_path)!r}",
        }
    doc["step_time_calibration"] = {
        k: {"value": getattr(fit.constants, k), "source": note if k in fit.fitted else (
            "1: the link figures are measured bus bandwidths (nccl-tests), which already are what a ring achieves"
            if k == "link_efficiency" and busbw else "the stored fit's value (data/steptime_fit.json), not refitted")}
        for k in CALIBRATION_RANGES
    }  # fmt: skip
    fa = flash_attention_utilisation(fit.hardware)
    if fa is not None:
        doc["step_time_calibration"]["flash_attention_utilisation"] = {
            "value": fa,
            "source": f"the documented attention utilisation of {text} (data/steptime_fit.json), which the step-time "
            "model looks up by the preset's name: carried here, since this file renames the machine",
        }
    return doc


__all__ = ["FITTABLE", "CalibrationError", "Fit", "Run", "RunFit", "calibrate", "fit_constants", "hardware_document",
           "read_runs", "with_busbw"]  # fmt: skip
