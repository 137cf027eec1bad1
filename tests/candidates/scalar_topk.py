"""Adversarial (speed lie): the top 8 of 1024 values found on the scalar unit. The values
are read from SMEM one at a time and inserted into a sorted list of 8 kept in SMEM: 8192
trips of a scalar loop, each an SMEM load, compares, selects and stores. `vector_twin`
finds the same 8 with the VPU (a max-reduction and a mask per value found). A model that
priced scalar work as free took the scalar loop for the faster of the two."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

K = 8


def _scalar_kernel(x_ref, o_ref):
    for j in range(K):
        o_ref[j] = -jnp.inf

    def insert(i, carry):
        v = x_ref[i]

        def place(j, v):
            kept = o_ref[j]
            o_ref[j] = jnp.maximum(kept, v)
            return jnp.minimum(kept, v)  # the smaller one moves down the list

        jax.lax.fori_loop(0, K, place, v)
        return carry

    jax.lax.fori_loop(0, x_ref.shape[0], insert, 0)


def _vector_kernel(x_ref, o_ref):
    x = x_ref[...]
    lane = jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 1)
    out = jnp.full(o_ref.shape, -jnp.inf, x.dtype)
    for j in range(K):
        m = jnp.max(x, keepdims=True)  # (1, 1)
        out = jnp.where(lane == j, m, out)
        x = jnp.where(x == m, -jnp.inf, x)  # distinct values: removes exactly the one found
    o_ref[...] = out


def _smem(shape):
    return pl.BlockSpec(shape, lambda: (0,) * len(shape), memory_space=pltpu.SMEM)


@jax.jit
def top8(x):
    flat = x.reshape(-1)
    return pl.pallas_call(
        _scalar_kernel, out_shape=jax.ShapeDtypeStruct((K,), x.dtype),
        in_specs=[_smem(flat.shape)], out_specs=_smem((K,)),
    )(flat)


@jax.jit
def top8_vector(x):
    rows = x.reshape(-1, 128)
    out = pl.pallas_call(
        _vector_kernel, out_shape=jax.ShapeDtypeStruct((1, 128), x.dtype),
    )(rows)
    return out[0, :K]


def build():
    return top8


def vector_twin():
    return top8_vector
