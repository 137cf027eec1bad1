"""A 3-D NCDHW convolution (stride (1, 2, 1)) reached through the reference's own
transposes, then tanh and the layout back; and a batch norm variant over the whole batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv3d_ncdhw"
SHAPES = [(2, 4, 6, 8, 8, 8), (3, 4, 5, 6, 10, 8)]  # batch, in, depth, height, width, out


def reference(x, w):
    x = jnp.transpose(x, (0, 2, 3, 4, 1))
    kernel = jnp.transpose(w, (2, 3, 4, 1, 0))
    y = lax.conv_general_dilated(x, kernel, window_strides=(1, 2, 1), padding="VALID",
                                 dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
    return jnp.transpose(jnp.tanh(y), (0, 4, 1, 2, 3))


def make_inputs(key, shape_index=0):
    n, cin, d, h, w, cout = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (n, cin, d, h, w), jnp.float32),
            jax.random.normal(kw, (cout, cin, 3, 3, 3), jnp.float32) * 0.2)
