"""A serving step of mixed prefill and decode over a paged cache, JAXBench style and small:
three one-token decodes and two prefill chunks share one packed query buffer, keys and values
share each page (K at even combined heads, V at odd), and three of the eight sequence slots
are inactive. Query and key lengths are fixed in Python; the page table is a permutation."""
import jax
import jax.numpy as jnp

CONFIG = {'name': 'ragged_mixed', 'max_tokens': 64, 'max_seqs': 8, 'heads': 4, 'kv_heads': 2,
          'head_dim': 32, 'page_size': 16, 'pages_per_seq': 4}
Q_LENS = (1, 1, 1, 20, 17)
KV_LENS = (5, 33, 64, 40, 17)


def create_inputs(dtype=jnp.bfloat16):
    kq, kp, kt = jax.random.split(jax.random.key(7), 3)
    pool = CONFIG['max_seqs'] * CONFIG['pages_per_seq']
    queries = jax.random.normal(kq, (CONFIG['max_tokens'], CONFIG['heads'], CONFIG['head_dim']), dtype)
    kv_pages = jax.random.normal(kp, (pool, CONFIG['page_size'], 2 * CONFIG['kv_heads'],
                                      CONFIG['head_dim']), dtype)
    idle = CONFIG['max_seqs'] - len(Q_LENS)
    kv_lens = jnp.array(KV_LENS + (0,) * idle, jnp.int32)
    ends = jnp.cumsum(jnp.array(Q_LENS, jnp.int32))
    cu_q_lens = jnp.concatenate([jnp.zeros(1, jnp.int32), ends, jnp.full(idle, ends[-1], jnp.int32)])
    page_indices = jax.random.permutation(kt, pool).astype(jnp.int32).reshape(CONFIG['max_seqs'], -1)
    return queries, kv_pages, kv_lens, page_indices, cu_q_lens, jnp.array([len(Q_LENS)], jnp.int32)


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    _, heads, depth = queries.shape
    kv_heads = kv_pages.shape[2] // 2
    out = jnp.zeros_like(queries)
    for i, rows in enumerate(Q_LENS):
        pages = kv_pages[page_indices[i]]
        keys = pages[:, :, 0::2].reshape(-1, kv_heads, depth)
        values = pages[:, :, 1::2].reshape(-1, kv_heads, depth)
        start, q_len = cu_q_lens[i], cu_q_lens[i + 1] - cu_q_lens[i]
        q = jax.lax.dynamic_slice_in_dim(queries, start, rows).reshape(
            rows, kv_heads, heads // kv_heads, depth)
        scores = jnp.einsum('rkgd,tkd->kgrt', q, keys, preferred_element_type=jnp.float32)
        scores = scores * depth ** -0.5
        frontier = kv_lens[i] - q_len + jnp.arange(rows)
        key = jnp.arange(keys.shape[0])
        seen = (key[None, :] <= frontier[:, None]) & (key[None, :] < kv_lens[i])
        weights = jax.nn.softmax(jnp.where(seen, scores, -1e30), axis=-1).astype(values.dtype)
        o = jnp.einsum('kgrt,tkd->rkgd', weights, values).reshape(rows, heads, depth)
        o = jnp.where(i < num_seqs[0], o, jnp.zeros_like(o))
        out = jax.lax.dynamic_update_slice_in_dim(out, o.astype(out.dtype), start, 0)
    return out
