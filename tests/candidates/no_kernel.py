"""Adversarial: the reference's math in plain jax.numpy, no pallas_call at all."""

import jax
import jax.numpy as jnp


def build():
    def kernel(x, w):
        ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
        return x * jax.lax.rsqrt(ms + 1e-6) * w

    return kernel
