"""Independent axes of a reference, read from its jaxpr: the axes the generic kernel tiles.

An output axis is independent when each of its positions depends only on the same position
of the input axes it comes from: no reduction, contraction, cumulative op, slice, pad,
concatenation or reshape mixes positions along it, and nothing is computed from a position
(an `iota` along it, its size used as a value). Then a block of those input axes gives the
same block of the output, and a grid over blocks is a correct kernel.

Found in three steps, each a plain check on the jaxpr (never on the numbers):
1. for an output axis, walk the equations backwards to the input axes it comes from;
2. trace the reference again with those input axes given a size of their own (a fresh
   symbol, `T0`): a reference that ties them to another axis fails this trace;
3. walk the new jaxpr forwards: every value holding the fresh symbol holds it once, as a
   whole axis, and every equation keeps that axis apart (the rules below).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

TILE_SYMBOLS = ("T0", "T1", "T2")
MAX_TILED = len(TILE_SYMBOLS)

REDUCING = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
            "reduce_xor", "argmax", "argmin"}
ALONG_ONE_AXIS = {"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"}
NEVER_ON_A_TILED_AXIS = {"gather", "scatter", "scatter-add", "scatter_add", "dynamic_slice",
                         "dynamic_update_slice", "sort", "while", "scan", "cond", "custom_linear_solve",
                         "iota", "dim_as_value", "conv_general_dilated", "reduce_window_sum",
                         "reduce_window_max", "reduce_window_min", "reduce_window", "select_and_scatter_add"}


@dataclass(frozen=True)
class Tiling:
    """The tiled axes: their fresh names, the input and output axes they are, the new body."""

    symbols: tuple[str, ...]  # fresh dim names, one per tiled axis
    units: tuple[bool, ...]  # per tiled axis: one position per step (the body traced at size 1)
    origins: tuple[str, ...]  # the task's symbol each one was (its size at every shape)
    in_axes: tuple[tuple[int | None, ...], ...]  # per input, per array axis: the grid axis or None
    out_axes: tuple[tuple[int | None, ...], ...]  # per output, the same
    arg_dims: tuple[tuple[Any, ...], ...]  # the inputs' dims with the fresh names
    out_dims: tuple[tuple[Any, ...], ...]
    body: str  # `_body(*inputs, <dims>)` over the fresh names too
    values: tuple[tuple[tuple[int, ...], int, tuple[int | None, ...], int, int], ...]
    """Per intermediate: full shape, itemsize, grid axis per dim, the equation that makes it
    and the last that reads it (its live range)."""
    rejected: tuple[str, ...] = ()  # the output axes not tiled, each with why
    reduced: bool = False  # the last grid axis is summed over (`generic_summed`)
    partials: tuple[tuple[tuple[Any, ...], str], ...] = ()  # per contraction: dims, dtype
    dots: tuple[tuple[tuple[Any, ...], tuple[Any, ...], bool], ...] = ()
    """Per dot of a summed body: its output's dims, its contracted dims, and whether it runs
    at every step (`_partial`) or once per block of rows (`_finish`); `generic_price` counts
    their MXU work."""


def _literal(v: Any) -> bool:
    return type(v).__name__ == "Literal"


def same_dim(a: Any, b: Any) -> bool:
    """Two dims provably equal (an inconclusive symbolic comparison is not)."""
    try:
        return bool(a == b)
    except Exception:  # an inconclusive symbolic comparison: not provably the same
        return False


def _prod(dims: Sequence[Any]) -> Any:
    return math.prod(dims) if dims else 1


def _backward(eqns: Sequence[Any], start: Any, axis: int) -> dict[Any, int]:
    """Every value the output axis `axis` of `start` comes from, with its axis there."""
    where: dict[Any, int] = {start: axis}
    for eqn in reversed(eqns):
        hits = [(i, where[v]) for i, v in enumerate(eqn.outvars) if v in where]
        if not hits:
            continue
        out_index, out_axis = hits[0]
        for var, in_axis in _operand_axes(eqn, out_index, out_axis):
            where.setdefault(var, in_axis)
    return where


def _operand_axes(eqn: Any, out_index: int, axis: int) -> list[tuple[Any, int]]:
    name, p = eqn.primitive.name, eqn.params
    out = eqn.outvars[out_index].aval.shape
    ins = [v for v in eqn.invars if not _literal(v)]
    if not ins:
        return []
    op = ins[0]
    shape = op.aval.shape
    if name == "broadcast_in_dim":
        dims = tuple(p["broadcast_dimensions"])
        if axis in dims and same_dim(shape[dims.index(axis)], out[axis]):
            return [(op, dims.index(axis))]
        return []
    if name == "transpose":
        return [(op, int(p["permutation"][axis]))]
    if name in REDUCING:
        kept = [i for i in range(len(shape)) if i not in tuple(p["axes"])]
        return [(op, kept[axis])] if axis < len(kept) else []
    if name == "dot_general":
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        lhs, rhs = eqn.invars[0], eqn.invars[1]
        lfree = [i for i in range(len(lhs.aval.shape)) if i not in (*lc, *lb)]
        rfree = [i for i in range(len(rhs.aval.shape)) if i not in (*rc, *rb)]
        if axis < len(lb):
            return [(lhs, int(lb[axis])), (rhs, int(rb[axis]))]
        rest = axis - len(lb)
        return [(lhs, lfree[rest])] if rest < len(lfree) else [(rhs, rfree[rest - len(lfree)])]
    if name == "reshape":
        return [(op, i) for i in range(len(shape))
                if same_dim(shape[i], out[axis]) and same_dim(_prod(shape[:i]), _prod(out[:axis]))][:1]
    if name == "squeeze":
        kept = [i for i in range(len(shape)) if i not in tuple(p["dimensions"])]
        return [(op, kept[axis])]
    return [(v, axis) for v in ins
            if len(v.aval.shape) == len(out) and same_dim(v.aval.shape[axis], out[axis])]


def _names(d: Any, fresh: Sequence[str]) -> list[str]:
    return [s for s in fresh if re.search(rf"\b{s}\b", str(d))]


def _fresh_axes(shape: Sequence[Any], fresh: Sequence[str]) -> dict[str, int] | str:
    """symbol -> its axis in `shape`; a reason when a fresh symbol is not one whole axis."""
    found: dict[str, int] = {}
    for i, d in enumerate(shape):
        for s in _names(d, fresh):
            if str(d) != s:
                return f"the axis is merged with another into {d}"
            if s in found:
                return "the axis meets itself (an outer product along it)"
            found[s] = i
    return found


def forward_check(invars: Sequence[Any], eqns: Sequence[Any], outvars: Sequence[Any],
                  fresh: Sequence[str]) -> str:
    """'' when every equation keeps the fresh axes apart, else why not (names the primitive)."""
    for v in [*invars, *outvars]:
        if not _literal(v) and isinstance(_fresh_axes(v.aval.shape, fresh), str):
            return str(_fresh_axes(v.aval.shape, fresh))
    for eqn in eqns:
        why = eqn_check(eqn, fresh)
        if why:
            return f"{eqn.primitive.name}: {why}"
    for v in outvars:
        held = {} if _literal(v) else _fresh_axes(v.aval.shape, fresh)
        if isinstance(held, dict) and set(held) != set(fresh):
            return "an output does not hold every tiled axis"
    return ""


def eqn_check(eqn: Any, fresh: Sequence[str]) -> str:
    name, p = eqn.primitive.name, eqn.params
    ins = [v for v in eqn.invars if not _literal(v)]
    in_axes = [_fresh_axes(v.aval.shape, fresh) for v in ins]
    out_axes = [_fresh_axes(v.aval.shape, fresh) for v in eqn.outvars]
    for axes in (*in_axes, *out_axes):
        if isinstance(axes, str):
            return axes
    held_in = {s for a in in_axes for s in a}  # type: ignore[union-attr]
    held_out = {s for a in out_axes for s in a}  # type: ignore[union-attr]
    if not held_in and not held_out:
        return ""  # computes nothing along a tiled axis
    if name in NEVER_ON_A_TILED_AXIS:
        return "reads positions along the tiled axis"
    if _names(p, fresh) and name not in ("broadcast_in_dim", "reshape"):
        return "its parameters name the tiled axis' size"
    if held_in - held_out:
        return "drops the tiled axis"
    if held_out - held_in and name != "broadcast_in_dim":
        return "makes a tiled axis from nothing"
    first = in_axes[0] if in_axes else {}
    assert isinstance(first, dict)
    if name in REDUCING and set(first.values()) & set(p["axes"]):
        return "reduces over the tiled axis"
    if name in ALONG_ONE_AXIS and int(p["axis"]) in first.values():
        return "accumulates along the tiled axis"
    if name == "top_k" and len(ins[0].aval.shape) - 1 in first.values():
        return "ranks along the tiled axis"
    if name in ("rev",) and set(first.values()) & set(p["dimensions"]):
        return "reverses the tiled axis"
    if name == "concatenate" and int(p["dimension"]) in {a for ax in in_axes for a in ax.values()}:  # type: ignore[union-attr]
        return "concatenates along the tiled axis"
    if name == "pad":
        for axis in first.values():
            if tuple(p["padding_config"][axis]) != (0, 0, 0):
                return "pads the tiled axis"
    if name == "slice":
        for axis in first.values():
            shape = ins[0].aval.shape
            stride = (p.get("strides") or (1,) * len(shape))[axis]
            if p["start_indices"][axis] != 0 or not same_dim(p["limit_indices"][axis], shape[axis]) or stride != 1:
                return "slices the tiled axis"
    if name == "dot_general":
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        lhs = _fresh_axes(eqn.invars[0].aval.shape, fresh)
        rhs = _fresh_axes(eqn.invars[1].aval.shape, fresh)
        assert isinstance(lhs, dict) and isinstance(rhs, dict)
        if set(lhs.values()) & set(lc) or set(rhs.values()) & set(rc):
            return "contracts over the tiled axis"
        for s in set(lhs) & set(rhs):
            if (lhs[s] in lb) != (rhs[s] in rb) or (lhs[s] in lb and list(lb).index(lhs[s]) != list(rb).index(rhs[s])):
                return "pairs the tiled axis with another"
    if name == "reshape":
        out = eqn.outvars[0].aval.shape
        for s, axis in first.items():
            target = out_axes[0][s]  # type: ignore[index]
            if not same_dim(_prod(ins[0].aval.shape[:axis]), _prod(out[:target])):
                return "moves the tiled axis across others"
    return ""


def shape_at(shape: Sequence[Any], values: dict[str, int]) -> tuple[int, ...]:
    """A shape at the sizes in `values` (each symbolic dim evaluated there)."""
    from agents.llm.offline.jaxpr_source import dim_source

    scope = {"max": max, "min": min, "__builtins__": {}}
    return tuple(int(d) if isinstance(d, int) else int(eval(dim_source(d), scope, dict(values)))  # a dim's names and ints only
                 for d in shape)


def find(trace: Callable[[list[tuple[Any, ...]], bool], Any], arg_dims: Sequence[tuple[Any, ...]],
         out_dims: Sequence[tuple[Any, ...]], flat: tuple[list[Any], list[Any], list[Any], dict[Any, Any]],
         symbols: Sequence[str], values: dict[str, int], pinned: dict[str, int]) -> Tiling | str:
    """The independent axes of the first output (up to `MAX_TILED`, the lane axis only when
    nothing else is), or why none is. `trace(arg_dims, merge)` re-traces the reference over
    dims with fresh names and flattens it (`merge`: dots with several batch dims through one,
    as Mosaic needs; the check reads the unmerged jaxpr, where each batch dim is its own);
    `flat` is the task's flattened jaxpr."""
    try:  # walked back unmerged, where each batch dim of a dot is its own axis
        invars, eqns, outvars, _ = trace([tuple(d) for d in arg_dims], False)
    except Exception:  # the merged trace will do: axes merged there are simply not found
        invars, eqns, outvars, _ = flat
    if not outvars or _literal(outvars[0]):
        return "the reference returns no array"
    reasons: list[str] = []
    found: list[tuple[int, dict[int, int]]] = []
    for axis, d in enumerate(out_dims[0]):
        if not isinstance(d, str) or d in pinned:
            continue
        where = _backward(eqns, outvars[0], axis)
        picked = {i: where[v] for i, v in enumerate(invars) if v in where}
        if not picked:
            continue
        one = _attempt(trace, arg_dims, [picked], symbols)
        if isinstance(one, str):
            reasons.append(f"output axis {axis} ({d}): {one}")
            continue
        found.append((axis, picked))
    if not found:
        return "; ".join(reasons) or "no output axis comes from an input axis"
    lanes = {a for a, _ in found if a == len(out_dims[0]) - 1}
    chosen = [f for f in found if f[0] not in lanes][:MAX_TILED] or found[:1]
    while chosen:
        got = _attempt(trace, arg_dims, [p for _, p in chosen], symbols)
        if not isinstance(got, str):
            origins = [out_dims[0][a] for a, _ in chosen]
            idle = recomputing(got[0][1], got[2], {**values, **{
                s: values[str(o)] for s, o in zip(got[2], origins, strict=True) if str(o) in values}})
            if idle and len(idle) < len(chosen):
                for g in idle:
                    reasons.append(f"output axis {chosen[g][0]} ({origins[g]}): most of the "
                                   "body's intermediate bytes do not run along it, so every "
                                   "block of it would compute them again")
                chosen = [c for g, c in enumerate(chosen) if g not in idle]
                continue
            tiling = _tiling(trace, got, origins, values)
            return tiling if isinstance(tiling, str) else replace(tiling, rejected=tuple(reasons))
        chosen = chosen[:-1]
    return "the independent axes do not tile together"


def recomputing(eqns: Sequence[Any], fresh: Sequence[str], sizes: dict[str, int]) -> list[int]:
    """The tiled axes (by index in `fresh`) along which most of the body's intermediate bytes
    do not run, read from the jaxpr traced with each tiled axis under its fresh name: every
    step along such an axis computes those bytes again (a small bias broadcast along an axis
    of the output, after a matmul and a normalisation over the others)."""
    import numpy as np

    values = [v for e in eqns for v in e.outvars if hasattr(v.aval, "shape")]
    try:
        held = [(math.prod(shape_at(v.aval.shape, sizes)) * np.dtype(v.aval.dtype).itemsize,
                 {str(d) for d in v.aval.shape}) for v in values]
    except (NameError, TypeError, ValueError):  # a size not known here: tile as found
        return []
    total = sum(size for size, _ in held)
    return [g for g, symbol in enumerate(fresh)
            if 2 * sum(size for size, names in held if symbol not in names) > total]


def _attempt(trace: Callable[[list[tuple[Any, ...]], bool], Any], arg_dims: Sequence[tuple[Any, ...]],
             picks: list[dict[int, int]], symbols: Sequence[str]) -> Any:
    fresh = TILE_SYMBOLS[:len(picks)]
    dims = [list(d) for d in arg_dims]
    for s, pick in zip(fresh, picks, strict=True):
        for i, axis in pick.items():
            if not isinstance(dims[i][axis], str) or dims[i][axis] in TILE_SYMBOLS:
                return "its input axes are fixed sizes or already tiled"
            dims[i][axis] = s
    try:
        flat = trace([tuple(d) for d in dims], False)
    except Exception as exc:  # the reference ties the axis to another: not independent
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"the reference ties it to another axis ({first[:100]})"
    why = forward_check(flat[0], flat[1], flat[2], fresh)
    if why:
        return why
    return flat, [tuple(d) for d in dims], fresh, list(symbols)


def _unit(symbol: str, shapes: Sequence[Sequence[Any]]) -> bool:
    """An axis that is never one of an array's last two (a leading axis): a block of one
    position is legal, and the body is traced at size 1 (fewer dims for Mosaic to carry)."""
    return all(str(d) != symbol for shape in shapes for d in shape[-2:])


def _tiling(trace: Callable[[list[tuple[Any, ...]], bool], Any], got: Any, origins: list[Any],
            values: dict[str, int]) -> Tiling | str:

    from agents.llm.offline.jaxpr_source import EmitError, function_source

    (checked_in, _, checked_out, _), arg_dims, fresh, symbols = got
    shapes = [v.aval.shape for v in [*checked_in, *checked_out] if not _literal(v)]
    units = [_unit(s, shapes) for s in fresh]
    body_dims = [tuple(1 if str(d) in fresh and units[fresh.index(str(d))] else d for d in dims)
                 for dims in arg_dims]
    try:
        invars, eqns, outvars, consts = trace(body_dims, True)
    except Exception:  # the reference wants the size symbolic: keep every axis a block
        units = [False] * len(fresh)
        invars, eqns, outvars, consts = trace(list(arg_dims), True)
    try:
        body = function_source("_body", eqns, invars, outvars, [*symbols, *fresh], consts)
    except EmitError as exc:
        return f"the tiled body cannot be written out: {exc}"
    sizes = {**values, **{s: values[o] for s, o in zip(fresh, origins, strict=True)}}

    def axes(shape: Sequence[Any]) -> tuple[int | None, ...]:
        return tuple(fresh.index(str(d)) if str(d) in fresh else None for d in shape)

    def out_dim(d: Any) -> Any:
        return d if isinstance(d, int) else str(d)

    inter = live_values(eqns, outvars, sizes, axes)
    return Tiling(tuple(fresh), tuple(units), tuple(str(o) for o in origins),
                  tuple(axes(v.aval.shape) for v in checked_in),
                  tuple(axes(v.aval.shape) for v in checked_out), tuple(arg_dims),
                  tuple(tuple(out_dim(d) for d in v.aval.shape) for v in checked_out), body, inter)


def live_values(eqns: Sequence[Any], outvars: Sequence[Any], sizes: dict[str, int],
                axes: Callable[[Sequence[Any]], tuple[int | None, ...]]) -> tuple[Any, ...]:
    """Per value an equation makes: (shape at `sizes`, itemsize, grid axis per dim, the
    equation that makes it, the last that reads it; the outputs live to the end)."""
    import numpy as np

    from agents.llm.offline.layout_rules import unwritten

    last = {v: len(eqns) for v in outvars if not _literal(v)}
    for i, e in enumerate(eqns):
        for v in e.invars:
            if not _literal(v):
                last[v] = max(last.get(v, i), i)
    gone, products = unwritten(eqns)
    made = tuple((shape_at(v.aval.shape, sizes), np.dtype(v.aval.dtype).itemsize,
                  axes(v.aval.shape), i, last.get(v, i))
                 for i, e in enumerate(eqns) for v in e.outvars
                 if hasattr(v.aval, "shape") and v not in gone)
    return made + tuple((shape_at(v.aval.shape, sizes), 4, axes(v.aval.shape), i, i)
                        for v, i in products)


def _bool_broadcast(ins: list[Any], params: dict[str, Any]) -> Any:
    """A boolean broadcast through int32 and back (`!= 0`): Mosaic cannot relayout an i1
    vector into the replicated layout a broadcast needs ("Invalid relayout")."""
    import jax.numpy as jnp
    from jax import lax

    (x,) = ins
    if x.dtype != jnp.bool_:
        return lax.broadcast_in_dim_p.bind(x, **params)
    return lax.broadcast_in_dim_p.bind(x.astype(jnp.int32), **params) != 0


def _bool_select(ins: list[Any], params: dict[str, Any]) -> Any:
    """A select between boolean cases through int32 and back, for the same reason."""
    import jax.numpy as jnp
    from jax import lax

    which, *cases = ins
    if cases[0].dtype != jnp.bool_:
        return lax.select_n_p.bind(which, *cases, **params)
    return lax.select_n_p.bind(which, *[c.astype(jnp.int32) for c in cases], **params) != 0


def _plain_batched(e_or_numbers: Any, ranks: tuple[int, int]) -> bool:
    """No batch dims, or the (b, m, k) x (b, k, n) form: batch dims first, one free and one
    contracting dim on each side, the contracting dims last of lhs and first after the batch
    dims of rhs."""
    (lc, rc), (lb, rb) = e_or_numbers
    nb = len(lb)
    if not nb:
        return True
    return (tuple(lb) == tuple(rb) == tuple(range(nb)) and ranks == (nb + 2, nb + 2)
            and tuple(lc) == (nb + 1,) and tuple(rc) == (nb,))


def _canonical_dot(ins: list[Any], params: dict[str, Any]) -> Any:
    """A batched dot in any other form as (b, m, k) x (b, k, n): operands transposed to
    (batch, free, contracting) and (batch, contracting, free), the free and contracting dims
    merged, the output reshaped back. The same values, in the one form the TPU lowering and
    the interpreter's CPU dot both take (XLA:CPU has no other bf16 x bf16 = f32 batched dot)."""
    import math

    from jax import lax

    lhs, rhs = ins
    numbers = params["dimension_numbers"]
    if _plain_batched(numbers, (lhs.ndim, rhs.ndim)):
        return lax.dot_general_p.bind(lhs, rhs, **params)
    (lc, rc), (lb, rb) = numbers
    lfree = [i for i in range(lhs.ndim) if i not in (*lc, *lb)]
    rfree = [i for i in range(rhs.ndim) if i not in (*rc, *rb)]
    batch = [lhs.shape[i] for i in lb]
    m, n = [lhs.shape[i] for i in lfree], [rhs.shape[i] for i in rfree]
    k = math.prod(lhs.shape[i] for i in lc)
    a = lax.transpose(lhs, (*lb, *lfree, *lc)).reshape((*batch, math.prod(m), k))
    b = lax.transpose(rhs, (*rb, *rc, *rfree)).reshape((*batch, k, math.prod(n)))
    nb = len(batch)
    plain = (((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))))
    out = lax.dot_general_p.bind(a, b, **{**params, "dimension_numbers": plain})
    return out.reshape((*batch, *m, *n))


def lowerable(closed: Any) -> Any:
    """`closed` with the forms Mosaic rejects rewritten to the same values: a boolean
    broadcast, and a select between boolean cases, go through int32; a dot's batch dims
    are moved to the front."""
    from agents.llm.offline.windows import rewritten

    def needed(e: Any) -> bool:
        if e.primitive.name == "dot_general":
            return not _plain_batched(e.params["dimension_numbers"],
                                      (len(e.invars[0].aval.shape), len(e.invars[1].aval.shape)))
        return (e.primitive.name in ("broadcast_in_dim", "select_n")
                and str(e.invars[-1].aval.dtype) == "bool")

    if not any(needed(e) for e in flatten_eqns(closed)):
        return closed
    return rewritten(closed, {"broadcast_in_dim": _bool_broadcast, "select_n": _bool_select,
                              "dot_general": _canonical_dot})


def flatten_eqns(closed: Any) -> list[Any]:
    from agents.llm.offline.jaxpr_source import flatten

    return flatten(closed)[1]

