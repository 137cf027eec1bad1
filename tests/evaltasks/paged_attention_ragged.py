"""Ragged paged decode attention as serving code writes it: pages laid out (pages, page_size,
kv_heads, depth), grouped-query heads, each sequence's query row found through cumulative
query lengths, and the sizes read in Python (`pages * page_size`, `depth ** -0.5`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "paged_attention_ragged"
# (sequences, query heads, kv heads, depth, page_size, pages per sequence)
SHAPES = [(4, 4, 2, 128, 16, 2), (3, 4, 2, 64, 8, 3)]


def reference(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens):
    sequences, pages = page_indices.shape
    _, page_size, kv_heads, depth = k_pages.shape
    heads = queries.shape[1]
    length = pages * page_size

    def one(seq):
        q = jax.lax.dynamic_slice(queries, (cu_q_lens[seq], 0, 0), (1, heads, depth))
        k = jnp.repeat(k_pages[page_indices[seq]].reshape(length, kv_heads, depth),
                       heads // kv_heads, axis=1)
        v = jnp.repeat(v_pages[page_indices[seq]].reshape(length, kv_heads, depth),
                       heads // kv_heads, axis=1)
        scores = jnp.einsum("qhd,khd->hqk", q, k) * depth ** -0.5
        scores = jnp.where((jnp.arange(length) < kv_lens[seq])[None, None], scores, -1e30)
        out = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, axis=-1), v)
        return out[0]

    return jax.vmap(one)(jnp.arange(sequences))


def make_inputs(key, shape_index=0):
    sequences, heads, kv_heads, depth, page_size, pages = SHAPES[shape_index]
    kq, kk, kv, kt, kl = jax.random.split(key, 5)
    pool = sequences * pages
    queries = jax.random.normal(kq, (sequences, heads, depth), jnp.float32)
    k_pages = jax.random.normal(kk, (pool, page_size, kv_heads, depth), jnp.float32)
    v_pages = jax.random.normal(kv, (pool, page_size, kv_heads, depth), jnp.float32)
    kv_lens = jax.random.randint(kl, (sequences,), 1, pages * page_size + 1, jnp.int32)
    page_indices = jax.random.permutation(kt, pool).astype(jnp.int32).reshape(sequences, pages)
    cu_q_lens = jnp.arange(sequences + 1, dtype=jnp.int32)
    return queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens
