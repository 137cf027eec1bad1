"""Causal grouped-query attention in (batch, seq, heads, depth) layout, bf16, written the way
model code writes it: the sizes read in Python (`D ** -0.5`, `jnp.ones((S, S))`), so they are
traced at one size, and the key/value heads repeated before the dots."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "attention_gqa_bshd"
# (batch, seq, query heads, depth), (batch, seq, kv heads, depth): depth and seq change
SHAPES = [((1, 128, 4, 32), (1, 128, 2, 32)), ((2, 64, 4, 16), (2, 64, 2, 16))]
TOLERANCE = {"atol": 5e-2, "rtol": 5e-2}


def reference(query, key, value):
    batch, seq, q_heads, depth = query.shape
    group = q_heads // key.shape[2]
    key = jnp.repeat(key[:, :, :, None, :], group, axis=3).reshape(batch, seq, q_heads, depth)
    value = jnp.repeat(value[:, :, :, None, :], group, axis=3).reshape(batch, seq, q_heads, depth)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (query, key, value))
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * depth ** -0.5
    scores = jnp.where(jnp.tril(jnp.ones((seq, seq))), scores, -1e9)
    out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
    return out.transpose(0, 2, 1, 3)


def make_inputs(key, shape_index=0):
    q_shape, kv_shape = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    return (jax.random.normal(kq, q_shape, jnp.bfloat16),
            jax.random.normal(kk, kv_shape, jnp.bfloat16),
            jax.random.normal(kv, kv_shape, jnp.bfloat16))
