"""Adversarial: a correct RMSNorm that never finishes on large inputs (the magnitude probe).

Every other case returns at once; on the one whose finite inputs exceed 100 in magnitude a loop
that counts until float32 stops changing spins forever. Without a per-case limit it holds the
sandbox for the whole wall limit.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def build():
    def kernel(x, w):
        rows, hidden = x.shape
        out = pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,),
            in_specs=[pl.BlockSpec((rows, hidden), lambda i: (0, 0)),
                      pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((rows, hidden), lambda i: (0, 0)),
        )(x, w.reshape(1, hidden))
        finite = jnp.where(jnp.isfinite(x), jnp.abs(x), 0.0)  # the probe, not the NaN/inf case
        large = jnp.max(finite) > 100.0
        # counts up until float32 stops changing (2**24), then forever: XLA cannot fold it
        spins = jax.lax.while_loop(lambda c: jnp.logical_and(large, c >= 0.0),
                                   lambda c: c + 1.0, jnp.float32(0.0))
        return out + jnp.where(spins < 0, 1.0, 0.0)

    return kernel
