"""Retention-style scores (causal, decayed, normalised by their absolute row sums) rounded
to bfloat16 before the value matmul. At this size XLA on the host keeps that operand in
float32 and drops the rounding the program states; a faithful kernel keeps it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "retention_bf16_scores"
SHAPES = [(2, 4, 512, 32)]  # (batch, heads, seq, head dim)
TOLERANCE = {"atol": 5e-2, "rtol": 5e-2}
DECAY = 0.97


def make_inputs(key, shape_index=0):
    ks = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, SHAPES[shape_index], jnp.float32).astype(jnp.bfloat16)
                 for k in ks)


def reference(q, k, v):
    positions = jnp.arange(q.shape[2], dtype=jnp.float32)
    distance = positions[:, None] - positions[None, :]
    decay = jnp.where(distance >= 0, DECAY ** jnp.maximum(distance, 0.0), 0.0)
    scores = jnp.einsum("bhsd,bhtd->bhst", q.astype(jnp.float32), k.astype(jnp.float32))
    scores = scores * decay
    scores = scores / jnp.maximum(jnp.sum(jnp.abs(scores), -1, keepdims=True), 1.0)
    return jnp.einsum("bhst,bhtd->bhsd", scores.astype(q.dtype), v)
