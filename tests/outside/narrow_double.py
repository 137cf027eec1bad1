"""A task whose input's last axis (64 floats) is narrower than the lanes: XLA:TPU lays it out
with the 256-long axis minor, while a Pallas kernel reads it row-major (last axis minor)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "narrow_double"
SHAPES = [(8, 256, 64)]


def reference(x: jax.Array) -> jax.Array:
    return x * 2.0


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
