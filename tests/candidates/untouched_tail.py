"""Adversarial: GELU on whole (8, 128) tiles only; the `size % 1024` tail is left as input.

With every task shape a whole number of tiles the tail is empty and the kernel is right;
at any other size the last elements are returned unchanged (x, not gelu(x)).
"""

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

TILE = 8 * 128


def _kernel(x_ref, o_ref):
    x = x_ref[...]
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    o_ref[...] = 0.5 * x * (1.0 + jnp.tanh(inner))


def build():
    def kernel(x):
        flat = x.reshape(-1)
        whole = flat.size // TILE * TILE
        tiles = flat[:whole].reshape(-1, 8, 128)
        spec = pl.BlockSpec((1, 8, 128), lambda i: (i, 0, 0))
        done = pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(tiles.shape, x.dtype),
            grid=(tiles.shape[0],),
            in_specs=[spec],
            out_specs=spec,
        )(tiles)
        return jnp.concatenate([done.reshape(-1), flat[whole:]]).reshape(x.shape)

    return kernel
