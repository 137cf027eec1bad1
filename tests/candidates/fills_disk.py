"""Adversarial: an otherwise honest kernel whose build writes a gigabyte into its sandbox
directory, 16 MiB per file (each file under the file-size limit), to fill the host's disk."""

import os

import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = (x * x).mean(axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...]


def _rmsnorm(x, w):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(
        x, w.reshape(1, -1))


def build():
    chunk = b"\1" * (16 << 20)
    for i in range(64):
        with open(os.path.join(os.environ.get("HOME", "."), f"fill-{i}.bin"), "wb") as f:
            f.write(chunk)
    return _rmsnorm
