"""The catalogue's generic-class levers as spec transformations (`levers.md`, classes:
generic).

Each returns the distinct `GenericSpec`s it can make of the parent's, or `NotApplicable`
with the reason this task's kernel has no use for it.
"""

from __future__ import annotations

from agents.llm.offline.common import scoped_vmem
from agents.llm.offline.generic import (
    KNOBS,
    GenericSpec,
    _blocks,
    axis_names,
    block_vmem,
    sizes,
    spec_vmem,
)
from agents.llm.offline.generic_fold import fold, why_not
from agents.llm.offline.generic_lanes import lanes_knob
from agents.llm.offline.levers import LeverContext, NotApplicable, changed, lever, not_applicable

C = ("generic",)


@lever(C, "block_shape")
def block_shape(spec: GenericSpec, ctx: LeverContext) -> list[GenericSpec] | NotApplicable:
    facts = ctx.facts
    blocks = _blocks(facts, spec)
    limit = spec.vmem_limit_bytes or scoped_vmem(ctx.chip)
    out = []
    for g in range(len(blocks)):
        for factor in (2, 0.5):
            moved = list(blocks)
            moved[g] = int(blocks[g] * factor)
            candidate = changed(spec, **{KNOBS[g]: moved[g]})
            legal = _blocks(facts, candidate)
            if legal != blocks and block_vmem(facts, legal, spec.narrow_lanes) <= limit:
                out.append(changed(spec, **{KNOBS[g]: legal[g]}))
    return out or NotApplicable("no other block of a tiled axis is legal and fits VMEM")


@lever(C, "vmem_budget")
def vmem_budget(spec: GenericSpec, ctx: LeverContext) -> list[GenericSpec] | NotApplicable:
    if spec.vmem_limit_bytes:
        return NotApplicable("the VMEM limit is already raised")
    raised = ctx.raised_vmem_limit()
    blocks = _blocks(ctx.facts, spec)
    bigger = [min(b * 2, s) for b, s in zip(blocks, sizes(ctx.facts), strict=False)]
    grown = changed(spec, vmem_limit_bytes=raised, **dict(zip(KNOBS, bigger, strict=False)))
    if _blocks(ctx.facts, grown) == blocks:
        return NotApplicable("every tiled axis is already one block")
    if block_vmem(ctx.facts, _blocks(ctx.facts, grown), spec.narrow_lanes) > raised:
        return NotApplicable("blocks twice as large do not fit even the raised limit")
    return [grown]


@lever(C, "lane_dense_layout")
def lane_dense_layout(spec: GenericSpec, ctx: LeverContext) -> list[GenericSpec] | NotApplicable:
    """Arrays narrower than the lanes as (..., width, rows) blocks: their rows fill the lanes,
    and XLA:TPU hands them over as bitcasts instead of relayout copies (`narrow_swaps`)."""
    if spec.narrow_lanes:
        return NotApplicable("the narrow arrays already go as (..., width, rows) blocks")
    if not lanes_knob(ctx.facts):
        return NotApplicable("no array is narrower than the lanes over an axis of 128 or more")
    out = changed(spec, narrow_lanes=True)
    limit = spec.vmem_limit_bytes or scoped_vmem(ctx.chip)
    return [out] if spec_vmem(ctx.facts, out) <= limit else NotApplicable(
        "the transposed blocks and their values in VMEM do not fit")


@lever(C, "flatten_leading_axes")
def flatten_leading_axes(spec: GenericSpec, ctx: LeverContext) -> list[GenericSpec] | NotApplicable:
    """The class default already folds a leading axis into the rows where it can
    (`generic_fold`); the answer says which, or why not."""
    folded = fold(ctx.facts)
    if folded is None:
        return NotApplicable(why_not(ctx.facts))
    return NotApplicable(f"the leading axis is already folded into the rows: {axis_names(ctx.facts)[folded[1]]} "
                         f"is one axis of {sizes(ctx.facts)[folded[1]]} rows, tiled by block_{folded[1]}")


not_applicable(C, "dimension_semantics", "every grid axis is a tiled independent axis, already parallel")
not_applicable(C, "grid_order", "the tiled axes are independent: no block is reused across steps")
not_applicable(C, "single_buffer_invariants", "a block that never moves is already single-buffered")
not_applicable(C, "kernel_fusion", "the whole reference is already one kernel")
not_applicable(C, "multiple_outputs", "every output of the reference is already written by the one kernel")
not_applicable(C, "autotune_space", "the tiled axes' blocks are already TUNABLES")
not_applicable(C, "precision", "the body is the reference's own program: its dtypes are kept")
not_applicable(C, "transpose_free", "the body is the reference's own program: its dots are kept as written")
