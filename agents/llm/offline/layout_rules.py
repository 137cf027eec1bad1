"""Equations written so a kernel body's values keep a layout Mosaic handles in VMEM.

A reference traced as XLA sees it can ask a kernel body for layouts that cost a TPU core far
more than they cost XLA, which folds them away. Measured on JAXBench's dense MoE (10p,
`--scale 0.125`), whose weighting `einsum("bsne,bsn->bse")` reads a `bsne` product kept in
`nes` order: as traced, the body needed 218 MB of VMEM at 128 rows per block (the TPU
compiler's count), the kernel was held to 32 rows and priced 0.30x of XLA; written as below
it runs 256 rows per block, 2.67x (simulated, verified).

- **A transpose of a reshape that only adds unit axes** (`x.reshape(n, e, 1, s)` then
  `transpose(..., (2, 3, 0, 1))`) moves the unit axes into the tiled minor positions, where
  each pads to a full tile. It is written as the transpose of `x` itself, then the reshape.
- **A reshape that only drops the unit axes of a transpose** is written as the reshape
  first (from before the reshape that added them, where one did), then the transpose.
- **A batched dot whose right side has no free axis but unit ones** (a per-batch
  matrix-vector product, `bsne,bsn->bse`) uses the MXU for one column per batch element.
  It is written as a multiply and a sum on the vector unit in float32 (the MXU's
  accumulation type), in the layout of the left operand before any transpose that made it:
  that transpose is not done, and only the sum, smaller by the contracted axes, is
  reordered. A reshape that drops the dot's unit free axes reads the sum itself.

Each reads an operand's producer (`Emitter.producers`); a bypassed producer nothing else
reads is not written (`function_source`), and the body's VMEM count leaves it out
(`unwritten`). Only kernel bodies are written this way; code outside a kernel is XLA's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore


def _is_one(d: Any) -> bool:
    return isinstance(d, int) and d == 1


def _made(v: Any, producers: dict[Any, Any]) -> Any:
    """The equation in this body that made `v` (None: an input or a literal)."""
    return None if isinstance(v, jcore.Literal) else producers.get(v)


def _adds_units(eqn: Any) -> bool:
    """A reshape whose output is its input with unit axes added (and no other change)."""
    if eqn is None or eqn.primitive.name != "reshape" or eqn.params.get("dimensions"):
        return False
    source, out = eqn.invars[0], eqn.outvars[0].aval.shape
    return not isinstance(source, jcore.Literal) and (
        [str(d) for d in out if not _is_one(d)] == [str(d) for d in source.aval.shape])


def _source(v: Any, producers: dict[Any, Any]) -> tuple[Any, tuple[int, ...]]:
    """(the value `v` transposes, its permutation) when a transpose in this body made `v`,
    else (`v`, the identity)."""
    eqn = _made(v, producers)
    if eqn is not None and eqn.primitive.name == "transpose":
        return eqn.invars[0], tuple(int(p) for p in eqn.params["permutation"])
    return v, tuple(range(len(v.aval.shape)))


def _shape_source(shape: Any) -> str:
    from agents.llm.offline.jaxpr_source import bare_dim

    items = [bare_dim(d) for d in shape]
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _unit_source(eqn: Any, producers: dict[Any, Any]) -> tuple[Any, list[int]] | None:
    """(x, the permutation of x's own axes) for a transpose of `x.reshape(...)` that only
    added unit axes to `x`, else None."""
    operand = eqn.invars[0]
    made = _made(operand, producers)
    if not _adds_units(made):
        return None
    source = made.invars[0]
    expanded = operand.aval.shape
    kept = [i for i, d in enumerate(expanded) if not _is_one(d)]
    if any(_is_one(d) for d in source.aval.shape) or len(kept) == len(expanded):
        return None
    return source, [kept.index(p) for p in eqn.params["permutation"] if p in kept]


def unit_reshape_transpose(eqn: Any, emitter: Any) -> str | None:
    """`jnp.transpose(x, perm).reshape(shape)` for a transpose of `x.reshape(...)` that only
    added unit axes to `x`; None when the transpose is not that."""
    found = _unit_source(eqn, emitter.producers)
    if found is None:
        return None
    source, perm = found
    moved = emitter.name(source)
    if perm != list(range(len(perm))):
        moved = f"jnp.transpose({moved}, {tuple(perm)})"
    return f"{moved}.reshape({_shape_source(eqn.outvars[0].aval.shape)})"


def _unit_drop(eqn: Any, producers: dict[Any, Any]) -> tuple[Any, list[int]] | None:
    """(x, the permutation of x's axes other than its unit ones) for a reshape that only
    drops the unit axes of `jnp.transpose(x, ...)`, else None."""
    made = _made(eqn.invars[0], producers)
    if (made is None or made.primitive.name != "transpose" or eqn.params.get("dimensions")
            or isinstance(made.invars[0], jcore.Literal)):
        return None
    source = made.invars[0]
    perm = [int(p) for p in made.params["permutation"]]
    kept = [i for i, d in enumerate(source.aval.shape) if not _is_one(d)]
    moved = [p for p in perm if p in kept]
    if (len(kept) == len(perm)
            or [str(source.aval.shape[p]) for p in moved] != [str(d) for d in eqn.outvars[0].aval.shape]):
        return None
    added = _made(source, producers)  # the unit axes were added by a reshape: start before it
    if _adds_units(added) and not any(_is_one(d) for d in added.invars[0].aval.shape):
        source = added.invars[0]
    return source, [kept.index(p) for p in moved]


def transpose_unit_reshape(eqn: Any, emitter: Any) -> str | None:
    """`jnp.transpose(x.reshape(...), perm)` for a reshape that only drops the unit axes of a
    transpose of `x`: the unit axes go before the transpose, not through it."""
    found = _unit_drop(eqn, emitter.producers)
    if found is None:
        return None
    source, perm = found
    squeezed = [d for d in source.aval.shape if not _is_one(d)]
    moved = emitter.name(source)
    if len(squeezed) != len(source.aval.shape):
        moved = f"{moved}.reshape({_shape_source(squeezed)})"
    return f"jnp.transpose({moved}, {tuple(perm)})" if perm != list(range(len(perm))) else moved


class _MatVec:
    """How `matvec_on_vpu` writes one dot: the left operand's source and permutation, the
    dot's axes, and where each of the right operand's kept axes lands in the source."""

    def __init__(self, eqn: Any, producers: dict[Any, Any]) -> None:
        lhs, rhs = eqn.invars
        (self.lc, self.rc), (self.lb, self.rb) = (
            tuple(tuple(int(a) for a in side) for side in pair)
            for pair in eqn.params["dimension_numbers"])
        self.r_free = [d for d in range(len(rhs.aval.shape)) if d not in self.rc and d not in self.rb]
        self.l_free = [d for d in range(len(lhs.aval.shape)) if d not in self.lc and d not in self.lb]
        self.source, self.perm = _source(lhs, producers)
        self.target = ({r: self.perm[self.lb[k]] for k, r in enumerate(self.rb)}
                       | {r: self.perm[self.lc[k]] for k, r in enumerate(self.rc)})


def _matvec(eqn: Any, producers: dict[Any, Any]) -> _MatVec | None:
    """A batched dot of floats of at most 32 bits whose right side has only unit free axes."""
    if eqn.primitive.name != "dot_general" or any(isinstance(v, jcore.Literal) for v in eqn.invars):
        return None
    if not all(jnp.issubdtype(v.aval.dtype, jnp.floating) and np.dtype(v.aval.dtype).itemsize <= 4
               for v in (*eqn.invars, eqn.outvars[0])):
        return None
    found = _MatVec(eqn, producers)
    rhs = eqn.invars[1]
    if not found.lb or not all(_is_one(rhs.aval.shape[d]) for d in found.r_free):
        return None
    return found


def _matvec_sum(eqn: Any, found: _MatVec, emitter: Any) -> str:
    """The dot's value without its unit free axes: (batch..., left free...)."""
    from agents.llm.offline.jaxpr_source import readable_dtype

    rhs = eqn.invars[1]
    rank = len(found.source.aval.shape)
    rhs_axes = sorted(found.target, key=found.target.get)
    ordered = emitter.name(rhs)
    if rhs_axes + found.r_free != list(range(len(rhs.aval.shape))):
        ordered = f"jnp.transpose({ordered}, {tuple(rhs_axes + found.r_free)})"
    spread: list[Any] = [1] * rank
    for r in rhs_axes:
        spread[found.target[r]] = rhs.aval.shape[r]
    aligned = f"{ordered}.reshape({_shape_source(spread)})"
    summed = sorted(found.perm[d] for d in found.lc)
    left = [a for a in range(rank) if a not in summed]
    wanted = [left.index(found.perm[d]) for d in (*found.lb, *found.l_free)]
    out = (f"jnp.sum({emitter.name(found.source)}.astype(jnp.float32) * "
           f"{aligned}.astype(jnp.float32), axis={tuple(summed)})")
    if wanted != list(range(len(wanted))):
        out = f"jnp.transpose({out}, {tuple(wanted)})"
    out_var = eqn.outvars[0]
    dtype = "jnp.float32" if out_var in emitter.wide else readable_dtype(out_var.aval.dtype)
    return f"{out}.astype({dtype})"


def matvec_on_vpu(eqn: Any, emitter: Any) -> str | None:
    """A batched dot whose right side has only unit free axes, as a float32 multiply and sum
    in the layout of the left operand's source (module doc); None when it is not one."""
    found = _matvec(eqn, emitter.producers)
    if found is None:
        return None
    value = _matvec_sum(eqn, found, emitter)
    if not found.r_free:
        return value
    return f"{value}.reshape({_shape_source(eqn.outvars[0].aval.shape)})"


def _squeezed_matvec(eqn: Any, producers: dict[Any, Any]) -> tuple[Any, _MatVec] | None:
    """(the dot, how it is written) for a reshape that only drops the unit free axes of a
    dot written on the vector unit."""
    operand = eqn.invars[0]
    made = _made(operand, producers)
    found = _matvec(made, producers) if made is not None else None
    if found is None or not found.r_free or eqn.params.get("dimensions"):
        return None
    shape = operand.aval.shape
    kept = shape[:len(shape) - len(found.r_free)]
    if [str(d) for d in kept] != [str(d) for d in eqn.outvars[0].aval.shape]:
        return None
    return made, found


def unit_free_reshape(eqn: Any, emitter: Any) -> str | None:
    """A reshape that only drops unit axes: of a transpose (`transpose_unit_reshape`), or the
    unit free axes of a dot written on the vector unit (its sum, never expanded)."""
    squeezed = _squeezed_matvec(eqn, emitter.producers)
    if squeezed is not None:
        return _matvec_sum(*squeezed, emitter)
    return transpose_unit_reshape(eqn, emitter)


def unwritten(eqns: Sequence[Any]) -> tuple[set[Any], list[tuple[Any, int]]]:
    """For a VMEM count of a kernel body: the values these rules leave unmade (a unit-axis
    reshape read only by the transposes written without it, a transpose read only by the
    reshapes that drop its unit axes or as the left side of a dot written on the vector
    unit, such a dot read only by reshapes that drop its unit free axes), and the float32
    products those dots make in their place, with the index of the equation making each."""
    producers = {v: e for e in eqns for v in e.outvars}
    readers: dict[Any, list[bool]] = {}
    products: list[tuple[Any, int]] = []
    for i, e in enumerate(eqns):
        unit = ((e.primitive.name == "transpose" and _unit_source(e, producers) is not None)
                or (e.primitive.name == "reshape" and (
                    _unit_drop(e, producers) is not None
                    or _squeezed_matvec(e, producers) is not None)))
        matvec = _matvec(e, producers)
        if matvec is not None:
            products.append((matvec.source, i))
        for k, v in enumerate(e.invars):
            if not isinstance(v, jcore.Literal):
                skipped = unit or (matvec is not None and k == 0 and matvec.source is not v)
                readers.setdefault(v, []).append(skipped)
    gone = {v for v, skipped in readers.items() if all(skipped) and v in producers}
    return gone, products
