"""Command line: ``meshplan plan|search|export|schedule|validate ...`` (also ``python -m meshplan``).

The one place that owns argparse: every sub-command's options are defined here and call plain library
functions. A stable contract: with ``--json`` exactly one JSON object (or list, for ``search``) on stdout;
without it a readable table. Bad input: one line on stderr naming the factor, exit code 2, no traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from collections.abc import Callable, Sequence

from meshplan import __version__
from meshplan.core.units import GB
from meshplan.core.validation import check_count, check_zero
from meshplan.export import ENGINE_LEDGER, FORMATS, export_text
from meshplan.plan import MAX_MICRO_BATCH_SIZE, MAX_MICRO_BATCHES, MAX_SEQ, MAX_VIRTUAL_STAGES, Plan, evaluate
from meshplan.plan.reporting import format_report
from meshplan.realrun import format_table, validate
from meshplan.schedule import KINDS, format_timeline, simulate
from meshplan.search import format_search, search
from meshplan.spec.accounting import LEDGERS
from meshplan.spec.dims import DEFAULT_ORDER, MAX_GPUS, parse_order
from meshplan.spec.hardware import available_hardware, load_hardware
from meshplan.steptime import execution_for
from meshplan.steptime.contract import plan_json

MAX_GB = 1e6  # 1 PB per GPU


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise _UsageError(message)


class _UsageError(Exception):
    pass


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
        help="override the preset's GPUs per node",
    )
    p.add_argument(
        "--gpu-memory-gb",
        type=_number("gpu-memory-gb", MAX_GB),
        default=None,
        help="override the preset's GPU memory (GB = 10^9 B)",
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
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
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
        "--order", type=_order, default=DEFAULT_ORDER, help="mesh axes from inner to outer, e.g. tp-cp-pp-dp"
    )
    p.add_argument("--no-sp", action="store_true", help="switch sequence parallelism off")
    p.add_argument("--stage-balance", choices=("even", "max"), default="even")
    p.add_argument(
        "--uneven-stages",
        action="store_true",
        help="when pp does not divide the layers, give the first and last stages fewer "
        "(Llama 3's 126 layers on PP 16: 7, 8, ..., 8, 7)",
    )
    _accounting_option(p, default=None)


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The ``Plan`` described by the options of ``add_plan_options`` (ValueError for an invalid plan)."""
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
        order=args.order,
        hardware=args.hardware,
        gpus_per_node=args.gpus_per_node,
        gpu_memory_bytes=None if args.gpu_memory_gb is None else args.gpu_memory_gb * GB,
        sp=False if args.no_sp else None,
        stage_balance=args.stage_balance,
        uneven_stages=args.uneven_stages,
        accounting=args.accounting or "lab",
    )


# ---------------------------------------------------------------- plan
def _plan(args) -> int:

    report = evaluate(plan_from_args(args))
    if args.json:
        _print(json.dumps(plan_json(report)))
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
        gpu_memory_bytes=None if args.gpu_memory_gb is None else args.gpu_memory_gb * GB,
        order=args.order,
        accounting=args.accounting,
        execution=replace(execution_for(args.accounting), pipeline=args.pipeline),
    )
    if args.json:
        _print(json.dumps([c.to_dict(i) for i, c in enumerate(result.ranked[: args.top], 1)]))
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
    p.add_argument("--top", type=_int("top", 10**6), default=10)
    p.add_argument("--order", type=_order, default=DEFAULT_ORDER)
    p.add_argument(
        "--pipeline",
        choices=("1f1b", "dualpipe"),
        default="1f1b",
        help="pipeline schedule the step time assumes (dualpipe where the plan allows it)",
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
    args.accounting = None  # the plan as written; export_text prices what the engine runs
    text = export_text(plan_from_args(args), args.format, ledger)
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
    _print(json.dumps(t.to_dict()) if args.json else format_timeline(t))
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
        _print(json.dumps([r.to_dict() for r in rows], ensure_ascii=False))
    else:
        failed = [r for r in rows if r.failed]
        _print(
            format_table(rows) + f"\n\n{len(rows)} rows: {sum(r.agrees for r in rows)} agree, "
            f"{sum(not r.agrees and not r.exact for r in rows)} depart as explained, {len(failed)} exact rows differ"
        )
    for r in rows:
        if r.failed:
            print(
                f"meshplan: exact row differs: {r.check}: predicted {r.predicted}, measured {r.measured}",
                file=sys.stderr,
            )
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
    return parser


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    """The sub-command names, in the order they were added (argparse has no public accessor)."""
    return [name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]


def _print(text: str) -> None:
    """Print ``text``; characters the terminal's encoding cannot show are replaced, not fatal."""
    try:
        print(text)
    except UnicodeEncodeError:
        enc = sys.stdout.encoding or "ascii"
        sys.stdout.buffer.write(text.encode(enc, errors="replace") + b"\n")
        sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise _UsageError("a command is required: " + ", ".join(_commands(parser)))
        code = args.run(args)
        sys.stdout.flush()
        return code
    except (_UsageError, ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"meshplan: error: {msg[:500]}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `| head`: the reader left; exit quietly like other Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            print(f"meshplan: error: cannot write the output: {os.strerror(exc.errno)}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
