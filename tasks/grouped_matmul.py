"""Grouped (ragged) matmul, the mixture-of-experts layer: rows of `lhs` are sorted by expert,
`group_sizes[g]` consecutive rows are multiplied by expert g's weight `rhs[g]`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "grouped_matmul"
# (rows, K, N, experts): the first is the tuning point; the rest are unseen shapes, one of
# them with a row count that is not a multiple of 8. Group sizes are data (random per seed).
SHAPES = [(4096, 512, 256, 16), (100, 128, 256, 3), (128, 256, 128, 8)]


def reference(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> jax.Array:
    return jax.lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    rows, k, n, experts = SHAPES[shape_index]
    kl, kr, kg = jax.random.split(key, 3)
    lhs = jax.random.normal(kl, (rows, k), jnp.float32)
    rhs = jax.random.normal(kr, (experts, k, n), jnp.float32) / jnp.sqrt(jnp.float32(k))
    # Cut points drawn per seed: uneven groups, some off the 8-row tile; every row is in one.
    cuts = jnp.sort(jax.random.randint(kg, (experts - 1,), 0, rows + 1, jnp.int32))
    edges = jnp.concatenate([jnp.zeros((1,), jnp.int32), cuts, jnp.full((1,), rows, jnp.int32)])
    return lhs, rhs, jnp.diff(edges).astype(jnp.int32)


def flops(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> int:
    return 2 * lhs.shape[0] * lhs.shape[1] * rhs.shape[2]
