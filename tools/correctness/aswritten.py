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
Calls (``jit``, custom derivatives, remat) are inlined (`tools.jaxpreval`) so their casts
round too; control flow (scan, while, cond) runs as one computation each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tools.jaxpreval import evaluate


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


def _bound(eqn: Any, values: list[Any]) -> Any:
    """One primitive on concrete arrays: its own computation, so its rounding is kept."""
    return eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(eqn.params))


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
        return evaluate(closed.jaxpr, closed.consts, flat, _bound)

    return run, sorted(set(casts))
