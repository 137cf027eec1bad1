"""A kernel body per shape, for references that fix some sizes in Python.

A reference may compute with a dimension in Python (`x.reshape(-1, groups, size // groups)`,
`jnp.ones((S, S))`, `D ** -0.5`): tracing it with that dimension symbolic fails, so the
dimension is traced at one concrete size (it is "pinned"), and a body traced there is wrong
wherever the dimension takes another size. Here the reference is traced again at every shape
of the task, each time with the pinned dimensions at that shape's sizes and the others still
symbolic, and `_body` dispatches on the pinned sizes: the kernel runs the body traced for the
sizes it is called with, and refuses sizes it has no body for. The output dims are read from
the output shapes at every shape, so they stay expressions of the free dimensions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.llm.offline.jaxpr_source import EmitError, flatten, function_source


@dataclass(frozen=True)
class PerShape:
    """The dispatching `_body` source and the outputs' dims over the free dimensions."""

    source: str
    outs: list[tuple[tuple[Any, ...], str]]
    keys: list[tuple[int, ...]]  # the pinned sizes of each body, in `pinned` order
    pinned: tuple[str, ...] = ()  # the dims each body is traced at (the rest stay symbolic)


def _sizes_at(arg_dims: Sequence[tuple[Any, ...]], shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
    return {d: size for dims, shape in zip(arg_dims, shapes, strict=True)
            for d, size in zip(dims, shape, strict=True) if isinstance(d, str)}


def _out_dims(out_shapes: list[list[tuple[int, ...]]], sizes: list[dict[str, int]]
              ) -> list[tuple[Any, ...]] | str:
    """Per output, per axis: the symbol whose sizes it follows at every shape, else its one
    constant size; a reason when an axis follows neither."""
    symbols = sizes[0].keys()
    outs = []
    for index, shape in enumerate(out_shapes[0]):
        dims: list[Any] = []
        for axis in range(len(shape)):
            seq = [case[index][axis] for case in out_shapes]
            named = next((s for s in symbols if [v[s] for v in sizes] == seq), None)
            if named is None and len(set(seq)) > 1:
                return f"output {index} axis {axis} takes sizes {seq} that follow no input axis"
            dims.append(named if named is not None and len(set(seq)) > 1 else seq[0])
        outs.append(tuple(dims))
    return outs


def _split_helpers(source: str, fn_name: str) -> tuple[list[str], str]:
    """(helper definitions, the function itself) of an emitted body."""
    head, _, fn = source.partition(f"def {fn_name}(")
    helpers = [h.strip("\n") for h in re.split(r"\n(?=def )", head) if h.strip()]
    return helpers, f"def {fn_name}(" + fn


def bodies(references: Sequence[Callable[..., Any]], arg_dims: Sequence[tuple[Any, ...]],
           shapes: Sequence[Sequence[tuple[int, ...]]], symbols: Sequence[str],
           pinned: Sequence[str], trace: Callable[[Callable[..., Any], int, dict[str, int]], Any],
           out_shapes: list[list[tuple[int, ...]]], out_dtypes: Sequence[str]) -> PerShape | str:
    """One body per distinct set of pinned sizes among the task's shapes (`references[i]` is
    the reference bound to shape i; `trace(reference, i, pinned sizes)` its closed jaxpr), or
    the reason none can be written."""
    sizes = [_sizes_at(arg_dims, case) for case in shapes]
    outs = _out_dims(out_shapes, sizes)
    if isinstance(outs, str):
        return outs
    helpers: list[str] = []
    functions: list[str] = []
    keys: list[tuple[int, ...]] = []
    for index, reference in enumerate(references):
        key = tuple(sizes[index][s] for s in pinned)
        if key in keys:
            continue
        try:
            closed = trace(reference, index, {s: sizes[index][s] for s in pinned})
        except Exception as exc:  # this shape traces differently: no body for it
            return f"shape {index} does not trace with {', '.join(pinned)} pinned ({exc})"[:300]
        invars, eqns, outvars, consts = flatten(closed)
        try:
            source = function_source(f"_body_{len(keys)}", eqns, invars, outvars, symbols, consts)
        except EmitError as exc:
            return f"shape {index}'s body cannot be written out: {exc}"
        found, fn = _split_helpers(source, f"_body_{len(keys)}")
        helpers += [h for h in found if h not in helpers]
        functions.append(fn)
        keys.append(key)
    table = ", ".join(f"{key!r}: _body_{i}" for i, key in enumerate(keys))
    dispatch = [
        "_PINNED = " + repr(tuple(pinned)) + "  # sizes the reference fixes in Python",
        f"_BODIES = {{{table}}}",
        "",
        "",
        "def _body(*args, **dims):",
        '    """The body traced at the pinned sizes of this call (one per shape of the task)."""',
        "    key = tuple(dims[name] for name in _PINNED)",
        "    if key not in _BODIES:",
        '        raise ValueError(f"no body traced for {dict(zip(_PINNED, key))}; traced: "',
        '                         f"{sorted(_BODIES)}")',
        "    return _BODIES[key](*args, **dims)",
    ]
    source = "\n\n\n".join([*helpers, *functions]) + "\n\n\n" + "\n".join(dispatch)
    return PerShape(source, [(d, t) for d, t in zip(outs, out_dtypes, strict=True)], keys,
                    tuple(pinned))
