"""Rotary position embedding, then a matmul, written as model code writes it: the rotation
splits the last axis in Python halves (`x[..., :depth // 2]`) and builds the angles from
Python sizes; traced with the other sizes symbolic it does not write out as a kernel body, so
each shape gets a body with every size concrete."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "rope_matmul"
SHAPES = [((2, 64, 32), (32, 16)), ((2, 32, 16), (16, 16))]  # x (batch, seq, depth), w


def reference(x, w):
    seq, depth = x.shape[1], x.shape[2]
    half = depth // 2
    pos = jnp.arange(seq, dtype=jnp.float32)
    freqs = 1.0 / (10000.0 ** (jnp.arange(0, depth, 2, dtype=jnp.float32) / depth))
    ang = jnp.outer(pos, freqs)
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    y = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return jnp.dot(y, w)


def make_inputs(key, shape_index=0):
    a, b = SHAPES[shape_index]
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, a, jnp.float32), jax.random.normal(k2, b, jnp.float32)
