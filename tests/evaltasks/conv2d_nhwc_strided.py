"""A 2-D NHWC convolution with stride 2 and uneven padding, then bias and ReLU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv2d_nhwc_strided"
SHAPES = [(4, 12, 12, 8, 16), (2, 10, 14, 8, 16)]  # batch, height, width, in, out


def reference(x, w, b):
    y = lax.conv_general_dilated(x, w, window_strides=(2, 2), padding=((1, 2), (1, 1)),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + b)


def make_inputs(key, shape_index=0):
    n, h, w, cin, cout = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    return (jax.random.normal(kx, (n, h, w, cin), jnp.float32),
            jax.random.normal(kw, (3, 3, cin, cout), jnp.float32) * 0.2,
            jax.random.normal(kb, (cout,), jnp.float32) * 0.1)
