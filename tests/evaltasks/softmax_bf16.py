"""Row-wise softmax on bfloat16 at test-sized shapes: the row-wise reduction class in bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "softmax_bf16"
SHAPES = [(128, 512), (64, 384)]


def reference(x):
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    return (3.0 * jax.random.normal(key, (rows, cols), jnp.bfloat16),)
