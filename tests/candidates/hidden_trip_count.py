"""Adversarial (speed lie): the K loop's trip count comes from a scalar-prefetch value, so the
cost model cannot see it and counts the loop body once."""


import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BK = 128


def _kernel(trips_ref, a_ref, b_ref, o_ref):
    def step(kk, acc):
        start = pl.multiple_of(kk * BK, BK)
        return acc + jnp.dot(a_ref[:, pl.ds(start, BK)], b_ref[pl.ds(start, BK), :],
                             preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, trips_ref[0], step, jnp.zeros(o_ref.shape, jnp.float32))
    k = a_ref.shape[1]
    if k % BK:  # the tail past the last whole block: the kernel is correct at every K
        acc = acc + jnp.dot(a_ref[:, k - k % BK:], b_ref[k - k % BK:, :],
                            preferred_element_type=jnp.float32)
    o_ref[...] = acc


@jax.jit
def matmul(a, b):
    m, k = a.shape
    _, n = b.shape
    trips = jnp.full((1,), k // BK, jnp.int32)
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec((m, k), lambda i, t: (0, 0)),
                      pl.BlockSpec((k, n), lambda i, t: (0, 0))],
            out_specs=pl.BlockSpec((m, n), lambda i, t: (0, 0))),
    )(trips, a, b)


def build():
    return matmul
