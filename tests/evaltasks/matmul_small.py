"""Float32 matmul at test-sized shapes (same reference as tasks/matmul.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_small"
SHAPES = [(256, 512, 256), (128, 384, 384)]


def reference(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


def make_inputs(key, shape_index=0):
    m, k, n = SHAPES[shape_index]
    ka, kb = jax.random.split(key)
    return (jax.random.normal(ka, (m, k), jnp.float32),
            jax.random.normal(kb, (k, n), jnp.float32))
