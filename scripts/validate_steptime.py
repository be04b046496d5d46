"""The step-time model against published runs: the predicted-vs-published table and a plot for the book.

    .venv/bin/python scripts/validate_steptime.py                     # the table (markdown) on stdout
    .venv/bin/python scripts/validate_steptime.py --plot out.png      # and a predicted-vs-published PNG
    .venv/bin/python scripts/validate_steptime.py --write-fit         # refit on the declared fit set and store it

The fit set (Narayanan et al. 2021 Table 1) is declared in ``meshplan.steptime.fitting.FIT_SET``; every other run is
held out and its errors are reported apart.
"""

from __future__ import annotations

import argparse
import json
import sys

from meshplan.core.resources import data_path
from meshplan.course import published
from meshplan.steptime import calibration as stored_calibration
from meshplan.steptime import fit_data
from meshplan.steptime import fitting as calibration


def table(rows: list[calibration.Row]) -> str:
    """Markdown: one row per run, predicted against published, grouped, with the published metric."""

    def pct(pair: tuple[float | None, float]) -> str:
        printed, predicted = pair
        return ("" if printed is None else f"{100 * printed:.1f} / ") + f"{100 * predicted:.1f} %"

    out = [
        "| run | group | published metric | as printed | predicted | published step (s) | predicted step (s) "
        "| error | MFU (published / predicted) | HFU (published / predicted) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pub = r.published
        out.append(
            f"| {r.id} | {r.group} | {pub.metric} | {pub.value:,.4g} | {r.predicted_metric:,.4g} | "
            f"{pub.step_s:,.3f} | {r.predicted_s:,.3f} | {100 * r.error:+.1f} % | {pct(r.mfu)} | "
            f"{pct(r.hfu)} |"
        )
    out += ["", "| set | runs | median error | largest error |", "|---|---:|---:|---:|"]
    for group, e in calibration.summary(rows).items():
        out.append(f"| {group} | {e['n']} | {100 * e['median']:.1f} % | {100 * e['max']:.1f} % |")
    cal = stored_calibration()
    out += [
        "",
        "Constants (fitted on the fit set only): "
        + ", ".join(f"{k} = {getattr(cal, k):g}" for k in calibration.PHYSICAL_RANGES),
    ]
    unscored = [r for r in rows if not r.scored]
    if unscored:
        out += ["", "Not scored:"] + [f"- {r.id}: {r.note}" for r in unscored]
    return "\n".join(out)


def plot(rows: list[calibration.Row], path: str) -> None:
    """Write the book's predicted-vs-published figure (``published.validation_figure``) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = published.validation_figure(rows)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", metavar="PNG", help="write the predicted-vs-published plot to this path")
    parser.add_argument(
        "--write-fit", action="store_true", help="refit the constants on the fit set and rewrite data/steptime_fit.json"
    )
    args = parser.parse_args(argv)
    if args.write_fit:
        cal = calibration.fit()
        record = calibration.fit_record(cal, calibration.validate(cal))
        data_path("steptime_fit.json").write_text(
            json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        fit_data.cache_clear()
        stored_calibration.cache_clear()
    rows = calibration.validate()
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
