"""Adversarial: a correct row kernel whose grid covers only the first half of the rows."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def build(block_rows=32):
    def kernel(x, w):
        rows, hidden = x.shape
        spec = pl.BlockSpec((block_rows, hidden), lambda i: (i, 0))
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, block_rows) // 2,),
            in_specs=[spec, pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=spec,
        )(x, w.reshape(1, hidden))

    return kernel
