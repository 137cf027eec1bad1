"""The generic class's summed axis: when one block of the independent axes cannot hold
every weight, an input axis no output holds and only dots contract (an MoE's or an MLP's
hidden axis) becomes the last grid axis, accumulated over. Read from the jaxpr traced with
that axis under its own symbol (`REDUCE_SYMBOL`): everything along it must end in the dots
that contract it, and nothing after them may read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agents.llm.offline.generic_axes import (
    Tiling,
    eqn_check,
    forward_check,
    live_values,
    shape_at,
)

REDUCE_SYMBOL = "R0"  # a contracted axis the kernel accumulates over, block by block

# The generated kernel for a summed axis (`generic.render` writes it in place of `_kernel`).
SUMMING_KERNEL = '''

def _summing_kernel(*refs, dims, n_in, n_out):
    """One block of every tiled axis and of the summed one: the dots contracting the summed
    axis add their float32 results into VMEM scratch; its last block finishes the body on
    the sums, as the reference would on the whole axis."""
    ins, outs, sums = refs[:n_in], refs[n_in:n_in + n_out], refs[n_in + n_out:]
    step = pl.program_id(len(_TILED) - 1)

    @pl.when(step == 0)
    def _zero():
        for ref in sums:
            ref[...] = jnp.zeros(ref.shape, ref.dtype)

    values = [ref[...] for ref in ins]
    for ref, part in zip(sums, _partial(*values, **dims), strict=True):
        ref[...] += part

    @pl.when(step == pl.num_programs(len(_TILED) - 1) - 1)
    def _finish_block():
        totals = [ref[...].astype(dtype)
                  for ref, (_, dtype) in zip(sums, _partial_avals(**dims), strict=True)]
        for ref, value in zip(outs, _finish(*values, *totals, **dims), strict=True):
            ref[...] = value.astype(ref.dtype)
'''


def _holds(v: Any, symbol: str) -> bool:
    return type(v).__name__ != "Literal" and hasattr(v.aval, "shape") and any(
        str(d) == symbol for d in v.aval.shape)


def _contracts(eqn: Any, symbol: str) -> bool:
    """A dot_general that contracts `symbol` on both sides, at the same place."""
    if eqn.primitive.name != "dot_general":
        return False
    (lc, rc), _ = eqn.params["dimension_numbers"]
    lhs = [i for i, d in enumerate(eqn.invars[0].aval.shape) if str(d) == symbol]
    rhs = [i for i, d in enumerate(eqn.invars[1].aval.shape) if str(d) == symbol]
    return (len(lhs) == len(rhs) == 1 and lhs[0] in lc and rhs[0] in rc
            and list(lc).index(lhs[0]) == list(rc).index(rhs[0])
            and not _holds(eqn.outvars[0], symbol))


def split_at_contractions(eqns: Sequence[Any], outvars: Sequence[Any], symbol: str
                          ) -> tuple[list[Any], list[Any]] | str:
    """(the equations along `symbol`, the dots that contract it) when everything along it
    ends in those dots and nothing after reads it, else why not: then the kernel can run
    the first part block by block of `symbol`, sum the dots' results, and finish once."""
    cut = [e for e in eqns if _contracts(e, symbol)]
    if not cut:
        return "no dot contracts it"
    cut_ids = {id(e) for e in cut}
    along = [e for e in eqns if id(e) not in cut_ids
             and any(_holds(v, symbol) for v in [*e.invars, *e.outvars])]
    for e in along:
        why = eqn_check(e, [symbol])
        if why:
            return f"{e.primitive.name}: {why}"
    made = {id(v) for e in along for v in e.outvars}
    along_ids = {id(e) for e in along}
    for e in eqns:
        if id(e) not in cut_ids | along_ids and any(id(v) in made for v in e.invars):
            return f"{e.primitive.name} reads a value along it after the contraction"
    if any(id(v) in made or _holds(v, symbol) for v in outvars):
        return "an output holds it"
    return along, cut


def _renamings(tiling: Tiling, values: dict[str, int], pinned: dict[str, int]
               ) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The inputs' dims with one axis renamed `REDUCE_SYMBOL`, largest axis first: every
    position of a symbol no output holds; then, for a symbol that also names other axes (a
    square weight: in_features == out_features, so the tracer named both sides alike), every
    pair of its positions in two different inputs of rank 2 or more, as a dot contracts one
    axis of each operand. The caller refuses a renaming the reference cannot trace, or whose
    axis an output still holds."""
    from itertools import combinations

    fresh = set(tiling.symbols)
    outs = {str(d) for dims in tiling.out_dims for d in dims}
    usable = sorted({d for dims in tiling.arg_dims for d in dims
                     if isinstance(d, str) and d not in pinned and d not in fresh and d in values},
                    key=lambda n: (-values[n], n))
    found: list[tuple[str, list[tuple[Any, ...]]]] = []
    for name in usable:
        if name not in outs:
            found.append((name, [tuple(REDUCE_SYMBOL if d == name else d for d in ds)
                                 for ds in tiling.arg_dims]))
    for name in usable:
        at = [(i, j) for i, ds in enumerate(tiling.arg_dims) for j, d in enumerate(ds)
              if d == name and len(ds) > 1]  # a dot's operands: matrices, not vectors
        if name in outs or len(at) > 2:
            for pair in combinations(at, 2):
                if pair[0][0] == pair[1][0]:  # one axis of each operand
                    continue
                found.append((name, [tuple(REDUCE_SYMBOL if (i, j) in pair else d
                                           for j, d in enumerate(ds))
                                     for i, ds in enumerate(tiling.arg_dims)]))
    return found


def _named(shape: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(d if isinstance(d, int) else str(d) for d in shape)


def _dot_work(eqn: Any, every_step: bool) -> tuple[tuple[Any, ...], tuple[Any, ...], bool]:
    """A dot's output dims and contracted dims (sizes, or expressions of the symbols), and
    when it runs."""
    from agents.llm.offline.jaxpr_source import dim_source

    def sources(shape: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(d if isinstance(d, int) else dim_source(d) for d in shape)

    (contracted, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    return sources(eqn.outvars[0].aval.shape), sources([lhs[i] for i in contracted]), every_step


def _dots_work(eqns: Sequence[Any], partial: set[int]
               ) -> tuple[tuple[tuple[Any, ...], tuple[Any, ...], bool], ...]:
    """Every dot's work (`_dot_work`), or none when a dim has no plain Python form: then the
    price counts the contracting dots alone, as before the others were known."""
    from agents.llm.offline.jaxpr_source import EmitError

    try:
        return tuple(_dot_work(e, id(e) in partial) for e in eqns
                     if e.primitive.name == "dot_general")
    except EmitError:
        return ()


def with_reduction(trace: Callable[[list[tuple[Any, ...]], bool], Any], tiling: Tiling,
                   symbols: Sequence[str], values: dict[str, int],
                   pinned: dict[str, int]) -> Tiling | str:
    """`tiling` with one more grid axis, last and accumulated over: an input axis that no
    output holds and that only dots contract (an MoE's or an MLP's hidden axis), so its
    weights stream through VMEM a block at a time instead of all at once. The body splits
    in two: `_partial` (everything along that axis, up to the dots, whose float32 results
    the kernel sums) and `_finish` (the rest, once, on the sums). Tried in the order of
    `_renamings`; a string says why none will do."""
    import numpy as np

    from agents.llm.offline.jaxpr_source import EmitError, function_source

    fresh = list(tiling.symbols)
    reasons = []
    for name, dims in _renamings(tiling, values, pinned):
        try:
            checked_in, checked, checked_out, _ = trace(dims, False)
        except Exception as exc:  # tied to another axis
            reasons.append(f"{name}: the reference ties it to another axis ({str(exc)[:80]})")
            continue
        why = forward_check(checked_in, checked, checked_out, fresh)
        split = why or split_at_contractions(checked, checked_out, REDUCE_SYMBOL)
        if isinstance(split, str):
            reasons.append(f"{name}: {split}")
            continue
        body_dims = [tuple(1 if str(d) in fresh and tiling.units[fresh.index(str(d))] else d
                           for d in ds) for ds in dims]
        try:
            invars, eqns, outvars, consts = trace(body_dims, True)
        except Exception as exc:
            reasons.append(f"{name}: the body does not trace with unit blocks ({str(exc)[:80]})")
            continue
        split = split_at_contractions(eqns, outvars, REDUCE_SYMBOL)
        if isinstance(split, str):
            reasons.append(f"{name}: {split}")
            continue
        along, cut = split
        sums = [e.outvars[0] for e in cut]
        gone = {id(e) for e in [*along, *cut]}
        named = [*symbols, *fresh, REDUCE_SYMBOL]
        try:
            partial = function_source("_partial", eqns, invars, sums, named, consts, wide=sums)
            finish = function_source("_finish", [e for e in eqns if id(e) not in gone],
                                     [*invars, *sums], outvars, named, consts)
        except EmitError as exc:
            reasons.append(f"{name}: the split body cannot be written out: {exc}")
            continue
        grid = [*fresh, REDUCE_SYMBOL]
        sizes = {**values, **{s: values[o] for s, o in zip(fresh, tiling.origins, strict=True)},
                 REDUCE_SYMBOL: values[name]}

        def axes(shape: Sequence[Any], grid: list[str] = grid) -> tuple[int | None, ...]:
            return tuple(grid.index(str(d)) if str(d) in grid else None for d in shape)

        inter = live_values(eqns, outvars, sizes, axes)
        inter += tuple((shape_at(v.aval.shape, sizes), 4, axes(v.aval.shape), 0, len(eqns))
                       for v in sums)  # the float32 accumulators, live throughout
        return replace(
            tiling, symbols=(*fresh, REDUCE_SYMBOL), units=(*tiling.units, False),
            origins=(*tiling.origins, name),
            in_axes=tuple(axes(v.aval.shape) for v in checked_in),
            out_axes=tuple(axes(v.aval.shape) for v in checked_out),
            arg_dims=tuple(dims), body=partial + "\n\n\n" + finish, values=inter,
            reduced=True,
            partials=tuple((_named(v.aval.shape), str(np.dtype(v.aval.dtype))) for v in sums),
            dots=_dots_work(eqns, gone))
    return "; ".join(dict.fromkeys(reasons)) or "no input axis is contracted away"

