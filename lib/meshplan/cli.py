"""Command line: ``meshplan plan|search|export|schedule|validate ...`` (also ``python -m meshplan``).

The one place that owns argparse: every sub-command's options are defined here and call plain library
functions. A stable contract: with ``--json`` exactly one JSON object (or list, for ``search``) on stdout, strict
JSON (a number that would be NaN or Infinity is an error naming it, and for a time the hardware figure behind it);
without it a readable table. Bad input: one line on stderr naming the factor, exit code 2, no traceback; a closed
stdout is bad input too (refused before anything runs). An error never goes to stdout: with stderr closed it is not
printed (the exit code still tells). A write to stdout that fails (disk full, I/O error) is one line and exit code 1;
a reader that leaves (``| head``) ends the command quietly with 141, as other Unix tools. Third-party warnings
(transformers counting an unknown family, torch, numpy) are silenced while a command with a model runs: what
matters reaches the library's own message.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from meshplan import __version__
from meshplan.core.output import check_output, write_json
from meshplan.core.schemas import field_name
from meshplan.core.units import GB, add_up
from meshplan.core.validation import check_count, check_zero
from meshplan.export import ENGINE_LEDGER, FORMATS, export_text
from meshplan.plan import MAX_MICRO_BATCH_SIZE, MAX_MICRO_BATCHES, MAX_SEQ, MAX_VIRTUAL_STAGES, Plan, evaluate
from meshplan.plan.construct import PRECISIONS
from meshplan.plan.reporting import format_report
from meshplan.realrun import format_table, validate
from meshplan.schedule import KINDS, format_timeline, simulate
from meshplan.search import MAX_TOP, format_search, search
from meshplan.spec.accounting import LEDGERS, get_accounting
from meshplan.spec.dims import MAX_GPUS, parse_order
from meshplan.spec.hardware import Hardware, available_hardware, load_hardware
from meshplan.steptime import execution_for
from meshplan.steptime.calibrate import FITTABLE, calibrate, hardware_document
from meshplan.steptime.contract import plan_json

MAX_GB = 1e6  # 1 PB per GPU


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise _UsageError(message)


class _UsageError(Exception):
    pass


class _OutputError(Exception):
    """A write to stdout failed (other than a broken pipe): disk full, I/O error."""


def _int(name: str, limit: int | None = None) -> Callable[[str], int]:
    """A positive integer option (at most ``limit``); the message names the option."""

    def conv(text: str) -> int:
        t = text.strip()
        if not t.isascii() or not t.lstrip("+-").isdigit():
            raise argparse.ArgumentTypeError(f"{name}={text[:40]!r} must be a positive integer")
        if len(t.lstrip("+-0")) > 18:
            raise argparse.ArgumentTypeError(
                f"{name}={t[:12]}… ({len(t)} digits) is more than the {limit or 10**18:,} this library plans for"
            )
        try:
            return check_count(name, int(t), limit)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return conv


def _top(text: str) -> int:
    """``--top``: a positive integer up to ``search.MAX_TOP``, the most plans the command reports in full."""
    n = _int("top")(text)
    if n > MAX_TOP:
        raise argparse.ArgumentTypeError(
            f"top={n:,} is more than the {MAX_TOP:,} plans a search reports: each gets a full report (about 1 ms and "
            f"5 KB of JSON apiece); ask for at most {MAX_TOP:,}"
        )
    return n


def _zero(text: str) -> int:
    """A ZeRO stage option, checked by the library's one ZeRO-stage check (its message)."""
    try:
        return check_zero(int(text) if text in ("0", "1", "2", "3") else text[:40])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(name: str, limit: float) -> Callable[[str], float]:
    """A positive finite number option (at most ``limit``)."""

    def conv(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text[:40]!r} must be a positive number") from None
        if not math.isfinite(value) or not value > 0:
            raise argparse.ArgumentTypeError(f"{name}={text[:40]} must be a positive finite number")
        if value > limit:
            raise argparse.ArgumentTypeError(f"{name}={value:g} is more than {limit:g}")
        return value

    return conv


def _probability(text: str) -> float:
    """A dropout probability, 0 up to (not including) 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"dropout={text[:40]!r} must be a number from 0 up to 1") from None
    if not 0 <= value < 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"dropout={text[:40]} must be from 0 up to (not including) 1")
    return value


def _order(text: str) -> str:
    try:
        parse_order(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _hardware(text: str) -> str:
    try:
        load_hardware(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _accounting_option(p: argparse.ArgumentParser, default: str | None = "lab", help: str | None = None) -> None:
    p.add_argument(
        "--accounting",
        choices=LEDGERS,
        default=default,
        help=help
        or "bookkeeping convention: lab (the lab page's, default), megatron, fsdp2 or deepspeed (what the engine "
        "allocates and sends)",
    )


def _machine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hardware",
        type=_hardware,
        default=None,
        help=f"a preset ({', '.join(available_hardware()) or 'lab'}) or a path; default: lab, the lab page's machine",
    )
    p.add_argument(
        "--gpus-per-node",
        type=_int("gpus-per-node", MAX_GPUS),
        default=None,
        help="override the preset's GPUs per node (its NVLink domain: 72 on a GB200 NVL72 rack)",
    )
    p.add_argument(
        "--gpus-per-host",
        type=_int("gpus-per-host", MAX_GPUS),
        default=None,
        help="override the preset's GPUs per host, the launch command's processes per host (default: the node)",
    )
    p.add_argument(
        "--gpu-memory-gb",
        type=_number("gpu-memory-gb", MAX_GB),
        default=None,
        help="override the preset's GPU memory (GB = 10^9 B)",
    )


def _grad_dtype_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--grad-dtype",
        choices=("fp32", "bf16"),
        default=None,
        help="the gradients' dtype (default: the ledger's; megatron: fp32, as --bf16 forces; bf16 is Megatron-LM's "
        "--grad-reduce-in-bf16, which NVIDIA's performance recipes use: half the gradient memory and the gradient "
        "reduction's bytes, ZeRO 0 and 1)",
    )


def _precision_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="bf16",
        help="the decoder layers' GEMMs: bf16, fp8 (per-tensor scaled: Transformer Engine's hybrid format, torchao's "
        "float8; Hopper and Blackwell) or mxfp8 (block-scaled, Blackwell); attention and the output head stay bf16",
    )


def add_plan_options(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    """The options that describe one plan (``plan`` and ``export``)."""
    p.add_argument("--model", required=model_required, help="a file stem in data/models/ or a path to a config.json")
    p.add_argument("--gpus", required=True, type=_int("gpus", MAX_GPUS))
    _machine_options(p)
    for dim in ("tp", "cp", "ep", "pp"):
        p.add_argument(f"--{dim}", type=_int(dim, MAX_GPUS), default=1)
    p.add_argument(
        "--expert-tp",
        type=_int("expert-tp", MAX_GPUS),
        default=None,
        help="expert tensor-parallel size (default: tp); 1 folds EP over TP × CP × DP",
    )
    p.add_argument("--dp", type=_int("dp", MAX_GPUS), default=None, help="default: gpus ÷ (tp × cp × pp)")
    p.add_argument("--zero", type=_zero, default=0, help="ZeRO stage 0-3 over the data-parallel ranks")
    p.add_argument(
        "--recompute",
        choices=("none", "selective", "full", "op"),
        default="none",
        help="none, selective (Megatron-LM's core attention), full, or op (torchtitan's op-level selective "
        "checkpointing, fsdp2 ledger only)",
    )
    _precision_option(p)
    p.add_argument(
        "--attention-backend",
        choices=("flash", "unfused"),
        default="flash",
        help="the attention kernel whose saved tensors are priced: flash (SDPA's and Transformer Engine's flash or "
        "fused kernels), or unfused (Megatron's --attention-backend unfused: softmax and dropout over s × s scores; "
        "megatron ledger, no CP)",
    )
    p.add_argument(
        "--dropout",
        type=_probability,
        default=0.0,
        help="attention and hidden dropout (Megatron's --attention-dropout and --hidden-dropout; its default is 0.1, "
        "the export writes the value priced); above 0 the megatron ledger keeps the dropout masks",
    )
    _grad_dtype_option(p)
    p.add_argument("--seq", type=_int("seq", MAX_SEQ), default=4096)
    p.add_argument("--micro-batch-size", type=_int("micro-batch-size", MAX_MICRO_BATCH_SIZE), default=1)
    p.add_argument(
        "--micro-batches",
        type=_int("micro-batches", MAX_MICRO_BATCHES),
        default=None,
        help="micro-batches per step (default 8, or global batch ÷ (dp × micro-batch size))",
    )
    p.add_argument(
        "--global-batch",
        type=_int("global-batch", MAX_MICRO_BATCHES * MAX_MICRO_BATCH_SIZE * MAX_GPUS),
        default=None,
        help="sequences per step; sets the micro-batches m = B ÷ (dp × micro-batch size)",
    )
    p.add_argument("--virtual-stages", type=_int("virtual-stages", MAX_VIRTUAL_STAGES), default=1)
    p.add_argument(
        "--order",
        type=_order,
        default=None,
        help="mesh axes from inner to outer, e.g. tp-cp-pp-dp (default: the ledger's engine's order, tp-cp-ep-dp-pp "
        "for the engine ledgers and exports, tp-cp-pp-dp for the lab's)",
    )
    p.add_argument("--no-sp", action="store_true", help="switch sequence parallelism off")
    p.add_argument(
        "--stage-balance",
        choices=("even", "max"),
        default=None,
        help="where the embedding and head go: max on the first and last stages, as the engines put them; even "
        "spread over the stages, as the lab page does (default: the ledger's engine's layout)",
    )
    p.add_argument(
        "--uneven-stages",
        action="store_true",
        help="when pp does not divide the layers, give the first and last stages fewer "
        "(Llama 3's 126 layers on PP 16: 7, 8, ..., 8, 7)",
    )
    _accounting_option(p, default=None)


def plan_from_args(args: argparse.Namespace, ledger: str | None = None) -> Plan:
    """The ``Plan`` described by the options of ``add_plan_options`` (ValueError for an invalid plan); its stages laid
    out as ``--stage-balance`` says, by default as the engine of ``ledger`` (or of ``--accounting``) lays them out."""
    accounting = args.accounting or "lab"
    return Plan.create(
        args.model,
        gpus=args.gpus,
        dp=args.dp,
        tp=args.tp,
        cp=args.cp,
        ep=args.ep,
        pp=args.pp,
        expert_tp=args.expert_tp,
        zero=args.zero,
        recompute=args.recompute,
        seq=args.seq,
        micro_batch_size=args.micro_batch_size,
        micro_batches=args.micro_batches,
        global_batch=args.global_batch,
        virtual_stages=args.virtual_stages,
        order=args.order or get_accounting(ledger or accounting).order,
        hardware=args.hardware,
        gpus_per_node=args.gpus_per_node,
        gpus_per_host=args.gpus_per_host,
        gpu_memory_bytes=None if args.gpu_memory_gb is None else args.gpu_memory_gb * GB,
        sp=False if args.no_sp else None,
        stage_balance=args.stage_balance or get_accounting(ledger or accounting).stage_balance,
        uneven_stages=args.uneven_stages,
        accounting=accounting,
        precision=args.precision,
        attention_backend=args.attention_backend,
        grad_dtype=args.grad_dtype,
        dropout=args.dropout,
    )


# ---------------------------------------------------------------- plan
def _plan(args) -> int:

    report = evaluate(plan_from_args(args))
    if args.json:
        _print(_json(plan_json(report), report.plan.hardware))
    else:
        _print(format_report(report))
    return 0


# ---------------------------------------------------------------- search
def _search(args) -> int:
    from dataclasses import replace

    result = search(
        args.model,
        args.gpus,
        args.seq,
        args.global_batch,
        hardware=args.hardware,
        gpus_per_node=args.gpus_per_node,
        gpus_per_host=args.gpus_per_host,
        gpu_memory_bytes=None if args.gpu_memory_gb is None else args.gpu_memory_gb * GB,
        order=args.order,
        accounting=args.accounting,
        execution=replace(execution_for(args.accounting), pipeline=args.pipeline),
        stage_balance=args.stage_balance,
        precision=args.precision,
        grad_dtype=args.grad_dtype,
        top=args.top,
    )
    if args.json:
        _print(_json([c.to_dict(i) for i, c in enumerate(result.ranked[: args.top], 1)], load_hardware(args.hardware)))
    else:
        _print(format_search(result, args.top))
    return 0


def _add_search(sub) -> None:
    p = sub.add_parser("search", help="rank every plan that fits by an estimated step time")
    p.add_argument("--model", required=True, help="a file stem in data/models/ or a path to a config.json")
    p.add_argument("--gpus", required=True, type=_int("gpus", MAX_GPUS))
    _machine_options(p)
    p.add_argument("--seq", type=_int("seq", MAX_SEQ), default=4096)
    p.add_argument(
        "--global-batch",
        required=True,
        type=_int("global-batch", MAX_MICRO_BATCHES * MAX_MICRO_BATCH_SIZE * MAX_GPUS),
        help="sequences per step",
    )
    p.add_argument(
        "--top",
        type=_top,
        default=10,
        help=f"plans to show (default 10, at most {MAX_TOP:,}); the search prices only the plans that could rank "
        "among them or within the model's uncertainty of the fastest, and says how many it left",
    )
    _precision_option(p)
    _grad_dtype_option(p)
    p.add_argument(
        "--order",
        type=_order,
        default=None,
        help="mesh axes from inner to outer (default: the ledger's engine's order, tp-cp-ep-dp-pp for the engine "
        "ledgers, tp-cp-pp-dp for the lab's)",
    )
    p.add_argument(
        "--pipeline",
        choices=("1f1b", "dualpipe"),
        default="1f1b",
        help="pipeline schedule the step time assumes (dualpipe where the plan allows it)",
    )
    p.add_argument(
        "--stage-balance",
        choices=("even", "max"),
        default=None,
        help="where the embedding and head go: max on the first and last stages, as the engines put them; even "
        "spread over the stages, as the lab page does (default: the ledger's engine's layout)",
    )
    _accounting_option(
        p,
        default="megatron",
        help="the ledger plans are ranked in: megatron (default: a search decides real configurations, so it prices "
        "what an engine allocates and sends), fsdp2, deepspeed, or lab (the lab page's teaching convention)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of the top plan reports")
    p.set_defaults(run=_search)


# ---------------------------------------------------------------- export
def _export(args) -> int:

    ledger = args.accounting or ENGINE_LEDGER[args.format]  # an export is priced in its engine's own ledger
    # the plan as written (torchtitan's op-level recompute exists in its fsdp2 ledger only); export_text prices what
    # the engine runs
    args.accounting = "fsdp2" if args.recompute == "op" else None
    text = export_text(plan_from_args(args, ledger), args.format, ledger)
    _print(text.rstrip("\n"))
    return 0


def _add_export(sub) -> None:

    p = sub.add_parser("export", help="print a plan as Megatron-LM flags or torchtitan settings")
    add_plan_options(p)
    p.add_argument("--format", required=True, choices=FORMATS)
    p.set_defaults(run=_export)


# ---------------------------------------------------------------- schedule
def _time(name: str) -> Callable[[str], float]:
    """A time option: parsed as a number here, validated by the library (``schedule.check_times``)."""

    def conv(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text[:40]!r} must be a non-negative number") from None
        return int(value) if value.is_integer() else value

    return conv


def _schedule(args) -> int:

    t = simulate(args.kind, args.pp, args.micro_batches, args.virtual_stages, args.f, args.b, args.w)
    _print(_json(t.to_dict()) if args.json else format_timeline(t))
    return 0


def _add_schedule(sub) -> None:

    p = sub.add_parser("schedule", help="simulate a pipeline schedule: timeline, bubble, peak activations")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--pp", required=True, type=_int("pp", MAX_GPUS))
    p.add_argument("--micro-batches", required=True, type=_int("micro-batches", MAX_MICRO_BATCHES))
    p.add_argument("--virtual-stages", type=_int("virtual-stages", MAX_VIRTUAL_STAGES), default=1)
    p.add_argument("--f", type=_time("f"), default=1, help="forward time of one micro-batch through one stage")
    p.add_argument("--b", type=_time("b"), default=1, help="backward-for-inputs time")
    p.add_argument("--w", type=_time("w"), default=1, help="backward-for-weights time")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_schedule)


# ---------------------------------------------------------------- validate
def _validate(args) -> int:

    rows, _ = validate(args.quick, args.output)
    if args.json:
        _print(_json([r.to_dict() for r in rows], ensure_ascii=False))
    else:
        failed = [r for r in rows if r.failed]
        _print(
            format_table(rows) + f"\n\n{len(rows)} rows: {add_up(r.agrees for r in rows)} agree, "
            f"{add_up(not r.agrees and not r.exact for r in rows)} depart as explained, {len(failed)} exact rows differ"
        )
    for r in rows:
        if r.failed:
            _err(f"meshplan: exact row differs: {r.check}: predicted {r.predicted}, measured {r.measured}")
    return 1 if any(r.failed for r in rows) else 0


def _add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check the formulas against real PyTorch runs (gloo, CPU, forked ranks)")
    p.add_argument(
        "--quick", action="store_true", help="ranks ≤ 4 and three families' activation ledgers (the CI subset)"
    )
    p.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    p.add_argument(
        "--output",
        default=None,
        help="also write the results document (rows + provenance) here; its folder must exist (checked before any run)",
    )
    p.set_defaults(run=_validate)


# ---------------------------------------------------------------- calibrate
def _calibrate(args) -> int:
    output = check_output(args.output)  # before the fit: the reader learns of a bad path at once
    fitted = tuple(x.strip() for x in args.fit.split(",") if x.strip())
    if not fitted or any(x not in FITTABLE for x in fitted):
        raise ValueError(f"--fit {args.fit!r}: name one or more of {', '.join(FITTABLE)}, comma-separated")
    fit, busbw = calibrate(args.runs, args.hardware, fitted)
    base = args.hardware or "lab"
    name = args.name or f"{Path(base).stem}-calibrated"
    doc = hardware_document(fit, args.hardware, name, args.runs, busbw)
    write_json(output, doc)
    s = fit.summary()
    if args.json:
        rows = [
            {"id": r.id, "measured_s": r.measured_s, "stored_s": r.stored_s, "fitted_s": r.fitted_s,
             "held_out_s": r.held_out_s}
            for r in fit.rows
        ]  # fmt: skip
        consts = {k: getattr(fit.constants, k) for k in FITTABLE}
        _print(_json({"constants": consts, "fitted": list(fit.fitted), "runs": rows, "summary": s,
                      "output": str(output)}))  # fmt: skip
        return 0

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x * 100:+.1f} %"

    lines = [f"{'run':<28} {'measured':>10} {'stored fit':>18} {'this fit':>18} {'held out':>18}"]
    for r in fit.rows:
        held = "—" if r.held_out_s is None else f"{r.held_out_s:8.3f} s {pct(r.held_out_error):>8}"
        lines.append(
            f"{r.id[:28]:<28} {r.measured_s:8.3f} s {r.stored_s:8.3f} s {pct(r.stored_error):>8} "
            f"{r.fitted_s:8.3f} s {pct(r.fitted_error):>8} {held:>18}"
        )
    lines.append("")
    lines.append(
        "constants: " + ", ".join(
            f"{k} {getattr(fit.constants, k):g}" + (" (fitted)" if k in fit.fitted else "") for k in FITTABLE
        )
    )  # fmt: skip
    lines.append(
        f"|error| median / worst: stored fit {pct(s['stored_median'])} / {pct(s['stored_max'])}, this fit in sample "
        f"{pct(s['fitted_median'])} / {pct(s['fitted_max'])}, held out (leave one out) {pct(s['held_out_median'])} "
        f"/ {pct(s['held_out_max'])}: expect the held-out figure on a new plan"
    )
    if busbw:
        lines.append(
            "links: the measured bus bandwidths " + ", ".join(f"{k} {v / GB:g} GB/s" for k, v in busbw.items())
        )
    lines.append(f"wrote {output}: plan, search and export take it as --hardware {output}")
    _print("\n".join(lines))
    return 0


def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="fit the step-time model to your own measured runs and write a hardware file")
    p.add_argument(
        "--runs",
        required=True,
        help='a JSON list of runs (plan options and step_time_s or tokens_per_s), {"runs": [...], "busbw": '
        '{"nvlink": GB/s, "infiniband": GB/s}}, or a CSV of runs (meshplan.steptime.calibrate says the format)',
    )
    p.add_argument(
        "--hardware", type=_hardware, default=None, help="the machine the runs ran on: a preset or a path (default lab)"
    )
    p.add_argument(
        "--fit",
        default="matmul_efficiency",
        help="the constants to fit, comma-separated: matmul_efficiency (default), link_efficiency, hbm_passes",
    )
    p.add_argument("--name", default=None, help="the hardware file's name (default: <hardware>-calibrated)")
    p.add_argument("--output", required=True, help="where to write the hardware file (JSON)")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    p.set_defaults(run=_calibrate)


# ---------------------------------------------------------------- the parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="meshplan", description="Plan LLM-training parallelism.")

    parser.add_argument("--version", action="version", version=f"meshplan {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("plan", help="evaluate one plan: memory per GPU, bytes per dimension, links, bubble")
    add_plan_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_plan)
    _add_search(sub)
    _add_export(sub)
    _add_schedule(sub)
    _add_validate(sub)
    _add_calibrate(sub)
    return parser


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    """The sub-command names, in the order they were added (argparse has no public accessor)."""
    return [name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]


# ---------------------------------------------------------------- output
_DIMS = ("dp", "tp", "pp", "cp", "ep", "edp")
_TERM_FIGURES = {"compute": ("peak_bf16_flop_per_s", "hbm_bytes_per_s"), "optimizer": ("hbm_bytes_per_s",)}


def _non_finite(obj: Any, path: tuple = ()) -> tuple[tuple, float] | None:
    """The path and value of the first number in ``obj`` that is not finite (depth first, in key order), or None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path, obj)
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, (*path, key))
        if found is not None:
            return found
    return None


def _figures(entry: dict, path: tuple) -> tuple[str, ...]:
    """The hardware fields a time of a plan's JSON object (``entry``) divides by: a dimension's link bandwidth
    (``comm_time_s.pp``, ``step_time_terms_s.pp_s``; the DP sync's links for ``dp_exposed_s``), the compute peak
    and HBM bandwidth for ``compute_s``, HBM for ``optimizer_s``; for ``step_time_s``, those of its largest term."""
    terms = entry.get("step_time_terms_s")
    if path == ("step_time_s",) and isinstance(terms, dict) and terms:
        return _figures(entry, ("step_time_terms_s", max(terms, key=lambda k: terms[k])))
    if len(path) != 2 or path[0] not in ("comm_time_s", "step_time_terms_s"):
        return ()
    term = str(path[1]).removesuffix("_s")
    if term in _TERM_FIGURES:
        return _TERM_FIGURES[term]
    dims = ("dp", "cp", "edp") if term == "dp_exposed" else (term,) if term in _DIMS else ()
    link = entry.get("link")
    links: dict = link if isinstance(link, dict) else {}
    return tuple(dict.fromkeys(f"{links[d]}_bytes_per_s" for d in dims if links.get(d) in ("nvlink", "infiniband")))


def _not_finite_message(obj: Any, hardware: Hardware | None) -> str:
    """One line for an output that strict JSON cannot hold: the key of the first non-finite number and, for a plan's
    object or ``search``'s list of them (``hardware`` given: the plans' machine), the hardware figures a time
    divides by. The step-time model names a rate too small for a finite step time itself
    (``steptime.model._check_finite``); this is the last guard of the JSON contract, for every number printed."""
    found = _non_finite(obj)
    if found is None:  # json refused something else as out of range
        return "the output holds a number JSON cannot represent"
    path, value = found
    if hardware is None:  # not a plan's object: the key is all there is to name
        return f"{field_name(path)} would be {value}, which JSON cannot hold"
    entry, rest = (obj[path[0]], path[1:]) if path and isinstance(path[0], int) else (obj, path)
    where = (f"plan {path[0] + 1}: " if rest is not path else "") + field_name(rest)  # search's list is ranked
    figures = _figures(entry, rest) if isinstance(entry, dict) else ()
    shown = [f"{f}={getattr(hardware, f):g}" for f in figures if getattr(hardware, f, None) is not None]
    if shown:
        return (
            f"{where} would be {value}, which JSON cannot hold: hardware {hardware.name!r} has "
            f"{' and '.join(shown)}, too small for a finite time"
        )
    return f"{where} would be {value}, which JSON cannot hold: a figure of the plan or the hardware is out of range"


def _json(obj: Any, hardware: Hardware | None = None, **kwargs: Any) -> str:
    """``obj`` as strict JSON: ValueError (one line, see ``_not_finite_message``) for NaN or an infinity, which
    ``json.dumps`` would print as the tokens NaN and Infinity that JSON does not have."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        raise ValueError(_not_finite_message(obj, hardware)) from None


def _print(text: str) -> None:
    """Print ``text`` on stdout; characters its encoding cannot show are replaced, not fatal. A failed write is an
    ``_OutputError`` (a broken pipe stays a BrokenPipeError, for ``main``)."""
    out = sys.stdout
    if out is None:  # main refuses a closed stdout first; a caller of _print may not have
        raise _OutputError("stdout is closed")
    try:
        try:
            print(text, file=out)
        except UnicodeEncodeError:
            enc = out.encoding or "ascii"
            out.buffer.write(text.encode(enc, errors="replace") + b"\n")
            out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _OutputError(f"cannot write the output: {exc.strerror or exc}") from None


def _flush() -> None:
    """Flush stdout (what ``_print`` buffered), a failure being an ``_OutputError`` as in ``_print``."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _OutputError(f"cannot write the output: {exc.strerror or exc}") from None


def _err(line: str) -> None:
    """``line`` on stderr; nothing when stderr is closed or cannot be written (never onto stdout, where ``print``
    sends it when ``sys.stderr`` is None: it would break ``--json``'s one object)."""
    if sys.stderr is None:
        return
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _no_stray_stderr() -> None:
    """When the process started with stderr (descriptor 2) closed, open /dev/null there: the next file opened would
    get descriptor 2 and take whatever a C library writes to stderr (torch's warnings into a results file)."""
    if sys.stderr is not None:
        return
    try:
        os.fstat(2)
    except OSError as exc:
        if exc.errno == errno.EBADF:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != 2:
                os.dup2(null, 2)
                os.close(null)


@contextlib.contextmanager
def _third_party_quiet() -> Iterator[None]:
    """Silence third-party warnings (``warnings`` and ``logging`` up to ERROR: transformers logs about a config it
    counts on the meta device, torch and numpy warn) while a command that reads a model runs, so that bad input
    is the library's one line and a report leaves stderr empty; restored afterwards (``main`` runs in process in
    the tests). transformers is not imported for this: ``logging.disable`` stops every logger's records."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code: 0, 1 (``validate``: an exact row differs; or stdout could not be
    written), 2 (bad input, a closed stdout included), 141 (the reader of stdout left)."""
    _no_stray_stderr()
    parser = build_parser()
    try:
        if sys.stdout is None:  # `>&-`: every command prints its answer there
            raise _UsageError("stdout is closed: nowhere to print the output (redirect it to a file or /dev/null)")
        args = parser.parse_args(argv)
        if args.command is None:
            raise _UsageError("a command is required: " + ", ".join(_commands(parser)))
        with _third_party_quiet() if hasattr(args, "model") else contextlib.nullcontext():
            code = args.run(args)
        _flush()
        return code
    except (_UsageError, ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _err(f"meshplan: error: {msg[:500]}")
        return 2
    except BrokenPipeError:  # e.g. `| head`: the reader left; exit quietly like other Unix tools
        with contextlib.suppress(OSError, ValueError, AttributeError):  # (in process, stdout may have no descriptor)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush goes nowhere
        return 141
    except _OutputError as exc:
        _err(f"meshplan: error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
