"""A ``Report`` as text: the one formatter the command line, the device grid and the book use.

GB = 10⁹ bytes throughout; bytes are per GPU, traffic is what each GPU sends per step.

    >>> from meshplan.plan import Plan, evaluate
    >>> r = evaluate(Plan.create("qwen3.8-27b", gpus=8, tp=2, pp=4, recompute="full"))
    >>> traffic_summary(r)
    'TP 21.5 GB (NVLink) · PP 0.7 GB (NVLink)'
    >>> table_row(r)["bubble (p−1)/(m·v)"]
    '37.5 %'
"""

from __future__ import annotations

from meshplan.core.units import fmt_gb, fmt_pct
from meshplan.plan.construct import Plan
from meshplan.plan.report import TRAFFIC, Report

LINK_NAMES = {"nvlink": "NVLink", "infiniband": "InfiniBand", None: "none"}
SHORT_LINK_NAMES = {"nvlink": "NVLink", "infiniband": "IB", None: "-"}
TRAFFIC_LABELS = {"dp": "DP", "tp": "TP", "pp": "PP", "cp": "CP", "ep": "EP", "edp": "expert DP"}


def link_name(link: str | None, short: bool = False) -> str:
    """'NVLink', 'InfiniBand' (or 'IB' when ``short``), 'none' (or '-')."""
    return (SHORT_LINK_NAMES if short else LINK_NAMES)[link]


def yes_no(flag: bool) -> str:
    """A boolean as a word for tables: 'yes' or 'no'."""
    return "yes" if flag else "no"


def plan_label(plan: Plan) -> str:
    """'TP 8 × PP 16 × DP 128 · ZeRO-1 · selective · b 1 · m 16 · v 1'."""
    return (
        f"{plan.dims.label()} · ZeRO-{plan.zero} · {plan.recompute} · b {plan.micro_batch_size} · "
        f"m {plan.micro_batches} · v {plan.virtual_stages}"
    )


def traffic_summary(report: Report, short_links: bool = False) -> str:
    """'TP 21.5 GB (NVLink) · PP 0.7 GB (NVLink)': every dimension that sends, with its link; 'none' if none does."""
    parts = [
        f"{TRAFFIC_LABELS[k]} {fmt_gb(report.comm_bytes_per_step[k])} ({link_name(report.link[k], short_links)})"
        for k in TRAFFIC
        if report.link[k] is not None
    ]
    return " · ".join(parts) or "none"


def fits_mark(report: Report) -> str:
    """'58.2 GB ✓' or '101.2 GB ✗': the lab page's total against the GPU's memory, or an engine ledger's allocated
    peak with its verdict (``evaluation.memory_budget``)."""
    key = "total" if report.plan.accounting.name == "lab" else "peak_allocated"
    return f"{fmt_gb(report.memory_bytes[key])} {'✓' if report.fits else '✗'}"


def table_row(report: Report, per_dimension: bool = False) -> dict[str, str]:
    """One display row of a plan table: memory terms, total with ✓/✗, traffic (one column, or one per dimension
    with ``per_dimension``), bubble."""
    mem = report.memory_bytes
    row = {
        "model states": fmt_gb(mem["model_states"]),
        "activations": fmt_gb(mem["activations"]),
        "total": fmt_gb(mem["total"]) if report.plan.accounting.name != "lab" else fits_mark(report),
    }
    if report.plan.accounting.name != "lab":
        row["peak"] = fits_mark(report)
    if per_dimension:
        for k in TRAFFIC:
            if k == "edp" and not report.comm_bytes_per_step[k]:
                continue
            row[f"{TRAFFIC_LABELS[k]} bytes/step"] = (
                f"{fmt_gb(report.comm_bytes_per_step[k])} ({link_name(report.link[k], True)})"
                if report.link[k]
                else "-"
            )
    else:
        row["bytes per GPU per step"] = traffic_summary(report) if report.heaviest_dim else "—"
    row["bubble (p−1)/(m·v)"] = fmt_pct(report.bubble) if report.plan.pp > 1 else "—"
    return row


def summary_line(report: Report) -> str:
    """One sentence: memory per GPU (and whether it fits), traffic per dimension, bubble."""
    r, p = report, report.plan
    mem = r.memory_bytes
    bubble = f"; bubble (p−1)/(m·v) {fmt_pct(r.bubble)}" if p.pp > 1 else ""
    if p.accounting.name == "lab":
        verdict = f"{'fits' if r.fits else 'does not fit'} in {fmt_gb(p.gpu_memory_bytes, 0)}"
    else:
        verdict = f"peak {fmt_gb(mem['peak_allocated'])} allocated: {r.headroom.verdict if r.headroom else ''}"
    return (
        f"{p.model.name}: per GPU {fmt_gb(mem['model_states'])} model states + {fmt_gb(mem['activations'])} "
        f"activations = {fmt_gb(mem['total'])} ({verdict}); bytes per GPU per step: {traffic_summary(r)}{bubble}"
    )


def peak_lines(report: Report) -> list[str]:
    """The engine ledger's peak: the ledger's total, the largest moment of the step with its terms, the allocator's
    reserve and what lives outside it, and the verdict on what the device exposes."""
    p, mem, room = report.plan, report.memory_bytes, report.headroom
    sp = report.by_stage[report.peak_stage]
    where = f"{sp.peak.name}" + (f", pipeline stage {sp.index}" if p.pp > 1 else "")
    out = [
        f"  {'total':<22}{fmt_gb(mem['total']):>14}  model states + saved activations",
        "",
        f"peak of the step ({where})",
    ]
    out += [f"    {k:<20}{fmt_gb(v, 2):>14}" for k, v in sp.peak.terms.items() if v]
    out.append(f"  {'peak allocated':<22}{fmt_gb(mem['peak_allocated']):>14}")
    if room is not None:
        usable = p.hardware.device_total_bytes or p.hardware.gpu_memory_bytes
        out += [
            f"  {'peak reserved':<22}{fmt_gb(mem['peak_reserved']):>14}  × {room.reserved_ratio:.2f} "
            "(caching allocator)",
            f"  {'outside the allocator':<22}{fmt_gb(room.outside):>14}  CUDA context, cuBLAS, NCCL",
            f"  {'device':<22}{fmt_gb(usable):>14}  {room.verdict}",
        ]
    return out


def format_report(report: Report) -> str:
    """The readable table ``meshplan plan`` prints (GB = 10⁹ B)."""
    p = report.plan
    mesh = p.dims.label()
    if p.ep > 1:
        mesh = mesh.replace(
            f" (EP {p.ep}", f" (EP {p.ep} " + ("inside DP × CP" if p.etp == p.tp else "folded over TP × CP × DP"), 1
        )
    hw = p.hardware
    lines = [
        f"{p.model.name}: {p.model.params.total:,} parameters on {p.gpus:,} GPUs ({hw.name}: "
        f"{fmt_gb(hw.gpu_memory_bytes, 0)}, {hw.gpus_per_node} per node"
        + ("" if hw.host_gpus == hw.gpus_per_node else f" (NVLink domain), {hw.host_gpus} per host")
        + ")",
        f"mesh {mesh}, order {p.order}; ZeRO-{p.zero}, recompute {p.recompute}, s = {p.seq:,}, "
        f"b = {p.micro_batch_size}, m = {p.micro_batches}, v = {p.virtual_stages} "
        f"(global batch {p.global_batch:,} sequences, {p.tokens_per_step:,} tokens); accounting {p.accounting.name}"
        + ("" if p.precision == "bf16" else f"; {p.precision} GEMMs (attention and the output head in bf16)"),
        "",
        "memory per GPU" + (f" (pipeline stage {report.stage}, the most loaded)" if p.pp > 1 else ""),
    ]
    for k, v in report.model_states_terms.items():
        lines.append(f"  {'  ' + k:<22}{fmt_gb(v, 2):>14}")
    mem = report.memory_bytes
    lines += [
        f"  {'model states':<22}{fmt_gb(mem['model_states']):>14}",
        f"  {'activations':<22}{fmt_gb(mem['activations']):>14}",
    ]
    if p.accounting.name == "lab":
        lines.append(
            f"  {'total':<22}{fmt_gb(mem['total']):>14}  {'fits' if report.fits else 'does NOT fit'} in "
            f"{fmt_gb(p.gpu_memory_bytes, 0)}"
        )
    else:
        lines += peak_lines(report)
    lines += ["", "bytes sent per GPU per step"]
    for k in TRAFFIC:
        if report.link[k] is None:
            if k != "edp":
                lines.append(f"  {TRAFFIC_LABELS[k]:<10}{'-':>14}")
        else:
            lines.append(
                f"  {TRAFFIC_LABELS[k]:<10}{fmt_gb(report.comm_bytes_per_step[k]):>14}  "
                f"{link_name(report.link[k]):<11}{report.comm_time_s[k]:8.2f} s"
            )
    lines.append("")
    lines.append(f"pipeline bubble (p−1)/(m·v): {fmt_pct(report.bubble) if p.pp > 1 else '-'}")
    for n in report.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)
