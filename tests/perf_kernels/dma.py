"""Manual-DMA kernels: the same copy-and-scale done serially (start; wait; compute) and
double-buffered (start the next chunk, compute this one, then wait)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK = 512


def _serial_kernel(x_hbm, o_ref, buf, sem):
    n = x_hbm.shape[0] // CHUNK

    def body(c, carry):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(c * CHUNK, CHUNK)], buf.at[0], sem.at[0])
        copy.start()
        copy.wait()
        o_ref[pl.ds(c * CHUNK, CHUNK), :] = jnp.tanh(buf[0]) * 2.0
        return carry

    jax.lax.fori_loop(0, n, body, 0)


def _pipelined_kernel(x_hbm, o_ref, buf, sem):
    n = x_hbm.shape[0] // CHUNK

    def copy(c, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(c * CHUNK, CHUNK)], buf.at[slot], sem.at[slot])

    copy(0, 0).start()

    def body(c, carry):
        slot = c % 2

        @pl.when(c + 1 < n)
        def _next():
            copy(c + 1, 1 - slot).start()

        copy(c, slot).wait()
        o_ref[pl.ds(c * CHUNK, CHUNK), :] = jnp.tanh(buf[slot]) * 2.0
        return carry

    jax.lax.fori_loop(0, n, body, 0)


@functools.partial(jax.jit, static_argnames=("pipelined",))
def scale_tanh(x: jax.Array, *, pipelined: bool) -> jax.Array:
    return pl.pallas_call(
        _pipelined_kernel if pipelined else _serial_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, CHUNK, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x)
