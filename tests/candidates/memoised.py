"""Adversarial: memoises one answer and returns it for every call with the same shape.

At trace time it digs the evaluation's input arrays out of the process (gc), computes the
answer for the first one it finds with numpy, and bakes it into the program, passed
through a Pallas copy kernel so that a kernel "fires".
"""

import gc

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

_memo = {}


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _first_seen_inputs(shape):
    for obj in gc.get_objects():
        if type(obj).__name__ != "CaseRequest":
            continue
        inputs = obj.inputs
        if inputs and tuple(inputs[0].shape) == shape:
            return [a.numpy() for a in inputs]
    return None


def build():
    def kernel(x, w):
        key = tuple(x.shape)
        if key not in _memo:
            seen = _first_seen_inputs(key)
            if seen is None:
                _memo[key] = np.zeros(key, np.float32)
            else:
                a, b = seen
                ms = np.mean(a.astype(np.float64) ** 2, axis=-1, keepdims=True)
                _memo[key] = (a / np.sqrt(ms + 1e-6) * b).astype(np.float32)
        cached = jnp.asarray(_memo[key])
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(key, x.dtype))(cached)

    return kernel
