"""GELU (tanh form) applied elementwise: the memory-bound elementwise task."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "gelu"
# (rows, cols): the first is the tuning point (1M elements); the rest are unseen shapes,
# one of them with a row count that is not a power of two.
SHAPES = [(1024, 1024), (1000, 384), (256, 2048)]


def reference(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    rows, cols = SHAPES[shape_index]
    return (2.0 * jax.random.normal(key, (rows, cols), jnp.float32),)


def flops(x: jax.Array) -> int:
    return 8 * x.size
