"""Adversarial: a row softmax whose running max starts from uninitialised scratch.

The max over column chunks is kept in a scoped VMEM buffer that is never initialised, and each
chunk updates it with `where(m_prev > cur, m_prev, cur)`. Under NaN poisoning the first
comparison is False and picks `cur`, so every output is right; on hardware the scratch
holds whatever the last kernel left there. Only a second, finite poison shows it.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK = 128


def _kernel(x_ref, o_ref):
    cols = x_ref.shape[1]

    def scoped(m_ref):  # a fresh VMEM buffer every grid step, never initialised
        for start in range(0, cols, CHUNK):
            cur = jnp.max(x_ref[:, start:min(start + CHUNK, cols)], axis=-1, keepdims=True)
            m_prev = m_ref[...]
            m_ref[...] = jnp.where(m_prev > cur, m_prev, cur)
        e = jnp.exp(x_ref[...] - m_ref[...])
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    pl.run_scoped(scoped, pltpu.VMEM((x_ref.shape[0], 1), jnp.float32))


def build(block_rows=64):
    def kernel(x):
        rows, cols = x.shape
        bm = min(block_rows, rows)
        spec = pl.BlockSpec((bm, cols), lambda i: (i, 0))
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, bm),),
            in_specs=[spec],
            out_specs=spec,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(x)

    return kernel
