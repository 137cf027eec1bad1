"""A float cumsum along the rows' last axis (log-decays summed, as Mamba-2's SSD does) feeding
an exponential and a weighted sum: per row, a scan the kernel does as a triangular matmul."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "decayed_cumsum"
SHAPES = [(64, 128), (32, 256)]  # rows, sequence


def reference(log_a, x):
    total = jnp.cumsum(log_a, axis=-1)
    back = jax.lax.cumsum(x, axis=1, reverse=True)
    return jnp.exp(total) * x + 0.1 * back


def make_inputs(key, shape_index=0):
    rows, seq = SHAPES[shape_index]
    ka, kx = jax.random.split(key)
    return (-jax.nn.softplus(jax.random.normal(ka, (rows, seq), jnp.float32)) * 0.05,
            jax.random.normal(kx, (rows, seq), jnp.float32))
