"""LayerNorm over the last axis with a learned scale and shift (mean and variance per row)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "layernorm"
EPS = 1e-5
# (rows, hidden): the first is the tuning point; the rest are unseen shapes,
# one of them with a row count that is not a multiple of 8.
SHAPES = [(2048, 512), (1000, 384), (250, 768)]
TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}


def reference(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    var = jnp.mean(jnp.square(centered), axis=-1, keepdims=True)
    return centered * jax.lax.rsqrt(var + EPS) * gamma + beta


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    rows, hidden = SHAPES[shape_index]
    kx, kg, kb = jax.random.split(key, 3)
    x = 1.5 * jax.random.normal(kx, (rows, hidden), jnp.float32) + 0.3
    gamma = 1.0 + 0.1 * jax.random.normal(kg, (hidden,), jnp.float32)
    beta = 0.1 * jax.random.normal(kb, (hidden,), jnp.float32)
    return x, gamma, beta


def flops(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> int:
    return 8 * x.size
