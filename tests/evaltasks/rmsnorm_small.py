"""RMSNorm at test-sized shapes (same reference as tasks/rmsnorm.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "rmsnorm_small"
EPS = 1e-6
SHAPES = [(256, 256), (200, 128), (64, 512)]


def reference(x, w):
    ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(ms + EPS) * w


def make_inputs(key, shape_index=0):
    rows, hidden = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (rows, hidden), jnp.float32),
            1.0 + 0.1 * jax.random.normal(kw, (hidden,), jnp.float32))
