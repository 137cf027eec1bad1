"""Matmul with a fused per-column scale, bias and ReLU: near-zero outputs after ReLU come
from cancellation of large terms, the case that needs the accumulation slack."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_epilogue_small"
SHAPES = [(128, 512, 128), (64, 384, 192)]


def reference(a, b, scale, bias):
    acc = jnp.dot(a, b, preferred_element_type=jnp.float32)
    return jnp.maximum(acc * scale + bias, 0.0)


def make_inputs(key, shape_index=0):
    m, k, n = SHAPES[shape_index]
    ka, kb, ks, kc = jax.random.split(key, 4)
    return (jax.random.normal(ka, (m, k), jnp.float32),
            jax.random.normal(kb, (k, n), jnp.float32),
            1.0 + 0.1 * jax.random.normal(ks, (n,), jnp.float32),
            jax.random.normal(kc, (n,), jnp.float32))
