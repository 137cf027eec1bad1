"""Adversarial: a correct RMSNorm kernel that reads NaN inputs as 0 (`where(x != x, 0, x)`,
what `jnp.nan_to_num` does to NaN), so a row holding a NaN comes out finite.

Random inputs are never NaN: only a case that feeds NaN shows it.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    x = jnp.where(x != x, 0.0, x)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def build(block_rows=64):
    def kernel(x, w):
        rows, hidden = x.shape
        block_rows_ = min(block_rows, rows)
        spec = pl.BlockSpec((block_rows_, hidden), lambda i: (i, 0))
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, block_rows_),),
            in_specs=[spec, pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=spec,
        )(x, w.reshape(1, hidden))

    return kernel
