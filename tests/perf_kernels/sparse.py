"""A block-masked matmul in the style of the Pallas TPU sparse guide: a scalar-prefetch mask
says which (i, k) blocks of A are non-zero; zero blocks skip the matmul, and their index
map repeats the previous block so no new block is fetched. Also a candidate file (`TUNABLES`,
`build`) for tests/evaltasks/block_masked_matmul.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

B = 128


def _kernel(mask_ref, prev_ref, a_ref, b_ref, o_ref, acc_ref):
    i, k = pl.program_id(0), pl.program_id(2)
    nk = pl.num_programs(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(mask_ref[i * nk + k] != 0)
    def _mac():
        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == nk - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@jax.jit
def masked_matmul(mask: jax.Array, prev: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """`mask[i * nk + k]`: block (i, k) of `a` is non-zero; `prev[i * nk + k]`: the last
    non-zero k at or before k (the block index a zero block keeps)."""
    m, kk = a.shape
    _, n = b.shape
    nk = kk // B
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(m // B, n // B, nk),
        in_specs=[pl.BlockSpec((B, B), lambda i, j, k, mask, prev: (i, prev[i * nk + k])),
                  pl.BlockSpec((B, B), lambda i, j, k, mask, prev: (prev[i * nk + k], j))],
        out_specs=pl.BlockSpec((B, B), lambda i, j, k, mask, prev: (i, j)),
        scratch_shapes=[pltpu.VMEM((B, B), jnp.float32)],
    )
    return pl.pallas_call(_kernel, grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct((m, n), a.dtype))(mask, prev, a, b)


TUNABLES: dict[str, list[int]] = {}


def build():
    return masked_matmul
