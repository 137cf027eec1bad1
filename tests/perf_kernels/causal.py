"""Causal flash attention, one head: key/value blocks wholly above the diagonal are skipped
with `pl.when` on program ids, and their index map is clamped to the last block the query
block needs, so the pipeline does not fetch them either."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, bq: int, bkv: int):
    qi, kj = pl.program_id(0), pl.program_id(1)

    @pl.when(kj == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(kj * bkv <= qi * bq + bq - 1)
    def _step():
        s = jnp.dot(q_ref[...], k_ref[...].T, preferred_element_type=jnp.float32)
        rows = qi * bq + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = kj * bkv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(cols <= rows, s, -jnp.inf)
        m_new = jnp.maximum(m_ref[...], s.max(axis=-1, keepdims=True))
        p = jnp.exp(s - m_new)
        scale = jnp.exp(m_ref[...] - m_new)
        l_ref[...] = scale * l_ref[...] + p.sum(axis=-1, keepdims=True)
        acc_ref[...] = scale * acc_ref[...] + jnp.dot(p.astype(v_ref.dtype), v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(kj == pl.num_programs(1) - 1)
    def _finish():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("bq", "bkv"))
def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, bq: int = 128,
                     bkv: int = 128) -> jax.Array:
    """`q`, `k`, `v`: (seq, head_dim)."""
    seq, d = q.shape

    def kv_map(qi, kj):
        return (jnp.minimum(kj, (qi * bq + bq - 1) // bkv), 0)

    return pl.pallas_call(
        functools.partial(_kernel, bq=bq, bkv=bkv),
        grid=(seq // bq, seq // bkv),
        in_specs=[pl.BlockSpec((bq, d), lambda qi, kj: (qi, 0)),
                  pl.BlockSpec((bkv, d), kv_map), pl.BlockSpec((bkv, d), kv_map)],
        out_specs=pl.BlockSpec((bq, d), lambda qi, kj: (qi, 0)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                        pltpu.VMEM((bq, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(q, k, v)
