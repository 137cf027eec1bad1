"""A JAXBench-style task with its active sequences and their lengths fixed in Python (24
sequences of 200 tokens, as a serving step fixes its batch), padded to the configured batch:
a batch below 24 cannot be padded, and the lengths mean the same only over the whole
sequence, so --scale 0.125 keeps the batch and the sequence at full size."""
import jax
import jax.numpy as jnp

CONFIG = {'name': 'fixed_sequences', 'max_seqs': 32, 'seq_len': 256, 'emb_dim': 16}
ACTIVE = 24
LENGTH = 200


def create_inputs(dtype=jnp.float32):
    x = jax.random.normal(jax.random.key(0), (CONFIG['max_seqs'], CONFIG['seq_len'],
                                              CONFIG['emb_dim']), dtype)
    lengths = jnp.pad(jnp.full((ACTIVE,), LENGTH, jnp.int32), (0, CONFIG['max_seqs'] - ACTIVE))
    return x, lengths


def workload(x, lengths):
    mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
    return jnp.where(mask[..., None], x, 0.0)
