"""SiLU (x * sigmoid(x)) in bfloat16, elementwise: the activation of SwiGLU MLPs in bf16."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "silu_bf16"
# (rows, cols): the first is the tuning point; the rest are unseen shapes, one with a row
# count that is not a multiple of 8 and one with a width that is not a multiple of 128.
# The tuning point holds 8 MiB: at 512x1024 (1 MiB) any kernel's launch and grid steps cost
# more than the bytes, so the cost model capped every kernel at 0.86x of XLA's one fusion.
SHAPES = [(2048, 2048), (300, 384), (200, 200)]
# bfloat16 keeps 8 bits of mantissa: a relative step of 2^-8 per rounding.
TOLERANCE = {"atol": 5e-2, "rtol": 5e-2}


def reference(x: jax.Array) -> jax.Array:
    return jax.nn.silu(x)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array]:
    rows, cols = SHAPES[shape_index]
    return (3.0 * jax.random.normal(key, (rows, cols), jnp.float32)).astype(jnp.bfloat16),


def flops(x: jax.Array) -> int:
    return 5 * x.size
