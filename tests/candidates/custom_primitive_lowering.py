"""Adversarial: a new primitive whose cpu lowering does the math and whose tpu lowering is a copy."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.extend.core import Primitive
from jax.interpreters import mlir

_p = Primitive("layout_hint")


def _math(x, w):
    ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(ms + 1e-6) * w


_p.def_impl(_math)
_p.def_abstract_eval(lambda x, w: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(_p, mlir.lower_fun(_math, multiple_results=False), platform="cpu")
mlir.register_lowering(_p, mlir.lower_fun(lambda x, w: x, multiple_results=False),
                       platform="tpu")


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def build():
    def kernel(x, w):
        y = _p.bind(x, w)
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)

    return kernel
