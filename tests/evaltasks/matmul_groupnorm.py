"""A matmul, then GroupNorm over a fixed number of channel groups: the group size is computed
in Python from the width (`width // GROUPS`), so the width is traced at one size."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_groupnorm"
GROUPS = 8
# x (rows, in), w (in, out), gamma (out,): rows and widths change
SHAPES = [((64, 128), (128, 256), (256,)), ((48, 64), (64, 128), (128,))]


def reference(x, w, gamma):
    width = w.shape[1]
    y = jnp.dot(x, w)
    y = y.reshape(-1, GROUPS, width // GROUPS)
    mean = jnp.mean(y, axis=-1, keepdims=True)
    var = jnp.var(y, axis=-1, keepdims=True)
    y = ((y - mean) / jnp.sqrt(var + 1e-5)).reshape(-1, width)
    return y * gamma


def make_inputs(key, shape_index=0):
    x_shape, w_shape, g_shape = SHAPES[shape_index]
    kx, kw, kg = jax.random.split(key, 3)
    return (jax.random.normal(kx, x_shape, jnp.float32),
            jax.random.normal(kw, w_shape, jnp.float32) * 0.1,
            1.0 + 0.1 * jax.random.normal(kg, g_shape, jnp.float32))
