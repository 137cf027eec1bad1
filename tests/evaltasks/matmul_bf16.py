"""bfloat16 matmul with a bfloat16 result (float32 accumulation, one rounding): the matmul
class in bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_bf16"
SHAPES = [(256, 512, 256), (128, 384, 384)]


def reference(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def make_inputs(key, shape_index=0):
    m, k, n = SHAPES[shape_index]
    ka, kb = jax.random.split(key)
    return (jax.random.normal(ka, (m, k), jnp.bfloat16),
            jax.random.normal(kb, (k, n), jnp.bfloat16))
