"""The reference run as its program states it: one primitive at a time, every cast rounding.

XLA on the host may compile a narrowing cast away. A float32 value rounded to bfloat16 and
then fed to a dot can stay float32 there: the CPU keeps the dot in float32 and folds the
round trip. The jitted reference is then more precise than the program it states, and a
kernel that rounds where the program says (as a TPU's bfloat16 MXU operands do) is held to
a floor and a ceiling no faithful implementation meets: JAXBench's RetNet retention casts
its normalised scores to bfloat16 before the value matmul, and at the large-magnitude probe
a kernel that keeps that cast was 7043 elements outside a ceiling the jitted reference met.

Where the reference narrows a float before using it again, the suite also runs it here,
each primitive its own computation, and holds candidates to the larger error of the two.
Calls (``jit``, custom derivatives, remat) are inlined so their casts round too; control
flow (scan, while, cond) runs as one computation each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# Primitives whose body is inlined rather than compiled as one computation.
_CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "custom_jvp_call",
                    "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "checkpoint"})


def _float_bits(dtype: Any) -> int | None:
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating) or dtype.name.startswith(("bfloat", "float")):
        return dtype.itemsize * 8
    return None


def _open(jaxpr: Any) -> Any:
    return getattr(jaxpr, "jaxpr", jaxpr)


def narrowing_casts(jaxpr: Any) -> list[str]:
    """Each cast of a float to a narrower float whose result another equation reads, as
    ``"float32->bfloat16"`` (in sub-programs too)."""
    from jax.extend import core

    found: list[str] = []
    read = {id(v) for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, core.Var)}
    for eqn in jaxpr.eqns:
        for sub in core.jaxprs_in_params(eqn.params):
            found.extend(narrowing_casts(_open(sub)))
        if eqn.primitive.name != "convert_element_type":
            continue
        source, target = eqn.invars[0].aval.dtype, eqn.outvars[0].aval.dtype
        wide, narrow = _float_bits(source), _float_bits(target)
        if wide and narrow and narrow < wide and id(eqn.outvars[0]) in read:
            found.append(f"{np.dtype(source).name}->{np.dtype(target).name}")
    return found


def _inner(eqn: Any) -> Any | None:
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if key in eqn.params:
            return eqn.params[key]
    return None


def _evaluate(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    from jax.extend import core

    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, core.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, args, strict=True):
        env[v] = x
    for eqn in jaxpr.eqns:
        values = [read(v) for v in eqn.invars]
        inner = _inner(eqn) if eqn.primitive.name in _CALLS else None
        if inner is not None:
            outs = _evaluate(_open(inner), getattr(inner, "consts", ()), values)
        else:
            result = eqn.primitive.bind(*values, **eqn.params)
            outs = list(result) if eqn.primitive.multiple_results else [result]
        for v, x in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, core.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def as_written(reference: Callable[..., Any],
               inputs: Sequence[Any]) -> tuple[Callable[..., list[Any]], list[str]] | None:
    """``reference`` run primitive by primitive, with the narrowing casts that call for it;
    None where the reference narrows no float it reads again (the jitted run is faithful)."""
    import jax

    closed = jax.make_jaxpr(reference)(*inputs)
    casts = narrowing_casts(closed.jaxpr)
    if not casts:
        return None

    def run(*args: Any) -> list[Any]:
        flat = jax.tree.leaves(args)
        return _evaluate(closed.jaxpr, closed.consts, flat)

    return run, sorted(set(casts))
