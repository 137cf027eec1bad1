"""Ragged paged attention, mixed prefill and decode: one grid step per sequence slot; inside
it, loops over the sequence's query rows and its key/value pages whose trip counts come from
the scalar-prefetched lengths, with the pages brought in by manual DMAs.

The queries of all sequences are packed in one (tokens, heads, depth) buffer, sequence b's
rows at `cu_q_lens[b]` .. `cu_q_lens[b + 1] - 1`; keys and values share one page array
(pages, page_size, 2 x kv_heads, depth), K at even combined heads and V at odd. Row r of a
sequence with q_len rows and kv_len cached tokens sees key j when j <= kv_len - q_len + r
(its rows are the sequence's last ones); sequences at or past `num_seqs[0]`, and rows of
no sequence, are 0.

Grid (sequences,), `arbitrary`: the block table, lengths, query starts and the active count
are scalar-prefetched into SMEM, so every loop bound is a scalar read there (a decode
sequence runs one small chunk, a prefill sequence cdiv(q_len, block_q) chunks of block_q
rows, each over cdiv(kv_len, pages_per_block x page_size) key blocks): the kernel does the
work the lengths ask for and no grid step is spent on an empty (chunk, page) pair. The
packed queries and the output are one VMEM block each, lane-dense as (tokens, heads x
depth), fetched once and written back once; a chunk loads an aligned window of rows and
rolls its first row to the top (and back, for the output, where only the chunk's own rows
are replaced). The pages stay in HBM (`memory_space=ANY`): each key block's pages are
copied through the table into one of two VMEM slots while the other is folded into an
online softmax (running max, sum and f32 accumulator per kv head). A chunk's slots and
state are its own (`pl.run_scoped`).

Pages are read as rows of 2 x kv_heads x depth lanes (a reshape outside the kernel: the
pool is relaid out either way, and this way it stays lane-dense), so one DMA brings a
page's keys and values for every head; a kv head's keys and values are lane slices of
the block, and the query heads that read it are stacked along rows, one matmul each for
the scores and the product. Nothing moves data by arithmetic (no 0/1 matmuls, no
multiplying by masked zeros across heads or rows), so a NaN or infinity stays on the rows
and heads the reference puts it on.

Knobs: `block_q`, the query rows of a prefill chunk (the rows of one matmul pass: the MXU's
M), and `pages_per_block`, the pages of one key block (its N for the scores, K for the
product, and the grain of the DMA double buffer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    LANES,
    aligned,
    aligned_tunables,
    header,
    sublane_tile,
    tiled_bytes,
    tunables_literal,
)

LEVERS = ["scalar_prefetch_page_table", "in_kernel_loops_from_lengths", "manual_page_dma",
          "double_buffered_pages", "online_softmax", "lane_dense_pages"]
STRATEGY = ("One grid step per sequence; loops over its query chunks and key blocks bounded by "
            "the scalar-prefetched lengths; pages DMAed through the table into a double buffer "
            "and folded into an online softmax, one kv head's lane slice at a time.")

KEYS_PER_BLOCK = 512
"""Keys one block folds in by default, as many pages as hold them: two passes of the v6e
MXU's width per matmul, and half the blocks (and their fixed work: waits, loop trips,
softmax rescales) of one pass each."""
ROWS_PER_CHUNK = 512
"""Query rows of a prefill chunk by default: the M of the matmuls; a 512-row prefill chunk
is one chunk, so its pages are read once."""


def _sizes(facts: TaskFacts) -> dict[str, int]:
    d = facts.detail
    tokens, heads, depth = facts.args[d["q"]].shape
    _, page, combined, _ = facts.args[d["kv"]].shape
    batch, pages = facts.args[d["tables"]].shape
    return {"tokens": tokens, "heads": heads, "depth": depth, "page": page,
            "width": combined * depth, "pages": pages, "batch": batch,
            "itemsize": np.dtype(facts.args[d["q"]].dtype).itemsize,
            "align": sublane_tile([facts.args[d["q"]].dtype])}


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    """ROWS_PER_CHUNK rows (no more than the tokens, aligned) and KEYS_PER_BLOCK keys."""
    del chip
    z = _sizes(facts)
    rows = min(ROWS_PER_CHUNK, -(-z["tokens"] // z["align"]) * z["align"])
    return {"block_q": rows, "pages_per_block": min(z["pages"], max(1, KEYS_PER_BLOCK // z["page"]))}


def extents(facts: TaskFacts) -> dict[str, int]:
    """A chunk of more rows than the buffer holds, or a block of more pages than a sequence
    owns, only pads."""
    z = _sizes(facts)
    return {"block_q": -(-z["tokens"] // z["align"]) * z["align"], "pages_per_block": z["pages"]}


def grid_text(params: dict[str, int]) -> str:
    bq, pp = params.get("block_q", ROWS_PER_CHUNK), params.get("pages_per_block", 1)
    return (f"grid (sequences,) arbitrary; in each step a decode chunk or cdiv(q_len, {bq}) chunks "
            f"of {bq} rows, each over cdiv(kv_len, {pp} x page_size) key blocks (fori_loops bounded "
            "by SMEM scalars); q and out one whole VMEM block each (index (0, 0)); pages "
            f"memory_space=ANY, {pp} page DMAs per block into 2 VMEM slots.")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    z = _sizes(facts)
    bq, pp = params.get("block_q", ROWS_PER_CHUNK), params.get("pages_per_block", 1)
    heads, width, item, depth = z["heads"], z["width"], z["itemsize"], z["depth"]
    rows = -(-(z["tokens"] + bq + z["align"]) // z["align"]) * z["align"]
    io = 2 * 2 * tiled_bytes((rows, heads * depth), item)
    pages = 2 * pp * tiled_bytes((z["page"], width), item)
    state = heads * (2 * tiled_bytes((bq, 1), 4) + tiled_bytes((bq, depth), 4))
    scores = tiled_bytes((bq, pp * z["page"]), 4)
    total = io + pages + state + scores
    return total, (f"2 x 2 x {rows}x{heads * depth} q,out + 2 x {pp} x {z['page']}x{width} pages "
                   f"+ 4 B x {heads} heads x {bq} rows x ({depth} acc padded to {LANES} + 2 x "
                   f"{LANES} padded m,l) + 4 B x {bq}x{pp * z['page']} scores = {total:,} B")


_TEMPLATE = '''
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def _whole(shape):
    """The whole array as one block: fetched before the first step, written after the last."""
    return pl.BlockSpec(shape, lambda i, *prefetch: (0,) * len(shape))


def _kernel(lengths_ref, tables_ref, starts_ref, count_ref, q_ref, pages_hbm, o_ref, sems, *,
            scale, block_q, pages_per_block, pages, page_size, heads, kv_heads, depth,
            decode_rows, align):
    """Sequence `program_id(0)`: its query rows in chunks, each chunk's keys in blocks of
    `pages_per_block` pages, double-buffered; nothing for an inactive slot."""
    seq = pl.program_id(0)
    group = heads // kv_heads
    width = 2 * kv_heads * depth
    block_kv = pages_per_block * page_size
    dtype = q_ref.dtype

    @pl.when(seq == 0)
    def _zero_output():  # rows of no active sequence stay 0
        o_ref[...] = jnp.zeros_like(o_ref)

    active = seq < count_ref[0]
    q_start = starts_ref[seq]
    q_len = starts_ref[seq + 1] - q_start
    kv_len = jnp.minimum(lengths_ref[seq], pages * page_size)
    kv_blocks = jnp.maximum(pl.cdiv(kv_len, block_kv), 1)
    last_page = jnp.maximum(kv_len - 1, 0) // page_size

    def attend(first, rows, pages_buf, m_ref, l_ref, acc_ref):
        """Query rows first .. first + rows - 1 of the sequence (those below q_len), with
        this chunk's own page slots and softmax state (`pl.run_scoped`)."""

        def page_copy(block, t, slot):
            """Page t of key block `block` into slot `slot` (past the length: the last page
            the sequence owns, so no page is read past the table)."""
            page = jnp.minimum(block * pages_per_block + t, last_page)
            return pltpu.make_async_copy(pages_hbm.at[tables_ref[seq * pages + page]],
                                         pages_buf.at[slot, t], sems.at[slot])

        for t in range(pages_per_block):
            page_copy(0, t, 0).start()
        row0 = q_start + first
        offset = row0 % align
        base = pl.multiple_of(row0 - offset, align)  # an aligned window holds the chunk
        window = q_ref[pl.ds(base, rows + align), :].astype(jnp.float32)
        q = pltpu.roll(window, rows + align - offset, 0)[:rows].astype(dtype)  # row 0 = row0
        # (group x rows, depth) per kv head: the query heads that read it, stacked
        q_heads = [jnp.concatenate([q[:, h * depth:(h + 1) * depth]
                                    for h in range(k * group, (k + 1) * group)], axis=0)
                   for k in range(kv_heads)]
        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)
        position = first + lax.broadcasted_iota(jnp.int32, (rows, block_kv), 0)

        def fold(block):
            """Key block `block` (waited for in its slot) into each kv head's online softmax."""
            slot = block % 2
            # One wait for all the block's pages: the semaphore counts the bytes they bring.
            pltpu.make_async_copy(pages_hbm.at[pl.ds(0, pages_per_block)], pages_buf.at[slot],
                                  sems.at[slot]).wait()
            kv = pages_buf[slot].reshape(block_kv, width)  # K0 V0 K1 V1 ... along lanes
            key = block * block_kv + lax.broadcasted_iota(jnp.int32, (rows, block_kv), 1)
            seen = (key <= kv_len - q_len + position) & (key < kv_len)
            seen = jnp.concatenate([seen] * group, axis=0) if group > 1 else seen
            # the softmax state of every kv head read once and written once per key block
            m_all, l_all, acc_all = m_ref[...], l_ref[...], acc_ref[...]
            m_next, l_next, acc_next = [], [], []
            for k in range(kv_heads):
                keys = kv[:, 2 * k * depth:(2 * k + 1) * depth]
                values = kv[:, (2 * k + 1) * depth:(2 * k + 2) * depth]
                s = lax.dot_general(q_heads[k], keys, (((1,), (1,)), ((), ())),
                                    preferred_element_type=jnp.float32) * scale
                s = jnp.where(seen, s, MASK_VALUE)
                m_new = jnp.maximum(m_all[k], jnp.max(s, axis=1, keepdims=True))
                alpha = jnp.exp(m_all[k] - m_new)
                p = jnp.exp(s - m_new)
                l_next.append(alpha * l_all[k] + jnp.sum(p, axis=1, keepdims=True))
                acc_next.append(alpha * acc_all[k] + jnp.dot(
                    p.astype(values.dtype), values, preferred_element_type=jnp.float32))
                m_next.append(m_new)
            m_ref[...] = jnp.stack(m_next)
            l_ref[...] = jnp.stack(l_next)
            acc_ref[...] = jnp.stack(acc_next)

        def prefetch_and_fold(block, carry):
            for t in range(pages_per_block):  # the next block into the other slot meanwhile
                page_copy(block + 1, t, 1 - block % 2).start()
            fold(block)
            return carry

        lax.fori_loop(0, kv_blocks - 1, prefetch_and_fold, 0)
        fold(kv_blocks - 1)  # the last block: nothing left to prefetch
        o = acc_ref[...] / l_ref[...]  # (kv_heads, group x rows, depth)
        out = jnp.concatenate([o[h // group, (h % group) * rows:(h % group + 1) * rows]
                               for h in range(heads)], axis=1).astype(dtype)  # (rows, heads x depth)
        out = jnp.concatenate([out, jnp.zeros((align, heads * depth), dtype)], axis=0)
        placed = pltpu.roll(out.astype(jnp.float32), offset, 0).astype(dtype)  # row0 at offset
        line = lax.broadcasted_iota(jnp.int32, placed.shape, 0)
        own = (line >= offset) & (line < offset + jnp.minimum(rows, q_len - first))
        o_ref[pl.ds(base, rows + align), :] = jnp.where(own, placed, o_ref[pl.ds(base, rows + align), :])

    def scoped(first, rows):
        """`attend` with VMEM of its own: two slots of pages, running max, sum, accumulator."""
        pl.run_scoped(functools.partial(attend, first, rows),
                      pltpu.VMEM((2, pages_per_block, page_size, width), pages_hbm.dtype),
                      pltpu.VMEM((kv_heads, group * rows, 1), jnp.float32),
                      pltpu.VMEM((kv_heads, group * rows, 1), jnp.float32),
                      pltpu.VMEM((kv_heads, group * rows, depth), jnp.float32))

    @pl.when(active & (q_len > 0) & (q_len <= decode_rows))
    def _decode():
        scoped(0, decode_rows)

    def prefill_chunk(c, carry):
        scoped(c * block_q, block_q)
        return carry

    lax.fori_loop(0, jnp.where(active & (q_len > decode_rows), pl.cdiv(q_len, block_q), 0),
                  prefill_chunk, 0)


@functools.partial(jax.jit, static_argnames=("block_q", "pages_per_block"))
def %NAME%(%ARGS%, *, block_q: int = %BQ%, pages_per_block: int = %PP%):
    queries, kv_pages, tables, lengths, starts, count = %Q%, %KV%, %T%, %L%, %S%, %C%
    tokens, heads, depth = queries.shape
    total_pages, page_size, combined, _ = kv_pages.shape
    batch, pages = tables.shape
    kv_heads = combined // 2
    if (queries.ndim != 3 or kv_pages.ndim != 4 or combined % 2 or heads % kv_heads
            or kv_pages.shape[3] != depth or lengths.shape != (batch,)
            or starts.shape != (batch + 1,) or count.shape != (1,)):
        raise ValueError(f"{queries.shape=}, {kv_pages.shape=}, {tables.shape=}, {lengths.shape=}, "
                         f"{starts.shape=}, {count.shape=} are not ragged paged-attention operands")
    align = SUBLANES * max(1, 4 // queries.dtype.itemsize)  # rows of one packed VMEM tile
    if block_q < 1 or block_q % align or pages_per_block < 1:
        raise ValueError(f"{block_q=} must be a positive multiple of {align}, "
                         f"{pages_per_block=} positive")
    width = combined * depth  # a page row: every kv head's key and value lanes
    padded = pl.cdiv(tokens + block_q + align, align) * align  # room for a chunk's window
    q = jnp.pad(queries.reshape(tokens, heads * depth), ((0, padded - tokens), (0, 0)))
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float(%SCALE%), block_q=block_q,
                          pages_per_block=pages_per_block, pages=pages, page_size=page_size,
                          heads=heads, kv_heads=kv_heads, depth=depth, decode_rows=align,
                          align=align),
        out_shape=jax.ShapeDtypeStruct(q.shape, queries.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(batch,),
            in_specs=[_whole(q.shape), pl.BlockSpec(memory_space=pl.ANY)],  # pages stay in HBM
            out_specs=_whole(q.shape),
            scratch_shapes=[pltpu.SemaphoreType.DMA((2,))],  # a chunk's VMEM is its own
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(lengths.astype(jnp.int32), tables.reshape(-1).astype(jnp.int32), starts.astype(jnp.int32),
      count.astype(jnp.int32), q, kv_pages.reshape(total_pages, page_size, width))
    return out[:tokens].reshape(tokens, heads, depth)


def build(*, block_q: int = %BQ%, pages_per_block: int = %PP%):
    return functools.partial(%NAME%, block_q=block_q, pages_per_block=pages_per_block)
'''


def ragged_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                  chip: dict[str, Any] | None = None) -> str:
    del chip
    d, z = facts.detail, _sizes(facts)
    knobs, ext = default_blocks(facts, None), extents(facts)
    for key in knobs:
        given = params.get(key)
        knobs[key] = given if isinstance(given, int) and given > 0 else knobs[key]
    align = z["align"]
    knobs["block_q"] = aligned(knobs["block_q"], align)
    tunables = aligned_tunables(params.get("tunables") or {  # the default first, then its neighbours
        key: list(dict.fromkeys([v, max(1, v // 2), min(v * 2, max(ext[key], v))]))
        for key, v in knobs.items()}, {"block_q": align})
    bq, pp = knobs["block_q"], knobs["pages_per_block"]
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    doc = (f"ragged paged attention kernel (mixed prefill and decode) for {task_name}: one grid "
           "step per sequence, in-kernel loops over its query chunks and key blocks bounded by "
           "the scalar-prefetched lengths, pages DMAed through the block table into a double "
           "buffer, online softmax in VMEM, one kv head's lane slice of each page block at a time.\n\n"
           f"Schedule: grid ({z['batch']},) arbitrary, one step per sequence slot; a sequence "
           f"of at most {align} query rows (a decode) is one chunk of {align} rows; a longer one "
           f"is chunks of block_q = {bq} rows; keys in blocks of pages_per_block = {pp} pages "
           f"({pp * z['page']} keys), double-buffered; q and out whole in VMEM as "
           f"({z['tokens']}, {z['heads'] * z['depth']}) lane-dense rows.\n"
           f"Levers applied: {', '.join(LEVERS)}.\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "ragged_paged_attention_kernel")
            .replace("%ARGS%", ", ".join(names)).replace("%Q%", names[d["q"]])
            .replace("%KV%", names[d["kv"]]).replace("%T%", names[d["tables"]])
            .replace("%L%", names[d["lengths"]]).replace("%S%", names[d["starts"]])
            .replace("%C%", names[d["count"]]).replace("%SCALE%", scale)
            .replace("%BQ%", str(bq)).replace("%PP%", str(pp)))
    return header(doc) + "\n" + tunables_literal(tunables) + "\n" + body
