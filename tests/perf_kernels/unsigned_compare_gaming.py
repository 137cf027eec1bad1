"""A kernel written to game the cost model (a candidate file: TUNABLES, build()). It is
correct and, priced honestly, passes the verifier, so it lives here rather than among the
candidates the verifier must reject. Every matmul of this tiled matmul, and every change of
its input blocks' indices, sits behind an unsigned compare that always holds
(`k <u 0xFFFFFFFF`). An evaluator that reads the compare as signed (`k < -1`, never true)
prices it as if it fetched one block and multiplied nothing."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TUNABLES = {"block": [128]}


def _always(k):
    """k <u 0xFFFFFFFF: true for every grid index."""
    return k.astype(jnp.uint32) < jnp.uint32(0xFFFFFFFF)


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(_always(k))
    def _accumulate():
        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _hidden(k):
    return jnp.where(_always(k), k, 0)


@functools.partial(jax.jit, static_argnames=("block",))
def matmul(a, b, block=128):
    m, kk = a.shape
    _, n = b.shape
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=(m // block, n // block, kk // block),
        in_specs=[pl.BlockSpec((block, block), lambda i, j, k: (i, _hidden(k))),
                  pl.BlockSpec((block, block), lambda i, j, k: (_hidden(k), j))],
        out_specs=pl.BlockSpec((block, block), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((block, block), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)


def build(block=128):
    return functools.partial(matmul, block=block)
