"""Pipeline stages: which layers and which other parameters each pipeline rank holds, and how many
micro-batches' activations it keeps in flight.

* Equal stages: L/p layers each (p × v must divide L, the lab page's convention).
* Uneven stages: real plans do not always divide. Llama 3 405B has 126 layers on PP 16 ("we reduce one
  Transformer layer each from the first and the last stages", Llama 3 §3.3.2) and DeepSeek-V3 61 layers on
  PP 16. ``spread_layers`` builds that ends-lighter split.
* Parameters: with equal stages and ``balance="even"`` (the lab page's convention) every stage holds exactly
  1/p of the model. Otherwise each stage holds its own layers, and the parameters outside the decoder layers
  (embedding, vision tower, output head, final norm, MTP module) are spread evenly (``"even"``) or sit
  where the engines put them: the embedding and vision tower on the first stage, the head, final norm and MTP
  module on the last (a MoE model's MTP module holds one MoE layer, whose routed experts count as experts).
  A head tied to the embedding is, on a pipeline, a second copy of the word embedding (V·h) on the last stage,
  kept equal by an all-reduce of its gradient between the two stages: Megatron-Core allocates the output layer's
  own weight wherever the stage does not also hold the embedding (megatron/core/models/gpt/gpt_model.py#L269-L282,
  ``skip_weight_param_allocation``; language_module.py#L272-L300, "Create a second copy of word_embeddings on the
  last stage", at core_v0.19.0), and DeepSpeed's ``PipelineModule`` builds a ``TiedLayerSpec`` on every stage that
  uses it (deepspeed/runtime/pipe/module.py#L257-L269, ``allreduce_tied_weight_gradients`` #L457-L462, v0.19.5).
  The model's parameter count is unchanged; the stages' sum exceeds it by the copy.
* In flight under 1F1B: stage k holds min(m, p − k) micro-batches (Narayanan et al. 2021 §2.2.1); the
  interleaved schedule multiplies the first stage's by 1 + (p−1)/(p·v) (Korthikanti et al. 2022 §4.2.3),
  applied here to every stage as an upper bound.

    >>> spread_layers(126, 16)
    (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
    >>> [inflight_micro_batches(4, k, 8) for k in range(4)]
    [4, 3, 2, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from meshplan.core.units import add_up
from meshplan.core.validation import check_count
from meshplan.spec.model import ModelSpec


def spread_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline rank when pp does not divide them: every rank gets ⌈L/p⌉ layers, and the
    ⌈L/p⌉·p − L layers too many are taken one each from the ends inwards (first, last, second,
    second-to-last, ...), the ranks that also hold the embedding and the output head.

        >>> spread_layers(61, 16)[:3], spread_layers(61, 16)[-2:], sum(spread_layers(61, 16))
        ((3, 3, 4), (4, 3), 61)
    """
    check_count("num_layers", num_layers)
    check_count("pp", pp)
    if pp > num_layers:
        raise ValueError(f"pp={pp} is more than {num_layers} layers (every stage needs at least one)")
    per = -(-num_layers // pp)
    out = [per] * pp
    ends = [i for k in range((pp + 1) // 2) for i in dict.fromkeys((k, pp - 1 - k))]
    for i in ends[: per * pp - num_layers]:
        out[i] -= 1
    return tuple(out)


def inflight_micro_batches(pp: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations stage ``stage`` (0-based) holds at its peak under 1F1B: min(m, p − k)."""
    return min(micro_batches, pp - stage)


def interleaved_inflight_chunks(pp: int, stage: int, micro_batches: int, virtual_stages: int) -> int:
    """Model chunks (micro-batch × virtual stage pairs) whose activations pipeline rank ``stage`` (0-based) holds at
    its peak under the interleaved 1F1B schedule as the engines run it: its warm-up forwards plus the steady state's
    one, min(2·(p − k − 1) + (v − 1)·p + 1, m·v). Megatron-Core's ``get_pp_rank_microbatches``
    (megatron/core/pipeline_parallel/schedules.py#L936-L950 at core_v0.19.0, ``microbatch_group_size_per_vp_stage``
    = p by default) and PyTorch's ``ScheduleInterleaved1F1B`` (torchtitan's Interleaved1F1B: warm-up
    (v − 1)·p + 2·(p − 1 − k)) give the same count. Each chunk holds 1/v of the rank's layers, so the rank holds
    ``chunks / v`` micro-batches' worth of its layers: p·(1 + (p−1)/(p·v)) on the first rank (Korthikanti's factor,
    ``interleave_factor``), but p − (p−1)/v on the last, which the lab page's convention (every rank as the first)
    counts as 1 + (p−1)/(p·v).

        >>> [interleaved_inflight_chunks(8, k, 64, 5) for k in (0, 7)]   # p = 8, v = 5: 47 and 33 chunks of 8 layers
        [47, 33]
    """
    return min(2 * (pp - stage - 1) + (virtual_stages - 1) * pp + 1, micro_batches * virtual_stages)


def interleave_factor(pp: int, virtual_stages: int) -> float:
    """1 + (p−1)/(p·v) for the interleaved schedule (v > 1), else 1 (Korthikanti et al. 2022 §4.2.3)."""
    return 1 + (pp - 1) / (pp * virtual_stages) if virtual_stages > 1 else 1.0


def stage_inflight_layers(layers_per_stage: Sequence[int], micro_batches: int, virtual_stages: int = 1) -> float:
    """Layers' worth of activations on the most-loaded pipeline rank under 1F1B: max over ranks k of
    layers_k × min(m, p−k), × the interleave factor. With equal stages this is Korthikanti's Eq. 5.

        >>> stage_inflight_layers(spread_layers(126, 16), 16)   # rank 1: 8 layers × 15 micro-batches
        120.0
    """
    p = len(layers_per_stage)
    worst = max(n * inflight_micro_batches(p, k, micro_batches) for k, n in enumerate(layers_per_stage))
    return float(worst * interleave_factor(p, virtual_stages))


@dataclass(frozen=True)
class Stage:
    """What one pipeline rank holds (parameters before any TP/EP split).

    Attributes:
        index: 0-based pipeline rank.
        layers: range of the decoder layers it holds.
        dense_params: parameters outside the routed experts (its layers' plus its share of the rest).
        expert_params: routed-expert parameters (its MoE layers', plus the MTP module's on the last stage).
        full_attention_layers: layers with softmax attention (``attention`` or ``mla``), sliding-window ones included:
            context parallelism exchanges these layers' K and V (the ring and all-gather implementations move the
            whole sequence's K and V whatever the window, as ``ModelSpec.num_full_attention_layers`` counts them);
            linear-attention layers keep a fixed-size state instead.
        moe_layers: layers with routed experts.
        linear_attention_layers: Gated DeltaNet layers (``linear_attention``), which context parallelism
            re-shards with all-to-alls in Megatron-Core.
    """

    index: int
    layers: range
    dense_params: float
    expert_params: float
    full_attention_layers: int
    moe_layers: int
    linear_attention_layers: int = 0

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def _full_attention(model: ModelSpec, i: int) -> bool:
    if model.layers:
        spec = model.layers[i]
        return spec.mixer in ("attention", "mla")
    return False


@dataclass(frozen=True)
class _LayerTables:
    """Running totals over a model's decoder layers, so that a stage's sums cost O(1): entry i of each prefix table
    sums layers 0 … i−1. ``full`` is None when the model has no per-layer specs (then full-attention layers are
    counted in proportion)."""

    dense: tuple[int, ...]  # parameters outside the routed experts
    experts: tuple[int, ...]  # routed-expert parameters
    moe: tuple[int, ...]  # layers with routed experts
    full: tuple[int, ...] | None  # layers whose attention spans the whole sequence
    linear: tuple[int, ...]  # linear-attention (Gated DeltaNet) layers


def _prefix(values) -> tuple[int, ...]:
    out, total = [0], 0
    for x in values:
        total += x
        out.append(total)
    return tuple(out)


# Built once per model: a search evaluates thousands of plans of one model (ModelSpec hashes itself once).
@lru_cache(maxsize=64)
def _layer_tables(model: ModelSpec) -> _LayerTables:
    L = model.num_layers
    lexp = model.layer_expert_params or (0,) * L
    return _LayerTables(
        dense=_prefix(model.layer_params[i] - lexp[i] for i in range(L)),
        experts=_prefix(lexp),
        moe=_prefix(1 if x else 0 for x in lexp),
        full=_prefix(int(_full_attention(model, i)) for i in range(L)) if model.layers else None,
        linear=_prefix(int(bool(model.layers) and model.layers[i].mixer == "linear_attention") for i in range(L)),
    )


@lru_cache(maxsize=64)
def layer_kinds(model: ModelSpec) -> tuple[int, ...]:
    """Each decoder layer's kind: the position of its ``LayerSpec`` among the model's distinct ones (0 for every
    layer of a model without per-layer specs). Two stages whose layers have the same kinds in the same order hold
    the same layers in all but their indices: ``layer_kinds(m)[st.layers.start:st.layers.stop]`` keys what is
    priced once per stage shape (a search's plans of 61 stages have three shapes)."""
    if not model.layers:
        return (0,) * model.num_layers
    ids: dict = {}
    return tuple(ids.setdefault(L, len(ids)) for L in model.layers)


@lru_cache(maxsize=4096)
def stage_groups(
    model: ModelSpec, pp: int, layers_per_stage: tuple[int, ...] | None = None, balance: str = "even"
) -> tuple[tuple[int, ...], ...]:
    """The stages of ``stages(model, pp, layers_per_stage, balance)`` grouped by what a stage's memory and time read
    of it (its ends and its layers' kinds, ``layer_kinds``, hence its parameters): each group's stage indices in
    order, the groups in the order of their first stage. Equal stages of a 61-stage plan are three groups."""
    kinds = layer_kinds(model)
    groups: dict[tuple, list[int]] = {}
    for st in stages(model, pp, layers_per_stage, balance):
        key = (st.index == 0, st.index == pp - 1, kinds[st.layers.start : st.layers.stop])
        groups.setdefault(key, []).append(st.index)
    return tuple(tuple(g) for g in groups.values())


def stages(
    model: ModelSpec, pp: int, layers_per_stage: Sequence[int] | None = None, balance: str = "even"
) -> tuple[Stage, ...]:
    """Every pipeline stage of ``model`` split over ``pp`` ranks (equal stages unless ``layers_per_stage``)."""
    if balance not in ("even", "max"):
        raise ValueError(f"stage_balance={balance!r} must be 'even' or 'max'")
    return _stages(model, pp, None if layers_per_stage is None else tuple(layers_per_stage), balance)


# a search builds thousands of plans of one model with a few dozen stage layouts
@lru_cache(maxsize=4096)
def _stages(model: ModelSpec, pp: int, layers_per_stage: tuple[int, ...] | None, balance: str) -> tuple[Stage, ...]:
    L = model.num_layers
    lps = tuple(layers_per_stage) if layers_per_stage is not None else (L // pp,) * pp
    tab = _layer_tables(model)
    comps, extra = model.params.components, model.params.extra
    outside = model.params.total - add_up(model.layer_params)
    final_norm = add_up(n * per for name, n, per in model.params.groups if name == "final_norm")
    first = comps["embedding"] + comps["vision"]
    mtp = comps["mtp"] + extra.get("mtp", 0)
    mtp_experts = max(model.layer_expert_params or (0,)) if (mtp and model.is_moe) else 0
    # the engines' second copy of a tied embedding on the last stage (the module docstring)
    tied_copy = model.vocab_size * model.hidden_size if (model.tie_word_embeddings and pp > 1) else 0
    last = comps["head"] + final_norm + mtp - mtp_experts + tied_copy
    # the lab page's convention: with equal stages and "even", every stage holds exactly 1/p of everything
    uniform = layers_per_stage is None and balance == "even"
    out, start = [], 0
    for k, n in enumerate(lps):
        end = start + n
        if uniform:
            dense, experts = (model.params.total - model.routed_expert_params) / pp, model.routed_expert_params / pp
        else:
            dense = float(tab.dense[end] - tab.dense[start])
            experts = float(tab.experts[end] - tab.experts[start])
            if balance == "even":
                dense += outside / pp
            else:
                dense += (first if k == 0 else 0) + (last if k == pp - 1 else 0)
                experts += mtp_experts if k == pp - 1 else 0
        if tab.full is not None:
            full = tab.full[end] - tab.full[start]
        else:
            full = model.num_full_attention_layers * n // L
        out.append(
            Stage(
                k,
                range(start, end),
                dense,
                experts,
                full,
                tab.moe[end] - tab.moe[start],
                tab.linear[end] - tab.linear[start],
            )
        )
        start = end
    return tuple(out)
