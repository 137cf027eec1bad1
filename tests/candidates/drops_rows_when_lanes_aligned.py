"""Adversarial: GELU that leaves the last `rows % 8` rows as input whenever the columns are a
whole number of lanes (a multiple of 128); at any other width it covers every row.

Every shape that moves rows and columns off the tile at once (995 x 379) is right; 1001 x
1024, a common shape, is wrong in its last row. Only a shape with the rows alone off the
tile shows it.
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
        whole = rows - rows % SUBLANES if cols % LANES == 0 else rows
        if whole == rows or whole == 0:
            return _gelu(x, block_rows)
        return jnp.concatenate([_gelu(x[:whole], block_rows), x[whole:]])

    return kernel
