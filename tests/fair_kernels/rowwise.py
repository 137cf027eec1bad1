"""Honest row-wise softmax and RMSNorm whose row sums run over column chunks in three
orders: blocked (first to last), reversed, and split (two partial sums)."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

TUNABLES = {"order": ["blocked", "reversed", "split"], "op": ["softmax", "rmsnorm"]}
CHUNK, BLOCK_ROWS, EPS = 128, 64, 1e-6


def _groups(size, order):
    spans = [(s, min(s + CHUNK, size)) for s in range(0, size, CHUNK)]
    if order == "reversed":
        return [spans[::-1]]
    if order == "split":
        half = (len(spans) + 1) // 2
        return [spans[:half], spans[half:]]
    return [spans]


def _row_sum(values, order):
    total = None
    for group in _groups(values.shape[1], order):
        acc = jnp.zeros((values.shape[0], 1), jnp.float32)
        for s, e in group:
            acc = acc + jnp.sum(values[:, s:e], axis=-1, keepdims=True)
        total = acc if total is None else total + acc
    return total


def _softmax(x_ref, o_ref, *, order):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / _row_sum(e, order)


def _rmsnorm(x_ref, w_ref, o_ref, *, order):
    x = x_ref[...]
    ms = _row_sum(x * x, order) / x.shape[1]
    o_ref[...] = x * jax.lax.rsqrt(ms + EPS) * w_ref[...]


def build(order="blocked", op="softmax"):
    def kernel(x, *weights):
        rows, cols = x.shape
        bm = min(BLOCK_ROWS, rows)
        spec = pl.BlockSpec((bm, cols), lambda i: (i, 0))
        extra = [w.reshape(1, cols) for w in weights]
        body = _rmsnorm if op == "rmsnorm" else _softmax
        return pl.pallas_call(
            functools.partial(body, order=order),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, bm),),
            in_specs=[spec, *[pl.BlockSpec((1, cols), lambda i: (0, 0)) for _ in extra]],
            out_specs=spec,
        )(x, *extra)

    return kernel
