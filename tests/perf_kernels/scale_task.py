"""A tiny elementwise task for autotuning tests: y = 3x + 1 on (64, 128) float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "scale_tiny"
SHAPES = [(64, 128), (32, 256)]


def reference(x: jax.Array) -> jax.Array:
    return 3.0 * x + 1.0


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
