"""Training compute: FLOP per token and per sequence, with attention, and time at a given FLOP/s.

Matmuls (Kaplan et al. 2020; Narayanan et al. 2021 Eq. 3): a forward pass costs 2 FLOP per parameter per token
(one multiply-add), the backward twice that, 4 FLOP; full recompute adds one more forward of the decoder layers.
``params`` are the parameters a token's matmuls touch (``ModelSpec.flop_params``: the text model without the input
embedding, activated experts only, the output head included, so the logits' 2·s·h·V FLOP per sequence forward are
counted).

Attention (the score and context matmuls, QKᵀ and A·V, which have no parameters): per softmax-attention layer and
sequence, forward, 2·P·a·(d_qk + d_v) FLOP for P query-key pairs, a query heads of width d_qk (keys) and d_v
(values). Conventions for P (``attention_pairs``):

* ``causal=False``: every pair of the s×s score matrix, P = s². This is what Narayanan et al. 2021 Eq. 3 (4·s²·h
  per layer forward when a·d = h), Korthikanti et al. 2022 and PaLM's MFU (Chowdhery et al. 2022, App. B:
  6N + 12·L·h·s per token) count: the "model FLOPs" of MFU, and what a kernel that computes the whole score
  matrix and then masks it executes (Megatron-LM's 2021 fused softmax).
* ``causal=True``: a causal kernel that skips the masked blocks (FlashAttention-2) executes half of them,
  P = s²/2; FlashAttention's own benchmark counts causal FLOPs this way (``flops(..., causal)`` divides by 2 in
  Dao-AILab/flash-attention ``benchmarks/benchmark_flash_attention.py``).
* a sliding window of w tokens: P = s·w with ``causal=False`` (each query against a full window); with
  ``causal=True`` the first w queries see fewer keys, P = s·w − w²/2 (s ≥ w; s²/2 when w ≥ s).

A linear-attention layer (Gated DeltaNet, Yang et al. 2024, recurrent form S_t = S_{t−1}·α_t(I − β_t k_t k_tᵀ)
+ β_t v_t k_tᵀ, o_t = S_t q_t) updates a d_k × d_v state per value head and token instead: S·k, the rank-one update
and S·q, 3 × 2·d_k·d_v FLOP per head per token forward, whatever s is. MLA (DeepSeek) is softmax attention with
d_qk = nope + rope and d_v = v_head_dim.

    >>> from meshplan.spec.models.spec import LayerSpec
    >>> gpt = LayerSpec(num_heads=96, num_kv_heads=96, head_dim=128, v_head_dim=128)      # GPT-3: a·d = h = 12,288
    >>> attention_forward_flop(gpt, 2048, causal=False) == 4 * 2048**2 * 12288          # Narayanan's 4·s²·h
    True
    >>> attention_forward_flop(gpt, 2048) / attention_forward_flop(gpt, 2048, causal=False)
    0.5
    >>> round(backward_time_s(25_624_600_064, 4096, 400e12), 2)
    1.05

Utilisation (``utilisation``): MFU = model FLOP ÷ (time × GPUs × peak), the model FLOP of ``model_flop`` (forward +
backward, no recomputation, the whole score matrix) against the GPU's dense bf16 peak; HFU counts the recomputation
too (Korthikanti et al. 2022 §6). An *effective* rate, like the lab page's 400 TFLOP/s, is an MFU in disguise: at
400 TFLOP/s of model FLOP an H800 (989.5 TFLOP/s dense) runs at 40.4 % MFU.

    >>> round(utilisation(400e12, 1.0, 989.5e12), 3)
    0.404
"""

from __future__ import annotations

from functools import lru_cache

from meshplan.core.units import add_up
from meshplan.core.validation import check_choice, check_count
from meshplan.parallel.activations import RECOMPUTE_MODES
from meshplan.parallel.engine_activations import op_projections, spec_implementation
from meshplan.spec.models.spec import LayerSpec, ModelSpec

FORWARD_FLOP_PER_PARAM_TOKEN = 2
BACKWARD_FLOP_PER_PARAM_TOKEN = 4
BACKWARD_PER_FORWARD = BACKWARD_FLOP_PER_PARAM_TOKEN / FORWARD_FLOP_PER_PARAM_TOKEN  # the backward costs 2 forwards
LINEAR_ATTENTION_STATE_MATMULS = 3  # S·k, the rank-one update, S·q: each 2·d_k·d_v FLOP per head per token


def forward_flop(params: float, tokens: float) -> float:
    """2 × params × tokens."""
    return FORWARD_FLOP_PER_PARAM_TOKEN * params * tokens


def backward_flop(params: float, tokens: float) -> float:
    """4 × params × tokens."""
    return BACKWARD_FLOP_PER_PARAM_TOKEN * params * tokens


def backward_time_s(params: float, tokens: float, flop_per_s: float) -> float:
    """Seconds for the backward pass of ``tokens`` tokens at ``flop_per_s`` effective FLOP/s."""
    if flop_per_s <= 0:
        raise ValueError(f"effective compute {flop_per_s!r} FLOP/s must be positive")
    return backward_flop(params, tokens) / flop_per_s


def step_flop(params: float, tokens: float, recompute: str = "none") -> float:
    """Matmul FLOP of one training step: 6 × params × tokens, 8 × with full recompute (one extra forward; the
    attention term is ``training_flop_per_sequence``'s)."""
    check_choice("recompute", recompute, RECOMPUTE_MODES)
    extra = forward_flop(params, tokens) if recompute == "full" else 0.0
    return forward_flop(params, tokens) + backward_flop(params, tokens) + extra


def step_time_s(params: float, tokens: float, flop_per_s: float, recompute: str = "none") -> float:
    """Seconds for one training step (forward + backward, + one forward with full recompute) of ``tokens``
    tokens at ``flop_per_s`` effective FLOP/s (matmuls only).

        >>> round(step_time_s(25_624_600_064, 4096, 400e12), 2)
        1.57
    """
    if flop_per_s <= 0:
        raise ValueError(f"effective compute {flop_per_s!r} FLOP/s must be positive")
    return step_flop(params, tokens, recompute) / flop_per_s


# ---------------------------------------------------------------- attention
def attention_pairs(seq: int, window: int | None = None, causal: bool = True) -> float:
    """Query-key pairs of one sequence of ``seq`` tokens (see the module docstring for the conventions).

    >>> attention_pairs(8, causal=False), attention_pairs(8), attention_pairs(8, 4), attention_pairs(8, 4, False)
    (64, 32.0, 24.0, 32)
    """
    check_count("seq", seq)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window={window!r} must be a positive integer or None")
    w = seq if window is None else min(window, seq)
    if not causal:
        return seq * w
    return seq * w - w * w / 2


def attention_forward_flop(layer: LayerSpec, seq: int, causal: bool = True) -> float:
    """Forward FLOP of one layer's token mixing beyond its weight matmuls, for one sequence of ``seq`` tokens:
    2·P·a·(d_qk + d_v) for softmax attention and MLA (P from ``attention_pairs``), s·n_v·3·2·d_k·d_v for linear
    attention."""
    if layer.mixer == "linear_attention":
        per_token = LINEAR_ATTENTION_STATE_MATMULS * 2 * layer.linear_key_head_dim * layer.linear_value_head_dim
        return float(seq * layer.linear_num_value_heads * per_token)
    pairs = attention_pairs(seq, layer.sliding_window, causal)
    return 2 * pairs * layer.num_heads * (layer.head_dim + layer.v_head_dim)


def _layers(model: ModelSpec) -> tuple[LayerSpec, ...]:
    if not model.layers:
        raise ValueError(f"model {model.name!r} has no per-layer description (ModelSpec.layers is empty)")
    return model.layers


def layer_forward_flop(layer: LayerSpec, seq: int, causal: bool = True) -> float:
    """Forward FLOP of one decoder layer for one sequence: 2 × activated parameters × s + attention."""
    return forward_flop(layer.activated_params, seq) + attention_forward_flop(layer, seq, causal)


@lru_cache(maxsize=256)  # keyed on the model itself (a ModelSpec hashes its layers once): a search asks per stage
def head_params(model: ModelSpec) -> float:
    """Parameters a token's matmuls touch outside the decoder layers: the output head (V·h, even when tied) and
    the final norm (``flop_params`` minus the layers' activated parameters)."""
    return model.flop_params - add_up(s.activated_params for s in _layers(model))


def forward_flop_per_sequence(model: ModelSpec, seq: int, causal: bool = True) -> float:
    """Forward FLOP of the whole model for one sequence: 2 × flop_params × s + every layer's attention."""
    attention = add_up(attention_forward_flop(layer, seq, causal) for layer in _layers(model))
    return forward_flop(model.flop_params, seq) + attention


def recompute_flop_per_sequence(model: ModelSpec, seq: int, recompute: str, causal: bool = True) -> float:
    """FLOP recomputation adds per sequence: ``"full"`` one more forward of every decoder layer (the output head is
    not recomputed: Narayanan's Eq. 3 counts its logits 3 times, the layers 4), ``"selective"`` one more forward of
    the attention core (Korthikanti et al. 2022 §5), ``"none"`` nothing."""
    if recompute == "full":
        return forward_flop_per_sequence(model, seq, causal) - forward_flop(head_params(model), seq)
    if recompute == "selective":
        return add_up(
            attention_forward_flop(layer, seq, causal) for layer in _layers(model) if layer.mixer != "linear_attention"
        )
    if recompute == "op":  # torchtitan's op-level selective checkpointing: the projections it does not keep
        return 2 * seq * add_up(op_recomputed_params(layer, model) for layer in _layers(model))
    check_choice("recompute", recompute, RECOMPUTE_MODES)  # "none" is what is left
    return 0.0


def op_recomputed_params(layer, model: ModelSpec) -> float:
    """Weights of the projections torchtitan's op-level selective checkpointing recomputes in one layer's backward
    (``engine_activations.op_projections``: every second ``mm``): their forward FLOP is 2 × these × tokens."""
    impl = spec_implementation(model)
    return float(add_up(n_in * n_out for _, _, n_in, n_out, _, kept in op_projections(layer, model.hidden_size, impl)
                     if not kept))  # fmt: skip


@lru_cache(maxsize=1024)  # a search's JSON asks it four times per plan; a ModelSpec hashes its layers once
def training_flop_per_sequence(model: ModelSpec, seq: int, recompute: str = "none", causal: bool = True) -> float:
    """FLOP of forward + backward (2 forwards) + recomputation for one sequence.

    With ``recompute="none"`` and ``causal=False`` these are the model FLOPs of MFU (PaLM's 6N + 12·L·h·s per token
    for a GPT); with the plan's recomputation, the hardware FLOPs of HFU (Korthikanti et al. 2022 §6). For a GPT
    with full recompute, ``causal=False``, this is Narayanan et al.'s Eq. 3, 96·s·l·h²(1 + s/(6h) + V/(16·l·h)) per
    sequence, up to the biases and norms it leaves out.
    """
    forward = forward_flop_per_sequence(model, seq, causal)
    return (1 + BACKWARD_PER_FORWARD) * forward + recompute_flop_per_sequence(model, seq, recompute, causal)


# ---------------------------------------------------------------- utilisation
def model_flop(model: ModelSpec, seq: int, sequences: float = 1) -> float:
    """Model FLOP of forward + backward for ``sequences`` sequences of ``seq`` tokens: the numerator of MFU.

    ``training_flop_per_sequence(model, seq, "none", causal=False) × sequences``: matmuls at 6 FLOP per activated
    parameter per token (logits included) plus attention over the whole s×s score matrix, no recomputation (PaLM's
    convention, Chowdhery et al. 2022 App. B, which Llama 3 and Korthikanti et al. 2022 use). Units: FLOP.

        >>> from meshplan import load_model
        >>> m = load_model("qwen3.8-27b")
        >>> model_flop(m, 4096) > 6 * m.flop_params * 4096   # attention adds to the matmuls
        True
    """
    if isinstance(sequences, bool) or not sequences > 0:
        raise ValueError(f"sequences={sequences!r} must be positive")
    return training_flop_per_sequence(model, seq, "none", causal=False) * sequences


def utilisation(flop: float, seconds: float, peak_flop_per_s: float, gpus: int = 1) -> float:
    """``flop`` ÷ (``seconds`` × ``gpus`` × ``peak_flop_per_s``): MFU when ``flop`` is model FLOP (``model_flop``),
    HFU when it includes the recomputation. A fraction (0.404 is 40.4 %).

        >>> round(utilisation(400e12 * 3600, 3600.0, 989.5e12), 4)   # an hour of model FLOP at 400 TFLOP/s
        0.4042
    """
    if not peak_flop_per_s > 0 or not seconds > 0:
        raise ValueError(f"peak_flop_per_s={peak_flop_per_s!r} and seconds={seconds!r} must be positive")
    check_count("gpus", gpus)
    return flop / (seconds * gpus * peak_flop_per_s)


def training_time_s(model: ModelSpec, seq: int, sequences: float, flop_per_s: float) -> float:
    """Seconds one GPU needs for the forward and backward of ``sequences`` sequences of ``seq`` tokens when it
    sustains ``flop_per_s`` of *model* FLOP: ``model_flop`` ÷ rate. The rate is MFU × peak; the lab page's
    effective 400 TFLOP/s is one such rate.

        >>> from meshplan import load_model
        >>> round(training_time_s(load_model("llama-3.1-405b"), 8192, 2048, 400e12) / 3600, 1)   # hours
        30.6
    """
    if not flop_per_s > 0:
        raise ValueError(f"flop_per_s={flop_per_s!r} must be positive")
    return model_flop(model, seq, sequences) / flop_per_s


def narayanan_eq3_flop(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 Eq. (3), FLOP per iteration of a GPT with full recompute: 96·B·s·l·h²(1 + s/(6h) +
    V/(16·l·h)), for a batch of B sequences of s tokens, l layers of width h, a vocabulary of V. The published runs'
    TFLOP/s are this over the iteration time; ``training_flop_per_sequence`` gives the same up to the biases and
    norms it leaves out.

        >>> f"{narayanan_eq3_flop(1536, 2048, 96, 12288, 51200):.3e}"
        '4.511e+18'
    """
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
