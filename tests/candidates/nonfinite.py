"""Adversarial: a correct RMSNorm kernel that puts +inf in one element of the output."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    y = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]
    rows = jax.lax.broadcasted_iota(jnp.int32, y.shape, 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, y.shape, 1)
    first = (pl.program_id(0) == 0) & (rows == 3) & (cols == 5)
    o_ref[...] = jnp.where(first, jnp.inf, y)


def build(block_rows=64):
    def kernel(x, w):
        rows, hidden = x.shape
        spec = pl.BlockSpec((block_rows, hidden), lambda i: (i, 0))
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, block_rows),),
            in_specs=[spec, pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=spec,
        )(x, w.reshape(1, hidden))

    return kernel
