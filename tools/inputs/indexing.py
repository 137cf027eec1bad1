"""What a reference measures its integer inputs against: the extents they index and meet.

A scaled task keeps its structure when its integer inputs (lengths, offsets, page tables)
mean the same thing as at full size. Where they shrink with the sizes, that is the check in
:mod:`tools.inputs.scaling`. Where they are fixed in Python (a serving step's query lengths,
a page table over a fixed pool), they can still hold when every extent they are used
against is kept at full size too. :func:`index_signature` says which extents those are,
from the reference's jaxpr: each integer input taints what is computed from it, and every
operation a tainted value reaches records

* the operand extents it indexes (``gather``, ``dynamic_slice``, ``scatter`` and kin);
* the iota extents and the integer literals it meets (a mask ``iota < length``, a clamp at
  ``tokens - 1``, a division by the page size).

Two configs whose signatures for an input are equal, with that input's values equal, use it
against the same extents: the held entries kept what it indexes. A signature is a multiset,
so an extent that shrank shows even where another one did not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

Signature = dict[int, Counter]


def _shape(var: Any) -> tuple[int, ...]:
    return tuple(getattr(var.aval, "shape", ()))


def _gathered_extents(eqn: Any) -> tuple[int, ...]:
    shape = _shape(eqn.invars[0])
    return tuple(shape[d] for d in eqn.params["dimension_numbers"].start_index_map)


def _scattered_extents(eqn: Any) -> tuple[int, ...]:
    shape = _shape(eqn.invars[0])
    return tuple(shape[d] for d in eqn.params["dimension_numbers"].scatter_dims_to_operand_dims)


INDEX_EXTENTS: dict[str, Callable[[Any], tuple[int, ...]]] = {
    "gather": _gathered_extents,
    **{name: _scattered_extents for name in ("scatter", "scatter-add", "scatter-sub",
                                             "scatter-mul", "scatter-min", "scatter-max")},
}
"""Primitives whose index operand (position 1) addresses the operand extents given."""


def _is_literal(var: Any) -> bool:
    return hasattr(var, "val") and not hasattr(var, "count")


def _integer_literal(var: Any) -> int | None:
    import numpy as np

    if not _is_literal(var):
        return None
    value = np.asarray(var.val)
    return int(value) if value.ndim == 0 and value.dtype.kind in "biu" else None


def _sub_jaxprs(params: dict[str, Any]) -> list[Any]:
    """The jaxprs an equation calls (a ``jit``, a loop body, a branch), open."""
    found: list[Any] = []
    for value in params.values():
        for item in value if isinstance(value, list | tuple) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns") and hasattr(inner, "invars"):
                found.append(inner)
    return found


class _Walk:
    """One pass over a jaxpr: which integer inputs (and which iota extents) each value is
    computed from, and what each input meets."""

    def __init__(self) -> None:
        self.signature: Signature = {}

    def _record(self, sources: frozenset[int], item: tuple[Any, ...]) -> None:
        for source in sources:
            self.signature.setdefault(source, Counter())[item] += 1

    def run(self, jaxpr: Any, taints: Sequence[frozenset[int]],
            iotas: Sequence[frozenset[int]]) -> tuple[list[frozenset[int]], list[frozenset[int]]]:
        taint: dict[Any, frozenset[int]] = {}
        iota: dict[Any, frozenset[int]] = {}
        for var, t, i in zip(jaxpr.invars, taints, iotas, strict=True):
            taint[var], iota[var] = t, i

        def of(var: Any, table: dict[Any, frozenset[int]]) -> frozenset[int]:
            return frozenset() if _is_literal(var) else table.get(var, frozenset())

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            ins_taint = [of(v, taint) for v in eqn.invars]
            ins_iota = [of(v, iota) for v in eqn.invars]
            sources = frozenset().union(*ins_taint)
            extents = frozenset().union(*ins_iota)
            if name == "iota":
                extents = extents | {int(eqn.params["shape"][eqn.params["dimension"]])}
            if name in INDEX_EXTENTS and len(ins_taint) > 1 and ins_taint[1]:
                self._record(ins_taint[1], ("index", INDEX_EXTENTS[name](eqn)))
            if name in ("dynamic_slice", "dynamic_update_slice"):
                first = 1 if name == "dynamic_slice" else 2
                shape = _shape(eqn.invars[0])
                for axis, start in enumerate(ins_taint[first:]):
                    if start and axis < len(shape):
                        self._record(start, ("index", (shape[axis],)))
            if sources:
                for var in eqn.invars:
                    literal = _integer_literal(var)
                    if literal is not None:
                        self._record(sources, ("literal", literal))
                for extent in sorted(extents):
                    self._record(sources, ("iota", extent))
            inner = _sub_jaxprs(eqn.params)
            outs_taint, outs_iota = [sources] * len(eqn.outvars), [extents] * len(eqn.outvars)
            for sub in inner:
                exact = len(sub.invars) == len(eqn.invars) and len(sub.outvars) == len(eqn.outvars)
                sub_taint = ins_taint if exact else [sources] * len(sub.invars)
                sub_iota = ins_iota if exact else [extents] * len(sub.invars)
                got_taint, got_iota = self.run(sub, sub_taint, sub_iota)
                if exact and len(inner) == 1:
                    outs_taint, outs_iota = got_taint, got_iota
            for var, t, i in zip(eqn.outvars, outs_taint, outs_iota, strict=True):
                taint[var], iota[var] = t, i
        return ([of(v, taint) for v in jaxpr.outvars], [of(v, iota) for v in jaxpr.outvars])


def index_signature(fn: Callable[..., Any], specs: Sequence[Any]) -> Signature:
    """For each integer input of ``fn`` (by position among ``specs``, ShapeDtypeStructs or
    arrays), the multiset of extents it indexes and iota extents and integer literals it
    meets. Inputs that meet nothing are absent."""
    import jax
    import jax.numpy as jnp

    closed = jax.make_jaxpr(lambda *args: fn(*args))(*specs)  # a fresh trace: CONFIG may differ
    taints = [frozenset({i}) if jnp.issubdtype(s.dtype, jnp.integer) else frozenset()
              for i, s in enumerate(specs)]
    walk = _Walk()
    walk.run(closed.jaxpr, taints, [frozenset()] * len(specs))
    return walk.signature
