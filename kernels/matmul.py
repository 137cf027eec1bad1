"""Tiled matmul: (i, j) output tiles in parallel, K reduced in a VMEM f32 accumulator.

Any float dtype in (bfloat16 inputs multiply exactly into the float32 accumulator); the
output has the inputs' dtype, rounded once at the last K step.

The K axis is the last grid dimension and is declared ``arbitrary``: its steps run in
order on one core, so the accumulator is zeroed at k == 0 and written out at the last k.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block_m": [256, 128], "block_n": [256, 128], "block_k": [256, 128, 512]}


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _fit(block: int, size: int) -> int:
    """The largest block <= `block` that divides `size` and keeps TPU tiling (x128 or full)."""
    if size <= block:
        return size
    for candidate in range(block - block % 128, 0, -128):
        if size % candidate == 0:
            return candidate
    return size


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def matmul(
    a: jax.Array, b: jax.Array, *, block_m: int = 256, block_n: int = 256, block_k: int = 256
) -> jax.Array:
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"{a.shape=} and {b.shape=} do not chain")
    bm, bn, bk = _fit(block_m, m), _fit(block_n, n), _fit(block_k, k)
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.result_type(a.dtype, b.dtype)),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
    )(a, b)


def build(block_m: int = 256, block_n: int = 256, block_k: int = 256):
    return functools.partial(matmul, block_m=block_m, block_n=block_n, block_k=block_k)
