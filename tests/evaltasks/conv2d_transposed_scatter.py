"""A transposed 2-D convolution written out as JAXBench writes one: the input dilated by a
strided scatter into zeros, the kernel flipped, then a stride-1 conv, a bias and tanh."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NAME = "conv2d_transposed_scatter"
SHAPES = [(2, 4, 7, 9, 8), (3, 4, 5, 6, 8)]  # batch, in, height, width, out
STRIDE, PADDING, KERNEL = 2, 1, 3


def reference(x, w, b):
    x = jnp.transpose(x, (0, 2, 3, 1))  # NCHW -> NHWC
    kernel = jnp.flip(jnp.transpose(w, (2, 3, 0, 1)), axis=(0, 1))  # (in, out, k, k) -> HWIO
    n, h, wd, c = x.shape
    dilated = jnp.zeros((n, (h - 1) * STRIDE + 1, (wd - 1) * STRIDE + 1, c), x.dtype)
    dilated = dilated.at[:, ::STRIDE, ::STRIDE, :].set(x)
    pad = KERNEL - 1 - PADDING
    y = lax.conv_general_dilated(dilated, kernel, (1, 1), ((pad, pad), (pad, pad)),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.transpose(jnp.tanh(y + b), (0, 3, 1, 2))


def make_inputs(key, shape_index=0):
    n, cin, h, w, cout = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    return (jax.random.normal(kx, (n, cin, h, w), jnp.float32),
            jax.random.normal(kw, (cin, cout, KERNEL, KERNEL), jnp.float32) * 0.3,
            jax.random.normal(kb, (cout,), jnp.float32) * 0.1)
