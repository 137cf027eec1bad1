"""A JAXBench-style task whose LayerNorm weight is sized by one entry and whose normalised
axis by another (twice the width): rounding each to a multiple of 8 on its own breaks the
tie at --scale 0.125 (width 32 -> 8, so 16 wide; features 64 -> 8)."""
import jax
import jax.numpy as jnp

CONFIG = {'name': 'layernorm_tied_sizes', 'batch_size': 32, 'width': 32, 'features': 64}


def create_inputs(dtype=jnp.float32):
    key = jax.random.key(0)
    x = jax.random.normal(key, (CONFIG['batch_size'], CONFIG['width']), dtype=dtype)
    weight = jnp.ones((CONFIG['features'],), dtype=dtype)
    return x, weight


def workload(x, weight):
    wide = jnp.concatenate([x, x * 2.0], axis=-1)  # 2 * width == features at full size
    mean = jnp.mean(wide, axis=-1, keepdims=True)
    var = jnp.mean((wide - mean) ** 2, axis=-1, keepdims=True)
    return (wide - mean) / jnp.sqrt(var + 1e-5) * weight
