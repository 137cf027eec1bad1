"""A JAXBench-style paged task whose lengths, query starts and page table are fixed in
Python (a serving step): they keep their meaning only where the tokens and the page size
stay whole, so --scale 0.125 keeps those two at full size and shrinks heads and depth."""
import jax
import jax.numpy as jnp

CONFIG = {'name': 'fixed_pages', 'tokens': 64, 'seqs': 4, 'heads': 32, 'head_dim': 64,
          'page_size': 16, 'pages_per_seq': 4}
LENGTHS = (17, 33, 64, 5)
STARTS = (0, 16, 32, 63)


def create_inputs(dtype=jnp.float32):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    pages = CONFIG['seqs'] * CONFIG['pages_per_seq']
    q = jax.random.normal(k1, (CONFIG['tokens'], CONFIG['heads'], CONFIG['head_dim']), dtype)
    kv = jax.random.normal(k2, (pages, CONFIG['page_size'], CONFIG['heads'],
                                CONFIG['head_dim']), dtype)
    table = jax.random.permutation(k3, pages).astype(jnp.int32).reshape(CONFIG['seqs'], -1)
    return q, kv, jnp.array(LENGTHS, jnp.int32), table, jnp.array(STARTS, jnp.int32)


def workload(q, kv, lengths, table, starts):
    out = []
    for i in range(len(LENGTHS)):
        cached = kv[table[i]].reshape(-1, q.shape[1], q.shape[2])
        mask = jnp.arange(cached.shape[0]) < lengths[i]
        out.append((jnp.where(mask[:, None, None], cached, 0.0) * q[starts[i]]).sum(0))
    return jnp.stack(out)
