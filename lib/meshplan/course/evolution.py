"""The evolution map: the course's ten stages, each with what it solved, where it got stuck and the numbers that
show it, every number computed by a library call at the lab page's sizes.

The order is this course's order, not history's (GPipe, 2018, came before Megatron-LM and ZeRO, 2019). Stages 1-7
and 10 are the main line; stage 8 (long sequences: sequence and context parallelism) and stage 9 (mixture of
experts: expert parallelism) are branches a plan takes when its sequences are long or its model is an MoE, not
steps forced by the stage before them.

A ``Stage`` is data: title, chapter, years, papers (with section or table) and engines, and three templates whose
``{name}`` fields are filled from the stage's numbers: ``solved``, ``stuck`` and ``number_template`` (the short form
that shows where it got stuck). ``Stage.compute(setting)`` computes those numbers, each a ``Number`` with its value in
base units, its printed text and the library call behind it. ``rows()`` renders every stage, ``row(n)`` one (a
chapter's opening and closing sentences use it, so they print the map's numbers); ``flow_html()`` draws
the map as a vertical flow (HTML and CSS, readable from a 390-px phone to a desktop).

Sizes (``Setting``, the lab page's by default): s = 4,096, b = 1, 80 GB GPUs with 8 per node, NVLink 160 GB/s and
InfiniBand 50 GB/s per GPU, 400 TFLOP/s effective (``load_hardware("lab")``); DP on 8 and 64 GPUs, ZeRO and TP 8 on
one node, p = 8 with m = 32 and v = 4, 131,072-token sequences on 8 CP ranks. GB = 10⁹ B.

    >>> r = rows()
    >>> r[0].number
    '444.5 GB = 5.6 × 80 GB; ≈ 304 GPU-years'
    >>> [row.stage.number for row in r if row.stage.branch]
    [8, 9]
    >>> r[2].numbers["t_comm"].text, r[2].numbers["t_backward"].text
    ('1.94 s', '1.05 s')
"""

from __future__ import annotations

import html
import math
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from types import MappingProxyType

from meshplan.core import collectives
from meshplan.core.units import fmt_gb, fmt_int, fmt_mb, fmt_mib, fmt_pct, fmt_tflops
from meshplan.course import published
from meshplan.course.lab import ANCHOR
from meshplan.parallel import activations, compute, cp, dp, ep, pp, tp, zero
from meshplan.schedule import formula_bubble, simulate
from meshplan.spec.hardware import Hardware, load_hardware
from meshplan.spec.model import ModelSpec, load_model

SMALLEST_DUALPIPE = (2, 4)  # p, m: the smallest pipeline DualPipe and DualPipeV run (copies do not depend on them)


@dataclass(frozen=True)
class Number:
    """One number of the map: ``value`` in base units (bytes, seconds, a ratio, a count), ``text`` as printed,
    ``how`` the library call that computes it."""

    value: float
    text: str
    how: str


@dataclass(frozen=True)
class Paper:
    """A source: ``cite`` (authors or name, year, section/table), ``ref`` (arXiv id or venue), ``about`` (what the
    map takes from it)."""

    cite: str
    ref: str
    about: str

    @property
    def text(self) -> str:
        return f"{self.cite}, {self.ref}: {self.about}"


@dataclass(frozen=True)
class Setting:
    """The sizes the map's numbers are computed at (defaults: the lab page's). ``model`` is the course's anchor
    unless given; ``hardware`` gives the GPU memory, the links and the effective FLOP/s.

    Attributes:
        seq, micro_batch_size: tokens per sequence and sequences per micro-batch (s, b).
        gpus: one node's data-parallel, ZeRO and ring size (stages 2-4); gpus_large: the larger ring (stage 2).
        tp: the tensor-parallel size of stage 5; pp, micro_batches, virtual_stages: p, m, v of stages 6-7.
        long_seq, cp: the long sequence and the context-parallel size of stage 8; causal_tokens, causal_ranks: the
            small example of causal attention's work per rank.
    """

    model: ModelSpec
    hardware: Hardware
    seq: int = 4096
    micro_batch_size: int = 1
    gpus: int = 8
    gpus_large: int = 64
    tp: int = 8
    pp: int = 8
    micro_batches: int = 32
    virtual_stages: int = 4
    long_seq: int = 131_072
    cp: int = 8
    causal_tokens: int = 16
    causal_ranks: int = 4

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in ("model", "hardware"):
                continue
            x = getattr(self, f.name)
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                raise ValueError(f"{f.name}={x!r} must be a positive integer")
        if self.hardware.effective_flop_per_s is None:
            raise ValueError(
                f"hardware {self.hardware.name!r} has no effective FLOP/s (only the lab preset states one); "
                "stage 3 times the backward at it"
            )

    @classmethod
    def create(cls, model: str | ModelSpec = ANCHOR, hardware: str | Hardware | None = None, **sizes: int) -> Setting:
        """A setting from a model name or spec, a hardware preset name (default ``lab``) or ``Hardware``, and
        sizes by their field names."""
        hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
        unknown = sorted(set(sizes) - {f.name for f in fields(cls)} - {"model", "hardware"})
        if unknown:
            raise ValueError(f"unknown size {unknown[0]!r}; the sizes are {', '.join(_size_names())}")
        return cls(load_model(model), hw, **sizes)


def _size_names() -> list[str]:
    return [f.name for f in fields(Setting) if f.name not in ("model", "hardware")]


Numbers = Mapping[str, Number]


@dataclass(frozen=True)
class Stage:
    """One stage of the map.

    Attributes:
        number: 1-10, in this course's order.
        title: what the stage is.
        idea: what it does, in a few words (the figure's line).
        chapter: the notebook that teaches it (``"03_zero_fsdp"``); chapter_number: its number.
        years: when its ideas were published.
        papers: the papers, each with the section, table or figure the numbers rely on.
        engines: where it runs today.
        solved, stuck, number_template: templates filled with the texts of ``compute``'s numbers (``{name}``).
        compute: ``compute(setting)`` → name → ``Number``, the numbers the templates use.
        branch: ``""`` on the main line, else what makes a plan take the branch.
    """

    number: int
    title: str
    idea: str
    chapter: str
    chapter_number: int
    years: str
    papers: tuple[Paper, ...]
    engines: tuple[str, ...]
    solved: str
    stuck: str
    number_template: str
    compute: Callable[[Setting], Numbers] = field(repr=False, compare=False)
    branch: str = ""

    def fields_used(self) -> set[str]:
        """The ``{name}`` fields of the three templates."""
        return {
            name
            for text in (self.solved, self.stuck, self.number_template)
            for _, name, _, _ in string.Formatter().parse(text)
            if name
        }


@dataclass(frozen=True)
class Row:
    """A stage rendered at one setting: the three texts with their numbers filled in."""

    stage: Stage
    solved: str
    stuck: str
    number: str
    numbers: Numbers

    @property
    def sources(self) -> str:
        """Years and the papers' short citations, in one line."""
        return f"{self.stage.years}: {'; '.join(p.cite for p in self.stage.papers)}"

    @property
    def references(self) -> str:
        """The papers in full, then the engines, in one line."""
        papers = "; ".join(p.text for p in self.stage.papers)
        return f"{papers}. Engines: {', '.join(self.stage.engines)}."


# ---------------------------------------------------------------------------------------------------- helpers
def _n(value: float, text: str, how: str) -> Number:
    return Number(float(value), text, how)


def _seconds(t: float) -> str:
    return f"{t:.2f} s"


def _per_s(bytes_per_s: float) -> str:
    return fmt_gb(bytes_per_s, 0) + "/s"


def _gb_short(n_bytes: float) -> str:
    """'444.5' for the middle of a ladder (the unit printed once, at its end)."""
    return f"{n_bytes / 1e9:,.1f}"


def _ratio(x: float) -> str:
    """A small ratio as a fraction when it is one ('1/3'), else with one decimal ('1.5')."""
    f = Fraction(x).limit_denominator(12)
    if math.isclose(float(f), x, rel_tol=1e-9) and f.denominator > 1:
        return f"{f.numerator}/{f.denominator}"
    return f"{x:.1f}"


def _loads(loads: tuple[int, ...]) -> str:
    return " : ".join(fmt_int(x) for x in loads)


def _model_name(s: Setting) -> str:
    return "the anchor" if s.model.name == ANCHOR else s.model.name


# ------------------------------------------------------------------------------------------- each stage's numbers
_COMP_COMM = "deepseek_v3_comp_comm_ratio"
_LLAMA = 'published.value("llama3_table4")'
_DS = 'published.value("deepseek_v3_parallelism")'


def _one_gpu(s: Setting) -> Numbers:
    psi = s.model.params.total
    states = zero.model_states_bytes(psi)
    mem = s.hardware.gpu_memory_bytes
    hours = published.value("deepseek_v3_pretraining_gpu_hours")
    years = published.gpu_years(hours)
    return {
        "bpp": _n(zero.DEFAULT_BPP.total, f"{zero.DEFAULT_BPP.total} B", "zero.DEFAULT_BPP.total"),
        "params": _n(psi, fmt_int(psi), "load_model(...).params.total"),
        "states": _n(states, fmt_gb(states), "zero.model_states_bytes(Ψ)"),
        "gpu_memory": _n(mem, fmt_gb(mem, 0), "Hardware.gpu_memory_bytes"),
        "states_over_gpu": _n(states / mem, f"{states / mem:.1f}", "zero.model_states_bytes(Ψ) / GPU memory"),
        "gpu_hours": _n(hours, f"{hours / 1000:,.0f}K", 'published.value("deepseek_v3_pretraining_gpu_hours")'),
        "gpu_years": _n(years, f"{years:,.0f}", "published.gpu_years(hours)"),
    }


def _data_parallel(s: Setting) -> Numbers:
    psi = s.model.params.total
    ring, ring_l = dp.dp_bytes_per_step(psi, s.gpus), dp.dp_bytes_per_step(psi, s.gpus_large)
    naive, naive_l = dp.naive_gather_bytes_per_step(psi, s.gpus), dp.naive_gather_bytes_per_step(psi, s.gpus_large)
    states = dp.replica_states_bytes(psi, s.gpus_large)
    return {
        "gpus": _n(s.gpus, fmt_int(s.gpus), "Setting.gpus"),
        "gpus_large": _n(s.gpus_large, fmt_int(s.gpus_large), "Setting.gpus_large"),
        "ring": _n(ring, fmt_gb(ring), "dp.dp_bytes_per_step(Ψ, N)"),
        "ring_large": _n(ring_l, fmt_gb(ring_l), "dp.dp_bytes_per_step(Ψ, N)"),
        "naive": _n(naive, fmt_gb(naive), "dp.naive_gather_bytes_per_step(Ψ, N)"),
        "naive_large": _n(naive_l, fmt_gb(naive_l, 0), "dp.naive_gather_bytes_per_step(Ψ, N)"),
        "states": _n(states, fmt_gb(states), "dp.replica_states_bytes(Ψ, N)"),
    }


def _bucketing(s: Setting) -> Numbers:
    hw = s.hardware
    bucket = published.value("ddp_bucket_cap_bytes")
    ring = dp.dp_bytes_per_step(s.model.params.total, s.gpus)
    t_comm = collectives.transfer_time_s(ring, hw.infiniband_bytes_per_s)
    tokens = s.seq * s.micro_batch_size
    flops = hw.effective_flop_per_s
    assert flops is not None  # Setting checks it
    t_bwd = compute.backward_time_s(s.model.flop_params, tokens, flops)
    hidden = t_comm <= t_bwd
    return {
        "bucket": _n(bucket, fmt_mib(bucket, 0), 'published.value("ddp_bucket_cap_bytes")'),
        "ring": _n(ring, fmt_gb(ring), "dp.dp_bytes_per_step(Ψ, N)"),
        "ib": _n(hw.infiniband_bytes_per_s, _per_s(hw.infiniband_bytes_per_s), "Hardware.infiniband_bytes_per_s"),
        "t_comm": _n(t_comm, _seconds(t_comm), "collectives.transfer_time_s(ring bytes, InfiniBand)"),
        "tokens": _n(tokens, fmt_int(tokens), "s × b"),
        "flops": _n(flops, fmt_tflops(flops), "Hardware.effective_flop_per_s"),
        "t_backward": _n(t_bwd, _seconds(t_bwd), "compute.backward_time_s(flop_params, s × b, FLOP/s)"),
        "verdict": _n(hidden, "enough tokens to hide it" if hidden else "too few tokens to hide it", "t_comm ≤ t_bwd"),
    }


def _zero(s: Setting) -> Numbers:
    m, psi = s.model, s.model.params.total
    ladder = [zero.model_states_bytes(psi, stage, s.gpus) for stage in range(4)]
    ratio = zero.zero_sync_bytes(s.gpus, 2 * psi, 3) / zero.zero_sync_bytes(s.gpus, 2 * psi, 0)
    act = activations.activation_bytes(
        s.seq, s.micro_batch_size, m.hidden_size, m.num_attention_heads, m.num_layers, recompute="selective"
    )
    left = s.hardware.gpu_memory_bytes - ladder[3]
    return {
        "ladder": _n(
            ladder[3],
            " → ".join(_gb_short(x) for x in ladder) + " GB",
            "zero.model_states_bytes(Ψ, stage, N) for stages 0-3",
        ),
        "gpus": _n(s.gpus, fmt_int(s.gpus), "Setting.gpus"),
        "zero3_ratio": _n(ratio, f"{ratio:.1f}×", "zero.zero_sync_bytes(N, 2Ψ, 3) / zero.zero_sync_bytes(N, 2Ψ, 0)"),
        "seq": _n(s.seq, fmt_int(s.seq), "Setting.seq"),
        "act_selective": _n(act, fmt_gb(act), 'activations.activation_bytes(s, b, h, a, L, recompute="selective")'),
        "left": _n(left, fmt_gb(left), "GPU memory − zero.model_states_bytes(Ψ, 3, N)"),
        "verdict": _n(act > left, "does not fit in" if act > left else "fits in", "activations > what is left"),
    }


def _tensor_parallel(s: Setting) -> Numbers:
    m = s.model
    shape = (s.seq, s.micro_batch_size, m.hidden_size, m.num_attention_heads, m.num_layers)
    before = activations.activation_bytes(*shape, recompute="selective")
    after = activations.activation_bytes(*shape, t=s.tp, recompute="selective")
    sent = tp.tp_bytes_per_step(s.seq, s.micro_batch_size, m.hidden_size, m.num_layers, s.tp, 1)
    tflops = published.value("zero_40b_two_dgx2_tflops_per_gpu") * 1e12
    return {
        "tp": _n(s.tp, fmt_int(s.tp), "Setting.tp"),
        "act_selective": _n(before, fmt_gb(before), 'activations.activation_bytes(..., recompute="selective")'),
        "act_tp": _n(after, fmt_gb(after), 'activations.activation_bytes(..., t=tp, recompute="selective")'),
        "tp_bytes": _n(sent, fmt_gb(sent), "tp.tp_bytes_per_step(s, b, h, L, t, 1)"),
        "tokens": _n(s.seq * s.micro_batch_size, fmt_int(s.seq * s.micro_batch_size), "s × b"),
        "zero_tflops": _n(tflops, fmt_tflops(tflops), 'published.value("zero_40b_two_dgx2_tflops_per_gpu")'),
    }


def _pipeline(s: Setting) -> Numbers:
    m = s.model
    boundary = pp.boundary_bytes(s.seq, s.micro_batch_size, m.hidden_size)
    p, mb, v = s.pp, s.micro_batches, s.virtual_stages
    bubble, share, inter = pp.bubble_fraction(p, mb), pp.bubble_share_of_time(p, mb), pp.bubble_fraction(p, mb, v)
    return {
        "boundary": _n(boundary, fmt_mb(boundary), "pp.boundary_bytes(s, b, h)"),
        "p": _n(p, fmt_int(p), "Setting.pp"),
        "m": _n(mb, fmt_int(mb), "Setting.micro_batches"),
        "v": _n(v, fmt_int(v), "Setting.virtual_stages"),
        "bubble": _n(bubble, fmt_pct(bubble), "pp.bubble_fraction(p, m)"),
        "bubble_share": _n(share, fmt_pct(share), "pp.bubble_share_of_time(p, m)"),
        "bubble_interleaved": _n(inter, fmt_pct(inter), "pp.bubble_fraction(p, m, v)"),
    }


def _zero_bubble(s: Setting) -> Numbers:
    p, mb = s.pp, s.micro_batches
    share = formula_bubble("zb-h1", p, mb) / formula_bubble("1f1b", p, mb)
    copies = simulate("dualpipe", *SMALLEST_DUALPIPE).parameter_copies
    copies_v = simulate("dualpipev", *SMALLEST_DUALPIPE).parameter_copies
    return {
        "zb_share": _n(share, _ratio(share), 'schedule.formula_bubble("zb-h1") / formula_bubble("1f1b"), F = B = W'),
        "copies": _n(copies, fmt_int(copies), 'schedule.simulate("dualpipe", p, m).parameter_copies'),
        "copies_v": _n(copies_v, fmt_int(copies_v), 'schedule.simulate("dualpipev", p, m).parameter_copies'),
    }


def _context_parallel(s: Setting) -> Numbers:
    m = s.model
    contiguous = cp.causal_load(s.causal_tokens, s.causal_ranks)
    zigzag = cp.causal_load(s.causal_tokens, s.causal_ranks, zigzag=True)
    kv = cp.cp_kv_bytes_per_step(s.long_seq, s.micro_batch_size, m.kv_width, s.cp, 1, 1)
    cap = cp.ulysses_max_degree(m.num_attention_heads, m.num_key_value_heads)
    return {
        "long_seq": _n(s.long_seq, fmt_int(s.long_seq), "Setting.long_seq"),
        "tokens": _n(s.causal_tokens, fmt_int(s.causal_tokens), "Setting.causal_tokens"),
        "ranks": _n(s.causal_ranks, fmt_int(s.causal_ranks), "Setting.causal_ranks"),
        "contiguous": _n(max(contiguous), _loads(contiguous), "cp.causal_load(tokens, ranks)"),
        "zigzag": _n(max(zigzag), _loads(zigzag), "cp.causal_load(tokens, ranks, zigzag=True)"),
        "kv_layer": _n(kv, fmt_gb(kv), "cp.cp_kv_bytes_per_step(s, b, kv_width, c, 1 layer, 1 micro-batch)"),
        "cp": _n(s.cp, fmt_int(s.cp), "Setting.cp"),
        "model": _n(0, _model_name(s), "Setting.model"),
        "kv_heads": _n(m.num_key_value_heads, fmt_int(m.num_key_value_heads), "ModelSpec.num_key_value_heads"),
        "ulysses_max": _n(cap, fmt_int(cap), "cp.ulysses_max_degree(a, KV heads)"),
    }


def _expert_parallel(s: Setting) -> Numbers:
    hw = s.hardware
    ds = load_model("deepseek-v3")
    plan = published.value("deepseek_v3_parallelism")
    per_gpu = ep.experts_per_gpu(ds.num_experts, plan["ep"])
    nodes = published.value("deepseek_v3_max_nodes_per_token")
    ratio = hw.nvlink_bytes_per_s / hw.infiniband_bytes_per_s
    return {
        "expert_params": _n(
            ds.routed_expert_params,
            f"{ds.routed_expert_params / 1e9:,.0f}B",
            'load_model("deepseek-v3").routed_expert_params',
        ),
        "ep": _n(plan["ep"], fmt_int(plan["ep"]), 'published.value("deepseek_v3_parallelism")["ep"]'),
        "experts_per_gpu": _n(per_gpu, fmt_int(per_gpu), "ep.experts_per_gpu(num_experts, EP)"),
        "max_nodes": _n(nodes, fmt_int(nodes), 'published.value("deepseek_v3_max_nodes_per_token")'),
        "ib": _n(hw.infiniband_bytes_per_s, _per_s(hw.infiniband_bytes_per_s), "Hardware.infiniband_bytes_per_s"),
        "nvlink": _n(hw.nvlink_bytes_per_s, _per_s(hw.nvlink_bytes_per_s), "Hardware.nvlink_bytes_per_s"),
        "link_ratio": _n(ratio, f"{ratio:.1f}", "NVLink ÷ InfiniBand"),
        "comp_comm": _n(1, published.value(_COMP_COMM), f'published.value("{_COMP_COMM}")'),
    }


def _combination(s: Setting) -> Numbers:
    runs = published.value("llama3_table4")
    llama = max((r for r in runs if r["cp"] == 1), key=lambda r: r["gpus"])  # the 16K-GPU, 8K-token row
    dims = " × ".join(fmt_int(llama[k]) for k in ("tp", "cp", "pp", "dp"))
    ds = published.value("deepseek_v3_parallelism")
    return {
        "llama_dims": _n(math.prod(llama[k] for k in ("tp", "cp", "pp", "dp")), dims, _LLAMA),
        "llama_gpus": _n(llama["gpus"], fmt_int(llama["gpus"]), _LLAMA),
        "llama_mfu": _n(llama["mfu"], fmt_pct(llama["mfu"], 0), _LLAMA),
        "ds_pp": _n(ds["pp"], fmt_int(ds["pp"]), _DS),
        "ds_ep": _n(ds["ep"], fmt_int(ds["ep"]), _DS),
        "ds_zero": _n(ds["zero"], fmt_int(ds["zero"]), _DS),
        "ds_tp": _n(ds["tp"], "no TP" if ds["tp"] == 1 else f"TP {ds['tp']}", _DS),
        "ds_gpus": _n(ds["gpus"], fmt_int(ds["gpus"]), _DS),
    }


# ----------------------------------------------------------------------------------------------------- the map
STAGES: tuple[Stage, ...] = (
    Stage(
        1,
        "One GPU",
        "one GPU does the whole step",
        "01_one_gpu",
        1,
        "the starting point",
        (
            Paper(
                "ZeRO (Rajbhandari et al. 2019) §3.1",
                "arXiv:1910.02054",
                "16 bytes per parameter with mixed-precision Adam",
            ),
            Paper("DeepSeek-V3 (DeepSeek-AI 2024) Table 1", "arXiv:2412.19437", "pre-training GPU-hours"),
        ),
        ("PyTorch",),
        "The whole training step on one GPU: nothing is communicated.",
        "Model states alone are {bpp} per parameter × {params} parameters = {states} = {states_over_gpu} × one "
        "{gpu_memory} GPU; and time: DeepSeek-V3's pre-training took {gpu_hours} H800 GPU-hours, ≈ {gpu_years} "
        "years on one GPU.",
        "{states} = {states_over_gpu} × {gpu_memory}; ≈ {gpu_years} GPU-years",
        _one_gpu,
    ),
    Stage(
        2,
        "Data parallelism and the ring all-reduce",
        "copy the model, split the batch, ring all-reduce",
        "02_data_parallel",
        2,
        "2009–2018",
        (
            Paper(
                "Patarasuk & Yuan 2009", "J. Parallel Distrib. Comput. 69(2)", "the bandwidth-optimal ring all-reduce"
            ),
            Paper("Horovod (Sergeev & Del Balso 2018)", "arXiv:1802.05799", "the ring all-reduce for deep learning"),
        ),
        ("NCCL", "PyTorch DDP", "Horovod"),
        "Each GPU keeps a full copy and takes 1/N of the batch; a ring all-reduce sends 2(N−1)/N × the gradients "
        "per GPU: {ring} on {gpus} GPUs, {ring_large} on {gpus_large}, where gathering every gradient on one GPU "
        "would pour {naive} into it on {gpus} GPUs and {naive_large} on {gpus_large}.",
        "Every GPU still holds all {states} of model states: data parallelism divides the batch, never the model.",
        "{states} on every GPU, whatever N",
        _data_parallel,
    ),
    Stage(
        3,
        "Bucketing: overlap with the backward",
        "send gradients in buckets during the backward",
        "02_data_parallel",
        2,
        "2020",
        (Paper("PyTorch DDP (Li et al. 2020) §3.2", "VLDB 2020, arXiv:2006.15704", "gradient bucketing and overlap"),),
        ("PyTorch DDP (bucket_cap_mb = 25)", "Megatron-LM (--overlap-grad-reduce)"),
        "Gradients go out in {bucket} buckets as the backward produces them, so the all-reduce overlaps the backward "
        "instead of following it.",
        "DP's bytes per step are fixed by the model: {ring} at InfiniBand's {ib} take {t_comm}, against {t_backward} "
        "for the backward of {tokens} tokens per GPU at {flops}: {verdict}.",
        "{t_comm} of all-reduce against a {t_backward} backward",
        _bucketing,
    ),
    Stage(
        4,
        "ZeRO-1/2/3 and FSDP",
        "shard optimizer states, gradients, weights",
        "03_zero_fsdp",
        3,
        "2019–2023",
        (
            Paper(
                "ZeRO (Rajbhandari et al. 2019) §5, §7.2",
                "arXiv:1910.02054",
                "the stages (Figure 1); ZeRO-3 sends 1.5× DP",
            ),
            Paper("PyTorch FSDP (Zhao et al. 2023)", "arXiv:2304.11277", "fully sharded data parallelism in PyTorch"),
            Paper("Korthikanti et al. 2022 Table 2", "arXiv:2205.05198", "activation memory per layer"),
        ),
        ("DeepSpeed ZeRO", "PyTorch FSDP and FSDP2", "Megatron-LM distributed optimizer"),
        "Optimizer states, then gradients, then weights are sharded over the data-parallel ranks: {ladder} per GPU "
        "on {gpus} GPUs (ZeRO-0 to ZeRO-3).",
        "ZeRO-3's extra all-gather makes its traffic {zero3_ratio} DP's; activations are not sharded: selective "
        "recomputation at s = {seq} needs {act_selective}, which {verdict} the {left} left.",
        "{act_selective} of activations against {left} left",
        _zero,
    ),
    Stage(
        5,
        "Tensor parallelism",
        "split each layer's matrices",
        "04_tensor_parallel",
        4,
        "2019–2022",
        (
            Paper("Megatron-LM (Shoeybi et al. 2019) §3", "arXiv:1909.08053", "column- then row-parallel matrices"),
            Paper(
                "Korthikanti et al. 2022 §4.2.2",
                "arXiv:2205.05198",
                "sequence parallelism and its activations (Table 2)",
            ),
            Paper(
                "ZeRO (Rajbhandari et al. 2019) §1", "arXiv:1910.02054", "a 40B model with TP across two DGX-2 nodes"
            ),
        ),
        ("Megatron-LM", "PyTorch DTensor (torchtitan)"),
        "Column- then row-parallel matrices, one all-reduce per attention block and one per MLP in the forward; with "
        "t = {tp} and sequence parallelism activations drop from {act_selective} to {act_tp}.",
        "Two collectives forward and two backward per layer, {tp_bytes} per {tokens} tokens per GPU, blocking every "
        "layer: TP stays inside a node (across two DGX-2 nodes a 40B model ran at about {zero_tflops} per V100).",
        "{tp_bytes} per {tokens} tokens per GPU, blocking every layer",
        _tensor_parallel,
    ),
    Stage(
        6,
        "Pipeline parallelism: GPipe, 1F1B, interleaved",
        "split the layers into stages",
        "05_pipeline_parallel",
        5,
        "2018–2021",
        (
            Paper("GPipe (Huang et al. 2018)", "arXiv:1811.06965", "micro-batches through a pipeline of stages"),
            Paper("PipeDream (Narayanan et al. 2019)", "SOSP 2019", "the one-forward-one-backward (1F1B) schedule"),
            Paper("Narayanan et al. 2021 §2.2", "arXiv:2104.04473", "the bubble (p−1)/m and the interleaved schedule"),
        ),
        ("Megatron-LM", "torch.distributed.pipelining", "DeepSpeed"),
        "Layers are split into stages and only the boundary activations cross nodes, {boundary} per micro-batch; "
        "micro-batches fill the pipeline; 1F1B keeps p micro-batches in flight instead of m; interleaving divides "
        "the bubble by v.",
        "The ends idle: with p = {p} and m = {m}, (p−1)/m = {bubble} of the ideal time ({bubble_share} of the "
        "step); interleaved with v = {v}, still {bubble_interleaved}.",
        "{bubble} ({bubble_share} of the step); v = {v}: {bubble_interleaved}",
        _pipeline,
    ),
    Stage(
        7,
        "Zero Bubble and DualPipe",
        "split the backward, fill the bubble",
        "05_pipeline_parallel",
        5,
        "2024–2025",
        (
            Paper(
                "Zero Bubble (Qi et al. 2024) §2.1, Table 2", "ICLR 2024, arXiv:2401.10241", "B/W split, ZB-H1, ZB-H2"
            ),
            Paper("DeepSeek-V3 (DeepSeek-AI 2024) §3.2.1, Table 2", "arXiv:2412.19437", "DualPipe"),
            Paper("deepseek-ai/DualPipe (2025)", "github.com/deepseek-ai/DualPipe", "DualPipeV"),
        ),
        ("DeepSeek DualPipe", "torch.distributed.pipelining (ZBVZeroBubble, DualPipeV)"),
        "The backward is split into B (input gradients) and W (weight gradients), and W fills the bubble: ZB-H1's is "
        "{zb_share} of 1F1B's when F = B = W. DualPipe feeds micro-batches from both ends and hides the all-to-all "
        "behind other compute.",
        "DualPipe keeps {copies} copies of the parameters (DualPipeV folds it back to {copies_v}); schedules get "
        "complex; communication is hidden, not reduced.",
        "{copies} copies of the parameters",
        _zero_bubble,
    ),
    Stage(
        8,
        "Long sequences: sequence and context parallelism",
        "split the sequence",
        "06_context_parallel",
        6,
        "2021–2024",
        (
            Paper("Li et al. 2021", "arXiv:2105.13120", "sequence parallelism for long sequences"),
            Paper("Ring Attention (Liu et al. 2023)", "arXiv:2310.01889", "K and V passed around a ring"),
            Paper("DeepSpeed-Ulysses (Jacobs et al. 2023)", "arXiv:2309.14509", "all-to-all to whole heads"),
            Paper("Llama 3 (Llama Team 2024) §3.3.2", "arXiv:2407.21783", "zig-zag chunks, all-gathered K and V"),
        ),
        ("Megatron-LM context parallel", "torch context_parallel (torchtitan)", "DeepSpeed-Ulysses"),
        "A {long_seq}-token sequence is split over the GPUs; zig-zag gives each rank a head and a tail chunk, so "
        "causal attention's work per rank ({tokens} tokens on {ranks} ranks), {contiguous} with contiguous chunks, "
        "becomes {zigzag}.",
        "Every full-attention layer exchanges K and V: {kv_layer} per GPU per layer at s = {long_seq} on {cp} GPUs; "
        "Ulysses splits heads instead, and {model}'s {kv_heads} KV heads cap it at {ulysses_max}.",
        "{kv_layer} of K and V per layer; {kv_heads} KV heads",
        _context_parallel,
        branch="long sequences",
    ),
    Stage(
        9,
        "Mixture of experts: expert parallelism and all-to-all",
        "spread the experts, route tokens by all-to-all",
        "07_expert_parallel",
        7,
        "2020–2024",
        (
            Paper(
                "GShard (Lepikhin et al. 2020)", "arXiv:2006.16668", "experts sharded over devices, all-to-all dispatch"
            ),
            Paper("Switch Transformers (Fedus et al. 2021)", "arXiv:2101.03961", "top-1 routing, capacity factor"),
            Paper(
                "DeepSeek-V3 (DeepSeek-AI 2024) §3.2.1-3.2.2", "arXiv:2412.19437", "node-limited routing; the 1:1 ratio"
            ),
        ),
        ("Megatron-Core MoE", "DeepEP", "DeepSpeed-MoE"),
        "DeepSeek-V3's {expert_params} routed-expert parameters spread over EP = {ep} GPUs, {experts_per_gpu} "
        "experts per GPU per MoE layer; each token goes to at most {max_nodes} nodes.",
        "InfiniBand's {ib} is 1/{link_ratio} of NVLink's {nvlink}; cross-node EP's computation-to-communication "
        "ratio is about {comp_comm}; hot experts make stragglers.",
        "{ib} against {nvlink}; compute : communication ≈ {comp_comm}",
        _expert_parallel,
        branch="mixture of experts",
    ),
    Stage(
        10,
        "Combining them: 3D, 4D, 5D parallelism",
        "combine the dimensions on one mesh",
        "08_4d_lab",
        8,
        "2021–2024",
        (
            Paper("Narayanan et al. 2021", "arXiv:2104.04473", "PTD-P: tensor, pipeline and data parallelism combined"),
            Paper("Llama 3 (Llama Team 2024) Table 4", "arXiv:2407.21783", "4D parallelism on 16K H100s"),
            Paper("DeepSeek-V3 (DeepSeek-AI 2024) §3.2", "arXiv:2412.19437", "PP 16 × EP 64 × ZeRO-1 DP, no TP"),
        ),
        ("Megatron-LM", "torchtitan", "DeepSpeed"),
        "The dimensions combine on one mesh: Llama 3 405B ran [TP, CP, PP, DP] = {llama_dims} on {llama_gpus} H100s "
        "at {llama_mfu} BF16 MFU; DeepSeek-V3 ran PP {ds_pp} × EP {ds_ep} with ZeRO-{ds_zero} data parallelism and "
        "{ds_tp} on {ds_gpus} H800s.",
        "There is no universal plan: every combination must be priced (memory per GPU, the link each dimension uses, "
        "the bubble), which is what the lab does.",
        "no universal plan: Llama 3 {llama_dims}, DeepSeek-V3 PP {ds_pp} × EP {ds_ep} with {ds_tp}",
        _combination,
    ),
)

MAIN_LINE = tuple(s.number for s in STAGES if not s.branch)
BRANCHES = tuple(s.number for s in STAGES if s.branch)


def stage(number: int) -> Stage:
    """The stage with that number (1-10)."""
    for s in STAGES:
        if s.number == number:
            return s
    raise ValueError(f"stage={number!r} must be one of {', '.join(str(s.number) for s in STAGES)}")


def render(st: Stage, numbers: Numbers) -> Row:
    """A stage's templates filled with ``numbers``' texts (ValueError naming a field that has no number)."""
    texts = {k: v.text for k, v in numbers.items()}
    missing = sorted(st.fields_used() - set(texts))
    if missing:
        raise ValueError(f"stage {st.number} ({st.title}) has no number {missing[0]!r}")
    return Row(
        st,
        st.solved.format_map(texts),
        st.stuck.format_map(texts),
        st.number_template.format_map(texts),
        MappingProxyType(dict(numbers)),
    )


def rows(setting: Setting | None = None) -> list[Row]:
    """Every stage rendered at ``setting`` (default: the lab page's sizes for the anchor)."""
    s = Setting.create() if setting is None else setting
    return [render(st, st.compute(s)) for st in STAGES]


def row(number: int, setting: Setting | None = None) -> Row:
    """One stage rendered (default: the lab page's sizes), for a chapter's opening or closing sentence.

    >>> row(6).numbers["bubble"].text
    '21.9 %'
    """
    st = stage(number)
    return render(st, st.compute(Setting.create() if setting is None else setting))


def break_even_tokens(model: str | ModelSpec, dp_size: int, link_bytes_per_s: float, flop_per_s: float) -> float:
    """Tokens one GPU's backward must process to last as long as the ring all-reduce of the gradients (stage 3):
    ``collectives.transfer_time_s(dp.dp_bytes_per_step(Ψ, N), link)`` ÷ ``compute.backward_time_s`` of one token,
    i.e. 2(N−1)/N × 2 B × Ψ ÷ link bandwidth × FLOP/s ÷ (4 × flop_params). Fewer tokens leave the all-reduce
    exposed after the backward. bf16 gradients, the whole model's gradient once per step, no latency.

        >>> round(break_even_tokens(ANCHOR, 8, 50e9, 400e12))
        7589
    """
    spec = load_model(model)
    comm = collectives.transfer_time_s(dp.dp_bytes_per_step(spec.params.total, dp_size), link_bytes_per_s)
    return comm / compute.backward_time_s(spec.flop_params, 1, flop_per_s)


# ------------------------------------------------------------------------------------------------------ the figure
_CSS = """
.mp-evomap{--evo-line:var(--pst-color-primary,var(--jp-brand-color1,#0a7d91));
 --evo-box:var(--pst-color-surface,var(--jp-layout-color2,#f3f4f5));
 --evo-border:var(--pst-color-border,var(--jp-border-color1,#d1d5da));
 --evo-muted:var(--pst-color-text-muted,var(--jp-ui-font-color2,#48566b));
 --evo-stuck:var(--pst-color-danger,#d72d47);
 color:var(--pst-color-text-base,var(--jp-ui-font-color1,#222832));
 position:relative;margin:1em 0;padding:0 0 0 2.6em;list-style:none;font-size:16px;line-height:1.4;max-width:40em}
.mp-evomap::before{content:"";position:absolute;left:1.05em;top:1em;bottom:1.4em;border-left:3px solid var(--evo-line)}
.mp-evomap>li{position:relative;margin:0 0 .8em 0;padding:.5em .7em;background:var(--evo-box);
 border:1px solid var(--evo-border);border-radius:6px}
.mp-evo-num{position:absolute;left:-2.45em;top:.45em;width:1.8em;height:1.8em;border-radius:50%;
 background:var(--evo-line);color:#fff;font-weight:700;font-size:14px;text-align:center;line-height:1.8em}
.mp-evo-head{font-weight:700}
.mp-evo-meta{color:var(--evo-muted);font-size:14px}
.mp-evo-link{color:inherit;text-decoration:underline}
.mp-evo-idea{font-size:15px}
.mp-evo-stuck{font-size:15px;margin-top:.2em}
.mp-evo-stuck b{color:var(--evo-stuck)}
.mp-evomap>li.mp-evo-branch{margin-left:1.6em;border:2px dashed var(--evo-line)}
.mp-evomap>li.mp-evo-branch::before{content:"";position:absolute;left:-2.25em;top:1.2em;width:2.1em;
 border-top:2px dashed var(--evo-line)}
.mp-evo-tag{display:inline-block;font-size:13px;font-weight:700;color:var(--evo-line);text-transform:uppercase;
 letter-spacing:.04em}
.mp-evomap>li.mp-evo-branch .mp-evo-num{left:-4.05em;background:var(--evo-box);color:var(--evo-line);
 border:2px dashed var(--evo-line);line-height:calc(1.8em - 4px)}
"""


def flow_html(map_rows: list[Row]) -> str:
    """The map as a vertical flow: one box per stage on a line (the main line), the branches indented with dashed
    borders, each box with its title, a link to its chapter (the built site's ``<chapter>.html``, a sibling of the
    map's page) and years, what it does, and the number where it got stuck. Plain
    HTML and CSS (the theme's colour variables, light and dark), no script; text 13-16 px."""
    esc = html.escape
    items = []
    for r in map_rows:
        st = r.stage
        tag = f'<span class="mp-evo-tag">branch: {esc(st.branch)}</span><br>' if st.branch else ""
        items.append(
            f'<li class="mp-evo-stage{" mp-evo-branch" if st.branch else ""}" data-stage="{st.number}">'
            f'<span class="mp-evo-num">{st.number}</span>{tag}'
            f'<span class="mp-evo-head">{esc(st.title)}</span> '
            f'<span class="mp-evo-meta">· <a class="mp-evo-link" href="{esc(st.chapter)}.html">chapter '
            f"{st.chapter_number}</a> · {esc(st.years)}</span><br>"
            f'<span class="mp-evo-idea">{esc(st.idea)}</span>'
            f'<div class="mp-evo-stuck"><b>stuck:</b> {esc(r.number)}</div></li>'
        )
    main = [str(r.stage.number) for r in map_rows if not r.stage.branch]
    branches = [str(r.stage.number) for r in map_rows if r.stage.branch]
    label = f"The evolution map: stages {', '.join(main)} on the main line, {' and '.join(branches)} as branches"
    return f'<style>{_CSS}</style><ol class="mp-evomap" aria-label="{label}">{"".join(items)}</ol>'
