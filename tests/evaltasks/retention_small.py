"""Multi-scale retention (RetNet): (q k^T * decay) v, normalised per query, where both dots
carry two batch dims (batch, heads), which Mosaic's matmul does not take as they are."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "retention_small"
SHAPES = [(2, 2, 64, 16), (2, 2, 40, 8)]  # (batch, heads, seq, depth)


def reference(query, key, value):
    _, heads, seq, _ = query.shape
    gammas = 1.0 - jnp.exp2(-5.0 - jnp.arange(heads, dtype=jnp.float32))
    positions = jnp.arange(seq, dtype=jnp.float32)
    distance = positions[:, None] - positions[None, :]
    decay = jnp.exp(jnp.log(gammas)[:, None, None] * jnp.maximum(distance, 0.0)[None])
    decay = decay * (distance >= 0).astype(jnp.float32)[None]
    qk = jnp.einsum("bhsd,bhtd->bhst", query, key) * decay[None]
    qk = qk / jnp.maximum(jnp.sum(jnp.abs(qk), axis=-1, keepdims=True), 1.0)
    return jnp.einsum("bhst,bhtd->bhsd", qk, value)


def make_inputs(key, shape_index=0):
    kq, kk, kv = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, SHAPES[shape_index], jnp.float32) for k in (kq, kk, kv))
