"""A JAXBench-style task whose group count is fixed in the workload: channels must stay a
multiple of 16, which --scale 0.125 (64 -> 8 channels) breaks and 0.1875 (-> 16) keeps."""
import jax
import jax.numpy as jnp

CONFIG = {'name': 'groupnorm_fixed_groups', 'batch_size': 64, 'channels': 64, 'width': 64}


def create_inputs(dtype=jnp.float32):
    key = jax.random.key(0)
    x = jax.random.normal(key, (CONFIG['batch_size'], CONFIG['channels'], CONFIG['width']),
                          dtype=dtype)
    gamma = jnp.ones((CONFIG['channels'],), dtype=dtype)
    return x, gamma


def workload(x, gamma):
    groups = 16
    n, c, w = x.shape
    g = x.reshape(n, groups, c // groups, w)
    mean = jnp.mean(g, axis=(2, 3), keepdims=True)
    var = jnp.var(g, axis=(2, 3), keepdims=True)
    y = ((g - mean) / jnp.sqrt(var + 1e-5)).reshape(n, c, w)
    return y * gamma[None, :, None]
