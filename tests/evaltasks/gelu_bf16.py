"""GELU (tanh form) on bfloat16 at test-sized shapes: the elementwise class in bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "gelu_bf16"
SHAPES = [(256, 512), (200, 256)]


def reference(x):
    return jax.nn.gelu(x, approximate=True)


def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    return (2.0 * jax.random.normal(key, (rows, cols), jnp.bfloat16),)
