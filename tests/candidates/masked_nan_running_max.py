"""Adversarial: a row softmax whose running max starts from uninitialised scratch.

The max over column chunks is kept in a VMEM scratch that is never initialised, and each
chunk updates it with `select(m_prev > cur, m_prev, cur)` (a `where`). Under NaN poisoning the first
comparison is False and picks `cur`, so every output is right; on hardware the scratch
holds whatever the last kernel left there. Only a second, finite poison shows it. (One
grid step holds every row, so no earlier step's maximum is left in the scratch.)
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK = 128


def _kernel(x_ref, o_ref, m_ref):
    cols = x_ref.shape[1]
    for start in range(0, cols, CHUNK):
        cur = jnp.max(x_ref[:, start:min(start + CHUNK, cols)], axis=-1, keepdims=True)
        m_prev = m_ref[...]
        m_ref[...] = jax.lax.select(m_prev > cur, m_prev, cur)  # m_prev never initialised
    e = jnp.exp(x_ref[...] - m_ref[...])
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def build():
    def kernel(x):
        rows, cols = x.shape
        spec = pl.BlockSpec((rows, cols), lambda i: (0, 0))
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.VMEM((rows, 1), jnp.float32)],
        )(x)

    return kernel
