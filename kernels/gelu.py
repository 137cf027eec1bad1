"""Elementwise GELU (tanh form) over row blocks, computed in float32 inside the kernel."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block_rows": [256, 128, 512]}
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
    o_ref[...] = (0.5 * x * (1.0 + jnp.tanh(inner))).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def gelu(x: jax.Array, *, block_rows: int = 256) -> jax.Array:
    if x.ndim != 2:
        raise ValueError(f"{x.shape=} must be 2-D (rows, cols)")
    rows, cols = x.shape
    block_rows = min(block_rows, rows)
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


def build(block_rows: int = 256):
    return functools.partial(gelu, block_rows=block_rows)
