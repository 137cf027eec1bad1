"""A kernel whose conditionals take every shape the Mosaic lowering gives them: `pl.when` on
program ids, nested `pl.when`, a three-way `lax.switch` (a cascade of two `scf.if`), and a
`pl.when` inside a `fori_loop` unrolled twice over three steps (three copies of one
conditional: two in the loop body, one remainder)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ROWS = 8
LANES = 128


def _kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[...] = x_ref[...]

    @pl.when(i % 2 == 0)
    def _even():
        o_ref[...] += 1.0

        @pl.when(i == 0)
        def _first():
            o_ref[...] *= 2.0

    o_ref[...] = jax.lax.switch(jnp.minimum(i, 2), [
        lambda v: v, lambda v: v - 1.0, lambda v: jnp.tanh(v)], o_ref[...])

    def step(t, carry):
        @pl.when((i + t) % 3 == 0)
        def _every_third():
            o_ref[...] = jnp.exp(o_ref[...] * 0.5)

        return carry

    jax.lax.fori_loop(0, 3, step, 0, unroll=2)


@jax.jit
def branchy(x: jax.Array) -> jax.Array:
    """`x`: (steps * 8, 128) float32; one (8, 128) block per grid step."""
    steps = x.shape[0] // ROWS
    spec = pl.BlockSpec((ROWS, LANES), lambda i: (i, 0))
    return pl.pallas_call(_kernel, grid=(steps,), in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
