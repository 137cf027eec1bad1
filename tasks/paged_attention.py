"""Paged attention for decoding: one new query token per sequence attends to its cached
keys and values, which live in fixed-size pages scattered through a shared pool; a block
table maps each sequence's logical pages to physical ones, and `lengths` says how many
cached tokens each sequence has (the rest of its last page is ignored)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "paged_attention"
# (batch, heads, head_dim, page_size, pages_per_sequence): the first is the tuning point;
# the rest are unseen shapes, with batches and head counts that are not multiples of 8.
# Small on purpose: interpret mode runs one grid step per (sequence, head, page).
# The pool holds batch * pages_per_sequence pages in a random order; lengths are random.
SHAPES = [(4, 2, 128, 32, 2), (3, 2, 128, 16, 3), (2, 4, 64, 32, 2)]


def reference(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array, block_tables: jax.Array,
              lengths: jax.Array) -> jax.Array:
    heads, _, page_size, depth = k_pages.shape
    batch, pages = block_tables.shape
    k = k_pages[:, block_tables].reshape(heads, batch, pages * page_size, depth)
    v = v_pages[:, block_tables].reshape(heads, batch, pages * page_size, depth)
    scores = jnp.einsum("bhd,hbtd->bht", q, k) * (depth ** -0.5)
    cached = jnp.arange(pages * page_size)[None, None, :] < lengths[:, None, None]
    scores = jnp.where(cached, scores, -jnp.inf)
    return jnp.einsum("bht,hbtd->bhd", jax.nn.softmax(scores, axis=-1), v)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, ...]:
    batch, heads, depth, page_size, pages = SHAPES[shape_index]
    kq, kk, kv, kt, kl = jax.random.split(key, 5)
    pool = batch * pages
    q = jax.random.normal(kq, (batch, heads, depth), jnp.float32)
    k_pages = jax.random.normal(kk, (heads, pool, page_size, depth), jnp.float32)
    v_pages = jax.random.normal(kv, (heads, pool, page_size, depth), jnp.float32)
    block_tables = jax.random.permutation(kt, pool).astype(jnp.int32).reshape(batch, pages)
    lengths = jax.random.randint(kl, (batch,), 1, pages * page_size + 1, jnp.int32)
    return q, k_pages, v_pages, block_tables, lengths


def flops(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array, block_tables: jax.Array,
          lengths: jax.Array) -> int:
    batch, heads, depth = q.shape
    return 4 * batch * heads * block_tables.shape[1] * k_pages.shape[2] * depth
