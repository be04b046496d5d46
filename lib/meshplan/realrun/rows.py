"""Rows of predicted against measured, their table, and the results file.

A row is ``{dimension, check, predicted, measured, unit, exact, explanation}``: ``exact`` rows must agree
to the byte (or count); the others show where PyTorch departs from the textbook formula, and the
explanation says why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from meshplan.core.resources import DATA_DIR

RESULTS_PATH = DATA_DIR / "realrun_results.json"
DIMENSIONS = ("ddp", "fsdp", "fsdp_accum", "zero1", "tp", "pp", "collectives", "activations")


@dataclass(frozen=True)
class Row:
    dimension: str
    check: str
    predicted: float
    measured: float
    unit: str
    exact: bool
    explanation: str

    @property
    def agrees(self) -> bool:
        return self.predicted == self.measured

    @property
    def failed(self) -> bool:
        """An exact row whose measurement differs from the prediction."""
        return self.exact and not self.agrees

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("predicted", "measured"):
            v = float(d[k])
            d[k] = int(v) if v.is_integer() else v
        return d


def _fmt(x: float, unit: str) -> str:
    if unit == "fraction":
        return f"{x:.4f}"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def format_table(rows: list[Row]) -> str:
    """A plain-text table, one line per row (✓ agrees, ≠ departs and is explained, ✗ exact row differs)."""
    width = max(len(r.check) for r in rows) if rows else 10
    lines = [f"{'check':<{width}}  {'predicted':>14}  {'measured':>14}  unit       ", "-" * (width + 50)]
    for r in rows:
        mark = "✗" if r.failed else ("✓" if r.agrees else "≠")
        lines.append(
            f"{r.check:<{width}}  {_fmt(r.predicted, r.unit):>14}  {_fmt(r.measured, r.unit):>14}  {r.unit:<9}  {mark}"
        )
    return "\n".join(lines)


def results_document(rows: list[Row], quick: bool, torch_version: str, transformers_version: str | None = None) -> dict:
    """The results file: rows plus date-free provenance (deterministic for the same code, torch and transformers;
    the activation rows build their models with transformers)."""
    return {
        "provenance": {
            "command": "python -m meshplan validate" + (" --quick" if quick else "") + " --json --output "
            "data/realrun_results.json",
            "torch": torch_version,
            "backend": "gloo",
            "device": "cpu",
            "start_method": "fork",
            "model": "small-3.7m",
            **({"transformers": transformers_version} if transformers_version else {}),
        },
        "rows": [r.to_dict() for r in rows],
    }


def load_results(path: Path | str = RESULTS_PATH) -> dict:
    """The stored results document (``data/realrun_results.json``)."""
    return json.loads(Path(path).read_text())


def rows_from_results(doc: dict) -> list[Row]:
    return [Row(**r) for r in doc["rows"]]


def display_rows(rows: list[Row], dimension: str) -> list[dict]:
    """The rows of one dimension as display records (numbers with thousands separators)."""
    return [
        {
            "check": r.check,
            "predicted": _fmt(r.predicted, r.unit),
            "measured": _fmt(r.measured, r.unit),
            "unit": r.unit,
            "agrees": "yes" if r.agrees else ("NO (exact row)" if r.exact else "no, see why"),
            "why": r.explanation,
        }
        for r in rows
        if r.dimension == dimension
    ]


_SIZE = re.compile(r" (N|t|p|m)=(\d+)")


def grouped_display_rows(
    rows: list[Row], dimension: str, where: Callable[[Row], bool] | None = None
) -> list[dict[str, str]]:
    """The rows of one dimension as display records, one per check that differs only in its sizes (ranks N, TP
    size t, pipeline ranks p and their micro-batches m): a column per size holds the measurement, followed by
    "(predicted …)" where the prediction differs; ``agrees`` sums them up (``"yes"``, ``"no, see why"`` or
    ``"NO (exact row)"`` if an exact row failed); ``why`` keeps each distinct explanation once (one that
    begins another is dropped). ``where`` selects rows.

        >>> rs = [Row("d", f"X N={n}: bytes", 8, 8 + (n == 4), "bytes", False, "Why.") for n in (2, 4)]
        >>> grouped_display_rows(rs, "d")[0]
        {'check': 'X: bytes', 'N = 2': '8', 'N = 4': '9 (predicted 8)', 'agrees': 'no, see why', 'why': 'Why.'}
    """
    groups: dict[str, list[tuple[str, Row]]] = {}
    for r in rows:
        if r.dimension != dimension or (where is not None and not where(r)):
            continue
        size = ", ".join(f"{k} = {v}" for k, v in _SIZE.findall(r.check))
        groups.setdefault(_SIZE.sub("", r.check), []).append((size, r))
    out = []
    for check, members in groups.items():
        record = {"check": check}
        for size, r in members:
            value = _fmt(r.measured, r.unit)
            record[size or "value"] = value if r.agrees else f"{value} (predicted {_fmt(r.predicted, r.unit)})"
        failed = any(r.failed for _, r in members)
        agrees = all(r.agrees for _, r in members)
        record["agrees"] = "NO (exact row)" if failed else ("yes" if agrees else "no, see why")
        whys = list(dict.fromkeys(r.explanation for _, r in members))
        record["why"] = " ".join(w for w in whys if not any(o != w and o.startswith(w) for o in whys))
        out.append(record)
    return out
