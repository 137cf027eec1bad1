"""Honest matmul (optionally with the scale, bias, ReLU epilogue) in three accumulation
orders over K chunks: blocked (first to last), reversed, and split-K (two partial sums)."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

TUNABLES = {"order": ["blocked", "reversed", "split"]}
CHUNK, BLOCK_M = 128, 64


def _groups(size, order):
    spans = [(s, min(s + CHUNK, size)) for s in range(0, size, CHUNK)]
    if order == "reversed":
        return [spans[::-1]]
    if order == "split":
        half = (len(spans) + 1) // 2
        return [spans[:half], spans[half:]]
    return [spans]


def _product(a_ref, b_ref, order):
    total = None
    for group in _groups(a_ref.shape[1], order):
        acc = jnp.zeros((a_ref.shape[0], b_ref.shape[1]), jnp.float32)
        for s, e in group:
            acc = acc + jnp.dot(a_ref[:, s:e], b_ref[s:e, :], preferred_element_type=jnp.float32)
        total = acc if total is None else total + acc
    return total


def _plain(a_ref, b_ref, o_ref, *, order):
    o_ref[...] = _product(a_ref, b_ref, order)


def _epilogue(a_ref, b_ref, s_ref, c_ref, o_ref, *, order):
    o_ref[...] = jnp.maximum(_product(a_ref, b_ref, order) * s_ref[...] + c_ref[...], 0.0)


def build(order="blocked"):
    def kernel(a, b, *epilogue):
        (m, k), n = a.shape, b.shape[1]
        bm = min(BLOCK_M, m)
        body = _epilogue if epilogue else _plain
        extra = [x.reshape(1, n) for x in epilogue]
        return pl.pallas_call(
            functools.partial(body, order=order),
            out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
            grid=(pl.cdiv(m, bm),),
            in_specs=[pl.BlockSpec((bm, k), lambda i: (i, 0)),
                      pl.BlockSpec((k, n), lambda i: (0, 0)),
                      *[pl.BlockSpec((1, n), lambda i: (0, 0)) for _ in extra]],
            out_specs=pl.BlockSpec((bm, n), lambda i: (i, 0)),
        )(a, b, *extra)

    return kernel
