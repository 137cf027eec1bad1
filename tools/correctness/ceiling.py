"""The element-wise ceiling: ``|c - o| <= atol + rtol |o| + slack``, exact for integers.

``atol + rtol |o|`` alone is unfair wherever an output element is the small remainder of
large terms that cancel (a matmul at a large-magnitude probe, a fused epilogue after it):
any order of accumulation other than XLA's rounds differently there, by about
``eps * sum |terms|``. So each element may also differ by ``slack``: a few float32 ulps of
the magnitude of the terms summed into it, which the suite measures from the reference
itself (:func:`tools.correctness.testsuite._magnitudes`). It is tiny next to ``|o|``
wherever nothing cancels, so a wrong kernel still fails; integer and bool outputs are
compared exactly.
"""

from __future__ import annotations

import numpy as np

from tools.sandbox.wire import numpy_dtype

# Statistically an honest order of K additions is off by ~1 ulp of sum |terms| per element
# (a random walk of roundings of partial sums); the largest over a whole output is a few
# times that. 16 leaves room for blocked, reversed and split-K orders at once.
ACCUMULATION_ULPS = 16.0
_NEGLIGIBLE = 0.1  # slack below this share of atol + rtol |o| everywhere is not stored


def is_exact(dtype_name: str) -> bool:
    """Integer and bool outputs: no tolerance at all."""
    dtype = numpy_dtype(dtype_name)
    return bool(np.issubdtype(dtype, np.integer) or dtype == np.bool_)


def accumulation_eps(dtype_name: str) -> float:
    """The precision sums are carried in: float32 on a TPU for every narrower float (bf16
    inputs multiply exactly into float32 accumulators), float64 only for float64."""
    dtype = numpy_dtype(dtype_name)
    return float(np.finfo(np.float64 if dtype == np.float64 else np.float32).eps)


def element_slack(dtype_name: str, magnitude: np.ndarray, oracle: np.ndarray,
                  tolerance: dict[str, float]) -> np.ndarray | None:
    """Per element, what an honest accumulation order may add to the ceiling; None where
    that is exact (integers) or negligible everywhere."""
    if is_exact(dtype_name):
        return None
    slack = ACCUMULATION_ULPS * accumulation_eps(dtype_name) * magnitude
    base = tolerance["atol"] + tolerance["rtol"] * np.abs(oracle)
    with np.errstate(invalid="ignore"):
        if not np.any(slack > _NEGLIGIBLE * base):
            return None
    return slack.astype(np.float32)


def raw_slack(dtype_name: str, magnitude: np.ndarray) -> np.ndarray | None:
    """:func:`element_slack` without the test for negligible (for a part of an output whose
    whole needs it); None for integer outputs."""
    if is_exact(dtype_name):
        return None
    return (ACCUMULATION_ULPS * accumulation_eps(dtype_name) * magnitude).astype(np.float32)


def ceiling_limit(dtype_name: str, oracle: np.ndarray, tolerance: dict[str, float],
                  slack: np.ndarray | None) -> np.ndarray:
    """The largest |c - o| allowed per element (zero for integer outputs)."""
    if is_exact(dtype_name):
        return np.zeros(oracle.shape)
    limit = tolerance["atol"] + tolerance["rtol"] * np.abs(oracle)
    if slack is not None and slack.size:
        limit = limit + slack.astype(np.float64)
    return limit
