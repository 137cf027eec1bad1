"""Adversarial: GELU that leaves the last `cols % 128` columns as input whenever the rows are
a whole number of sublanes (a multiple of 8); with any other row count it covers every
column.

Every shape that moves rows and columns off the tile at once is right; only a shape with
the columns alone off the tile shows it.
"""

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

SUBLANES, LANES = 8, 128


def _kernel(x_ref, o_ref):
    x = x_ref[...]
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    o_ref[...] = 0.5 * x * (1.0 + jnp.tanh(inner))


def _gelu(x, block_rows):
    rows, cols = x.shape
    block_rows = min(block_rows, rows)
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=[spec],
        out_specs=spec,
    )(x)


def build(block_rows=64):
    def kernel(x):
        rows, cols = x.shape
        whole = cols - cols % LANES if rows % SUBLANES == 0 else cols
        if whole == cols or whole == 0:
            return _gelu(x, block_rows)
        return jnp.concatenate([_gelu(x[:, :whole], block_rows), x[:, whole:]], axis=1)

    return kernel
