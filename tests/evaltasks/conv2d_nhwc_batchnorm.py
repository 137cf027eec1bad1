"""A channels-last 2-D convolution then a training-mode batch norm: statistics over the whole
batch, so the epilogue runs in the conv kernel only when one block holds every image."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv2d_nhwc_batchnorm"
SHAPES = [(4, 10, 8, 16), (3, 12, 8, 16)]  # batch, height (= width), in, out


def reference(x, w, gamma):
    y = lax.conv_general_dilated(x, w, window_strides=(1, 1), padding=((1, 1), (1, 1)),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    mean = jnp.mean(y, axis=(0, 1, 2), keepdims=True)
    var = jnp.mean((y - mean) ** 2, axis=(0, 1, 2), keepdims=True)
    return (y - mean) / jnp.sqrt(var + 1e-5) * gamma


def make_inputs(key, shape_index=0):
    n, hw, cin, cout = SHAPES[shape_index]
    kx, kw, kg = jax.random.split(key, 3)
    return (jax.random.normal(kx, (n, hw, hw, cin), jnp.float32),
            jax.random.normal(kw, (3, 3, cin, cout), jnp.float32) * 0.2,
            1.0 + 0.1 * jax.random.normal(kg, (cout,), jnp.float32))
