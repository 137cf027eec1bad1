"""Over budget in its body, not its blocks: the single-block matmul upcasts both operands to
f32 inside the kernel under a 768 KiB VMEM limit. The bf16 blocks (640 KiB at 256x512x256)
fit; the (256, 512) f32 copy of `a` spills 256 KiB past the vregs, so no chip compiles it."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, b_ref, o_ref):
    a = a_ref[...].astype(jnp.float32)
    b = b_ref[...].astype(jnp.float32)
    o_ref[...] = jnp.dot(a, b, preferred_element_type=jnp.float32).astype(o_ref.dtype)


@jax.jit
def matmul(a, b):
    m, _ = a.shape
    _, n = b.shape
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=768 * 1024),
    )(a, b)


def build():
    return matmul
