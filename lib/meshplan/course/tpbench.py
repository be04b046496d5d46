"""The tensor-parallel check bench: a Megatron MLP computed whole and split over t ranks, in numpy.

Y = GeLU(X·A)·B with X (tokens × h), A (h × f), B (f × h). Megatron (Shoeybi et al. 2019, §3) splits A
by **columns** and B by **rows**: rank i computes Z_i = GeLU(X·A_i) (no communication: GeLU acts element
by element, so each rank's column block is complete) and then Y_i = Z_i·B_i, a *partial* product; the
all-reduce sums the t partial products, Y = Y_1 + … + Y_t.

What the bench shows:

* **column half**: X·A_i is bit-for-bit the i-th column block of X·A (each output element is the same
  dot product, summed in the same order), so the difference is exactly 0.
* **row half**: the unsplit product sums f terms in one run; the split sums f/t terms per rank and then
  adds the t partial sums. Same terms, different grouping, so the result differs at rounding level
  (with the seeded inputs: below 1e-6 of the largest |Y| in float32, a few 1e-3 in bfloat16).
* **reordering the all-reduce**: adding the partial products in another order, ((Y_t + Y_{t−1}) + …) + Y_1
  instead of ((Y_1 + Y_2) + …) + Y_t. For t = 2 this is Y_2 + Y_1 against Y_1 + Y_2, and floating-point
  addition is **commutative**: a + b and b + a are the same correctly rounded value, so the difference is
  exactly 0. For t ≥ 3 the grouping changes: (a + b) + c against (c + b) + a. Floating-point addition
  is **not associative** (each + rounds its own result), so the sums can differ by a tiny nonzero amount.
  (With the bench's seeded inputs they do, for every t ≥ 3 it offers.)

Arithmetic: the matrix products use one fixed summation order (k = 0, 1, …, sequentially), so the
result never depends on how a BLAS library blocks a given shape. ``dtype="float32"`` computes everything
in float32. ``dtype="bfloat16"`` emulates a GPU's mixed precision with ``ml_dtypes.bfloat16``: inputs
rounded to bfloat16, products accumulated in float32, every stored tensor (X·A, GeLU, each partial
product, each partial sum of the all-reduce) rounded to bfloat16. GeLU is the tanh approximation.
Inputs are seeded (``numpy.random.default_rng(seed)``), X ~ N(0, 1), A and B ~ N(0, 1/√fan-in).

    >>> r = bench(t=2)
    >>> r.column_max_abs_diff, r.reorder_max_abs_diff
    (0.0, 0.0)
    >>> bench(t=4).reorder_max_abs_diff > 0
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DTYPES = ("float32", "bfloat16")
TOKENS, HIDDEN, FFN = 16, 96, 384  # small on purpose; f = 384 = 2^7 × 3 splits over t = 1, 2, 3, 4, 6, 8


@dataclass(frozen=True)
class BenchResult:
    """Max absolute differences of the split computation from the unsplit one (same dtype).

    column_max_abs_diff: GeLU(X·A_i) against the columns of GeLU(X·A).
    row_max_abs_diff: the summed partial products against the unsplit Y.
    reorder_max_abs_diff: the partial products summed last-to-first against first-to-last.
    y_max_abs: the largest |Y| (the scale the differences compare with).
    """

    t: int
    dtype: str
    column_max_abs_diff: float
    row_max_abs_diff: float
    reorder_max_abs_diff: float
    y_max_abs: float


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    """Store ``x`` in ``dtype`` (float32 values; bfloat16 rounds to nearest even, then widens back)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16).astype(np.float32)
    return x.astype(np.float32)


def _matmul(x: np.ndarray, w: np.ndarray, dtype: str) -> np.ndarray:
    """x @ w accumulated in float32 in the fixed order k = 0, 1, …, then stored in ``dtype``."""
    acc = np.zeros((x.shape[0], w.shape[1]), dtype=np.float32)
    for k in range(x.shape[1]):
        acc += x[:, k : k + 1] * w[k : k + 1, :]
    return _round(acc, dtype)


def _gelu(x: np.ndarray, dtype: str) -> np.ndarray:
    """GeLU, tanh approximation, computed in float32 and stored in ``dtype``."""
    c = np.float32(np.sqrt(2.0 / np.pi))
    y = np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x**3)))
    return _round(y.astype(np.float32), dtype)


def _sum(parts, dtype: str) -> np.ndarray:
    """Left-to-right sum, each partial sum stored in ``dtype`` (what a ring all-reduce's adds do)."""
    total = parts[0]
    for p in parts[1:]:
        total = _round(total + p, dtype)
    return total


def inputs(seed: int = 0, tokens: int = TOKENS, h: int = HIDDEN, f: int = FFN):
    """Seeded float32 inputs X (tokens × h), A (h × f), B (f × h)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, h)).astype(np.float32)
    a = (rng.standard_normal((h, f)) / np.sqrt(h)).astype(np.float32)
    b = (rng.standard_normal((f, h)) / np.sqrt(f)).astype(np.float32)
    return x, a, b


def bench(
    t: int, dtype: str = "float32", seed: int = 0, tokens: int = TOKENS, h: int = HIDDEN, f: int = FFN
) -> BenchResult:
    """Run Y = GeLU(X·A)·B unsplit and split over ``t`` ranks (A by columns, B by rows) and compare.

    Raises ValueError if t does not divide f or the dtype is unknown.
    """
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError(f"t={t!r} must be a positive integer")
    if f % t:
        raise ValueError(f"t={t} does not divide the MLP width f={f}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} must be one of {', '.join(DTYPES)}")
    x, a, b = (_round(m, dtype) for m in inputs(seed, tokens, h, f))
    z = _gelu(_matmul(x, a, dtype), dtype)
    y = _matmul(z, b, dtype)
    w = f // t
    cols = [slice(i * w, (i + 1) * w) for i in range(t)]
    z_parts = [_gelu(_matmul(x, a[:, c], dtype), dtype) for c in cols]
    col_diff = max(float(np.max(np.abs(zp - z[:, c]))) for zp, c in zip(z_parts, cols))
    y_parts = [_matmul(zp, b[c, :], dtype) for zp, c in zip(z_parts, cols)]
    forward = _sum(y_parts, dtype)
    backward = _sum(y_parts[::-1], dtype)
    return BenchResult(
        t,
        dtype,
        col_diff,
        float(np.max(np.abs(forward - y))),
        float(np.max(np.abs(backward - forward))),
        float(np.max(np.abs(y))),
    )
