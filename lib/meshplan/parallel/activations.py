"""Activation memory per GPU: Korthikanti et al. 2022 (arXiv:2205.05198), Table 2 and Eq. (5).

Per transformer layer, with s sequence length, b micro-batch size, h hidden size, a attention heads,
t tensor-parallel size, 16-bit activations (2 B) and 1-byte dropout masks:

=================================  ============================
configuration                      bytes per layer
=================================  ============================
no parallelism                     sbh(34 + 5as/h)
tensor parallel                    sbh(10 + 24/t + 5as/(ht))
tensor + sequence parallel         sbh(34/t + 5as/(ht))
tensor parallel + selective        sbh(10 + 24/t)
tensor + sequence + selective      sbh(34/t)
full recompute                     sbh·2   (sbh·2/t with sequence parallel)
=================================  ============================

The first pipeline stage of a 1F1B schedule holds min(m, p) micro-batches of L/p layers: L layers'
worth once m ≥ p (Eq. 5). The interleaved schedule multiplies this by 1 + (p−1)/(p·v). Context
parallelism splits the sequence, dividing everything by c.

Assumptions: the formula was derived for a GPT layer with a 4h GeLU MLP and softmax attention; the lab
page applies it to every layer of the anchor (including its linear-attention layers and SwiGLU MLPs),
and so does this module. The extra terms of Korthikanti §4.3 (embedding dropout, output layer, fp32
logits: < 0.01 % for their 22B model) are ignored. With full recompute and sequence parallelism the
stored layer input is the sequence shard, so it is divided by t (the lab page's convention; the paper's
Table 2 lists 2sbh without SP). Units: bytes.

    >>> round(activation_bytes(4096, 1, 5120, 24, 64, recompute="selective") / 1e9, 1)
    45.6
"""

from __future__ import annotations

from meshplan.core.validation import check_choice, check_count
from meshplan.spec.stages import interleave_factor

RECOMPUTE_MODES = ("none", "selective", "full")


def activation_bytes_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, recompute: str = "none", sp: bool | None = None
) -> float:
    """Bytes of activations one layer stores for one micro-batch on one GPU (Korthikanti Table 2).

    ``sp`` (sequence parallel) defaults to ``t > 1``.
    """
    check_choice("recompute", recompute, RECOMPUTE_MODES)
    for name, x in (("s", s), ("b", b), ("h", h), ("a", a), ("t", t)):
        check_count(name, x)
    if sp is None:
        sp = t > 1
    sbh = s * b * h
    if recompute == "full":
        return sbh * 2 / (t if sp else 1)
    core = 34 / t if (sp or t == 1) else 10 + 24 / t
    scores = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
    return sbh * (core + scores)


def pipeline_inflight_layers(num_layers: int, pp: int = 1, micro_batches: int = 1, virtual_stages: int = 1) -> float:
    """Layers' worth of activations the first pipeline stage holds under 1F1B (Korthikanti Eq. 5).

    L/p layers × min(m, p) micro-batches, × (1 + (p−1)/(p·v)) for the interleaved schedule (v > 1).

        >>> pipeline_inflight_layers(64, pp=8, micro_batches=32, virtual_stages=4)
        78.0
    """
    for name, x in (
        ("num_layers", num_layers),
        ("pp", pp),
        ("micro_batches", micro_batches),
        ("virtual_stages", virtual_stages),
    ):
        check_count(name, x)
    return num_layers / pp * min(micro_batches, pp) * interleave_factor(pp, virtual_stages)


def activation_bytes(
    s: int,
    b: int,
    h: int,
    a: int,
    num_layers: int,
    t: int = 1,
    recompute: str = "none",
    sp: bool | None = None,
    pp: int = 1,
    micro_batches: int = 1,
    virtual_stages: int = 1,
    cp: int = 1,
) -> float:
    """Activation bytes on the most-loaded GPU (the first pipeline stage): per-layer bytes × in-flight
    layers ÷ c."""
    check_count("cp", cp)
    per_layer = activation_bytes_per_layer(s, b, h, a, t, recompute, sp)
    return per_layer * pipeline_inflight_layers(num_layers, pp, micro_batches, virtual_stages) / cp
