"""Dense matmul in float32: the tiled-kernel task (MXU work, a reduction over K)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "matmul"
# (M, K, N): the first is the tuning point; the rest are unseen shapes, one of them
# with sizes that are not powers of two.
# Why the tuning point is not a 2048^3 GEMM: one TPU-interpret run of it takes ~90 s on a
# 2-core machine (measured), and every evaluation runs the tuning point several times (three
# seeds, two numerics probes), so one test would take minutes and a search hours. 1024^3
# costs an eighth of that but gives no headroom either: the cost model prices the hand
# kernel (kernels/matmul.py) at 0.29x-0.66x of XLA there (memory-bound, even with whole-
# matrix blocks), so a larger f32 point buys interpret time, not room to climb.
SHAPES = [(256, 512, 256), (384, 640, 384), (128, 256, 512)]


def reference(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.dot(a, b, preferred_element_type=jnp.float32)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array]:
    m, k, n = SHAPES[shape_index]
    ka, kb = jax.random.split(key)
    a = jax.random.normal(ka, (m, k), jnp.float32)
    b = jax.random.normal(kb, (k, n), jnp.float32)
    return a, b


def flops(a: jax.Array, b: jax.Array) -> int:
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]
