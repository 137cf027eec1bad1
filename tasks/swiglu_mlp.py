"""SwiGLU MLP block: (silu(x @ w_gate) * (x @ w_up)) @ w_down, three matmuls whose
intermediate (tokens x d_ff) never needs to reach HBM."""

from __future__ import annotations

import jax
import jax.numpy as jnp

NAME = "swiglu_mlp"
# (tokens, d_model, d_ff): the first is the tuning point; the rest are unseen shapes, one
# of them with a token count that is not a multiple of 8. The tuning point has many tokens
# per weight: a kernel that keeps the weights in VMEM fetches them once, before its first
# step, and that fetch is only paid back over many row blocks (at 256 tokens it capped the
# kernel near 0.78x of XLA, simulated). It runs once against the oracle; the seeds and
# probes repeat at the larger unseen shape.
SHAPES = [(8192, 256, 1024), (100, 128, 384), (64, 384, 512)]


def reference(x: jax.Array, w_gate: jax.Array, w_up: jax.Array, w_down: jax.Array) -> jax.Array:
    gate = jnp.dot(x, w_gate, preferred_element_type=jnp.float32)
    up = jnp.dot(x, w_up, preferred_element_type=jnp.float32)
    return jnp.dot(jax.nn.silu(gate) * up, w_down, preferred_element_type=jnp.float32)


def make_inputs(key: jax.Array, shape_index: int = 0) -> tuple[jax.Array, ...]:
    tokens, d_model, d_ff = SHAPES[shape_index]
    kx, kg, ku, kd = jax.random.split(key, 4)
    x = jax.random.normal(kx, (tokens, d_model), jnp.float32)
    w_gate = jax.random.normal(kg, (d_model, d_ff), jnp.float32) / jnp.sqrt(jnp.float32(d_model))
    w_up = jax.random.normal(ku, (d_model, d_ff), jnp.float32) / jnp.sqrt(jnp.float32(d_model))
    w_down = jax.random.normal(kd, (d_ff, d_model), jnp.float32) / jnp.sqrt(jnp.float32(d_ff))
    return x, w_gate, w_up, w_down


def flops(x: jax.Array, w_gate: jax.Array, w_up: jax.Array, w_down: jax.Array) -> int:
    tokens, d_model = x.shape
    return 6 * tokens * d_model * w_gate.shape[1]
