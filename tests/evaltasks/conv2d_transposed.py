"""A transposed 2-D convolution as `lax.conv_transpose` writes it: an input-dilated conv
(lhs_dilation 2), NHWC, then a ReLU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv2d_transposed"
SHAPES = [(2, 6, 6, 4, 8), (3, 5, 7, 4, 8)]  # batch, height, width, in, out


def reference(x, w):
    y = lax.conv_transpose(x, w, (2, 2), ((1, 1), (1, 2)),
                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y)


def make_inputs(key, shape_index=0):
    n, h, w, cin, cout = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (n, h, w, cin), jnp.float32),
            jax.random.normal(kw, (3, 3, cin, cout), jnp.float32) * 0.3)
