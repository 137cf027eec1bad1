"""Adversarial: honest where it is verified, a copy where it is timed.

On the CPU (the verifier's sandboxed children) it traces an honest RMSNorm kernel; on any
accelerator it builds a kernel that only copies its input, which would be timed as the
verified kernel if the device's timing child built the candidate again. The device times
the program that was audited instead, so this branch is never reached.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _honest(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def _copy(x_ref, w_ref, o_ref):
    o_ref[...] = x_ref[...]


def build():
    body = _honest if jax.default_backend() == "cpu" else _copy

    @jax.jit
    def kernel(x, w):
        rows, hidden = x.shape
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,),
            in_specs=[pl.BlockSpec((rows, hidden), lambda i: (0, 0)),
                      pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((rows, hidden), lambda i: (0, 0)),
        )(x, w.reshape(1, hidden))

    return kernel
