"""A JAXBench-style task with 24 active sequences fixed in Python, padded to the configured
batch, and features split into heads of 16: a batch below 24 cannot be padded and features
below 16 cannot be split. Each entry scaled alone breaks the task, so none can be kept at
full size instead, and no factor within reach of 0.0625 holds: the refusal names the
smallest that does (0.375: 24 sequences, 16 features)."""
import jax
import jax.numpy as jnp

CONFIG = {'name': 'fixed_batch', 'max_seqs': 64, 'emb_dim': 32}
ACTIVE = 24


def create_inputs(dtype=jnp.float32):
    x = jax.random.normal(jax.random.key(0), (ACTIVE, 8, CONFIG['emb_dim']), dtype)
    return (jnp.pad(x, ((0, CONFIG['max_seqs'] - ACTIVE), (0, 0), (0, 0))),)


def workload(x):
    heads = x.reshape(x.shape[0], x.shape[1], x.shape[2] // 16, 16)
    return jnp.tanh(heads).sum(-1)
