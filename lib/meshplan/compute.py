"""Training compute: FLOP per token and time at an effective FLOP/s.

Convention (Kaplan et al. 2020; Narayanan et al. 2021 Eq. 3 without the attention term): a forward pass
costs 2 FLOP per parameter per token (one multiply-add), the backward twice that, 4 FLOP; full recompute
adds one more forward. ``params`` are the parameters a token's matmuls touch (``ModelSpec.flop_params``:
the text model without the input embedding, activated experts only). The attention-score FLOPs (∝ s²)
are ignored, as in the lab page.

    >>> round(backward_time_s(25_624_600_064, 4096, 400e12), 2)
    1.05
"""

from __future__ import annotations

FORWARD_FLOP_PER_PARAM_TOKEN = 2
BACKWARD_FLOP_PER_PARAM_TOKEN = 4


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
    """FLOP of one training step: 6 × params × tokens, 8 × with full recompute (one extra forward)."""
    extra = forward_flop(params, tokens) if recompute == "full" else 0.0
    return forward_flop(params, tokens) + backward_flop(params, tokens) + extra


def step_time_s(params: float, tokens: float, flop_per_s: float, recompute: str = "none") -> float:
    """Seconds for one training step (forward + backward, + one forward with full recompute) of ``tokens``
    tokens at ``flop_per_s`` effective FLOP/s.

        >>> round(step_time_s(25_624_600_064, 4096, 400e12), 2)
        1.57
    """
    if flop_per_s <= 0:
        raise ValueError(f"effective compute {flop_per_s!r} FLOP/s must be positive")
    return step_flop(params, tokens, recompute) / flop_per_s
