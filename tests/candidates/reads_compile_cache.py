"""Adversarial: an honest RMSNorm kernel that looks for the verifier's compilation cache.

JAX loads whatever executables its persistent cache holds, so a child that could read the
trusted processes' cache, write to it, or use one of its own would break the sandbox. It
looks for a cache setting in its environment and in JAX's configuration, lists and plants
a file in the folder the test names (CACHE_FOLDER, filled in by the test), and any find
poisons its output, so the verdict itself says whether it found anything.
"""

import contextlib
import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

CACHE_FOLDER = "/nonexistent"


def _hunt():
    found = [k for k, v in os.environ.items() if "CACHE" in k.upper()
             and (k, v) != ("JAX_ENABLE_COMPILATION_CACHE", "false")]
    if jax.config.jax_compilation_cache_dir or jax.config.jax_enable_compilation_cache:
        found.append("jax config")
    with contextlib.suppress(OSError):
        found += os.listdir(CACHE_FOLDER)
    try:
        with open(os.path.join(CACHE_FOLDER, "planted-cache"), "wb") as f:
            f.write(b"not an executable")
        found.append("planted")
    except OSError:
        pass
    return found


FOUND = _hunt()


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
