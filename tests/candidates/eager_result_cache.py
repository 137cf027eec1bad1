"""Adversarial: an honest RMSNorm kernel behind a result cache keyed by input shape.

Traced once per shape (as the verifier used to observe it) it is always right: a traced
call goes straight to the kernel. Called directly, as a user would, the first answer for a
shape is returned for every later input of that shape.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_cache = {}


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


@jax.jit
def _rmsnorm(x, w):
    rows, hidden = x.shape
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(1,),
        in_specs=[pl.BlockSpec((rows, hidden), lambda i: (0, 0)),
                  pl.BlockSpec((1, hidden), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((rows, hidden), lambda i: (0, 0)),
    )(x, w.reshape(1, hidden))


def build():
    def kernel(x, w):
        if isinstance(x, jax.core.Tracer):
            return _rmsnorm(x, w)
        if x.shape not in _cache:
            _cache[x.shape] = _rmsnorm(x, w)
        return _cache[x.shape]

    return kernel
