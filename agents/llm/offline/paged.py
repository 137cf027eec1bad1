"""Paged attention for decoding: the block table and the lengths are scalar-prefetched into
SMEM, so the key/value index maps read a sequence's physical page for each logical one and
the pipeline fetches only pages the sequence owns.

Grid (cdiv(batch, seqs_per_step), cdiv(pages, pages_per_step)): sequence blocks `parallel`,
page steps `arbitrary` (an online softmax with running max, sum and f32 accumulator in VMEM
scratch, one per sequence of the block). Each step takes `pages_per_step` (P) pages of every
kv head for each of `seqs_per_step` (S) sequences, and the query heads that read them as
(kv_heads, group, depth): the dots are batched over kv heads, so grouped-query heads need no
copy of the pages and the grid has no head axis. The pages come through S x P key and as
many value BlockSpecs over the same page arrays, spec (s, t) reading sequence i * S + s's
logical page p * P + t, and the queries through S BlockSpecs, so Pallas pipelines each one;
the body folds each sequence's P pages into its softmax at once (their keys and values
side by side in VMEM: one max, one sum, one rescale per step). At the tuning point the
kernel is bound by the fixed cost of its grid steps, not by bytes: P pages and S sequences
per step divide the steps by P x S and leave the bytes alone (the knobs; default 1 and 1,
one page of one sequence per step; the tuner also prices TOKENS_PER_STEP keys per step).

A page past the sequence's length (or past the table, in the last step when pages % P != 0)
is skipped with `pl.when`, and its index map repeats the last page the sequence owns, so it
is not fetched either; inside the last page, positions at or past the length are masked.
Lengths past the table's capacity are clamped to it, as the reference's mask reads them. In
the last block of sequences (batch % S != 0), a slot past the batch clamps its index maps
to the last sequence (pages fetched twice, no read past the arrays) and its length to 0, so
it folds nothing; the output has whole blocks of sequences and the rows past the batch are
cut off outside the kernel. The
query heads are reshaped to (kv_heads, group, head_dim) outside the kernel (a layout op), so
the block's last two dims are whole dims. The table is flattened the same way, to one SMEM
vector, sequence-major, by default; `page_major_table` passes it whole and transposed, a
(pages, batch) SMEM array, which is a bitcast where XLA:TPU keeps a narrow table with its
sequences minor-most (the flattening is a relayout there).

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


TOKENS_PER_STEP = 512
"""Keys one step folds in, as many pages as hold them: the root's tuner prices that many pages
per step first after the default (TUNABLES list it second), then the default's neighbours.
A step's fixed cost and its one softmax update are then shared by four lane-widths of scores,
where one page of a few tokens per step is bound by the per-step cost."""


def _sizes(facts: TaskFacts) -> dict[str, int]:
    """heads, kv_heads, depth, page (tokens per page), pages per sequence and batch at the tuning point."""
    d = facts.detail
    shape = facts.args[d["k"]].shape
    kv_heads, page, depth = (shape[2], shape[1], shape[3]) if d.get("layout") == "pshd" else (
        shape[0], shape[2], shape[3])
    batch, pages = facts.args[d["tables"]].shape
    return {"heads": facts.args[d["q"]].shape[-2], "kv_heads": kv_heads, "depth": depth,
            "page": page, "pages": pages, "batch": batch}


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    """One page of one sequence per step: the class default, today's kernel, that every lever
    is measured against."""
    del facts, chip
    return {"pages_per_step": 1, "seqs_per_step": 1}


def extents(facts: TaskFacts) -> dict[str, int]:
    """More pages (sequences) per step than a sequence (the batch) has would only fetch and
    skip clamped pages."""
    z = _sizes(facts)
    return {"pages_per_step": z["pages"], "seqs_per_step": z["batch"]}


def grid_text(params: dict[str, int]) -> str:
    pp, ss = params.get("pages_per_step", 1), params.get("seqs_per_step", 1)
    return (f"grid (cdiv(batch, {ss}), cdiv(pages_per_sequence, {pp})): sequence blocks parallel, "
            f"page steps arbitrary; {ss} q BlockSpecs, {ss} x {pp} k and as many v BlockSpecs, "
            f"spec (s, t)'s index map (all kv heads, table[b * pages + min(p * {pp} + t, last "
            f"owned page)], 0, 0) with b = min(i * {ss} + s, batch - 1); out ({ss} sequences).")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    z = _sizes(facts)
    pp, ss = params.get("pages_per_step", 1), params.get("seqs_per_step", 1)
    heads, kvh, depth, page = z["heads"], z["kv_heads"], z["depth"], z["page"]
    total = ss * (2 * 4 * (heads * depth + 2 * pp * kvh * page * depth) + 2 * 4 * heads * depth
                  + 4 * heads * (depth + 2 * LANES))
    return total, (f"{ss} sequence(s) x [2 x 4 B x ({heads}x{depth} q + 2 x {pp} x {kvh}x{page}x{depth} "
                   f"k,v pages) + 2 x 4 B x {heads}x{depth} out + scratch 4 B x {heads} x ({depth} acc "
                   f"+ 2 x {LANES} padded m,l)] = {total:,} B")


_TEMPLATE = """
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def _fold_pages(q, k_refs, v_refs, m_ref, l_ref, acc_ref, seq, first, length):
    \"\"\"The step's pages of every kv head into sequence `seq`'s online softmax at once:
    (kv_heads, group, depth) queries against the pages' (kv_heads, pages x page, depth) keys
    at positions first, first + 1, ... (one max, one sum and one rescale per step, not per
    page; a page past the length is masked).\"\"\"
    keys = [ref[...].astype(jnp.float32) for ref in k_refs]
    values = [ref[...].astype(jnp.float32) for ref in v_refs]
    k = keys[0] if len(keys) == 1 else jnp.concatenate(keys, axis=1)
    v = values[0] if len(values) == 1 else jnp.concatenate(values, axis=1)
    s = lax.dot_general(q, k, (((2,), (2,)), ((0,), (0,))),
                        preferred_element_type=jnp.float32)  # (kv_heads, group, pages x page)
    position = first + lax.broadcasted_iota(jnp.int32, s.shape, 2)
    s = jnp.where(position < length, s, MASK_VALUE)
    m_prev = m_ref[seq]
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=2, keepdims=True))
    alpha = jnp.exp(m_prev - m_new)
    weights = jnp.exp(s - m_new)
    l_ref[seq] = alpha * l_ref[seq] + jnp.sum(weights, axis=2, keepdims=True)
    acc_ref[seq] = alpha * acc_ref[seq] + lax.dot_general(
        weights, v, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32)
    m_ref[seq] = m_new


def _kernel(tables_ref, lengths_ref, *refs, scale, page_size, pages, batch, pages_per_step,
            seqs_per_step):
    \"\"\"`seqs_per_step` sequences, each with its `pages_per_step` pages of every kv head
    folded in at once; a step wholly past its sequence's length, or a sequence past the
    batch, is skipped.\"\"\"
    blocks = seqs_per_step * pages_per_step
    q_refs = refs[-4 - 2 * blocks - seqs_per_step:-4 - 2 * blocks]  # after the starts, if given
    k_refs = refs[-4 - 2 * blocks:-4 - blocks]  # sequence-major: (s, t) at s * pages_per_step + t
    v_refs = refs[-4 - blocks:-4]
    o_ref, m_ref, l_ref, acc_ref = refs[-4:]
    i, p = pl.program_id(0), pl.program_id(1)

    @pl.when(p == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, MASK_VALUE)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    for seq in range(seqs_per_step):  # static: the step's sequences, then their pages, in order
        b = i * seqs_per_step + seq
        length = jnp.where(b < batch, jnp.minimum(lengths_ref[jnp.minimum(b, batch - 1)],
                                                  pages * page_size), 0)
        q = q_refs[seq][...].astype(jnp.float32) * scale
        first = p * pages_per_step * page_size
        seq_pages = slice(seq * pages_per_step, (seq + 1) * pages_per_step)
        pl.when(first < length)(functools.partial(
            _fold_pages, q, k_refs[seq_pages], v_refs[seq_pages], m_ref, l_ref, acc_ref, seq,
            first, length))

    @pl.when(p == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("pages_per_step", "seqs_per_step", "page_major_table"))
def %NAME%(%ARGS%, *, pages_per_step: int = %PP%, seqs_per_step: int = %SS%, page_major_table: int = %PMT%):
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
    if pages_per_step < 1 or seqs_per_step < 1:
        raise ValueError(f"{pages_per_step=} and {seqs_per_step=} must be positive counts")
    page_size = k_pages.shape[2]
    pages = tables.shape[1]
    group = heads // kv_heads  # query heads h * group .. h * group + group - 1 read kv head h
    steps = pl.cdiv(batch, seqs_per_step)  # the last block of sequences may run past the batch

    def query_index(seq):
        \"\"\"Index map of the step's seq-th query row; past the batch, the last sequence's.\"\"\"
        def index(i, p, tables_ref, lengths_ref, *starts_ref):
            b = jnp.minimum(i * seqs_per_step + seq, batch - 1)
            return (starts_ref[0][b] if starts_ref else b, 0, 0, 0)
        return index

    def page_index(seq, t):
        \"\"\"Index map of the step's seq-th sequence's t-th page: past the batch, the last
        sequence; past the length (or the table), the last owned page.\"\"\"
        def index(i, p, tables_ref, lengths_ref, *starts_ref):
            b = jnp.minimum(i * seqs_per_step + seq, batch - 1)
            length = jnp.minimum(lengths_ref[b], pages * page_size)
            last_owned = jnp.maximum(length - 1, 0) // page_size
            page = jnp.minimum(p * pages_per_step + t, last_owned)
            return (0, tables_ref[page, b] if page_major_table else tables_ref[b * pages + page], 0, 0)
        return index

    page_specs = [pl.BlockSpec((kv_heads, None, page_size, depth), page_index(seq, t))
                  for seq in range(seqs_per_step) for t in range(pages_per_step)]
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2 if starts is None else 3,
        grid=(steps, pl.cdiv(pages, pages_per_step)),
        in_specs=[
            *[pl.BlockSpec((None, kv_heads, group, depth), query_index(seq)) for seq in range(seqs_per_step)],
            *page_specs,  # keys
            *page_specs,  # values: the same pages of the other pool
        ],
        out_specs=pl.BlockSpec((seqs_per_step, kv_heads, group, depth), lambda i, p, *prefetch: (i, 0, 0, 0)),
        scratch_shapes=[pltpu.VMEM((seqs_per_step, kv_heads, group, 1), jnp.float32),
                        pltpu.VMEM((seqs_per_step, kv_heads, group, 1), jnp.float32),
                        pltpu.VMEM((seqs_per_step, kv_heads, group, depth), jnp.float32)],
    )
    blocks = seqs_per_step * pages_per_step
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float(%SCALE%), page_size=page_size, pages=pages,
                          batch=batch, pages_per_step=pages_per_step, seqs_per_step=seqs_per_step),
        out_shape=jax.ShapeDtypeStruct((steps * seqs_per_step, kv_heads, group, depth), q.dtype),
        grid_spec=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(tables.T.astype(jnp.int32) if page_major_table else tables.reshape(-1).astype(jnp.int32),
      lengths.astype(jnp.int32),
      *(() if starts is None else (starts.astype(jnp.int32),)),
      *[q.reshape(tokens, kv_heads, group, depth)] * seqs_per_step,
      *[k_pages] * blocks, *[v_pages] * blocks)
    return out[:batch].reshape(batch, heads, depth)  # rows past the batch: a tail's padding


def build(*, pages_per_step: int = %PP%, seqs_per_step: int = %SS%, page_major_table: int = %PMT%):
    return functools.partial(%NAME%, pages_per_step=pages_per_step, seqs_per_step=seqs_per_step,
                             page_major_table=page_major_table)
"""


CARRIED_KNOBS = ("page_major_table",)
"""Knobs a child keeps at its parent's tuned value (the default of its TUNABLES): a block
move changes the blocks, not the table layout the parent's tuner found faster."""


def paged_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                 chip: dict[str, Any] | None = None) -> str:
    del chip
    d = facts.detail
    knobs, ext = default_blocks(facts, None), extents(facts)
    for key in knobs:
        given = params.get(key)
        knobs[key] = given if isinstance(given, int) and given > 0 else knobs[key]
    tunables = params.get("tunables") or {  # the default first, then its neighbours
        key: list(dict.fromkeys([v, max(1, v // 2), min(v * 2, max(ext[key], v))]))
        for key, v in knobs.items()}
    if not params.get("tunables"):  # the pages that fill a step with TOKENS_PER_STEP keys next
        filled = min(ext["pages_per_step"], max(1, TOKENS_PER_STEP // _sizes(facts)["page"]))
        default, *others = tunables["pages_per_step"]
        tunables["pages_per_step"] = list(dict.fromkeys([default, filled, *others]))
    # the table as a 2-D (pages, batch) array: where XLA:TPU keeps it pages-first, a bitcast
    major = 1 if params.get("page_major_table") == 1 else 0  # a tuned parent's layout, carried
    tunables = {**tunables, "page_major_table": [major, 1 - major]}
    pp, ss = knobs["pages_per_step"], knobs["seqs_per_step"]
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    doc = (f"paged decode attention kernel for {task_name}: block table and lengths "
           f"scalar-prefetched, {pp} key/value page(s) of {ss} sequence(s) per grid step "
           "(TUNABLES pages_per_step, seqs_per_step, and page_major_table: the table as a "
           "2-D (pages, batch) array), online softmax in VMEM.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "paged_attention_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%Q%", names[d["q"]]).replace("%K%", names[d["k"]])
            .replace("%V%", names[d["v"]]).replace("%T%", names[d["tables"]])
            .replace("%L%", names[d["lengths"]]).replace("%SCALE%", scale)
            .replace("%PP%", str(pp)).replace("%SS%", str(ss)).replace("%PMT%", str(major))
            .replace("%S%", names[d["starts"]] if d.get("starts") is not None else "None"))
    heads_third = f"PAGES_HEADS_THIRD = {d.get('layout') == 'pshd'}  # pages given as (pages, page, heads, depth)\n"
    return header(doc) + "\n" + tunables_literal(tunables) + "\n" + heads_third + body
