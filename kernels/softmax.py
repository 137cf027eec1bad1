"""Row-wise softmax: each grid step owns whole rows, so max and sum stay in VMEM."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block_rows": [128, 64, 256]}


def _kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    shifted = x - jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(shifted)
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_rows",))
def softmax(x: jax.Array, *, block_rows: int = 128) -> jax.Array:
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


def build(block_rows: int = 128):
    return functools.partial(softmax, block_rows=block_rows)
