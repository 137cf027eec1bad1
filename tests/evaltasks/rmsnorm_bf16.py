"""RMSNorm on bfloat16 at test-sized shapes: the row-wise norm class in bf16 (statistics in
float32, as jnp.mean does for bf16)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "rmsnorm_bf16"
EPS = 1e-6
SHAPES = [(256, 256), (200, 128)]


def reference(x, w):
    ms = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
    return (x.astype(jnp.float32) * jax.lax.rsqrt(ms + EPS) * w).astype(x.dtype)


def make_inputs(key, shape_index=0):
    rows, hidden = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (rows, hidden), jnp.bfloat16),
            (1.0 + 0.1 * jax.random.normal(kw, (hidden,), jnp.float32)).astype(jnp.bfloat16))
