"""Softmax cross-entropy with integer labels, one loss per row: logsumexp over the vocabulary
minus the logit of the label (a gather along the last axis)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "cross_entropy"
# (rows, vocab): the first is the tuning point; the rest are unseen shapes, one with a row
# count that is not a multiple of 128 (rows lie along lanes in the loss vector) and one
# with a vocabulary that is not a multiple of 128.
SHAPES = [(512, 2048), (200, 1000), (128, 4096)]


def reference(logits: jax.Array, labels: jax.Array) -> jax.Array:
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return logz - picked


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, jax.Array]:
    rows, vocab = SHAPES[shape_index]
    kl, ky = jax.random.split(key)
    logits = 2.0 * jax.random.normal(kl, (rows, vocab), jnp.float32)
    labels = jax.random.randint(ky, (rows,), 0, vocab, jnp.int32)
    return logits, labels


def flops(logits: jax.Array, labels: jax.Array) -> int:
    return 4 * logits.size
