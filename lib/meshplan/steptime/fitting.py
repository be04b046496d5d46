"""The step-time model against published runs: how each run is planned, its published step time, the fit of the
three constants and the validation errors.

Every run of ``data/published_runs.json`` with enough detail to plan it is planned here (``RUN_SETUPS``: the
ledger, the engine's execution and each assumption, with its reason), its published figure is turned into seconds
per step by the paper's own FLOP count (``published_step_s``), and ``steptime.step_time`` predicts it.

The fit set is declared here, before any other run is looked at: **Narayanan et al. 2021 Table 1** (``FIT_SET``, ten
GPT models from 1.7B to 1T parameters on 32 to 3,072 A100s). The three constants of ``steptime.Calibration`` are
fitted on it alone, minimising the squared log ratio of predicted to published step time (least squares in the log
ratios, ``scipy.optimize.least_squares`` within each constant's physical range; deterministic). Every other
plannable run is held out and scored separately: Korthikanti et al. 2022 Table 5, Llama 3 Table 4, and the runs
``published_runs.json`` marks ``held_out`` (BLOOM, MT-NLG, torchtitan on A100). Runs that cannot be scored say why
(``UNSCORED``).

    >>> rows = {r.id: r for r in validate()}
    >>> rows["korthikanti2022-175b"].group
    'held out: Korthikanti 2022'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from meshplan.core.resources import data_path, read_json
from meshplan.core.schemas import check
from meshplan.parallel.compute import narayanan_eq3_flop
from meshplan.plan import Plan, Report, evaluate
from meshplan.spec.hardware import load_hardware
from meshplan.spec.model import ModelSpec, load_model, model_from_config
from meshplan.steptime.model import (
    PHYSICAL_RANGES,
    Calibration,
    Execution,
    fit_data,
    hfu,
    mfu,
    model_flop_per_step,
    step_time,
)

FIT_SET = "narayanan2021-t1-"  # declared before looking at the rest: Narayanan et al. 2021 Table 1
TARGET_MEDIAN = 0.15
TARGET_MAX = 0.35

# Megatron-LM as the 2021 runs used it: the whole score matrix (fused scale-mask-softmax), no asynchronous TP,
# no sequence parallelism; the DDP implementation decides the gradient overlap (--DDP-impl torch overlaps by
# construction; Megatron's 2021 LocalDDP all-reduces after the backward, in train_step).
_MEGATRON_2021 = Execution(attention="dense", tp_overlap="none", dp_overlap=False, pp_scatter_gather=True)
# Korthikanti et al. 2022's Megatron-LM: dense attention (selective recompute recomputes its score matrix), the
# sequence-parallel all-gather/reduce-scatter with the asynchronous input-gradient reduction it introduced.
_MEGATRON_2022 = Execution(attention="dense", tp_overlap="backward")
# Megatron-DeepSpeed (BLOOM, MT-NLG): Megatron's 2021 layers, DeepSpeed's ZeRO-1 with overlap_comm off (default).
_MEGATRON_DEEPSPEED = Execution(attention="dense", tp_overlap="none", dp_overlap=False, pp_scatter_gather=True)


@dataclass(frozen=True)
class RunSetup:
    """How one published run is planned where ``published_runs.json`` leaves a choice open.

    Attributes:
        accounting: the ledger whose collectives match the run's engine.
        zero: ZeRO stage.
        execution: attention kernel and overlaps (``steptime.Execution``).
        why: the reasons, with sources, for the choices and the assumptions.
        sp: sequence parallelism (None: on whenever tp > 1).
        micro_batch_size, virtual_stages, recompute: used when the run does not state them.
        infiniband_bytes_per_s: the run's inter-node bandwidth per GPU where it differs from the preset's.
        stage_balance: ``Plan.stage_balance``.
    """

    accounting: str
    zero: int
    execution: Execution
    why: str
    sp: bool | None = None
    micro_batch_size: int | None = None
    virtual_stages: int | None = None
    recompute: str | None = None
    infiniband_bytes_per_s: float | None = None
    stage_balance: str = "even"


RUN_SETUPS: dict[str, RunSetup] = {
    "narayanan2021-t1-": RunSetup(
        "lab",
        0,
        _MEGATRON_2021,
        sp=False,
        why="Megatron-LM 2021 (examples/sc21/run_table_1.sh at de7dc40f88): DDP without ZeRO, 16-bit gradients "
        "all-reduced once per step (--accumulate-allreduce-grads-in-fp32 is off by default, arguments.py#L553: the "
        "lab ledger), no sequence parallelism (2022), the whole score matrix computed (torch.baddbmm and "
        "FusedScaleMaskSoftmax, megatron/model/transformer.py#L271; FlashAttention came in 2022), no asynchronous "
        "TP all-reduce (added 2021-08-30, cf7efd4f5a), scatter/gather of the pipeline sends on by default "
        "(arguments.py#L585-L587). --DDP-impl torch (1.7B to 18.4B) overlaps the all-reduce with the backward; "
        "--DDP-impl local (39.1B up) runs it after the backward (training.py#L365-L369).",
    ),
    "korthikanti2022-": RunSetup(
        "megatron",
        0,
        _MEGATRON_2022,
        virtual_stages=1,
        why="Megatron-LM 2022 with sequence parallelism and its backward re-gather (the megatron ledger), DP = 1; "
        "dense attention (selective recompute recomputes its score matrix); the backward re-gather and the "
        "input-gradient reduce-scatter run asynchronously under the GEMMs (megatron/mpu/layers.py#L239-L308 at "
        "739cb43dae). The interleaving degree is not stated: v = 1 (1F1B) is assumed.",
    ),
    "llama3-405b-": RunSetup(
        "fsdp2",
        2,
        Execution(cp_overlap=False),
        micro_batch_size=1,
        virtual_stages=7,
        recompute="none",
        why="FSDP sharding optimizer states and gradients, parameters not resharded after the forward, fp32 "
        "reduce-scatter (§3.3.2): the fsdp2 ledger at ZeRO-2, which with pipeline parallelism gathers the weights "
        "and reduce-scatters the fp32 gradients once per step. CP all-gathers K and V before the attention, "
        "exposed (§3.3.2). Micro-batch size 1 (Batch size/DP sequences per DP rank, one at a time) is assumed. V "
        "is not published; one layer per virtual stage (126 layers, embedding and head on 16 × 8 chunks: 'we "
        "reduce one Transformer layer each from the first and the last stages') is v = 8, capped at the 7 layers "
        "of the end stages the plan accepts. The 131,072-token row states no recomputation; its per-GPU "
        "activations equal the 8K rows' (CP 16), which need none.",
    ),
    "deepseek-v3-": RunSetup(
        "lab",
        1,
        Execution(pipeline="dualpipe"),
        micro_batch_size=1,
        stage_balance="max",
        why="ZeRO-1, PP 16 with DualPipe, EP 64 (§3.2); micro-batch size 1 is assumed. Not scored: see UNSCORED.",
    ),
    "bloom-": RunSetup(
        "deepspeed",
        1,
        _MEGATRON_DEEPSPEED,
        sp=False,
        infiniband_bytes_per_s=6.25e9,
        why="Megatron-DeepSpeed with ZeRO-1 (BF16_Optimizer), no sequence parallelism, dense attention; Jean Zay's "
        "4 Omni-Path 100 Gb/s links per node of 8 GPUs: 6.25 GB/s per GPU. 70 layers on 12 stages with the "
        "embedding counted as a layer: 5, 6, ..., 6, 5.",
    ),
    "mt-nlg-": RunSetup(
        "deepspeed",
        1,
        _MEGATRON_DEEPSPEED,
        sp=False,
        micro_batch_size=1,
        virtual_stages=1,
        recompute="full",
        why="Megatron-DeepSpeed: ZeRO-1 assumed, 1F1B, no sequence parallelism, dense attention; full recompute "
        "(Eq. 3, which counts it, reproduces the published TFLOP/s); micro-batch size 1 assumed.",
    ),
    "torchtitan-a100-": RunSetup(
        "fsdp2",
        3,
        Execution(),
        why="torchtitan FSDP2 (ZeRO-3: bf16 gathers forward and backward, fp32 reduce-scatter, every step: "
        "torchtitan/parallelisms/parallelize_llama.py#L219-L222 at 0413364), PyTorch SDPA (causal flash). The "
        "interconnect is not stated: the preset's 25 GB/s per GPU, at which the 8·Ψ·63/64 bytes of FSDP traffic "
        "per step take longer than the published step (70B: 551 GB, 22 s at line rate, 29.6 s at the fitted link "
        "efficiency, against 24.7 s published): the cluster's network must have been faster. 'selective layer' "
        "(every other layer fully recomputed) and 'selective op' (cheap ops recomputed) are both planned as "
        "selective recompute.",
    ),
}

UNSCORED: dict[str, str] = {
    "deepseek-v3-pretraining": "FP8 GEMMs (§3.3) run at twice the bf16 peak the model charges; the EP bytes of the "
    "ledger send each token to each of its 8 experts in bf16, where node-limited routing "
    "sends it to at most 4 nodes and dispatches in FP8 (§3.2.2); and the published figure "
    "is GPU hours per trillion tokens of the whole run, not a step time.",
    "torchtitan-h100-": "no preset fits: Grand Teton H100 at 500 W with 96 GB HBM2e, whose peak the benchmark says is "
    "not known exactly.",
    "opt-175b": "TP, DP, global batch and recomputation not published.",
    "megatron-lm-readme-": "mesh, sequence length and GPUs per point only in an image.",
}


def _lookup(table: dict[str, Any], run_id: str) -> Any:
    for prefix, value in table.items():
        if run_id.startswith(prefix):
            return value
    return None


def run_execution(r: dict) -> Execution:
    """The run's ``Execution``: its setup's, with the gradient overlap of the DDP implementation it names
    (``--DDP-impl torch``: PyTorch DDP overlaps the all-reduce with the backward; ``local``: Megatron-LM 2021 runs it
    after the backward, megatron/training.py#L365-L369 at de7dc40f88)."""
    ex = _lookup(RUN_SETUPS, r["id"]).execution
    text = r.get("data_parallel") or ""
    if "--DDP-impl torch" in text:
        return replace(ex, dp_overlap=True)
    if "--DDP-impl local" in text:
        return replace(ex, dp_overlap=False)
    return ex


@lru_cache(maxsize=1)
def published_runs() -> tuple[dict, ...]:
    """The runs of ``data/published_runs.json``, checked against ``data/schemas/published_runs.schema.json`` (a
    ValueError names the file and the field)."""
    data = read_json("published_runs.json")
    check(data, "published_runs", f"malformed data file {str(data_path('published_runs.json'))!r}")
    return tuple(data["runs"])


def run(run_id: str) -> dict:
    """One published run by id (ValueError for an unknown id)."""
    for r in published_runs():
        if r["id"] == run_id:
            return r
    raise ValueError(f"unknown published run {run_id!r}")


def _gpt_config(shape: dict, seq: int) -> dict:
    return {
        "model_type": "gpt2",
        "n_embd": shape["hidden"],
        "n_layer": shape["layers"],
        "n_head": shape["heads"],
        "vocab_size": shape.get("vocab_padded") or shape["vocab"],
        "n_positions": seq,
        "n_inner": shape["ffn"],
    }


def run_model(r: dict) -> ModelSpec:
    """The model of a run: a shipped file, an inline config, or (BLOOM, MT-NLG) a GPT built from the published
    shape (BLOOM's ALiBi has no position table; the GPT's, 2,048 × h, is 0.02 % of the parameters)."""
    spec = r["model"]
    if "file" in spec:
        return load_model(spec["file"])
    if "config" in spec:
        return model_from_config(spec["config"], spec["name"])
    return model_from_config(_gpt_config(spec["shape"], r["seq"]), spec["name"])


def run_plan(r: dict, recompute: str | None = None) -> Plan:
    """The ``Plan`` of a published run (``RUN_SETUPS`` fills what the run leaves open)."""
    setup: RunSetup = _lookup(RUN_SETUPS, r["id"])
    if setup is None:
        raise ValueError(f"run {r['id']!r} has no setup: it cannot be planned")
    mesh = r["mesh"]
    model = run_model(r)
    hw = load_hardware(r["hardware"])
    if setup.infiniband_bytes_per_s:
        hw = replace(hw, infiniband_bytes_per_s=setup.infiniband_bytes_per_s)
    b: int = r["micro_batch_size"] or setup.micro_batch_size or 1
    v: int = mesh.get("virtual_stages") or setup.virtual_stages or 1
    rc: str = recompute or r["recompute"] or setup.recompute or "none"
    return Plan.create(
        model,
        gpus=r["gpus"],
        tp=mesh["tp"],
        cp=mesh["cp"],
        pp=mesh["pp"],
        dp=mesh["dp"],
        ep=mesh["ep"],
        seq=r["seq"],
        micro_batch_size=b,
        global_batch=r["global_batch"],
        hardware=hw,
        accounting=setup.accounting,
        zero=setup.zero,
        recompute=rc,
        sp=setup.sp,
        virtual_stages=v,
        uneven_stages=True,
        stage_balance=setup.stage_balance,
    )


def _eq3(r: dict, model: ModelSpec) -> float:
    return narayanan_eq3_flop(r["global_batch"], r["seq"], model.num_layers, model.hidden_size, model.vocab_size)


@dataclass(frozen=True)
class Published:
    """A run's published figure as seconds per step, with the metric it came from."""

    step_s: float
    metric: str  # e.g. "TFLOP/s per GPU (Eq. 3)"
    value: float  # as printed
    to_metric: Callable[[float], float] = field(compare=False, repr=False)  # a step time → that metric


def published_step_s(r: dict, report: Report, variant: str = "") -> Published:
    """The published figure of run ``r`` as seconds per step, by the paper's own FLOP count:

    * an iteration time (Korthikanti Table 5, BLOOM, MT-NLG): as printed;
    * Narayanan's TFLOP/s per GPU: Eq. (3) FLOP per iteration ÷ (TFLOP/s × GPUs);
    * Llama 3's TFLOP/s per GPU (model FLOPs, PaLM's convention): ``steptime.model_flop_per_step`` ÷ (TFLOP/s × GPUs);
    * tokens per second per GPU (torchtitan): tokens per GPU per step ÷ that rate;
    * DeepSeek-V3's GPU hours per trillion tokens: tokens per step × GPU-seconds per token ÷ GPUs.
    """
    pub, n = r["published"], r["gpus"]
    if variant == "full":
        t = pub["iteration_time_full_recompute_s"]["value"]
        return Published(t, "iteration time (s)", t, lambda s: s)
    if "iteration_time_s" in pub:
        t = pub["iteration_time_s"]["value"]
        return Published(t, "iteration time (s)", t, lambda s: s)
    if "tokens_per_s_per_gpu" in pub:
        rate = pub["tokens_per_s_per_gpu"]["value"]
        tokens = report.plan.tokens_per_step / n
        return Published(tokens / rate, "tokens/s per GPU", rate, lambda s: tokens / s)
    if "tflop_per_s_per_gpu" in pub:
        tf = pub["tflop_per_s_per_gpu"]["value"]
        if "Eq. (3)" in pub["tflop_per_s_per_gpu"]["counts"]:
            flop = _eq3(r, report.plan.model)
            label = "TFLOP/s per GPU (Eq. 3)"
        else:
            flop = model_flop_per_step(report)
            label = "model TFLOP/s per GPU"
        return Published(flop / (tf * 1e12 * n), label, tf, lambda s: flop / (s * n * 1e12))
    if "gpu_hours_per_trillion_tokens" in pub:
        hours = pub["gpu_hours_per_trillion_tokens"]["value"]
        gpu_s_per_token = hours * 3600 / 1e12
        tokens = report.plan.tokens_per_step
        return Published(
            tokens * gpu_s_per_token / n, "GPU hours per 10¹² tokens", hours, lambda s: s * n / tokens * 1e12 / 3600
        )
    raise ValueError(f"run {r['id']!r}: no published figure turns into a step time")


@dataclass(frozen=True)
class Row:
    """One run predicted against its published figure."""

    id: str
    group: str
    plan: Plan
    published: Published
    predicted_s: float
    note: str = ""

    @property
    def error(self) -> float:
        """Relative error of the predicted step time: predicted ÷ published − 1."""
        return self.predicted_s / self.published.step_s - 1

    @property
    def scored(self) -> bool:
        return not self.group.startswith("not scored")

    @property
    def predicted_metric(self) -> float:
        return self.published.to_metric(self.predicted_s)

    @property
    def mfu(self) -> tuple[float | None, float]:
        """(published MFU if the run prints one, predicted MFU), both against the GPU's dense bf16 peak."""
        pub = run(self.id.removesuffix("-full-recompute"))["published"]
        printed = None if self.id.endswith("-full-recompute") else pub.get("mfu_percent", {}).get("value")
        report = evaluate(self.plan)
        return (None if printed is None else printed / 100), mfu(report, self.predicted_s)

    @property
    def hfu(self) -> tuple[float | None, float]:
        """(published HFU if printed, predicted HFU). Korthikanti et al.'s HFU for selective recomputation adds
        12·B·L·s²·h FLOP for the recomputed attention core, three times the one forward (4·B·L·s²·h) counted here."""
        pub = run(self.id.removesuffix("-full-recompute"))["published"]
        printed = None if self.id.endswith("-full-recompute") else pub.get("hfu_percent", {}).get("value")
        return (None if printed is None else printed / 100), hfu(evaluate(self.plan), self.predicted_s)


def _group(run_id: str, held_out: bool) -> str:
    if _lookup(UNSCORED, run_id):
        return "not scored"
    if run_id.startswith(FIT_SET):
        return "fit: Narayanan 2021"
    if held_out:
        return "held out: other runs"
    if run_id.startswith("korthikanti"):
        return "held out: Korthikanti 2022"
    return "held out: Llama 3"


def plannable_runs() -> list[dict]:
    """The runs with a setup (every one with enough detail to plan)."""
    return [r for r in published_runs() if _lookup(RUN_SETUPS, r["id"]) is not None]


@lru_cache(maxsize=1)
def _cases() -> tuple[tuple[str, dict, Report, str], ...]:
    out = []
    for r in plannable_runs():
        out.append((r["id"], r, evaluate(run_plan(r)), ""))
        if "iteration_time_full_recompute_s" in r["published"]:
            out.append((r["id"] + "-full-recompute", r, evaluate(run_plan(r, "full")), "full"))
    return tuple(out)


def validate(cal: Calibration | None = None) -> list[Row]:
    """Every plannable run predicted with ``cal`` (default: the stored fit) against its published figure."""
    rows = []
    for rid, r, report, variant in _cases():
        pub = published_step_s(r, report, variant)
        predicted = step_time(report, run_execution(r), cal).total_s
        rows.append(
            Row(rid, _group(r["id"], r["held_out"]), report.plan, pub, predicted, _lookup(UNSCORED, r["id"]) or "")
        )
    return rows


def errors(rows: Iterable[Row]) -> dict[str, float]:
    """Median and largest absolute relative error of ``rows`` (and how many)."""
    e = [abs(x.error) for x in rows]
    return {"n": len(e), "median": statistics.median(e), "max": max(e)}


def summary(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Errors by group, for the fit set, the held-out set and every scored run."""
    scored = [r for r in rows if r.scored]
    out = {g: errors([r for r in scored if r.group == g]) for g in dict.fromkeys(r.group for r in scored)}
    out["fit set"] = errors([r for r in scored if r.group.startswith("fit")])
    out["held out"] = errors([r for r in scored if r.group.startswith("held out")])
    out["all scored"] = errors(scored)
    return out


# ---------------------------------------------------------------- the fit
FIT_START = Calibration(0.6, 4.0, 0.8)  # where the fit starts: mid-range values, not the answer


def fit(start: Calibration = FIT_START) -> Calibration:
    """The three constants minimising Σ log²(predicted ÷ published) over the fit set (Narayanan 2021 Table 1): a
    least-squares problem in the residuals log(predicted ÷ published), solved by ``scipy.optimize.least_squares``
    (trust-region reflective, each constant kept inside its ``PHYSICAL_RANGES``), rounded to 4 decimals."""
    # scipy is imported here, not with the module: only a refit needs it (scripts/validate_steptime.py --write-fit
    # and its test); the course's pages import this module for the published runs and plans, and the stored fit
    # (data/steptime_fit.json) is all the step-time model reads. Importing scipy.optimize costs about 0.3 s.
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    cases = [(rid, r, report, v) for rid, r, report, v in _cases() if rid.startswith(FIT_SET)]
    pubs = [published_step_s(r, report, v).step_s for _, r, report, v in cases]
    execs = [run_execution(r) for _, r, _, _ in cases]

    def residuals(x: Sequence[float]) -> list[float]:
        cal = Calibration(*(float(v) for v in x))
        return [
            math.log(step_time(report, ex, cal).total_s / pub)
            for (_, _, report, _), ex, pub in zip(cases, execs, pubs, strict=True)
        ]

    lo, hi = zip(*PHYSICAL_RANGES.values(), strict=True)
    best = least_squares(residuals, [getattr(start, k) for k in PHYSICAL_RANGES], bounds=(lo, hi), method="trf")
    if not best.success:  # scipy's status ≤ 0: the iteration limit, or improper input
        raise RuntimeError(f"the step-time fit did not converge: {best.message}")
    return Calibration(*(round(float(x), 4) for x in best.x))


def ratio_errors(rows: Sequence[Row]) -> list[float]:
    """|predicted ratio ÷ published ratio − 1| of the step times of every two held-out runs of one model on one
    machine: how well the model orders plans of one model on one machine, where the errors they share cancel."""
    out = []
    held = [r for r in rows if r.scored and r.group.startswith("held out")]
    for i, a in enumerate(held):
        for b in held[i + 1 :]:
            if (a.plan.model.name, a.plan.hardware.name) == (b.plan.model.name, b.plan.hardware.name):
                out.append(abs((a.predicted_s / b.predicted_s) / (a.published.step_s / b.published.step_s) - 1))
    return out


def tie_band(rows: Sequence[Row]) -> float:
    """The search's tie band: the median of ``ratio_errors``, rounded up to a whole percent."""
    return math.ceil(100 * statistics.median(ratio_errors(rows))) / 100


def ratio_uncertainty(rows: Sequence[Row]) -> float:
    """The model's uncertainty on the ratio of two plans' step times: the largest of ``ratio_errors``, rounded up to
    a whole percent (the plan checker's search line: a plan within it of the fastest is not told apart from it)."""
    return math.ceil(100 * max(ratio_errors(rows))) / 100


MEANINGS = {
    "matmul_efficiency": "achieved fraction of the dense bf16 peak in the GEMMs (and attention without a documented "
    "FlashAttention figure)",
    "hbm_passes": "HBM reads and writes of each activation byte a layer stores (Korthikanti Table 2), over its "
    "forward and backward: the memory-bound element-wise work",
    "link_efficiency": "achieved fraction of a link's per-direction bandwidth in a collective (NCCL bus bandwidth "
    "over line rate)",
}


def fit_record(cal: Calibration, rows: Sequence[Row]) -> dict:
    """The content of ``data/steptime_fit.json`` for constants ``cal`` and their validation ``rows`` (the
    ``documented`` figures are carried over from the stored file)."""
    s = summary(rows)
    fit_ids = [r.id for r in rows if r.group.startswith("fit")]
    return {
        "description": "Fitted constants of meshplan.steptime (written by scripts/validate_steptime.py --write-fit; "
        "fitted by meshplan.steptime.fitting.fit on the declared fit set only).",
        "fit_set": {
            "declared": f"run ids starting with {FIT_SET!r}: Narayanan et al. 2021 Table 1",
            "runs": fit_ids,
            "loss": "sum over the fit set of log(predicted / published step time)^2, scipy.optimize.least_squares",
        },
        "constants": {
            k: {"value": getattr(cal, k), "physical_range": list(PHYSICAL_RANGES[k]), "meaning": MEANINGS[k]}
            for k in PHYSICAL_RANGES
        },
        "documented": fit_data()["documented"],
        "validation": {g: {k: (round(v, 4) if k != "n" else v) for k, v in e.items()} for g, e in s.items()},
        "tie_band": {
            "value": tie_band(rows),
            "absolute_median_error": round(s["held out"]["median"], 4),
            "source": "median over held-out pairs of runs of one model on one machine of |predicted step-time "
            "ratio / published ratio - 1|, rounded up to a whole percent "
            f"({len(ratio_errors(rows))} pairs)",
            "worst": ratio_uncertainty(rows),
            "worst_source": "largest over the same held-out pairs of |predicted step-time ratio / published ratio - "
            f"1|, rounded up to a whole percent ({len(ratio_errors(rows))} pairs): two plans whose predicted step "
            "times differ by less are not told apart by the model",
        },
    }
