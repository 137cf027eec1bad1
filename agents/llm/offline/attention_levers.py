"""The catalogue's attention levers as spec transformations (`levers.md`, classes: attention).

Each returns the distinct `AttentionSpec`s it can make of the parent's, best guess first, or
`NotApplicable` with the reason this task's kernel has no use for it.
"""

from __future__ import annotations

from agents.llm.offline.attention import (
    AttentionSpec,
    effective,
    geometry,
    has_bias,
    head_choices,
    row_tile,
    vmem_bytes,
)
from agents.llm.offline.common import scoped_vmem
from agents.llm.offline.levers import (
    LeverContext,
    NotApplicable,
    changed,
    deeper_buffers_refused,
    deepest_buffering,
    lever,
    not_applicable,
)

C = ("attention",)


def _fits(spec: AttentionSpec, ctx: LeverContext) -> bool:
    return vmem_bytes(ctx.facts, spec) <= (spec.vmem_limit_bytes or scoped_vmem(ctx.chip)) * 3 // 4



def _blocks(spec: AttentionSpec, ctx: LeverContext, bq: int, bkv: int) -> AttentionSpec:
    g, tile = geometry(ctx.facts), row_tile(ctx.facts)
    bq = max(tile, min(bq, -(-g["q_len"] // tile) * tile)) // tile * tile
    bkv = max(tile, min(bkv, -(-g["kv_len"] // tile) * tile)) // tile * tile
    return changed(spec, block_q=bq, block_kv=bkv)


def _kv_steps(spec: AttentionSpec, ctx: LeverContext) -> int:
    return -(-geometry(ctx.facts)["kv_len"] // effective(ctx.facts, spec)[2])


@lever(C, "block_shape")
def block_shape(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    bq, bkv = spec.block_q, spec.block_kv
    out = [_blocks(spec, ctx, *o) for o in ((bq * 2, bkv), (bq, bkv * 2), (bq // 2, bkv), (bq, bkv // 2))]
    return [s for s in out if effective(ctx.facts, s) != effective(ctx.facts, spec) and _fits(s, ctx)]


@lever(C, "grid_order")
def grid_order(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    g = geometry(ctx.facts)
    hb, bq, _ = effective(ctx.facts, spec)
    if -(-g["q_len"] // bq) == 1 or g["groups"] // hb == 1:
        return NotApplicable("one block along the q or the head axis: the order of the parallel "
                             "loops changes no reuse")
    return [changed(spec, grid_order="qg" if spec.grid_order == "gq" else "gq")]


@lever(C, "head_packing")
def head_packing(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    g = geometry(ctx.facts)
    shared = g["repeat"] > 1  # a block packs query heads of one kv head: they share its k and v
    budget = spec.vmem_limit_bytes or scoped_vmem(ctx.chip)
    return [changed(spec, heads_per_block=h) for h in head_choices(ctx.facts, spec, budget)
            if h in (2, 4, 8) and h != spec.heads_per_block] or NotApplicable(
        f"{g['repeat']} query heads per kv head: no packing that divides them fits VMEM" if shared else
        f"{g['groups']} (batch x head) groups: no packing that divides them fits VMEM")


@lever(C, "reduction_layout")
def reduction_layout(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    refused = _narrow_head_refusal(ctx, "(kv, q) scores", spec.layout == "transposed")
    if refused:
        return refused
    if spec.sub_q > 1:
        return NotApplicable("q sub-tiles slice rows; in the transposed layout q is on the lanes")
    out = _output_holds_acc(changed(spec, layout="transposed"))
    return [out] if _fits(out, ctx) else NotApplicable("the transposed blocks do not fit VMEM")


@lever(C, "lane_dense_layout")
def lane_dense_layout(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    refused = _narrow_head_refusal(ctx, "(head_dim, seq) operand blocks", spec.operands == "transposed")
    if refused:
        return refused
    # seq on the lanes: a narrow head_dim no longer pads them, and XLA:TPU, which keeps such
    # arrays seq-minor, hands them to the kernel as a bitcast instead of a relayout copy
    base = changed(spec, operands="transposed", sub_q=1)
    out = [_output_holds_acc(changed(base, layout=layout)) for layout in ("transposed", "rows")]
    return [s for s in dict.fromkeys(out) if _fits(s, ctx)] or NotApplicable(
        "the (head_dim, seq) blocks do not fit VMEM")


def _narrow_head_refusal(ctx: LeverContext, layout: str, already: bool) -> NotApplicable | None:
    """Why a layout for a narrow head_dim (`layout`) has no use here: the spec has it
    (`already`), or head_dim already fills the lanes; None when it may."""
    depth = geometry(ctx.facts)["depth"]
    if already:
        return NotApplicable(f"the kernel already has {layout}")
    if depth % 128 == 0:
        return NotApplicable(f"head_dim {depth} already fills the lanes; {layout} would only move "
                             "the cross-lane work")
    return None


def _output_holds_acc(spec: AttentionSpec) -> AttentionSpec:
    """The spec, accumulating in scratch where the output block is not the accumulator's shape."""
    fits = (spec.layout == "transposed") == (spec.operands == "transposed")
    return spec if fits or spec.accumulate != "output" else changed(spec, accumulate="scratch")


@lever(C, "transcendentals")
def transcendentals(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    if spec.exp == "exp2":
        return NotApplicable("already exp2 with log2(e) folded into the q scale")
    return [changed(spec, exp="exp2")]


@lever(C, "precision")
def precision(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    isz = geometry(ctx.facts)["itemsize"]
    want = "input" if isz == 2 else "bfloat16"
    if spec.mxu_dtype == want:
        return NotApplicable(f"the MXU already gets {'the inputs' if isz == 2 else 'bf16'} operands")
    return [changed(spec, mxu_dtype=want)]


@lever(C, "accumulator")
def accumulator(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    if spec.kv_in_one_block:
        return NotApplicable("the whole KV is one block: nothing is carried")
    if geometry(ctx.facts)["itemsize"] != 4:
        return NotApplicable("the output is not f32: it cannot hold the running sum")
    if (spec.layout == "transposed") != (spec.operands == "transposed"):
        return NotApplicable("the accumulator (" + ("d, q" if spec.layout == "transposed" else "q, d")
                             + ") does not have the output block's shape")
    return [changed(spec, accumulate="output" if spec.accumulate == "scratch" else "scratch")]


@lever(C, "epilogue_fusion")
def epilogue_fusion(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    return [changed(spec, normalize="reciprocal" if spec.normalize == "divide" else "divide")]


@lever(C, "hoisting")
def hoisting(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    if spec.kv_in_one_block or _kv_steps(spec, ctx) == 1:
        return NotApplicable("one KV step per q block: q is scaled and cast once already")
    out = changed(spec, hoist_q=not spec.hoist_q)
    return [out] if _fits(out, ctx) else NotApplicable("a scaled-q scratch does not fit VMEM")


@lever(C, "buffering")
def buffering(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    refused = deeper_buffers_refused(3)
    if refused:
        return refused
    out = [changed(spec, buffers=b) for b in (3, 4) if b != spec.buffers and b <= deepest_buffering()]
    return [s for s in out if _fits(s, ctx)] or NotApplicable("a deeper k/v pipeline does not fit VMEM")


@lever(C, "single_buffer_invariants")
def single_buffer(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    if spec.single_buffer_q:
        return NotApplicable("q is already single-buffered")
    if _kv_steps(spec, ctx) == 1:
        return NotApplicable("one KV step per q block: q's block moves every step")
    return [changed(spec, single_buffer_q=True)]


@lever(C, "vmem_budget")
def vmem_budget(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    raised = changed(spec, vmem_limit_bytes=ctx.raised_vmem_limit())
    out = [_blocks(raised, ctx, spec.block_q * 2, spec.block_kv * 2),
           changed(_blocks(raised, ctx, spec.block_q, spec.block_kv), heads_per_block=2 * spec.heads_per_block)]
    out = [s for s in out if effective(ctx.facts, s) != effective(ctx.facts, spec)]
    return [s for s in out if _fits(s, ctx)] or NotApplicable("no larger block fits even the raised limit")


@lever(C, "reduction_in_one_block")
def reduction_in_one_block(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    if spec.kv_in_one_block:
        return NotApplicable("the KV axis is already one block")
    if spec.stair_tile:
        return NotApplicable("the causal staircase reads the keys of the diagonal block in "
                             "sub-tiles; with the whole KV in one block every row would compute "
                             "its masked half again")
    out = changed(spec, kv_in_one_block=True, accumulate="scratch", hoist_q=False, sub_q=1,
                  single_buffer_q=False)
    if not _fits(out, ctx):
        out = changed(out, vmem_limit_bytes=ctx.raised_vmem_limit())
    kv_len = geometry(ctx.facts)["kv_len"]
    return [out] if _fits(out, ctx) else NotApplicable(f"a KV length of {kv_len} does not fit one block")


@lever(C, "mxu_alignment")
def mxu_alignment(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    mxu = int(ctx.chip.get("mxu_dim") or ctx.chip.get("mxu_size") or 256)
    out = _blocks(spec, ctx, max(mxu, spec.block_q // mxu * mxu), max(mxu, spec.block_kv // mxu * mxu))
    if effective(ctx.facts, out) == effective(ctx.facts, spec):
        return NotApplicable(f"the q and kv blocks are already multiples of {mxu} (or whole lengths)")
    return [out]


@lever(C, "inner_loop")
def inner_loop(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    hb, bq, _ = effective(ctx.facts, spec)
    lanes = spec.layout == "transposed" or spec.operands == "transposed"
    if spec.kv_in_one_block or lanes or hb > 1:
        return NotApplicable("q sub-tiles are written for one head per block, q on the rows and a "
                             "carried KV state (this spec has " + ", ".join(
                                 w for w, on in (("KV in one block", spec.kv_in_one_block),
                                                 ("q on the lanes", lanes),
                                                 (f"{hb} heads per block", hb > 1)) if on) + ")")
    out = [changed(spec, sub_q=s) for s in (2, 4) if s != spec.sub_q and bq % (s * row_tile(ctx.facts)) == 0]
    return out or NotApplicable(f"a {bq}-row q block has no aligned sub-tiles")


@lever(C, "autotune_space")
def autotune_space(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    if spec.tune_schedule:
        return NotApplicable("heads_per_block and buffers are already TUNABLES")
    return [changed(spec, tune_schedule=True)]


STAIR_TILE = 256
"""The narrowest staircase sub-tile: it spans the lanes of the scores, and a narrower one pads
to the MXU's width."""


@lever(C, "block_skipping")
def block_skipping(spec: AttentionSpec, ctx: LeverContext) -> list[AttentionSpec] | NotApplicable:
    """The class default skips whole KV blocks above the diagonal; this also skips the upper
    half of the diagonal block: square blocks, and q sub-tiles of it that each read only the
    keys up to their last row (a staircase)."""
    if not ctx.facts.detail["causal"]:
        return NotApplicable("no mask: every KV block contributes")
    g = geometry(ctx.facts)
    why = [w for w, on in (("q and kv lengths differ", g["q_len"] != g["kv_len"]),
                           ("a score bias block", has_bias(ctx.facts)),
                           ("the whole KV in one block", spec.kv_in_one_block),
                           ("scores and operands in different layouts", spec.layout != spec.operands))
           if on]
    if why:
        return NotApplicable("KV blocks above the diagonal are already skipped; the diagonal "
                             "block's staircase needs square blocks on the diagonal and one "
                             "layout, and here: " + ", ".join(why))
    _, bq, bkv = effective(ctx.facts, spec)
    out = []
    for block in dict.fromkeys((max(bq, bkv), 2 * max(bq, bkv))):
        if block % STAIR_TILE or block < 2 * STAIR_TILE or block > g["q_len"]:
            continue
        stair = changed(spec, block_q=block, block_kv=block, stair_tile=STAIR_TILE)
        if stair != spec and _fits(stair, ctx):
            out.append(stair)
    return out or NotApplicable(
        f"KV blocks above the diagonal are already skipped, and a {max(bq, bkv)}-long diagonal "
        f"block has no staircase of {STAIR_TILE}-wide sub-tiles")


not_applicable(C, "dimension_semantics", "head groups and q blocks are already parallel; only the KV "
               "axis, which carries the softmax state, is arbitrary")
not_applicable(C, "prologue_fusion", "the softmax scale is already folded into q before the scores; "
               "the reference applies nothing else to q, k or v")
not_applicable(C, "manual_dma", "no code path: this writer uses the BlockSpec pipeline, which fetches "
               "each k/v block one step ahead")
not_applicable(C, "scalar_prefetch", "lengths are static and causal skipping needs no table")
not_applicable(C, "masking", "the KV tail is already masked in the kernel with an iota; inputs are "
               "never padded")
not_applicable(C, "alignment", "blocks are already multiples of the dtype's sublane tile, head_dim whole")
not_applicable(C, "transpose_free", "scores contract q and k on their last axes with dot_general: k is "
               "never transposed")
not_applicable(C, "recompute_vs_store", "scores and probabilities never leave VMEM")
not_applicable(C, "online_reduction", "the class default is already an online softmax (running max "
               "and rescaled sum)")
not_applicable(C, "kernel_fusion", "scores, softmax and the product are already one pallas_call")
