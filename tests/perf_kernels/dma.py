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


def _cross_step_kernel(x_hbm, o_ref, buf, sem):
    """One chunk per grid step: step i starts chunk i + 1's copy, then waits for its own
    (started by step i - 1, or by step 0 itself for chunk 0)."""
    i, n = pl.program_id(0), pl.num_programs(0)

    def copy(c, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(c * CHUNK, CHUNK)], buf.at[slot], sem.at[slot])

    @pl.when(i == 0)
    def _first():
        copy(0, 0).start()

    @pl.when(i + 1 < n)
    def _next():
        copy(i + 1, (i + 1) % 2).start()

    copy(i, i % 2).wait()
    o_ref[...] = jnp.tanh(buf[i % 2]) * 2.0


def _twice_kernel(x_hbm, o_ref, buf, sem):
    """The same copy started twice on one semaphore, then waited for twice: which wait
    takes which start cannot be told."""
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, CHUNK)], buf.at[0], sem.at[0])
    copy.start()
    copy.start()
    copy.wait()
    o_ref[...] = jnp.tanh(buf[0]) * 2.0
    copy.wait()


@jax.jit
def cross_step(x: jax.Array) -> jax.Array:
    return pl.pallas_call(
        _cross_step_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // CHUNK,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((CHUNK, x.shape[1]), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((2, CHUNK, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA((2,))],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(x)


@jax.jit
def started_twice(x: jax.Array) -> jax.Array:
    return pl.pallas_call(
        _twice_kernel,
        out_shape=jax.ShapeDtypeStruct((CHUNK, x.shape[1]), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, CHUNK, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x)


def _late_start_kernel(x_hbm, o_ref, buf, sem):
    """Double-buffered in name only: chunk c + 1's copy starts after chunk c's compute, at
    the end of the trip, and is waited for first thing in the next trip: nothing between."""
    n = x_hbm.shape[0] // CHUNK

    def copy(c, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(c * CHUNK, CHUNK)], buf.at[slot], sem.at[slot])

    copy(0, 0).start()

    def body(c, carry):
        slot = c % 2
        copy(c, slot).wait()
        o_ref[pl.ds(c * CHUNK, CHUNK), :] = jnp.tanh(buf[slot]) * 2.0

        @pl.when(c + 1 < n)
        def _next():
            copy(c + 1, 1 - slot).start()

        return carry

    jax.lax.fori_loop(0, n, body, 0)


def _scoped_kernel(x_hbm, o_ref, *, overlap: bool):
    """The copy's buffer and semaphore live in a `pl.run_scoped` region; the wait sits in
    a nested region, after the compute (`overlap`) or before it."""

    def body(buf, sem):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, CHUNK)], buf, sem)
        copy.start()
        if overlap:
            o_ref[...] = jnp.tanh(o_ref[...]) * 2.0
        pl.run_scoped(lambda _: copy.wait(), pltpu.VMEM((8, 128), jnp.float32))
        o_ref[...] = jnp.tanh(buf[...]) * 2.0 + o_ref[...]

    pl.run_scoped(body, pltpu.VMEM((CHUNK, 1024), jnp.float32), pltpu.SemaphoreType.DMA(()))


@jax.jit
def late_start(x: jax.Array) -> jax.Array:
    return pl.pallas_call(
        _late_start_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, CHUNK, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x)


@functools.partial(jax.jit, static_argnames=("overlap",))
def scoped(x: jax.Array, *, overlap: bool) -> jax.Array:
    return pl.pallas_call(
        functools.partial(_scoped_kernel, overlap=overlap),
        out_shape=jax.ShapeDtypeStruct((CHUNK, 1024), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
    )(x)


def _unwaited_kernel(x_hbm, o_ref, buf, sem, *, wait: bool):
    """Start the copy and compute on its buffer; without `wait` nothing ever waits for it
    (interpret mode copies at once, so the result is right there; the chip races)."""
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, CHUNK)], buf.at[0], sem.at[0])
    copy.start()
    if wait:
        copy.wait()
    o_ref[...] = jnp.tanh(buf[0]) * 2.0


@functools.partial(jax.jit, static_argnames=("wait",))
def unwaited(x: jax.Array, *, wait: bool) -> jax.Array:
    return pl.pallas_call(
        functools.partial(_unwaited_kernel, wait=wait),
        out_shape=jax.ShapeDtypeStruct((CHUNK, x.shape[1]), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, CHUNK, x.shape[1]), x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x)
