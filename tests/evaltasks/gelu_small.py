"""GELU (tanh form) at test-sized shapes (same reference as tasks/gelu.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "gelu_small"
SHAPES = [(256, 512), (200, 256), (64, 1024)]


def reference(x):
    return jax.nn.gelu(x, approximate=True)


def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    return (2.0 * jax.random.normal(key, (rows, cols), jnp.float32),)
