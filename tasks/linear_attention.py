"""Causal linear attention as a recurrence: a (head_dim x head_dim) state accumulates
k_t v_t^T along the sequence and each query reads it, o_t = q_t S_t: the scan that
state-space and linear-attention layers share (written as `lax.scan`, step by step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "linear_attention"
# Where q or v holds a NaN or an infinity, which outputs come out NaN follows the order of
# operations, not the maths: the scan computes q . (sum k v^T), a chunked kernel (q k^T) v.
# An infinity in q then meets several terms of both signs there (inf - inf = NaN) but one
# finite state here, and a later token's NaN value is multiplied by the masked zero score
# of an earlier one (0 x NaN) where the scan never touches it. k gets NaN and infinities.
NO_NONFINITE_INPUTS = {
    0: "an infinity in q meets a sum of both signs in a chunked (q k^T) v, one finite "
       "state in the scan's q (sum k v^T): NaN against +/-inf by the order of operations",
    2: "a chunked kernel multiplies a later token's value by the masked zero score of an "
       "earlier one (0 x NaN), which the scan never computes",
}
# (batch, heads, seq, head_dim): the first is the tuning point; the rest are unseen shapes,
# one of them with a sequence length that is not a multiple of 8.
SHAPES = [(2, 4, 256, 64), (1, 2, 100, 64), (1, 4, 128, 128)]


def reference(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    batch, heads, _, depth = q.shape

    def step(state: jax.Array, qkv: tuple[jax.Array, jax.Array, jax.Array]):
        q_t, k_t, v_t = qkv
        state = state + k_t[..., :, None] * v_t[..., None, :]
        return state, jnp.einsum("bhd,bhde->bhe", q_t, state)

    init = jnp.zeros((batch, heads, depth, v.shape[-1]), q.dtype)
    time_major = tuple(jnp.moveaxis(a, 2, 0) for a in (q, k, v))
    _, out = jax.lax.scan(step, init, time_major)
    return jnp.moveaxis(out, 0, 2)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    batch, heads, seq, depth = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    scale = depth ** -0.5
    q = scale * jax.random.normal(kq, (batch, heads, seq, depth), jnp.float32)
    k = scale * jax.random.normal(kk, (batch, heads, seq, depth), jnp.float32)
    v = jax.random.normal(kv, (batch, heads, seq, depth), jnp.float32)
    return q, k, v


def flops(q: jax.Array, k: jax.Array, v: jax.Array) -> int:
    batch, heads, seq, depth = q.shape
    return 4 * batch * heads * seq * depth * v.shape[-1]
