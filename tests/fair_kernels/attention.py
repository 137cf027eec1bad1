"""Honest flash-style attention: an online softmax over key chunks in three orders:
blocked (first to last), reversed, and split (two halves merged by their maxima).
Scores, softmax and the accumulator are float32; the output has the inputs' dtype."""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

TUNABLES = {"order": ["blocked", "reversed", "split"]}
CHUNK, BLOCK_Q = 64, 64


def _groups(size, order):
    spans = [(s, min(s + CHUNK, size)) for s in range(0, size, CHUNK)]
    if order == "reversed":
        return [spans[::-1]]
    if order == "split":
        half = (len(spans) + 1) // 2
        return [spans[:half], spans[half:]]
    return [spans]


def _kernel(q_ref, k_ref, v_ref, o_ref, *, order):
    q = q_ref[...]
    scale = 1.0 / math.sqrt(q.shape[-1])
    parts = []
    for group in _groups(k_ref.shape[0], order):
        m = jnp.full((q.shape[0], 1), -jnp.inf, jnp.float32)
        total = jnp.zeros((q.shape[0], 1), jnp.float32)
        acc = jnp.zeros((q.shape[0], v_ref.shape[1]), jnp.float32)
        for s, e in group:
            scores = jax.lax.dot_general(q, k_ref[s:e, :], (((1,), (1,)), ((), ())),
                                         preferred_element_type=jnp.float32) * scale
            m_new = jnp.maximum(m, jnp.max(scores, axis=-1, keepdims=True))
            p = jnp.exp(scores - m_new)
            correction = jnp.exp(m - m_new)
            total = total * correction + jnp.sum(p, axis=-1, keepdims=True)
            acc = acc * correction + jnp.dot(p, v_ref[s:e, :],
                                             preferred_element_type=jnp.float32)
            m = m_new
        parts.append((m, total, acc))
    m = parts[0][0]
    for part in parts[1:]:
        m = jnp.maximum(m, part[0])
    total = sum(ti * jnp.exp(mi - m) for mi, ti, _ in parts)
    acc = sum(ai * jnp.exp(mi - m) for mi, _, ai in parts)
    o_ref[...] = (acc / total).astype(o_ref.dtype)


def build(order="blocked"):
    def kernel(q, k, v):
        s, d = q.shape
        bq = min(BLOCK_Q, s)
        return pl.pallas_call(
            functools.partial(_kernel, order=order),
            out_shape=jax.ShapeDtypeStruct((s, v.shape[1]), v.dtype),
            grid=(pl.cdiv(s, bq),),
            in_specs=[pl.BlockSpec((bq, d), lambda i: (i, 0)),
                      pl.BlockSpec(k.shape, lambda i: (0, 0)),
                      pl.BlockSpec(v.shape, lambda i: (0, 0))],
            out_specs=pl.BlockSpec((bq, v.shape[1]), lambda i: (i, 0)),
        )(q, k, v)

    return kernel
