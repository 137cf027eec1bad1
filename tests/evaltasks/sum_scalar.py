"""A reduction to a 0-d scalar with a 0-d input: the reference returns shape (), as a loss
does (JAXBench 13p_Cross_Entropy returns a mean). Both must cross every evaluation path as
shape (), never (1,)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "sum_scalar"
SHAPES = [(256, 256), (128, 256), (64, 512)]


def reference(x, scale):
    return jnp.sum(x) * scale


def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    kx, ks = jax.random.split(key)
    return (jax.random.normal(kx, (rows, cols), jnp.float32),
            1.0 + jax.random.uniform(ks, (), jnp.float32))
