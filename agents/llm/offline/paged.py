"""Paged attention for decoding: the block table and the lengths are scalar-prefetched into
SMEM, so the key/value index maps read a sequence's physical page for each logical one and
the pipeline fetches only pages the sequence owns.

Grid (batch, pages): batch `parallel`, pages `arbitrary` (an online softmax with running
max, sum and f32 accumulator in VMEM scratch). Each step takes one page of every kv head and
the query heads that read them as (kv_heads, group, depth): the dots are batched over kv
heads, so grouped-query heads need no copy of the pages and the grid has no head axis. A page past the
sequence's length is skipped with `pl.when`, and its index map repeats the last page the
sequence owns, so it is not fetched either; inside the last page, positions at or past the
length are masked. The query heads are reshaped to (kv_heads, group, head_dim) outside the
kernel (a layout op), so the block's last two dims are whole dims. The table is flattened the same way, to one SMEM vector.

Pages laid out (pages, page_size, kv_heads, depth) are transposed to (kv_heads, pages,
page_size, depth) outside the kernel; query head h reads key/value head h // (heads /
kv_heads) through the index map. Where each sequence's query row is given by a start offset
(`cu_q_lens`), the starts are scalar-prefetched too and the query's index map reads its row.
"""

from __future__ import annotations

from typing import Any

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import LANES, header

LEVERS = ["scalar_prefetch_page_table", "online_softmax", "skip_pages_past_length"]
STRATEGY = ("Scalar-prefetch the block table and lengths; each grid step fetches one page of "
            "keys and values through the table and folds it into an online softmax.")


def grid_text(params: dict[str, int]) -> str:
    del params
    return ("grid (batch, pages_per_sequence): batch parallel, pages arbitrary; k/v index map "
            "(all kv heads, table[b * pages + min(p, last owned page)], 0, 0).")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    del params
    shape = facts.args[facts.detail["k"]].shape
    page, depth = (shape[1], shape[3]) if facts.detail.get("layout") == "pshd" else shape[-2:]
    total = 2 * 4 * (depth + 2 * page * depth) + 2 * 4 * depth + 4 * (depth + 2 * LANES)
    return total, (f"2 x 4 B x (1x{depth} q + 2 x {page}x{depth} k,v page) + 2 x 4 B x {depth} out "
                   f"+ scratch 4 B x ({depth} acc + 2 x {LANES} padded m,l) = {total:,} B")


_TEMPLATE = '''
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def _kernel(tables_ref, lengths_ref, *refs, scale, page_size):
    """One page of every kv head: (kv_heads, group, depth) queries against (kv_heads, page, depth)."""
    q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref = refs[-7:]  # after the starts, if given
    b, p = pl.program_id(0), pl.program_id(1)
    length = lengths_ref[b]

    @pl.when(p == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(p * page_size < length)
    def _page():
        q = q_ref[...].astype(jnp.float32) * scale
        s = lax.dot_general(q, k_ref[...].astype(jnp.float32), (((2,), (2,)), ((0,), (0,))),
                            preferred_element_type=jnp.float32)  # (kv_heads, group, page)
        position = p * page_size + lax.broadcasted_iota(jnp.int32, s.shape, 2)
        s = jnp.where(position < length, s, MASK_VALUE)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=2, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        weights = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(weights, axis=2, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + lax.dot_general(
            weights, v_ref[...].astype(jnp.float32), (((2,), (1,)), ((0,), (0,))),
            preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(p == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@jax.jit
def %NAME%(%ARGS%):
    q, k_pages, v_pages, tables, lengths, starts = %Q%, %K%, %V%, %T%, %L%, %S%
    if PAGES_HEADS_THIRD:  # (pages, page_size, kv_heads, depth) -> (kv_heads, pages, ...)
        k_pages, v_pages = (jnp.transpose(x, (2, 0, 1, 3)) for x in (k_pages, v_pages))
    tokens, heads, depth = q.shape
    batch = tables.shape[0]
    starts = None if starts is None else starts[:batch]
    kv_heads = k_pages.shape[0]
    if (q.ndim != 3 or k_pages.ndim != 4 or k_pages.shape != v_pages.shape
            or heads % kv_heads or k_pages.shape[-1] != depth or tables.ndim != 2
            or lengths.shape != (batch,) or (starts is not None and starts.shape != (batch,))):
        raise ValueError(f"{q.shape=}, {k_pages.shape=}, {v_pages.shape=}, {tables.shape=}, "
                         f"{lengths.shape=} are not paged-attention operands")
    page_size = k_pages.shape[2]
    pages = tables.shape[1]
    group = heads // kv_heads  # query heads h * group .. h * group + group - 1 read kv head h

    def page_index(b, p, tables_ref, lengths_ref, *starts_ref):
        last_owned = jnp.maximum(lengths_ref[b] - 1, 0) // page_size
        return (0, tables_ref[b * pages + jnp.minimum(p, last_owned)], 0, 0)

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2 if starts is None else 3,
        grid=(batch, pages),
        in_specs=[
            pl.BlockSpec((None, kv_heads, group, depth), lambda b, p, t, n, *s: (s[0][b] if s else b, 0, 0, 0)),
            pl.BlockSpec((kv_heads, None, page_size, depth), page_index),
            pl.BlockSpec((kv_heads, None, page_size, depth), page_index),
        ],
        out_specs=pl.BlockSpec((None, kv_heads, group, depth), lambda b, p, t, n, *s: (b, 0, 0, 0)),
        scratch_shapes=[pltpu.VMEM((kv_heads, group, 1), jnp.float32),
                        pltpu.VMEM((kv_heads, group, 1), jnp.float32),
                        pltpu.VMEM((kv_heads, group, depth), jnp.float32)],
    )
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float(%SCALE%), page_size=page_size),
        out_shape=jax.ShapeDtypeStruct((batch, kv_heads, group, depth), q.dtype),
        grid_spec=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(tables.reshape(-1).astype(jnp.int32), lengths.astype(jnp.int32),
      *(() if starts is None else (starts.astype(jnp.int32),)),
      q.reshape(tokens, kv_heads, group, depth), k_pages, v_pages)
    return out.reshape(batch, heads, depth)


def build():
    return %NAME%
'''


def paged_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                 chip: dict[str, Any] | None = None) -> str:
    del params, chip
    d = facts.detail
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    doc = (f"paged decode attention kernel for {task_name}: block table and lengths "
           "scalar-prefetched, one key/value page per grid step, online softmax in VMEM.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "paged_attention_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%Q%", names[d["q"]]).replace("%K%", names[d["k"]])
            .replace("%V%", names[d["v"]]).replace("%T%", names[d["tables"]])
            .replace("%L%", names[d["lengths"]]).replace("%SCALE%", scale)
            .replace("%S%", names[d["starts"]] if d.get("starts") is not None else "None"))
    heads_third = f"PAGES_HEADS_THIRD = {d.get('layout') == 'pshd'}  # pages given as (pages, page, heads, depth)\n"
    return header(doc) + "\nTUNABLES = {}\n" + heads_third + body
