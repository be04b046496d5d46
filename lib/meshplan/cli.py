"""Command line: ``python -m meshplan plan ...``.

A stable contract: with ``--json`` exactly one JSON object on stdout (``Report.to_dict``); without it a
readable table. Bad input: one line on stderr naming the factor, exit code 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys

from .hardware import load_hardware
from .mesh import DEFAULT_ORDER
from .model import load_model
from .plan import DIMS, Plan, evaluate, spread_layers
from .units import GB, fmt_gb, fmt_pct


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _int(name):
    def conv(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be a positive integer") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name}={value} must be a positive integer")
        return value
    return conv


def _zero(text):
    if text not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(f"zero={text!r} must be 0, 1, 2 or 3")
    return int(text)


def _gb(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"gpu-memory-gb={text!r} must be a positive number") from None
    if not math.isfinite(value) or not value > 0:
        raise argparse.ArgumentTypeError(f"gpu-memory-gb={text} must be a positive finite number")
    return value


def add_plan_options(p: argparse.ArgumentParser, model_required: bool = True) -> None:
    """The options that describe one plan (shared by ``plan`` and by commands that take a plan)."""
    hw = load_hardware()
    p.add_argument("--model", required=model_required, help="a file stem in data/models/ or a path to a config.json")
    p.add_argument("--gpus", required=True, type=_int("gpus"))
    p.add_argument("--gpus-per-node", type=_int("gpus-per-node"), default=hw.gpus_per_node)
    p.add_argument("--gpu-memory-gb", type=_gb, default=hw.gpu_memory_bytes / GB)
    for dim in ("tp", "cp", "ep", "pp"):
        p.add_argument(f"--{dim}", type=_int(dim), default=1)
    p.add_argument("--expert-tp", type=_int("expert-tp"), default=None,
                   help="expert tensor-parallel size (default: tp); 1 folds EP over TP × CP × DP")
    p.add_argument("--dp", type=_int("dp"), default=None, help="default: gpus ÷ (tp × cp × pp)")
    p.add_argument("--zero", type=_zero, default=0, help="ZeRO stage 0-3 over the data-parallel ranks")
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    p.add_argument("--seq", type=_int("seq"), default=4096)
    p.add_argument("--micro-batch-size", type=_int("micro-batch-size"), default=1)
    p.add_argument("--micro-batches", type=_int("micro-batches"), default=8)
    p.add_argument("--virtual-stages", type=_int("virtual-stages"), default=1)
    p.add_argument("--order", default=DEFAULT_ORDER, help="mesh axes from inner to outer, e.g. tp-cp-pp-dp")
    p.add_argument("--no-sp", action="store_true", help="switch sequence parallelism off")
    p.add_argument("--stage-balance", choices=("even", "max"), default="even")
    p.add_argument("--uneven-stages", action="store_true",
                   help="when pp does not divide the layers, give the first and last stages fewer "
                        "(Llama 3's 126 layers on PP 16: 7, 8, ..., 8, 7)")


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The ``Plan`` described by the options of ``add_plan_options`` (ValueError for an invalid plan)."""
    layers_per_stage = None
    if args.uneven_stages:
        layers = load_model(args.model).num_layers
        if layers % args.pp:
            layers_per_stage = spread_layers(layers, args.pp)
    return Plan.create(
        args.model, gpus=args.gpus, dp=args.dp, tp=args.tp, cp=args.cp, ep=args.ep, pp=args.pp, zero=args.zero,
        recompute=args.recompute, seq=args.seq, micro_batch_size=args.micro_batch_size,
        micro_batches=args.micro_batches, virtual_stages=args.virtual_stages, order=args.order,
        gpus_per_node=args.gpus_per_node, gpu_memory_bytes=args.gpu_memory_gb * GB,
        sp=False if args.no_sp else None, stage_balance=args.stage_balance, layers_per_stage=layers_per_stage,
        expert_tp=args.expert_tp,
    )


# Modules that add a sub-command: each defines ``add_command(subparsers)``, which registers its parser with
# ``set_defaults(run=function)``; ``function(args)`` returns the exit code and raises ValueError for bad input.
COMMAND_MODULES: tuple[str, ...] = ("realrun", "schedule", "search", "export")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m meshplan", description="Plan LLM-training parallelism.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("plan", help="evaluate one plan: memory per GPU, bytes per dimension, links, bubble")
    add_plan_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_plan)
    for name in COMMAND_MODULES:
        importlib.import_module(f"meshplan.{name}").add_command(sub)
    return parser


def format_report(report) -> str:
    """A readable table of a report (GB = 10⁹ B)."""
    p = report.plan
    mesh = " × ".join(f"{k.upper()} {getattr(p, k)}" for k in ("tp", "cp", "pp", "dp") if getattr(p, k) > 1) or "1 GPU"
    if p.ep > 1:
        mesh += (f" (EP {p.ep} inside DP × CP)" if p.etp == p.tp
                 else f" (EP {p.ep} folded over TP × CP × DP, expert TP {p.etp})")
    lines = [
        f"{p.model.name}: {p.model.params.total:,} parameters on {p.gpus} GPUs ({p.gpus_per_node} per node)",
        f"mesh {mesh}, order {p.order}; ZeRO-{p.zero}, recompute {p.recompute}, s = {p.seq:,}, "
        f"b = {p.micro_batch_size}, m = {p.micro_batches}, v = {p.virtual_stages}",
        "",
        "memory per GPU",
    ]
    for k, v in report.model_states_terms.items():
        lines.append(f"  {'  ' + k:<22}{fmt_gb(v, 2):>14}")
    mem = report.memory_bytes
    lines += [
        f"  {'model states':<22}{fmt_gb(mem['model_states']):>14}",
        f"  {'activations':<22}{fmt_gb(mem['activations']):>14}",
        f"  {'total':<22}{fmt_gb(mem['total']):>14}  {'fits' if report.fits else 'does NOT fit'} in "
        f"{fmt_gb(p.gpu_memory_bytes, 0)}",
        "",
        "bytes sent per GPU per step",
    ]
    for d in DIMS:
        if report.link[d] is None:
            lines.append(f"  {d.upper():<6}{'-':>14}")
        else:
            lines.append(f"  {d.upper():<6}{fmt_gb(report.comm_bytes_per_step[d]):>14}  {report.link[d]:<11}"
                         f"{report.comm_time_s[d]:8.2f} s")
    lines.append("")
    lines.append(f"pipeline bubble (p−1)/(m·v): {fmt_pct(report.bubble) if p.pp > 1 else '-'}")
    for n in report.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _plan(args) -> int:
    plan = plan_from_args(args)
    report = evaluate(plan)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(format_report(report))
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise _UsageError("a command is required: " + ", ".join(parser._subparsers._group_actions[0].choices))
        return args.run(args)
    except (_UsageError, ValueError) as exc:
        print(f"meshplan: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `| head`: the reader left; exit quietly like other Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
