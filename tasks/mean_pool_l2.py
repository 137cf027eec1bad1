"""Sentence embedding: mean over the token axis, then L2-normalised (per batch row).

Rows (the leading batch axis) are independent, but the reduction runs over the middle axis
and the output has a different rank from the input.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "mean_pool_l2"
EPS = 1e-6
# (batch, tokens, hidden): the first is the tuning point; the rest are unseen shapes,
# one of them with a batch that is not a multiple of 8.
SHAPES = [(512, 16, 256), (100, 16, 128), (256, 8, 384)]


def reference(x: jax.Array) -> jax.Array:
    pooled = jnp.mean(x, axis=1)
    norm = jnp.sqrt(jnp.sum(jnp.square(pooled), axis=-1, keepdims=True) + EPS)
    return pooled / norm


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    batch, tokens, hidden = SHAPES[shape_index]
    return (jax.random.normal(key, (batch, tokens, hidden), jnp.float32) + 0.2,)


def flops(x: jax.Array) -> int:
    return 2 * x.size
