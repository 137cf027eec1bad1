"""Row-wise softmax at test-sized shapes (same reference as tasks/softmax.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "softmax_small"
SHAPES = [(128, 512), (64, 384)]


def reference(x):
    return jax.nn.softmax(x, axis=-1)


def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    return (3.0 * jax.random.normal(key, (rows, cols), jnp.float32),)
