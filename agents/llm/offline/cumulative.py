"""Cumulative sums: as bookkeeping a kernel class already does its own way, or as a matmul.

A grouped matmul written with `jnp.cumsum(group_sizes)` for each group's first row and a
`lax.scan` over the groups (masked fixed-size dynamic slices, as JAXBench's megablox
reference does) computes `lax.ragged_dot`: the `grouped_matmul` kernel finds the same first
rows with a short scalar loop over the scalar-prefetched sizes (a carried sequential scan in
SMEM), so the cumsum never has to run on the vector units. Recognised by its numbers, on the
tuning inputs and again with every group half as large (rows past the groups stay zero), so a
reference that only agrees for full groups is not taken. The float64 model is compared with
the reference within its output dtype's rounding (a bf16 output is good to 2**-8).

Any other floating-point `cumsum` (Mosaic has no rule for it) is rewritten before the jaxpr
is classified into a triangular matmul on the MXU: the axis moved last, times the 0/1 matrix
U[j, i] = (j <= i) (>= for a reverse cumsum) built from iotas, at full precision with f32
accumulation, and moved back. Integer cumsums (group offsets) are left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.llm.offline.jaxpr_source import flatten
from agents.llm.offline.windows import rewritten

RTOL, ATOL = 2e-3, 2e-4  # as `patterns`, widened to the output dtype's own rounding


def _ragged_dot(lhs: np.ndarray, rhs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for g, size in enumerate(sizes.tolist()):
        out[start:start + size] = lhs[start:start + size].astype(np.float64) @ rhs[g].astype(np.float64)
        start += size
    return out


def _agrees(reference: Any, inputs: tuple[Any, ...]) -> bool:
    import jax
    import jax.numpy as jnp

    outs = jax.tree.leaves(reference(*inputs))
    if len(outs) != 1 or not jnp.issubdtype(outs[0].dtype, jnp.floating):
        return False
    want = np.asarray(outs[0], np.float64)
    lhs, rhs, sizes = (np.asarray(x) for x in inputs)
    got = _ragged_dot(lhs, rhs, sizes)
    rounding = float(jnp.finfo(outs[0].dtype).eps)
    scale = float(np.max(np.abs(got))) or 1.0
    return got.shape == want.shape and bool(np.allclose(
        got, want, rtol=max(RTOL, 2 * rounding), atol=max(ATOL, 2 * rounding * scale)))


def match_grouped_offsets(reference: Any, inputs: tuple[Any, ...],
                          primitives: set[str]) -> dict[str, Any] | None:
    """`grouped_matmul`'s detail when a cumsum-and-scan reference computes a ragged dot of
    lhs (M, K), rhs (G, K, N) and integer group sizes (G,)."""
    if "cumsum" not in primitives or "ragged_dot_general" in primitives or len(inputs) != 3:
        return None
    lhs, rhs, sizes = inputs
    if (lhs.ndim != 2 or rhs.ndim != 3 or sizes.ndim != 1 or rhs.shape[0] != sizes.shape[0]
            or rhs.shape[1] != lhs.shape[1] or not np.issubdtype(np.dtype(sizes.dtype), np.integer)):
        return None
    if not _agrees(reference, inputs) or not _agrees(reference, (lhs, rhs, sizes // 2)):
        return None
    return {"lhs": 0, "rhs": 1, "group_sizes": 2}


def _triangular(x: Any, params: dict[str, Any]) -> Any:
    import jax.numpy as jnp
    from jax import lax

    axis = params["axis"]
    moved = jnp.moveaxis(x, axis, -1)
    size = moved.shape[-1]
    rows = lax.broadcasted_iota(jnp.int32, (size, size), 0)
    cols = lax.broadcasted_iota(jnp.int32, (size, size), 1)
    upper = ((rows >= cols) if params["reverse"] else (rows <= cols)).astype(jnp.float32)
    summed = lax.dot_general(moved.astype(jnp.float32), upper, (((moved.ndim - 1,), (0,)), ((), ())),
                             precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    return jnp.moveaxis(summed.astype(x.dtype), -1, axis)


def without_cumsums(closed: Any) -> Any | None:
    """`closed` with every floating-point cumsum as a triangular matmul; None when it has none
    (or an integer one, which stays for `match_grouped_offsets`)."""
    _, eqns, _, _ = flatten(closed)
    sums = [e for e in eqns if e.primitive.name == "cumsum"]
    if not sums or not all(np.issubdtype(np.dtype(e.invars[0].aval.dtype), np.floating) for e in sums):
        return None
    return rewritten(closed, {"cumsum": lambda ins, params: _triangular(ins[0], params)})
