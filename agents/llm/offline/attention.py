"""Flash-style attention: softmax(q k^T * scale) v with an online softmax over KV blocks.

Leading axes (batch, heads) are merged into one `parallel` grid axis outside the kernel
(a reshape, a layout op); q blocks are `parallel`, KV blocks `arbitrary` (running max, sum
and f32 accumulator in VMEM scratch). Grouped-query attention needs no copy of K and V:
the K/V index map sends query head h to key/value head h // (q_heads / kv_heads). Causal: KV blocks wholly above the diagonal are
skipped with `pl.when` and their index map is clamped, so they are not fetched either.
A KV tail (length not a multiple of the block) is masked.
"""

from __future__ import annotations

from typing import Any

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    SUBLANES,
    aligned,
    aligned_tunables,
    header,
    sublane_tile,
    tunables_literal,
)


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    del chip
    q = facts.args[facts.detail["q"]].shape
    k = facts.args[facts.detail["k"]].shape
    block_q = min(512, -(-q[-2] // SUBLANES) * SUBLANES)
    block_kv = min(512, -(-k[-2] // SUBLANES) * SUBLANES)
    return {"block_q": block_q, "block_kv": block_kv}


_TEMPLATE = '''
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def _kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, scale, block_q, block_kv,
            kv_len):
    qi, kj = pl.program_id(1), pl.program_id(2)

    @pl.when(kj == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def _step():
        q = q_ref[...].astype(jnp.float32) * scale
        s = lax.dot_general(q, k_ref[...].astype(jnp.float32), (((1,), (1,)), ((), ())),
                            preferred_element_type=jnp.float32)
        if CAUSAL or kv_len % block_kv:
            cols = kj * block_kv + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            valid = cols < kv_len
            if CAUSAL:
                rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
                valid = jnp.logical_and(valid, cols <= rows)
            s = jnp.where(valid, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        v = v_ref[...].astype(jnp.float32)
        if kv_len % block_kv:  # V rows past kv_len hold anything, and 0 x NaN is NaN
            v_pos = kj * block_kv + lax.broadcasted_iota(jnp.int32, v.shape, 0)
            v = jnp.where(v_pos < kv_len, v, 0.0)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p, v, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    if CAUSAL:
        pl.when(kj * block_kv <= qi * block_q + block_q - 1)(_step)
    else:
        _step()

    @pl.when(kj == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_q", "block_kv"))
def %NAME%(%ARGS%, *, block_q: int = %BQ%, block_kv: int = %BKV%):
    q, k, v = %Q%, %K%, %V%
    if (q.ndim not in (3, 4) or k.shape != v.shape or k.ndim != q.ndim
            or q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]):
        raise ValueError(f"{q.shape=}, {k.shape=}, {v.shape=} are not attention operands")
    q_heads, kv_heads = (q.shape[-3], k.shape[-3]) if q.ndim == 4 else (1, 1)
    if q.ndim == 3 and q.shape[0] != k.shape[0] or q_heads % kv_heads:
        raise ValueError(f"{q.shape=} and {k.shape=}: query heads must be a multiple of kv heads")
    if block_q % SUBLANES or block_kv % SUBLANES:
        raise ValueError(f"{block_q=} and {block_kv=} must be multiples of {SUBLANES}")
    lead, (q_len, depth), kv_len = q.shape[:-2], q.shape[-2:], k.shape[-2]
    groups, kv_groups = int(np.prod(lead)), int(np.prod(k.shape[:-2]))
    repeat = q_heads // kv_heads  # query head h reads key/value head h // repeat
    bq = q_len if q_len <= block_q else block_q
    bkv = kv_len if kv_len <= block_kv else block_kv
    q3 = q.reshape(groups, q_len, depth)
    k3, v3 = k.reshape(kv_groups, kv_len, depth), v.reshape(kv_groups, kv_len, depth)

    def kv_index(g, i, j):
        if CAUSAL:  # a block above the diagonal repeats the last needed one: no new fetch
            j = jnp.minimum(j, (i * bq + bq - 1) // bkv)
        return ((g // q_heads) * kv_heads + (g % q_heads) // repeat, j, 0)
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float(%SCALE%), block_q=bq, block_kv=bkv, kv_len=kv_len),
        out_shape=jax.ShapeDtypeStruct(q3.shape, q.dtype),
        grid=(groups, pl.cdiv(q_len, bq), pl.cdiv(kv_len, bkv)),
        in_specs=[
            pl.BlockSpec((None, bq, depth), lambda g, i, j: (g, i, 0)),
            pl.BlockSpec((None, bkv, depth), kv_index),
            pl.BlockSpec((None, bkv, depth), kv_index),
        ],
        out_specs=pl.BlockSpec((None, bq, depth), lambda g, i, j: (g, i, 0)),
        scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                        pltpu.VMEM((bq, depth), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q3, k3, v3)
    return out.reshape(q.shape)


def build(block_q: int = %BQ%, block_kv: int = %BKV%):
    return functools.partial(%NAME%, block_q=block_q, block_kv=block_kv)
'''


def attention_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                     chip: dict[str, Any] | None = None) -> str:
    d = facts.detail
    blocks = default_blocks(facts, chip)
    sub = sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)])
    for key in blocks:
        value = params[key] if isinstance(params.get(key), int) and params[key] > 0 else blocks[key]
        blocks[key] = aligned(value, sub)
    tunables = aligned_tunables(params.get("tunables") or {
        name: list(dict.fromkeys([v, max(SUBLANES, v // 2), v * 2])) for name, v in blocks.items()},
        dict.fromkeys(blocks, sub))
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    kind = ("causal" if d["causal"] else "non-causal") + (
        " grouped-query" if d.get("kv_heads") else "")
    doc = (f"{kind} flash attention kernel for {task_name}: online softmax over KV blocks, "
           "f32 running max/sum/accumulator in VMEM.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    constants = "\n".join([tunables_literal(tunables), f"CAUSAL = {bool(d['causal'])}"])
    body = (_TEMPLATE.replace("%NAME%", "attention_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%Q%", names[d["q"]]).replace("%K%", names[d["k"]]).replace("%V%", names[d["v"]])
            .replace("%SCALE%", scale).replace("%BQ%", str(blocks["block_q"]))
            .replace("%BKV%", str(blocks["block_kv"])))
    return header(doc) + "\n" + constants + "\n" + body
