"""Paged attention for decoding: the block table and the lengths are scalar-prefetched into
SMEM, so the key/value index maps read a sequence's physical page for each logical one and
the pipeline fetches only pages the sequence owns.

Grid (batch, cdiv(pages, pages_per_step)): batch `parallel`, page steps `arbitrary` (an
online softmax with running max, sum and f32 accumulator in VMEM scratch). Each step takes
`pages_per_step` (P) pages of every kv head and the query heads that read them as (kv_heads,
group, depth): the dots are batched over kv heads, so grouped-query heads need no copy of the
pages and the grid has no head axis. The P pages come through P key and P value BlockSpecs
over the same page arrays, spec t reading logical page p * P + t, so Pallas pipelines each
one; the body folds them into the softmax in order. At the tuning point the kernel is bound
by the fixed cost of its grid steps, not by bytes: P pages per step divide the steps by P
and leave the bytes alone (the knob `pages_per_step`, default 1: one page per step).

A page past the sequence's length (or past the table, in the last step when pages % P != 0)
is skipped with `pl.when`, and its index map repeats the last page the sequence owns, so it
is not fetched either; inside the last page, positions at or past the length are masked.
Lengths past the table's capacity are clamped to it, as the reference's mask reads them. The
query heads are reshaped to (kv_heads, group, head_dim) outside the kernel (a layout op), so
the block's last two dims are whole dims. The table is flattened the same way, to one SMEM
vector.

Pages laid out (pages, page_size, kv_heads, depth) are transposed to (kv_heads, pages,
page_size, depth) outside the kernel; query head h reads key/value head h // (heads /
kv_heads) through the index map. Where each sequence's query row is given by a start offset
(`cu_q_lens`), the starts are scalar-prefetched too and the query's index map reads its row.
"""

from __future__ import annotations

from typing import Any

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import LANES, header, tunables_literal

LEVERS = ["scalar_prefetch_page_table", "online_softmax", "skip_pages_past_length"]
STRATEGY = ("Scalar-prefetch the block table and lengths; each grid step fetches pages_per_step "
            "pages of keys and values through the table and folds them into an online softmax.")


def _sizes(facts: TaskFacts) -> dict[str, int]:
    """heads, kv_heads, depth, page (tokens per page) and pages per sequence at the tuning point."""
    d = facts.detail
    shape = facts.args[d["k"]].shape
    kv_heads, page, depth = (shape[2], shape[1], shape[3]) if d.get("layout") == "pshd" else (
        shape[0], shape[2], shape[3])
    return {"heads": facts.args[d["q"]].shape[-2], "kv_heads": kv_heads, "depth": depth,
            "page": page, "pages": facts.args[d["tables"]].shape[1]}


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    """One page per step: the class default, today's kernel, that every lever is measured against."""
    del facts, chip
    return {"pages_per_step": 1}


def extents(facts: TaskFacts) -> dict[str, int]:
    """More pages per step than a sequence has would only fetch and skip clamped pages."""
    return {"pages_per_step": _sizes(facts)["pages"]}


def grid_text(params: dict[str, int]) -> str:
    pp = params.get("pages_per_step", 1)
    return (f"grid (batch, cdiv(pages_per_sequence, {pp})): batch parallel, page steps arbitrary; "
            f"{pp} k and {pp} v BlockSpecs, spec t's index map (all kv heads, "
            f"table[b * pages + min(p * {pp} + t, last owned page)], 0, 0).")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    z = _sizes(facts)
    pp, heads, kvh, depth, page = (params.get("pages_per_step", 1), z["heads"], z["kv_heads"],
                                   z["depth"], z["page"])
    total = (2 * 4 * (heads * depth + 2 * pp * kvh * page * depth) + 2 * 4 * heads * depth
             + 4 * heads * (depth + 2 * LANES))
    return total, (f"2 x 4 B x ({heads}x{depth} q + 2 x {pp} x {kvh}x{page}x{depth} k,v pages) "
                   f"+ 2 x 4 B x {heads}x{depth} out + scratch 4 B x {heads} x ({depth} acc "
                   f"+ 2 x {LANES} padded m,l) = {total:,} B")


_TEMPLATE = """
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def _fold_page(q, k_ref, v_ref, m_ref, l_ref, acc_ref, first, length):
    \"\"\"One page of every kv head into the online softmax: (kv_heads, group, depth) queries
    against (kv_heads, page, depth) keys at positions first, first + 1, ...\"\"\"
    s = lax.dot_general(q, k_ref[...].astype(jnp.float32), (((2,), (2,)), ((0,), (0,))),
                        preferred_element_type=jnp.float32)  # (kv_heads, group, page)
    position = first + lax.broadcasted_iota(jnp.int32, s.shape, 2)
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


def _kernel(tables_ref, lengths_ref, *refs, scale, page_size, pages, pages_per_step):
    \"\"\"`pages_per_step` pages of every kv head, folded in order; a page past the length is skipped.\"\"\"
    k_refs = refs[-4 - 2 * pages_per_step:-4 - pages_per_step]
    v_refs = refs[-4 - pages_per_step:-4]
    q_ref = refs[-5 - 2 * pages_per_step]  # after the starts, if given
    o_ref, m_ref, l_ref, acc_ref = refs[-4:]
    b, p = pl.program_id(0), pl.program_id(1)
    length = jnp.minimum(lengths_ref[b], pages * page_size)

    @pl.when(p == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    q = q_ref[...].astype(jnp.float32) * scale
    for t in range(pages_per_step):  # static: the step's pages, in order
        first = (p * pages_per_step + t) * page_size
        pl.when(first < length)(functools.partial(
            _fold_page, q, k_refs[t], v_refs[t], m_ref, l_ref, acc_ref, first, length))

    @pl.when(p == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("pages_per_step",))
def %NAME%(%ARGS%, *, pages_per_step: int = %PP%):
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
    if pages_per_step < 1:
        raise ValueError(f"{pages_per_step=} must be a positive count of pages")
    page_size = k_pages.shape[2]
    pages = tables.shape[1]
    group = heads // kv_heads  # query heads h * group .. h * group + group - 1 read kv head h

    def page_index(t):
        \"\"\"Index map of the step's t-th page: past the length (or the table), the last owned page.\"\"\"
        def index(b, p, tables_ref, lengths_ref, *starts_ref):
            length = jnp.minimum(lengths_ref[b], pages * page_size)
            last_owned = jnp.maximum(length - 1, 0) // page_size
            return (0, tables_ref[b * pages + jnp.minimum(p * pages_per_step + t, last_owned)], 0, 0)
        return index

    page_specs = [pl.BlockSpec((kv_heads, None, page_size, depth), page_index(t))
                  for t in range(pages_per_step)]
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2 if starts is None else 3,
        grid=(batch, pl.cdiv(pages, pages_per_step)),
        in_specs=[
            pl.BlockSpec((None, kv_heads, group, depth), lambda b, p, t, n, *s: (s[0][b] if s else b, 0, 0, 0)),
            *page_specs,  # keys
            *page_specs,  # values: the same pages of the other pool
        ],
        out_specs=pl.BlockSpec((None, kv_heads, group, depth), lambda b, p, t, n, *s: (b, 0, 0, 0)),
        scratch_shapes=[pltpu.VMEM((kv_heads, group, 1), jnp.float32),
                        pltpu.VMEM((kv_heads, group, 1), jnp.float32),
                        pltpu.VMEM((kv_heads, group, depth), jnp.float32)],
    )
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float(%SCALE%), page_size=page_size, pages=pages,
                          pages_per_step=pages_per_step),
        out_shape=jax.ShapeDtypeStruct((batch, kv_heads, group, depth), q.dtype),
        grid_spec=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(tables.reshape(-1).astype(jnp.int32), lengths.astype(jnp.int32),
      *(() if starts is None else (starts.astype(jnp.int32),)),
      q.reshape(tokens, kv_heads, group, depth), *[k_pages] * pages_per_step, *[v_pages] * pages_per_step)
    return out.reshape(batch, heads, depth)


def build(*, pages_per_step: int = %PP%):
    return functools.partial(%NAME%, pages_per_step=pages_per_step)
"""


def paged_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                 chip: dict[str, Any] | None = None) -> str:
    del chip
    d = facts.detail
    given = params.get("pages_per_step")
    pp = given if isinstance(given, int) and given > 0 else default_blocks(facts, None)["pages_per_step"]
    pages = _sizes(facts)["pages"]
    tunables = params.get("tunables") or {  # the default first, then its neighbours
        "pages_per_step": list(dict.fromkeys([pp, max(1, pp // 2), min(pp * 2, max(pages, pp))]))}
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    doc = (f"paged decode attention kernel for {task_name}: block table and lengths "
           f"scalar-prefetched, {pp} key/value page(s) per grid step (TUNABLES pages_per_step), "
           "online softmax in VMEM.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "paged_attention_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%Q%", names[d["q"]]).replace("%K%", names[d["k"]])
            .replace("%V%", names[d["v"]]).replace("%T%", names[d["tables"]])
            .replace("%L%", names[d["lengths"]]).replace("%SCALE%", scale).replace("%PP%", str(pp))
            .replace("%S%", names[d["starts"]] if d.get("starts") is not None else "None"))
    heads_third = f"PAGES_HEADS_THIRD = {d.get('layout') == 'pshd'}  # pages given as (pages, page, heads, depth)\n"
    return header(doc) + "\n" + tunables_literal(tunables) + "\n" + heads_third + body
