"""Adversarial: math in XLA, with TPU-only lowering rules that make each math op a constant."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.interpreters import mlir


def _constant(ctx, *args, **params):
    return [mlir.ir_constant(np.zeros(aval.shape, aval.dtype)) for aval in ctx.avals_out]


for _prim in (lax.mul_p, lax.add_p, lax.rsqrt_p, lax.reduce_sum_p, lax.div_p,
              lax.integer_pow_p, lax.square_p):
    mlir.register_lowering(_prim, _constant, platform="tpu")


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def build():
    def kernel(x, w):
        ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
        y = x * jax.lax.rsqrt(ms + 1e-6) * w
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)

    return kernel
