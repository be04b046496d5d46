"""The notes of a plan's report, in the reader's words: what the numbers assume or leave out for this plan."""

from __future__ import annotations

from collections.abc import Mapping

from meshplan.core.units import fmt_int, fmt_mb
from meshplan.plan.construct import Plan
from meshplan.spec.mesh import partial_node

__all__ = ["report_notes"]


def report_notes(plan: Plan, comm: Mapping[str, float]) -> tuple[str, ...]:
    """The notes ``evaluate`` attaches to ``plan``'s report, given its bytes per dimension ``comm``: KV heads
    replicated over TP, the TP collectives full recompute re-runs, the routed experts' own gradient sync, the terms
    a meta-device count estimates, a multi-token-prediction module the even stage balance leaves out, a sequence
    longer than the model was trained for.

        >>> report_notes(Plan.create("qwen3.8-27b", gpus=8, tp=4, recompute="full"), {"edp": 0.0})[0]
        "full recompute re-runs the forward's 2 TP collectives per layer; not counted (lab convention)"
    """
    m, d = plan.model, plan.dims
    t, c, s = d.tp, d.cp, plan.seq
    notes: list[str] = []
    if t > m.num_key_value_heads and plan.accounting.kv_gather:
        notes.append(
            f"tp={t} > {m.num_key_value_heads} KV heads: Megatron-Core splits the qkv weights evenly and all-gathers "
            "the qkv output over TP in every attention layer (its gradient reduce-scattered in backward), priced in "
            f"the bytes and the step time; each GPU keeps one KV head's K and V (each head on "
            f"{t // m.num_key_value_heads} GPUs)"
        )
    elif t > m.num_key_value_heads:
        notes.append(
            f"tp={t} > {m.num_key_value_heads} KV heads: each KV head is replicated on "
            f"{t // m.num_key_value_heads} GPUs (the extra k/v weights are not counted)"
        )
    if plan.recompute == "full" and t > 1:
        if plan.accounting.name == "lab":
            notes.append(
                "full recompute re-runs the forward's 2 TP collectives per layer; not counted (lab convention)"
            )
        else:
            notes.append(
                "full recompute re-runs the forward's 2 TP collectives per layer: the step time charges them, "
                "these bytes do not"
            )
    if comm["edp"]:
        notes.append(
            f"routed-expert gradients sync over {d.expert_dp} expert-data-parallel ranks (edp), apart from "
            f"the dense gradients' {d.dp * c} data-parallel ranks"
        )
    if getattr(m, "estimated", ()):
        notes.append(
            f"{m.name} ({m.family}) is counted exactly by transformers on the meta device; estimated from "
            f"its config: {', '.join(m.estimated)}"
        )
    mtp = m.params.extra.get("mtp", 0)  # a module outside the published count (DeepSeek-V3's), not in params.total
    if mtp and plan.stage_balance == "even":
        notes.append(
            f"the multi-token-prediction module's {mtp / 1e9:.1f} B parameters are not counted: with stage balance "
            f"'even' (the lab page's convention) the model is its published {m.params.total / 1e9:.1f} B; 'max' puts "
            "the module on the last stage, as the engines train it"
        )
    if m.tie_word_embeddings and d.pp > 1 and plan.stage_balance == "max":
        copy = m.vocab_size * m.hidden_size / t
        grad = plan.accounting.grad_wire_bytes
        notes.append(
            f"the head is tied to the embedding: the last stage holds a second copy ({fmt_int(round(copy))} parameters "
            f"a GPU, counted in its memory), whose gradient is all-reduced with the first stage's once a step "
            f"({fmt_mb(copy * grad)}, not in the step time)"
        )
    rest = partial_node(d.world_size, plan.hardware.gpus_per_node)
    if rest:
        g = plan.hardware.gpus_per_node
        notes.append(
            f"the last of the {-(-d.world_size // g)} nodes (NVLink domains of {g} GPUs) holds only {rest}: the ranks "
            "lie in order, and a group that reaches into it crosses nodes, so its link is InfiniBand where it does"
        )
    if m.max_position_embeddings and s > m.max_position_embeddings:
        notes.append(f"seq={s:,} is longer than the {m.max_position_embeddings:,} positions {m.name} was trained for")
    return tuple(notes)
