"""The catalogue's matmul levers as spec transformations (`levers.md`, classes: matmul).

Each returns the distinct `MatmulSpec`s it can make of the parent's, best guess first, or
`NotApplicable` with the reason this task's kernel has no use for it.
"""

from __future__ import annotations

from agents.llm.offline.common import LANES, scoped_vmem
from agents.llm.offline.levers import (
    LeverContext,
    NotApplicable,
    changed,
    deeper_buffers_refused,
    deepest_buffering,
    lever,
    not_applicable,
)
from agents.llm.offline.matmul import MatmulSpec, _mkn, effective, fit_k, row_tile, vmem_bytes
from agents.llm.offline.matmul_blocks import MAX_TILE_ELEMENTS

C = ("matmul_epilogue",)


def _limit(spec: MatmulSpec, ctx: LeverContext) -> int:
    return spec.vmem_limit_bytes or scoped_vmem(ctx.chip)


def _fits(spec: MatmulSpec, ctx: LeverContext) -> bool:
    """Within 3/4 of the VMEM limit, and a tile the compiler handles in its time limit."""
    bm, bn, _ = effective(ctx.facts, spec)
    return vmem_bytes(ctx.facts, spec) <= _limit(spec, ctx) * 3 // 4 and bm * bn <= MAX_TILE_ELEMENTS



def _blocks(spec: MatmulSpec, ctx: LeverContext, bm: int, bn: int, bk: int) -> MatmulSpec:
    m, k, n = _mkn(ctx.facts)
    tile = row_tile(ctx.facts)
    bm = max(tile, min(bm, -(-m // tile) * tile)) // tile * tile
    bn = max(LANES, min(bn, -(-n // LANES) * LANES)) // LANES * LANES
    return changed(spec, block_m=bm, block_n=bn, block_k=fit_k(max(LANES, bk), k))


@lever(C, "block_shape")
def block_shape(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    bm, bn, bk = spec.block_m, spec.block_n, spec.block_k
    options = [(bm * 2, bn, bk), (bm, bn * 2, bk), (bm, bn, bk * 2), (bm // 2, bn // 2, bk), (bm, bn, bk // 2)]
    out = [_blocks(spec, ctx, *o) for o in options]
    return [s for s in out if effective(ctx.facts, s) != effective(ctx.facts, spec) and _fits(s, ctx)]


@lever(C, "grid_order")
def grid_order(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    m, _, n = _mkn(ctx.facts)
    bm, bn, _ = effective(ctx.facts, spec)
    if -(-m // bm) == 1 or -(-n // bn) == 1:
        return NotApplicable(f"one block along {'M' if -(-m // bm) == 1 else 'N'} at the tuning point: "
                             "the order of the (i, j) loops changes no reuse")
    return [changed(spec, grid_order="nm" if spec.grid_order == "mn" else "mn")]


@lever(C, "accumulator")
def accumulator(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    if spec.k_in_one_block:
        return NotApplicable("the whole K is one block: there is no carried sum")
    if str(ctx.facts.outs[0][1]) != "float32":
        return NotApplicable(f"the output is {ctx.facts.outs[0][1]}: summing in it would round every step")
    return [changed(spec, accumulate="output" if spec.accumulate == "scratch" else "scratch")]


@lever(C, "epilogue_fusion")
def epilogue_fusion(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    if not ctx.facts.detail["epilogue_args"] and not any(
            o not in ("broadcast_in_dim", "dim_as_value", "convert_element_type")
            for o in ctx.facts.detail.get("epilogue_ops", [])):
        return NotApplicable("the reference has no epilogue after the product")
    if ctx.facts.detail["dot_dtype"] == "float32":
        return NotApplicable("the epilogue is already fused and already runs on the f32 tile")
    return [changed(spec, epilogue_dtype="float32" if spec.epilogue_dtype == "dot" else "dot")]


@lever(C, "buffering")
def buffering(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    refused = deeper_buffers_refused(3)
    if refused:
        return refused
    out = [changed(spec, buffers=b) for b in (3, 4) if b != spec.buffers and b <= deepest_buffering()]
    out = [s for s in out if _fits(s, ctx)]
    return out or NotApplicable("a deeper a/b pipeline does not fit the VMEM limit")


@lever(C, "single_buffer_invariants")
def single_buffer(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    _m, k, n = _mkn(ctx.facts)
    _bm, bn, bk = effective(ctx.facts, spec)
    want = []
    if bk == k and bn == n:
        want.append("b")
    if ctx.facts.detail["epilogue_args"] and bn == n:
        want.append("epilogue")
    new = tuple(dict.fromkeys(spec.single_buffer + tuple(want)))
    if new == spec.single_buffer:
        return NotApplicable(f"no operand keeps its block at the tuning point: b's ({bk}x{bn}) moves along "
                             f"K or N (K={k}, N={n}); the epilogue operands move along N")
    return [changed(spec, single_buffer=new)]


def _shrink_to_fit(spec: MatmulSpec, ctx: LeverContext, *, rows_only: bool) -> MatmulSpec | None:
    """`spec` under the scoped limit, else the raised one, halving block_m (and block_n,
    unless `rows_only`) until its blocks fit; None when even the smallest do not."""
    if not _fits(spec, ctx):
        spec = changed(spec, vmem_limit_bytes=ctx.raised_vmem_limit())
    tile = row_tile(ctx.facts)
    while not _fits(spec, ctx):
        bm, bn = spec.block_m, spec.block_n
        if rows_only or bm >= bn:
            bm //= 2
        else:
            bn //= 2
        if bm < tile * 16 or bn < LANES:
            return None
        spec = changed(spec, block_m=bm, block_n=bn)
    return spec


@lever(C, "resident_operands")
def resident(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    _m, k, n = _mkn(ctx.facts)
    out = _shrink_to_fit(changed(spec, block_k=k, block_n=max(LANES, -(-n // LANES) * LANES),
                                 single_buffer=tuple(dict.fromkeys((*spec.single_buffer, "b")))),
                         ctx, rows_only=True)
    if out is None:
        return NotApplicable(f"the whole b ({k}x{n}) does not fit VMEM next to the other blocks")
    return [out]


@lever(C, "precision")
def precision(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    dtypes = {str(ctx.facts.args[ctx.facts.detail[s]].dtype) for s in ("a", "b")}
    if dtypes <= {"bfloat16"}:
        return NotApplicable("a and b are bf16 already: the MXU takes them as given, f32 accumulation")
    return [changed(spec, mxu_dtype="bfloat16" if spec.mxu_dtype == "input" else "input")]


@lever(C, "vmem_budget")
def vmem_budget(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    raised = changed(spec, vmem_limit_bytes=ctx.raised_vmem_limit())
    out = [_blocks(raised, ctx, spec.block_m * 2, spec.block_n * 2, spec.block_k),
           _blocks(raised, ctx, spec.block_m, spec.block_n, spec.block_k * 4)]
    return ([s for s in dict.fromkeys(out) if _fits(s, ctx) and s != raised]
            or NotApplicable("no larger tile fits even the raised limit"))


@lever(C, "reduction_in_one_block")
def reduction_in_one_block(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    if spec.k_in_one_block:
        return NotApplicable("K is already one block")
    _, k, _ = _mkn(ctx.facts)
    out = _shrink_to_fit(changed(spec, k_in_one_block=True, block_k=k, sub_m=1, accumulate="scratch"),
                         ctx, rows_only=False)
    return [out] if out is not None else NotApplicable(f"K={k} in one block does not fit VMEM")


@lever(C, "mxu_alignment")
def mxu_alignment(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    mxu = int(ctx.chip.get("mxu_dim") or ctx.chip.get("mxu_size") or 256)
    out = _blocks(spec, ctx, max(mxu, spec.block_m // mxu * mxu), max(mxu, spec.block_n // mxu * mxu),
                  max(mxu, spec.block_k // mxu * mxu))
    if effective(ctx.facts, out) == effective(ctx.facts, spec):
        return NotApplicable(f"the tiles are already multiples of the {mxu}-wide MXU (or whole dims)")
    return [out]


@lever(C, "inner_loop")
def inner_loop(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    if spec.k_in_one_block:
        return NotApplicable("with K in one block the epilogue runs on the whole tile; sub-tiles "
                             "would split it (no code path)")
    bm = effective(ctx.facts, spec)[0]
    out = [changed(spec, sub_m=s) for s in (2, 4) if s != spec.sub_m and bm % (s * row_tile(ctx.facts)) == 0]
    return out or NotApplicable(f"a {bm}-row block has no aligned sub-tiles")


@lever(C, "autotune_space")
def autotune_space(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    if spec.tune_schedule:
        return NotApplicable("buffers and sub_m are already TUNABLES")
    return [changed(spec, tune_schedule=True)]


@lever(C, "alignment")
def alignment(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    out = _blocks(spec, ctx, spec.block_m, spec.block_n, spec.block_k)
    if out == spec:
        return NotApplicable(f"blocks are already on the ({row_tile(ctx.facts)}, 128) tile")
    return [out]


@lever(C, "masking")
def masking(spec: MatmulSpec, ctx: LeverContext) -> list[MatmulSpec] | NotApplicable:
    return NotApplicable("K blocks always divide K (a K tail would pollute the sum) and M/N tails are "
                         "dropped on write: no block needs a mask")


not_applicable(C, "dimension_semantics", "(i, j) are already parallel and only K, which carries the sum, "
               "is arbitrary")
not_applicable(C, "prologue_fusion", "the reference applies nothing to a or b before the product")
not_applicable(C, "manual_dma", "no code path: this writer uses the BlockSpec pipeline, which already "
               "fetches each (i, k) and (k, j) block one step ahead")
not_applicable(C, "scalar_prefetch", "a dense GEMM has no data-dependent block indices")
not_applicable(C, "block_skipping", "the product is dense: no block is excluded by a mask")
not_applicable(C, "transpose_free", "b is contracted on its leading axis by jnp.dot: no operand is transposed")
not_applicable(C, "head_packing", "a 2-D GEMM has no heads or batch axis to pack")
not_applicable(C, "kernel_fusion", "the product and its epilogue are already one pallas_call")
not_applicable(C, "hoisting", "no per-step invariant: the epilogue operands are read once, at the last K step")
