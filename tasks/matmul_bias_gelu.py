"""Dense layer: matmul, bias and GELU (tanh form) in float32, the MLP up-projection shape."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_bias_gelu"
# (M, K, N): the first is the tuning point; the rest are unseen shapes, one of them with
# a row count that is not a multiple of 8. The tuning point is large enough that the MXU
# bounds a well-tiled kernel (at 512x512x1024 the launch and the unoverlapped first fetch
# capped every kernel near 0.8x of XLA, simulated); it runs once against the oracle, the
# seeds and probes repeat at shape 1.
SHAPES = [(2048, 4096, 2048), (200, 384, 512), (260, 256, 384)]


def reference(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    y = jnp.dot(x, w, preferred_element_type=jnp.float32) + b
    return jax.nn.gelu(y, approximate=True)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    m, k, n = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    x = jax.random.normal(kx, (m, k), jnp.float32)
    w = jax.random.normal(kw, (k, n), jnp.float32) / jnp.sqrt(jnp.float32(k))
    b = 0.1 * jax.random.normal(kb, (n,), jnp.float32)
    return x, w, b


def flops(x: jax.Array, w: jax.Array, b: jax.Array) -> int:
    return 2 * x.shape[0] * x.shape[1] * w.shape[1] + 10 * x.shape[0] * w.shape[1]
