"""Adversarial: a correct RMSNorm kernel with the tuning point's shape written into it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ROWS, HIDDEN, BLOCK = 256, 256, 64


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.sum(x * x, axis=-1, keepdims=True) / HIDDEN
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def build():
    def kernel(x, w):
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, HIDDEN), x.dtype),
            grid=(ROWS // BLOCK,),
            in_specs=[pl.BlockSpec((BLOCK, HIDDEN), lambda i: (i, 0)),
                      pl.BlockSpec((1, HIDDEN), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((BLOCK, HIDDEN), lambda i: (i, 0)),
        )(x, w.reshape(1, -1))

    return kernel
