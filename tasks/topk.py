"""Top-k per row: the k largest values and their column indices, largest first (the
sampling step and the mixture-of-experts router); the indices are compared exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "topk"
K = 8
# top_k orders its input, and NaN has no place in an order: where XLA's top_k ranks a NaN
# (above +inf) is a convention, not arithmetic a kernel must reproduce. Infinities are
# ordered, so the suite still feeds +inf and -inf.
NO_NONFINITE_INPUTS = {"nan": "top_k orders its input and NaN has no place in an order "
                              "(XLA ranking it above +inf is a convention)"}
# (rows, cols): the first is the tuning point; the rest are unseen shapes, one with a row
# count that is not a multiple of 8 and one with a width that is not a multiple of 128.
SHAPES = [(512, 1024), (200, 512), (64, 1000)]


def reference(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.lax.top_k(x, K)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    rows, cols = SHAPES[shape_index]
    return (jax.random.normal(key, (rows, cols), jnp.float32),)


def flops(x: jax.Array) -> int:
    return K * 2 * x.size
