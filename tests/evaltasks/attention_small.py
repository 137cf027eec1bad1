"""Single-head attention, softmax(q k^T / sqrt(d)) v, at test-sized shapes."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

NAME = "attention_small"
SHAPES = [(128, 256, 64), (64, 200, 64)]  # (queries, keys, head dim)


def reference(q, k, v):
    scores = jnp.dot(q, k.T, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    return jnp.dot(jax.nn.softmax(scores, axis=-1), v, preferred_element_type=jnp.float32)


def make_inputs(key, shape_index=0):
    s, t, d = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    return (jax.random.normal(kq, (s, d), jnp.float32),
            jax.random.normal(kk, (t, d), jnp.float32),
            jax.random.normal(kv, (t, d), jnp.float32))
