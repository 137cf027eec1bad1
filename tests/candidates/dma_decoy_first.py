"""Adversarial (speed lie): GELU whose input arrives by a manual DMA waited for at once,
after a small decoy DMA started first and waited for after the compute. Paired first-in
first-out, the input's wait took the decoy's start (a few bytes exposed) and the decoy's
wait took the input's (overlapped with the compute); each wait names its own semaphore and
buffers, so the input's transfer is exposed exactly as in `serial_twin` (start; wait)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _kernel(x_hbm, o_ref, buf, decoy_buf, sem, *, decoy: bool):
    real = pltpu.make_async_copy(x_hbm, buf, sem.at[0])
    fake = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 1)], decoy_buf, sem.at[1]) if decoy else None
    if fake is not None:
        fake.start()
    real.start()
    real.wait()
    o_ref[...] = _gelu(buf[...])
    if fake is not None:
        fake.wait()


def _call(x, *, decoy: bool):
    return pl.pallas_call(
        functools.partial(_kernel, decoy=decoy),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(x.shape, lambda i: (0, 0)),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM((1, x.shape[1]), x.dtype),
                        pltpu.SemaphoreType.DMA((2,))],
    )(x)


def build():
    return jax.jit(functools.partial(_call, decoy=True))


def serial_twin():
    """The input's DMA alone, waited for in place: what the candidate really costs."""
    return jax.jit(functools.partial(_call, decoy=False))
