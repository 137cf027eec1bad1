"""Causal attention with an additive per-head score bias (relative positions, ALiBi-like),
(batch, heads, seq, depth); the sizes read in Python, so they are traced at one size."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "attention_score_bias"
# q, k, v (batch, heads, seq, depth) and the bias (heads, seq, seq): seq and depth change
SHAPES = [((2, 2, 128, 32), (2, 128, 128)), ((1, 2, 256, 16), (2, 256, 256))]


def reference(q, k, v, bias):
    seq, depth = q.shape[2], q.shape[3]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * depth ** -0.5 + bias[None]
    causal = jnp.tril(jnp.ones((seq, seq), dtype=jnp.bool_))
    scores = jnp.where(causal[None, None], scores, -1e30)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def make_inputs(key, shape_index=0):
    qkv_shape, bias_shape = SHAPES[shape_index]
    kq, kk, kv, kb = jax.random.split(key, 4)
    return (jax.random.normal(kq, qkv_shape, jnp.float32),
            jax.random.normal(kk, qkv_shape, jnp.float32),
            jax.random.normal(kv, qkv_shape, jnp.float32),
            jax.random.normal(kb, bias_shape, jnp.float32))
