"""Adversarial: a kernel body that picks its math by platform.

``jax.lax.platform_dependent`` inside the kernel: under interpret mode on the CPU the
``default`` branch runs (the real RMSNorm), while the Mosaic program that is compile-checked,
audited and priced takes the ``mosaic`` branch, a plain copy. Without a check it passes with
the copy's simulated speedup.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _math(x, w):
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(ms + 1e-6) * w


def _kernel(x_ref, w_ref, o_ref):
    x, w = x_ref[...], w_ref[...]
    o_ref[...] = jax.lax.platform_dependent(x, w, mosaic=lambda x, w: x, default=_math)


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
