"""Adversarial: makes every comparison function say "equal", then returns its input."""

import jax
import jax.numpy as jnp
import numpy as np
import numpy.testing
from jax.experimental import pallas as pl

np.allclose = lambda *args, **kwargs: True
np.array_equal = lambda *args, **kwargs: True
np.isclose = lambda a, b, *args, **kwargs: np.ones(np.shape(a), bool)
numpy.testing.assert_allclose = lambda *args, **kwargs: None
jnp.allclose = lambda *args, **kwargs: True


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def build():
    def kernel(x, w):
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return kernel
