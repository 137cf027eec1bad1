"""RMSNorm as a row-tiled Pallas kernel: each grid step normalises a block of rows."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPS = 1e-6
TUNABLES = {"block_rows": [256, 128, 512]}


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(ms + EPS) * w_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def rmsnorm(x: jax.Array, w: jax.Array, *, block_rows: int = 256) -> jax.Array:
    """Normalises the last axis; leading axes (batch, sequence) are flattened into rows."""
    *lead, hidden = x.shape
    if not lead or w.shape != (hidden,):
        raise ValueError(f"{w.shape=} must be ({hidden},) for {x.shape=} (at least 2-D)")
    rows = math.prod(lead)
    block_rows = min(block_rows, rows)
    out = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((rows, hidden), x.dtype),
        grid=(pl.cdiv(rows, block_rows),),
        in_specs=[
            pl.BlockSpec((block_rows, hidden), lambda i: (i, 0)),
            pl.BlockSpec((1, hidden), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((block_rows, hidden), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x.reshape(rows, hidden), w.reshape(1, hidden))
    return out.reshape(x.shape)


def build(block_rows: int = 256):
    return functools.partial(rmsnorm, block_rows=block_rows)
