"""A 2-D convolution then a training-mode batch norm: statistics over the whole batch, so
the epilogue cannot run image by image."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv2d_batchnorm"
SHAPES = [(4, 8, 10, 16), (3, 8, 12, 16)]  # batch, in, height (= width), out


def reference(x, w, gamma):
    y = lax.conv_general_dilated(x, w, window_strides=(1, 1), padding="VALID",
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    mean = jnp.mean(y, axis=(0, 2, 3), keepdims=True)
    var = jnp.mean((y - mean) ** 2, axis=(0, 2, 3), keepdims=True)
    return (y - mean) / jnp.sqrt(var + 1e-5) * gamma.reshape(1, -1, 1, 1)


def make_inputs(key, shape_index=0):
    n, cin, hw, cout = SHAPES[shape_index]
    kx, kw, kg = jax.random.split(key, 3)
    return (jax.random.normal(kx, (n, cin, hw, hw), jnp.float32),
            jax.random.normal(kw, (cout, cin, 3, 3), jnp.float32) * 0.2,
            1.0 + 0.1 * jax.random.normal(kg, (cout,), jnp.float32))
