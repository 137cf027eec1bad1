"""Kernels the Pallas TPU lowering or the VMEM budget rejects; tests check the reported lines."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _sort_kernel(x_ref, o_ref):
    o_ref[...] = jnp.sort(x_ref[...], axis=-1)  # LINE: sort


def misaligned_block(x: jax.Array) -> jax.Array:
    spec = pl.BlockSpec((7, 100), lambda i: (i, 0))  # LINE: misaligned
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),  # LINE: misaligned-call
                          grid=(2,), in_specs=[spec], out_specs=spec)(x)


def wrong_arity(x: jax.Array) -> jax.Array:
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
    out = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),  # LINE: arity
                          grid=(2,), in_specs=[spec], out_specs=out)(x)


def wrong_rank(x: jax.Array) -> jax.Array:
    spec = pl.BlockSpec((8, 128), lambda i: (i,))  # LINE: rank
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(2,), in_specs=[spec], out_specs=spec)(x)


def unsupported_op(x: jax.Array) -> jax.Array:
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_sort_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(2,), in_specs=[spec], out_specs=spec)(x)


def too_much_vmem(x: jax.Array) -> jax.Array:
    """Two (4096, 1024) f32 blocks double-buffered = 64 MiB, over every default scoped limit."""
    spec = pl.BlockSpec((4096, 1024), lambda i: (i, 0))
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // 4096,), in_specs=[spec], out_specs=spec,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)
