"""The catalogue's elementwise / rowwise / row-independent levers as spec transformations.

Each returns the distinct `RowsSpec`s it can make of the parent's, best guess first, or
`NotApplicable` with the reason this task's kernel has no use for it.
"""

from __future__ import annotations

from agents.llm.offline import topk_source
from agents.llm.offline.common import scoped_vmem
from agents.llm.offline.jaxpr_readable import has_float_division
from agents.llm.offline.levers import (
    LeverContext,
    NotApplicable,
    changed,
    deeper_buffers_refused,
    deepest_buffering,
    lever,
    not_applicable,
)
from agents.llm.offline.rows import RowsSpec, narrow_arrays, row_align, row_bytes

C = ("elementwise", "rowwise", "rows_generic")


def _rows(ctx: LeverContext) -> int:
    return ctx.facts.dim_values[ctx.facts.detail["row"]]


def _whole_bytes(ctx: LeverContext) -> int:
    return sum(a.nbytes for a, r in zip(ctx.facts.args, ctx.facts.detail["row_inputs"], strict=True) if not r)


def _effective(spec: RowsSpec, ctx: LeverContext) -> int:
    lanes = 128 if spec.narrow_transposed else 1  # rows on the lanes: whole 128s
    return min(-(-spec.block_rows // lanes) * lanes, _rows(ctx))


def _vmem(spec: RowsSpec, ctx: LeverContext) -> int:
    br = _effective(spec, ctx)
    return (max(spec.buffers, 2) * br * row_bytes(ctx.facts)
            + (1 if spec.single_buffer_whole else 2) * _whole_bytes(ctx))


def _fits(spec: RowsSpec, ctx: LeverContext) -> bool:
    return _vmem(spec, ctx) <= (spec.vmem_limit_bytes or scoped_vmem(ctx.chip)) // 2



def _sized(spec: RowsSpec, ctx: LeverContext, rows: int) -> RowsSpec:
    align = row_align(ctx.facts)
    top = -(-_rows(ctx) // align) * align
    return changed(spec, block_rows=max(align, min(rows, top) // align * align))


@lever(C, "block_shape")
def block_shape(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    br = spec.block_rows
    out = [_sized(spec, ctx, r) for r in (br * 2, br // 2, br * 4, br // 4)]
    return [s for s in out if _effective(s, ctx) != _effective(spec, ctx) and _fits(s, ctx)]


@lever(C, "buffering")
def buffering(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    refused = deeper_buffers_refused(3)
    if refused:
        return refused
    out = [changed(spec, buffers=b) for b in (3, 4) if b != spec.buffers and b <= deepest_buffering()]
    return [s for s in out if _fits(s, ctx)] or NotApplicable("a deeper row pipeline does not fit VMEM")


@lever(C, "single_buffer_invariants")
def single_buffer(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    if not _whole_bytes(ctx):
        return NotApplicable("every input has a row axis: no block stays put")
    if spec.single_buffer_whole:
        return NotApplicable("the inputs without a row axis are already single-buffered")
    return [changed(spec, single_buffer_whole=True)]


@lever(C, "vmem_budget")
def vmem_budget(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    raised = changed(spec, vmem_limit_bytes=ctx.raised_vmem_limit())
    out = [_sized(raised, ctx, spec.block_rows * 4), _sized(raised, ctx, spec.block_rows * 2)]
    out = [s for s in out if _effective(s, ctx) > _effective(spec, ctx)]
    return [s for s in out if _fits(s, ctx)] or NotApplicable("no larger block fits even the raised limit")


@lever(C, "inner_loop")
def inner_loop(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    br, align = _effective(spec, ctx), row_align(ctx.facts)
    if spec.narrow_transposed:
        return NotApplicable("rows are on the lanes of the (width, rows) blocks: no row sub-tiles")
    out = [changed(spec, sub_rows=s) for s in (2, 4) if s != spec.sub_rows and br % (s * align) == 0]
    return out or NotApplicable(f"a {br}-row block has no sub-tiles of whole {align}-row tiles")


@lever(C, "transcendentals")
def transcendentals(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    if not has_float_division(ctx.facts.body_source or ""):
        return NotApplicable("the body has no division; each transcendental it has (tanh, logistic, "
                             "rsqrt, exp) is already a single EUP op")
    if spec.reciprocal_div:
        return NotApplicable("divisions are already one reciprocal and a multiply")
    return [changed(spec, reciprocal_div=True)]


@lever(C, "autotune_space")
def autotune_space(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    if spec.tune_schedule:
        return NotApplicable("buffers and sub_rows are already TUNABLES")
    if spec.narrow_transposed:
        return NotApplicable("the (width, rows) kernel has no row sub-tiles to tune")
    return [changed(spec, tune_schedule=True)]


@lever(C, "reduction_layout")
def reduction_layout(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    """A top-k's layout and grouping: the tournament with rows along lanes over groups of 8,
    16 or 32 columns, or k rounds of max along the row (the body's other reductions are the
    reference's own)."""
    body = ctx.facts.body_source or ""
    if not topk_source.has_top_k(body):
        return NotApplicable("the reductions are the reference's own; only a top-k has a code path "
                             "that re-lays it out")
    current = topk_source.group_of(body) if spec.topk_group is None else spec.topk_group
    groups = [g for g in (*sorted(topk_source.GROUPS, key=lambda g: abs(g - 16)), 0) if g != current]
    return [changed(spec, topk_group=g) for g in groups]


@lever(C, "lane_dense_layout")
def lane_dense(spec: RowsSpec, ctx: LeverContext) -> list[RowsSpec] | NotApplicable:
    """Row arrays narrower than the lanes as (width, rows) blocks: their rows fill the lanes,
    and XLA:TPU, which keeps such arrays rows-minor, hands them over as bitcasts."""
    if spec.narrow_transposed:
        return NotApplicable("the narrow row arrays are already (width, rows) blocks")
    ins, outs = narrow_arrays(ctx.facts)
    if not any(ins) and not any(outs):
        widths = {a.shape[-1] for a in ctx.facts.args if len(a.shape) >= 2}
        return NotApplicable(f"no 2-D row array is narrower than 128 lanes (last axes "
                             f"{', '.join(map(str, sorted(widths))) or 'none'})")
    out = _sized(changed(spec, narrow_transposed=True, sub_rows=1, tune_schedule=False), ctx,
                 -(-spec.block_rows // 128) * 128)
    return [out] if _fits(out, ctx) else NotApplicable("128-row blocks do not fit VMEM")


_ONE_KERNEL = "the reference's whole jaxpr already runs inside the one kernel"
not_applicable(C, "dimension_semantics", "the only grid axis (row blocks) is already parallel")
not_applicable(C, "grid_order", "one grid axis: nothing to reorder")
not_applicable(C, "prologue_fusion", _ONE_KERNEL)
not_applicable(C, "epilogue_fusion", _ONE_KERNEL)
not_applicable(C, "kernel_fusion", _ONE_KERNEL)
not_applicable(C, "recompute_vs_store", "no intermediate goes to HBM: " + _ONE_KERNEL)
not_applicable(C, "multiple_outputs", "all of the reference's outputs come from the one kernel already")
not_applicable(C, "masking", "the last block's extra rows are computed and dropped on write; rows are "
               "independent, so no mask is needed")
not_applicable(C, "alignment", "blocks are already multiples of the row tile for the dtypes")
not_applicable(C, "flatten_leading_axes", "no code path: the body's reductions name the axes, so merging "
               "axes into rows would change them")
not_applicable(C, "precision", "elementwise math runs in the reference's own dtypes")
not_applicable(C, "hoisting", "inputs without a row axis are fetched once (constant index map); no "
               "per-step invariant is left in the body")
not_applicable(C, "resident_operands", "inputs without a row axis already have a constant index map: "
               "one copy for the whole grid")
not_applicable(C, "accumulator", "each row's reductions finish inside its block: nothing is carried")
not_applicable(C, "online_reduction", "whole rows per block: every reduction is one pass already")
not_applicable(C, "reduction_in_one_block", "whole rows per block: the reduction axis is never split")
not_applicable(C, "manual_dma", "no code path: the BlockSpec pipeline fetches each row block one step ahead")
not_applicable(C, "scalar_prefetch", "rows are independent and dense: no data-dependent block indices")
