"""Adversarial (speed lie): GELU whose input arrives by a manual DMA that is waited for at
once, but inside a `pl.when` that always holds. Nothing runs between the start and the
wait, so the transfer is exposed exactly as in `serial_twin` (start; wait); a model that
pairs only waits in the start's own region took it for overlapped with the compute."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _kernel(x_hbm, o_ref, buf, sem, *, hide: bool):
    copy = pltpu.make_async_copy(x_hbm, buf, sem.at[0])
    copy.start()
    if hide:
        @pl.when(pl.program_id(0) >= 0)  # always true
        def _wait():
            copy.wait()
    else:
        copy.wait()
    o_ref[...] = _gelu(buf[...])


def _call(x, *, hide: bool):
    import functools

    return pl.pallas_call(
        functools.partial(_kernel, hide=hide),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(x.shape, lambda i: (0, 0)),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA((1,))],
    )(x)


def build():
    return jax.jit(lambda x: _call(x, hide=True))


def serial_twin():
    """The same kernel with the wait in place: what the candidate really costs."""
    return jax.jit(lambda x: _call(x, hide=False))
