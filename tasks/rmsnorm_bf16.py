"""RMSNorm in bfloat16 (statistics in float32, one rounding at the end), as Llama-style
models run it on TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "rmsnorm_bf16"
EPS = 1e-6
# (rows, hidden): the first is the tuning point; the rest are unseen shapes, one of them
# with a row count that is not a multiple of 8.
SHAPES = [(1024, 1024), (300, 512), (64, 2048)]
TOLERANCE = {"atol": 5e-2, "rtol": 5e-2}


def reference(x: jax.Array, w: jax.Array) -> jax.Array:
    xf = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(xf), axis=-1, keepdims=True)
    return (xf * jax.lax.rsqrt(ms + EPS) * w.astype(jnp.float32)).astype(jnp.bfloat16)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array]:
    rows, hidden = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (rows, hidden), jnp.float32).astype(jnp.bfloat16)
    w = (1.0 + 0.1 * jax.random.normal(kw, (hidden,), jnp.float32)).astype(jnp.bfloat16)
    return x, w


def flops(x: jax.Array, w: jax.Array) -> int:
    return 4 * x.size
