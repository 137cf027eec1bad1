"""Multi-head scaled dot-product attention, non-causal: softmax(q k^T / sqrt(d)) v."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "attention"
# (batch, heads, seq, head_dim): the first is the tuning point; the rest are unseen shapes,
# one of them with a sequence length that is not a multiple of 128. The tuning point is a
# sequence of 1024 over 8 heads: there blocks, head packing and layouts change the price (at
# 2x4x512x64 the per-step overhead of any kernel capped the search below XLA).
SHAPES = [(1, 8, 1024, 64), (1, 2, 200, 64), (2, 2, 256, 128)]


def reference(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    shape = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, shape, jnp.float32) for k in (kq, kk, kv))


def flops(q: jax.Array, k: jax.Array, v: jax.Array) -> int:
    b, h, s, d = q.shape
    return 4 * b * h * s * k.shape[2] * d
