"""GEMM with a scaled, biased, residual epilogue: alpha * (x @ w) + bias + residual, the
attention output projection with its skip connection."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul_scale_residual"
ALPHA = 0.5
# (M, K, N): the first is the tuning point; the rest are unseen shapes, one of them with a
# row count that is not a multiple of 8. The tuning point has a long reduction, so the MXU
# bounds a well-tiled kernel (at 512^3 the launch, the unoverlapped first fetch and the
# residual's bytes capped every kernel near 0.86x of XLA, simulated); it runs once against
# the oracle, the seeds and probes repeat at shape 1.
SHAPES = [(2048, 6144, 2048), (300, 256, 384), (128, 640, 256)]


def reference(x: jax.Array, w: jax.Array, bias: jax.Array, residual: jax.Array) -> jax.Array:
    return ALPHA * jnp.dot(x, w, preferred_element_type=jnp.float32) + bias + residual


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, ...]:
    m, k, n = SHAPES[shape_index]
    kx, kw, kb, kr = jax.random.split(key, 4)
    x = jax.random.normal(kx, (m, k), jnp.float32)
    w = jax.random.normal(kw, (k, n), jnp.float32) / jnp.sqrt(jnp.float32(k))
    bias = 0.1 * jax.random.normal(kb, (n,), jnp.float32)
    residual = jax.random.normal(kr, (m, n), jnp.float32)
    return x, w, bias, residual


def flops(x: jax.Array, w: jax.Array, bias: jax.Array, residual: jax.Array) -> int:
    return 2 * x.shape[0] * x.shape[1] * w.shape[1] + 3 * residual.size
