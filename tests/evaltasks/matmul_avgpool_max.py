"""A matmul, an average pool over the features (reduce_window, window = stride = 8), GELU and
a max over the pooled features (JAXBench 49k at test size)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_avgpool_max"
SHAPES = [(64, 128, 256), (32, 128, 128)]  # rows, in features, out features


def reference(x, w, b):
    y = jnp.expand_dims(x @ w + b, axis=1)
    y = jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 1, 8), (1, 1, 8), "VALID") / 8
    return jnp.max(jax.nn.gelu(jnp.squeeze(y, axis=1)) * 2.0, axis=1)


def make_inputs(key, shape_index=0):
    m, k, n = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    return (jax.random.normal(kx, (m, k), jnp.float32),
            jax.random.normal(kw, (k, n), jnp.float32) * 0.1,
            jax.random.normal(kb, (n,), jnp.float32) * 0.1)
