"""A block-masked matmul with a per-case random mask: A's (128 x 128) blocks where the mask
is 0 count as zero. The mask and, per block, the last non-zero block at or before it in its
row (`prev`, what a scalar-prefetch kernel's index map repeats) are inputs, so every seed
skips different blocks."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "block_masked_matmul"
BLOCK = 128
SHAPES = [(512, 512, 512)]
DENSITY = 0.4
# Masked blocks count as zero, which the reference writes as a product (a * keep): a NaN or
# inf in a masked block of a, or in b against one, comes out NaN (0 x NaN) where a kernel
# that skips masked blocks, as it should, never computes it. The suite's non-finite case
# sees that those elements do not depend on the planted value and takes either
# (tools.correctness.nonfinite.unplanted).


def reference(mask, prev, a, b):
    del prev
    rows, inner = a.shape[0] // BLOCK, a.shape[1] // BLOCK
    keep = jnp.kron(mask.reshape(rows, inner), jnp.ones((BLOCK, BLOCK), a.dtype))
    return jnp.dot(a * keep, b, preferred_element_type=jnp.float32)


def make_inputs(key, shape_index=0):
    m, k, n = SHAPES[shape_index]
    rows, inner = m // BLOCK, k // BLOCK
    km, ka, kb = jax.random.split(key, 3)
    mask = jax.random.bernoulli(km, DENSITY, (rows, inner)).astype(jnp.int32)
    mask = mask.at[:, 0].set(1)  # every row has a block, so every output block is written
    steps = jnp.broadcast_to(jnp.arange(inner, dtype=jnp.int32), (rows, inner))
    prev = jax.lax.cummax(jnp.where(mask != 0, steps, 0), axis=1)
    return (mask.reshape(-1), prev.reshape(-1),
            jax.random.normal(ka, (m, k), jnp.float32), jax.random.normal(kb, (k, n), jnp.float32))
