"""Causal grouped-query attention: several query heads share one key/value head, as in
Llama-style decoders (the KV cache is `q_heads / kv_heads` times smaller)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "gqa_attention"
# (batch, q_heads, kv_heads, seq, head_dim): the first is the tuning point; the rest are
# unseen shapes, one of them with a sequence length that is not a multiple of 8.
SHAPES = [(1, 8, 2, 1024, 64), (1, 4, 1, 100, 64), (2, 2, 1, 128, 128)]


def reference(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    batch, q_heads, seq, depth = q.shape
    kv_heads = k.shape[1]
    grouped = q.reshape(batch, kv_heads, q_heads // kv_heads, seq, depth)
    scores = jnp.einsum("bgrqd,bgkd->bgrqk", grouped, k) * (depth ** -0.5)
    allowed = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(allowed, scores, -jnp.inf)
    out = jnp.einsum("bgrqk,bgkd->bgrqd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(batch, q_heads, seq, depth)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    batch, q_heads, kv_heads, seq, depth = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    q = jax.random.normal(kq, (batch, q_heads, seq, depth), jnp.float32)
    k = jax.random.normal(kk, (batch, kv_heads, seq, depth), jnp.float32)
    v = jax.random.normal(kv, (batch, kv_heads, seq, depth), jnp.float32)
    return q, k, v


def flops(q: jax.Array, k: jax.Array, v: jax.Array) -> int:
    batch, heads, seq, depth = q.shape
    return 2 * batch * heads * seq * seq * depth
