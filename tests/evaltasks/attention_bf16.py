"""Single-head attention on bfloat16 at test-sized shapes: the attention class in bf16
(scores and softmax in float32, as kernels compute them; the output back in bfloat16)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

NAME = "attention_bf16"
SHAPES = [(128, 256, 64), (64, 200, 64)]  # (queries, keys, head dim)


def reference(q, k, v):
    scores = jnp.dot(q, k.T, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    out = jnp.dot(jax.nn.softmax(scores, axis=-1), v.astype(jnp.float32))
    return out.astype(q.dtype)


def make_inputs(key, shape_index=0):
    s, t, d = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    return (jax.random.normal(kq, (s, d), jnp.bfloat16),
            jax.random.normal(kk, (t, d), jnp.bfloat16),
            jax.random.normal(kv, (t, d), jnp.bfloat16))
