"""Candidate for scale_task: rows per block is the tunable; 7 rows is not a legal TPU block."""

from __future__ import annotations

import functools

import jax
from jax.experimental import pallas as pl

TUNABLES = {"block_rows": [8, 32, 7]}


def _kernel(x_ref, o_ref):
    o_ref[...] = 3.0 * x_ref[...] + 1.0


@functools.partial(jax.jit, static_argnames=("block_rows",))
def scale(x: jax.Array, *, block_rows: int = 8) -> jax.Array:
    rows, cols = x.shape
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=[spec],
        out_specs=spec,
    )(x)


def build(block_rows: int = 8):
    return functools.partial(scale, block_rows=block_rows)
