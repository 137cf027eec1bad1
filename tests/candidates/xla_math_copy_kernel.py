"""Adversarial: all the math in XLA, then a Pallas kernel that only copies the result."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def build():
    def kernel(x, w):
        ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
        y = x * jax.lax.rsqrt(ms + 1e-6) * w
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)

    return kernel
