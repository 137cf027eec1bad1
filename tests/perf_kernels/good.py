"""Kernels that lower for TPU: an elementwise scale, a tiled matmul, a scalar-prefetch gather."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


@functools.partial(jax.jit, static_argnames=("block_rows",))
def scale(x: jax.Array, *, block_rows: int = 256) -> jax.Array:
    rows, cols = x.shape
    if rows % block_rows:
        raise ValueError(f"{rows=} not a multiple of {block_rows=}")
    spec = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(
        _scale_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(rows // block_rows,),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("bm", "bn", "bk", "vmem_limit_bytes"))
def matmul(
    a: jax.Array, b: jax.Array, *, bm: int = 128, bn: int = 128, bk: int = 128,
    vmem_limit_bytes: int | None = None,
) -> jax.Array:
    m, k = a.shape
    _, n = b.shape
    if m % bm or n % bn or k % bk:
        raise ValueError(f"{a.shape=} {b.shape=} not tiled by {bm=} {bn=} {bk=}")
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=vmem_limit_bytes,
        ),
    )(a, b)


def _gather_kernel(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


@jax.jit
def gather_rows(idx: jax.Array, x: jax.Array) -> jax.Array:
    """Block i of the output is block idx[i] // 2 of x: the index depends on data."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(idx.shape[0],),
        in_specs=[pl.BlockSpec((8, 128), lambda i, idx_ref: (idx_ref[i] // 2, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, idx_ref: (i, 0)),
    )
    return pl.pallas_call(
        _gather_kernel,
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((8 * idx.shape[0], 128), x.dtype),
    )(idx, x)


def _index_arith_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


@jax.jit
def index_arith(x: jax.Array) -> jax.Array:
    """A grid of 12 whose input index map uses //, %, min and max."""
    return pl.pallas_call(
        _index_arith_kernel,
        out_shape=jax.ShapeDtypeStruct((12 * 8, 128), x.dtype),
        grid=(12,),
        in_specs=[pl.BlockSpec(
            (8, 128), lambda i: (jnp.minimum(i // 3 + (i % 4) - 1, 5) * 1 + jnp.maximum(0, i - 10), 0)
        )],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
    )(x)


def _looped_exp_kernel(x_ref, o_ref):
    def body(_, acc):
        return acc + jnp.exp(x_ref[...])

    o_ref[...] = jax.lax.fori_loop(0, 3, body, jnp.zeros_like(o_ref))


def _add_one_kernel(a_ref, o_ref):
    o_ref[...] = a_ref[...] + 1.0


@jax.jit
def looped_then_whole(x: jax.Array) -> jax.Array:
    """A squeezed-block kernel with a 3-trip fori_loop, a transpose, then a grid-less kernel."""
    n = x.shape[0]
    spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
    y = pl.pallas_call(_looped_exp_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                       grid=(n,), in_specs=[spec], out_specs=spec)(x)
    y = jnp.transpose(y, (1, 0, 2))
    return pl.pallas_call(_add_one_kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)
