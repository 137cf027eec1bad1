"""Row-wise softmax over the last axis (a reduction and an elementwise pass per row)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "softmax"
# (rows, cols): the first is the tuning point; the rest are unseen shapes.
SHAPES = [(512, 1024), (200, 384), (128, 2048)]


def reference(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x, axis=-1)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    rows, cols = SHAPES[shape_index]
    return (3.0 * jax.random.normal(key, (rows, cols), jnp.float32),)


def flops(x: jax.Array) -> int:
    return 5 * x.size
