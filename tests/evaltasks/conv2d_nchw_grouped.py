"""A 2-D NCHW convolution with dilation 2, padding and two feature groups, then an
instance norm (per image and channel over height and width)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv2d_nchw_grouped"
SHAPES = [(4, 8, 12, 16), (2, 8, 10, 16)]  # batch, in, height (= width), out


def reference(x, w):
    y = lax.conv_general_dilated(x, w, window_strides=(1, 1), padding=((2, 2), (1, 1)),
                                 rhs_dilation=(2, 2), feature_group_count=2,
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    mean = jnp.mean(y, axis=(2, 3), keepdims=True)
    var = jnp.var(y, axis=(2, 3), keepdims=True)
    return (y - mean) / jnp.sqrt(var + 1e-5)


def make_inputs(key, shape_index=0):
    n, cin, hw, cout = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (n, cin, hw, hw), jnp.float32),
            jax.random.normal(kw, (cout, cin // 2, 3, 3), jnp.float32) * 0.2)
