"""A grouped matmul written as JAXBench's megablox reference writes it: group offsets from a
cumsum of the sizes, then a scan over the groups with masked fixed-size dynamic slices."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "grouped_cumsum_scan"
SHAPES = [(4, 64, 128, 128), (2, 32, 128, 256)]  # groups, rows per group, K, N


def reference(lhs, rhs, group_sizes):
    groups, k, n = rhs.shape
    m = lhs.shape[0]
    cap = m // groups
    ends = jnp.cumsum(group_sizes)
    starts = jnp.concatenate([jnp.zeros(1, jnp.int32), ends[:-1]])
    out = jnp.zeros((m + cap, n), lhs.dtype)

    def step(acc, g):
        rows = jax.lax.dynamic_slice(lhs, (starts[g], 0), (cap, k))
        res = jax.lax.dot(rows, rhs[g], preferred_element_type=jnp.float32)
        res = jnp.where(jax.lax.broadcasted_iota(jnp.int32, (cap, n), 0) < group_sizes[g], res, 0.0)
        old = jax.lax.dynamic_slice(acc, (starts[g], 0), (cap, n))
        return jax.lax.dynamic_update_slice(acc, old + res.astype(acc.dtype), (starts[g], 0)), None

    out, _ = jax.lax.scan(step, out, jnp.arange(groups))
    return out[:m]


def make_inputs(key, shape_index=0):
    groups, per_group, k, n = SHAPES[shape_index]
    kl, kr = jax.random.split(key)
    return (jax.random.normal(kl, (groups * per_group, k), jnp.float32),
            jax.random.normal(kr, (groups, k, n), jnp.float32) * 0.1,
            jnp.full((groups,), per_group, jnp.int32))
